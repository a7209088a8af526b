"""The optimise phase of one GRPO update (docs/design.md §3–4): on diagnostic updates the measured
per-step gradient norms (before any step, rho = 1); then ``inner_epochs`` × ``minibatches`` passes,
each accumulating one forward+backward per (micro-batch, trained step) into one optimizer step
(``step_every: minibatch``) or stepping after every one of them (``micro_step``), grad-norm clip; the
moving anchor follows the optimizer steps, the KL weight the updates or the optimizer steps. How a
step is taken (FSDP2, DeepSpeed, plain) is the stepper's business (``steppers.py``).
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, replace
from typing import Any

import torch

from grpo_bench.core.loss import per_step_grad_norms, step_terms
from grpo_bench.train import metrics as m
from grpo_bench.train.collect import RolloutBatch
from grpo_bench.train.phase_inputs import PhaseInputs


@dataclass
class StepGradNorms:
    """The diagnostic of one update: measured |grad L_i| per step, before any optimizer step."""

    per_step: list[float | None] | None  # [T] (None: a step not stored); None when not a diagnostic update
    time_diag: float  # seconds

    def metrics(self) -> dict[str, Any]:
        return {} if self.per_step is None else {m.GRAD_NORM_PER_STEP: self.per_step}


@dataclass
class OptimizeStats:
    """What one update's optimizer steps did, as means over the whole batch (every rank)."""

    losses: dict[str, float]  # per (sample, trained step): policy_loss, kl and its named parts, ratio_mean, clip_frac
    kl_weight: float  # the weight these steps used (an adaptive one moves after them)
    grad_norm: float  # mean over the update's optimizer steps, before clipping
    optimizer_steps: int  # run totals
    anchor_copies: int
    kl_target: float = float("nan")  # the adaptive weight's target after these steps (NaN: constant weight)
    time_train: float = 0.0  # seconds
    weights_changed: float = float("nan")  # share of trainable elements these steps changed (landing.py)

    def metrics(self) -> dict[str, Any]:
        target = {m.KL_TARGET: self.kl_target} if self.kl_target == self.kl_target else {}  # adaptive weights only
        return {**self.losses, m.KL_WEIGHT: self.kl_weight, **target, m.GRAD_NORM: self.grad_norm,
                m.OPTIMIZER_STEPS: self.optimizer_steps, m.ANCHOR_COPIES: self.anchor_copies,
                m.WEIGHTS_CHANGED: self.weights_changed}

    def mean_over_ranks(self, acc: Any) -> OptimizeStats:
        """The float statistics averaged over the processes (equal shards: the whole batch's means)."""
        if acc.num_processes == 1:
            return self
        floats = {**self.losses, m.KL_WEIGHT: self.kl_weight, m.GRAD_NORM: self.grad_norm}
        keys = sorted(k for k, v in floats.items() if isinstance(v, float))
        vals = acc.reduce(torch.tensor([floats[k] for k in keys], device=acc.device, dtype=torch.float64), "mean")
        mean = dict(zip(keys, vals.tolist()))
        return replace(self, losses={k: mean.get(k, v) for k, v in self.losses.items()},
                       kl_weight=mean.get(m.KL_WEIGHT, self.kl_weight), grad_norm=mean.get(m.GRAD_NORM, self.grad_norm))


def measure_step_grad_norms(t: PhaseInputs, batch: RolloutBatch, u: int) -> StepGradNorms:
    """Per-step gradient norms on the updates ``diag_every`` picks (none when 0)."""
    cfg, start = t.cfg, time.perf_counter()
    per_step = None
    if cfg.diag_every and u % cfg.diag_every == 0:
        with t.autocast():
            per_step = per_step_grad_norms(t.ctx, batch.rollout, batch.advantages, t.params, cfg.steps,
                                           micro_batch=cfg.micro_batch)
    return StepGradNorms(per_step, m.clock(t.device) - start)


def optimize(t: PhaseInputs, batch: RolloutBatch) -> OptimizeStats:
    """inner_epochs × minibatches passes over one rollout, one optimizer step per minibatch
    (``step_every: minibatch``) or per (micro-batch, trained step) backward (``micro_step``, the
    official SAGE-GRPO / DanceGRPO schedule); then the KL weight adapts to the whole batch's mean KL
    (averaged over the processes first, so every rank's weight stays equal), or after every optimizer
    step to that step's (``kl_schedule_unit: optimizer_step``)."""
    cfg, start = t.cfg, time.perf_counter()
    ro, adv, steps = batch.rollout, batch.advantages, batch.train_steps.to(t.device)
    B, K = steps.shape
    per_step_kl = cfg.kl_schedule_unit == "optimizer_step"
    sums: dict[str, float] = defaultdict(float)
    n, grad_norms, copies, used = 0, [], 0, []
    t.probe.begin()
    for _ in range(cfg.inner_epochs):
        for mb in torch.arange(B, device=t.device).chunk(cfg.minibatches):
            groups = _step_groups(mb, steps, K, cfg.micro_batch, cfg.step_every == "micro_step")
            for group in groups:  # one optimizer step each
                t.stepper.zero_grad()
                w = t.kl_weight.value
                used.append(w)
                pairs = sum(len(rows) for rows, _ in group)  # (j, i) pairs this optimizer step averages over
                step_kl = 0.0
                for p, (rows, rows_steps) in enumerate(group):
                    with t.autocast():
                        terms = step_terms(t.ctx, ro, adv, rows, rows_steps)
                        loss = (terms.policy.sum() + w * terms.kl[m.KL].sum()) / pairs
                    t.stepper.backward(loss, last=p == len(group) - 1)
                    sums[m.POLICY_LOSS] += float(terms.policy.detach().sum())
                    for name, val in terms.kl.items():
                        sums[name] += float(val.detach().sum())
                    step_kl += float(terms.kl[m.KL].detach().sum())
                    sums[m.RATIO_MEAN] += float(terms.ratio.sum())
                    sums[m.CLIP_FRAC] += float(((terms.ratio - 1).abs() > t.ctx.clip_range).sum())
                    n += len(rows)
                t.probe.touch()
                t.anchors.before_optimizer_step()  # a 'previous' anchor keeps the parameters about to change
                grad_norms.append(t.stepper.step())  # averaged over ranks, clipped, stepped
                t.counters.optimizer_steps += 1
                copies += t.anchors.after_optimizer_step(t.counters.optimizer_steps)
                if per_step_kl:  # warm-up and feedback count optimizer steps
                    t.kl_weight.update(_rank_mean(t.acc, step_kl / pairs))
    t.counters.anchor_copies += copies
    losses = {k: v / n for k, v in sums.items()}
    w = used[0] if not per_step_kl else sum(used) / len(used)  # the weight these steps used (their mean)
    stats = OptimizeStats(losses, kl_weight=w, grad_norm=sum(grad_norms) / len(grad_norms),
                          optimizer_steps=t.counters.optimizer_steps, anchor_copies=t.counters.anchor_copies)
    stats = stats.mean_over_ranks(t.acc)
    if not per_step_kl:
        t.kl_weight.update(stats.losses[m.KL])
    return replace(stats, kl_target=t.kl_weight.target, weights_changed=t.probe.end(),
                   time_train=m.clock(t.device) - start)


def _rank_mean(acc: Any, value: float) -> float:
    """A float averaged over the processes (every rank's KL weight follows the same number)."""
    if acc.num_processes == 1:
        return value
    return float(acc.reduce(torch.tensor([value], device=acc.device, dtype=torch.float64), "mean")[0])


def _step_groups(mb: torch.Tensor, steps: torch.Tensor, K: int, micro_batch: int,
                 micro_step: bool) -> list[list[tuple[torch.Tensor, torch.Tensor]]]:
    """The backward passes of one minibatch ``mb`` as (rows, their trained steps), grouped by optimizer step.

    Per minibatch: one group, every (sample j, trained step i) pair of the minibatch batched into forwards of
    ``micro_batch`` pairs (fewer, larger calls). Per micro-step: one group per (micro-batch of samples,
    trained step k), as the official code steps."""
    if micro_step:
        return [[(rows, steps[rows, k])] for rows in mb.split(micro_batch or len(mb)) for k in range(K)]
    pair_rows, pair_steps = mb.repeat_interleave(K), steps[mb].flatten()
    chunk = micro_batch or len(pair_rows)
    return [list(zip(pair_rows.split(chunk), pair_steps.split(chunk)))]
