"""What a field cell costs in each world, measured side by side on this machine (issue #44 item 5: an image-world
cell should cost at most a quarter of a video-world fair field cell's compute seconds).

Takes one method's fair cell (the grid's own row: reward, method, first test seed; no as-shipped overrides) from
suites/field.yaml (video world, oracle track), suites/field_image.yaml (image world, compositional task) and,
when that suite has it, the text task's cell, each with its own suite's budget, and trains them at the same time
in separate processes, one thread each, so they share the machine's load; prints each cell's ``compute_seconds``
(the run's time_rollout + time_reward + time_train, config/metrics.py), its split, its wall seconds and its
process's CPU seconds (the whole run: evaluations, diagnostics and start-up included), and each image cell's
ratios to the video cell's.

``--updates N`` shortens the video cell to N updates and each image cell to the same share of its own suite's
updates (so the ratio stays a whole cell's; evaluations are placed as each suite places them, so keep N a
multiple of the video suite's eval_every for a like-for-like wall ratio; ``eval_at`` points past a cell's end
are dropped). ``--clock cpu`` makes the trainer's phase clocks read the process's CPU time instead of wall time
(one thread per process, so this is the time the process computed): ``compute_seconds`` then no longer depends
on how the machine's other jobs share the cores, nor on which cell finishes first and leaves the others more.
``--repeat`` trains each image cell again and again while the video cell runs and averages the trainings that
ended before it did, so every cell measured ran under the same load (without it an image cell ends first and the
video cell's rest runs on a lighter machine, which flatters the video cell's wall-clock seconds).

    nice -n 5 python benchmarks/world_cell_cost.py --method flow_grpo --repeat     # full cells, wall clock
    nice -n 5 python benchmarks/world_cell_cost.py --method flow_grpo --updates 10 --clock cpu
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing as mp
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SUITES = {"video": ("suites/field.yaml", "world_oracle"),
          "image": ("suites/field_image.yaml", "image_world_oracle"),
          "image_text": ("suites/field_image.yaml", "image_world_ocr")}
PHASES = ("time_rollout", "time_reward", "time_train", "time_eval", "time_diag")


def fair_cell(suite_path: str, reward: str, method: str) -> dict | None:
    from grpo_bench.suite.expand import expand
    from grpo_bench.suite.parse import BUDGET_CONFIG_KEYS, load_suite

    row_keys = {"reward", "method", "seed", "kl", "model", *BUDGET_CONFIG_KEYS}  # a task's own budget is its row's
    for cell in expand(load_suite(ROOT / suite_path)):
        if set(cell.labels) <= row_keys and cell.labels.get("reward") == reward \
                and cell.labels.get("method") == method:
            return cell.config.to_dict()
    return None


def shortened(config: dict, updates: int) -> dict:
    """The cell cut to ``updates`` (at least 1), its eval cadence and eval points kept inside it."""
    updates = max(int(updates), 1)
    return {**config, "updates": updates, "eval_every": min(config["eval_every"], updates),
            "checkpoint_every": updates, "diag_every": 0,
            "eval_at": [u for u in config.get("eval_at") or [] if u < updates]}


def _train_once(name: str, config: dict, folder: Path) -> tuple[float, float, float, dict]:
    """(compute_seconds, wall seconds, CPU seconds, seconds per phase) of one training of the cell."""
    from grpo_bench.config.run import from_dict
    from grpo_bench.train.trainer import train

    start, cpu = time.monotonic(), time.process_time()  # time.monotonic: the cpu clock leaves it alone
    train(from_dict({**config, "threads": 1}), folder)
    wall, cpu = time.monotonic() - start, time.process_time() - cpu
    rows = [json.loads(x) for x in (folder / "metrics.jsonl").read_text().splitlines()]
    parts = {k: sum(float(r.get(k) or 0.0) for r in rows) for k in PHASES}
    return max(float(r.get("compute_seconds", 0.0)) for r in rows), wall, cpu, parts


def _run(name: str, config: dict, folder: str, clock: str, repeat: bool, video_done: Any, queue: mp.Queue) -> None:
    """Train the cell (again while the video cell runs, with ``repeat``); queue (name, beside the video cell
    throughout, measurement) for each training."""
    import torch

    if clock == "cpu":  # this process only: every phase clock (time.perf_counter) reads its CPU time
        time.perf_counter = time.process_time
    torch.set_num_threads(1)
    for k in itertools.count():
        got = _train_once(name, config, Path(folder) / f"{name}-{k}")
        queue.put((name, not video_done.is_set(), got))
        if name == "video" or not repeat or video_done.is_set():
            break


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", default="flow_grpo")
    parser.add_argument("--updates", type=int, default=None,
                        help="shorten the video cell to N updates, each image cell to the same share of its own")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="what the trainer's phase clocks read (cpu: this process's CPU time)")
    parser.add_argument("--repeat", action="store_true",
                        help="train each image cell again until the video cell ends; average those that ended before")
    args = parser.parse_args()
    configs = {}
    for name, (suite, reward) in SUITES.items():
        config = fair_cell(suite, reward, args.method)
        if config is not None:
            configs[name] = config
    if args.updates:
        share = args.updates / configs["video"]["updates"]
        configs = {name: shortened(c, round(share * c["updates"])) for name, c in configs.items()}
    print(f"CPU: {cpu_name()}; {os.cpu_count()} cores; clock {args.clock}; load average before: {os.getloadavg()}")
    context = mp.get_context("spawn")
    queue: mp.Queue = context.Queue()
    video_done = context.Event()
    measured: dict[str, list] = {name: [] for name in configs}
    with tempfile.TemporaryDirectory() as folder:
        procs = [context.Process(target=_run, args=(n, c, folder, args.clock, args.repeat, video_done, queue))
                 for n, c in configs.items()]
        for p in procs:
            p.start()
        running = len(procs)
        while running:
            name, beside, got = queue.get()
            measured[name].append((beside, got))
            if name == "video":
                video_done.set()
            if name == "video" or not args.repeat or not beside:
                running -= 1
        for p in procs:
            p.join()
    results = {}
    for name, runs in measured.items():
        # with --repeat, only trainings that ended while the video cell still ran (the same load throughout)
        kept = [got for beside, got in runs if beside or not args.repeat] or [got for _, got in runs[:1]]
        results[name] = tuple(statistics.mean(got[i] for got in kept) for i in range(3)) + (
            {k: statistics.mean(got[3][k] for got in kept) for k in PHASES}, len(kept))
    video = results["video"]
    for name, (seconds, wall, cpu, parts, n) in sorted(results.items()):
        cfg = configs[name]
        ratio = (f"of the video cell: compute_seconds {seconds / video[0]:.3f}, wall {wall / video[1]:.3f}, "
                 f"CPU {cpu / video[2]:.3f}") if name != "video" else "reference"
        shown = "  ".join(f"{k[5:]} {v:.1f}" for k, v in parts.items())
        print(f"{name:10s} {cfg['model']:16s} {cfg['reward']:18s} updates {cfg['updates']:2d} steps {cfg['steps']:2d} "
              f"samples {cfg['prompts_per_update'] * cfg['group_size']:2d}  compute_seconds {seconds:7.1f} ({shown})  "
              f"wall {wall:7.1f}  CPU {cpu:7.1f}  (mean of {n})  {ratio}")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
