"""Optimizer steps as each author runs them (docs/real_models.md): the trainer's own loop (train/optimize.py),
counted with a stub loss, takes the optimizer steps, backward passes and samples per step that the official
codes take, for every cell of the real-model suites; ``micro_batch`` changes only rounding; DanceGRPO's
best-of-n keeps the extreme rollouts of each group; a schedule the batch cannot carry is one line.

Numbers quoted from the official code:

* SAGE-GRPO (Tencent-Hunyuan/SAGE-GRPO), whose training loop also runs the paper's baselines
  (post_train.py ``--sde_type`` choices ``["dance_grpo", "sage_grpo", "flow_grpo", "cps"]``):
  post_train.py ``self.grpo_args.gradient_accumulation_steps = (int(self.config.gradient_accumulation_steps)
  * int(self.config.grpo_sampling_steps) * int(max(self.config.batch_size, 1)))`` = 1 x 20 x 2 = 40;
  hyvideo/utils/grpo_utils.py train_one_step: ``final_loss = loss / args.gradient_accumulation_steps`` then
  ``is_update_step = scalar_states.train_steps % args.gradient_accumulation_steps == 0`` after each of the
  2 samples x 20 timesteps: ONE optimizer step per rollout per rank; scripts/post_train/train_grpo.sh
  ``--batch_size 2 --num_generations 4 --sp_size 2`` on 8 GPUs: 4 data-parallel ranks, 8 videos per step;
  ``--update_ref_model_step 10`` counted in update_steps (post_train.py maybe_update_ref_model_for_kl).
* DanceGRPO (XueZeyue/DanceGRPO) scripts/finetune/finetune_hunyuan_grpo.sh ``--num_generations 24
  --bestofn 8 --gradient_accumulation_steps 4 --sampling_steps 16 --timestep_fraction 0.6``;
  fastvideo/train_grpo_hunyuan.py keeps ``samples["timesteps"][:, :-1]`` (15 steps), trains
  ``int(15 * 0.6)`` = 9 per sample and steps when ``(i+1)%args.gradient_accumulation_steps==0`` over the 8
  kept samples: 2 optimizer steps per rollout, each 4 samples x 9 timesteps = 36 backwards per rank.
  finetune_wan_2_1_grpo.sh ``--train_batch_size 2 --num_generations 12 --gradient_accumulation_steps 24``:
  1 optimizer step per rollout.
* FlowGRPO (yifan123/flow_grpo) config/grpo.py: ``config.train.gradient_accumulation_steps =
  config.sample.num_batches_per_epoch//2`` ("gradients are updated twice per epoch").
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from grpo_bench.config import metrics as m
from grpo_bench.config import recipe
from grpo_bench.config.run import from_dict, resolve
from grpo_bench.config.run import section as cfg_section
from grpo_bench.core.kl_weight import ConstantKLWeight
from grpo_bench.core.loss import StepTerms
from grpo_bench.errors import UserError
from grpo_bench.suite.expand import expand
from grpo_bench.suite.parse import load_suite
from grpo_bench.train import optimize as opt
from grpo_bench.train.state import Counters

ROOT = Path(__file__).resolve().parents[2]


class _Stepper:
    """Counts backward passes per optimizer step and the rows each step saw."""

    def __init__(self):
        self.w = torch.zeros((), requires_grad=True)
        self.backwards, self.steps, self.rows = 0, [], set()

    def zero_grad(self):
        self.w.grad = None

    def autocast(self):
        return contextlib.nullcontext()

    def backward(self, loss, last):
        loss.backward()
        self.backwards += 1

    def step(self):
        self.steps.append((self.backwards, len(self.rows)))
        self.backwards, self.rows = 0, set()
        return 0.0


class _Anchors:
    def before_optimizer_step(self):
        pass

    def after_optimizer_step(self, n):
        return int(n % 10 == 0)

    def after_update(self, optimizer_steps):  # anchors updated once per update (DiffusionNFT's old policy)
        return 0


def count(cfg, processes: int):
    """Run optimize() on one process's batch of ``cfg`` with a stub loss: [(backwards, samples)] per step."""
    sched = recipe.schedule(cfg_section(cfg, recipe.UpdateShape), processes)
    B, K = sched.rows_per_process, sched.trained_steps
    stepper = _Stepper()

    def terms(ctx, ro, adv, rows, rows_steps):
        stepper.rows.update(rows.tolist())
        policy = stepper.w * torch.ones(len(rows))
        return StepTerms(policy, {m.KL: torch.zeros(len(rows))}, torch.ones(len(rows)))

    batch = SimpleNamespace(rollout=None, advantages=torch.randn(B, generator=torch.Generator().manual_seed(0)),
                            train_steps=torch.arange(K).expand(B, K))
    state = SimpleNamespace(stepper=stepper, anchors=_Anchors(), kl_weight=ConstantKLWeight(0.0), counters=Counters(),
                            compute=SimpleNamespace(loss_context=lambda ctx, *kinds: ctx))  # no model to count
    acc = SimpleNamespace(num_processes=1)
    probe = SimpleNamespace(begin=lambda: None, touch=lambda: None, end=lambda: 1.0)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(opt, "step_terms", terms)
        opt.optimize(batch, SimpleNamespace(clip_range=1e-4), state, cfg_section(cfg, opt.Passes), acc, probe)
    return stepper.steps, sched


def _cells(suite: str):
    s = load_suite(ROOT / "suites" / f"{suite}.yaml")
    return [c for c in expand(s) if c.config.seed == 0], int(s.resources.get("gpus_per_cell", 1))


@pytest.mark.parametrize("suite", ["hunyuan15_paper", "hunyuan15_main_table"])
def test_hunyuan_suites_step_once_per_rollout_over_8_videos_as_sage_grpos_code(suite):
    cells, gpus = _cells(suite)
    assert gpus == 8
    for cell in cells:
        steps, sched = count(cell.config, gpus)
        assert len(steps) == 1 == sched.steps_per_rollout, cell.label  # official: one step per rollout per rank
        assert sched.samples_per_step == 8, cell.label  # official: batch_size 2 x 4 data-parallel ranks
        backwards, samples = steps[0]
        assert samples * gpus == 8 and backwards == sched.backwards_per_step == samples * sched.trained_steps
        assert sched.steps_per_rollout * cell.config.anchor_every == 10  # the anchor every 10 rollouts
        if cell.config.method == "sage_grpo" and suite == "hunyuan15_paper":
            assert sched.pairs_per_step == 160  # official: 8 videos x 20 timesteps per optimizer step


def test_wan_small_steps_once_per_rollout_as_dancegrpos_wan_script():
    cells, gpus = _cells("wan_small")
    for cell in cells:
        steps, sched = count(cell.config, gpus)
        assert len(steps) == 1 and steps[0][1] == 16, cell.label  # the whole rollout (official: 24 per rank)


def _cfg(**kw):
    base = dict(method="dance_grpo", reward="world_oracle", device="cpu", eval_samples=1, diag_every=0)
    return resolve(from_dict({**base, **kw}))


def test_dancegrpo_hunyuan_recipe_two_steps_of_4_samples_x_9_timesteps():
    cfg = _cfg(steps=16, prompts_per_update=1, group_size=24, bestofn=8, minibatches=2, max_train_steps=None,
               micro_batch=1)
    steps, sched = count(cfg, 1)
    assert sched.trained_steps == 9  # int(15 * 0.6)
    assert steps == [(36, 4), (36, 4)] and sched.steps_per_rollout == 2 and sched.samples_per_step == 4


def test_flowgrpo_steps_twice_per_epoch():
    steps, _ = count(_cfg(method="flow_grpo", minibatches=2, max_train_steps=3, micro_batch=0), 1)
    assert [s for _, s in steps] == [8, 8]  # one forward per step at micro_batch 0 (the whole minibatch)


def test_micro_batch_changes_no_optimizer_step():
    for every in ("minibatch", "micro_step"):
        counts = {mb: count(_cfg(step_every=every, max_train_steps=3, micro_batch=mb), 1)[0] for mb in (0, 1, 3)}
        assert len({len(v) for v in counts.values()}) == 1, every
        assert len({tuple(s for _, s in v) for v in counts.values()}) == 1, every


def test_best_of_n_keeps_the_extremes_of_each_group():
    adv = torch.tensor([0.1, -2.0, 3.0, 0.5, -0.3, 1.0, 2.0, -1.0])
    assert opt.trained_rows(adv, 4, 2).tolist() == [1, 2, 6, 7]
    assert opt.trained_rows(adv, 4, 4).tolist() == list(range(8))
    assert opt.trained_rows(adv, 4, 0).tolist() == list(range(8))


@pytest.mark.parametrize("kw, match", [
    (dict(bestofn=3), "'bestofn' \\(3\\) must be even"),
    (dict(bestofn=10), "at most group_size"),
    (dict(minibatches=3), "'minibatches' \\(3 optimizer steps per pass\\) does not divide the 16"),
])
def test_a_schedule_the_batch_cannot_carry_is_one_line(kw, match):
    with pytest.raises(UserError, match=match):
        from_dict(dict(method="dance_grpo", reward="world_oracle", device="cpu", **kw))


def test_the_schedule_is_checked_for_the_processes_of_a_launch():
    cfg = _cfg(prompts_per_update=2, group_size=4, bestofn=2)
    recipe.check(cfg_section(cfg, recipe.UpdateShape), 2)
    with pytest.raises(UserError, match="whole groups on every process"):
        recipe.check(cfg_section(cfg, recipe.UpdateShape), 4)


@pytest.mark.filterwarnings("ignore")
def test_two_micro_batch_sizes_give_the_same_update(tmp_path):
    """micro_batch is an execution field: the same update to fp32 rounding (world model, minibatch schedule; bf16
    autocast rounds differently per batch shape, about 1% of the update, so this compares in fp32)."""
    from grpo_bench.train.trainer import Trainer

    params, start = {}, None
    for mb in (0, 1):
        cfg = resolve(from_dict(dict(method="sage_grpo", updates=1, prompts_per_update=1, group_size=4,
                                     max_train_steps=2, reward="world_oracle", eval_samples=1, diag_every=0,
                                     checkpoint_every=100, save_videos=False, device="cpu", threads=1,
                                     minibatches=2, micro_batch=mb, lr=1e-3, mixed_precision="no")))
        t = Trainer(cfg, tmp_path / f"mb{mb}")
        start = [p.detach().clone() for p in t.params]
        t.update(0)
        params[mb] = [p.detach().clone() for p in t.params]
    # AdamW divides by |g|: elements with a gradient near its eps move by rounding, so the whole update is compared
    delta = {mb: torch.cat([(p - s).flatten() for p, s in zip(params[mb], start)]) for mb in (0, 1)}
    assert delta[0].norm() > 0 and (delta[0] - delta[1]).norm() < 1e-3 * delta[0].norm()
