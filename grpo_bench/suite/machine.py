"""The one line naming the machine a cell ran on (stored in the cell's row, shown in the report header)."""

from __future__ import annotations

import json
import os
from pathlib import Path


def host() -> str:
    """This host's CPU model and core count: the start of ``machine()``, read without importing torch."""
    import platform

    cpu = platform.processor() or platform.machine()
    info = Path("/proc/cpuinfo")
    if info.is_file():
        cpu = next((ln.split(":", 1)[1].strip() for ln in info.read_text().splitlines()
                    if ln.startswith("model name")), cpu)
    return f"{cpu}, {os.cpu_count()} CPUs"


def machine() -> str:
    """One line naming the machine a cell ran on (for the report header)."""
    import platform

    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return f"{host()}, {gpu}, torch {torch.__version__}, {platform.system()} {platform.release()}"


def cpu_of(machine_line: str) -> str:
    """The CPU model of a machine line ("AMD EPYC, 2 CPUs, no GPU, torch ..." -> "AMD EPYC")."""
    return str(machine_line or "").split(",", 1)[0].strip() or "?"


def hardware(machine_line: str) -> str:
    """What a cell's numbers depend on, from its machine line: the GPU where it ran on one, else the CPU model
    (``cpu_of``); float kernels differ between them."""
    parts = [p.strip() for p in str(machine_line or "").split(",")]
    gpu = parts[2] if len(parts) > 2 else "no GPU"
    return gpu if gpu != "no GPU" else cpu_of(machine_line)


def finished_hardware(suite_dir: Path, cell_ids: list[str]) -> dict[str, list[str]]:
    """{hardware: [cell id, ...]} of the finished cells among ``cell_ids`` in ``suite_dir`` (restored cells keep
    the machine they ran on); a cell whose rows name no machine is left out."""
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
            line = json.loads(text.iloc[0]).get("machine", "") if len(text) else ""
        except Exception:  # an unreadable rows file is rebuilt at aggregation; it names no machine here
            continue
        if line:
            out.setdefault(hardware(line), []).append(cid)
    return out


def refuse_other_hardware(suite_dir: Path, cell_ids: list[str], here: str) -> None:
    """Before a table's cells run: refuse in one line when its finished cells ran on other hardware than ``here``
    (``hardware(machine())``). A table compares cells of one behaviour, and one commit computes other numbers
    on another CPU (docs/statistics.md), so a table's later cells run where its first ones did."""
    from grpo_bench.errors import UserError
    from grpo_bench.suite.run_folder import is_done

    if all(is_done(suite_dir / c) for c in cell_ids):
        return
    other = {hw: ids for hw, ids in finished_hardware(suite_dir, cell_ids).items() if hw != here}
    if other:
        held = ", ".join(f"{len(ids)} on {hw}" for hw, ids in sorted(other.items()))
        raise UserError(f"{suite_dir}: its finished cells ran on other hardware ({held}); this machine is {here}, "
                        "and a table's cells must run on one kind of machine to be one behaviour: run it where they "
                        "ran, or into a fresh --out folder")
