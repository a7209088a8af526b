"""Figures (matplotlib, PNG under ``<report>/figures/``): reward curves with CI bands, the equalizer
ablation, measured per-step gradient norms, KL and KL-weight curves, judge-versus-oracle drift and a
strip of sample frames per method. Bands are 95% t-intervals over seeds at each update."""

from __future__ import annotations

import re
import warnings

import matplotlib

matplotlib.use("Agg")  # files only; never open a window

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from grpo_bench.report import data  # noqa: E402
from grpo_bench.report.compact import save_figure  # noqa: E402
from grpo_bench.report.parts import FIGURES, Context, Section  # noqa: E402
from grpo_bench.report.stats import mean_ci  # noqa: E402


def _colours(groups: list[str]) -> dict[str, tuple]:
    """Up to ten groups: tab10 with its grey (the eighth) made near-black, since grey is the colour of context
    lines and bands; more: tab20."""
    if len(groups) <= 10:
        palette = [(0.1, 0.1, 0.1, 1.0) if i == 7 else plt.get_cmap("tab10")(i) for i in range(10)]
        return {g: palette[i] for i, g in enumerate(groups)}
    cmap = plt.get_cmap("tab20")
    return {g: cmap(i % cmap.N) for i, g in enumerate(groups)}


def band(frame: pd.DataFrame, x: str = "update", y: str = "value") -> pd.DataFrame:
    """Per x: mean over seeds and the 95% t half-width (NaN with one seed)."""
    rows = [(k, *mean_ci(v[y].tolist())) for k, v in frame.groupby(x)]
    return pd.DataFrame(rows, columns=[x, "mean", "ci", "n"])


def _plot_band(ax, frame: pd.DataFrame, label: str, colour, style: str = "-", x: str = "update", y: str = "value",
               marks: dict | None = None):
    b = band(frame, x, y)
    ax.plot(b[x], b["mean"], style, color=colour, label=label, lw=1.4, **(marks or {}))
    ok = b["ci"].notna()
    ax.fill_between(b[x][ok], (b["mean"] - b["ci"])[ok], (b["mean"] + b["ci"])[ok], color=colour, alpha=0.18, lw=0)


def _save(ctx: Context, fig, name: str) -> str:
    folder = ctx.out / "figures"
    folder.mkdir(parents=True, exist_ok=True)
    file = re.sub(r"[^A-Za-z0-9_.=-]+", "_", name)  # a stratified setting label has spaces and commas
    save_figure(fig, folder / f"{file}.png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return f"![{name}](figures/{file}.png)\n"


def _settings_axes(settings: list[str], width: float = 5.0, height: float = 3.4):
    fig, axes = plt.subplots(1, len(settings), figsize=(width * len(settings), height), squeeze=False)
    for ax in axes[0]:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # updates and steps are integers
    return fig, dict(zip(settings, axes[0]))


def _smoothed(curve: pd.DataFrame, window: int) -> pd.DataFrame:
    curve = curve.sort_values(["cell", "update"]).copy()
    curve["value"] = curve.groupby("cell")["value"].transform(lambda s: s.rolling(window, min_periods=1).mean())
    return curve


def _legend(ax, **kw) -> None:
    """A legend of the axes' labelled lines, outside the data (right of the figure); a panel left empty
    gets none, and no warning."""
    _outside_legend(ax.figure, *ax.get_legend_handles_labels(), **kw)


def _figure_legend(fig, **kw) -> None:
    """One legend of every panel's labelled lines, each label once (its first line stands for it): the
    panels share their rows, and a legend per panel would repeat them."""
    handles: dict[str, object] = {}
    for ax in fig.axes:
        for h, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, h)
    _outside_legend(fig, list(handles.values()), list(handles), **kw)


def _outside_legend(fig, handles: list, labels: list[str], loc: str = "center left",
                    bbox_to_anchor: tuple[float, float] = (1.0, 0.5), **kw) -> None:
    """The figure's legend, outside the data (right of it unless placed elsewhere); none, and no warning,
    without labelled lines."""
    if handles:
        fig.legend(handles, labels, loc=loc, bbox_to_anchor=bbox_to_anchor, frameon=False, **kw)


MARKERS = "os^vD<>pPX*h"
"""One marker per row, placed at staggered updates: rows whose lines coincide still show each marker."""


def _markers(groups: list[str]) -> dict[str, dict]:
    n = len(MARKERS)
    return {g: {"marker": MARKERS[i % n], "markevery": (i % 4, 4), "ms": 4} for i, g in enumerate(groups)}


def _align_zero(a, b) -> None:
    """Limits of two y-axes of one panel (twinx) extended so that 0 sits at the same height on both:
    lines that both start at 0 then start at the same place."""
    lims = [(min(ax.get_ylim()[0], 0.0), max(ax.get_ylim()[1], 0.0)) for ax in (a, b)]
    lims = [(lo, hi) if hi > lo else (-1.0, 1.0) for lo, hi in lims]
    fractions = [-lo / (hi - lo) for lo, hi in lims]  # where 0 is, from the bottom
    f = max(fractions)
    if f >= 1:  # one axis lies wholly below 0: meet in the middle rather than cut the other
        f = min(fractions) if min(fractions) > 0 else 0.5
    for ax, (lo, hi), frac in zip((a, b), lims, fractions):
        if frac < f:
            lo = -f * hi / (1 - f)
        elif frac > f:
            hi = -lo * (1 - f) / f
        ax.set_ylim(lo, hi)


def _missing(title: str, why: str) -> list[Section]:
    return [Section(title, f"Not available: {why}.", "")]


@FIGURES.register("reward_curves")
def reward_curves(ctx: Context) -> list[Section]:
    title = "Training reward per method (Fig. 3 / Fig. 8)"
    curve = data.curves(ctx.df, "reward")
    if curve.empty:
        return _missing(title, "no reward curves")
    window = int(ctx.spec.get("smooth", 5))
    curve = _smoothed(curve, window)
    groups = data.group_order(ctx.df)
    colour = _colours(groups)
    fig, axes = _settings_axes(sorted(curve["setting"].unique()))
    for setting, ax in axes.items():
        part = curve[curve["setting"] == setting]
        for g in [g for g in groups if g in set(part["group"])]:
            _plot_band(ax, part[part["group"] == g], g, colour[g])
        ax.set(title=f"Setting {setting}", xlabel="update", ylabel=f"judge reward (rolling mean of {window})")
        ax.grid(alpha=0.3)
    _legend(next(iter(axes.values())), fontsize=7)
    return [Section(title, "Mean composite judge reward over seeds with its 95% band; higher and steadier is better.",
                    _save(ctx, fig, "reward_curves"))]


@FIGURES.register("equalizer")
def equalizer(ctx: Context) -> list[Section]:
    title = "Equalizer ablation: each SDE with and without S_i (Fig. 3)"
    curve = data.curves(ctx.df, "reward")
    if curve.empty or curve["equalizer"].nunique() < 2:
        return _missing(title, "the suite does not vary the equalizer")
    curve = _smoothed(curve, int(ctx.spec.get("smooth", 5)))
    # One colour per row label without the equalizer: every other varied key (noise level, KL, ...)
    # stays separate instead of being pooled into the method's line.
    curve["line"] = curve["group"].astype(str).map(lambda g: data.without_key(g, "equalizer"))
    lines = list(dict.fromkeys(curve["line"]))
    colour = _colours(lines)
    fig, axes = _settings_axes(sorted(curve["setting"].unique()))
    for setting, ax in axes.items():
        part = curve[curve["setting"] == setting]
        for (line, eq), sub in part.groupby(["line", "equalizer"], sort=False):
            _plot_band(ax, sub, f"{line} eq={'on' if eq else 'off'}", colour[line], "-" if eq else "--")
        ax.set(title=f"Setting {setting}", xlabel="update", ylabel="judge reward (smoothed)")
        ax.grid(alpha=0.3)
    _legend(next(iter(axes.values())), fontsize=7)
    return [Section(title, "Same colour = same SDE; solid = equalizer on, dashed = off; the gap is the "
                    "equalizer's effect.",
                    _save(ctx, fig, "equalizer"))]


@FIGURES.register("grad_norms")
def grad_norms(ctx: Context) -> list[Section]:
    title = "Measured per-step gradient norms, with and without the equalizer (Fig. 4)"
    g = data.grads(ctx.df)
    if g.empty:
        return _missing(title, "no diagnostic updates (diag_every = 0)")
    groups = data.group_order(ctx.df)
    colour = _colours(groups)
    fig, axes = _settings_axes(sorted(g["setting"].unique()))
    spread = []
    styles_seen: set[bool] = set()
    for setting, ax in axes.items():
        part = g[g["setting"] == setting]
        for grp in [x for x in groups if x in set(part["group"])]:
            sub = part[part["group"] == grp]
            arr = np.vstack([np.asarray(a, dtype=float) for a in sub["array"]])  # [diag updates x seeds, T]
            with warnings.catch_warnings():  # an all-NaN column is an untrained step: NaN is right
                warnings.simplefilter("ignore", RuntimeWarning)
                mean = np.nanmean(arr, axis=0)
            steps = np.arange(len(mean))
            ok = np.isfinite(mean) & (mean > 0)
            eq = bool(sub["equalizer"].iloc[0])
            styles_seen.add(eq)
            ax.plot(steps[ok], mean[ok], "-o" if eq else "--s", color=colour[grp], ms=3, label=grp)
            if ok.sum() > 1:
                spread.append(f"{setting} {grp}: max/min = {mean[ok].max() / mean[ok].min():.1f}")
        ax.set(title=f"Setting {setting}", xlabel="sampler step i (0 = pure noise)", ylabel="|grad| of step loss",
               yscale="log")
        ax.grid(alpha=0.3, which="both")
    from matplotlib.lines import Line2D

    first = next(iter(axes.values()))
    for eq in sorted(styles_seen, reverse=True):  # the key to the line styles, after the rows
        first.add_line(Line2D([], [], color="0.3", ls="-" if eq else "--", marker="o" if eq else "s", ms=3,
                              label=f"(line style) equalizer {'on' if eq else 'off'}"))
    _legend(first, fontsize=7, handlelength=3.5)  # long handles: solid and dashed must be told apart
    body = _save(ctx, fig, "grad_norms") + "\n" + "".join(f"- {s}\n" for s in spread)
    return [Section(title, "Mean measured gradient norm of each step's policy loss (log scale); solid = equalizer on. "
                    "A flat line means every step pulls equally; max/min below quantifies the spread.", body)]


@FIGURES.register("kl_curves")
def kl_curves(ctx: Context) -> list[Section]:
    title = "KL to the reference and KL weight"
    kl, weight = data.curves(ctx.df, "kl"), data.curves(ctx.df, "kl_weight")
    # kl=none trains without a KL term: its logged weight is not a weight of anything.
    kl, weight = (f[f["kl"].astype(str) != "none"] for f in (kl, weight))
    if kl.empty and weight.empty:
        return _missing(title, "no KL metrics")
    groups = data.group_order(ctx.df)
    colour, marks = _colours(groups), _markers(groups)
    settings = sorted(set(kl["setting"].astype(str)) | set(weight["setting"].astype(str)))
    # one row of panels per setting, each titled with it (a line style per setting was unreadable past two)
    fig, grid = plt.subplots(len(settings), 2, figsize=(11, 3.6 * len(settings)), squeeze=False)
    target = data.curves(ctx.df, "kl_target")
    target = target[target["kl"].astype(str) != "none"] if not target.empty else target
    for row, setting in zip(grid, settings):
        a1, a2 = row
        for ax, frame, ylabel in ((a1, kl, "KL (mean per step)"), (a2, weight, "KL weight")):
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            part = frame[frame["setting"].astype(str) == setting]
            for grp, sub in part.groupby("group", sort=False):
                _plot_band(ax, sub, grp, colour[grp], marks=marks[grp])
            if ax is a1 and not target.empty:  # the adaptive weight's target (measured after its warm-up), dotted
                for grp, sub in target[target["setting"].astype(str) == setting].groupby("group", sort=False):
                    mean = sub.groupby("update")["value"].mean()
                    ax.plot(mean.index, mean.values, ":", color=colour[grp], linewidth=1)
            positive = part["value"] > 0
            ax.set(title=f"Setting {setting}: {ylabel}", xlabel="update", ylabel=ylabel,
                   yscale="log" if positive.any() and positive.all() else "linear")
            ax.grid(alpha=0.3)
    _figure_legend(fig, fontsize=6)
    fig.tight_layout()
    return [Section(title, "Left: measured KL penalty term per update (dotted: the adaptive weight's target); "
                    "right: the KL weight (constant or adaptive schedule); one row per setting. Cells with "
                    "kl=none have no KL term and are not drawn. Each row has its own marker, placed at staggered "
                    "updates, so rows whose lines coincide stay visible.",
                    _save(ctx, fig, "kl_curves"))]


@FIGURES.register("drift")
def drift(ctx: Context) -> list[Section]:
    title = "Judge versus oracle on held-out prompts (reward hacking made visible)"
    ev = data.eval_curves(ctx.df)
    if ev.empty or "eval_reward" not in ev or "eval_oracle_overall" not in ev:
        return _missing(title, "no eval updates with judge and oracle scores")
    groups = data.group_order(ctx.df)
    colour = _colours(groups)
    ev = ev.sort_values(["cell", "update"]).copy()
    for col in ("eval_reward", "eval_oracle_overall"):  # change since the first eval of each cell
        ev[col] = ev[col] - ev.groupby("cell")[col].transform("first")
    fig, axes = _settings_axes(sorted(ev["setting"].unique()))
    for setting, ax in axes.items():
        part = ev[ev["setting"] == setting]
        # The judge is z-scored (changes of ~1) and the oracle a [0, 1] score (changes of ~0.05): each gets
        # its own axis, the oracle on the right, so that neither looks flat beside the other.
        right = ax.twinx() if part["eval_reward"].notna().any() else ax
        for grp in [g for g in groups if g in set(part["group"])]:
            sub = part[part["group"] == grp]
            if sub["eval_reward"].notna().any():
                _plot_band(ax, sub, f"{grp} judge", colour[grp], "-", y="eval_reward")
            _plot_band(right, sub, f"{grp} oracle", colour[grp], ":", y="eval_oracle_overall")
        ax.axhline(0, color="k", lw=0.6)
        ax.set(title=f"Setting {setting}", xlabel="update",
               ylabel="judge change (z units)" if right is not ax else "oracle change since update 0")
        if right is not ax:
            right.set_ylabel("oracle change (dotted)")
            _align_zero(ax, right)
        ax.grid(alpha=0.3)
    fig.subplots_adjust(wspace=0.55)  # room for each panel's right-hand (oracle) axis
    # below the panels: to the right it would cover the oracle axis and its label
    _figure_legend(fig, loc="upper center", bbox_to_anchor=(0.5, -0.06), fontsize=6, ncol=2)
    return [Section(title, "Solid = learned judge (left axis, z units), dotted = exact oracle (right axis), both on "
                    "held-out prompts and relative to the start; a judge line rising while its oracle line falls is "
                    "reward hacking. On the world_oracle track only the oracle is drawn (it is the reward there).",
                    _save(ctx, fig, "drift"))]


@FIGURES.register("strips")
def strips(ctx: Context) -> list[Section]:
    title = "Sample frames per method (same prompts and initial noise)"
    st = data.strips(ctx.df)
    if not st:
        return _missing(title, "no stored eval videos")
    fin = data.finals(ctx.df)
    base = data.strips(ctx.df, base=True)
    sections = []
    for setting in sorted({s for s, _ in st}):
        groups = [g for g in data.group_order(ctx.df) if (setting, g) in st]
        # Every cell of a seed starts from the same base model, prompts and eval noise: one base row
        # (the first row's cell at update 0) shows what training changed.
        first_base = base.get((setting, groups[0]))
        rows, labels = [], []
        if first_base:
            videos = [_with_gaps(list(arr), 1) for _, arr in first_base]
            rows.append(_with_gaps(videos, 4))
            labels.append("base model\n(update 0)")
        labels += [f"{g}\n{_score(fin, setting, g)}" for g in groups]
        for g in groups:
            # frames of one video 1 px apart, videos 4 px apart, all on white
            videos = [_with_gaps(list(arr), 1) for _, arr in st[(setting, g)]]  # each [H, K*W + K-1, 3]
            rows.append(_with_gaps(videos, 4))
        width = max(r.shape[1] for r in rows)
        rows = [np.pad(r, ((0, 3), (0, width - r.shape[1]), (0, 0)), constant_values=255) for r in rows]
        image = np.concatenate(rows, axis=0)
        h = rows[0].shape[0]
        fig, ax = plt.subplots(figsize=(min(18, width / 16 + 3), len(rows) * h / 16 + 1.0))
        ax.imshow(image, interpolation="nearest")
        ax.set_yticks([h * i + (h - 3) / 2 for i in range(len(labels))], labels, fontsize=7)
        prompts = [p for p, _ in st[(setting, groups[0])]]
        block = st[(setting, groups[0])][0][1]
        k, w = block.shape[0], block.shape[2]
        step = k * w + (k - 1) + 4
        ax.set_xticks([i * step + (k * w + k - 1) / 2 for i in range(len(prompts))], prompts, fontsize=7)
        ax.xaxis.tick_top()
        ax.tick_params(length=0)
        for spine in ax.spines.values():
            spine.set_visible(False)
        ax.set_title(f"Setting {setting}: final policy, lowest seed; {k} frames per prompt, left to right in time",
                     fontsize=8, pad=18)
        sections.append(Section(f"{title}, Setting {setting}",
                                "Each row one method (lowest seed) with its final oracle score (mean over its eval "
                                "videos); blocks = eval prompts named above them, frames left to right in time; same "
                                "column = same prompt and noise. The top row, where stored, is the base model the "
                                "methods started from (its eval at update 0; runs before 0.2.0 did not store it).",
                                _save(ctx, fig, f"strips_{setting}")))
    return sections


def _with_gaps(images: list[np.ndarray], gap: int) -> np.ndarray:
    """[H, W, 3] images side by side with ``gap`` white columns between them."""
    sep = np.full((images[0].shape[0], gap, 3), 255, np.uint8)
    return np.concatenate([x for im in images for x in (im, sep)][:-1], axis=1)


def _score(fin: pd.DataFrame, setting: str, group: str) -> str:
    """The row's final oracle overall and judge reward (lowest seed), as shown next to its frames."""
    rows = fin[(fin["setting"] == setting) & (fin["group"] == group)]
    if rows.empty:
        return ""
    row = rows.sort_values("seed").iloc[0]
    parts = []
    if "eval_oracle_overall" in row and pd.notna(row["eval_oracle_overall"]):
        parts.append(f"oracle {row['eval_oracle_overall']:.2f}")
    if "eval_reward" in row and pd.notna(row["eval_reward"]):
        parts.append(f"judge {row['eval_reward']:+.2f}")
    return ", ".join(parts)
