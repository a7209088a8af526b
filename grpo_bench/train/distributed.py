"""Data-parallel GRPO on accelerate: shipped launch configs, the global batch split across ranks,
rewards gathered for group statistics, gradients averaged, per-rank noise seeds.

The global batch of one update is the P x G rollouts in group-major order (the single-process
order). Rank r of W samples the contiguous rows ``shard(P*G, r, W)``; a group may span ranks.
Every rank draws the same global initial noise (so a seed's noise is the same whatever W) and keeps
its rows; SDE noise comes from ``rank_seed(seed, r)`` (rank 0 keeps the run seed, so W = 1 is the
single-process run exactly). Rewards are computed where the videos were sampled, then
``gather_rewards`` concatenates them in rank order so every rank computes the same group
advantages over the whole batch and keeps its slice. After the backward passes,
``average_gradients`` all-reduces the trainable gradients (mean), so every rank applies the same
update and the parameters stay identical (the test launches two CPU processes and checks it).
Under the ``fsdp2`` and ``deepspeed_zero2`` configs FSDP or the DeepSpeed engine reduces the
gradients itself and ``average_gradients`` is not called (steppers.py: one class per launch).

Sequence parallelism (``sequence_parallel: sp``, models/sequence_parallel.py): the W processes form W/sp
groups of sp consecutive ranks; each group splits one video batch's tokens over its processes and is one
data-parallel rank. ``DataParallel`` is the accelerator as the data-parallel bookkeeping sees it: rank
``r // sp`` of ``W // sp``, so the rows, the seeds (the same noise inside a group), the gathered rewards and
eval scores (one copy per group), the counters (summed over groups) are those of W/sp plain processes. Every
process of a group holds a partial gradient (its tokens' share, the group's sum being the unsplit model's),
so ``average_gradients`` sums over all W processes and divides by W/sp: summed in a group, averaged over
groups. sp = 1 is the plain data-parallel run exactly.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor

from grpo_bench.config.accelerate_configs import config_path
from grpo_bench.errors import UserError
from grpo_bench.launch_log import first_error


# --- launch ------------------------------------------------------------------------------------
def launched() -> bool:
    """True inside a process started by ``accelerate launch`` (or torchrun)."""
    return "LOCAL_RANK" in os.environ or "ACCELERATE_PROCESS_ID" in os.environ


def launch_command(name: str, cli_args: list[str], num_processes: int | None = None) -> list[str]:
    """``accelerate launch --config_file <shipped config> -m grpo_bench.cli <cli_args>``."""
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(config_path(name))]
    if num_processes is not None:
        cmd += ["--num_processes", str(num_processes)]
    return [*cmd, "-m", "grpo_bench.cli", *cli_args]


def relaunch(name: str, argv: list[str]) -> int:
    """Run this ``grpo-bench`` command line again under ``accelerate launch`` with config ``name``;
    ``--accelerate-config NAME`` (or ``=NAME``) is dropped from ``argv``. Returns the exit code.
    A DeepSpeed config without DeepSpeed installed fails here, before any process starts."""
    import yaml

    if str((yaml.safe_load(config_path(name).read_text()) or {}).get("distributed_type", "")).upper() == "DEEPSPEED":
        require_deepspeed()
    args, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--accelerate-config":
            skip = True
        elif not a.startswith("--accelerate-config="):
            args.append(a)
    return _run_launcher(launch_command(name, args))


def _run_launcher(cmd: list[str]) -> int:
    """Run ``accelerate launch``, passing its stderr through, except after a user error: the launched
    processes print the same one-line ``error: ...`` each (printed once here, exit code 2) and the
    launcher's ChildFailedError traceback about it is dropped (no traceback for a user mistake)."""
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, errors="replace", bufsize=1)
    errors: list[str] = []
    tail: list[str] = []
    assert proc.stderr is not None
    for line in proc.stderr:
        tail = (tail + [line])[-2000:]
        if line.startswith("error: "):
            if line not in errors:
                errors.append(line)
                sys.stderr.write(line)
        elif not errors:
            sys.stderr.write(line)
        sys.stderr.flush()
    code = proc.wait()
    if code and not errors:  # one line to end the ranks' tracebacks: what failed first
        sys.stderr.write(f"error: accelerate launch exited with {code}: "
                         f"{first_error(''.join(tail)) or 'see the output above'}\n")
    return 2 if errors else code


# --- the global batch across ranks --------------------------------------------------------------
def rank_seed(seed: int, rank: int) -> int:
    """The seed of rank's own random streams (SDE noise): the run seed on rank 0, distinct and
    deterministic on the others (a hash, so nearby run seeds do not share streams)."""
    if rank == 0:
        return int(seed)
    digest = hashlib.sha256(f"grpo-bench:{int(seed)}:rank{int(rank)}".encode()).digest()
    return int.from_bytes(digest[:7], "little")


def shard(n: int, rank: int, world: int) -> slice:
    """This rank's contiguous rows of a global batch of n (n must divide by world)."""
    if n % world:
        raise UserError(
            f"prompts_per_update x group_size = {n} rollouts cannot be split evenly over {world} processes; "
            f"choose them so that {world} divides their product"
        )
    per = n // world
    return slice(rank * per, (rank + 1) * per)


def gather_rewards(local: Tensor, acc: Any) -> Tensor:
    """Rewards of every rank's rows, concatenated in rank order: Tensor[n] on every rank (CPU)."""
    if acc.num_processes == 1:
        return local
    return acc.gather(local.to(acc.device).contiguous()).cpu()


def gather_scores(scores: dict[str, Tensor], acc: Any) -> dict[str, Tensor]:
    """gather_rewards for every dimension of a reward's output (same keys on every rank)."""
    return {k: gather_rewards(v.float(), acc) for k, v in sorted(scores.items())}


class DataParallel:
    """The accelerator as the data-parallel bookkeeping sees it under sequence parallelism: one rank per group
    of ``sp`` consecutive processes (``process_index`` r // sp of ``num_processes`` W // sp); ``gather`` keeps
    one copy per group, ``reduce(..., "sum")`` counts a group once. The collectives still run on every process.
    Everything else (``device``, ``is_main_process``, ``autocast`` ...) is the accelerator's."""

    def __init__(self, acc: Any, sp: int) -> None:
        self.acc, self.sp = acc, int(sp)
        self.world_size = acc.num_processes  # every process: the collectives' size
        self.num_processes = self.world_size // self.sp
        self.process_index = acc.process_index // self.sp

    def __getattr__(self, name: str) -> Any:
        return getattr(self.acc, name)

    def gather(self, t: Tensor) -> Tensor:
        """Every group's ``t`` concatenated along dim 0 in group order (the first process's copy of each)."""
        every = self.acc.gather(t)  # [W * n, ...]: the processes' blocks in rank order
        return every.reshape(self.world_size, -1, *t.shape[1:])[:: self.sp].reshape(-1, *t.shape[1:])

    def reduce(self, t: Tensor, reduction: str = "sum") -> Tensor:
        out = self.acc.reduce(t, reduction)
        return out / self.sp if reduction == "sum" and self.sp > 1 else out


def data_parallel(acc: Any, sp: int = 1) -> Any:
    """``acc`` itself for sp = 1, else its ``DataParallel`` view."""
    return acc if int(sp) <= 1 else DataParallel(acc, sp)


def check_sequence_parallel(sp: int, world: int, model: str, where: str = "") -> int:
    """One-line refusals of a sequence-parallel launch, before any model is built; the data-parallel size.

    sp must divide the processes. The DeepSpeed engine reduces gradients as a mean over every process, which
    is not the sum a group's partial gradients need, so ``deepspeed_zero2`` is refused with sp > 1 (under fsdp2
    the stepper multiplies FSDP's mean by sp: steppers.py ``FSDP2Stepper.step``)."""
    if sp <= 1:
        return world
    from grpo_bench.models.sequence_parallel import check_degree

    dp = check_degree(sp, world, where)
    if os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true":
        raise UserError(f"{where}config key 'sequence_parallel' ({sp}) is not supported with the deepspeed_zero2 "
                        "accelerate config (its engine averages gradients over every process; a sequence-parallel "
                        "group's partial gradients must be summed); use fsdp2 or multi_gpu, or sequence_parallel: 1")
    return dp


def average_gradients(params: Iterable[torch.nn.Parameter], acc: Any) -> None:
    """All-reduce the gradients of the trainable parameters, in one flat buffer: the mean over the processes,
    or under sequence parallelism (``DataParallel``) the sum over all of them divided by the groups."""
    if getattr(acc, "world_size", acc.num_processes) == 1:
        return
    params = [p for p in params if p.requires_grad]
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    flat = torch.cat([p.grad.reshape(-1).float() for p in params])
    torch.distributed.all_reduce(flat, op=torch.distributed.ReduceOp.SUM)
    flat /= acc.num_processes
    offset = 0
    for p in params:
        n = p.grad.numel()
        p.grad.copy_(flat[offset : offset + n].view_as(p.grad))
        offset += n


def parameter_digest(params: Iterable[Tensor]) -> str:
    """A hash of parameter values (to check that ranks agree); FSDP2 shards are gathered into full
    tensors first (a collective: every rank must call it)."""
    from grpo_bench.train.sharding import full

    h = hashlib.sha256()
    for p in params:
        h.update(full(p.detach()).float().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def require_deepspeed() -> None:
    """The deepspeed_zero2 config without DeepSpeed installed: say what to install, before any launch."""
    import importlib.util

    if importlib.util.find_spec("deepspeed") is None:
        raise UserError("--accelerate-config deepspeed_zero2 needs DeepSpeed: `pip install deepspeed` "
                        "(or `pip install 'grpo-bench[deepspeed]'`); --accelerate-config fsdp2 shards without it")
