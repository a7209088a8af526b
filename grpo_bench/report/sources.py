"""What ``grpo-bench report`` and ``compare`` read: a results table from whatever a folder holds.

* a suite run folder with cell folders: every finished cell aggregated now, in memory (the suite
  may still be running; nothing is written into it), with "k of n cells done";
* a folder (or file) with only ``results.parquet`` (a copied or committed report);
* a single ``train`` run folder (config.yaml, metrics.jsonl, final.json): one cell.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from grpo_bench.errors import UserError
from grpo_bench.suite.aggregate import aggregate
from grpo_bench.suite.results import COLUMNS, load_results, read_table
from grpo_bench.suite.rows import EMPTY_CONFIG, broken_rows, cell_rows, typed_frame
from grpo_bench.suite.run_folder import CELL, RESULTS, is_done
from grpo_bench.suite.spec import ReportSpec

CELL_INDEX = "INDEX.json"
"""Written by ``run``/``ablate`` at start: the cell ids of the suite as run (overrides included)."""
WHAT = "a suite run folder (runs/<suite>), a train run folder (runs/train/...) or a results.parquet file"


def _stored_suite(folder: Path) -> Any:
    """The suite in ``folder/suite.yaml`` (None when absent or no longer valid)."""
    path = folder / "suite.yaml"
    if not path.is_file():
        return None
    from grpo_bench.report.suite_parts import load_suite_checked

    try:
        return load_suite_checked(path)
    except (UserError, OSError, ValueError):
        return None


def _suite_metas(folder: Path) -> tuple[list[dict[str, Any]], Any] | None:
    """Cells of the suite stored in ``folder/suite.yaml`` in expansion order (None if it cannot be expanded)."""
    from grpo_bench.suite.expand import expand

    suite = _stored_suite(folder)
    if suite is None:
        return None
    try:
        return [c.meta(suite.name) for c in expand(suite)], suite
    except (UserError, OSError, ValueError):
        return None


def _stored_info(folder: Path) -> dict[str, Any]:
    """The suite row of an existing results.parquet (name, description, report spec, last run)."""
    path = folder / RESULTS
    if not path.is_file():
        return {}
    try:
        frame = read_table(path, columns=["kind", "text"])
    except Exception:
        return {}
    rows = frame[frame["kind"] == "suite"]
    return json.loads(rows["text"].iloc[0]) if len(rows) else {}


def _cell_metas(folder: Path) -> list[dict[str, Any]]:
    metas = []
    for path in sorted(folder.glob(f"*/{CELL}"), key=lambda p: p.stat().st_mtime):
        try:
            metas.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue  # a cell.json being written or damaged: its cell is not shown
    return metas


def _indexed_metas(folder: Path) -> list[dict[str, Any]] | None:
    """The cells listed in INDEX.json, in order (None without a readable index)."""
    try:
        ids = json.loads((folder / CELL_INDEX).read_text())["cells"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    metas = []
    for cid in ids:
        try:
            metas.append(json.loads((folder / str(cid) / CELL).read_text()))
        except (OSError, ValueError):
            metas.append({"id": str(cid), "labels": {}, "config": {}, "group": "", "suite": folder.name})
    return metas


def suite_frame(folder: Path) -> pd.DataFrame:
    """Every finished (and failed) cell of a suite folder, aggregated now; info says how many are done."""
    indexed = _indexed_metas(folder)
    expanded = _suite_metas(folder) if indexed is None else None
    info = _stored_info(folder)
    # The stored suite.yaml is the file as run, without command-line overrides: trust its expansion
    # only when every cell it names has a folder here (the runner writes cell.json for all at start).
    if indexed is not None:
        metas = indexed
        suite = _stored_suite(folder)
        if suite is not None:
            info = {**info, "name": suite.name, "description": suite.description, "report": suite.report.to_dict()}
        info.setdefault("name", folder.name)
    elif expanded is not None and all((folder / m["id"] / CELL).is_file() for m in expanded[0]):
        metas, suite = expanded
        info = {**info, "name": suite.name, "description": suite.description, "report": suite.report.to_dict()}
    else:
        metas = _cell_metas(folder)
        info.setdefault("name", folder.name)
    done = sum(is_done(folder / m["id"]) for m in metas)
    info["progress"] = {"done": done, "total": len(metas)}
    return aggregate(folder, metas, info, write=False)


def train_frame(folder: Path) -> pd.DataFrame:
    """One ``train`` run folder as a one-cell table (a run still going shows its updates so far)."""
    import yaml

    try:
        config = yaml.safe_load((folder / "config.yaml").read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise UserError(f"{folder / 'config.yaml'}: unreadable ({type(exc).__name__})") from None
    labels = {"method": config.get("method"), "kl": config.get("kl"), "seed": config.get("seed")}
    meta = {"id": folder.name, "suite": folder.name, "labels": labels, "config": config,
            "group": f"{config.get('method')} kl={config.get('kl')}"}
    done = is_done(folder)
    try:
        rows = cell_rows(folder, meta, status="done" if done else "running")
    except Exception as exc:  # noqa: BLE001 (a damaged file: say which)
        rows = broken_rows(meta, f"{type(exc).__name__}: {exc}")
    info = {"name": folder.name, "progress": {"done": int(done), "total": 1}}
    suite_row = typed_frame([{"kind": "suite", "text": json.dumps(info)}],
                               {"suite": folder.name, "id": "", "group": "", "config": EMPTY_CONFIG})
    return pd.concat([suite_row, rows], ignore_index=True)


def load_frame(path: str | Path) -> pd.DataFrame:
    """The results table of whatever ``path`` is (see the module docstring)."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"{path}: not found; give {WHAT}")
    if path.is_file():
        return load_results(path)
    if any(path.glob(f"*/{CELL}")) or (path / "suite.yaml").is_file() or (path / CELL_INDEX).is_file():
        return suite_frame(path)
    if (path / "config.yaml").is_file() and ((path / "metrics.jsonl").is_file() or (path / "final.json").is_file()):
        return train_frame(path)
    if (path / RESULTS).is_file():
        return load_results(path)
    raise UserError(f"{path}: holds no results yet; give {WHAT}")


COMPUTE_KEYS = ("updates", "prompts_per_update", "group_size", "steps", "video_size", "inner_epochs", "minibatches",
                "eval_samples")
"""Budget keys that change what a run learns or how it is measured (not when it checkpoints or logs)."""


def budget_differences(frames: dict[str, pd.DataFrame]) -> str:
    """'updates: t1 2, t2 5; ...' for each compute key whose values differ between the sources, else ''."""
    values: dict[str, dict[str, list[Any]]] = {}
    for name, frame in frames.items():
        for text in frame.loc[frame["kind"] == "cell", "text"]:
            config = json.loads(text).get("config") or {}
            for key in COMPUTE_KEYS:
                if key in config:
                    seen = values.setdefault(key, {}).setdefault(name, [])
                    if config[key] not in seen:
                        seen.append(config[key])
    parts = []
    for key, by_source in values.items():
        if len({tuple(map(str, v)) for v in by_source.values()}) > 1 or len(by_source) < len(frames):
            shown = ", ".join(f"{name} {'/'.join(map(str, v))}" for name, v in by_source.items())
            parts.append(f"{key}: {shown}")
    return "; ".join(parts)


def combine(frames: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Several runs or suites side by side: each one's rows keep their cells, and every group
    label is prefixed with the source's name so tables and figures show them as separate rows.
    A one-cell source (a train run, whose cell is its folder) is named by the folder alone."""
    parts = []
    infos = {}
    for name, frame in frames.items():
        frame = frame.copy()
        suite_rows = frame["kind"] == "suite"
        infos[name] = json.loads(frame.loc[suite_rows, "text"].iloc[0]) if suite_rows.any() else {}
        frame = frame[~suite_rows]
        frame["group"] = name + ": " + frame["group"].astype("string")
        cell = frame["cell"].astype("string")
        frame["cell"] = cell.where(cell == name, name + "/" + cell)
        parts.append(frame)
    done = sum(i.get("progress", {}).get("done", 0) for i in infos.values())
    total = sum(i.get("progress", {}).get("total", 0) for i in infos.values())
    reports = [i.get("report") for i in infos.values() if i.get("report")]
    differ = budget_differences(frames)
    info = {"name": " vs ".join(frames), "description": "Side by side: " + ", ".join(frames) + "." + (
                f" **Their budgets differ** ({differ}): a gap between them may be the budget's." if differ else ""),
            "report": {**ReportSpec().to_dict(), **(reports[0] if reports else {}), "baseline": {}}}
    if total:
        info["progress"] = {"done": done, "total": total}
    suite_row = typed_frame([{"kind": "suite", "text": json.dumps(info, default=str)}],
                               {"suite": info["name"], "id": "", "group": "", "config": EMPTY_CONFIG})
    combined = pd.concat([suite_row, *parts], ignore_index=True)
    return combined.astype({k: v for k, v in COLUMNS.items() if v != "object"})


def progress_note(frame: pd.DataFrame) -> str:
    """ "2 of 48 cells done" when the table covers only part of its suite, else ""."""
    rows = frame[frame["kind"] == "suite"]
    info = json.loads(rows["text"].iloc[0]) if len(rows) else {}
    progress = info.get("progress") or {}
    if progress.get("total") and progress.get("done", 0) < progress["total"]:
        return f"{progress['done']} of {progress['total']} cells done"
    return ""
