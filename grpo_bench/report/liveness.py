"""Mechanisms that did not act: a table compares trust regions, clips and weight schedules only
where the logged metrics show them moving.

A PPO ratio that is identically 1 (one optimizer step per rollout: the policy at loss time is the
rollout policy), a clip that never clips, a KL term that is identically zero, or an adaptive KL
weight pinned at its floor makes two rows of a table the same algorithm under different names.
Updates whose optimizer steps change few weights (``weights_changed``: bf16 parameters that an AdamW step
of a small lr cannot move) train less than they report, and an update that changed no weight at all
(``weights_changed`` 0) or that no gradient reached (NaN: a detached loss) is a no-op. A training forward
whose log-prob differs from the rollout's at the same parameters (``logp_gap`` above ``LOGP_GAP_WARN``)
trains a policy other than the one that sampled. This part lists every such finding per row, from the
per-update metrics alone.

A mechanism the recipe itself makes inert is said to be so, not reported as a fault: under one optimizer
step per rollout (the official SAGE-GRPO schedule, ``minibatches: 1``) the loss sees the rollout policy,
so the PPO ratio is 1, the clip cannot act and a step-wise KL against the rollout policy is 0 by design.
A likelihood-free method (DiffusionNFT) has no PPO ratio at all: its rows say so once.
"""

from __future__ import annotations

import pandas as pd

from grpo_bench.config.metrics import WEIGHTS_CHANGED_WARN
from grpo_bench.report import data
from grpo_bench.report.parts import TABLES, Context, Section
from grpo_bench.report.tables import write_table

FLOOR_SHARE = 0.25
"""An adaptive weight is 'stuck at its floor' (ceiling) when it sits at kl_beta_min (kl_beta_max) for at
least this share of the run's last updates, without leaving it again."""


INERT = "inert by the recipe: one optimizer step per rollout, so the loss sees the rollout policy"
"""The finding of a mechanism that a one-step-per-rollout recipe turns off by design."""


LOGP_GAP_WARN = 1e-4
"""A row's train-inference log-prob gap (``logp_gap``: mean |log p_train - log p_rollout| at the rollout's own
parameters, which an exact implementation holds at ~1e-7 in float32; VeRL-Omni's RFC #280 reports ~2e-5 in bf16)
is a finding above this: 5x that bf16 figure, and a gap at which the ratio leaves FlowGRPO's whole PPO clip
range (1e-4) before any optimizer step."""


NO_RATIO = "absent by the method: its loss family computes no log-prob, so there is no ratio to clip"
"""The finding of a PPO ratio or clip on a likelihood-free method (DiffusionNFT): none exists to act."""


def _likelihood_free(cfg: dict) -> bool:
    """The row's method trains without log-probs (its loss family declares ``needs_logprob = False``)."""
    from grpo_bench.core.method import make_method
    from grpo_bench.errors import UserError

    try:
        return not make_method(str(cfg.get("method"))).needs_logprob
    except (UserError, KeyError, TypeError):  # a method this install does not have: judged as before
        return False


def _dead(values: pd.Series) -> bool:
    return len(values) > 0 and bool((values.abs() < 1e-12).all())


def one_step_per_rollout(cfg: dict) -> bool:
    """The recipe gives each rollout a single optimizer step (so the PPO ratio is 1 at that step)."""
    return (str(cfg.get("step_every", "minibatch")) == "minibatch"
            and int(cfg.get("minibatches", 2)) * int(cfg.get("inner_epochs", 1)) == 1)


def findings(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (setting, row, mechanism) that never acted: setting, group, mechanism, finding."""
    cells = data.cells(df)
    config = dict(zip(cells["cell"], cells["config"]))
    curves: dict[str, pd.DataFrame] = {}  # each metric's per-update rows, read out of the long table once

    def curve(name: str) -> pd.DataFrame:
        if name not in curves:
            curves[name] = data.curves(df, name)
        return curves[name]

    # NaN kept (data.curves drops it): an update no gradient reached
    weights_changed = df.loc[(df["kind"] == "update") & (df["metric"] == "weights_changed"), ["cell", "value"]]
    out = []
    for (setting, group), part in cells.groupby(["setting", "group"], sort=False):
        ids = set(part["cell"])

        def metric(name: str, ids=ids) -> pd.Series:
            rows = curve(name)
            return rows.loc[rows["cell"].isin(ids), "value"].astype(float)

        def add(mechanism: str, finding: str, setting=setting, group=group) -> None:
            out.append({"setting": setting, "group": group, "mechanism": mechanism, "finding": finding})

        raw = weights_changed.loc[weights_changed["cell"].isin(ids), "value"].astype(float)
        noop, dead = int((raw == 0).sum()), int(raw.isna().sum())
        if noop or dead:
            add("weight updates", f"{noop + dead} of {len(raw)} updates were no-ops: {noop} changed no weight "
                                  f"(weights_changed 0), {dead} received no gradient (NaN: a detached loss?)")
        changed = raw.dropna()
        if len(changed) and float(changed.median()) < WEIGHTS_CHANGED_WARN:
            share = float(changed.median())
            add("weight updates", f"median {share:.1%} of the trainable elements the gradients reached "
                                  "changed per update: the optimizer steps round away (bf16 parameters at a small lr?)")
        gap = metric("logp_gap").dropna()
        if len(gap) and float(gap.max()) > LOGP_GAP_WARN:
            add("train-inference consistency", _gap_finding(gap, [config[c] for c in ids]))
        by_recipe = all(one_step_per_rollout(config[c]) for c in ids)
        if all(_likelihood_free(config[c]) for c in ids):
            if _dead(metric("ratio_mean") - 1) or _dead(metric("clip_frac")):
                add("PPO ratio and clip", NO_RATIO)
        else:
            if _dead(metric("ratio_mean") - 1):
                add("PPO ratio", f"identically 1: {INERT}" if by_recipe else
                    "identically 1: the loss sees the rollout policy (one optimizer step per rollout)")
            if _dead(metric("clip_frac")):
                add("PPO clip", f"never clipped a sample: {INERT}" if by_recipe else
                    "never clipped a sample" + _ratio_within_clip(metric("ratio_mean"), [config[c] for c in ids]))
        kls = {str(config[c].get("kl")) for c in ids}
        if kls - {"none", "None"} and _dead(metric("kl")):
            add("KL penalty", "identically 0")
        if _dead(metric("kl_stepwise")):
            rollout_ref = all(str(config[c].get("stepwise_ref", "rollout")) == "rollout" for c in ids)
            add("step-wise KL", f"identically 0: {INERT}" if by_recipe and rollout_ref else
                "identically 0 (its reference is the rollout policy)")
        adaptive = [c for c in ids if config[c].get("kl_adaptive") and str(config[c].get("kl")) not in ("none", "None")]
        for bound, key in (("floor", "kl_beta_min"), ("ceiling", "kl_beta_max")):
            starts = [_bound_from(curve("kl_weight"), c, float(config[c].get(key, float("nan"))), bound)
                      for c in adaptive]
            stuck = [s for s in starts if s is not None]
            if stuck:
                since = f"{min(stuck)}" if min(stuck) == max(stuck) else f"{min(stuck)}–{max(stuck)}"
                add("adaptive KL weight", f"{len(stuck)} of {len(starts)} cells stuck at its {bound} {key} from "
                                          f"update {since} to the end")
    return pd.DataFrame(out, columns=["setting", "group", "mechanism", "finding"])


def _gap_finding(gap: pd.Series, configs: list[dict]) -> str:
    """The log-prob gap between rollout and training at the same parameters, against the threshold and the
    row's PPO clip range (a gap of the clip's size makes the clip act on rounding, not on policy change)."""
    over = int((gap > LOGP_GAP_WARN).sum())
    text = (f"the training forward's log-prob differs from the rollout's at the same parameters by up to "
            f"{float(gap.max()):.2g} (median {float(gap.median()):.2g}; {over} of {len(gap)} updates above "
            f"{LOGP_GAP_WARN:g}): rollout and training compute different policies (precision, guidance, batch shape?)")
    ranges = {float(c["clip_range"]) for c in configs if c.get("clip_range") is not None}
    if len(ranges) == 1:
        (clip,) = ranges
        text += f"; the median gap is {float(gap.median()) / clip:.2g}x the clip range {clip:g}"
    return text


def _ratio_within_clip(ratio: pd.Series, configs: list[dict]) -> str:
    """Why a clip that never fired did not: how far the ratio moved against the clip range (a step too small
    for the range, e.g. an unscaled log-prob at a small lr), when the ratio did move."""
    moved = float((ratio - 1).abs().max()) if len(ratio) else 0.0
    ranges = {float(c["clip_range"]) for c in configs if c.get("clip_range") is not None}
    if moved < 1e-12 or len(ranges) != 1:
        return ""
    (clip,) = ranges
    return (f" (the per-update mean PPO ratio stayed within {moved:.1g} of 1, {clip / moved:.0f}× inside the "
            f"clip range {clip:g}: the steps moved the policy too little for the clip to act)")


def _bound_from(kl_weight: pd.DataFrame, cell: str, value: float, bound: str = "floor") -> int | None:
    """The update from which the cell's KL weight (``kl_weight``: data.curves' rows of it) stays at its ``bound``
    ('floor' or 'ceiling', of the given value) to the end, when that tail is at least FLOOR_SHARE of its
    updates; None otherwise."""
    rows = kl_weight[kl_weight["cell"] == cell].sort_values("update")
    weight = rows["value"].astype(float)
    at_floor = (weight <= value * (1 + 1e-9) if bound == "floor" else weight >= value * (1 - 1e-9)).tolist()
    tail = 0  # updates at the floor, counted back from the last one
    for flag in reversed(at_floor):
        if not flag:
            break
        tail += 1
    return int(rows["update"].iloc[-tail]) if tail and tail >= FLOOR_SHARE * len(at_floor) else None


@TABLES.register("liveness")
def liveness(ctx: Context) -> list[Section]:
    title = "Mechanisms that did not act"
    found = findings(ctx.df)
    how = ("From the per-update metrics of every cell of a row: a mechanism listed here never moved, so rows "
           "that differ only in it are the same algorithm; one marked 'inert by the recipe' is off by the "
           "recipe's design (one optimizer step per rollout), not a fault. Train-inference consistency is listed "
           f"when a row's logp_gap (mean |log p_train - log p_rollout| at the rollout's parameters) exceeds "
           f"{LOGP_GAP_WARN:g} in some update. An empty table means every logged mechanism acted.")
    if found.empty:
        return [Section(title, how, "Every logged mechanism acted.\n")]
    rows = [[r.setting, r.group, r.mechanism, r.finding] for r in found.itertuples()]
    md = write_table(ctx.out, "liveness", ["Setting", "Row", "Mechanism", "Finding"], rows, found, "llll")
    return [Section(title, how, md)]
