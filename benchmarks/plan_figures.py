"""The memory and time figures of docs/real_models.md, written from `grpo-bench plan`'s own estimate.

One row per shipped suite of a real checkpoint (a suite whose cells use a registered model with a hub id:
``suites/*.yaml``), with the plan's numbers over its cells exactly as ``grpo-bench plan SUITE`` computes them
(``grpo_bench.cli.plan.plan_cells`` at the default throughput, ``suite_totals``), between the two markers in
docs/real_models.md. tests/repo/test_plan_figures.py regenerates the table and fails when the document differs, so
a change to the plan, a suite or a model spec that moves a figure must rewrite the table:

    python benchmarks/plan_figures.py            # print the table
    python benchmarks/plan_figures.py --write    # rewrite it in docs/real_models.md
    python benchmarks/plan_figures.py --check    # exit 1 when the document's table differs
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "real_models.md"
SUITES = ROOT / "suites"
BEGIN = "<!-- plan-figures:begin (python benchmarks/plan_figures.py --write; tests/repo/test_plan_figures.py) -->"
END = "<!-- plan-figures:end -->"
HEADER = ("| suite | cells | GPUs per cell (sharding) | model | GPU GB per process | host GB per process | per update "
          "| per cell | GPU-hours | node-days |\n|---|---|---|---|---|---|---|---|---|---|")


def real_model_suites(folder: Path = SUITES) -> list[Path]:
    """The suites whose cells run a registered real checkpoint (its factory names a hub id)."""
    from grpo_bench import models
    from grpo_bench.report.picks import SourceNotStored
    from grpo_bench.report.suite_parts import load_suite_checked
    from grpo_bench.suite.expand import expand

    def real(name: str) -> bool:
        return name in models.MODELS and getattr(models.MODELS.get(name), "hub_id", None) is not None

    def cells(path: Path) -> list:
        try:
            return expand(load_suite_checked(path))
        except SourceNotStored:  # a pre-registered suite waiting for the report it picks from: no cells yet
            return []

    return [p for p in sorted(folder.glob("*.yaml")) if any(real(c.config.model) for c in cells(p))]


def _span(values: list[float], fmt) -> str:
    """'lo' when the cells agree once formatted, else 'lo–hi'."""
    lo, hi = fmt(min(values)), fmt(max(values))
    return lo if lo == hi else f"{lo}–{hi}"


def suite_row(path: Path) -> str:
    from grpo_bench.cli.plan import duration, plan_cells, suite_totals
    from grpo_bench.plan.estimate import GB
    from grpo_bench.report.suite_parts import load_suite_checked
    from grpo_bench.suite.expand import expand

    suite = load_suite_checked(path)
    plans = plan_cells(suite, expand(suite))
    ps = [p for _, p in plans]
    totals = suite_totals(plans)
    gb = lambda x: f"{x / GB:.1f}"  # noqa: E731 - as `grpo-bench plan` prints GB
    cells = [f"`{path.name}`", str(totals.cells), f"{totals.processes} ({ps[0].sharding})",
             ", ".join(sorted({p.model for p in ps})), _span([p.gpu_peak for p in ps], gb),
             _span([p.host_peak for p in ps], gb), _span([p.seconds_per_update for p in ps], duration),
             _span([p.seconds_per_cell for p in ps], duration), f"{totals.gpu_hours:,.0f}", f"{totals.node_days:,.1f}"]
    return "| " + " | ".join(cells) + " |"


def table(paths: list[Path] | None = None) -> str:
    """The block between the markers: the header and one row per suite."""
    rows = [suite_row(p) for p in (real_model_suites() if paths is None else paths)]
    return "\n".join([HEADER, *rows])


def doc_table(text: str) -> str:
    """The table between the markers of the document's text (ValueError when a marker is missing)."""
    if text.count(BEGIN) != 1 or text.count(END) != 1:
        raise ValueError(f"{DOC.name}: expected one {BEGIN!r} and one {END!r} line")
    return text.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n")


def with_table(text: str, block: str) -> str:
    doc_table(text)  # both markers present
    head, rest = text.split(BEGIN, 1)
    return f"{head}{BEGIN}\n{block}\n{END}{rest.split(END, 1)[1]}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help=f"rewrite the table in {DOC.relative_to(ROOT)}")
    mode.add_argument("--check", action="store_true", help="exit 1 when the document's table differs")
    args = ap.parse_args(argv)
    block = table()
    if args.write:
        DOC.write_text(with_table(DOC.read_text(), block))
        print(f"wrote {len(block.splitlines()) - 2} suites into {DOC.relative_to(ROOT)}")
        return 0
    if args.check:
        have = doc_table(DOC.read_text())
        if have != block:
            print(f"{DOC.relative_to(ROOT)}: plan figures differ from `grpo-bench plan`; run "
                  "`python benchmarks/plan_figures.py --write`", file=sys.stderr)
            return 1
        return 0
    print(block)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
