"""The reward-hacking scatter: per cell, what the training judge learned against what the oracle did.

One point per cell (x = change of the judge on held-out prompts since update 0, y = the same for the
exact oracle); each axis has its own scale because the judge is z-scored (changes of several units)
while the oracle moves by tenths. The quadrant below zero and right of zero is reward hacking: the
judge rose while the true quality fell.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # files only; never open a window

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from grpo_bench.report import data  # noqa: E402
from grpo_bench.report.compact import save_figure  # noqa: E402
from grpo_bench.report.parts import FIGURES, Context, Section  # noqa: E402

JUDGE, ORACLE = "eval_reward", "eval_oracle_overall"
QUADRANTS = {  # (judge up, oracle up) -> label
    (True, True): "both improve", (True, False): "hacking: judge ↑ oracle ↓",
    (False, True): "oracle ↑ judge ↓", (False, False): "both fall",
}


def quadrant_counts(gain: pd.DataFrame) -> dict[str, int]:
    """How many cells fall in each quadrant (points on an axis count as 'down' for that axis)."""
    out = {label: 0 for label in QUADRANTS.values()}
    for judge, oracle in zip(gain[JUDGE], gain[ORACLE]):
        out[QUADRANTS[(judge > 0, oracle > 0)]] += 1
    return out


@FIGURES.register("hacking")
def hacking(ctx: Context) -> list[Section]:
    title = "Reward hacking: judge change against oracle change per cell (held-out prompts, since update 0)"
    gain = data.learning(ctx.df)
    if gain.empty or JUDGE not in gain or ORACLE not in gain:
        return []  # no oracle (real models) or no evaluation at update 0: nothing to compare
    gain = gain.dropna(subset=[JUDGE, ORACLE])
    if gain.empty:
        return []
    settings = sorted(gain["setting"].unique())
    groups = data.group_order(ctx.df)
    cmap = plt.get_cmap("tab10" if len(groups) <= 10 else "tab20")
    colour = {g: cmap(i % cmap.N) for i, g in enumerate(groups)}
    fig, axes = plt.subplots(1, len(settings), figsize=(4.6 * len(settings) + 2.6, 4.0), squeeze=False)
    for setting, ax in zip(settings, axes[0]):
        part = gain[gain["setting"] == setting]
        for group in [g for g in groups if g in set(part["group"])]:
            sub = part[part["group"] == group]
            ax.scatter(sub[JUDGE], sub[ORACLE], s=26, color=colour[group], label=group, alpha=0.85, lw=0)
        ax.axhline(0, color="k", lw=0.7)
        ax.axvline(0, color="k", lw=0.7)
        counts = quadrant_counts(part)
        ax.text(0.99, 0.02, f"{QUADRANTS[(True, False)]}: {counts[QUADRANTS[(True, False)]]} of {len(part)}",
                transform=ax.transAxes, ha="right", va="bottom", fontsize=7, color="firebrick")
        ax.set(title=f"Setting {setting}", xlabel="Δ judge (z units)", ylabel="Δ oracle (setting-weighted)")
        ax.grid(alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=7, frameon=False)
    fig.tight_layout()
    folder = ctx.out / "figures"
    folder.mkdir(parents=True, exist_ok=True)
    save_figure(fig, folder / "hacking.png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    counts = quadrant_counts(gain)
    how = ("One point per cell; axes on their own scales. Lower right = reward hacking (the learned judge rose, "
           f"the exact oracle fell): {counts[QUADRANTS[(True, False)]]} of {len(gain)} cells; upper right = "
           f"both improved: {counts[QUADRANTS[(True, True)]]}.")
    return [Section(title, how, "![hacking](figures/hacking.png)\n")]
