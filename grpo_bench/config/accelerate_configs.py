"""The shipped accelerate launch configs (grpo_bench/configs/*.yaml), by name or as a YAML path: what a suite's
``accelerate_config`` and ``--accelerate-config`` may name, checked before anything launches. Launching them is
train/distributed.py's (one command) and suite/accelerate_launch.py's (one multi-GPU cell)."""

from __future__ import annotations

from pathlib import Path

from grpo_bench.errors import unknown

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"


def config_names() -> list[str]:
    return sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))


def config_path(name: str) -> Path:
    """A shipped accelerate config by name (single_gpu, multi_gpu, fsdp2, deepspeed_zero2) or a YAML path."""
    path = Path(name).expanduser()
    if path.suffix in (".yaml", ".yml") and path.is_file():
        return path
    if name not in config_names():
        raise unknown("accelerate config", name, config_names(), "--accelerate-config: ")
    return CONFIG_DIR / f"{name}.yaml"
