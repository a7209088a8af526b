"""The optimise phase of one GRPO update (docs/design.md §3–4): on diagnostic updates the measured
per-step gradient norms (before any step, rho = 1); then ``inner_epochs`` × ``minibatches`` passes,
each accumulating one forward+backward per (micro-batch, trained step) into one optimizer step
(``step_every: minibatch``) or stepping after every one of them (``micro_step``), grad-norm clip; the
moving anchor follows the optimizer steps, the KL weight the updates or the optimizer steps. How a
step is taken (FSDP2, DeepSpeed, plain) is the stepper's business (``steppers.py``).

``optimize(batch, loss_ctx, state, passes, acc, probe)`` takes what it uses: the collected batch, the loss
context (core/loss.py), the run's mutable state (train/state.py: stepper, anchors, KL weight, counters,
which it advances), how the passes run (``Passes``, from the run config), the accelerator for the means
over processes and the probe that counts changed weights.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch

from grpo_bench.config import metrics as m
from grpo_bench.core.loss import LossContext, per_step_grad_norms, step_terms
from grpo_bench.train.clock import clock
from grpo_bench.train.collect import RolloutBatch
from grpo_bench.train.compute import Compute
from grpo_bench.train.state import TrainState


@dataclass(frozen=True)
class Passes:
    """How one rollout is trained: ``inner_epochs`` x ``minibatches`` passes of forwards of ``micro_batch``
    (sample, step) pairs, one optimizer step per minibatch or per micro-step (``step_every``); the KL weight
    adapts per update or per optimizer step (``kl_schedule_unit``)."""

    inner_epochs: int
    minibatches: int
    micro_batch: int
    step_every: str
    kl_schedule_unit: str
    group_size: int = 2
    bestofn: int = 0


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

    losses: dict[str, float]  # per (sample, trained step): policy_loss, kl and its named parts, ratio_mean, clip_frac;
    # logp_gap per pair of the first optimizer step (the train-inference consistency, at the rollout's parameters)
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


def measure_step_grad_norms(batch: RolloutBatch, loss: LossContext, params: list[torch.Tensor], steps: int,
                            micro_batch: int, autocast: Callable[[], Any], device: torch.device,
                            due: bool = True, compute: Compute | None = None, group: Any = None) -> StepGradNorms:
    """Per-step gradient norms of the policy loss over ``steps`` steps, when ``due`` (a diagnostic update);
    ``compute`` counts their forwards and backwards as diagnostic passes (compute.py); ``group``: the
    sequence-parallel group whose partial gradients are summed (core/loss.py ``per_step_grad_norms``)."""
    start = time.perf_counter()
    per_step = None
    if due:
        if compute is not None:
            loss = compute.loss_context(loss, m.COMPUTE_DIAG_FORWARD, m.COMPUTE_DIAG_BACKWARD, m.COMPUTE_DIAG_FORWARD)
        with autocast():
            per_step = per_step_grad_norms(loss, batch.rollout, batch.advantages, params, steps,
                                           micro_batch=micro_batch, group=group)
    return StepGradNorms(per_step, clock(device) - start)


def optimize(batch: RolloutBatch, loss_ctx: LossContext, state: TrainState, passes: Passes, acc: Any,
             probe: Any) -> OptimizeStats:
    """inner_epochs × minibatches passes over one rollout, one optimizer step per minibatch
    (``step_every: minibatch``) or per (micro-batch, trained step) backward (``micro_step``, the
    official SAGE-GRPO / DanceGRPO schedule); then the KL weight adapts to the whole batch's mean KL
    (averaged over the processes first, so every rank's weight stays equal), or after every optimizer
    step to that step's (``kl_schedule_unit: optimizer_step``)."""
    start, device = time.perf_counter(), batch.advantages.device
    stepper, anchors, kl_weight, counters = state.stepper, state.anchors, state.kl_weight, state.counters
    ro, adv, steps = batch.rollout, batch.advantages, batch.train_steps.to(device)
    loss_ctx = state.compute.loss_context(loss_ctx, m.COMPUTE_TRAIN_FORWARD, m.COMPUTE_TRAIN_BACKWARD,
                                          m.COMPUTE_REFERENCE)  # the passes counted (compute.py)
    B, K = steps.shape
    per_step_kl = passes.kl_schedule_unit == "optimizer_step"
    sums: dict[str, float] = defaultdict(float)
    n, grad_norms, copies, used = 0, [], 0, []
    gap, gap_pairs = 0.0, 0  # |logp - logp_old| over the first optimizer step's pairs: the rollout's parameters
    probe.begin()
    trained = trained_rows(adv, passes.group_size, passes.bestofn)
    for _ in range(passes.inner_epochs):
        for mb in trained.chunk(passes.minibatches):
            groups = _step_groups(mb, steps, K, passes.micro_batch, passes.step_every == "micro_step")
            for group in groups:  # one optimizer step each
                stepper.zero_grad()
                w = kl_weight.value
                used.append(w)
                pairs = sum(len(rows) for rows, _ in group)  # (j, i) pairs this optimizer step averages over
                step_kl = 0.0
                for p, (rows, rows_steps) in enumerate(group):
                    with stepper.autocast():
                        terms = step_terms(loss_ctx, ro, adv, rows, rows_steps)
                        loss = (terms.policy.sum() + w * terms.kl[m.KL].sum()) / pairs
                    stepper.backward(loss, last=p == len(group) - 1)
                    sums[m.POLICY_LOSS] += float(terms.policy.detach().sum())
                    for name, val in terms.kl.items():
                        sums[name] += float(val.detach().sum())
                    step_kl += float(terms.kl[m.KL].detach().sum())
                    sums[m.RATIO_MEAN] += float(terms.ratio.sum())
                    sums[m.CLIP_FRAC] += float(((terms.ratio - 1).abs() > loss_ctx.clip_range).sum())
                    if not grad_norms and terms.logp_gap is not None:  # no optimizer step taken yet
                        gap += float(terms.logp_gap.sum())
                        gap_pairs += len(rows)
                    n += len(rows)
                probe.touch()
                anchors.before_optimizer_step()  # a 'previous' anchor keeps the parameters about to change
                grad_norms.append(stepper.step())  # averaged over ranks, clipped, stepped
                counters.optimizer_steps += 1
                copies += anchors.after_optimizer_step(counters.optimizer_steps)
                if per_step_kl:  # warm-up and feedback count optimizer steps
                    kl_weight.update(_rank_mean(acc, step_kl / pairs))
    copies += anchors.after_update(counters.optimizer_steps)  # an anchor that follows once per rollout
    counters.anchor_copies += copies
    losses = {k: v / n for k, v in sums.items()}
    if gap_pairs:
        losses[m.LOGP_GAP] = gap / gap_pairs
    w = used[0] if not per_step_kl else sum(used) / len(used)  # the weight these steps used (their mean)
    stats = OptimizeStats(losses, kl_weight=w, grad_norm=sum(grad_norms) / len(grad_norms),
                          optimizer_steps=counters.optimizer_steps, anchor_copies=counters.anchor_copies)
    stats = stats.mean_over_ranks(acc)
    if not per_step_kl:
        kl_weight.update(stats.losses[m.KL])
    return replace(stats, kl_target=kl_weight.target, weights_changed=probe.end(),
                   time_train=clock(device) - start)


def _rank_mean(acc: Any, value: float) -> float:
    """A float averaged over the processes (every rank's KL weight follows the same number)."""
    if acc.num_processes == 1:
        return value
    return float(acc.reduce(torch.tensor([value], device=acc.device, dtype=torch.float64), "mean")[0])


def trained_rows(adv: torch.Tensor, group_size: int, bestofn: int) -> torch.Tensor:
    """The rows of this process's batch that are trained: all of them, or DanceGRPO's best-of-n selection
    (``bestofn`` k > 0): in each group the k/2 rollouts of highest and the k/2 of lowest advantage, the
    advantages still those of the whole group. DanceGRPO's HunyuanVideo script (XueZeyue/DanceGRPO,
    scripts/finetune/finetune_hunyuan_grpo.sh: ``--num_generations 24 --bestofn 8``;
    fastvideo/train_grpo_hunyuan.py: ``top_indices = sorted_indices[-args.bestofn//2:]``,
    ``bottom_indices = sorted_indices[:args.bestofn//2]``) selects so among one prompt's 24 rollouts on a
    rank. Kept in row order (the official code shuffles them; the minibatches then mix high and low)."""
    B = adv.shape[0]
    every = torch.arange(B, device=adv.device)
    if not bestofn:
        return every
    half = bestofn // 2
    keep = []
    for g in range(B // group_size):
        order = torch.argsort(adv[g * group_size:(g + 1) * group_size], stable=True) + g * group_size
        keep.append(torch.cat([order[:half], order[-half:]]))
    return torch.sort(torch.cat(keep)).values


def _step_groups(mb: torch.Tensor, steps: torch.Tensor, K: int, micro_batch: int,
                 micro_step: bool) -> list[list[tuple[torch.Tensor, torch.Tensor]]]:
    """The backward passes of one minibatch ``mb`` as (rows, their trained steps), grouped by optimizer step.

    Per minibatch: one group, every (sample j, trained step i) pair of the minibatch batched into forwards of
    ``micro_batch`` pairs (fewer, larger calls): gradient accumulation over the pairs, as the official codes
    accumulate. Per micro-step: one group per (sample, trained step k), whatever ``micro_batch`` (an execution
    field: it bounds memory and changes no optimizer step)."""
    if micro_step:
        return [[(rows, steps[rows, k])] for rows in mb.split(1) for k in range(K)]
    pair_rows, pair_steps = mb.repeat_interleave(K), steps[mb].flatten()
    chunk = micro_batch or len(pair_rows)
    return [list(zip(pair_rows.split(chunk), pair_steps.split(chunk)))]
