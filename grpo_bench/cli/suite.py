"""The work behind ``grpo-bench run``, ``ablate`` and ``report`` (the CLI only declares arguments)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table

from grpo_bench.errors import UserError
from grpo_bench.suite import results
from grpo_bench.suite.runner import TRAINER, RunSummary, run_suite
from grpo_bench.suite.spec import Cell, Suite, ablation, expand, load_suite
from grpo_bench.train.config import parse_overrides

DEFAULT_ABLATE_BASE = "ablate_kl.yaml"


def suites_dir() -> Path:
    """suites/ of the working folder, else the one next to the installed package (a source checkout)."""
    here = Path("suites")
    return here if here.is_dir() else Path(__file__).resolve().parents[2] / "suites"


def _status(cdir: Path) -> str:
    if results.is_done(cdir):
        return "[green]done[/]"
    if (cdir / results.ERROR).is_file():
        return "[red]failed[/]"
    return "[yellow]partial[/]" if (cdir / "metrics.jsonl").is_file() else "pending"


def print_cells(suite: Suite, cells: list[Cell], out: Path, console: Console) -> None:
    table = Table(title=f"{suite.name}: {len(cells)} cells -> {out / suite.name}")
    for col in ("cell", "setting", "run", "seed", "updates", "status"):
        table.add_column(col)
    for c in cells:
        table.add_row(c.id, c.config.setting, c.group, str(c.config.seed), str(c.config.updates),
                      _status(out / suite.name / c.id))
    console.print(table)


def execute(suite: Suite, out: Path, jobs: int | None, backend: str, dry_run: bool, resume: bool,
            console: Console, trainer: str = TRAINER, suite_text: str | None = None) -> RunSummary | None:
    """Expand, run (or list with dry_run), aggregate and render; exit code 1 if a cell failed."""
    from grpo_bench.report.render import render_report
    from grpo_bench.suite.live import SuiteDisplay

    cells = expand(suite)
    if dry_run:
        print_cells(suite, cells, out, console)
        return None
    from grpo_bench.cli.plan import preflight

    preflight(suite, cells, console)  # real models: weight folders exist and every cell fits gpu_memory_gb
    display = SuiteDisplay(suite.name, console)
    summary = run_suite(suite, cells, out, jobs=jobs, backend=backend, resume=resume, trainer=trainer,
                        display=display, suite_text=suite_text if suite_text is not None else suite.to_yaml())
    report = render_report(summary.suite_dir)
    console.print(f"{suite.name}: {summary.count('done')} run, {summary.count('skipped')} already done, "
                  f"{summary.count('failed')} failed in {summary.wall_s:.1f} s -> "
                  f"{summary.suite_dir / results.RESULTS}")
    console.print(f"report: {report}")
    for o in summary.outcomes:
        if o.status == "failed":
            trace = summary.suite_dir / o.cell / results.ERROR
            console.print(f"[red]failed[/] {o.cell}: {o.error} (traceback in {trace})")
    return summary


def run_command(path: Path, jobs: int | None, backend: str, out: Path, dry_run: bool, resume: bool,
                overrides: list[str], console: Console) -> int:
    suite = load_suite(path, parse_overrides(overrides))
    summary = execute(suite, out, jobs, backend, dry_run, resume, console, suite_text=Path(path).read_text())
    return 1 if summary is not None and summary.count("failed") else 0


def _split(value: str | None, every: list[str] | None = None) -> list[str] | None:
    """'a,b' -> ['a', 'b']; 'all' -> every (when given); None/'' -> None."""
    if value and every is not None and value.strip().lower() == "all":
        return list(every)
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


def ablate_command(kl: str | None, equalizer: str | None, sde: str | None, base: Path | None, jobs: int | None,
                   backend: str, out: Path, dry_run: bool, resume: bool, overrides: list[str],
                   console: Console) -> int:
    from grpo_bench.core.trust_region import KL_VARIANTS

    base_path = base if base is not None else suites_dir() / DEFAULT_ABLATE_BASE
    base_suite = load_suite(base_path, parse_overrides(overrides))
    kls = _split(kl, every=KL_VARIANTS.names())
    eq = None
    if equalizer:
        flags = {"on": True, "off": False, "true": True, "false": False}
        bad = [e for e in _split(equalizer) or [] if e.lower() not in flags]
        if bad:
            raise UserError(f"--equalizer: unknown value {bad[0]!r}; allowed: on, off")
        eq = [flags[e.lower()] for e in _split(equalizer) or []]
    suite = ablation(base_suite, kls, eq, _split(sde))
    clash = sorted(set(suite.grid) & set(suite.overrides))
    if clash:
        raise UserError(f"command line: {', '.join(clash)} is varied by the ablation; drop the override")
    summary = execute(suite, out, jobs, backend, dry_run, resume, console)
    return 1 if summary is not None and summary.count("failed") else 0


def report_command(run_dir: Path, console: Console) -> int:
    from grpo_bench.report.render import render_report

    console.print(f"report: {render_report(run_dir)}")
    return 0
