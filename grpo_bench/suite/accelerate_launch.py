"""A cell asking for several GPUs (budget.gpus_per_cell): ``accelerate launch`` on its slot's GPUs.

Each rank runs ``python -m grpo_bench.suite.cell CELL_DIR TRAINER``; progress is read from
metrics.jsonl, and a failure is one line (the first rank's error, the log path).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from grpo_bench.atomic import read_jsonl
from grpo_bench.suite.children import die_with_parent

RANK_ENTRY = "grpo_bench.suite.cell"
"""The module each rank runs (``python -m``)."""


def launch_accelerate(cdir: Path, trainer: str, gpus: list[int], on_update: Callable[[int], None],
                      launch: str | None = None) -> None:
    """Multi-GPU cell: ``accelerate launch`` the cell entry on the slot's GPUs (budget.accelerate_config, default
    plain data parallel); progress from metrics.jsonl; a failure is one line (first rank's error, log path)."""
    from grpo_bench.config.accelerate_configs import config_path
    from grpo_bench.launch_log import launch_failure

    how = ["--config_file", str(config_path(launch))] if launch else ["--multi_gpu"]
    cmd = [sys.executable, "-m", "accelerate.commands.launch", *how, "--num_processes", str(len(gpus)),
           "-m", RANK_ENTRY, str(cdir), trainer]
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus))}
    with open(cdir / "launch.log", "a") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, preexec_fn=die_with_parent)
        while proc.poll() is None:
            time.sleep(2.0)
            on_update(len(read_jsonl(cdir / "metrics.jsonl")))
    if proc.returncode != 0:
        raise launch_failure(proc.returncode, cdir / "launch.log")
