"""Figures read right, checked on the figure objects of a stored report (reports/*/results.parquet,
as `grpo-bench report` renders them): drift's two y-axes put 0 at one height and its legend clears
them; kl_curves titles each panel with its setting and lines that coincide keep distinct markers;
grad_norms keys its solid and dashed lines."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pytest

from grpo_bench.report import data, figures
from grpo_bench.report.parts import Context
from grpo_bench.report.sources import load_frame

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def drawn(tmp_path_factory):
    """name -> the matplotlib figure each part drew for reports/main_table (kept open for inspection)."""
    df = data.with_grid_columns(load_frame(ROOT / "reports" / "main_table" / "results.parquet"))
    spec = data.suite_info(df).get("report") or {}
    ctx = Context(df=data.stratify(df, spec.get("strata")), out=tmp_path_factory.mktemp("r"), spec=spec)
    figs = {}
    mp = pytest.MonkeyPatch()
    mp.setattr(figures, "_save", lambda ctx, fig, name: figs.setdefault(name, fig) and "")
    for name in ("drift", "kl_curves", "grad_norms"):
        figures.FIGURES.get(name)(ctx)
    mp.undo()
    yield figs
    plt.close("all")


def _zero_at(ax) -> float:
    lo, hi = ax.get_ylim()
    return -lo / (hi - lo)


def test_align_zero_puts_zero_at_one_height_and_keeps_both_ranges():
    fig, left = plt.subplots()
    right = left.twinx()
    left.set_ylim(-2.0, 2.0)
    right.set_ylim(-0.5, 0.25)
    figures._align_zero(left, right)
    assert _zero_at(left) == pytest.approx(_zero_at(right))
    assert left.get_ylim()[0] <= -2.0 and left.get_ylim()[1] >= 2.0
    assert right.get_ylim()[0] <= -0.5 and right.get_ylim()[1] >= 0.25
    plt.close(fig)


def test_drift_aligns_the_zeros_of_both_axes_and_keeps_its_legend_off_them(drawn):
    fig = drawn["drift"]
    fig.canvas.draw()
    twins = [(a, b) for a in fig.axes for b in fig.axes if a is not b and a.get_position().bounds == b.get_position()
             .bounds and a.get_ylabel().startswith("judge")]
    assert twins  # the judge track's panels have an oracle axis on the right
    for a, b in twins:
        assert _zero_at(a) == pytest.approx(_zero_at(b), abs=1e-9)
    legend = fig.legends[0].get_window_extent()
    for ax in fig.axes:
        box = ax.get_tightbbox()
        assert legend.y1 <= box.y0 or legend.x0 >= box.x1  # below or beside every axis, labels included


def test_kl_curves_titles_each_setting_and_coinciding_lines_keep_their_markers(drawn):
    fig = drawn["kl_curves"]
    titles = [ax.get_title() for ax in fig.axes]
    assert titles and all(t.startswith("Setting ") for t in titles)
    lines = [ln for ln in fig.axes[1].get_lines() if ln.get_label() and not ln.get_label().startswith("_")]
    assert len({ln.get_marker() for ln in lines}) == len(lines)  # the warm-up weights coincide: markers differ
    assert len({str(ln.get_markevery()) for ln in lines}) > 1  # and sit at different updates


def test_grad_norms_keys_solid_and_dashed(drawn):
    labels = [t.get_text() for t in drawn["grad_norms"].legends[0].get_texts()]
    assert "(line style) equalizer on" in labels and "(line style) equalizer off" in labels
