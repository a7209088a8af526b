"""The wall clock of a run's phases: the time_* metrics (config/metrics.py) subtract two readings of it."""

from __future__ import annotations

import time

import torch


def clock(device: torch.device) -> float:
    """perf_counter after the device's queued work: what the time_* metrics subtract."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()
