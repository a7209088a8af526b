"""The work behind ``grpo-bench run``, ``ablate`` and ``report`` (the CLI only declares arguments)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from grpo_bench.config.run import parse_overrides
from grpo_bench.cpu_kernels import for_suite
from grpo_bench.errors import UserError
from grpo_bench.report.suite_parts import load_suite_checked
from grpo_bench.suite.ablation import ablation, legacy_ablation_name
from grpo_bench.suite.expand import expand
from grpo_bench.suite.live import JobPhases
from grpo_bench.suite.results import check_results_file, load_results
from grpo_bench.suite.run_folder import ERROR, RESULTS, is_done
from grpo_bench.suite.runner import TRAINER, RunSummary, run_suite
from grpo_bench.suite.spec import Cell, Suite

DEFAULT_ABLATE_BASE = "ablate_kl.yaml"


def suites_dir() -> Path:
    """suites/ of the working folder, else the one next to the installed package (a source checkout)."""
    here = Path("suites")
    return here if here.is_dir() else Path(__file__).resolve().parents[2] / "suites"


def _status(cdir: Path, updates: int) -> str:
    """done, failed (it wrote ERROR), stopped (it has updates but no DONE: Ctrl-C or a killed runner; a
    rerun resumes it) or pending."""
    if is_done(cdir):
        return "[green]done[/]"
    if (cdir / ERROR).is_file():
        return "[red]failed[/]"
    if not (cdir / "metrics.jsonl").is_file():
        return "pending"
    from grpo_bench.atomic import read_jsonl

    ran = len({int(r["update"]) for r in read_jsonl(cdir / "metrics.jsonl") if isinstance(r.get("update"), int)})
    return f"[yellow]stopped[/] ({ran}/{updates} updates)"


def print_cells(suite: Suite, cells: list[Cell], out: Path, console: Console) -> None:
    table = Table(title=f"{suite.name}: {len(cells)} cells -> {out / suite.name}")
    for col in ("cell", "setting", "run", "seed", "updates", "status"):
        table.add_column(col)
    for c in cells:
        table.add_row(c.id, c.config.setting, c.group, str(c.config.seed), str(c.config.updates),
                      _status(out / suite.name / c.id, c.config.updates))
    console.print(table)


def execute(suite: Suite, out: Path, jobs: int | None, backend: str, dry_run: bool, resume: bool,
            console: Console, trainer: str = TRAINER, suite_text: str | None = None,
            render: bool = True, cells: list[Cell] | None = None,
            phases: tuple[JobPhases, str] | None = None) -> RunSummary | None:
    """Expand, run (or list with dry_run), aggregate and render (unless ``render`` is off: the report
    of ``--until-decided`` is rendered once, after its last look); exit code 1 if a cell failed. ``cells``:
    the suite's cells in another order (a tuning grid runs seed-major). ``phases``: the job this suite is one
    phase of, and the phase's name (one live view and ETA over a tuned suite's grid and table)."""
    from grpo_bench.report.render import render_report
    from grpo_bench.suite.live import SuiteDisplay

    cells = cells if cells is not None else expand(suite)
    if dry_run:
        print_cells(suite, cells, out, console)
        return None
    from grpo_bench.cli.plan import preflight
    from grpo_bench.suite.runner import BACKENDS

    BACKENDS.get(backend, where="--backend: ")  # a mistake starts nothing, not even the suite folder
    if backend == "submitit":
        from grpo_bench.extras import require

        require("submitit", "--backend submitit")
    for_suite(suite)  # a suite run from code, not from a command: before a worker spawns
    preflight(suite, cells, console)  # real models: weight folders exist and every cell fits gpu_memory_gb
    from grpo_bench.suite.tune import TUNE_SUFFIX

    if backend == "local" and not suite.name.endswith(TUNE_SUFFIX):  # a tuning grid only selects: it may mix
        from grpo_bench.suite.machine import hardware, machine, refuse_other_hardware

        refuse_other_hardware(out / suite.name, [c.id for c in cells], hardware(machine()))
    settings = {c.id: c.config.setting for c in cells}
    display = phases[0].display(settings, phases[1]) if phases else SuiteDisplay(suite.name, console, settings)
    write_index(suite, cells, out)
    summary = run_suite(suite, cells, out, jobs=jobs, backend=backend, resume=resume, trainer=trainer,
                        display=display, suite_text=suite_text if suite_text is not None else suite.to_yaml())
    if phases:
        phases[0].close(display)
    counts = (f"{summary.count('done')} run, {summary.count('skipped')} already done, "
              f"{summary.count('failed')} failed")
    if summary.count("busy"):
        counts += f", {summary.count('busy')} busy (being trained by another process; not touched)"
    write_index(suite, cells, out)  # statuses as they are now, whatever stopped the run
    if summary.interrupted:
        console.print(f"{suite.name}: interrupted ({counts}, {summary.count('interrupted')} stopped or not started); "
                      f"progress is saved, resume with: {resume_command()}", markup=False, highlight=False)
        return summary
    # One cause (a missing model, a bad path) usually fails many cells: print each error once.
    by_error: dict[str, list[str]] = {}
    for o in summary.outcomes:
        if o.status == "failed":
            by_error.setdefault(o.error, []).append(o.cell)
    for error, failed in by_error.items():
        where = summary.suite_dir / failed[0] / ERROR
        more = f"{len(failed)} cells ({', '.join(failed[:3])}{', …' if len(failed) > 3 else ''})"
        console.print(Text.assemble(("failed", "red"), f" {failed[0] if len(failed) == 1 else more}: {error} "
                                    f"(traceback in {where})"))
    if summary.disk_full:
        console.print(f"{suite.name}: stopped scheduling, {summary.disk_full} ({counts}, "
                      f"{summary.count('interrupted')} not finished); free space and resume with: {resume_command()}",
                      markup=False, highlight=False)
        return summary
    console.print(f"{suite.name}: {counts} in {summary.wall_s:.1f} s -> {summary.suite_dir / RESULTS}",
                  markup=False, highlight=False)
    if render:
        from grpo_bench.cli.run_summary import print_summary

        report = render_report(summary.suite_dir, frame=load_results(summary.suite_dir))
        print_summary(report, console)
        console.print(f"report: {report}", markup=False, highlight=False)
    return summary


def resume_command() -> str:
    """The command line that was run, without --no-resume (rerunning it resumes)."""
    import shlex
    import sys

    args = [a for a in sys.argv[1:] if a != "--no-resume"]
    return "grpo-bench " + " ".join(shlex.quote(a) for a in args)


def exit_code(summary: RunSummary | None) -> int:
    """130 after Ctrl-C (the shell's code for SIGINT), 1 if a cell failed or the disk filled, else 0."""
    from grpo_bench.interrupt import EXIT_CODE

    if summary is None:
        return 0
    if summary.interrupted:
        return EXIT_CODE
    return 1 if summary.count("failed") or summary.disk_full else 0


INDEX = "INDEX.md"


def write_index(suite: Suite, cells: list[Cell], out: Path) -> Path:
    """``<suite>/INDEX.md``: which cell folder (a config id) holds which setting, run and seed; and
    ``INDEX.json``, the cell ids of this invocation in expansion order (what ``report`` shows)."""
    from grpo_bench.atomic import atomic_write_json, atomic_write_text
    from grpo_bench.report.sources import CELL_INDEX

    atomic_write_json(out / suite.name / CELL_INDEX, {"suite": suite.name, "cells": [c.id for c in cells]})
    folder = out / suite.name
    lines = [f"# {suite.name}: cell folders", "", "| folder | setting | run | seed | status |",
             "| --- | --- | --- | ---: | --- |"]
    for c in cells:
        status = re.sub(r"\[/?\w*\]", "", _status(folder / c.id, c.config.updates))
        lines.append(f"| [{c.id}]({c.id}/) | {c.config.setting} | {c.group} | {c.config.seed} | {status} |")
    return atomic_write_text(folder / INDEX, "\n".join(lines) + "\n")


def run_command(path: Path, jobs: int | None, backend: str, out: Path, dry_run: bool, resume: bool,
                overrides: list[str], console: Console) -> int:
    suite = for_suite(load_suite_checked(path, parse_overrides(overrides)))
    return run_loaded(suite, out, jobs, backend, dry_run, resume, console)


def run_loaded(suite: Suite, out: Path, jobs: int | None, backend: str, dry_run: bool, resume: bool,
               console: Console, phases: tuple[JobPhases, str] | None = None) -> int:
    """``run`` of a loaded suite without a tune block (a tuned suite goes through cli/tuning.py first)."""
    summary = execute(suite, out, jobs, backend, dry_run, resume, console, suite_text=suite.text or None,
                      phases=phases)
    return exit_code(summary)


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
    base_suite = for_suite(load_suite_checked(base_path, parse_overrides(overrides)))
    kls = _split(kl, every=KL_VARIANTS.names())
    eq = None
    if equalizer:
        flags = {"on": True, "off": False, "true": True, "false": False}
        bad = [e for e in _split(equalizer) or [] if e.lower() not in flags]
        if bad:
            raise UserError(f"--equalizer: unknown value {bad[0]!r}; allowed: on, off")
        eq = [flags[e.lower()] for e in _split(equalizer) or []]
    suite = ablation(base_suite, kls, eq, _split(sde))
    legacy = legacy_ablation_name(base_suite, suite.grid)
    if (out / legacy).is_dir() and not (out / suite.name).exists():  # started before short names: resume there
        suite = dataclasses.replace(suite, name=legacy)
    clash = sorted(set(suite.grid) & set(suite.overrides))
    if clash:
        raise UserError(f"command line: {', '.join(clash)} is varied by the ablation; drop the override")
    summary = execute(suite, out, jobs, backend, dry_run, resume, console)
    return exit_code(summary)


def _tuning_before_table(run_dirs: list[Path]) -> Path | None:
    """The tuning grid's folder when the one folder asked for is a tuned suite's table that has not started
    (``runs/main_table`` while only ``runs/main_table_tune`` exists), else None."""
    from grpo_bench.suite.tune import TUNE_SUFFIX

    if len(run_dirs) != 1 or Path(run_dirs[0]).exists() or Path(run_dirs[0]).name == RESULTS:
        return None
    tuning = Path(run_dirs[0]).with_name(Path(run_dirs[0]).name + TUNE_SUFFIX)
    return tuning if tuning.is_dir() else None


def _spec_from(suite_file: Path, frame) -> dict:
    """The report section of ``suite_file`` (checked as any suite), refused unless that suite ran ``frame``."""
    from grpo_bench.report import data

    suite = load_suite_checked(suite_file)
    ran = data.suite_info(frame).get("name")
    if ran != suite.name:
        raise UserError(f"report --parts-from: {suite_file} is suite {suite.name!r}, but these results were run by "
                        f"{ran!r}; give that suite's file")
    return suite.report.to_dict()


def report_command(run_dirs: list[Path], out: Path | None, console: Console, parts_from: Path | None = None) -> int:
    tuning = _tuning_before_table(run_dirs) if parts_from is None else None  # --parts-from names a table's suite
    if tuning is not None:  # the main job mid-tuning: its tuning report, and where the table stands
        from grpo_bench.report import sources
        from grpo_bench.report.render import render_report

        frame = sources.load_frame(tuning)
        path = render_report(tuning, out=out, frame=frame)
        progress = sources.progress_note(frame)
        console.print(f"report: {path} (the tuning grid{': ' + progress if progress else ''}); the table "
                      f"{run_dirs[0]} has not started: `grpo-bench run` starts it when the tuning grid is finished",
                      markup=False, highlight=False, soft_wrap=True)
        return 0
    for p in run_dirs:  # before the table and plotting libraries load: a typo answers at once
        if not Path(p).exists():
            raise UserError(f"{p}: not found; give a suite run folder (runs/<suite>), a train run folder "
                            "(runs/train/...) or a results.parquet file")
    from grpo_bench.report import sources
    from grpo_bench.report.render import render_report
    from grpo_bench.suite.selection import CHOSEN, TUNED, read_chosen

    for p in run_dirs:  # a torn or foreign results.parquet, a damaged choice: one line, before anything is drawn
        path = Path(p) if Path(p).name == RESULTS else Path(p) / RESULTS
        if path.is_file():
            check_results_file(path)
        for name in (CHOSEN, TUNED):
            read_chosen(path.parent, name)
    if len(run_dirs) == 1:
        frame = sources.load_frame(run_dirs[0])
        spec = _spec_from(parts_from, frame) if parts_from is not None else None
        path = render_report(run_dirs[0], spec=spec, out=out, frame=frame,
                             spec_source=parts_from.as_posix() if parts_from is not None else None)
    else:
        names = [Path(p).name if Path(p).name != RESULTS else Path(p).parent.name for p in run_dirs]
        if len(set(names)) < len(names):  # two folders of one name: tell them apart by their paths
            names = [str(p) for p in run_dirs]
        frames = {n: sources.load_frame(p) for n, p in zip(names, run_dirs)}
        differ = sources.budget_differences(frames)
        if differ:
            console.print(f"warning: the runs' budgets differ ({differ}); a gap between them may be the budget's",
                          markup=False, highlight=False, soft_wrap=True)
        frame = sources.combine(frames)
        target = out if out is not None else Path("runs") / "compare" / "_vs_".join(
            n.replace("/", "_").strip("._") or "run" for n in names)
        path = render_report(target, out=target, frame=frame)
    progress = sources.progress_note(frame)
    console.print(f"report: {path}" + (f" ({progress})" if progress else ""), markup=False, highlight=False)
    return 0
