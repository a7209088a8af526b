"""Does RL work on the world? Run one config over several seeds and summarise the gain.

    python benchmarks/rl_gain.py run --name dual_B --seeds 0 1 2 --jobs 2 -- method=sage_grpo kl=dual setting=B
    python benchmarks/rl_gain.py summary runs/rl_gain/dual_B

Each seed is one training run (a niced subprocess with one thread, at most --jobs at a time,
resumable; same files as ``grpo-bench train``). The summary reports, as mean and 95% t-interval over seeds:

* train judge reward gain: mean rollout reward of the last W updates minus the first W (W = 10% of
  the updates, at least 5) — the quantity RL maximises;
* eval judge reward and every eval oracle metric: final policy minus base policy, on the held-out
  eval prompts with the seed's fixed noise (ODE sampling).

Judge up with oracle flat or up: RL works. Judge up with oracle down: the judge is being hacked.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

from scipy import stats

EVAL_KEYS = ("eval_reward", "eval_oracle_vq", "eval_oracle_mq", "eval_oracle_ta", "eval_correct", "eval_manifold",
             "eval_diversity")


def mean_ci(values: list[float], level: float = 0.95) -> tuple[float, float, float]:
    """(mean, lower, upper) of a t-interval over the values (seeds)."""
    n = len(values)
    m = sum(values) / n
    if n < 2:
        return m, math.nan, math.nan
    sd = math.sqrt(sum((v - m) ** 2 for v in values) / (n - 1))
    half = stats.t.ppf(0.5 + level / 2, n - 1) * sd / math.sqrt(n)
    return m, m - half, m + half


def read_lines(run: Path) -> list[dict]:
    out = []
    for line in (run / "metrics.jsonl").read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def seed_summary(run: Path) -> dict[str, float]:
    rows = read_lines(run)
    w = max(5, len(rows) // 10)
    rewards = [r["reward"] for r in rows]
    evals = [r for r in rows if "eval_at" in r]
    out = {
        "updates": len(rows),
        "train_reward_first": sum(rewards[:w]) / w,
        "train_reward_last": sum(rewards[-w:]) / w,
        "train_reward_gain": sum(rewards[-w:]) / w - sum(rewards[:w]) / w,
    }
    if len(evals) >= 2:
        for k in EVAL_KEYS:
            if evals[0].get(k) is not None and evals[-1].get(k) is not None:
                out[f"{k}_base"] = evals[0][k]
                out[f"{k}_final"] = evals[-1][k]
                out[f"{k}_delta"] = evals[-1][k] - evals[0][k]
        out["eval_at_final"] = evals[-1]["eval_at"]
    return out


def summary(root: Path) -> dict[str, object]:
    runs = sorted(p for p in root.iterdir() if (p / "metrics.jsonl").is_file())
    per_seed = {p.name: seed_summary(p) for p in runs}
    keys = sorted({k for s in per_seed.values() for k in s})
    agg = {}
    for k in keys:
        vals = [s[k] for s in per_seed.values() if k in s]
        m, lo, hi = mean_ci(vals)
        agg[k] = {"mean": m, "ci95": [lo, hi], "n": len(vals)}
    return {"root": str(root), "seeds": per_seed, "mean_ci95": agg,
            "done": all((p / "DONE").is_file() for p in runs)}


def worker(out: Path, seed: int, overrides: list[str], model_path: str | None, judge_path: str | None) -> None:
    """One seed in this process; explicit weight files (e.g. a candidate base model or judge) optional."""
    from grpo_bench import models, rewards
    from grpo_bench.config.run import from_dict, parse_overrides
    from grpo_bench.train.trainer import train

    cfg = from_dict({**parse_overrides(overrides), "seed": seed})
    model = models.load(cfg.model, path=model_path) if model_path else None
    reward = rewards.load(cfg.reward, path=judge_path) if judge_path else None
    t = time.time()

    def progress(done: int, total: int, line: dict) -> None:
        if done % 10 == 0 or done == total:
            print(f"[{time.time() - t:7.0f}s] update {done}/{total} reward {line['reward']:+.4f} kl {line['kl']:.3g}",
                  flush=True)

    train(cfg, out, model=model, reward=reward, progress=progress)


def run(name: str, seeds: list[int], jobs: int, overrides: list[str], out_root: Path,
        model_path: str | None = None, judge_path: str | None = None) -> None:
    root = out_root / name
    root.mkdir(parents=True, exist_ok=True)
    pending = list(seeds)
    active: list[tuple[int, subprocess.Popen]] = []
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    while pending or active:
        while pending and len(active) < jobs:
            seed = pending.pop(0)
            cmd = ["nice", "-n", "10", sys.executable, __file__, "worker", "--seed", str(seed),
                   "--out", str(root / f"seed{seed}")]
            cmd += ["--model-path", model_path] if model_path else []
            cmd += ["--judge-path", judge_path] if judge_path else []
            cmd += ["--", "threads=1", *overrides]
            log = open(root / f"seed{seed}.log", "a")
            active.append((seed, subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)))
        time.sleep(5)
        for item in list(active):
            if item[1].poll() is not None:
                active.remove(item)
                print(f"seed {item[0]} finished with code {item[1].returncode}", flush=True)
    print(json.dumps(summary(root)["mean_ci95"], indent=1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--name", required=True)
    r.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    r.add_argument("--jobs", type=int, default=2)
    r.add_argument("--out", type=Path, default=Path("runs/rl_gain"))
    r.add_argument("--model-path", default=None, help="world base weights file (default: the shipped one)")
    r.add_argument("--judge-path", default=None, help="world judge weights file (default: the shipped one)")
    r.add_argument("overrides", nargs="*")
    w = sub.add_parser("worker")
    w.add_argument("--out", type=Path, required=True)
    w.add_argument("--seed", type=int, required=True)
    w.add_argument("--model-path", default=None)
    w.add_argument("--judge-path", default=None)
    w.add_argument("overrides", nargs="*")
    s = sub.add_parser("summary")
    s.add_argument("root", type=Path)
    args = ap.parse_args()
    if args.cmd == "run":
        run(args.name, args.seeds, args.jobs, args.overrides, args.out, args.model_path, args.judge_path)
    elif args.cmd == "worker":
        worker(args.out, args.seed, args.overrides, args.model_path, args.judge_path)
    else:
        print(json.dumps(summary(args.root), indent=1))


if __name__ == "__main__":
    main()
