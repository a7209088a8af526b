"""The one metrics sink of a run: ``metrics.jsonl`` (one JSON line per update), optionally mirrored
to accelerate's trackers (TensorBoard, W&B, … via ``Accelerator(log_with=...)``).

Lines are appended with fsync; a killed writer can leave one torn last line, which readers skip.
On resume the file is rewritten atomically with only the updates before the checkpoint, so the
updates redone after a crash appear once.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from grpo_bench.atomic import append_line, atomic_write_text, read_jsonl, strict_json

METRICS = "metrics.jsonl"


def hparams(config: dict[str, Any]) -> dict[str, Any]:
    """A run config as tracker hyper-parameters: scalars only (TensorBoard's ``add_hparams`` takes
    int, float, str and bool): None becomes "none", lists and mappings their JSON text."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        if value is None:
            out[key] = "none"
        elif isinstance(value, (bool, int, float, str)):
            out[key] = value
        else:
            out[key] = json.dumps(value, sort_keys=True, default=str)
    return out


def _clean(v: Any) -> Any:
    """JSON-safe values: non-finite floats become null."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    return v


class MetricsSink:
    def __init__(self, out_dir: Path, accelerator: Any = None) -> None:
        self.path = Path(out_dir) / METRICS
        self.accelerator = accelerator

    def truncate(self, before_update: int) -> list[dict[str, Any]]:
        """Keep the lines of updates < before_update (atomic rewrite, strict JSON); returns them.

        The kept lines are read back from disk, where a file written before lines were cleaned (or by hand) may
        hold a bare NaN: it is rewritten as null, like every line ``log`` writes."""
        rows = [r for r in read_jsonl(self.path) if int(r.get("update", -1)) < before_update]
        atomic_write_text(self.path, "".join(strict_json(r, sort_keys=True) + "\n" for r in rows))
        return rows

    def log(self, line: dict[str, Any]) -> None:
        line = {k: _clean(v) for k, v in line.items()}
        append_line(self.path, json.dumps(line, sort_keys=True))
        if self.accelerator is not None and self.accelerator.trackers:
            scalars = {k: v for k, v in line.items() if isinstance(v, (int, float)) and v is not None}
            self.accelerator.log(scalars, step=int(line["update"]))
