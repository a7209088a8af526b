"""Store ``samples/base_eval.pt`` in cells run before the trainer saved it (grpo-bench < 0.2.0).

    python benchmarks/backfill_base_eval.py runs/<suite>/<cell>/ ...
    grpo-bench run suites/<suite>.yaml        # every cell done: re-aggregates, then re-renders

The base model's eval at update 0 is recomputed from the cell's own config.yaml; it is stored only if
every eval metric equals the one the cell logged at update 0 exactly (same model, prompts and eval
noise), and the cell's cached ``rows.parquet`` is removed so the next ``run`` rebuilds its rows (with
the base strips) from the trainer's files. Used once for the 0.2.0 reports: 93 of 93 cells matched.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import torch
import yaml

from grpo_bench.config.run import from_dict
from grpo_bench.train.trainer import Trainer, save_eval_videos


def backfill(cell: Path) -> bool | None:
    """True: stored; False: recomputed metrics differ from the logged ones; None: nothing to do."""
    if (cell / "samples" / "base_eval.pt").exists() or not (cell / "DONE").exists():
        return None
    cfg = from_dict(yaml.safe_load((cell / "config.yaml").read_text()))
    logged = json.loads((cell / "metrics.jsonl").read_text().splitlines()[0])
    with tempfile.TemporaryDirectory() as tmp:
        ev = Trainer(cfg, Path(tmp)).evaluate()
    line = ev.line(at=0)
    keys = [k for k in line if k.startswith("eval_") and isinstance(line[k], float)]
    if any(line[k] != logged.get(k) for k in keys):
        return False
    save_eval_videos(ev.videos, cell / "samples" / "base_eval.pt")
    (cell / "rows.parquet").unlink(missing_ok=True)
    return True


if __name__ == "__main__":
    torch.set_num_threads(1)
    done = [backfill(Path(c)) for c in sys.argv[1:]]
    print(f"stored {done.count(True)}, mismatched {done.count(False)}, skipped {done.count(None)}")
