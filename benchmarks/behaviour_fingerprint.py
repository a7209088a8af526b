"""A behaviour fingerprint: short runs of every method on the tiny test model, hashed, to compare two commits.

For each method x KL (fixed, dual): 3 updates, an eval, diagnostics and checkpoints; prints the sha256 of
the metrics lines (timings, the compute_* counts and logp_gap left out: counting model passes or measuring the
rollout-vs-training log-prob gap changes no number of a run, and a fingerprint taken before these observational
keys existed stays comparable) and of the checkpoint tensors
(RNG states left out). A refactor that claims to change no behaviour must print the same lines before and
after, in one process and under data parallelism:

    git stash; python benchmarks/behaviour_fingerprint.py > before.txt; git stash pop
    python benchmarks/behaviour_fingerprint.py > after.txt && diff before.txt after.txt
    accelerate launch --num_processes 2 --cpu benchmarks/behaviour_fingerprint.py /tmp/fp   # 2 processes

(Under a launch every process must see one run folder: give it as the argument; it is emptied first.)

A fingerprint is a fact about a (commit, CPU) pair: float kernels differ between CPUs (an Intel Xeon with AMX
prints other hashes than an AMD EPYC for one commit), so it is recorded with the CPU and compared like with like:

    python benchmarks/behaviour_fingerprint.py --record reports/fingerprints.json

adds {commit: {cpu: sha256 of the printed lines}} for this checkout (its whole commit string, ``+dirty`` kept: a
dirty tree's cells count in the claims ledger only where its behaviour is recorded so) and this CPU, named by
its model and kernels as cells' machine lines name it ("AMD EPYC (AVX2)"; grpo_bench/suite/machine.py
``cpu_identity``; grpo_bench/report/claims/provenance.py), and the printed lines under that sha256 in
``fingerprint_lines.json`` beside it ({sha256: [line, ...]}; grpo_bench/report/claims/fingerprint_lines.py: an
entry whose lines do not hash to its key is refused when read).

Behaviour per row: each line is one row of the ledger's tables (a method under a KL reading: ``dance_grpo
fixed``; ``<method> own`` for the field's methods with the KL left to them). A line's run goes through the shared
core (rollout, loss, optimizer, KL, eval, checkpoints), so a change in shared code moves every line, and a change
in one method's recipe moves that method's lines. The ledger therefore treats two commits as one behaviour for a
comparison where their whole hashes agree on one CPU, or where both prints are stored and every row the
comparison reads is printed by both with the same line; a row either print lacks shows nothing. The lines of the
main four methods print first and in a fixed order, so that a print with added rows keeps them comparable.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "_support"))

from tiny_world import TinyModel, TinyReward  # noqa: E402

from grpo_bench.config.run import RunConfig  # noqa: E402
from grpo_bench.train.trainer import train  # noqa: E402

METHODS = ("dance_grpo", "flow_grpo", "cps", "sage_grpo")
FIELD = ("flow_grpo_fast", "mix_grpo", "grpo_guard", "flow_dppo", "tempflow_grpo", "diffusion_nft")
"""The field's methods, printed after the main four (whose lines stay comparable with older fingerprints), each at
its own KL on a 6-step schedule (Flow-DPPO's 3 sparse steps need 3 in the first half)."""
OBSERVATIONAL = ("wall_time", "logp_gap")
"""Metrics that observe a run without changing it (besides the time_* and compute_* families)."""


def fingerprint(method: str, kl: str | None, folder: Path, steps: int = 3) -> tuple[str, str] | None:
    """(metrics hash, checkpoint hash) of one short run; None on a process other than the main one."""
    from accelerate import PartialState

    cfg = RunConfig(method=method, kl=kl, steps=steps, prompts_per_update=2, group_size=2, updates=3, eval_every=2,
                    minibatches=1, eval_samples=2, diag_every=1, checkpoint_every=2, device="cpu", lr=1e-3,
                    save_videos=False, anchor_every=2, kl_adaptive=True, kl_warmup=1)
    train(cfg, folder, model=TinyModel(seed=0), reward=TinyReward())
    if not PartialState(cpu=True).is_main_process:
        return None
    lines = [json.loads(x) for x in (folder / "metrics.jsonl").read_text().splitlines()]
    lines = [{k: v for k, v in line.items() if not k.startswith(("time_", "compute_")) and k not in OBSERVATIONAL}
             for line in lines]
    tensors = hashlib.sha256()
    for f in sorted((folder / "checkpoints").rglob("*.safetensors")):
        if not f.name.startswith("rng_"):  # a process's RNG state is not behaviour
            tensors.update(f.name.encode())
            tensors.update(f.read_bytes())
    return hashlib.sha256(json.dumps(lines, sort_keys=True).encode()).hexdigest()[:16], tensors.hexdigest()[:16]


def main() -> None:
    from accelerate import PartialState

    args = sys.argv[1:]
    record = None
    if "--record" in args:
        at = args.index("--record")
        if at + 1 >= len(args):
            raise SystemExit("error: --record needs the fingerprints file (e.g. reports/fingerprints.json)")
        record = Path(args[at + 1])
        del args[at:at + 2]
    torch.set_num_threads(1)  # float sums reduce in another order with more threads
    printed = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args[0]) if args else Path(tmp)
        state = PartialState(cpu=True)
        if state.is_main_process and args:
            shutil.rmtree(root, ignore_errors=True)
        state.wait_for_everyone()
        for method in METHODS:
            for kl in ("fixed", "dual"):
                got = fingerprint(method, kl, root / f"{method}-{kl}")
                if got is not None:
                    printed.append(" ".join((method, kl, *got)))
                    print(printed[-1], flush=True)
        for method in FIELD:
            got = fingerprint(method, None, root / f"{method}-own", steps=6)
            if got is not None:
                printed.append(" ".join((method, "own", *got)))
                print(printed[-1], flush=True)
    if record is not None and state.is_main_process:
        from grpo_bench.report.claims.provenance import record_output
        from grpo_bench.suite.machine import cpu_identity, machine
        from grpo_bench.train.export import provenance

        commit, cpu = provenance()["git_commit"], cpu_identity(machine())  # "AMD EPYC (AVX2)": model and kernels
        digest = record_output(record, commit, cpu, printed)
        print(f"recorded {commit} on {cpu}: {digest} in {record}", file=sys.stderr)


if __name__ == "__main__":
    main()
