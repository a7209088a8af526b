"""``grpo-bench sample``: sample a world model for one prompt, save a GIF and a PNG strip, score each video.

The GIF shows the n videos side by side, upscaled with nearest-neighbour so the pixels stay
visible; the PNG strip has one row per video (labelled with its scores) and one column per frame,
with white lines between frames. ``--checkpoint`` takes a run folder (its exported policy, or its
latest checkpoint while it runs), a policy folder, a checkpoint folder or a weights file. Scores come from the
exact oracle and, when its weights are shipped, the learned judge (the training reward).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.table import Table
from torch import Tensor

from grpo_bench.atomic import atomic_write_text, strict_json
from grpo_bench.errors import UserError
from grpo_bench.media import labelled_strip, write_gif

CHECKPOINT_HELP = ("give a run folder (runs/train/...), its policy/ folder, a checkpoints/update_N folder or a "
                   "world-model .safetensors file")



MAX_SAMPLER_STEPS = 1000
"""The most sampler steps `sample` takes (the run config's own bound on ``steps``)."""

def load_policy(path: Path, model: str | None = None) -> tuple[Any, str]:
    """(embedded model, what was loaded) from a weights file, a run folder, its policy/ or a checkpoint folder;
    ``model``: which embedded generator (default: the video world's; an image world's model by name).

    A run folder gives its exported policy (a finished run) or else its latest checkpoint. Checkpoint
    folders hold the trainable parameters as their first custom object; they are read without
    unpickling code (``weights_only=True``)."""
    from grpo_bench.models.world import POLICY_WEIGHTS
    from grpo_bench.train import checkpoint as ckpt
    from grpo_bench.train.export import CARD, POLICY
    from grpo_bench.world.roles import video_world

    model = model or video_world().model
    path = Path(path)
    if not path.exists():
        raise UserError(f"--checkpoint {path}: not found; {CHECKPOINT_HELP}")
    if path.is_file():
        return _load_world(path, path, model), str(path)
    for policy in (path, path / POLICY):
        if (policy / CARD).is_file():
            weights = policy / POLICY_WEIGHTS
            if not weights.is_file():
                raise UserError(f"--checkpoint {path}: the policy in {policy} is not a world model "
                                f"(see {policy / 'README.md'}); `sample` draws from the embedded world only")
            _same_model(_card_config(policy / CARD).get("model", video_world().model), model, path)
            return _load_world(weights, path, model), str(weights)
    if (path / ckpt.CHECKPOINTS).is_dir() or (path / "config.yaml").is_file():
        found = ckpt.latest(path)
        if found is None:
            raise UserError(f"--checkpoint {path}: this run folder has no exported policy and no checkpoint yet")
        path = found[1]
    run_dir = path.parent.parent
    if path.parent.name != ckpt.CHECKPOINTS or not (run_dir / "config.yaml").is_file():
        raise UserError(f"--checkpoint {path}: not a run, policy or checkpoint folder; {CHECKPOINT_HELP}")
    return _from_checkpoint(path, run_dir, model), str(path)


DEFAULT_STEPS, DEFAULT_SHIFT = 20, 3.0
"""The sampler of ``sample`` without a --checkpoint (or one whose run config is not next to it)."""


def trained_config(path: Path) -> dict[str, Any]:
    """The config the policy at ``path`` was trained with (a run folder's config.yaml, a policy card's
    config, a checkpoint's run), or {} for a bare weights file: ``sample`` samples it as it was trained.
    Those files are untrusted: a damaged one, or a sampler in it out of range, is one line naming the file."""
    from grpo_bench.train import checkpoint as ckpt
    from grpo_bench.train.export import CARD, POLICY

    path = Path(path)
    folder = path.parent if path.is_file() else path
    for card in (folder / CARD, folder / POLICY / CARD):
        if card.is_file():
            return _sampler_checked(_card_config(card), card)
    for run in (folder, folder.parent.parent if folder.parent.name == ckpt.CHECKPOINTS else None):
        if run is not None and (run / "config.yaml").is_file():
            return _sampler_checked(run_config(run / "config.yaml"), run / "config.yaml")
    return {}


def trained_model(path: Path) -> str | None:
    """The embedded model the run at ``path`` trained (its config's ``model``), so ``sample --checkpoint RUN`` needs
    no --model; None where no config is beside it (a bare weights file). The config is untrusted: a model that is
    not a registered embedded one is one line naming the file's run."""
    from grpo_bench import models

    name = trained_config(path).get("model")
    if name is None:
        return None
    embedded = sorted(m for m in models.names() if getattr(models.MODELS.get(m), "embedded", False))
    if not isinstance(name, str) or name not in embedded:
        raise UserError(f"--checkpoint {path}: its run config names model {str(name)[:60]!r}, not an embedded model; "
                        f"`sample --checkpoint` draws from {', '.join(embedded)}")
    return name


def _card_config(card: Path) -> dict[str, Any]:
    try:
        data = json.loads(card.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"--checkpoint: {card} is not a readable policy card ({exc}); the run folder is damaged") \
            from None
    config = data.get("config") if isinstance(data, dict) else None
    if not isinstance(config, dict):
        raise UserError(f"--checkpoint: {card}: 'config' must be an object (the run's config); the card is damaged")
    return dict(config)


def run_config(path: Path) -> dict[str, Any]:
    """A run folder's config.yaml as a mapping, or one line naming it (safe YAML: no code from data files)."""
    from grpo_bench import safe_yaml

    data = safe_yaml.load_file(path, "run config") or {}
    if not isinstance(data, dict):
        raise UserError(f"--checkpoint: {path}: a run config must be a mapping of key: value, got "
                        f"{type(data).__name__}; the run folder is damaged")
    return data


def _sampler_checked(cfg: dict[str, Any], source: Path) -> dict[str, Any]:
    """The run's own steps and shift, which ``sample`` reuses, within the range the command line allows."""
    import math


    steps, shift = cfg.get("steps"), cfg.get("shift")
    if steps is not None and not (isinstance(steps, int) and not isinstance(steps, bool)
                                  and 1 <= steps <= MAX_SAMPLER_STEPS):
        raise UserError(f"--checkpoint: {source}: 'steps' must be an integer in 1..{MAX_SAMPLER_STEPS}, got "
                        f"{str(steps)[:40]!r}")
    if shift is not None and not (isinstance(shift, (int, float)) and not isinstance(shift, bool)
                                  and math.isfinite(shift) and shift > 0):
        raise UserError(f"--checkpoint: {source}: 'shift' must be a finite number > 0, got {str(shift)[:40]!r}")
    return cfg


def _load_world(weights: Path, given: Path, model: str) -> Any:
    """Weights of the embedded ``model`` the user named; a bad file is reported as theirs (the loader's own advice,
    rebuilding the shipped model over that path, is not for user files)."""
    from grpo_bench.models import load

    try:
        return load(model, path=weights)
    except UserError:
        raise UserError(f"--checkpoint {given}: {weights} cannot be read as world-model weights (corrupt, or not "
                        f"a world model); {CHECKPOINT_HELP}") from None


def _same_model(trained: Any, name: str, given: Path) -> None:
    if trained != name:
        raise UserError(f"--checkpoint {given}: a run of model {trained!r}, not {name!r}; give --model {trained} "
                        "(`sample` draws from the embedded models only)")


def _from_checkpoint(folder: Path, run_dir: Path, name: str) -> Any:
    from grpo_bench.models import load
    from grpo_bench.world.roles import video_world

    cfg = run_config(run_dir / "config.yaml")
    world = video_world().model  # the run config's default model
    _same_model(cfg.get("model", world), name, folder)
    model = load(name, size=cfg.get("video_size")) if name == world else load(name)
    params = dict(model.net.named_parameters())
    state = _trainable_state(folder, set(params))
    if state is None:
        raise UserError(f"--checkpoint {folder}: no trainable parameters of the world model found in it")
    for name, value in state.items():  # a tensor of another shape, or not finite, is a damaged checkpoint
        if tuple(value.shape) != tuple(params[name].shape) or not torch.isfinite(value).all():
            why = (f"has shape {list(value.shape)}, the model's is {list(params[name].shape)}"
                   if tuple(value.shape) != tuple(params[name].shape) else "holds values that are not finite")
            raise UserError(f"--checkpoint {folder}: tensor {name!r} {why}; the checkpoint is damaged or from "
                            "another model")
    with torch.no_grad():
        for name, value in state.items():
            params[name].copy_(value)
    return model


def _trainable_state(folder: Path, names: set[str]) -> dict[str, Tensor] | None:
    """The first safetensors file in ``folder`` whose keys are parameters of the net (a checkpoint's
    ``trainable.safetensors``; checkpoints hold no pickles, grpo_bench.train.checkpoint)."""
    from safetensors.torch import load_file

    for file in sorted(folder.glob("*.safetensors")):
        try:
            state = load_file(str(file))
        except Exception as exc:  # safetensors raises its own error type for a torn or foreign file
            raise UserError(f"--checkpoint {folder}: {file.name} is not a readable safetensors file "
                            f"({' '.join(str(exc).split())[:120]}); the checkpoint is damaged") from None
        if state and set(state) <= names:
            return state
    return None


def judge_scores(videos: Tensor, prompts: list[str]) -> tuple[dict[str, Tensor] | None, str | None]:
    """(scores, None) from the shipped judge, or (None, why not) when it is not available."""
    try:
        from grpo_bench.rewards import load
        from grpo_bench.world.roles import video_world

        judge = load(video_world().judge)
    except (ImportError, AttributeError, UserError, FileNotFoundError) as exc:
        return (
            None,
            f"judge not available ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__}); oracle only",
        )
    with torch.no_grad():
        return judge(videos, prompts), None


def kernel_overrides(items: list[str], where: str = "command line: ") -> dict[str, Any]:
    """``["kernel.power=2"]`` -> ``{"power": 2}``, parsed as train's ``key=value`` overrides; any key that
    is not ``kernel.<name>`` is a UserError (the kernel's own ``Params`` then validate names and values)."""
    from grpo_bench.config.run import parse_overrides
    from grpo_bench.params import component

    parsed = parse_overrides(items, where)
    for key in parsed:
        if not key.startswith("kernel.") or key == "kernel.":
            raise UserError(f"{where}`sample` takes only kernel parameters as key=value (kernel.<name>=value), "
                            f"got {key!r}; sampler options are flags (--steps, --noise-level, ...)")
    return component(parsed, "kernel")


def run_sample(
    prompt: str,
    n: int = 4,
    steps: int | None = None,
    shift: float | None = None,
    kernel: str = "ode",
    noise_level: float = 0.0,
    guidance: float = 1.0,
    checkpoint: Path | None = None,
    seed: int = 0,
    out: Path = Path("sample.gif"),
    json_path: Path | None = None,
    console: Console | None = None,
    kernel_params: dict[str, Any] | None = None,
) -> dict:
    """Sample ``n`` videos of ``prompt``; write ``out`` (GIF) and ``out``.png; print and return the scores.

    ``kernel_params``: the kernel's own parameters, keys without the ``kernel.`` prefix. ``steps`` and ``shift``
    default to the checkpoint's own (a policy trained at 10 steps is sampled at 10), else 20 and 3.0."""
    from grpo_bench.core.sampling import sample
    from grpo_bench.core.schedule import sigmas
    from grpo_bench.core.sde import make_kernel
    from grpo_bench.models import load
    from grpo_bench.world.oracle import oracle
    from grpo_bench.world.roles import video_world
    from grpo_bench.world.vocab import parse

    console = console or Console()
    parse(prompt)  # an unknown word is a UserError listing the vocabulary, before any work
    if n < 1:
        raise UserError(f"--n must be >= 1, got {n}")
    out = Path(out)
    if out.suffix.lower() != ".gif":
        raise UserError(f"--out must name a .gif file, got {out}")
    try:
        k = make_kernel(kernel, noise_level, params=kernel_params)
    except UserError as exc:  # the kernel names the bad key and its allowed keys
        raise UserError(f"command line: {exc}") from None
    model, source = (load_policy(checkpoint) if checkpoint is not None
                     else (load(video_world().model), "shipped world base"))
    trained = trained_config(checkpoint) if checkpoint is not None else {}
    from_run = [name for name, given in (("steps", steps), ("shift", shift)) if given is None and name in trained]
    steps = int(trained.get("steps", DEFAULT_STEPS)) if steps is None else steps
    shift = float(trained.get("shift", DEFAULT_SHIFT)) if shift is None else shift
    sig = sigmas(steps, shift)
    as_trained = f" (the run's {' and '.join(from_run)})" if from_run else ""
    g = torch.Generator().manual_seed(seed)
    texts = [prompt] * n
    noise = torch.randn(n, *model.latent_shape, generator=g)
    videos = model.decode(sample(model, texts, noise, sig, k, guidance=guidance, generator=g))

    strip = out.with_suffix(".png")
    write_gif(videos, out, columns=n)
    orc = oracle(videos, texts)
    judge, note = judge_scores(videos, texts)
    labels = [f"#{i}  oracle vq {orc['vq'][i]:.2f} mq {orc['mq'][i]:.2f} ta {orc['ta'][i]:.2f}"
              + ("" if judge is None else f"  judge sum {sum(float(v[i]) for v in judge.values()):+.2f}")
              for i in range(n)]
    labelled_strip(videos, labels, strip, title=f"{prompt!r} ({source})")

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
        title=f"{prompt!r}: {n} videos, {steps} {kernel} steps, shift {shift:g}{as_trained}, guidance {guidance}",
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
        "guidance": guidance, "seed": seed, "checkpoint": source,
        "kernel_params": {f"kernel.{k2}": v for k2, v in k.params.model_dump().items()},
        "gif": str(out), "png": str(strip), "videos": rows, "note": note,
    }
    if json_path is not None:
        atomic_write_text(json_path, strict_json(result, indent=2) + "\n")
    return result
