"""The update-0 evaluation, computed once and shared by every run of a folder that evaluates the same
base policy (docs/design.md §7).

Before any update every cell of a seed evaluates the same base model on the same eval prompts with the
same eval noise and reward: the videos and scores are bit-identical (measured on the 0.2 main table:
every cell of a seed). So the first cell of a suite folder to reach it stores it in ``<suite>/_base_eval/``
and the others read it. The key hashes everything that evaluation depends on, execution included (precision,
thread count, the sampling chunk): a cell whose base eval would differ in a last digit computes its own.
Tensors are safetensors, scores JSON; nothing is unpickled. One process only (a launch's ranks each
hold a share of the eval and compute it).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from grpo_bench.atomic import atomic_write, atomic_write_json
from grpo_bench.config.identity import asset_digests

FOLDER = "_base_eval"
DEPENDS_ON = (
    "model", "reward", "reward_path", "reward_base_path", "setting", "prompts", "eval_oracle", "eval_samples",
    "steps", "shift", "guidance", "video_size", "seed", "prompts_per_update", "group_size", "frames", "height",
    "width", "lora_rank", "lora_alpha", "lora_targets", "param_dtype", "mixed_precision",
)
"""The config fields the update-0 eval reads (the sampling chunk is prompts_per_update * group_size)."""
READS = (*DEPENDS_ON, "guidance_formula")
"""The config values ``key`` takes: DEPENDS_ON, and the guidance formula (keyed only when it is not the default)."""


EVAL_ARITHMETIC = 1
"""Bumped whenever the evaluation's arithmetic changes (sampler, decoding, scores), so a stored base eval
of older code is never read by newer code."""


def key(values: Mapping[str, Any], threads: int) -> str:
    """The stored eval's key from the run config's ``values`` of ``READS`` and the thread count."""
    data = {k: values[k] for k in DEPENDS_ON}
    if values["guidance_formula"] != "cfg":  # keyed only when set: the keys stored before it existed stay valid
        data["guidance_formula"] = values["guidance_formula"]
    assets = asset_digests(values["model"], values["reward"])
    blob = json.dumps({**data, "threads": threads, "assets": assets, "arithmetic": EVAL_ARITHMETIC,
                       "torch": torch.__version__}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def load(runs: Path, k: str) -> tuple[dict[str, float], list[dict[str, Any]], torch.Tensor] | None:
    """(metrics, per-video rows, videos) stored under key ``k``, or None (absent or unreadable)."""
    meta, tensors = runs / FOLDER / f"{k}.json", runs / FOLDER / f"{k}.safetensors"
    try:
        data = json.loads(meta.read_text())
        return data["metrics"], data["rows"], load_file(str(tensors))["videos"]
    except (OSError, ValueError, KeyError, RuntimeError):
        return None


def cost(runs: Path, k: str) -> int | None:
    """The evaluation forwards the stored eval under ``k`` cost (compute.py), or None (absent, or stored before
    it was recorded: the reader computes its own, identical, eval and stores it with its cost)."""
    try:
        value = json.loads((runs / FOLDER / f"{k}.json").read_text()).get("compute_eval")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def save(runs: Path, k: str, metrics: dict[str, float], rows: list[dict[str, Any]], videos: torch.Tensor,
         cost: int | None = None) -> None:
    """Tensors first, the JSON last: a reader that finds the JSON finds both. ``cost``: its eval forwards."""
    folder = runs / FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write(folder / f"{k}.safetensors",
                 lambda tmp: save_file({"videos": videos.detach().cpu().contiguous()}, str(tmp)))
    extra = {} if cost is None else {"compute_eval": int(cost)}
    atomic_write_json(folder / f"{k}.json", {"metrics": metrics, "rows": rows, **extra}, round_trip=True)
