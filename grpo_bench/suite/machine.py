"""The one line naming the machine a cell ran on (stored in the cell's row, shown in the report header)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from grpo_bench.cpu_kernels import capped


def host() -> str:
    """This host's CPU model and core count: the start of ``machine()``, read without importing torch."""
    import platform

    cpu = platform.processor() or platform.machine()
    info = Path("/proc/cpuinfo")
    if info.is_file():
        cpu = next((ln.split(":", 1)[1].strip() for ln in info.read_text().splitlines()
                    if ln.startswith("model name")), cpu)
    return f"{cpu}, {os.cpu_count()} CPUs"


def kernels() -> str:
    """The float kernels torch runs here on the CPU: ``AVX2`` under the portable caps (grpo_bench/cpu_kernels.py),
    else ``AMX`` or ``AVX512-BF16`` where the CPU has bf16 units, else torch's dispatch level (``AVX512``, ``AVX2``,
    ``DEFAULT``). One CPU model name covers several of these (an AMD EPYC with AVX512-BF16 and one with AVX2 only both
    read "AMD EPYC"), and one commit computes other numbers under each: the world runs bf16 on the first and fp32 on
    the second."""
    import torch

    level = str(torch.backends.cpu.get_cpu_capability())
    if capped() and level == "AVX2":
        return level
    if getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)():
        return "AMX"
    if getattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)():
        return "AVX512-BF16"
    return level


def machine() -> str:
    """One line naming the machine a cell ran on (for the report header), its CPU's kernels last."""
    import platform

    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return f"{host()}, {gpu}, torch {torch.__version__}, {platform.system()} {platform.release()}, {kernels()} kernels"


def cpu_of(machine_line: str) -> str:
    """The CPU model of a machine line ("AMD EPYC, 2 CPUs, no GPU, torch ..." -> "AMD EPYC")."""
    return str(machine_line or "").split(",", 1)[0].strip() or "?"


KERNELS = " kernels"
PORTABLE = "AVX2"
"""The kernels that compute alike on every CPU model that runs them (grpo_bench/cpu_kernels.py)."""
BF16_UNITS = "bf16 units"
"""What a machine line written before lines named their kernels tells of them, where its cell ran at bf16 on the
CPU: ``auto`` resolves to bf16 only on a CPU with bf16 units (AMX or AVX512-BF16)."""


def cpu_identity(machine_line: str) -> str:
    """The CPU model with the kernels the line names ("AMD EPYC (AVX2)"), or the model alone for a line written
    before lines named them ("AMD EPYC")."""
    parts = [p.strip() for p in str(machine_line or "").split(",")]
    named = [p[: -len(KERNELS)] for p in parts[1:] if p.endswith(KERNELS)]
    return f"{cpu_of(machine_line)} ({named[-1]})" if named else cpu_of(machine_line)


def hardware(machine_line: str, precision: str = "") -> str:
    """What a cell's numbers depend on, from its machine line: the GPU where it ran on one, else the CPU model and
    its kernels (``cpu_identity``); float kernels differ between them. For a line that names no kernels, a cell
    that ran at ``precision`` bf16 on the CPU names ``BF16_UNITS`` in their place."""
    parts = [p.strip() for p in str(machine_line or "").split(",")]
    gpu = parts[2] if len(parts) > 2 else "no GPU"
    if gpu != "no GPU":
        return gpu
    cpu = cpu_identity(machine_line)
    return f"{cpu} ({BF16_UNITS})" if cpu == cpu_of(machine_line) and precision == "bf16" else cpu


def _split(hw: str) -> tuple[str, str | None]:
    """("AMD EPYC", "AVX2") from "AMD EPYC (AVX2)"; (hw, None) where it names no kernels."""
    m = re.fullmatch(r"(.*) \(([^()]*)\)", hw)
    return (m.group(1), m.group(2)) if m else (hw, None)


def same_hardware(a: str, b: str) -> bool:
    """Whether cells on ``a`` and ``b`` (``hardware`` strings) compute alike: equal; or both ran AVX2 kernels, on
    any CPU model (an Intel Xeon under the portable caps reproduced an AMD EPYC with AVX2 only's held-out scores,
    grpo_bench/cpu_kernels.py); or one CPU model where one side names no kernels (an older line at fp32: nothing
    tells, so nothing is refused), or one names bf16 units and the other kernels that have them."""
    (cpu_a, k_a), (cpu_b, k_b) = _split(a), _split(b)
    if a == b or k_a == k_b == PORTABLE:
        return True
    if cpu_a != cpu_b:
        return False
    if k_a is None or k_b is None:
        return True
    return BF16_UNITS in (k_a, k_b) and {k_a, k_b} <= {BF16_UNITS, "AMX", "AVX512-BF16"}


def finished_hardware(suite_dir: Path, cell_ids: list[str]) -> dict[str, list[str]]:
    """{hardware: [cell id, ...]} of the finished cells among ``cell_ids`` in ``suite_dir`` (restored cells keep
    the machine and precision they ran at); a cell whose rows name no machine is left out."""
    from grpo_bench.suite.results import read_table
    from grpo_bench.suite.run_folder import ROWS, is_done

    out: dict[str, list[str]] = {}
    for cid in cell_ids:
        rows = suite_dir / cid / ROWS
        if not (is_done(suite_dir / cid) and rows.is_file()):
            continue
        try:
            frame = read_table(rows, ["kind", "text"])
            text = frame.loc[frame["kind"] == "cell", "text"].dropna()
            info = json.loads(text.iloc[0]) if len(text) else {}
            line, precision = str(info.get("machine") or ""), str(info.get("precision") or "")
        except Exception:  # an unreadable rows file is rebuilt at aggregation; it names no machine here
            continue
        if line:
            out.setdefault(hardware(line, precision), []).append(cid)
    return out


def refuse_other_hardware(suite_dir: Path, cell_ids: list[str], here: str) -> None:
    """Before a table's cells run: refuse in one line when its finished cells ran on other hardware than ``here``
    (``hardware(machine())``; ``same_hardware``). A table compares cells of one behaviour, and one commit computes
    other numbers on another CPU (docs/statistics.md), so a table's later cells run where its first ones did."""
    from grpo_bench.errors import UserError
    from grpo_bench.suite.run_folder import is_done

    if all(is_done(suite_dir / c) for c in cell_ids):
        return
    other = {hw: ids for hw, ids in finished_hardware(suite_dir, cell_ids).items() if not same_hardware(hw, here)}
    if other:
        held = ", ".join(f"{len(ids)} on {hw}" for hw, ids in sorted(other.items()))
        raise UserError(f"{suite_dir}: its finished cells ran on other hardware ({held}); this machine is {here}, "
                        "and a table's cells must run on one kind of machine to be one behaviour: run it where they "
                        "ran, or into a fresh --out folder")
