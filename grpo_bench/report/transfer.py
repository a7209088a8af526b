"""Does a method's rank transfer between worlds? (issue #44 item 4): each method's rank on each world, with an
interval over seeds, and the rank agreement between every two worlds (Kendall's tau-b with a bootstrap interval).

A *world* is a (model, reward) track of the results (the video world's oracle and judge tracks, the image world's
compositional and text tasks). The score is the held-out exact oracle after the last update
(``eval_oracle_overall``; every method of a seed starts from the same evaluation at update 0, so the final value
ranks as the change does). On each seed the methods are ranked (1 = best, ties averaged); a method's rank on a
world is its mean over the world's seeds, with a percentile interval from resampling those seeds (BOOT draws).
Between two worlds, tau is computed on the methods both hold from their mean ranks, and its interval from
resampling each world's seeds independently (their seeds differ: each world has its own test seeds), and its p from
Kendall's test with the methods as the sample, Holm-adjusted over the pairs. A method with several readings on a
world (a fair and an as-shipped row) is read on its first row in the suite's order.

Whether a world's ranks carry an order at all is read off its own seeds: Kendall's W of the [seed x method] ranks
with Friedman's test (W = 1: every seed orders the methods alike; near 0: each seed orders them anew, and the
world's τ's say little about transfer). This is asked of the ranks, not of each method's learning: with 3 seeds a
method's learning can sit inside its t-interval around 0 while the seeds agree on who learns most. With few seeds
a percentile bootstrap over them is coarse (3 seeds have 10 distinct resamples) and too narrow; the tests are the
reading that holds at 3 seeds. At 3 seeds the agreement can rest on the two ends alone (one method first and
another last on every seed; the image world's first look re-run on another CPU kept its ends and W and lost its
middle), so each world also gets W of the methods between its first and last (``between_the_ends``).

The part reads the report's own results and the stored results of the sibling field reports (``SIBLINGS``,
``reports/<name>/results.parquet`` beside this report's folder), so the video world's field report and the
image world's show one transfer table once both exist.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import friedmanchisquare, kendalltau, rankdata

from grpo_bench.errors import UserError
from grpo_bench.report import data
from grpo_bench.report.parts import FIGURES, TABLES, Context, Section
from grpo_bench.report.power import holm
from grpo_bench.suite.results import read_table

SIBLINGS = ("field", "field_image_avx2", "field_image")
"""The field reports a transfer table reads beside its own, one table a suite, the first found: the image world's
table on portable kernels (``field_image_avx2``, its looks from the second on) stands for the suite before its
first look at bf16 (``field_image``), which could not be continued (docs/image_world.md)."""
METRIC = "eval_oracle_overall"
BOOT = 2000
LEVEL = 0.95


def world_scores(df: pd.DataFrame) -> pd.DataFrame:
    """[world, method, seed, score, cell] of every finished cell with a held-out oracle score (one reading a
    method)."""
    fin = data.finals(df)
    if fin.empty or METRIC not in fin:
        return pd.DataFrame(columns=["world", "method", "seed", "score", "cell"])
    info = data.cells(df).drop_duplicates("cell").set_index("cell")
    info["world"] = [f"{c.get('model', 'world')} / {c.get('reward', '?')}" for c in info["config"]]
    fin = fin.assign(world=fin["cell"].map(info["world"]))
    rank = {w: i for i, w in enumerate(dict.fromkeys(info["world"]))}  # worlds in the results' order
    fin = fin.iloc[np.argsort(fin["world"].map(rank).to_numpy(), kind="stable")]
    order = {g: i for i, g in enumerate(dict.fromkeys(info["group"]))}
    fin = fin.assign(order=fin["group"].map(order))
    first = fin.groupby(["world", "method"])["order"].transform("min")
    fin = fin[fin["order"] == first]
    out = fin[["world", "method", "seed", METRIC, "cell"]].rename(columns={METRIC: "score"}).dropna()
    return out.astype({"seed": int, "score": float}).reset_index(drop=True)


def learners(df: pd.DataFrame, scores: pd.DataFrame) -> dict[str, tuple[int, int]]:
    """world -> (methods whose held-out oracle learning, last eval minus update 0 over the world's seeds, has its 95%
    t-interval above 0; methods ranked), over the cells ``scores`` ranks: a world where no method learns ranks
    noise, and its τ's measure nothing."""
    from grpo_bench.report.stats import mean_ci

    learned = data.learning(df)
    if learned.empty or METRIC not in learned:
        return {}
    gain = dict(zip(learned["cell"], learned[METRIC].astype(float)))
    out = {}
    for world, part in scores.groupby("world", sort=False):
        above = 0
        for _, rows in part.groupby("method"):
            values = np.array([gain.get(c, np.nan) for c in rows["cell"]], dtype=float)
            mean, half, n = mean_ci(values[np.isfinite(values)])
            above += bool(n >= 2 and mean - half > 0)
        out[world] = (above, part["method"].nunique())
    return out


def seed_ranks(scores: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """world -> [seed x method] ranks (1 = best score, ties averaged), on the seeds where every method ran."""
    out = {}
    for world, part in scores.groupby("world", sort=False):
        table = part.pivot_table(index="seed", columns="method", values="score", aggfunc="mean").dropna()
        if len(table) and table.shape[1] >= 2:
            out[str(world)] = pd.DataFrame(rankdata(-table.to_numpy(), axis=1), index=table.index,
                                           columns=table.columns)
    return out


def _interval(draws: np.ndarray) -> tuple[float, float]:
    lo, hi = np.nanpercentile(draws, [50 * (1 - LEVEL), 100 - 50 * (1 - LEVEL)], axis=0)
    return lo, hi


def mean_ranks(ranks: pd.DataFrame, rng: np.random.Generator) -> pd.DataFrame:
    """[method: mean, low, high, seeds] of one world's seed ranks (bootstrap over seeds)."""
    values = ranks.to_numpy()
    draws = values[rng.integers(0, len(values), size=(BOOT, len(values)))].mean(axis=1)  # [BOOT, methods]
    lo, hi = _interval(draws)
    return pd.DataFrame({"mean": values.mean(axis=0), "low": lo, "high": hi, "seeds": len(values)},
                        index=ranks.columns)


def tau_b(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Kendall's tau-b of each row of x against the same row of y ([draws, items] each), computed as
    scipy.stats.kendalltau computes one (pairs' signs; NaN where a row is all ties), for a bootstrap's draws at once."""
    i, j = np.triu_indices(x.shape[1], k=1)
    sx, sy = np.sign(x[:, i] - x[:, j]), np.sign(y[:, i] - y[:, j])  # 0 exactly where a pair ties
    untied_x, untied_y = np.count_nonzero(sx, axis=1), np.count_nonzero(sy, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        tau = (sx * sy).sum(axis=1) / np.sqrt(untied_x) / np.sqrt(untied_y)
    return np.where((untied_x == 0) | (untied_y == 0), np.nan, np.clip(tau, -1.0, 1.0))


def tau(a: pd.DataFrame, b: pd.DataFrame, rng: np.random.Generator) -> dict[str, float]:
    """Kendall's tau-b of two worlds' mean ranks on their common methods, with its bootstrap interval."""
    common = [m for m in a.columns if m in b.columns]
    if len(common) < 3:
        nan = float("nan")
        return {"tau": nan, "low": nan, "high": nan, "methods": len(common), "p": nan}
    va, vb = a[common].to_numpy(), b[common].to_numpy()
    test = kendalltau(va.mean(axis=0), vb.mean(axis=0))
    means = [(va[rng.integers(0, len(va), len(va))].mean(axis=0), vb[rng.integers(0, len(vb), len(vb))].mean(axis=0))
             for _ in range(BOOT)]
    lo, hi = _interval(tau_b(np.array([m for m, _ in means]), np.array([m for _, m in means])))
    return {"tau": float(test.statistic), "low": float(lo), "high": float(hi), "methods": len(common),
            "p": float(test.pvalue)}


def consistency(ranks: pd.DataFrame) -> dict[str, float]:
    """Kendall's W of one world's [seed x method] ranks and Friedman's p: do the seeds order the methods alike?
    W = chi2 / (n (k - 1)) from Friedman's tie-corrected statistic (n seeds, k methods); NaN below 2 seeds, 3 methods
    or where every seed ties every method."""
    n, k = ranks.shape
    if n < 2 or k < 3 or not np.any(np.ptp(ranks.to_numpy(), axis=1) > 0):
        return {"w": float("nan"), "p": float("nan"), "seeds": n}
    chi2, p = friedmanchisquare(*ranks.to_numpy().T)
    return {"w": float(chi2 / (n * (k - 1))), "p": float(p), "seeds": n}


def between_the_ends(ranks: pd.DataFrame) -> tuple[list[str], dict[str, float]]:
    """([first, last] method by mean rank, ``consistency`` of the others re-ranked on each seed): does the seeds'
    agreement reach past the two ends? With few seeds a world can agree at 5% only because one method is first and
    another last on every seed, which says nothing of the order between them. The two are chosen by the same
    ranks, so the p is a reading, not an exact test; NaN with fewer than 5 methods (3 left to order)."""
    if ranks.shape[1] < 5:
        return [], {"w": float("nan"), "p": float("nan"), "seeds": len(ranks)}
    order = ranks.mean().sort_values(kind="stable")
    ends = [str(order.index[0]), str(order.index[-1])]
    middle = ranks.drop(columns=ends)
    return ends, consistency(pd.DataFrame(rankdata(middle.to_numpy(), axis=1), index=middle.index,
                                          columns=middle.columns))


def read_results(path: Path) -> pd.DataFrame:
    """A stored results.parquet (untrusted: one line naming the file when it cannot be read as results)."""
    try:
        frame = read_table(path)
        for column in ("kind", "cell", "group", "setting", "seed", "metric", "value", "text"):
            if column not in frame:
                raise ValueError(f"no column {column!r}")
        for text in frame.loc[frame["kind"] == "cell", "text"]:
            json.loads(text)["config"].get("method")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        reason = str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__
        raise UserError(f"transfer: {path} is not a readable results file ({reason}); re-run its suite's report "
                        f"or move it away") from None
    return frame


def all_results(ctx: Context) -> pd.DataFrame:
    """This report's results and those of the sibling field reports found beside it (``SIBLINGS``: one a suite)."""
    frames, suites = [ctx.df], set(ctx.df["suite"].dropna())
    for name in SIBLINGS:
        folder = ctx.out.parent / name
        path = folder / "results.parquet"
        if folder.resolve() != ctx.out.resolve() and path.is_file():
            frame = read_results(path)
            if not suites & set(frame["suite"].dropna()):  # one table a suite: another would count its cells twice
                suites |= set(frame["suite"].dropna())
                frames.append(frame)
    return pd.concat(frames, ignore_index=True) if len(frames) > 1 else ctx.df


def transfer(scores: pd.DataFrame, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(ranks: [world, method, mean, low, high, seeds],
    taus: [world_a, world_b, tau, low, high, methods, p, p_holm])."""
    return transfer_of(seed_ranks(scores), seed)


def transfer_of(ranks: dict[str, pd.DataFrame], seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``transfer`` from the worlds' seed ranks already computed (``seed_ranks``)."""
    rng = np.random.default_rng(seed)
    rows = [dict(world=w, method=m, **r) for w, r_ in ranks.items() for m, r in mean_ranks(r_, rng).iterrows()]
    taus = pd.DataFrame([dict(world_a=a, world_b=b, **tau(ranks[a], ranks[b], rng))
                         for a, b in itertools.combinations(ranks, 2)],
                        columns=["world_a", "world_b", "tau", "low", "high", "methods", "p"])
    taus["p_holm"] = holm(taus["p"].to_numpy())
    return pd.DataFrame(rows, columns=["world", "method", "mean", "low", "high", "seeds"]), taus


@TABLES.register("transfer")
def transfer_table(ctx: Context) -> list[Section]:
    from grpo_bench.report.tables import write_table

    frame = all_results(ctx)
    scores = world_scores(frame)
    by_world = seed_ranks(scores)
    ranks, taus = transfer_of(by_world)
    if ranks.empty or ranks["world"].nunique() < 2:
        return [Section("Transfer between worlds", "Needs finished cells of two worlds (model / reward tracks).",
                        "_Fewer than two worlds with finished cells._")]
    worlds = list(dict.fromkeys(ranks["world"]))
    methods = list(dict.fromkeys(ranks["method"]))
    cell = {(r.world, r.method): f"{r.mean:.2f} [{r.low:.2f}, {r.high:.2f}]" for r in ranks.itertuples()}
    rows = [[m, *(cell.get((w, m), "–") for w in worlds)] for m in methods]
    md = write_table(ctx.out, "transfer", ["Method", *worlds], rows, ranks, "l" + "r" * len(worlds))
    lines = [f"- {t.world_a} vs {t.world_b}: τ = {t.tau:.2f} [{t.low:.2f}, {t.high:.2f}] over {t.methods} methods, "
             f"p = {t.p:.2g} (Holm {t.p_holm:.2g})" for t in taus.itertuples()]
    taus.to_csv(ctx.out / "tables" / "transfer_tau.csv", index=False)
    learn = learners(frame, scores)
    lines += [world_line(w, consistency(r), learn.get(w), between_the_ends(r)) for w, r in by_world.items()]
    seeds = ", ".join(f"{w}: {int(ranks.loc[ranks['world'] == w, 'seeds'].iloc[0])}" for w in worlds)
    return [Section(
        "Transfer between worlds — each method's rank on each world",
        f"Mean rank over seeds (1 = best held-out oracle after the last update) [{LEVEL:.0%} bootstrap interval "
        f"over seeds; seeds {seeds}], and Kendall's τ-b between two worlds' mean ranks with its bootstrap "
        "interval (each world's seeds resampled) and Kendall's test (methods as the sample; Holm over the pairs): τ "
        "near 1, the ranking transfers; near 0, it does not. Under each world: whether its own seeds order the "
        "methods alike (Kendall's W, Friedman's test), whether that agreement reaches past its first and last "
        "method (W of the others), and how many methods learn. With 3 seeds a bootstrap over them is coarse and "
        "too narrow: read the tests.",
        md + "\n\n" + "\n".join(lines))]


def world_line(world: str, agree: dict[str, float], learned: tuple[int, int] | None,
               middle: tuple[list[str], dict[str, float]] | None = None) -> str:
    """One world's verdict: do its seeds agree on an order (Friedman at 5%), how many methods learn, and whether
    the agreement reaches past its first and last method (``between_the_ends``)."""
    text = (f"- {world}: the seeds' agreement on an order, Kendall's W = {agree['w']:.2f} "
            f"(Friedman p = {agree['p']:.2g}, {agree['seeds']} seeds)")
    if learned is not None:
        text += f"; {learned[0]} of {learned[1]} methods learn (held-out oracle learning, 95% interval above 0)"
    if not agree["p"] < 0.05:
        return text + "; its seeds do not agree on an order at 5%, so its ranks order noise and its τ's say little " \
                      "about transfer"
    if learned is not None and learned[0] == 0:
        text += "; no method's learning alone is told from 0, yet its seeds agree on an order"
    if middle is not None and middle[0] and not middle[1]["p"] < 0.05:
        (first, last), rest = middle
        text += (f"; without {first} (first) and {last} (last) the seeds' agreement is W = {rest['w']:.2f} "
                 f"(p = {rest['p']:.2g}): the order between the two ends is not told from noise")
    return text


@FIGURES.register("transfer_ranks")
def transfer_figure(ctx: Context) -> list[Section]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ranks, _ = transfer(world_scores(all_results(ctx)))
    if ranks.empty:
        return []
    methods = list(dict.fromkeys(ranks["method"]))
    worlds = list(dict.fromkeys(ranks["world"]))
    fig, ax = plt.subplots(figsize=(6.5, 0.45 * len(methods) + 1.2))
    for j, world in enumerate(worlds):
        part = ranks[ranks["world"] == world].set_index("method").reindex(methods)
        y = np.arange(len(methods)) + (j - (len(worlds) - 1) / 2) * 0.18
        ax.errorbar(part["mean"], y, xerr=[part["mean"] - part["low"], part["high"] - part["mean"]], fmt="o",
                    capsize=2, label=world)
    ax.set_yticks(range(len(methods)), methods)
    ax.invert_yaxis()
    ax.set_xlabel("mean rank over seeds (1 = best)")
    ax.legend(fontsize=7, loc="best")
    folder = ctx.out / "figures"
    folder.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(folder / "transfer_ranks.png", dpi=120)
    plt.close(fig)
    return [Section("Transfer between worlds — ranks", "Each method's mean rank per world with its bootstrap interval "
                    "over seeds; a method whose dots sit apart ranks differently on the two worlds.",
                    "![transfer ranks](figures/transfer_ranks.png)")]
