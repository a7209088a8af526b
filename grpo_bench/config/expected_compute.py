"""What a run will compute, in sample-step passes, in closed form from its config (docs/statistics.md "Compute",
docs/design.md §7): the counts train/compute.py's counter must log, derived without running anything, so that the
suite's pace and the reports' equal-compute axis read them below the trainer. tests/train/test_compute.py holds the
counter against this formula.

``expected`` is the closed form of the same run totals from a config's ``ComputeShape`` section (P, G, T, trained
steps per sample, stored steps, inner_epochs, guidance, the KL's anchors, eval and diag cadence). The trainer never
uses it; results of cells stored before the counters existed get their compute from it (``report/data.py``
``compute_curves``, marked ``derived``) and a test holds it against the counter. ``minibatches``, ``micro_batch``
and ``step_every`` move how the passes are grouped into optimizer steps and calls, never how many there are.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from grpo_bench.config import metrics as m
from grpo_bench.config.sections import Cadence, MethodChoice, Sampling, TrustRegion

HOOKS = ("update_steps", "anchor_policies", "share_prefix", "loss_family", "objective")
"""Method hooks that can change how many passes an update makes (a window that moves, a group's shared ODE
prefix, the method's own anchors, another loss): the closed form covers only methods that keep the base
class's, so a method that declares one is counted by its cells, never given a formula it does not follow."""


class ClosedFormUnknown(ValueError):
    """The config's method changes the pass counts through a hook the closed form does not model."""


@dataclass(frozen=True)
class ComputeShape:
    """What a run's pass counts follow from, the section the closed form reads (``section(cfg, ComputeShape)``,
    config/sections.py): the method and its options, the trust region (its anchors), the sampler and batch, the
    optimizer passes, the eval prompts and samples, and the eval and diagnostic cadence."""

    method_choice: MethodChoice
    trust_region: TrustRegion
    sampling: Sampling
    cadence: Cadence
    inner_epochs: int
    prompts: str
    eval_samples: int


def per_update(shape: ComputeShape) -> dict[str, int]:
    """The sample-step passes of one update of a run of ``shape`` (diag counts those of a diagnostic update) and
    of one evaluation (``compute_eval``); ClosedFormUnknown for a method with its own ``HOOKS``."""
    from grpo_bench.config.prompts import load_prompt_set
    from grpo_bench.core import schedule
    from grpo_bench.core.method import Method
    from grpo_bench.core.trust_region import make_kl

    choice, sampling = shape.method_choice, shape.sampling
    mult = 1 if sampling.guidance == 1.0 else 2  # a guided call runs the doubled batch
    method = choice.build()
    own = [h for h in HOOKS if getattr(type(method), h, None) != getattr(Method, h, None)]
    if not method.rule.static:  # a window, sparse draw or branching step (the method's or the run's)
        own.append(f"step rule {method.rule.name!r}")
    if own:
        raise ClosedFormUnknown(f"method {choice.method!r} declares {', '.join(own)}: its passes are counted, "
                                "not derived")
    sigmas = schedule.sigmas(sampling.steps, sampling.shift)
    stored = int(method.eligible_steps(sigmas).sum())  # S: the steps a rollout keeps (and diagnostics measure)
    trained = int(method.train_steps(sigmas, 1, torch.Generator().manual_seed(0)).shape[1])  # K per sample
    policies = make_kl(shape.trust_region, kind=choice.kl, params=choice.params).anchor_policies()
    live = sum(1 for p in policies.values() if p.live)  # evaluated at loss time, every training pass
    fixed = len(policies) - live  # stored by the rollout, once per trained (sample, step) pair
    rows = sampling.prompts_per_update * sampling.group_size * mult  # B model rows of one call over the batch
    pairs = rows * trained  # trained (sample, step) pairs, in model rows
    eval_rows = len(load_prompt_set(shape.prompts).eval) * shape.eval_samples * mult
    return {
        m.COMPUTE_ROLLOUT: rows * sampling.steps,
        m.COMPUTE_REFERENCE: pairs * (fixed + shape.inner_epochs * live),
        m.COMPUTE_TRAIN_FORWARD: pairs * shape.inner_epochs,
        m.COMPUTE_TRAIN_BACKWARD: pairs * shape.inner_epochs,
        m.COMPUTE_DIAG_FORWARD: rows * stored * (1 + live),
        m.COMPUTE_DIAG_BACKWARD: rows * stored,
        m.COMPUTE_EVAL: eval_rows * sampling.steps,
    }


def expected(shape: ComputeShape, updates: int) -> dict[str, int]:
    """The run totals logged on the metrics line of update ``updates - 1`` (after ``updates`` updates, with
    the evaluations the run makes up to there: before update u when u % eval_every == 0 or u is in eval_at,
    except before the last, and after the last), ``compute_training`` included. The update-0 evaluation is
    counted even where a suite shares it (trainer.py ``base_evaluation``: a cell that reads it is charged what
    it cost)."""
    return expected_curve(shape, updates)[-1]


def expected_curve(shape: ComputeShape, updates: int) -> list[dict[str, int]]:
    """``expected(shape, n)`` for n = 0, 1, ..., ``updates`` (0: nothing computed yet), in one pass."""
    cadence = shape.cadence
    one, last = per_update(shape), cadence.updates - 1
    total = dict.fromkeys(m.COMPUTE_COUNTS, 0)
    out = [{**total, m.COMPUTE_TRAINING: 0}]
    for u in range(updates):
        diag = cadence.diagnoses(u)
        evals = cadence.evaluates_before(u) + (u == last)  # before update u; after the last
        for k in m.COMPUTE_COUNTS:
            if k in (m.COMPUTE_DIAG_FORWARD, m.COMPUTE_DIAG_BACKWARD):
                total[k] += one[k] * diag
            else:
                total[k] += one[k] * (evals if k == m.COMPUTE_EVAL else 1)
        out.append({**total, m.COMPUTE_TRAINING: sum(total[k] for k in m.TRAINING_COUNTS)})
    return out
