"""A tiny finished suite on disk, as ``study export`` reads it: results.parquet (suite and cell rows)
and per cell final.json (eval_videos) and samples/final_eval.pt. Nothing is trained: each row's videos
are a flat colour of its own, so a test can tell the rows apart in a decoded clip if it wants to."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pandas as pd
import torch

from grpo_bench.atomic import atomic_write_bytes, atomic_write_json
from grpo_bench.suite.results import COLUMNS
from grpo_bench.suite.run_folder import RESULTS

ROWS = {"dance_grpo kl=none": ("dance_grpo", "none", -0.6), "flow_grpo kl=none": ("flow_grpo", "none", 0.0),
        "sage_grpo kl=dual": ("sage_grpo", "dual", 0.6)}
PROMPTS = ["a red circle moving left", "a blue square moving up"]


def build_suite(root: Path, rows: dict = ROWS, seeds=(0, 1), samples: int = 2, oracle: bool = True,
                frames: int = 4, size: int = 16) -> Path:
    rows_out = [{"suite": "tiny", "kind": "suite", "text": json.dumps({"name": "tiny", "report": {}})}]
    for group, (method, kl, level) in rows.items():
        for seed in seeds:
            cell = f"{method}-{seed}"
            cfg = {"method": method, "kl": kl, "equalizer": True, "setting": "B", "seed": seed}
            rows_out.append({"suite": "tiny", "cell": cell, "group": group, "setting": "B", "method": method, "kl": kl,
                             "equalizer": True, "seed": seed, "kind": "cell", "metric": "wall_time", "value": 1.0,
                             "text": json.dumps({"labels": {}, "config": cfg, "status": "done", "machine": "test"})})
            videos, evals = [], []
            for prompt in PROMPTS:
                for s in range(samples):
                    score = level + 0.1 * s + 0.01 * seed
                    evals.append({"prompt": prompt, "sample": s, "seed": seed, "judge_reward": score,
                                  "oracle_vq": score if oracle else float("nan"),
                                  "oracle_mq": score if oracle else float("nan"),
                                  "oracle_ta": score if oracle else float("nan")})
                    videos.append(torch.full((3, frames, size, size), level))
            cdir = root / cell
            buf = io.BytesIO()
            torch.save(torch.stack(videos).half(), buf)
            atomic_write_bytes(cdir / "samples" / "final_eval.pt", buf.getvalue())
            atomic_write_json(cdir / "final.json", {"eval_videos": evals})
            (cdir / "DONE").write_text("done\n")
    frame = pd.DataFrame(rows_out, columns=list(COLUMNS)).astype({k: v for k, v in COLUMNS.items() if v != "object"})
    frame.to_parquet(root / RESULTS, index=False)
    return root
