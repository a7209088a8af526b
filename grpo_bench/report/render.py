"""``grpo-bench report RUN_DIR``: render report.md, tables and figures from results.parquet alone."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pandas as pd

from grpo_bench.report import data
from grpo_bench.report.parts import FIGURES, TABLES, Context, Section
from grpo_bench.suite.results import atomic_write_text, load_results
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


def _header(df: pd.DataFrame, info: dict) -> str:
    cells = data.cells(df)
    done = cells[cells["status"] == "done"]
    machines = sorted({m for m in cells["machine"] if m})
    name = info.get("name") or (df["suite"].dropna().iloc[0] if len(df) else "?")
    lines = [f"# grpo-bench report: {name}", ""]
    if info.get("description"):
        lines += [info["description"].strip(), ""]
    lines += [
        f"- rendered {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC from `results.parquet`",
        f"- cells: {len(done)} done, {len(cells) - len(done)} failed; seeds per row: "
        f"{', '.join(map(str, sorted(cells['seed'].unique()))) if len(cells) else '–'}",
        f"- compute: {done['wall_time'].sum() / 60:.1f} min summed over cells "
        f"(longest cell {done['wall_time'].max() / 60 if len(done) else 0:.1f} min)"
        + _last_run(info),
        f"- machine: {'; '.join(machines) if machines else 'unknown'}",
        "",
    ]
    failed = cells[cells["status"] != "done"]
    if len(failed):
        lines += ["**Failed cells** (see `<cell>/ERROR.json`):", ""]
        lines += [f"- `{r.cell}` {r.setting} {r.group} seed {r.seed}: {r.error}" for r in failed.itertuples()]
        lines.append("")
    return "\n".join(lines)


def render_report(run_dir: str | Path, spec: ReportSpec | dict | None = None, out: Path | None = None) -> Path:
    """Write ``<run_dir>/report/report.md`` (+ tables/, figures/); returns its path.

    The spec comes from the suite row of results.parquet unless given.
    """
    df = load_results(run_dir)
    info = data.suite_info(df)
    if spec is None:
        spec = info.get("report") or ReportSpec().to_dict()
    elif isinstance(spec, ReportSpec):
        spec = spec.to_dict()
    out = Path(out) if out is not None else Path(run_dir) / "report"
    out.mkdir(parents=True, exist_ok=True)
    ctx = Context(df=df, out=out, spec=spec)
    sections: list[Section] = []
    for name in dict.fromkeys([*spec.get("tables", []), "cells"]):
        sections += TABLES.get(name, where="report.tables: ")(ctx)
    for name in spec.get("figures", []):
        sections += FIGURES.get(name, where="report.figures: ")(ctx)
    body = [_header(df, info)]
    for s in sections:
        body += [f"## {s.title}", "", f"*How to read:* {s.how}", "", s.body.rstrip(), ""]
    path = out / "report.md"
    atomic_write_text(path, "\n".join(body) + "\n")
    return path
