"""``grpo-bench score --reward NAME --prompt TEXT FILE...``: a registered reward on the user's own images or
videos, one line per file (``--json``: one JSON object per line, for scripts). Researchers check a reward
model on pictures they know before they train on it.

Everything that can be checked is checked before the reward is loaded: the reward's name, every file
(exists, has an image or video suffix, decodes, fits the reward's modality), the weight paths. A file
the reward then fails on, or scores as NaN or infinity, is one line naming it: never a silent number.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch
import typer

from grpo_bench.errors import UserError

_FILES_HELP = "Images (.png .jpg .webp ...; a still) or videos (.mp4 .webm .gif ...) to score."


def _reward_kwargs(name: str, factory: Any, reward_path: str | None, reward_base_path: str | None) -> dict[str, str]:
    """``--reward-path`` / ``--reward-base-path`` as the factory's keyword arguments (as train's ``reward_path``
    and ``reward_base_path``); each must exist and be the file or folder the factory declares for it."""
    from grpo_bench.config.sections import Compared
    from grpo_bench.config.weights import check_path, reward_kwargs
    from grpo_bench.rewards.base import factory_declaration

    kinds = factory_declaration(factory).path_options
    options = tuple(kinds)
    for flag, value, index in (("--reward-path", reward_path, 0), ("--reward-base-path", reward_base_path, 1)):
        if value is None:
            continue
        if len(options) <= index:
            raise UserError(f"score: {flag}: reward {name!r} takes "
                            f"{'no weight path' if not options else 'only --reward-path'}")
        option = options[index]
        check_path(flag, value, kinds[option], "score: ", taker=f"reward {name!r} takes its {option} as a local "
                   f"{kinds[option]}")
    return reward_kwargs(Compared(reward=name, reward_path=reward_path or "", reward_base_path=reward_base_path or ""))


def _scores(reward: Any, name: str, item: Any, prompt: str) -> dict[str, float]:
    """The reward's scores of one file, each a finite number, or one line naming the file."""
    try:
        with torch.no_grad():
            out = reward(item.clip, [prompt])
    except UserError:
        raise
    except (ValueError, RuntimeError, TypeError, IndexError) as exc:  # this input, not the command, failed
        detail = " ".join(str(exc).split())[:200]
        raise UserError(f"score: {item.path}: reward {name!r} cannot score it "
                        f"({type(exc).__name__}: {detail})") from None
    scores = {key: float(value.reshape(-1)[0]) for key, value in out.items()}
    bad = [key for key, value in scores.items() if not math.isfinite(value)]
    if bad:
        raise UserError(f"score: {item.path}: reward {name!r} gave {', '.join(f'{k}={scores[k]}' for k in bad)}, "
                        "not a number; the file cannot be scored")
    return scores


def score_files(name: str, prompt: str, files: list[Path], device: str = "cpu", reward_path: str | None = None,
                reward_base_path: str | None = None) -> list[dict[str, Any]]:
    """One record per file: {"file", "reward", "prompt", "frames", "scores": {dimension: value}}."""
    from grpo_bench import rewards
    from grpo_bench.cli.score_files import check_fits, read_file
    from grpo_bench.config.weights import reward_modality
    from grpo_bench.rewards.base import declaration

    if not prompt.strip():
        raise UserError("score: --prompt is empty; give the prompt the files were made for")
    factory = rewards.REWARDS.get(name, where="score: --reward: ")
    kwargs = _reward_kwargs(name, factory, reward_path, reward_base_path)
    items = [read_file(path) for path in files]
    for item in items:
        check_fits(item, name, reward_modality(factory))
    reward = rewards.load(name, device=device, **kwargs)
    shape = declaration(reward).video_shape
    records = []
    for item in items:
        check_fits(item, name, "any", shape)
        records.append({"file": str(item.path), "reward": name, "prompt": prompt, "frames": item.frames,
                        "scores": {k: round(v, 6) for k, v in _scores(reward, name, item, prompt).items()}})
    return records


def score(
    files: list[Path] = typer.Argument(..., help=_FILES_HELP),
    reward: str = typer.Option(..., "--reward", help="A registered reward, e.g. ocr, pickscore, jpeg_compressibility "
                               "(a wrong name lists them all)."),
    prompt: str = typer.Option(..., "--prompt", help="The prompt every file is scored against (ocr: the "
                               "double-quoted text is what must be read)."),
    reward_path: str | None = typer.Option(
        None, "--reward-path", help="The reward's weights (its first path option, as train's reward_path)."),
    reward_base_path: str | None = typer.Option(
        None, "--reward-base-path", help="The reward's second path option (as train's reward_base_path)."),
    device: str = typer.Option("cpu", "--device", help="Where the reward runs, e.g. cuda."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object per file and line, for scripts."),
) -> None:
    """Score your own images or videos with a registered reward: one line per file."""
    for record in score_files(reward, prompt, files, device, reward_path, reward_base_path):
        if as_json:
            typer.echo(json.dumps(record))
        else:
            values = "  ".join(f"{k} {v:+.4f}" for k, v in record["scores"].items())
            typer.echo(f"{record['file']}  {values}")
