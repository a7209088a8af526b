"""Test support for the suite runner: a fast fake trainer honouring the trainer's file contract,
and a suite-file writer. Workers import ``suite_support:fake_train`` by name (tests/ is on sys.path
of pytest and of the spawned workers).

The fake trainer is deterministic (values depend only on config and update), resumes from the
lines already in metrics.jsonl, sleeps FAKE_SLEEP seconds per update, appends ``start``/``finish``
lines to FAKE_LOG, and raises for methods listed in FAKE_FAIL. Methods in FAKE_DIE kill their worker
(SIGKILL) after the first update; methods in FAKE_ENOSPC fail with a full disk there.
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from grpo_bench.atomic import append_line, atomic_write_bytes, atomic_write_json, atomic_write_text, read_jsonl
from grpo_bench.config.identity import cell_id
from grpo_bench.config.run import RunConfig

EVAL_PROMPTS = ["a red circle moving left", "a blue square moving up"]


def _log(event: str, cell: str) -> None:
    path = os.environ.get("FAKE_LOG")
    if path:
        with open(path, "a") as fh:  # O_APPEND: lines from several workers do not interleave
            fh.write(f"{event} {cell} {os.getpid()}\n")


def _rng(cfg: RunConfig, *salt: Any) -> np.random.Generator:
    h = hashlib.sha256(json.dumps([cfg.method, cfg.kl, cfg.setting, cfg.seed, cfg.equalizer, *salt]).encode())
    return np.random.default_rng(int(h.hexdigest()[:12], 16))


def lr_gain(lr: float) -> float:
    """g(lr) = x - x^2 with x = log10(lr / 1e-4): 0 at 1e-4 and 1e-3, highest at 10^-3.5 (0.25)."""
    import math

    x = math.log10(lr / 1e-4)
    return x - x * x


def fake_line(cfg: RunConfig, u: int) -> dict[str, Any]:
    r = _rng(cfg, u)
    rv, rm, rt = (float(x) for x in r.normal(0.01 * u, 0.1, 3))
    rt += 0.05 * u * lr_gain(cfg.lr)  # a tuning grid has an optimum (3.16e-4); zero at the default lr 1e-4
    line: dict[str, Any] = {"update": u, "reward": rv + rm + rt, "reward_vq": rv, "reward_mq": rm, "reward_ta": rt,
                            "kl": float(abs(r.normal(1e-3, 1e-4))), "kl_weight": 1e-5, "policy_loss": float(r.normal())}
    if u % cfg.eval_every == 0 or u == cfg.updates - 1:
        line.update(eval_at=u, eval_reward=float(r.normal()), eval_oracle_vq=float(r.uniform()),
                    eval_oracle_mq=float(r.uniform()), eval_oracle_ta=float(r.uniform()),
                    eval_correct=float(r.uniform()), eval_manifold=float(r.uniform()),
                    eval_diversity=float(r.uniform()))
    if cfg.diag_every and u % cfg.diag_every == 0:
        norms = [float(x) for x in r.uniform(0.1, 10, cfg.steps)]
        norms[-1] = None
        line["grad_norm_per_step"] = norms
    return line


def fake_train(cfg: RunConfig, out_dir: Path, *, resume: bool = True, progress=None, model=None, reward=None):
    out = Path(out_dir)
    cid = cell_id(cfg)
    _log("start", out.name)
    if cfg.method in os.environ.get("FAKE_FAIL", "").split(","):
        raise RuntimeError(f"fake failure of {cfg.method}")
    atomic_write_text(out / "config.yaml", yaml.safe_dump(cfg.to_dict(), sort_keys=True))
    kept = read_jsonl(out / "metrics.jsonl") if resume else []
    # drop a torn last line before appending (as the real trainer's metrics sink does)
    atomic_write_text(out / "metrics.jsonl", "".join(json.dumps(line) + "\n" for line in kept))
    done = len(kept)
    sleep = float(os.environ.get("FAKE_SLEEP", "0"))
    for u in range(done, cfg.updates):
        time.sleep(sleep)
        append_line(out / "metrics.jsonl", json.dumps(fake_line(cfg, u)))
        if cfg.method in os.environ.get("FAKE_DIE", "").split(","):  # the worker dies (OOM killer, a signal)
            os.kill(os.getpid(), signal.SIGKILL)
        if cfg.method in os.environ.get("FAKE_ENOSPC", "").split(","):
            raise OSError(errno.ENOSPC, "No space left on device", str(out / "metrics.jsonl"))
        if progress is not None:
            progress(u + 1, cfg.updates, {"reward": 0.0})
    rows, videos = [], []
    for p_i, prompt in enumerate(EVAL_PROMPTS):
        for s in range(cfg.eval_samples):
            r = _rng(cfg, "video", p_i, s)
            rows.append({"prompt": prompt, "sample": s, "seed": 1000 * cfg.seed + 10 * p_i + s,
                         "oracle_vq": float(r.uniform()), "oracle_mq": float(r.uniform()),
                         "oracle_ta": float(r.uniform()), "correct": float(r.integers(0, 2)),
                         "manifold": float(r.uniform()), "judge_reward": float(r.normal())})
            videos.append(torch.from_numpy(r.uniform(-1, 1, (3, 8, 16, 16))).float())
    buf = io.BytesIO()
    torch.save(torch.stack(videos).half(), buf)
    atomic_write_bytes(out / "samples" / "final_eval.pt", buf.getvalue())
    lines = read_jsonl(out / "metrics.jsonl")
    final = {"metrics": {k: v for k, v in lines[-1].items() if not k.startswith("eval_")},
             "eval": {k: v for k, v in lines[-1].items() if k.startswith("eval_")},
             "wall_time": 1.5 * cfg.updates, "cell_id": cid, "eval_videos": rows}
    atomic_write_json(out / "final.json", final)
    atomic_write_text(out / "DONE", "done\n")
    _log("finish", out.name)
    return final


TRAINER = "suite_support:fake_train"

SMALL_SUITE = {
    "name": "tiny",
    "base": {"updates": 4, "eval_every": 2, "diag_every": 2, "steps": 4, "eval_samples": 2},
    "grid": {"setting": ["A"], "method": ["dance_grpo", "sage_grpo"]},
    "union": [{"method": ["sage_grpo"], "kl": ["none"]}],
    "seeds": [0, 1],
    "report": {"tables": ["table2", "winrates"], "figures": ["reward_curves", "kl_curves", "grad_norms", "drift",
                                                             "strips"],
               "baseline": {"method": "dance_grpo"}},
}


def write_suite(path: Path, data: dict[str, Any] | None = None) -> Path:
    path.write_text(yaml.safe_dump(data or SMALL_SUITE, sort_keys=False))
    return path


def env_train(cfg: RunConfig, out_dir: Path, **kw):
    """fake_train that first records the worker's GPU pinning and thread budget."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / "env.json", {"CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
                                         "threads": torch.get_num_threads()})
    return fake_train(cfg, out_dir, **kw)



def lagging_events_train(cfg: RunConfig, out_dir: Path, **kw):
    """fake_train in a worker whose event pipe delivers every message EVENT_LAG seconds late (default 0.2), as a
    starved feeder thread does on a loaded machine: a cell's result reaches the runner before its last events."""
    from grpo_bench.suite.local_pool import _WORKER

    writer = _WORKER["events"]._writer  # the Connection the queue's feeder thread writes to
    if not getattr(writer, "lagging", False):
        send, lag = writer._send, float(os.environ.get("EVENT_LAG", "0.2"))

        def late(buf, *args):
            time.sleep(lag)
            return send(buf, *args)

        writer._send, writer.lagging = late, True
    return fake_train(cfg, out_dir, **kw)
