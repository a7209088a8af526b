"""What a cell's results depend on besides its config: the shipped world weights it loads.

A cell id hashes the resolved config. The world model and the world judge are loaded from files in
the package (``grpo_bench/assets``), not named by the config, so rebuilding either (``grpo-bench
pretrain base|judge``) must change the ids of the cells that use them: otherwise a suite would skip
cells that ran with the old weights and mix two judges in one table. Real models are named by hub
id or folder in the config itself and add nothing here.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from typing import Any


@functools.cache
def _file_digest(path: str, mtime_ns: int, size: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:16]


def file_digest(path: Path) -> str:
    """sha256 (16 hex digits) of a file's bytes; 'missing' when it does not exist (loading will say so)."""
    p = Path(path)
    if not p.is_file():
        return "missing"
    st = p.stat()
    return _file_digest(str(p.resolve()), st.st_mtime_ns, st.st_size)


def asset_digests(cfg: Any) -> dict[str, str]:
    """{'model': digest, 'reward': digest} for the shipped world weights a run config loads."""
    out = {}
    if cfg.model == "world":
        from grpo_bench.models.world import DEFAULT_WEIGHTS as base

        out["model"] = file_digest(base)
    if cfg.reward == "world_judge":
        from grpo_bench.rewards.world_judge import DEFAULT_WEIGHTS as judge

        out["reward"] = file_digest(judge)
    return out
