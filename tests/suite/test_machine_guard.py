"""A table's cells run on one kind of machine (suite/machine.py ``refuse_other_hardware``, called by `run` before
any cell starts): one commit computes other numbers on another CPU, so a look added elsewhere would be another
behaviour. A tuning grid only selects and may mix."""

from __future__ import annotations

import json
import re

import pytest
from rich.console import Console
from suite_support import SMALL_SUITE, TRAINER

from grpo_bench.errors import UserError
from grpo_bench.suite import machine as machine_mod
from grpo_bench.suite.expand import expand
from grpo_bench.suite.machine import cpu_identity, finished_hardware, hardware, same_hardware
from grpo_bench.suite.parse import parse_suite
from grpo_bench.suite.results import read_table, write_table
from grpo_bench.suite.run_folder import DONE, ROWS

AMD = "AMD EPYC, 2 CPUs, no GPU, torch 2.13.0+cpu, Linux 6.1"
INTEL = "Intel(R) Xeon(R) Processor, 2 CPUs, no GPU, torch 2.13.0+cpu, Linux 6.1"


def test_hardware_is_the_gpu_where_there_is_one_else_the_cpu_model():
    assert hardware(AMD) == "AMD EPYC"
    assert hardware("Intel(R) Xeon(R) Platinum, 16 CPUs, NVIDIA H100 80GB HBM3, torch 2.13.0, Linux") == \
        "NVIDIA H100 80GB HBM3"
    assert hardware("") == "?"


def test_one_cpu_model_name_covers_several_kernels_and_they_are_told_apart():
    """Two AMD EPYCs both read "AMD EPYC": one with AVX512-BF16 (the world runs bf16), one with AVX2 only (fp32).
    A line names its kernels now; an older line is read through its cell's precision (bf16 only with the units)."""
    avx2, bf16 = AMD + ", AVX2 kernels", AMD + ", AVX512-BF16 kernels"
    assert cpu_identity(avx2) == hardware(avx2) == "AMD EPYC (AVX2)"
    assert cpu_identity(AMD) == "AMD EPYC"
    assert hardware(AMD, "bf16") == "AMD EPYC (bf16 units)" and hardware(AMD, "no") == "AMD EPYC"
    assert hardware(bf16, "bf16") == "AMD EPYC (AVX512-BF16)"  # a line's own kernels over what precision tells
    assert not same_hardware(hardware(AMD, "bf16"), hardware(avx2))
    assert same_hardware(hardware(AMD, "bf16"), hardware(bf16)) and same_hardware(hardware(bf16), hardware(AMD, "bf16"))
    assert not same_hardware(hardware(avx2), "AMD EPYC (AVX512)")
    assert same_hardware(hardware(AMD, "no"), hardware(avx2))  # an older fp32 line tells nothing: not refused
    assert not same_hardware(hardware(INTEL, "bf16"), hardware(bf16))  # another CPU model



def _ran_on(cell_dir, line: str, precision: str | None = None) -> None:
    """Rewrite a finished cell's rows as if it had run on ``line``'s machine (at ``precision`` where given)."""
    frame = read_table(cell_dir / ROWS)
    at = frame.index[frame["kind"] == "cell"]
    extra = {"precision": precision} if precision is not None else {}
    frame.loc[at, "text"] = [json.dumps({**json.loads(t), "machine": line, **extra}) for t in frame.loc[at, "text"]]
    write_table(cell_dir / ROWS, frame)


def _finished(tmp_path, monkeypatch, name: str = "tiny"):
    """A small suite run to the end here as if on the AMD EPYC: (its cells, its folder, a function running it)."""
    from grpo_bench.cli.suite import execute

    suite = parse_suite({**SMALL_SUITE, "name": name}, "tiny.yaml")
    console = Console(file=open(tmp_path / "out.txt", "w"), width=200)

    def run():
        execute(suite, tmp_path, 2, "local", False, True, console, trainer=TRAINER, render=False)

    monkeypatch.setattr(machine_mod, "machine", lambda: AMD)
    run()
    return expand(suite), tmp_path / suite.name, run


def test_a_table_resumed_on_other_hardware_is_refused_before_any_cell_runs(tmp_path, monkeypatch):
    cells, folder, run = _finished(tmp_path, monkeypatch)
    for c in cells:
        _ran_on(folder / c.id, AMD if c is not cells[0] else INTEL)
    assert finished_hardware(folder, [c.id for c in cells]) == {
        "AMD EPYC": [c.id for c in cells[1:]], "Intel(R) Xeon(R) Processor": [cells[0].id]}
    # every cell finished: nothing would run, nothing to refuse
    run()
    (folder / cells[-1].id / DONE).unlink()
    started = (folder / cells[-1].id / "final.json").stat().st_mtime_ns
    with pytest.raises(UserError, match=re.escape(f"({len(cells) - 2} on AMD EPYC, 1 on Intel(R) Xeon(R) Processor)"
                                                  "; this machine is NVIDIA H100")):
        monkeypatch.setattr(machine_mod, "machine", lambda: "x, 8 CPUs, NVIDIA H100, torch, Linux")
        run()
    assert (folder / cells[-1].id / "final.json").stat().st_mtime_ns == started  # refused before it ran
    # the folder's cells all on the AMD EPYC and this machine one too: the unfinished cell runs
    _ran_on(folder / cells[0].id, AMD)
    monkeypatch.setattr(machine_mod, "machine", lambda: AMD)
    run()
    assert (folder / cells[-1].id / DONE).is_file()


def test_a_tuning_grid_may_mix_hardware(tmp_path, monkeypatch):
    from grpo_bench.suite.tune import TUNE_SUFFIX

    cells, folder, run = _finished(tmp_path, monkeypatch, "tiny" + TUNE_SUFFIX)
    _ran_on(folder / cells[0].id, INTEL)
    (folder / cells[-1].id / DONE).unlink()
    monkeypatch.setattr(machine_mod, "machine", lambda: AMD)
    run()
    assert (folder / cells[-1].id / DONE).is_file()


def test_a_table_of_bf16_cells_is_not_resumed_on_a_cpu_of_the_same_name_without_bf16_units(tmp_path, monkeypatch):
    """The stored tables' cells name "AMD EPYC" and ran at bf16; an AMD EPYC with AVX2 only would run the rest at
    fp32: another behaviour under the same name (measured: every fingerprint row differs), refused before it runs."""
    cells, folder, run = _finished(tmp_path, monkeypatch)
    for c in cells:
        _ran_on(folder / c.id, AMD, "bf16")  # written before machine lines named their kernels
    (folder / cells[-1].id / DONE).unlink()
    monkeypatch.setattr(machine_mod, "machine", lambda: AMD + ", AVX2 kernels")
    with pytest.raises(UserError, match=re.escape(f"({len(cells) - 1} on AMD EPYC (bf16 units)); this machine is "
                                                  "AMD EPYC (AVX2)")):
        run()
    assert not (folder / cells[-1].id / DONE).is_file()
    monkeypatch.setattr(machine_mod, "machine", lambda: AMD + ", AVX512-BF16 kernels")
    run()
    assert (folder / cells[-1].id / DONE).is_file()
