"""Small multiples: one panel per row of a family, that row in its colour with its 95% band over seeds and
every other row of the family behind it as a thin light-grey mean line, on shared axes. Ten overlapping bands
in one panel cannot be told apart; one row per panel with the rest as context can, and the shared axes keep
the panels comparable at a glance."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Callable

import pandas as pd

from grpo_bench.report.figures import _plot_band, band

CONTEXT_GREY = "0.78"
COLUMNS = 5
"""Panels per row of the grid: ten rows (the field) make two lines of five."""


def small_multiples(lines: dict[str, pd.DataFrame], colour: dict, x: str, y: str, *, marks: dict | None = None,
                    decorate: Callable | None = None, xlabel: str = "", ylabel: str = "", title: str = ""):
    """A figure with one panel per entry of ``lines`` (label -> its points over seeds, ``x`` and ``y``
    columns), in the order given; ``decorate(ax)`` adds what every panel shares (reference lines)."""
    import matplotlib.pyplot as plt

    labels = list(lines)
    ncols = min(COLUMNS, len(labels))
    nrows = math.ceil(len(labels) / ncols)
    fig, grid = plt.subplots(nrows, ncols, figsize=(2.9 * ncols + 0.6, 2.3 * nrows + 0.7), sharex=True,
                             sharey=True, squeeze=False)
    axes = list(grid.flat)
    means = {label: band(frame, x, y) for label, frame in lines.items()}
    for ax, label in zip(axes, labels):
        for other in labels:  # the family behind, no bands: context, not competition for the eye
            if other != label:
                ax.plot(means[other][x], means[other]["mean"], color=CONTEXT_GREY, lw=0.8, zorder=1)
        _plot_band(ax, lines[label], label, colour[label], x=x, y=y, marks={**(marks or {}).get(label, {})})
        if decorate is not None:
            decorate(ax)
        ax.set_title(textwrap.fill(label, 34), fontsize=8)  # black: a pale row colour is no title colour
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=7)
    for ax in axes[len(labels):]:
        ax.set_visible(False)
    for i, ax in enumerate(axes[:len(labels)]):
        if i + ncols >= len(labels):  # no panel below: this one carries the x axis (its ticks and label)
            ax.xaxis.set_tick_params(labelbottom=True)
            ax.set_xlabel(xlabel, fontsize=7)
        if i % ncols == 0:
            ax.set_ylabel(textwrap.fill(ylabel, 28), fontsize=7)
        ax.xaxis.get_offset_text().set_fontsize(7)
    if title:
        fig.suptitle(textwrap.fill(title, 110), fontsize=9)
    fig.tight_layout()
    return fig
