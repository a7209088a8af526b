"""``grpo-bench run SUITE --until-decided``: add seeds in blocks until every headline comparison is decided.

Look 1 runs the suite's own seeds; each later look adds ``decide.block`` seeds continuing the list
(max(seeds)+1, ...), so its cells are exactly those of a suite that listed the longer seed list. After
each look the power table's headline comparisons (or, for a factorial suite without a baseline, its main
effects: ``grpo_bench.report.factor_looks``) are decided or left open (``grpo_bench.report.sequential``); the
run stops when none is open or at ``decide.max_seeds``.

The plan and every look are stored in ``<suite>/decide.json`` (atomically, after each look). A rerun
re-evaluates the last stored look (its cells are done, so that only re-aggregates) and continues; the
boundary depends on the plan, so a stored plan that differs from the suite's is an error, not a restart.
The record is also written into results.parquet's suite row, where the report's power section reads it.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from rich.console import Console

from grpo_bench.atomic import atomic_write_json
from grpo_bench.config.run import parse_overrides
from grpo_bench.cpu_kernels import for_suite
from grpo_bench.errors import UserError
from grpo_bench.report.suite_parts import load_suite_checked
from grpo_bench.suite.results import load_results, read_table, write_table
from grpo_bench.suite.run_folder import RESULTS
from grpo_bench.suite.runner import TRAINER
from grpo_bench.suite.spec import Suite

DECIDE_FILE = "decide.json"
PLAN_KEYS = ("spending", "alpha", "max_seeds", "block", "initial_seeds", "planned", "levels")


def seeds_at(seeds: list[int], n: int) -> list[int]:
    """The suite's seeds continued to n seeds: max(seeds)+1, max(seeds)+2, ..."""
    top = max(seeds)
    return [*seeds, *range(top + 1, top + 1 + n - len(seeds))]


def plan(suite: Suite) -> dict[str, Any]:
    """The boundary fixed before any look: seeds at each planned look and each look's level."""
    from grpo_bench.report.power import look_levels
    from grpo_bench.report.sequential import SPENDING, planned_looks

    spec = suite.decide
    assert spec is not None
    planned = planned_looks(len(suite.seeds), spec.block, spec.max_seeds)
    return {"spending": SPENDING, "alpha": spec.alpha, "max_seeds": spec.max_seeds, "block": spec.block,
            "initial_seeds": list(suite.seeds), "planned": planned,
            "levels": look_levels(planned, spec.max_seeds, spec.alpha), "looks": [], "stopped": None}


def load_record(folder: Path, fresh: dict[str, Any]) -> dict[str, Any]:
    """The stored record if its plan is this suite's plan; the fresh plan if none is stored."""
    path = folder / DECIDE_FILE
    if not path.is_file():
        return fresh
    try:
        stored = json.loads(path.read_text())
        looks = stored["looks"]
        if not isinstance(looks, list):
            raise TypeError("looks is not a list")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UserError(f"{path}: unreadable ({exc}); move it away to plan the looks anew") from None
    changed = [k for k in PLAN_KEYS if k != "levels" and stored.get(k) != fresh[k]]
    if changed:
        shown = ", ".join(f"{k} {stored.get(k)!r} -> {fresh[k]!r}" for k in changed)
        raise UserError(f"{path}: its looks were planned with other values ({shown}); restore the suite's "
                        "seeds and decide block, or move the file away to plan anew (its looks then no longer count)")
    return {**fresh, "looks": looks, "stopped": stored.get("stopped")}


def stamp_results(suite_dir: Path, record: dict[str, Any]) -> None:
    """Put the record into results.parquet's suite row (the report renders from that file alone)."""
    path = suite_dir / RESULTS
    frame = read_table(path)
    rows = frame.index[frame["kind"] == "suite"]
    if not len(rows):
        return
    info = json.loads(frame.at[rows[0], "text"])
    info["decide"] = record
    frame.loc[rows[0], "text"] = json.dumps(info, sort_keys=True, default=str)
    write_table(path, frame)


def _seeds(n: int) -> str:
    return f"{n} seed" + ("" if n == 1 else "s")


def look_line(look: int, record: dict[str, Any], seeds: list[int], comparisons: list[dict]) -> str:
    n_open = sum(c["verdict"] == "open" for c in comparisons)
    effect = sum(c["verdict"] == "effect" for c in comparisons)
    level = record["levels"][look - 1]
    return (f"look {look} of {len(record['planned'])}: {_seeds(len(seeds))} ({seeds[0]}..{seeds[-1]}), level "
            f"{level:.3g}: {len(comparisons) - n_open} of {len(comparisons)} comparisons decided "
            f"({effect} effect, {len(comparisons) - n_open - effect} precise), {n_open} open")


def headline_look(suite: Suite, frame: Any, look: int, planned: list[int], alpha: float,
                  previous: list[dict]) -> list[dict]:
    """A look's decided comparisons: each row against report.baseline, or, for a factorial suite without one,
    the design's main effects (report/factor_looks.py)."""
    from grpo_bench.report.factor_looks import evaluate_design_look
    from grpo_bench.report.sequential import evaluate_look

    if suite.report.baseline:
        return evaluate_look(frame, suite.report.baseline, suite.report.min_effect, look, planned, alpha, previous)
    return evaluate_design_look(frame, suite.report.design, suite.report.min_effect, look, planned, alpha, previous)


def decide_command(path: Path, jobs: int | None, backend: str, out: Path, dry_run: bool, resume: bool,
                   overrides: list[str], console: Console, stop_at_look: int | None = None) -> int:
    """``grpo-bench run SUITE --until-decided`` (the arguments of ``run``); a tuned suite is tuned first."""
    from grpo_bench.cli.tuning import tuned_suite

    loaded = for_suite(load_suite_checked(path, parse_overrides(overrides)))
    suite, code = tuned_suite(loaded, out, jobs, backend, dry_run, resume, console)
    return code if suite is None else run_until_decided(suite, out, jobs, backend, dry_run, resume, console,
                                                        stop_at_look=stop_at_look)


def run_until_decided(suite: Suite, out: Path, jobs: int | None, backend: str, dry_run: bool, resume: bool,
                      console: Console, trainer: str = TRAINER, stop_at_look: int | None = None) -> int:
    """Run looks until decided or at max_seeds; exit code as ``run`` (130 interrupted, 1 failed cells).

    ``stop_at_look`` pauses after that look of the plan, undecided comparisons left open and the record
    not stopped, so that a later run continues with the next look: a compute budget, not a stopping rule
    (the plan's levels are unchanged, and so is what a later look may decide)."""
    from grpo_bench.cli.suite import execute, exit_code, resume_command
    from grpo_bench.report import data
    from grpo_bench.report.render import render_report
    from grpo_bench.report.sequential import OPEN

    if suite.decide is None:
        raise UserError(f"{suite.path}: --until-decided needs a decide block, e.g. "
                        "decide: {max_seeds: 12, block: 3, alpha: 0.05} (docs/statistics.md)")
    if not suite.report.baseline and suite.design is None:
        raise UserError(f"{suite.path}: --until-decided decides comparisons with report.baseline (or a design's "
                        "main effects); set one, e.g. report: {baseline: {method: dance_grpo}}")
    if not resume:
        raise UserError("--no-resume with --until-decided would retrain every seed at every look; "
                        f"move {out / suite.name} away to start over")
    folder = out / suite.name
    record = load_record(folder, plan(suite))
    planned = record["planned"]
    if stop_at_look is not None and not 1 <= stop_at_look <= len(planned):
        raise UserError(f"--stop-at-look {stop_at_look}: {suite.path} plans looks 1..{len(planned)} "
                        f"(seeds {', '.join(map(str, planned))})")
    start = min(max(1, len(record["looks"])), len(planned))  # the last stored look again: done cells, re-aggregated
    if dry_run:
        levels = ", ".join(f"{_seeds(n)}: {lv:.3g}" for n, lv in zip(planned, record["levels"]))
        console.print(f"{suite.name}: planned looks ({record['spending']}, alpha {record['alpha']:g}): {levels}; "
                      f"{len(record['looks'])} stored in {folder / DECIDE_FILE}", markup=False, highlight=False)
        execute(dataclasses.replace(suite, seeds=seeds_at(suite.seeds, planned[start - 1])), out, jobs, backend,
                True, True, console, trainer)
        return 0
    record["looks"], record["stopped"] = record["looks"][: start - 1], None
    summary = None
    for look in range(start, len(planned) + 1):
        seeds = seeds_at(suite.seeds, planned[look - 1])
        summary = execute(dataclasses.replace(suite, seeds=seeds), out, jobs, backend, False, True, console,
                          trainer, suite_text=suite.text or None, render=False)
        code = exit_code(summary)
        if code or summary.count("busy"):
            if summary.count("busy") and not code:
                console.print(f"look {look}: cells are being trained by another process; rerun when they finish: "
                              f"{resume_command()}", markup=False, highlight=False)
                code = 1
            if summary.count("failed") and not (summary.interrupted or summary.disk_full):
                console.print(f"look {look}: {summary.count('failed')} cell(s) failed; nothing decided on partial "
                              f"data; fix them and rerun: {resume_command()}", markup=False, highlight=False)
                report = render_report(summary.suite_dir, frame=load_results(summary.suite_dir))
                console.print(f"report: {report}", markup=False, highlight=False)
            return code  # not decided on partial data: the look is re-run on resume
        frame = data.stratify(data.with_grid_columns(load_results(summary.suite_dir)), suite.report.strata)
        previous = record["looks"][-1]["comparisons"] if record["looks"] else []
        comparisons = headline_look(suite, frame, look, planned, record["alpha"], previous)
        record["looks"].append({"look": look, "n": len(seeds), "seeds": seeds, "level": record["levels"][look - 1],
                                "comparisons": comparisons})
        console.print(look_line(look, record, seeds, comparisons), markup=False, highlight=False)
        if not comparisons:
            record["stopped"] = {"look": look, "n": len(seeds), "reason": "none"}
        elif all(c["verdict"] != OPEN for c in comparisons):
            record["stopped"] = {"look": look, "n": len(seeds), "reason": "decided"}
        elif look == len(planned):
            record["stopped"] = {"look": look, "n": len(seeds), "reason": "max_seeds"}
        atomic_write_json(folder / DECIDE_FILE, record)
        if record["stopped"] or look == stop_at_look:
            break
    assert summary is not None
    stamp_results(summary.suite_dir, record)
    report = render_report(summary.suite_dir, frame=load_results(summary.suite_dir))
    stop = record["stopped"]
    if stop is None:
        console.print(f"{suite.name}: paused after look {stop_at_look} (--stop-at-look), not decided; boundary in "
                      f"{folder / DECIDE_FILE}; rerun with --until-decided to continue; report: {report}",
                      markup=False, highlight=False)
        return 0
    console.print(f"{suite.name}: stopped at look {stop['look']} ({_seeds(stop['n'])}, {stop['reason']}); boundary "
                  f"in {folder / DECIDE_FILE}; report: {report}", markup=False, highlight=False)
    return 0
