"""The one line naming the machine a cell ran on (stored in the cell's row, shown in the report header)."""

from __future__ import annotations

import os
from pathlib import Path


def machine() -> str:
    """One line naming the machine a cell ran on (for the report header)."""
    import platform

    import torch

    cpu = platform.processor() or platform.machine()
    info = Path("/proc/cpuinfo")
    if info.is_file():
        cpu = next((ln.split(":", 1)[1].strip() for ln in info.read_text().splitlines()
                    if ln.startswith("model name")), cpu)
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return (f"{cpu}, {os.cpu_count()} CPUs, {gpu}, "
            f"torch {torch.__version__}, {platform.system()} {platform.release()}")
