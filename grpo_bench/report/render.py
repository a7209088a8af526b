"""``grpo-bench report RUN_DIR``: render report.md, tables and figures from results.parquet alone."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pandas as pd

from grpo_bench.atomic import atomic_write_text
from grpo_bench.report import data
from grpo_bench.report.parts import FIGURES, TABLES, Context, Section
from grpo_bench.report.sources import load_frame
from grpo_bench.suite.spec import ReportSpec


def _last_run(info: dict) -> str:
    """What the last ``run`` did: its wall time and workers, and how many cells it trained (a resumed
    or re-aggregated suite trains fewer than it reports, or none)."""
    if "wall_s" not in info:
        return ""
    ran = info.get("ran")
    if ran == 0:
        return "; the last `run` trained no cell (all were done) and only re-aggregated"
    trained = f", training {ran} cell(s)" if ran is not None else ""
    return f"; wall time of the last `run` {info['wall_s'] / 60:.1f} min with {info['jobs']} worker(s){trained}"


def _cells_line(cells: pd.DataFrame, info: dict) -> str:
    done = int((cells["status"] == "done").sum())
    failed = int(cells["status"].isin(["failed", "broken"]).sum())
    running = int((cells["status"] == "running").sum())
    progress = info.get("progress")
    if progress and progress.get("total"):
        pending = progress["total"] - done - failed - running
        line = f"{done} of {progress['total']} cells done"
        line += f", {failed} failed" if failed else ""
        line += f", {running} running" if running else ""
        return line + (f", {pending} not finished yet (this report shows the finished ones)" if pending > 0 else "")
    return f"{done} done, {failed} failed" + (f", {running} running" if running else "")


def _seeds(cells: pd.DataFrame) -> str:
    seeds = sorted(int(s) for s in cells["seed"].dropna().unique())
    per_row = cells.groupby(["setting", "group"], dropna=False)["seed"].nunique()
    if not seeds:
        return "seeds: –"
    counts = sorted(set(per_row.tolist()))
    return (f"seeds per row: {'/'.join(map(str, counts))} (seed value{'s' if len(seeds) > 1 else ''} "
            f"{', '.join(map(str, seeds))})")


def _header(df: pd.DataFrame, info: dict, spec_source: str | None = None) -> str:
    cells = data.cells(df)
    done = cells[cells["status"] == "done"]
    machines = sorted({m for m in cells["machine"] if m})
    name = info.get("name") or (df["suite"].dropna().iloc[0] if len(df) else "?")
    lines = [f"# grpo-bench report: {name}", ""]
    if info.get("description"):
        lines += [info["description"].strip(), ""]
    lines += [
        f"- rendered {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC from `results.parquet`",
        f"- cells: {_cells_line(cells, info)}; {_seeds(cells)}",
        f"- compute: {done['wall_time'].sum() / 60:.1f} min summed over cells "
        f"(longest cell {done['wall_time'].max() / 60 if len(done) else 0:.1f} min)"
        + _last_run(info),
        f"- machine: {'; '.join(machines) if machines else 'unknown'}",
        *([f"- code: {'; '.join(codes)}"] if (codes := sorted({c for c in cells['code'] if c})) else []),
        *([f"- report section: `{spec_source}`'s, not the one stored with the results (`--parts-from`)"]
          if spec_source else []),
        "",
    ]
    failed = cells[cells["status"].isin(["failed", "broken"])]
    if len(failed):
        lines += ["**Failed or unreadable cells** (see `<cell>/ERROR.json`; unreadable: the file named):", ""]
        lines += [f"- `{r.cell}` {r.setting} {r.group} seed {r.seed}: {r.error}" for r in failed.itertuples()]
        lines.append("")
    return "\n".join(lines)


ALWAYS_TABLES = ("equal_compute", "power", "liveness", "cells")
ALWAYS_FIGURES = ("hacking", "oracle_vs_compute")
HELD_OUT_PARTS = frozenset({"equal_compute", "power", "hacking", "oracle_vs_compute"})
"""The always-shown parts that read the held-out eval: left out where the spec says ``held_out: false``."""


def _tuned_note(df: pd.DataFrame, folders: list[Path]) -> list[str]:
    """For a tuned table (``tuned.json`` beside its results): which seeds served for what, and each method's point."""
    from grpo_bench.suite.selection import TUNED, read_chosen

    path = next((f / TUNED for f in folders if (f / TUNED).is_file()), None)
    if path is None:
        return []
    tuned = read_chosen(path.parent, path.name)
    test = sorted(int(x) for x in df.loc[df["kind"] == "cell", "seed"].dropna().unique())
    points = "; ".join(f"{m} " + " ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                                          for k, v in entry["chosen"].items())
                       for m, entry in tuned.get("methods", {}).items())
    return [f"**Seeds and tuning.** Each method runs at its own point, chosen on tuning seeds "
            f"{', '.join(map(str, tuned.get('seeds', [])))} (`{tuned.get('suite', '')}_tune`) by the rule fixed "
            f"in the suite: {tuned.get('rule', '')}. Chosen: {points}. This table's seeds "
            f"({', '.join(map(str, test))}) are test seeds no development or tuning run used.", ""]


def render_report(run_dir: str | Path, spec: ReportSpec | dict | None = None, out: Path | None = None,
                  frame: pd.DataFrame | None = None, spec_source: str | None = None) -> Path:
    """Write ``<run_dir>/report/report.md`` (+ tables/, figures/); returns its path.

    The table is whatever ``run_dir`` holds (``sources.load_frame``: a suite folder, finished or
    not, a train run or a results.parquet) unless ``frame`` is given. The spec comes from the
    suite row unless given; ``spec_source`` names the suite file a given spec came from, in the header.
    """
    df = data.with_grid_columns(frame if frame is not None else load_frame(run_dir))
    info = data.suite_info(df)
    if spec is None:
        spec = info.get("report") or ReportSpec().to_dict()
    elif isinstance(spec, ReportSpec):
        spec = spec.to_dict()
    df = data.stratify(df, spec.get("strata"))
    base = Path(run_dir).parent if Path(run_dir).is_file() else Path(run_dir)
    out = Path(out) if out is not None else base / "report"
    out.mkdir(parents=True, exist_ok=True)
    ctx = Context(df=df, out=out, spec=spec)
    sections: list[Section] = []
    # Every report says what its rows learned at equal compute, how much its seeds can tell (power), lists
    # every cell, and shows judge against oracle where both were evaluated; a suite's spec orders them, older
    # stored specs get them too.
    always = set() if spec.get("held_out", True) else HELD_OUT_PARTS
    for name in dict.fromkeys([*spec.get("tables", []), *(t for t in ALWAYS_TABLES if t not in always)]):
        sections += TABLES.get(name, where="report.tables: ")(ctx)
    for name in dict.fromkeys([*spec.get("figures", []), *(f for f in ALWAYS_FIGURES if f not in always)]):
        sections += FIGURES.get(name, where="report.figures: ")(ctx)
    body = [_header(df, info, spec_source), *_tuned_note(df, [base, out])]
    for s in sections:
        body += [f"## {s.title}", "", f"*How to read:* {s.how}", "", s.body.rstrip(), ""]
    path = out / "report.md"
    atomic_write_text(path, "\n".join(body) + "\n")
    return path
