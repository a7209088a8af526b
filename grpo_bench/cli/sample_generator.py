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


STRIP_COLUMNS = ("ta", "correct")
"""The oracle columns a strip's labels show, with every other scorer's (the table and --json have them all)."""


def scored(model_name: str, videos: torch.Tensor, prompts: list[str],
           reward: str | None) -> tuple[dict[str, torch.Tensor], set[str], str | None]:
    """(scores by column, the columns the oracle gave, a note or None). An embedded model's samples are scored as
    its runs are evaluated: its prompt set's exact oracle (every column; a constraint no prompt poses, all NaN,
    left out) and its training reward (the model's default, where that is not the oracle), then ``--reward``; a
    column another scorer already gave is prefixed with the reward's label (``judge.ta``). A diffusers model has
    no oracle: ``--reward``'s only. A default training reward that cannot be built (its package missing) is
    skipped with a note, not an error."""
    from grpo_bench import models, rewards
    from grpo_bench.train.evaluation import exact_oracle

    scores: dict[str, torch.Tensor] = {}
    names, oracle, note = [], None, None
    factory = models.MODELS.get(model_name) if model_name in models.names() else None
    defaults = getattr(factory, "run_defaults", {}) if getattr(factory, "embedded", False) else {}
    prompt_set = defaults.get("prompts")
    if prompt_set and rewards.declares_ground_truth(prompt_set):
        oracle = exact_oracle(prompt_set)  # the scorer a run's eval_oracle uses
        truth = oracle.ground_truth(videos, prompts)
        scores = {k: v.float().cpu() for k, v in truth.items() if not torch.isnan(v.float()).all()}
    from_oracle = set(scores)
    default = defaults.get("reward")
    for name, given in ((default, False), (reward, True)):
        if name is None or name in names or (oracle is not None and rewards.product(name) is type(oracle)):
            continue
        try:
            scorer = rewards.load(name, device="cpu")
        except UserError as exc:
            if given:
                raise
            note = f"training reward {name} not available ({str(exc).splitlines()[0]}); oracle only"
            continue
        names.append(name)
        label = getattr(scorer, "label", name)
        for k, v in scorer(videos, prompts).items():
            scores[f"{label}.{k}" if k in scores else k] = v.float().cpu()
    return scores, from_oracle, note


def run_model_sample(model_name: str, prompt: str, n: int, steps: int, shift: float, kernel: Any, guidance: float,
                     seed: int, out: Path, reward: str | None = None, json_path: Path | None = None,
                     console: Console | None = None, loaded: tuple[Any, str] | None = None) -> dict[str, Any]:
    """Sample ``n`` stills (or clips) of ``prompt`` from a registered model; write them and a strip. ``loaded``:
    (model, what was loaded) of a trained policy (``sample.load_policy``) instead of the base."""
    from grpo_bench import media, models
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
    scores, from_oracle, note = scored(model_name, videos, texts, reward)
    shown = [k for k in scores if k not in from_oracle or k in STRIP_COLUMNS]
    labels = [f"#{i}" + "".join(f"  {k} {float(scores[k][i]):.2f}" for k in shown) for i in range(n)]
    strip = out.with_name(out.stem + "_strip.png") if kind == "image" else out.with_suffix(".png")
    media.labelled_strip(videos, labels, strip, title=f"{prompt!r} ({source})")
    # the heading is its own line: as a Table title it would wrap to the width of a narrow table
    console.print(f"{prompt!r}: {n} {kind}s of {model_name} ({source}), {steps} steps, shift {shift:g}, "
                  f"guidance {guidance}", highlight=False)
    table = Table()
    table.add_column("#", justify="right")
    for k in scores:
        table.add_column(k, justify="right")
    for i in range(n):
        table.add_row(str(i), *(f"{float(v[i]):+.4f}" for v in scores.values()))
    console.print(table)
    if note:
        console.print(note, highlight=False)
    console.print(f"wrote {out} and {strip}", highlight=False)
    result = {"prompt": prompt, "model": model_name, "n": n, "steps": steps, "shift": shift, "guidance": guidance,
              "seed": seed, "out": str(out), "strip": str(strip), "reward": reward, "checkpoint": source,
              "scores": {k: [round(float(x), 6) for x in v] for k, v in scores.items()}, "note": note}
    if json_path is not None:
        atomic_write_text(json_path, strict_json(result, indent=2) + "\n")
    return result
