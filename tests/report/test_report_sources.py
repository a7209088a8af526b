"""What `report` can read: a suite still running ("k of n cells done"), a single train run, two
sources side by side, old results files without grid columns; one broken cell never stops the rest;
figures keep every varied grid key apart."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml
from suite_support import fake_train
from typer.testing import CliRunner

from grpo_bench.atomic import atomic_write_json
from grpo_bench.cli import app
from grpo_bench.report import data, figures, sources
from grpo_bench.report.parts import Context
from grpo_bench.suite.aggregate import aggregate
from grpo_bench.suite.expand import expand
from grpo_bench.suite.parse import parse_suite
from grpo_bench.suite.results import read_table
from grpo_bench.suite.run_folder import CELL, RESULTS, ROWS

ROOT = Path(__file__).resolve().parents[2]
GRID_SUITE = {
    "name": "grid",
    "base": {"updates": 4, "eval_every": 2, "diag_every": 0, "steps": 4, "eval_samples": 1, "method": "sage_grpo"},
    "grid": {"noise_level": [0.3, 0.7], "equalizer": [True, False]},
    "seeds": [0, 1],
    "report": {"tables": ["table2"], "figures": ["reward_curves", "equalizer", "kl_curves", "strips"]},
}


def make_suite(folder: Path, finished: int | None = None, data_: dict | None = None) -> list[dict]:
    """A suite folder as the runner leaves it: suite.yaml, every cell.json, ``finished`` cells trained."""
    spec = data_ or GRID_SUITE
    suite = parse_suite(spec, "grid.yaml")
    folder.mkdir(parents=True)
    (folder / "suite.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    metas = [c.meta(suite.name) for c in expand(suite)]
    for i, meta in enumerate(metas):
        atomic_write_json(folder / meta["id"] / CELL, meta)
        if finished is None or i < finished:
            from grpo_bench.config.run import RunConfig

            fake_train(RunConfig(**meta["config"]), folder / meta["id"])
    return metas


def test_results_have_a_typed_column_per_varied_grid_key(tmp_path):
    metas = make_suite(tmp_path / "grid")
    frame = aggregate(tmp_path / "grid", metas, {"name": "grid"})
    assert frame["noise_level"].dtype == "float64"
    cells = frame[frame["kind"] == "cell"].set_index("cell")
    for meta in metas:
        assert cells.loc[meta["id"], "noise_level"] == meta["config"]["noise_level"]
    back = read_table(tmp_path / "grid" / RESULTS)
    assert sorted(back.loc[back["kind"] == "update", "noise_level"].unique()) == [0.3, 0.7]


def test_old_results_without_grid_columns_still_load_and_get_them(tmp_path):
    stored = read_table(ROOT / "reports" / "kl_weight" / RESULTS)
    grid = ["kl_adaptive", "kl_weight", "kl_beta_min", "kl_beta_max"]
    path = tmp_path / RESULTS  # as written before grid columns existed: the same rows without them
    stored.drop(columns=[c for c in grid if c in stored.columns]).to_parquet(path)
    assert "kl_weight" not in pd.read_parquet(path).columns
    df = data.with_grid_columns(sources.load_frame(path))
    cells = df[df["kind"] == "cell"]
    for r in cells.itertuples():
        assert r.kl_weight == json.loads(r.text)["config"]["kl_weight"]
    assert data.strips(df)  # old float-array strips still decode


def test_report_of_a_running_suite_shows_the_finished_cells_and_says_how_many(tmp_path):
    make_suite(tmp_path / "grid", finished=2)
    res = CliRunner().invoke(app, ["report", str(tmp_path / "grid")])
    assert res.exit_code == 0, res.output
    assert "2 of 8 cells done" in res.output
    report = (tmp_path / "grid" / "report" / "report.md").read_text()
    assert "2 of 8 cells done" in report
    assert not (tmp_path / "grid" / RESULTS).exists()  # a running suite's folder is not written to


def test_report_of_a_single_train_run(tmp_path):
    from grpo_bench.config.run import RunConfig, resolve

    cfg = resolve(RunConfig(method="cps", updates=3, eval_every=2, steps=4, eval_samples=1))
    fake_train(cfg, tmp_path / "run")
    res = CliRunner().invoke(app, ["report", str(tmp_path / "run")])
    assert res.exit_code == 0, res.output
    report = (tmp_path / "run" / "report" / "report.md").read_text()
    assert "cps kl=" in report and "1 of 1 cells done" in report
    table3 = report.split("## Table 3")[1].split("\n## ")[0]
    assert "Not available: every setting has one row (cps kl=" in table3


def test_compare_puts_two_sources_side_by_side(tmp_path):
    from grpo_bench.config.run import RunConfig, resolve

    for name, method, updates in (("a", "cps", 2), ("b", "dance_grpo", 3)):
        fake_train(resolve(RunConfig(method=method, updates=updates, eval_every=1, steps=4, eval_samples=1)),
                   tmp_path / name)
    out = tmp_path / "cmp"
    res = CliRunner().invoke(app, ["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(out)],
                             terminal_width=200)
    assert res.exit_code == 0, res.output
    table = (out / "tables" / "table2.md").read_text()
    assert "a: cps kl=" in table and "b: dance_grpo kl=" in table
    # a train run's one cell is named by its folder (not a/a), and the differing budgets are said out loud
    cells = data.cells(sources.combine({n: sources.load_frame(tmp_path / n) for n in "ab"}))
    assert sorted(cells["cell"]) == ["a", "b"]
    assert "warning: the runs' budgets differ (updates: a 2, b 3)" in " ".join(res.output.split())
    assert "budgets differ** (updates: a 2, b 3)" in (out / "report.md").read_text()
    # one seed per row: the seed bootstrap has nothing to resample, so no interval rather than a zero-width one
    winrates = (out / "tables" / "winrates.md").read_text()
    assert "n/a (1 seed)" in winrates and "[0." not in winrates


CORRUPTIONS = {
    "final.json": lambda d: (d / "final.json").write_text("{not json"),
    "rows.parquet": lambda d: (d / ROWS).write_bytes(b"PAR1 truncated"),
    "final_eval.pt": lambda d: (d / "samples" / "final_eval.pt").write_bytes(b"\x00garbage"),
}


@pytest.mark.parametrize("what", [*CORRUPTIONS, "huge seed"])
def test_one_broken_cell_never_stops_aggregation(tmp_path, what):
    metas = make_suite(tmp_path / "grid")
    bad = metas[1]
    cdir = tmp_path / "grid" / bad["id"]
    if what == "huge seed":
        bad = {**bad, "config": {**bad["config"], "seed": 2**63}, "labels": {**bad["labels"], "seed": 2**63}}
        metas[1] = bad
    else:
        CORRUPTIONS[what](cdir)
        if what != "rows.parquet":
            (cdir / ROWS).unlink(missing_ok=True)
    frame = aggregate(tmp_path / "grid", metas, {"name": "grid"})
    cells = data.cells(frame).set_index("cell")
    if what == "rows.parquet":  # rebuilt from the trainer's files: nothing lost
        assert cells.loc[bad["id"], "status"] == "done"
    else:
        assert cells.loc[bad["id"], "status"] == "broken"
        assert cells.loc[bad["id"], "error"]
    others = [m["id"] for m in metas if m["id"] != bad["id"]]
    assert (cells.loc[others, "status"] == "done").all()
    assert set(data.finals(frame)["cell"]) >= set(others)


class _Recorder:
    def __init__(self):
        self.labels: list[str] = []

    def __call__(self, ax, frame, label, colour, style="-", x="update", y="value", **_):
        self.labels.append(label)


def test_equalizer_figure_keeps_noise_levels_apart(tmp_path, monkeypatch):
    metas = make_suite(tmp_path / "grid")
    frame = data.with_grid_columns(aggregate(tmp_path / "grid", metas, {"name": "grid"}, write=False))
    rec = _Recorder()
    monkeypatch.setattr(figures, "_plot_band", rec)
    figures.equalizer(Context(df=frame, out=tmp_path / "r", spec={"smooth": 1}))
    assert len(rec.labels) == 4  # 2 noise levels x equalizer on/off, none pooled
    assert any("noise_level=0.3" in lb for lb in rec.labels) and any("noise_level=0.7" in lb for lb in rec.labels)


def test_kl_weight_panel_draws_nothing_for_kl_none(tmp_path, monkeypatch):
    spec = {**GRID_SUITE, "grid": {"kl": ["none", "dual"]}, "seeds": [0]}
    metas = make_suite(tmp_path / "kl", data_=spec)
    frame = aggregate(tmp_path / "kl", metas, {"name": "kl"}, write=False)
    rec = _Recorder()
    monkeypatch.setattr(figures, "_plot_band", rec)
    figures.kl_curves(Context(df=frame, out=tmp_path / "r", spec={}))
    assert rec.labels and not any("kl=none" in lb for lb in rec.labels)


def test_strip_figure_labels_rows_with_scores_and_prompts(tmp_path, monkeypatch):
    metas = make_suite(tmp_path / "grid", finished=2)
    frame = aggregate(tmp_path / "grid", metas, {"name": "grid"}, write=False)
    saved = []
    monkeypatch.setattr(figures, "_save", lambda ctx, fig, name: saved.append(fig) or "")
    figures.strips(Context(df=frame, out=tmp_path / "r", spec={}))
    ax = saved[0].axes[0]
    ylabels = [t.get_text() for t in ax.get_yticklabels()]
    assert all("oracle" in lb and "judge" in lb for lb in ylabels)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a red circle moving left", "a blue square moving up"]
    image = ax.get_images()[0].get_array()
    assert (image[:16, 16] == 255).all()  # a white separator column after the first 16-pixel frame


def test_report_on_committed_main_table_renders_without_writing_it(tmp_path):
    src = ROOT / "reports" / "main_table" / RESULTS
    before = src.read_bytes()
    shutil.copy(src, tmp_path / RESULTS)
    res = CliRunner().invoke(app, ["report", str(tmp_path / RESULTS), "--out", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    frame = read_table(src)
    cells = frame[frame["kind"] == "cell"].drop_duplicates("cell")
    done = sum(json.loads(t).get("status") == "done" for t in cells["text"])  # counted here, not by the report
    assert done > 0 and f"{done} done" in (tmp_path / "r" / "report.md").read_text()
    assert src.read_bytes() == before


def test_table2_csv_has_a_column_per_grid_key(tmp_path):
    from grpo_bench.report.render import render_report

    metas = make_suite(tmp_path / "grid")
    frame = aggregate(tmp_path / "grid", metas, {"name": "grid", "report": {"tables": ["table2"],
                                                                                       "figures": []}})
    render_report(tmp_path / "grid", out=tmp_path / "r", frame=frame)
    csv = pd.read_csv(tmp_path / "r" / "tables" / "table2.csv")
    assert "noise_level" in csv.columns
    assert sorted(csv["noise_level"].unique()) == [0.3, 0.7] and len(csv) == 4


def test_report_shows_the_cells_of_the_run_as_indexed_not_stale_folders(tmp_path):
    from grpo_bench.config.run import RunConfig, resolve
    from grpo_bench.report.sources import CELL_INDEX

    metas = make_suite(tmp_path / "grid", finished=3)
    stale = resolve(RunConfig(method="cps", updates=2, steps=4, eval_samples=1))
    stale_meta = {"id": "stale0000000", "suite": "grid", "labels": {"method": "cps", "seed": 0}, "group": "cps kl=none",
                  "config": stale.to_dict()}
    atomic_write_json(tmp_path / "grid" / "stale0000000" / CELL, stale_meta)
    fake_train(stale, tmp_path / "grid" / "stale0000000")
    # the run used command-line overrides: suite.yaml alone would expand to other ids; INDEX.json is the truth
    atomic_write_json(tmp_path / "grid" / CELL_INDEX, {"cells": [m["id"] for m in metas[:4]]})
    frame = sources.load_frame(tmp_path / "grid")
    assert "stale0000000" not in set(frame["cell"].dropna())
    assert sources.progress_note(frame) == "3 of 4 cells done"
