"""The one line naming the machine a cell ran on (stored in the cell's row, shown in the report header)."""

from __future__ import annotations

import os
from pathlib import Path


def host() -> str:
    """This host's CPU model and core count: the start of ``machine()``, read without importing torch."""
    import platform

    cpu = platform.processor() or platform.machine()
    info = Path("/proc/cpuinfo")
    if info.is_file():
        cpu = next((ln.split(":", 1)[1].strip() for ln in info.read_text().splitlines()
                    if ln.startswith("model name")), cpu)
    return f"{cpu}, {os.cpu_count()} CPUs"


def machine() -> str:
    """One line naming the machine a cell ran on (for the report header)."""
    import platform

    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return f"{host()}, {gpu}, torch {torch.__version__}, {platform.system()} {platform.release()}"
