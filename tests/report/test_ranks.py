"""Ranks at held-out oracle learning (grpo_bench/report/ranks.py) and the small-multiple oracle-vs-compute
figure, on synthetic results whose ranks and bootstrap intervals have closed forms."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from report_support import SEEDS, eval_results

from grpo_bench.report import ranks
from grpo_bench.report.parts import FIGURES, TABLES, Context

NOISE = np.array([0.01, -0.01, 0.005, -0.005])


def _row(learning, setting: str = "A", method: str = "dance_grpo") -> dict:
    """A row whose held-out oracle learning per seed is ``learning`` (half of it by the middle eval)."""
    learning = np.asarray(learning, dtype=float)
    return {"method": method, "per_update": 100, "setting": setting, "learning": {5: learning / 2, 10: learning}}


def _summary(rows: dict) -> pd.DataFrame:
    return ranks._ranked(eval_results(rows))[1].set_index(["setting", "group"])


def test_strictly_ordered_rows_rank_one_to_n_with_zero_width():
    rows = {f"m{k}": _row(0.1 * k + NOISE) for k in range(5)}  # m4 learns most on every seed
    summary = _summary(rows)
    got = summary.loc["A"]
    assert got["mean_rank"].to_dict() == {"m4": 1.0, "m3": 2.0, "m2": 3.0, "m1": 4.0, "m0": 5.0}
    assert list(got.index) == ["m4", "m3", "m2", "m1", "m0"]  # best first
    assert (got["low"] == got["mean_rank"]).all() and (got["high"] == got["mean_rank"]).all()
    assert set(got["seeds"]) == {len(SEEDS)} and set(got["rows"]) == {5}
    assert got["first"].to_dict() == {"m4": 4, "m3": 0, "m2": 0, "m1": 0, "m0": 0}
    np.testing.assert_allclose(got["learning_mean"], [0.4, 0.3, 0.2, 0.1, 0.0], atol=1e-12)


def test_ties_share_their_mean_rank_and_every_seed_sums_to_n_n_plus_1_over_2():
    rows = {"a": _row(0.2 + NOISE), "b": _row(0.2 + NOISE), "c": _row(0.1 + NOISE)}
    table, _ = ranks.seed_ranks(ranks.learning_by_seed(eval_results(rows)))
    assert table.groupby("seed")["rank"].sum().eq(6.0).all()  # 1 + 2 + 3 on every seed
    mean = table.groupby("group")["rank"].mean().to_dict()
    assert mean == {"a": 1.5, "b": 1.5, "c": 3.0}
    assert set(_summary(rows)["first"]) == {0}  # a tie for first is no seed ranked first


def test_mean_rank_and_its_bootstrap_interval_have_closed_forms():
    """Ranks of x per seed (1, 1, 1, 2) and of y (2, 2, 2, 1). Resampling the 4 seeds, x's mean rank is 1 with
    probability (3/4)^4 = 0.32, 2 with (1/4)^4 = 0.004 and >= 1.75 with 0.051: the 2.5% and 97.5% points
    of the bootstrap distribution are 1 and 1.75 (and 1.25 and 2 for y, its mirror)."""
    rows = {"x": _row([0.3, 0.3, 0.3, 0.1]), "y": _row([0.2, 0.2, 0.2, 0.2])}
    got = _summary(rows).loc["A"]
    assert got.loc["x", "mean_rank"] == pytest.approx(1.25) and got.loc["y", "mean_rank"] == pytest.approx(1.75)
    assert (got.loc["x", "low"], got.loc["x", "high"]) == pytest.approx((1.0, 1.75))
    assert (got.loc["y", "low"], got.loc["y", "high"]) == pytest.approx((1.25, 2.0))
    assert got.loc["x", "first"] == 3 and got.loc["y", "first"] == 1


def test_families_are_ranked_apart_and_an_incomplete_seed_is_left_out_and_named(tmp_path):
    """Two families (as strata label them): the same rows in the opposite order in each; in the second, row q
    has no eval on the last seed, so that family ranks the other three seeds and names the fourth."""
    one, two = "A, reward=world_oracle", "A, reward=world_judge"
    missing = np.array([0.1, 0.1, 0.1, math.nan])
    rows = {"p": _row(0.3 + NOISE, one), "q": _row(0.1 + NOISE, one)}
    df = pd.concat([eval_results(rows), eval_results({"p": _row(0.0 + NOISE, two), "q": _row(missing, two)})
                    .iloc[1:]], ignore_index=True)
    _, summary, left_out = ranks._ranked(df)
    summary = summary.set_index(["setting", "group"])
    assert summary.loc[(one, "p"), "mean_rank"] == 1.0 and summary.loc[(two, "p"), "mean_rank"] == 2.0
    assert summary.loc[(two, "q"), "seeds"] == 3 and summary.loc[(one, "q"), "seeds"] == 4
    assert left_out == {one: [], two: [SEEDS[-1]]}
    section = TABLES.get("oracle_ranks")(Context(df, tmp_path, {}))[0]
    assert f"{two}: seed(s) {SEEDS[-1]} left out" in section.body
    csv = pd.read_csv(tmp_path / "tables" / "oracle_ranks.csv")
    assert list(csv["setting"]) == [two, two, one, one]  # families in Table 2's order (sorted labels)
    assert list(csv["group"]) == ["q", "p", "p", "q"]  # rows best first


def test_one_seed_has_no_interval_and_a_family_of_one_row_is_not_ranked(tmp_path):
    rows = {"a": _row([0.2]), "b": _row([0.1]), "alone": _row([0.3], "B")}
    df = eval_results(rows, seeds=[7])
    section = TABLES.get("oracle_ranks")(Context(df, tmp_path, {}))[0]
    assert "| A | a | 1.00 | n/a (1 seed) | 1 | 1 of 1 |" in section.body
    assert "alone" not in section.body
    lonely = eval_results({"alone": _row([0.3, 0.2, 0.1, 0.0])})
    sections = TABLES.get("oracle_ranks")(Context(lonely, tmp_path / "lonely", {}))
    sections += FIGURES.get("oracle_ranks")(Context(lonely, tmp_path / "lonely", {}))
    assert all(s.how.startswith("Not available") for s in sections)


def test_the_rank_figure_and_table_files_are_written(tmp_path):
    rows = {f"m{k}": _row(0.1 * k + NOISE) for k in range(10)}
    df = eval_results(rows)
    fig = FIGURES.get("oracle_ranks")(Context(df, tmp_path, {}))[0]
    TABLES.get("oracle_ranks")(Context(df, tmp_path, {}))
    assert "](figures/oracle_ranks.png)" in fig.body and "bootstrap" in fig.how
    assert (tmp_path / "figures" / "oracle_ranks.png").stat().st_size > 2000
    for ext in ("md", "tex", "csv"):
        assert (tmp_path / "tables" / f"oracle_ranks.{ext}").is_file()


def test_oracle_vs_compute_draws_one_panel_per_row_with_the_others_in_grey(tmp_path, monkeypatch):
    """Ten rows: ten visible panels in one figure per family, each with exactly one band (its own row) and the
    nine other rows as grey context lines."""
    import grpo_bench.report.figures as figures

    drawn = []
    monkeypatch.setattr(figures.plt, "close", lambda fig: drawn.append(fig))  # keep the figure to inspect it
    rows = {f"m{k}": {**_row(0.1 * k + NOISE), "per_update": 100 + 10 * k} for k in range(10)}
    sections = FIGURES.get("oracle_vs_compute")(Context(eval_results(rows), tmp_path, {}))
    assert [s.title for s in sections] == ["Held-out oracle learning against training compute, Setting A"]
    assert (tmp_path / "figures" / "oracle_vs_compute_A.png").stat().st_size > 2000
    (fig,) = drawn
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in panels] == [f"m{k}" for k in range(10)]
    for ax in panels:
        assert len(ax.collections) == 1  # one band: the panel's own row
        grey = [line for line in ax.get_lines() if line.get_color() == "0.78"]
        assert len(grey) == 9


def test_two_families_of_ten_rows_each_get_ten_saturated_colours_and_black_titles(tmp_path, monkeypatch):
    """The field's two readings are two families of ten rows in one report: each figure colours its own ten
    rows from tab10 (grey made near-black), never tab20's pale half, so no highlighted row is lighter than
    its grey context; titles are black."""
    import matplotlib.colors as mcolors

    import grpo_bench.report.figures as figures

    drawn = []
    monkeypatch.setattr(figures.plt, "close", lambda fig: drawn.append(fig))
    rows = {f"{s}{k}": {**_row(0.1 * k + NOISE, setting=s), "per_update": 100 + 10 * k}
            for s in ("A", "B") for k in range(10)}
    FIGURES.get("oracle_vs_compute")(Context(eval_results(rows), tmp_path, {}))
    assert len(drawn) == 2
    for fig in drawn:
        panels = [ax for ax in fig.axes if ax.get_visible()]
        own = [next(x for x in ax.get_lines() if x.get_color() != "0.78") for ax in panels]
        rgb = [mcolors.to_rgb(x.get_color()) for x in own]
        assert len(set(rgb)) == 10
        # relative luminance: tab10 reaches 0.70 (olive), tab20's pale half 0.84, the grey context 0.78
        assert max(0.2126 * r + 0.7152 * g + 0.0722 * b for r, g, b in rgb) < 0.7
        assert {mcolors.to_hex(ax.title.get_color()) for ax in panels} == {"#000000"}


@pytest.mark.parametrize("suite", ["field.yaml", "field_image.yaml"])
def test_the_field_suites_report_their_ranks(suite):
    from pathlib import Path

    from grpo_bench.suite.parse import load_suite

    report = load_suite(Path(__file__).resolve().parents[2] / "suites" / suite).report
    assert "oracle_ranks" in report.tables and "oracle_ranks" in report.figures
