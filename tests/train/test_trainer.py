"""The GRPO loop end to end on a tiny model: files, determinism, resume, every method × KL variant."""

from __future__ import annotations

import json

import pytest
import torch
import yaml
from tiny_run import lines, no_times, run, tiny
from tiny_world import TinyModel, TinyReward
from typer.testing import CliRunner

from grpo_bench.config.run import RunConfig, resolve
from grpo_bench.core.method import METHODS, make_method
from grpo_bench.core.trust_region import KL_VARIANTS
from grpo_bench.errors import UserError
from grpo_bench.train.trainer import train

REQUIRED = ("update", "reward", "reward_vq", "reward_mq", "reward_ta", "reward_std_in_group", "policy_loss", "kl",
            "kl_weight", "ratio_mean", "clip_frac", "grad_norm", "time_rollout", "time_reward", "time_train")
EVAL = ("eval_oracle_vq", "eval_oracle_mq", "eval_oracle_ta", "eval_correct", "eval_manifold", "eval_diversity",
        "eval_reward")


def test_run_folder_contents(tiny_finished_run):
    out, final = tiny_finished_run.path, tiny_finished_run.final
    for name in ("config.yaml", "metrics.jsonl", "final.json", "DONE", "samples/final_eval.pt"):
        assert (out / name).is_file(), name
    assert list((out / "checkpoints").iterdir())[0].name == "update_000003"
    assert yaml.safe_load((out / "config.yaml").read_text()) == resolve(tiny(updates=3, eval_every=2, diag_every=2,
                                                                              kl="dual", kl_weight=0.1)).to_dict()
    rows = lines(out)
    assert [r["update"] for r in rows] == [0, 1, 2]
    for r in rows:
        assert set(REQUIRED) <= set(r)
    assert set(EVAL) <= set(rows[0]) and rows[0]["eval_at"] == 0  # the base policy
    assert "eval_reward" not in rows[1]
    assert set(EVAL) <= set(rows[2]) and rows[2]["eval_at"] == 3  # the final policy
    # grad_norm_per_step at updates 0 and 2: length T, a measured norm for every trained (sage: every) step
    for r in (rows[0], rows[2]):
        assert len(r["grad_norm_per_step"]) == 3 and all(g > 0 for g in r["grad_norm_per_step"])
    assert "grad_norm_per_step" not in rows[1]
    assert final == json.loads((out / "final.json").read_text())
    assert final["eval"]["eval_reward"] == rows[2]["eval_reward"] and final["metrics"]["reward"] == rows[2]["reward"]
    assert len(final["eval_videos"]) == 8 * 2
    assert set(final["eval_videos"][0]) == {"prompt", "sample", "seed", "oracle_vq", "oracle_mq", "oracle_ta",
                                            "correct", "manifold", "judge_reward"}
    videos = torch.load(out / "samples" / "final_eval.pt")
    assert videos.shape == (16, 3, 8, 16, 16) and videos.dtype == torch.float16
    # a finished run is not redone
    assert run(out.parent, out.name, updates=3, eval_every=2, diag_every=2, kl="dual", kl_weight=0.1) == final


def test_untrained_steps_are_null_in_grad_norm_per_step(tmp_path):
    run(tmp_path, method="flow_grpo", kl="none", updates=1, diag_every=1)
    g = lines(tmp_path / "run")[0]["grad_norm_per_step"]
    assert g[-1] is None and all(x > 0 for x in g[:-1])  # flow trains steps 0..T-2


def test_same_seed_same_metrics_and_params_change(tmp_path):
    m1, m2 = TinyModel(seed=0), TinyModel(seed=0)
    before = [p.detach().clone() for p in m1.net.parameters()]
    run(tmp_path, "a", model=m1, updates=3, kl="fixed", kl_weight=1.0, diag_every=2)
    run(tmp_path, "b", model=m2, updates=3, kl="fixed", kl_weight=1.0, diag_every=2)
    assert no_times(lines(tmp_path / "a")) == no_times(lines(tmp_path / "b"))
    assert all(not torch.equal(p, q) for p, q in zip(before, m1.net.parameters()))
    c = run(tmp_path, "c", model=TinyModel(seed=0), updates=3, kl="fixed", kl_weight=1.0, diag_every=2, seed=1)
    assert c["metrics"]["reward"] != lines(tmp_path / "a")[-1]["reward"]


def test_kl_is_zero_at_the_anchor_and_positive_after_an_update(tmp_path):
    run(tmp_path, kl="fixed", kl_weight=0.5, updates=3, minibatches=1)  # one optimizer step per rollout
    rows = lines(tmp_path / "run")
    assert rows[0]["kl"] == 0.0 and rows[0]["ratio_mean"] == 1.0
    assert rows[1]["kl"] > 0 and rows[2]["kl"] > 0


def test_moving_anchor_follows_optimizer_steps(tmp_path):
    run(tmp_path, kl="moving", kl_weight=0.5, updates=5, anchor_every=2, minibatches=1)
    rows = lines(tmp_path / "run")
    assert [r["anchor_copies"] for r in rows] == [0, 1, 1, 2, 2]
    # just after a copy (updates 2 and 4 roll out with the fresh copy): KL exactly 0 at the first inner step
    assert rows[2]["kl"] == 0.0 and rows[4]["kl"] == 0.0 and rows[1]["kl"] > 0 and rows[3]["kl"] > 0


@pytest.mark.parametrize("kl, ref, term", [("stepwise", "rollout", "kl"), ("stepwise", "previous", "kl"),
                                           ("dual", "rollout", "kl_stepwise"), ("dual", "previous", "kl_stepwise")])
def test_default_optimizer_steps_make_the_trust_region_act(tmp_path, kl, ref, term):
    """Two optimizer steps per rollout (the default): the ratio moves, the clip acts, the step-wise KL is
    non-zero in every update; with one step per rollout and the rollout reference all three are inert."""
    run(tmp_path, kl=kl, stepwise_ref=ref, kl_weight=0.1, updates=3, clip_range=1e-4)
    for r in lines(tmp_path / "run"):
        assert r[term] != 0.0 and r["ratio_mean"] != 1.0 and r["clip_frac"] > 0 and r["optimizer_steps"] % 2 == 0
    if ref == "rollout":
        run(tmp_path, "one", kl=kl, stepwise_ref=ref, kl_weight=0.1, updates=2, minibatches=1)
        assert all(r[term] == 0.0 and r["ratio_mean"] == 1.0 for r in lines(tmp_path / "one"))


def test_auto_kl_target_is_logged_and_measured(tmp_path):
    run(tmp_path, kl="fixed", kl_adaptive=True, kl_target_auto=True, kl_warmup=2, kl_window=2, kl_target=123.0,
        updates=4)
    rows = lines(tmp_path / "run")
    assert rows[0]["kl_target"] == 123.0  # before the end of the warm-up: the configured guess
    assert rows[1]["kl_target"] == pytest.approx((rows[0]["kl"] + rows[1]["kl"]) / 2)
    assert rows[3]["kl_target"] == rows[1]["kl_target"]


class Stop(Exception):
    pass


def _stop_after(k):
    def progress(done, total, line):
        if done == k:
            raise Stop

    return progress


@pytest.mark.parametrize("stop", [2, 3])  # 2: at a checkpoint; 3: one update past it (redone on resume)
def test_resume_gives_the_same_later_metrics(tmp_path, stop):
    kw = dict(updates=5, checkpoint_every=2, eval_every=2, diag_every=2, kl="dual", kl_adaptive=True,
              kl_beta_min=0.01, kl_beta_max=1.0, kl_warmup=2, kl_target=1e-6, inner_epochs=2, minibatches=2)
    whole = run(tmp_path, "whole", **kw)
    with pytest.raises(Stop):
        train(tiny(**kw), tmp_path / "cut", model=TinyModel(seed=0), reward=TinyReward(), progress=_stop_after(stop))
    assert len(lines(tmp_path / "cut")) == stop
    resumed = train(tiny(**kw), tmp_path / "cut", model=TinyModel(seed=0), reward=TinyReward())
    assert no_times(lines(tmp_path / "cut")) == no_times(lines(tmp_path / "whole"))
    assert resumed["eval_videos"] == whole["eval_videos"]


def test_no_resume_starts_over_and_changed_config_is_refused(tmp_path):
    run(tmp_path, updates=1)
    with pytest.raises(UserError, match="different config"):
        run(tmp_path, updates=2)
    train(tiny(updates=2), tmp_path / "run", resume=False, model=TinyModel(), reward=TinyReward())
    assert [r["update"] for r in lines(tmp_path / "run")] == [0, 1]


class NaNReward(TinyReward):
    def __call__(self, videos, prompts):
        out = super().__call__(videos, prompts)
        out["ta"] = out["ta"].clone()
        out["ta"][0] = float("nan")
        return out


def test_non_finite_reward(tmp_path):
    with pytest.raises(UserError, match="on_bad_reward=zero"):
        run(tmp_path, "err", reward=NaNReward(), updates=1)
    assert not (tmp_path / "err" / "metrics.jsonl").exists() or lines(tmp_path / "err") == []
    run(tmp_path, "zero", reward=NaNReward(), updates=1, on_bad_reward="zero")
    assert lines(tmp_path / "zero")[0]["bad_rewards"] == 1


@pytest.mark.parametrize("method", sorted(METHODS.names()))
def test_one_update_for_every_method_and_kl_variant(tmp_path, method):
    # a method with no log-probs takes no KL trust region (it refuses one: methods/diffusion_nft.py)
    variants = KL_VARIANTS.names() if make_method(method).needs_logprob else ["none"]
    for kl in variants:
        m = TinyModel(seed=0)
        before = [p.detach().clone() for p in m.net.parameters()]
        steps = {"steps": 6} if method == "flow_dppo" else {}  # its 3 sparse SDE steps need 3 in [0, T/2)
        final = run(tmp_path, f"{method}-{kl}", model=m, method=method, kl=kl, updates=1, kl_weight=0.1,
                    eval_samples=1, save_videos=False, **steps)
        row = final["metrics"]
        assert row["update"] == 0 and row["optimizer_steps"] == RunConfig().minibatches
        assert all(torch.isfinite(torch.tensor(row[k])) for k in ("reward", "policy_loss", "kl", "grad_norm"))
        assert any(not torch.equal(p, q) for p, q in zip(before, m.net.parameters())), (method, kl)


def test_cli_rejects_bad_input_before_sampling(tmp_path, monkeypatch):
    import grpo_bench.cli.entry as cli

    monkeypatch.setattr("grpo_bench.train.trainer.Trainer.__init__", lambda *a, **k: pytest.fail("sampling started"))
    runner = CliRunner()
    for args, needle in (
        (["--method", "nope"], "unknown method"),
        (["--kl", "tight"], "unknown KL variant"),
        (["group_size=1"], "group_size"),
        (["no_such_key=3"], "unknown config key"),
        (["--setting", "C"], "unknown setting"),
    ):
        result = runner.invoke(cli.app, ["train", "--out", str(tmp_path / "x"), *args])
        assert isinstance(result.exception, UserError) and needle in str(result.exception), args
    assert not (tmp_path / "x").exists()


def test_cli_train_end_to_end_with_default_folder(tmp_path, monkeypatch):
    import grpo_bench.cli.entry as cli
    from grpo_bench import models, rewards

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(models, "load", lambda name, **kw: TinyModel(seed=0))
    monkeypatch.setattr(rewards, "load", lambda name, **kw: TinyReward())
    args = ["train", "--method", "cps", "--kl", "moving", "--setting", "B", "--seed", "3", "--updates", "2",
            "--device", "cpu", "steps=3", "prompts_per_update=2", "group_size=2", "eval_samples=2", "kl_weight=0.1"]
    result = CliRunner().invoke(cli.app, args)
    assert result.exit_code == 0, result.output
    (folder,) = (tmp_path / "runs" / "train").iterdir()
    assert folder.name.startswith("cps-moving-B-s3-")
    assert "run folder" in result.output and folder.name in result.output.replace("\n", "")
    cfg = yaml.safe_load((folder / "config.yaml").read_text())
    assert (cfg["method"], cfg["kl"], cfg["setting"], cfg["seed"], cfg["updates"]) == ("cps", "moving", "B", 3, 2)
    assert (folder / "DONE").is_file() and len(lines(folder)) == 2


def test_the_update_0_eval_is_computed_once_per_seed_and_shared(tmp_path):
    """Cells of one seed of a suite evaluate the same base policy: the second reads the first's stored eval
    (the same numbers it would compute); another seed computes its own."""
    from grpo_bench.config.run import from_dict

    def cell(name: str, **kw):
        cfg = from_dict({"updates": 2, "eval_samples": 1, "save_videos": False, "reward": "world_oracle",
                         "steps": 4, "prompts_per_update": 2, "group_size": 2, "threads": 1, "kl": "none", **kw})
        train(cfg, tmp_path / name)
        return lines(tmp_path / name)[0]

    (tmp_path / "suite.yaml").write_text("name: s\n")  # a suite folder: its cells share the update-0 eval
    first = cell("a", method="sage_grpo")
    shared = cell("b", method="flow_grpo")
    (tmp_path / "_base_eval").rename(tmp_path / "moved")
    recomputed = cell("c", method="dance_grpo")
    evals = [{k: v for k, v in r.items() if k.startswith("eval_")} for r in (first, shared, recomputed)]
    assert evals[0] == evals[1] == evals[2] and evals[0]["eval_oracle_ta"] > 0
    assert len(list((tmp_path / "moved").glob("*.json"))) == 1
    other_seed = cell("d", seed=1)
    assert {k: v for k, v in other_seed.items() if k.startswith("eval_")} != evals[0]
    assert len(list((tmp_path / "_base_eval").glob("*.json"))) == 2  # c's and d's
    final = json.loads((tmp_path / "b" / "final.json").read_text())
    assert len(final["base_eval_videos"]) == 8 and final["precision"] in ("no", "bf16")


def test_cli_train_summary_names_the_reward_it_trained_on(tmp_path, monkeypatch):
    import grpo_bench.cli.entry as cli
    from grpo_bench import models, rewards

    monkeypatch.setattr(models, "load", lambda name, **kw: TinyModel(seed=0))
    monkeypatch.setattr(rewards, "load", lambda name, **kw: TinyReward())
    args = ["train", "--method", "cps", "--updates", "3", "--device", "cpu", "--out", str(tmp_path / "r"), "steps=3",
            "prompts_per_update=1", "group_size=2", "eval_samples=1", "reward=world_oracle"]
    result = CliRunner().invoke(cli.app, args, terminal_width=200)
    assert result.exit_code == 0, result.output
    done = next(ln for ln in result.output.splitlines() if ln.startswith("done:"))
    assert " eval oracle " in done and "judge" not in done
    # what the run costs: its size before the first update, an estimate of the rest after it (once)
    assert "3 updates x 1 prompts x 2 rollouts, 3 sampler steps" in result.output
    assert result.output.count("update 1 of 3 took ") == 1 and "the other 2 and 1 evaluation(s) take about" in \
        result.output
