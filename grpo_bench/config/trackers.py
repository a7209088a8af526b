"""The trackers a run may mirror its metrics to (accelerate's ``log_with``), checked before a run starts: each
name one accelerate knows, its package installed. The sink that writes to them is train/tracking.py."""

from __future__ import annotations

import importlib.util

TRACKERS = {
    "tensorboard": ("tensorboard", "tensorboardX"), "wandb": ("wandb",), "mlflow": ("mlflow",),
    "comet_ml": ("comet_ml",), "aim": ("aim",), "clearml": ("clearml",), "dvclive": ("dvclive",),
    "swanlab": ("swanlab",), "trackio": ("trackio",),
}
"""Tracker names accelerate accepts -> modules that must be importable for each (any one of them)."""


def check_trackers(names: list[str], where: str = "") -> None:
    """Every tracker is one accelerate knows and is installed; else one line naming the fix."""
    from grpo_bench.errors import UserError, unknown
    from grpo_bench.extras import install_hint

    for name in names:
        if name not in TRACKERS:
            raise unknown("tracker", name, list(TRACKERS), f"{where}trackers: ")
        if not any(importlib.util.find_spec(m) is not None for m in TRACKERS[name]):
            how = install_hint(TRACKERS[name][0]) or f"pip install {TRACKERS[name][0]}"
            raise UserError(f"{where}trackers: {name} is not installed; {how}")
