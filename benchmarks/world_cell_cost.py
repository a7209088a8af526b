"""What a field cell costs in each world, measured side by side on this machine (issue #44 item 5: an image-world
cell should cost at most a quarter of a video-world fair field cell's compute seconds).

Takes one method's fair cell (the grid's own row: reward, method, first test seed; no as-shipped overrides) from
suites/field.yaml (video world, oracle track), suites/field_image.yaml (image world, compositional task) and,
when that suite has it, the text task's cell, and trains them at the same time in separate processes, one thread
each, so they share the machine's load; prints each cell's ``compute_seconds`` (the run's time_rollout +
time_reward + time_train, config/metrics.py) and wall seconds, and each image cell's ratio to the video cell's.
``--updates N`` shortens every cell alike (the ratio of per-update costs; evaluations are included as the suite
places them, so keep N a multiple of the suites' eval_every for a like-for-like ratio).

    python benchmarks/world_cell_cost.py --method flow_grpo --updates 90
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUITES = {"video": ("suites/field.yaml", "world_oracle"),
          "image": ("suites/field_image.yaml", "image_world_oracle"),
          "image_text": ("suites/field_image.yaml", "image_world_ocr")}


def fair_cell(suite_path: str, reward: str, method: str) -> dict | None:
    from grpo_bench.suite.expand import expand
    from grpo_bench.suite.parse import load_suite

    for cell in expand(load_suite(ROOT / suite_path)):
        if set(cell.labels) <= {"reward", "method", "seed", "kl", "model"} and cell.labels.get("reward") == reward \
                and cell.labels.get("method") == method:
            return cell.config.to_dict()
    return None


def _run(name: str, config: dict, folder: str, queue: mp.Queue) -> None:
    import torch

    from grpo_bench.config.run import from_dict
    from grpo_bench.train.trainer import train

    torch.set_num_threads(1)
    start = time.perf_counter()
    train(from_dict({**config, "threads": 1}), Path(folder) / name)
    rows = [json.loads(x) for x in (Path(folder) / name / "metrics.jsonl").read_text().splitlines()]
    parts = {k: sum(float(r.get(k, 0.0)) for r in rows) for k in ("time_rollout", "time_reward", "time_train")}
    queue.put((name, max(float(r.get("compute_seconds", 0.0)) for r in rows), time.perf_counter() - start, parts))


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
    parser.add_argument("--updates", type=int, default=None, help="shorten every cell to N updates")
    args = parser.parse_args()
    configs = {}
    for name, (suite, reward) in SUITES.items():
        config = fair_cell(suite, reward, args.method)
        if config is not None:
            if args.updates:
                config.update(updates=args.updates, eval_every=min(config["eval_every"], args.updates),
                              checkpoint_every=max(args.updates, 1), diag_every=0)
            configs[name] = config
    print(f"CPU: {cpu_name()}; {os.cpu_count()} cores; load average before: {os.getloadavg()}")
    queue: mp.Queue = mp.get_context("spawn").Queue()
    with tempfile.TemporaryDirectory() as folder:
        procs = [mp.get_context("spawn").Process(target=_run, args=(n, c, folder, queue)) for n, c in configs.items()]
        for p in procs:
            p.start()
        results = {}
        for _ in procs:
            name, seconds, wall, parts = queue.get()
            results[name] = (seconds, wall, parts)
        for p in procs:
            p.join()
    video = results["video"][0]
    for name, (seconds, wall, parts) in results.items():
        cfg = configs[name]
        ratio = f"{seconds / video:.3f} of the video cell" if name != "video" else "reference"
        shown = "  ".join(f"{k[5:]} {v:.1f}" for k, v in parts.items())
        print(f"{name:11s} {cfg['model']:17s} {cfg['reward']:19s} updates {cfg['updates']:3d}  compute_seconds "
              f"{seconds:8.1f} ({shown})  wall {wall:8.1f}  {ratio}")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
