"""A fake trainer whose held-out learning is set by the test: every eval metric rises by
DECIDE_EFFECT for sage_grpo or the sage kernel (0 otherwise) plus DECIDE_NOISE x a standard normal drawn
from (method, seed, metric, and the kernel and objective where a run names them). Workers import
``decide_support:effect_train`` by name, as suite_support's."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
from suite_support import fake_train

from grpo_bench.atomic import atomic_write_text, read_jsonl
from grpo_bench.config.run import RunConfig


def gain(cfg: RunConfig, metric: str) -> float:
    """The learning (last eval minus update-0 eval) of ``metric`` in this cell."""
    named = [cfg.kernel, cfg.objective] if cfg.kernel or cfg.objective else []  # a factorial's cells differ there
    h = hashlib.sha256(json.dumps([cfg.method, cfg.seed, metric, *named]).encode()).hexdigest()
    noise = np.random.default_rng(int(h[:12], 16)).normal()
    sage = cfg.method == "sage_grpo" or cfg.kernel == "sage"
    effect = float(os.environ.get("DECIDE_EFFECT", "0")) if sage else 0.0
    return effect + float(os.environ.get("DECIDE_NOISE", "0")) * float(noise)


def effect_train(cfg: RunConfig, out_dir: Path, **kwargs):
    final = fake_train(cfg, out_dir, **kwargs)
    path = Path(out_dir) / "metrics.jsonl"
    lines = read_jsonl(path)
    for line in lines:
        if "eval_at" in line:
            for key in [k for k in line if k.startswith("eval_") and k != "eval_at"]:
                line[key] = 0.5 + (gain(cfg, key) if line["eval_at"] == cfg.updates - 1 else 0.0)
    atomic_write_text(path, "".join(json.dumps(line) + "\n" for line in lines))
    return final


def run_decided(suite, out: Path) -> tuple[int, str]:
    """``run --until-decided`` of ``suite`` on this trainer, one worker: (exit code, what it printed)."""
    import io

    from rich.console import Console

    from grpo_bench.cli.decide import run_until_decided

    buf = io.StringIO()
    code = run_until_decided(suite, out, 1, "local", False, True, Console(file=buf, width=200),
                             trainer="decide_support:effect_train")
    return code, buf.getvalue()
