"""A cell's identity: what determines its trained trajectory and its final evaluation (docs/design.md §7).

One id names a run everywhere: its folder in a suite, ``cell.json``, ``final.json``, ``train --like``,
``train``'s default folder, the results table. It is a hash of

- the resolved config's **science fields** (method and its options, reward, prompts, sampling, budget,
  optimiser, trust region, evaluation size, model and adapter): every field except the ones declared
  ``execution`` in config/run.py (``EXECUTION_FIELDS``: where and how it computes, what it records on
  the way: device, threads, compute precision, micro-batching, gradient checkpointing, trackers,
  checkpoint cadence, evaluation and diagnostic cadence, saved videos), and except fields still at the
  value that reproduces the runs from before they existed (``ID_NEUTRAL``);
- the digests of the shipped world weights the run loads (``asset_digests``): the world model and judge
  are files of the package, not names in the config, so rebuilding either (``grpo-bench pretrain``)
  must change the ids of the cells that use them.

So the id does not depend on key order, on which file declared a value, on the host, its device or
thread count: a suite started on one machine resumes its finished cells on another. The compute
precision a cell actually ran at is recorded with it instead (``final.json``, the results table).
Like benchopt's ``prepare_cache_ignore``, leaving a field out is a claim that it does not change the
result beyond floating-point rounding; the execution fields are exactly the ones for which that holds
(micro-batching and precision change rounding only; the eval and diagnostic streams have their own
seeds, so their cadence never moves the trajectory).
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import Any

from grpo_bench.config.run import EXECUTION_FIELDS, ID_NEUTRAL, RunConfig

ID_LENGTH = 12


def science(cfg: RunConfig | dict[str, Any]) -> dict[str, Any]:
    """The fields that name the run: execution fields and id-neutral values left out."""
    data = cfg.to_dict() if isinstance(cfg, RunConfig) else dict(cfg)
    return {k: v for k, v in data.items()
            if k not in EXECUTION_FIELDS and not (k in ID_NEUTRAL and v == ID_NEUTRAL[k])}


def cell_id(cfg: RunConfig | dict[str, Any], length: int = ID_LENGTH) -> str:
    """The run's id: sha256 of its science fields and the digests of the shipped weights it loads.

    ``cfg`` is a resolved config (``resolve``), or its stored mapping (a run folder's config.yaml)."""
    data = cfg.to_dict() if isinstance(cfg, RunConfig) else dict(cfg)
    assets = asset_digests(data.get("model"), data.get("reward"))
    blob = json.dumps({**science(data), "assets": assets}, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:length]


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


def asset_digests(model: Any, reward: Any) -> dict[str, str]:
    """{'model': digest, 'reward': digest} for the shipped weights a run's ``model`` and ``reward`` (their config
    values) load: those a registered model or reward declares (``shipped_weights``: the embedded worlds' base
    models and judge).

    Real models are named by hub id or folder in the config itself and add nothing here."""
    from grpo_bench.models import MODELS
    from grpo_bench.rewards import REWARDS

    out = {}
    for key, name, registry in (("model", model, MODELS), ("reward", reward, REWARDS)):
        shipped = getattr(registry.get(name), "shipped_weights", None) if isinstance(name, str) and name in registry \
            else None
        if shipped is not None:
            out[key] = file_digest(shipped)
    return out
