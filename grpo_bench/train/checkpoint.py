"""Resumable training state in formats that cannot run code: safetensors for tensors, JSON for the rest.

A run folder is untrusted input (someone shares it, a suite is copied), so resuming never unpickles
anything. A checkpoint ``checkpoints/update_NNNNNN/`` holds

    state.json                  format, update, the structure of every state below (JSON)
    trainable.safetensors       the trainable parameters (full tensors; FSDP2 shards are gathered)
    anchors.safetensors         the KL anchors' snapshots
    optimizer.safetensors       the optimizer's tensors (AdamW moments and steps)
    rng_<rank>.safetensors      each process's torch RNG state (+ CUDA); python/numpy RNG in state.json
    engine/                     DeepSpeed launches only: the engine's own partitioned checkpoint,
                                written by ``Accelerator.save_state``, read with ``torch.load(weights_only=True)``

The KL-weight controller and the counters are plain JSON in state.json. Nested state dicts (an
optimizer's ``{"state": {0: {...}}, "param_groups": [...]}``) are stored as a JSON skeleton whose
tensor leaves name entries of the safetensors file (``flatten``/``unflatten``).

A checkpoint is written to a hidden ``.tmp-update_*`` folder and renamed into place, so a killed
run leaves only complete checkpoints; a leftover temp folder is removed on the next save or start.
A checkpoint that cannot be read (torn, edited, foreign) is skipped with a warning naming it and
the previous one is used; the two newest are kept (the older one is the fallback), pruned only after a
new one is complete.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from grpo_bench.atomic import atomic_write, atomic_write_json
from grpo_bench.errors import UserError
from grpo_bench.train import sharding
from grpo_bench.train.state import CorruptCheckpoint, TrainState

CHECKPOINTS = "checkpoints"
FORMAT = "grpo-bench/checkpoint/2"
STATE = "state.json"
_NAME = re.compile(r"^update_(\d+)$")
TMP_PREFIX = ".tmp-update_"


class TrainableState:
    """The trainable parameters of a module (requires_grad only)."""

    def __init__(self, module: nn.Module) -> None:
        self.module = module
        self.params = {n: p for n, p in module.named_parameters() if p.requires_grad}

    def state_dict(self) -> dict[str, Any]:
        """Full tensors on the CPU (FSDP2 shards are gathered: every rank must call it)."""
        return {n: sharding.full(p.detach()).cpu().clone() for n, p in self.params.items()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        missing = sorted(set(self.params) - set(state))
        if missing:
            raise CorruptCheckpoint(f"checkpoint lacks trainable parameter(s) {missing[:3]}")
        for n, p in self.params.items():
            if tuple(state[n].shape) != tuple(p.shape):
                raise CorruptCheckpoint(f"checkpoint parameter {n!r} has shape {tuple(state[n].shape)}, "
                                        f"the model {tuple(p.shape)}")
            sharding.load_into(p.data, state[n])  # a sharded parameter takes its own slice
        if sharding.is_sharded(self.params.values()):
            sharding.reshard(self.module)  # no stale all-gathered copy survives the load


def flatten(obj: Any, tensors: dict[str, torch.Tensor], path: str = "") -> Any:
    """A JSON-able skeleton of ``obj``; its tensors go to ``tensors`` under their path."""
    if isinstance(obj, torch.Tensor):
        tensors[path] = obj.detach().cpu().contiguous().clone()
        return {"__tensor__": path}
    if isinstance(obj, np.ndarray):  # small (numpy's RNG key): kept in the JSON, with its dtype
        return {"__ndarray__": obj.tolist(), "dtype": str(obj.dtype)}
    if isinstance(obj, dict):
        return {"__dict__": [[k, flatten(v, tensors, f"{path}/{k}")] for k, v in obj.items()]}
    if isinstance(obj, (list, tuple)):
        items = [flatten(v, tensors, f"{path}/{i}") for i, v in enumerate(obj)]
        return {"__tuple__": items} if isinstance(obj, tuple) else items
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, (np.integer, np.floating)):
        return obj.item()
    raise TypeError(f"cannot store a {type(obj).__name__} at {path!r} in a checkpoint")


def unflatten(skel: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(skel, dict):
        if set(skel) == {"__tensor__"}:
            return tensors[skel["__tensor__"]]
        if set(skel) == {"__ndarray__", "dtype"}:
            return np.asarray(skel["__ndarray__"], dtype=np.dtype(skel["dtype"]))
        if set(skel) == {"__dict__"}:
            return {k: unflatten(v, tensors) for k, v in skel["__dict__"]}
        if set(skel) == {"__tuple__"}:
            return tuple(unflatten(v, tensors) for v in skel["__tuple__"])
        raise CorruptCheckpoint(f"unexpected entry {sorted(skel)[:3]} in {STATE}")
    if isinstance(skel, list):
        return [unflatten(v, tensors) for v in skel]
    return skel


def _write_tensors(path: Path, tensors: dict[str, torch.Tensor]) -> None:
    from safetensors.torch import save_file

    atomic_write(path, lambda tmp: save_file(tensors, str(tmp)))


def _read_tensors(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    try:
        return load_file(str(path))
    except Exception as exc:  # safetensors raises its own error types for torn or foreign files
        raise CorruptCheckpoint(f"{path.name}: {exc}") from None


# --- RNG ------------------------------------------------------------------------------------------
def rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {
        "python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(list(state["cuda"]))


# --- safe torch.load for the engine checkpoints that have no other format -----------------------------
@contextlib.contextmanager
def weights_only_loads() -> Iterator[None]:
    """Inside the block every ``torch.load`` (a library's too, e.g. DeepSpeed's, which asks for
    ``weights_only=False``) runs with ``weights_only=True``: tensors and plain containers only."""
    original = torch.load

    def safe_load(*args: Any, **kwargs: Any) -> Any:
        kwargs["weights_only"] = True
        return original(*args, **kwargs)

    torch.load = safe_load
    try:
        with torch.serialization.safe_globals(_engine_globals()):
            yield
    finally:
        torch.load = original


def _engine_globals() -> list[Any]:
    """Plain data types that accelerate's RNG files and DeepSpeed's ZeRO files hold besides tensors
    (numpy arrays, a loss-scaler record, an enum, a named tuple); allowing them lets no code run."""
    from accelerate.utils.other import TORCH_SAFE_GLOBALS

    allowed = list(TORCH_SAFE_GLOBALS)
    try:
        from deepspeed.runtime.fp16.loss_scaler import LossScaler
        from deepspeed.runtime.zero.config import ZeroStageEnum
        from deepspeed.utils.tensor_fragment import fragment_address

        allowed += [LossScaler, ZeroStageEnum, fragment_address]
    except ImportError:  # no DeepSpeed: no engine checkpoints to read
        pass
    return allowed


# --- folders ----------------------------------------------------------------------------------------
def _all(root: Path) -> list[tuple[int, Path]]:
    return [(int(m.group(1)), p) for p in root.glob("update_*") if (m := _NAME.match(p.name)) and p.is_dir()]


def latest(out_dir: Path) -> tuple[int, Path] | None:
    """(update, folder) of the newest checkpoint folder, or None."""
    found = _all(Path(out_dir) / CHECKPOINTS)
    return max(found) if found else None


def clean_temp(out_dir: Path) -> None:
    """Remove temp folders of a save that was killed (they are never read)."""
    root = Path(out_dir) / CHECKPOINTS
    for p in root.glob(f"{TMP_PREFIX}*"):
        shutil.rmtree(p, ignore_errors=True)


def save(state: TrainState, acc: Any, out_dir: Path, update: int, keep: int = 2) -> Path:
    """The run's state after ``update`` completed updates; atomic; keeps the newest ``keep`` checkpoints.

    Every rank must call it, with its accelerator ``acc`` (gathering FSDP2 shards is a collective)."""
    root = Path(out_dir) / CHECKPOINTS
    final = root / f"update_{update:06d}"
    tmp = root / f"{TMP_PREFIX}{update:06d}"  # one name for all processes: each writes its own files
    main = acc.is_main_process
    if main:
        root.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
    acc.wait_for_everyone()
    tmp.mkdir(parents=True, exist_ok=True)
    # collectives first, on every rank; the main process writes
    trainable = TrainableState(state.stepper.module).state_dict()
    anchors = state.anchors.state_dict()
    optimizer = state.stepper.optimizer_state()
    rng: dict[str, torch.Tensor] = {}
    rng_skel = flatten(rng_state(), rng)
    _write_tensors(tmp / f"rng_{acc.process_index}.safetensors", rng)
    atomic_write_json(tmp / f"rng_{acc.process_index}.json", rng_skel, round_trip=True)
    if state.stepper.engine_checkpoint:
        acc.save_state(str(tmp / "engine"))
    if main:
        anchor_t: dict[str, torch.Tensor] = {}
        opt_t: dict[str, torch.Tensor] = {}
        record = {
            "format": FORMAT, "update": update, "counters": state.counters.state_dict(),
            "compute": state.compute.state_dict(),
            "kl_weight": flatten(state.kl_weight.state_dict(), {}),
            "anchors": flatten(anchors, anchor_t),
            "optimizer": flatten(optimizer, opt_t) if optimizer is not None else None,
        }
        _write_tensors(tmp / "trainable.safetensors", trainable)
        _write_tensors(tmp / "anchors.safetensors", anchor_t)
        _write_tensors(tmp / "optimizer.safetensors", opt_t)
        atomic_write_json(tmp / STATE, record, round_trip=True)  # last: a folder without state.json is incomplete
    acc.wait_for_everyone()
    if main:
        if final.exists():  # re-saving the same point after a crash: replace it
            shutil.rmtree(final)
        os.replace(tmp, final)
        for _, path in sorted((x for x in _all(root) if x[0] != update), reverse=True)[max(keep - 1, 0):]:
            shutil.rmtree(path, ignore_errors=True)
    acc.wait_for_everyone()
    return final


def load(state: TrainState, acc: Any, folder: Path) -> None:
    """Restore a run's state in place from a checkpoint folder written by ``save``. Reads only JSON and
    safetensors (and, under DeepSpeed, the engine's files with weights_only=True); anything else in
    the folder (a planted ``*.pkl``) is never opened. Every file is read and checked before any state
    changes; raises CorruptCheckpoint if the folder cannot be read."""
    folder = Path(folder)
    try:
        record = json.loads((folder / STATE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CorruptCheckpoint(f"{STATE} is missing (incomplete, or written by an older grpo-bench)") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptCheckpoint(f"{STATE} is not valid JSON ({exc})") from None
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        raise CorruptCheckpoint(f"{STATE} is not a {FORMAT} checkpoint")
    rank = acc.process_index
    try:  # phase 1: read everything (nothing changes yet)
        trainable = _read_tensors(folder / "trainable.safetensors")
        anchors = unflatten(record["anchors"], _read_tensors(folder / "anchors.safetensors"))
        optimizer = (unflatten(record["optimizer"], _read_tensors(folder / "optimizer.safetensors"))
                     if record["optimizer"] is not None else None)
        kl_weight = unflatten(record["kl_weight"], {})
        counters = record["counters"]
        compute = _compute_record(record.get("compute", {}))  # absent before the counters (compute.py)
        rng = None
        if (folder / f"rng_{rank}.json").is_file():  # resumed on more processes than saved: fresh RNG
            rng = unflatten(json.loads((folder / f"rng_{rank}.json").read_text()),
                            _read_tensors(folder / f"rng_{rank}.safetensors"))
    except CorruptCheckpoint:
        raise
    except Exception as exc:  # a tampered or torn folder: never a traceback, the caller falls back
        raise CorruptCheckpoint(f"{type(exc).__name__}: {exc}") from None
    try:  # phase 2: apply
        TrainableState(state.stepper.module).load_state_dict(trainable)
        state.anchors.load_state_dict(anchors)
        if optimizer is not None:
            state.stepper.load_optimizer_state(optimizer)
        if state.stepper.engine_checkpoint:
            with weights_only_loads():
                acc.load_state(str(folder / "engine"))
        state.kl_weight.load_state_dict(kl_weight)
        state.counters.load_state_dict(counters)
        state.compute.load_state_dict(compute)
        if rng is not None:
            set_rng_state(rng)
    except CorruptCheckpoint:
        raise
    except Exception as exc:
        raise CorruptCheckpoint(f"{type(exc).__name__}: {exc}") from None


def resume(state: TrainState, acc: Any, out_dir: Path) -> Path | None:
    """Load the newest readable checkpoint; an unreadable one is reported and the previous one tried.
    Returns the folder loaded, or None (start from scratch)."""
    clean_temp(out_dir)
    found = sorted(_all(Path(out_dir) / CHECKPOINTS), reverse=True)
    for _, folder in found:
        try:
            load(state, acc, folder)
            return folder
        except CorruptCheckpoint as exc:
            print(f"warning: checkpoint {folder} is unreadable ({exc}); trying the previous one", file=sys.stderr)
    if found:  # the model may hold part of a bad checkpoint: starting over silently would be wrong
        raise UserError(f"{out_dir}: no readable checkpoint in {Path(out_dir) / CHECKPOINTS}; "
                        "use --no-resume to start the run over")
    return None


def clear(out_dir: Path) -> None:
    shutil.rmtree(Path(out_dir) / CHECKPOINTS, ignore_errors=True)


def _compute_record(record: Any) -> dict[str, float]:
    """The compute totals of a state.json: a mapping of finite numbers (anything else is a corrupt folder)."""
    ok = isinstance(record, dict) and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in record.values())
    if not ok:
        raise CorruptCheckpoint(f"compute: not a mapping of finite numbers: {record!r}")
    return record
