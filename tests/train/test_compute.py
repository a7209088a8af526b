"""Compute counts (grpo_bench/train/compute.py): the counter where the model calls are made against the closed
form from the config, on the tiny test model, the embedded world and a tiny diffusers model; resumed runs; the
shared update-0 eval; the results view that derives compute for cells stored before the counters."""

from __future__ import annotations

import json

import pytest
import tiny_run
import torch
import yaml
from tiny_run import lines
from tiny_world import TinyModel, TinyReward

from grpo_bench.config import expected_compute, metrics
from grpo_bench.config.run import RunConfig, resolve
from grpo_bench.config.sections import section
from grpo_bench.train import compute
from grpo_bench.train.trainer import train

pytestmark = pytest.mark.filterwarnings("ignore")

COUNTS = (*metrics.COMPUTE_COUNTS, metrics.COMPUTE_TRAINING)



def shape(cfg: RunConfig) -> expected_compute.ComputeShape:
    """The closed form's section of ``cfg``."""
    return section(cfg, expected_compute.ComputeShape)

def tiny(**kw) -> RunConfig:
    return tiny_run.tiny(**{**dict(updates=3, eval_every=2, diag_every=2, save_videos=False), **kw})


def check_against_closed_form(cfg: RunConfig, out, final: dict) -> None:
    cfg = resolve(cfg)
    for u, line in enumerate(lines(out)):
        want = expected_compute.expected(shape(cfg), u + 1)
        assert {k: line[k] for k in COUNTS} == want, (u, cfg.method, cfg.kl)
    assert {k: final["compute"][k] for k in COUNTS} == expected_compute.expected(shape(cfg), cfg.updates)


def test_closed_form_by_hand():
    """One number written out: flow_grpo training every step 0..T-2 (K = S = 4), dual KL (moving anchor
    stored, stepwise: no anchor), P=2, G=4, T=5, guidance 2 (doubled calls), 2 inner epochs, diag and eval
    every 2, 4 updates."""
    cfg = resolve(tiny(method="flow_grpo", kl="dual", steps=5, group_size=4, guidance=2.0, inner_epochs=2,
                       updates=4, max_train_steps=None))
    one = expected_compute.per_update(shape(cfg))
    rows = 2 * 4 * 2  # P * G * (CFG halves)
    assert one[metrics.COMPUTE_ROLLOUT] == rows * 5
    assert one[metrics.COMPUTE_TRAIN_FORWARD] == one[metrics.COMPUTE_TRAIN_BACKWARD] == rows * 4 * 2  # K=4, 2 epochs
    assert one[metrics.COMPUTE_REFERENCE] == rows * 4  # one stored anchor, once per trained pair
    assert one[metrics.COMPUTE_DIAG_BACKWARD] == rows * 4
    assert one[metrics.COMPUTE_EVAL] == 8 * 2 * 2 * 5  # 8 held-out world prompts x 2 samples x CFG x T
    total = expected_compute.expected(shape(cfg), 4)
    assert total[metrics.COMPUTE_DIAG_FORWARD] == 2 * one[metrics.COMPUTE_DIAG_FORWARD]  # updates 0 and 2
    assert total[metrics.COMPUTE_EVAL] == 3 * one[metrics.COMPUTE_EVAL]  # before 0, before 2, after 3
    assert total[metrics.COMPUTE_TRAINING] == 4 * (rows * 5 + rows * 4 + 2 * rows * 4 * 2)


@pytest.mark.parametrize("kw", [
    dict(method="dance_grpo", kl="dual", inner_epochs=2, minibatches=2),  # random K of S, shared group noise
    dict(method="sage_grpo", kl="stepwise", stepwise_ref="previous", guidance=2.0),  # a live anchor, CFG
    dict(method="flow_grpo", kl="fixed", step_every="micro_step", micro_batch=3, diag_every=1),
    dict(method="cps", kl="none", window=[0, 2]),
])
def test_counted_equals_closed_form_tiny(tmp_path, kw):
    cfg = tiny(**kw)
    final = train(cfg, tmp_path / "run", model=TinyModel(seed=0), reward=TinyReward())
    check_against_closed_form(cfg, tmp_path / "run", final)
    assert final["metrics"][metrics.COMPUTE_SECONDS] > 0


def test_counted_equals_closed_form_world(tmp_path):
    cfg = RunConfig(model="world", reward="world_oracle", method="sage_grpo", kl="dual", steps=3,
                    prompts_per_update=2, group_size=2, updates=2, eval_every=1, eval_samples=1, diag_every=1,
                    minibatches=2, checkpoint_every=10, device="cpu", save_videos=False, mixed_precision="no")
    final = train(cfg, tmp_path / "run")
    check_against_closed_form(cfg, tmp_path / "run", final)


def test_counted_equals_closed_form_diffusers(tmp_path):
    from dist_train_script import ToyReward
    from section_support import model_of

    cfg = tiny_run.tiny(model="tiny-wan", method="flow_grpo", kl="fixed", frames=5, height=16, width=16, lora_rank=2,
                        eval_samples=1, eval_every=1, diag_every=1, save_videos=False, guidance=3.0)
    model = model_of(cfg)
    final = train(cfg, tmp_path / "run", model=model, reward=ToyReward())
    check_against_closed_form(cfg, tmp_path / "run", final)


def test_minibatching_moves_no_pass():
    a = expected_compute.per_update(shape(resolve(tiny(minibatches=1))))
    assert a == expected_compute.per_update(shape(resolve(tiny(minibatches=4, micro_batch=1, step_every="micro_step"))))


class Stop(Exception):
    pass


def test_resumed_run_keeps_its_totals(tmp_path):
    """The totals live in the checkpoint: a run stopped after update 2 and resumed logs the same counts."""
    kw = dict(updates=4, checkpoint_every=2, kl="dual", inner_epochs=2)

    def stop(done, total, line):
        if done == 3:
            raise Stop

    with pytest.raises(Stop):
        train(tiny(**kw), tmp_path / "cut", model=TinyModel(seed=0), reward=TinyReward(), progress=stop)
    state = json.loads(next((tmp_path / "cut" / "checkpoints").iterdir()).joinpath("state.json").read_text())
    assert state["compute"][metrics.COMPUTE_ROLLOUT] == expected_compute.expected(shape(resolve(tiny(**kw))), 2)[
        metrics.COMPUTE_ROLLOUT]
    final = train(tiny(**kw), tmp_path / "cut", model=TinyModel(seed=0), reward=TinyReward())
    check_against_closed_form(tiny(**kw), tmp_path / "cut", final)


def test_shared_base_eval_is_charged_to_the_cell_that_reads_it(tmp_path):
    """Two cells of a suite folder: the second reads the update-0 eval the first stored, and both count it."""
    (tmp_path / "suite.yaml").write_text("name: x\n")
    cfg = dict(model="world", reward="world_oracle", steps=2, prompts_per_update=2, group_size=2, updates=2,
               eval_every=10, eval_samples=1, diag_every=0, device="cpu", save_videos=False, mixed_precision="no")
    finals = [train(RunConfig(method=mth, **cfg), tmp_path / mth) for mth in ("flow_grpo", "cps")]
    stored = json.loads(next((tmp_path / "_base_eval").glob("*.json")).read_text())
    assert stored["compute_eval"] == expected_compute.per_update(shape(resolve(RunConfig(method="cps", **cfg))))[
        metrics.COMPUTE_EVAL]
    for final in finals:
        assert final["compute"][metrics.COMPUTE_EVAL] == 2 * stored["compute_eval"]  # base + final


def test_backward_hook_leaves_the_gradient_alone():
    counter = compute.Compute()
    w = torch.nn.Parameter(torch.tensor(2.0))
    fn = counter.velocity(lambda x, s, c: w * x, metrics.COMPUTE_TRAIN_FORWARD, metrics.COMPUTE_TRAIN_BACKWARD)
    fn(torch.ones(3), torch.zeros(3), None).sum().backward()
    assert w.grad == 3.0
    assert counter.local[metrics.COMPUTE_TRAIN_FORWARD] == counter.local[metrics.COMPUTE_TRAIN_BACKWARD] == 3
    with torch.no_grad():
        fn(torch.ones(5), torch.zeros(5), None)
    assert counter.local[metrics.COMPUTE_TRAIN_FORWARD] == 8 and counter.local[metrics.COMPUTE_TRAIN_BACKWARD] == 3


def test_results_view_derives_compute_for_cells_stored_without_counters(tmp_path):
    """The report's compute view: counted where the cell logged it, the same closed form where it did not
    (marked derived), and both agree on the same cell."""
    from grpo_bench.report.data import compute_curves
    from grpo_bench.suite.rows import cell_rows

    cfg = tiny(method="flow_grpo", kl="fixed", updates=3, eval_every=2)
    train(cfg, tmp_path / "run", model=TinyModel(seed=0), reward=TinyReward())
    meta = {"suite": "s", "id": "c1", "group": "flow_grpo", "labels": {},
            "config": yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())}
    counted = compute_curves(cell_rows(tmp_path / "run", meta))
    # the same cell as a pre-counter version stored it: no compute_* in its metrics or final.json
    old = tmp_path / "old"
    old.mkdir()
    kept = [{k: v for k, v in line.items() if not k.startswith(metrics.COMPUTE_PREFIX)} for line in lines(
        tmp_path / "run")]
    (old / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in kept))
    final = json.loads((tmp_path / "run" / "final.json").read_text())
    final.pop("compute")
    final["metrics"] = {k: v for k, v in final["metrics"].items() if not k.startswith(metrics.COMPUTE_PREFIX)}
    (old / "final.json").write_text(json.dumps(final))
    derived = compute_curves(cell_rows(old, {**meta, "id": "c0"}))
    assert not counted["derived"].any() and derived["derived"].all()
    cols = ["update", *COUNTS]
    assert counted[cols].reset_index(drop=True).equals(derived[cols].reset_index(drop=True))
    assert list(counted["update"]) == [0, 1, 2, 3]  # before any update, then after each
    assert counted[metrics.COMPUTE_TRAINING].iloc[0] == 0


def test_a_method_with_its_own_pass_hooks_has_no_closed_form(monkeypatch):
    """A method that changes the passes through a hook (here: a group's shared ODE prefix) is counted, never
    given the formula of the static methods."""
    from grpo_bench.core import method as core_method

    real = core_method.make_method

    def branching(name, **kw):
        m = real(name, **kw)
        m.__class__ = type("Branching", (type(m),), {"share_prefix": True})
        return m

    monkeypatch.setattr(core_method, "make_method", branching)
    with pytest.raises(expected_compute.ClosedFormUnknown, match="share_prefix"):
        expected_compute.per_update(shape(resolve(tiny())))


def test_a_stored_config_without_its_method_options_derives_the_resolved_configs_compute():
    """A config read back from disk that lacks the method's options (its KL among them) is resolved as a cell's
    is before the closed form reads it: the same counts as the full config, not a traceback."""
    from grpo_bench.report.data import _stored_compute_shape

    full = resolve(tiny(method="flow_grpo")).to_dict()
    partial = {k: v for k, v in full.items() if k not in ("kl", "noise_level", "kernel", "step_rule", "objective")}
    got = expected_compute.expected_curve(_stored_compute_shape(partial), 3)
    assert got == expected_compute.expected_curve(_stored_compute_shape(full), 3)
    assert got[-1][metrics.COMPUTE_TRAINING] > 0
