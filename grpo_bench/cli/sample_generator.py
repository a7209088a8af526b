"""``grpo-bench sample --model NAME``: a diffusers generator (an image model's stills, a video model's
clips) for one prompt, through the harness's sampler; an image model's stills go to one PNG grid, a video
model's clips to a GIF, each with a labelled PNG strip, scored by ``--reward`` when one is named.

The world model's sampler (``grpo_bench.cli.sample``) scores with the world's oracle and judge; a real model
has no oracle, so its scores are the named reward's (weights on disk, nothing downloaded).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.table import Table

from grpo_bench.atomic import atomic_write_text, strict_json
from grpo_bench.errors import UserError


def check_model_out(model: str, reward: str | None, out: Path) -> str:
    """The model's kind ('image' or 'video'), with ``--out`` and ``--reward`` checked against it before any
    model is built: stills go to a .png, clips to a .gif; a reward must score what the model makes."""
    from grpo_bench import models
    from grpo_bench.config.run import from_dict

    kind = models.modality(model)
    if kind is None and model not in models.names():
        raise UserError(f"--model {model!r}: not a registered model, a local pipeline folder or a cached hub id")
    kind = kind or "video"
    want = ".png" if kind == "image" else ".gif"
    if out.suffix.lower() != want:
        raise UserError(f"--out must name a {want} file for the {kind}s of --model {model}, got {out}")
    if reward is not None:
        from_dict({"model": model, "reward": reward}, where="grpo-bench sample: ")  # the modality check
    return kind


def run_model_sample(model_name: str, prompt: str, n: int, steps: int, shift: float, kernel: Any, guidance: float,
                     seed: int, out: Path, reward: str | None = None, json_path: Path | None = None,
                     console: Console | None = None, loaded: tuple[Any, str] | None = None) -> dict[str, Any]:
    """Sample ``n`` stills (or clips) of ``prompt`` from a registered model; write them and a strip. ``loaded``:
    (model, what was loaded) of a trained policy (``sample.load_policy``) instead of the base."""
    from grpo_bench import media, models, rewards
    from grpo_bench.core.sampling import sample
    from grpo_bench.core.schedule import sigmas

    console = console or Console()
    kind = check_model_out(model_name, reward, out)
    model, source = loaded or (models.load(model_name, **({"frames": 1} if kind == "image" else {})), model_name)
    g = torch.Generator().manual_seed(seed)
    noise = torch.randn(n, *model.latent_shape, generator=g)
    texts = [prompt] * n
    with torch.no_grad():
        videos = model.decode(sample(model, texts, noise, sigmas(steps, shift), kernel, guidance=guidance, generator=g))
    (media.write_png if kind == "image" else media.write_gif)(videos, out, columns=n)
    scores: dict[str, torch.Tensor] = {}
    if reward is not None:
        scores = {k: v.float().cpu() for k, v in rewards.load(reward, device="cpu")(videos, texts).items()}
    labels = [f"#{i}" + "".join(f"  {k} {float(v[i]):+.3f}" for k, v in scores.items()) for i in range(n)]
    strip = out.with_name(out.stem + "_strip.png") if kind == "image" else out.with_suffix(".png")
    media.labelled_strip(videos, labels, strip, title=f"{prompt!r} ({source})")
    table = Table(title=f"{prompt!r}: {n} {kind}s of {model_name}, {steps} steps, shift {shift:g}, guidance {guidance}")
    table.add_column("#", justify="right")
    for k in scores:
        table.add_column(k, justify="right")
    for i in range(n):
        table.add_row(str(i), *(f"{float(v[i]):+.4f}" for v in scores.values()))
    console.print(table)
    console.print(f"wrote {out} and {strip}", highlight=False)
    result = {"prompt": prompt, "model": model_name, "n": n, "steps": steps, "shift": shift, "guidance": guidance,
              "seed": seed, "out": str(out), "strip": str(strip), "reward": reward, "checkpoint": source,
              "scores": {k: [round(float(x), 6) for x in v] for k, v in scores.items()}}
    if json_path is not None:
        atomic_write_text(json_path, strict_json(result, indent=2) + "\n")
    return result
