"""The step rule as a component (core/step_rules.py) and the objective as a run option: every shipped method's
schedule is one registered rule, any method runs any rule or ratio objective, both id-neutral at their defaults,
and bad input is one line before any work."""

from __future__ import annotations

import sys

import pytest
import torch
from tiny_run import tiny
from tiny_world import TinyModel, TinyReward

from grpo_bench.cli import entry
from grpo_bench.config.identity import cell_id
from grpo_bench.config.run import RunConfig, resolve
from grpo_bench.core import schedule
from grpo_bench.core.method import RunShape, make_method
from grpo_bench.core.rollout import generator
from grpo_bench.errors import UserError
from grpo_bench.train.trainer import train

SIG10 = schedule.sigmas(10, 3.0)


def _masks(method, updates=60, seed=0):
    return [method.update_steps(SIG10, u, generator(seed, "window", u)) for u in range(updates)]


@pytest.mark.parametrize("shipped, rule, params", [
    ("flow_grpo_fast", "window", {"steps.size": 3, "steps.placement": "random"}),
    ("mix_grpo", "window", {"steps.size": 4, "steps.range_end": -2, "steps.placement": "sliding"}),
    ("flow_dppo", "sparse", {"steps.n": 3, "steps.range_end": 0.5}),
])
def test_a_shipped_schedule_is_its_rule_run_by_another_method(shipped, rule, params):
    """The rule a method declares, chosen by a run of FlowGRPO (flow kernel, every step stochastic), draws the same
    steps from the same stream (flow_grpo_fast's CPS kernel leaves its eligible steps 0..T-2 alike)."""
    own = make_method(shipped)
    chosen = make_method("flow_grpo", step_rule=rule, params=params)
    assert not chosen.own_rule and own.own_rule
    assert all(torch.equal(a, b) for a, b in zip(_masks(own), _masks(chosen)))


def test_window_placements_in_closed_form():
    random = _masks(make_method("flow_grpo", step_rule="window", params={"steps.size": 3}), 200)
    starts = {int(m.nonzero()[0]) for m in random}
    assert starts == {0, 1, 2}  # [0, T//2 - size]: every start drawn
    assert all(m.sum() == 3 and m.nonzero().flatten().diff().eq(1).all() for m in random)
    fixed = _masks(make_method("flow_grpo", step_rule="window", params={"steps.size": 2, "steps.range_start": 4,
                                                                         "steps.placement": "fixed"}), 5)
    assert all(m.nonzero().flatten().tolist() == [4, 5] for m in fixed)
    sliding = make_method("flow_grpo", step_rule="window", params={
        "steps.size": 4, "steps.range_end": -2, "steps.placement": "sliding", "steps.iters_per_window": 25})
    # T=10: range [0, 8), 8 starts, one every 25 updates, the window cut at step 8, back to 0 after the last
    expect = {0: [0, 1, 2, 3], 25: [1, 2, 3, 4], 150: [6, 7], 175: [7], 200: [0, 1, 2, 3]}
    for u, idx in expect.items():
        assert sliding.update_steps(SIG10, u).nonzero().flatten().tolist() == idx


def test_sparse_and_branch_rules_draw_what_they_say():
    sparse = _masks(make_method("flow_grpo", step_rule="sparse", params={"steps.n": 2, "steps.range_start": 0.2,
                                                                         "steps.range_end": 0.7}), 100)
    picked = [tuple(m.nonzero().flatten().tolist()) for m in sparse]
    assert all(len(p) == 2 and all(2 <= i < 7 for i in p) for p in picked)
    assert len(set(picked)) == 10  # every 2 of the 5 steps in [2, 7)
    branch = _masks(make_method("flow_grpo", step_rule="branch", shared_noise=True), 200)
    assert all(m.sum() == 1 for m in branch)
    assert {int(m.nonzero()[0]) for m in branch} == set(range(9))  # uniform over the trainable steps 0..T-2
    assert make_method("flow_grpo").update_steps(SIG10, 0) is None  # rule 'all': the static steps


def test_step_rule_and_objective_are_id_neutral_at_their_defaults():
    base = cell_id(resolve(RunConfig(method="flow_grpo_fast")))
    assert cell_id(resolve(RunConfig(method="flow_grpo_fast", step_rule="window"))) == base  # its own, named
    assert cell_id(resolve(RunConfig(method="flow_grpo_fast", objective="clipped"))) == base
    own = resolve(RunConfig(method="flow_grpo_fast"))
    assert own.step_rule is None and own.objective is None and not any(k.startswith("steps.") for k in own.params)
    chosen = resolve(RunConfig(method="flow_grpo_fast", step_rule="sparse", objective="kl_mask"))
    assert cell_id(chosen) != base and chosen.step_rule == "sparse" and chosen.objective == "kl_mask"
    assert chosen.params["steps.n"] == 3  # the chosen rule's defaults, filled in
    resized = resolve(RunConfig(method="flow_grpo_fast", params={"steps.size": 2}))
    assert cell_id(resized) != base and resized.step_rule == "window" and resized.params["steps.size"] == 2


def test_a_chosen_objective_runs_at_its_own_defaults(tmp_path):
    """GRPO-Guard's parameters are not Flow-DPPO's: its run with the KL mask trains (kl_mask reads None, its own
    defaults), where handing it GRPO-Guard's parameters would fail on the missing kl_threshold."""
    cfg = tiny(method="grpo_guard", objective="kl_mask", step_rule="sparse", steps=6, prompts_per_update=1,
               eval_every=2, eval_samples=1, checkpoint_every=2, save_videos=False)
    train(cfg, tmp_path / "run", model=TinyModel(seed=0), reward=TinyReward())
    assert (tmp_path / "run" / "final.json").is_file()


def test_a_rule_run_by_a_method_checks_its_run():
    with pytest.raises(UserError, match=r"step rule 'branch' .* needs shared_noise: true"):
        make_method("flow_grpo", step_rule="branch").check_run(SIG10, RunShape(4, 2, shared_noise=False))
    with pytest.raises(UserError, match=r"steps.n=6 distinct trained steps do not fit in \[0, 5\)"):
        make_method("flow_grpo", step_rule="sparse", params={"steps.n": 6}).check_run(SIG10, RunShape(4, 2, False))


TINY = ["updates=1", "prompts_per_update=1", "group_size=2", "eval_samples=1", "save_videos=false"]


@pytest.mark.parametrize("args, says", [
    (["--method", "flow_grpo", "step_rule=window", "steps.size=1", "steps.range_start=9", "steps.range_end=10"],
     "the window at steps 9..9 has no trained (stochastic) step"),
    (["--method", "flow_grpo", "step_rule=fixed_window"], "unknown step rule 'fixed_window'"),
    (["--method", "flow_grpo", "step_rule=window", "steps.width=2"], "has no parameter steps.width; allowed: "),
    (["--method", "diffusion_nft", "objective=kl_mask", "kl=none"], "its loss family 'nft' computes none"),
    (["--method", "flow_grpo", "objective=trust_me"], "unknown policy objective 'trust_me'"),
])
def test_bad_step_rule_or_objective_is_one_line_before_any_work(args, says, tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    monkeypatch.setattr(sys, "argv", ["grpo-bench", "train", *args, "--out", str(out), *TINY])
    with pytest.raises(SystemExit) as exit_:
        entry.main()
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and says in err and len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err and not out.exists()
