"""``grpo-bench sample``: sample a world model for one prompt, save a GIF and a PNG strip, score each video.

The GIF shows the n videos side by side, upscaled with nearest-neighbour so the pixels stay
visible; the PNG strip has one row per video and one column per frame. Scores come from the
exact oracle and, when its weights are shipped, the learned judge (the training reward).
"""

from __future__ import annotations

import json
from pathlib import Path

import imageio.v3 as iio
import numpy as np
import torch
from rich.console import Console
from rich.table import Table
from torch import Tensor

from grpo_bench.atomic import atomic_write_text
from grpo_bench.errors import UserError

UPSCALE = 8  # 16x16 videos become 128x128 images
GAP = 2  # background pixels between videos / frames (before upscaling)
GIF_FRAME_S = 0.15


def to_uint8(videos: Tensor) -> np.ndarray:
    """Tensor[B, 3, F, H, W] in [-1, 1] -> uint8 array [B, F, H, W, 3]."""
    v = ((videos.detach().float().clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)
    return v.permute(0, 2, 3, 4, 1).cpu().numpy()


def _tile(images: list[np.ndarray], axis: int) -> np.ndarray:
    """Concatenate [H, W, 3] images along axis 1 (side by side) or 0 (stacked) with a dark gap."""
    h, w, _ = images[0].shape
    gap = np.zeros((h, GAP, 3) if axis == 1 else (GAP, w, 3), dtype=np.uint8)
    parts: list[np.ndarray] = []
    for i, im in enumerate(images):
        parts += [gap, im] if i else [im]
    return np.concatenate(parts, axis=axis)


def _upscale(image: np.ndarray) -> np.ndarray:
    return image.repeat(UPSCALE, axis=0).repeat(UPSCALE, axis=1)


def write_gif(videos: Tensor, path: Path) -> None:
    """Animated GIF of all videos side by side (looping)."""
    v = to_uint8(videos)  # [B, F, H, W, 3]
    frames = [_upscale(_tile(list(v[:, t]), axis=1)) for t in range(v.shape[1])]
    path.parent.mkdir(parents=True, exist_ok=True)
    iio.imwrite(path, np.stack(frames), extension=".gif", duration=int(GIF_FRAME_S * 1000), loop=0)


def write_strip(videos: Tensor, path: Path) -> None:
    """PNG: one row per video, one column per frame."""
    v = to_uint8(videos)
    rows = [_tile(list(video), axis=1) for video in v]
    path.parent.mkdir(parents=True, exist_ok=True)
    iio.imwrite(path, _upscale(_tile(rows, axis=0)), extension=".png")


def judge_scores(videos: Tensor, prompts: list[str]) -> tuple[dict[str, Tensor] | None, str | None]:
    """(scores, None) from the shipped judge, or (None, why not) when it is not available."""
    try:
        from grpo_bench.rewards import load

        judge = load("world_judge")
    except (ImportError, AttributeError, UserError, FileNotFoundError) as exc:
        return None, f"judge not available ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__}); oracle only"
    with torch.no_grad():
        return judge(videos, prompts), None


def run_sample(
    prompt: str,
    n: int = 4,
    steps: int = 20,
    shift: float = 3.0,
    kernel: str = "ode",
    noise_level: float = 0.0,
    guidance: float = 1.0,
    checkpoint: Path | None = None,
    seed: int = 0,
    out: Path = Path("sample.gif"),
    json_path: Path | None = None,
    console: Console | None = None,
) -> dict:
    """Sample ``n`` videos of ``prompt``; write ``out`` (GIF) and ``out``.png; print and return the scores."""
    from grpo_bench.core.sampling import sample
    from grpo_bench.core.schedule import sigmas
    from grpo_bench.core.sde import make_kernel
    from grpo_bench.models import load
    from grpo_bench.world.oracle import oracle
    from grpo_bench.world.vocab import parse

    console = console or Console()
    parse(prompt)  # an unknown word is a UserError listing the vocabulary, before any work
    if n < 1:
        raise UserError(f"--n must be >= 1, got {n}")
    out = Path(out)
    if out.suffix.lower() != ".gif":
        raise UserError(f"--out must name a .gif file, got {out}")
    k = make_kernel(kernel, noise_level)
    sig = sigmas(steps, shift)
    model = load("world", path=checkpoint) if checkpoint is not None else load("world")
    g = torch.Generator().manual_seed(seed)
    texts = [prompt] * n
    noise = torch.randn(n, *model.latent_shape, generator=g)
    videos = model.decode(sample(model, texts, noise, sig, k, guidance=guidance, generator=g))

    strip = out.with_suffix(".png")
    write_gif(videos, out)
    write_strip(videos, strip)
    orc = oracle(videos, texts)
    judge, note = judge_scores(videos, texts)

    oracle_keys = ("vq", "mq", "ta", "manifold", "color_ok", "shape_ok", "direction_ok", "correct")
    rows = []
    for i in range(n):
        row = {"index": i, "oracle": {k2: round(float(orc[k2][i]), 4) for k2 in oracle_keys}}
        if judge is not None:
            row["judge"] = {k2: round(float(v[i]), 4) for k2, v in judge.items()}
        rows.append(row)
    # Short headers so the table fits a terminal: oracle columns plain, judge columns prefixed "j.".
    short = {"manifold": "dist", "color_ok": "colour", "shape_ok": "shape", "direction_ok": "dir", "correct": "ok"}
    table = Table(
        title=f"{prompt!r}: {n} videos, {steps} {kernel} steps, guidance {guidance}",
        caption="oracle vq/mq/ta in [0, 1], dist = manifold distance, colour/shape/dir/ok = match (1) or not (0); "
        "j.* = judge (z-scores)",
    )
    table.add_column("#", justify="right")
    for k2 in oracle_keys:
        table.add_column(short.get(k2, k2), justify="right")
    judge_keys = sorted(judge) if judge is not None else []
    for k2 in judge_keys:
        table.add_column(f"j.{k2}", justify="right")
    for row in rows:
        cells = [f"{row['oracle'][k2]:.2f}" for k2 in oracle_keys] + [f"{row['judge'][k2]:+.2f}" for k2 in judge_keys]
        table.add_row(str(row["index"]), *cells)
    console.print(table)
    if note:
        console.print(note, highlight=False)
    console.print(f"wrote {out} and {strip}", highlight=False)

    result = {
        "prompt": prompt, "n": n, "steps": steps, "shift": shift, "kernel": kernel, "noise_level": noise_level,
        "guidance": guidance, "seed": seed, "checkpoint": str(checkpoint) if checkpoint else "shipped world base",
        "gif": str(out), "png": str(strip), "videos": rows, "note": note,
    }
    if json_path is not None:
        atomic_write_text(json_path, json.dumps(result, indent=2) + "\n")
    return result
