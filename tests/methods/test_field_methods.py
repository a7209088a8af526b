"""The six field methods (Flow-GRPO-Fast, MixGRPO, GRPO-Guard, Flow-DPPO, TempFlow-GRPO, DiffusionNFT): each
formula against the official code it was read from (quoted in each test's docstring), the hooks they use,
a few updates of training on the tiny world, and their bad inputs (one line, exit 2, before any work)."""

from __future__ import annotations

import ast
import dataclasses
import json
import math
import re
import sys
from pathlib import Path

import pytest
import torch
import yaml
from tiny_run import tiny
from tiny_world import TinyModel, TinyReward
from typer.testing import CliRunner

from grpo_bench.cli import app, entry
from grpo_bench.config.run import RunConfig
from grpo_bench.core import schedule
from grpo_bench.core.loss import OBJECTIVES, RatioInputs
from grpo_bench.core.method import METHODS, RunShape, make_method
from grpo_bench.core.rollout import StepTable, generator, initial_noise, rollout
from grpo_bench.core.sde import gaussian_log_prob
from grpo_bench.errors import UserError
from grpo_bench.train.trainer import train

ROOT = Path(__file__).resolve().parents[2]
FIELD = ("flow_grpo_fast", "mix_grpo", "grpo_guard", "flow_dppo", "tempflow_grpo", "diffusion_nft")
SIG10 = schedule.sigmas(10, 3.0)


# --- Flow-GRPO-Fast ---------------------------------------------------------------------------------------
def test_flow_grpo_fast_window_is_the_official_draw():
    """yifan123/flow_grpo@9745241, diffusers_patch/sd3_pipeline_with_logprob_fast.py:137: ``start =
    random.randint(sde_window_range[0], sde_window_range[1] - sde_window_size)`` (both ends included), SDE for
    ``sde_window[0] <= i < sde_window[1]``, ODE elsewhere; scripts/train_sd3_fast.py: ``num_train_timesteps =
    config.sample.sde_window_size`` and ``for j in range(num_train_timesteps)``: every window step is trained;
    config/grpo.py pickscore_sd3_fast_nocfg: ``sde_window_size = 3`` (l.349), ``sde_window_range = (0,
    config.sample.num_steps//2)`` (l.350)."""
    m = make_method("flow_grpo_fast")
    starts = set()
    for u in range(300):
        mask = m.update_steps(SIG10, u, generator(0, "window", u))
        idx = mask.nonzero().flatten().tolist()
        assert len(idx) == 3 and idx == list(range(idx[0], idx[0] + 3)) and 0 <= idx[0] and idx[-1] < 10 // 2
        starts.add(idx[0])
        trained = m.train_steps(SIG10, 3, generator(0, "steps", u), active=mask)
        assert trained.tolist() == [idx] * 3  # the whole window, nothing else
    assert starts == {0, 1, 2}  # randint(0, 5 - 3): every start, both ends
    wide = make_method("flow_grpo_fast", params={"method.window_size": 3, "method.window_range_end": 8})
    assert {int(wide.update_steps(SIG10, u, generator(1, "window", u)).nonzero()[0]) for u in range(300)} == set(
        range(6))


def test_a_window_table_is_the_kernel_inside_and_the_ode_outside():
    """The per-update table of a window: the static kernel rows inside, the Euler ODE x' = x - Delta v outside."""
    m = make_method("flow_grpo_fast")
    full = StepTable.build(m, SIG10)
    active = torch.zeros(10, dtype=torch.bool)
    active[[3, 4]] = True
    win = StepTable.build(m, SIG10, active=active)
    assert win.sde.nonzero().flatten().tolist() == [3, 4]
    for i in range(10):
        if i in (3, 4):
            assert (win.a[i], win.b[i], win.std[i]) == (full.a[i], full.b[i], full.std[i])
        else:
            assert win.a[i] == 1 and win.std[i] == 0
            assert float(win.b[i]) == pytest.approx(-float(SIG10[i] - SIG10[i + 1]), rel=1e-6)


# --- MixGRPO ----------------------------------------------------------------------------------------------
def _official_mix_windows(sampling_steps: int, updates: int, size: int = 4, iters: int = 25, step: int = 1):
    """Tencent-Hunyuan/MixGRPO, fastvideo/utils/grpo_states.py GRPOTrainingStates (progressive, prog_overlap,
    roll_back) as fastvideo/train_grpo_flux.py drives it: ``max_timesteps = sampling_steps - 2``;
    per step ``timesteps_train = get_current_timesteps()`` then ``update_iteration()``."""
    max_t, cur, it, out = sampling_steps - 2, 0, 0, []
    for _ in range(updates):
        out.append(list(range(cur, min(cur + size, max_t))))
        it += 1
        if it >= iters:
            it, cur = 0, cur + step
        if cur > max_t:  # roll_back_start
            cur, it = 0, 0
    return out


def test_mix_grpo_window_slides_as_the_official_schedule():
    """scripts/finetune/finetune_flux_grpo_MixGRPO.sh: sampling_steps 25, group_size 4, iters_per_group 25,
    sample_strategy progressive, --prog_overlap --prog_overlap_step 1, --roll_back; eta 0.7 (FlowGRPO SDE).
    The official schedule reaches ``cur == max_timesteps`` and then trains an empty window for 25 iterations
    (``range(cur, min(cur + 4, max))`` is empty); this project's reading rolls back one position earlier."""
    m = make_method("mix_grpo")
    assert (m.config.kernel, m.config.noise_level) == ("flow", 0.7)
    sig = schedule.sigmas(25, 3.0)
    official = _official_mix_windows(25, 25 * 24 + 10)
    ours = [m.update_steps(sig, u).nonzero().flatten().tolist() for u in range(len(official))]
    first_empty = official.index([])
    assert first_empty == 25 * 23
    assert ours[:first_empty] == official[:first_empty]
    assert ours[first_empty] == [0, 1, 2, 3] and all(ours)
    assert max(max(w) for w in ours) == 22  # steps up to T - 3
    assert make_method("mix_grpo").train_steps(sig, 2, active=m.update_steps(sig, 30)).tolist() == [[1, 2, 3, 4]] * 2


# --- GRPO-Guard -------------------------------------------------------------------------------------------
def _ratio_inputs(step: int = 2, b: int = 6, shift: float = 0.05, seed: int = 0, sig=SIG10, kernel="flow"):
    method = make_method({"flow": "grpo_guard"}[kernel])
    table = StepTable.build(method, sig)
    g = torch.Generator().manual_seed(seed)
    shape = (b, 3, 2, 4, 4)
    steps = torch.full((b,), step)
    s = table.std[steps]
    mu_old = torch.randn(shape, generator=g)
    eps = torch.randn(shape, generator=g)
    x_next = mu_old + s.view(-1, 1, 1, 1, 1) * eps
    mu = (mu_old + shift * torch.randn(shape, generator=g)).requires_grad_(True)
    inp = RatioInputs(logp=gaussian_log_prob(x_next, mu, s.view(-1, 1, 1, 1, 1)),
                      logp_old=gaussian_log_prob(x_next, mu_old, s.view(-1, 1, 1, 1, 1)),
                      adv=torch.randn(b, generator=g), weight=torch.ones(b), clip_range=1e9, mu=mu, mu_old=mu_old,
                      std=s, lam=table.b[steps].abs(), table_std=table.std)
    return inp, eps, table, steps


def test_grpo_guard_ratio_is_flow_factorys_normalised_ratio():
    """X-GenGroup/Flow-Factory, src/flow_factory/trainers/grpo.py GRPOGuardTrainer.optimize: ``scale_factor =
    sqrt(-dt) * std_dev_t``; ``mse = (next_latents_mean - old_next_latents_mean).flatten(1).pow(2).mean(1)``;
    ``ratio = exp((log_prob - old_log_prob) * scale_factor + mse / (2 * scale_factor))``. The flow_grpo layout
    (``config.rationorm``) writes the same number as ``exp((log_prob - old + mse / (2 sigma_t^2)) * sigma_t)``.
    For the Gaussian log-prob it is exp(mean_e[eps * (mu - mu_old)]): the mean shift removed, the 1/s undone."""
    inp, eps, _, _ = _ratio_inputs()
    _, ratio = OBJECTIVES.get("ratio_norm")(inp, make_method("grpo_guard", params={"method.reweight": False}).params)
    s = inp.std
    mse = (inp.mu - inp.mu_old).pow(2).flatten(1).mean(1)
    flow_factory = torch.exp((inp.logp - inp.logp_old) * s + mse / (2 * s))
    flow_grpo = torch.exp((inp.logp - inp.logp_old + mse / (2 * s**2)) * s)
    closed = torch.exp((eps * (inp.mu - inp.mu_old)).flatten(1).mean(1))
    torch.testing.assert_close(ratio, flow_factory, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(ratio, flow_grpo, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(ratio, closed, rtol=1e-4, atol=1e-5)


def test_grpo_guard_pools_the_mean_shift_per_step_and_divides_by_delta():
    """flow_grpo@9745241 scripts/train_sd3_GRPO_Guard.py: ``ratio_mean_bias = (prev_sample_mean -
    sample["prev_sample_mean"][:, j]).pow(2).mean(dim=tuple(range(1, log_prob.ndim)))`` (l.917) with log_prob of
    shape [b]: ``dim=()`` reduces over the whole micro-batch, one scalar for step j; ``/ (2 * (sqrt_dt.mean() *
    sigma_t) ** 2)`` (l.918); ``ratio = exp((log_prob - old + ratio_mean_bias) * (sqrt_dt.mean() * sigma_t))``
    (l.919); ``policy_loss = policy_loss / (sqrt_dt.mean()**2)`` (l.932), sqrt_dt = sqrt(-dt) = sqrt(Delta)."""
    inp, _, table, steps = _ratio_inputs(step=4)
    delta = SIG10[4] - SIG10[5]
    inp = dataclasses.replace(inp, steps=steps, delta=torch.full_like(inp.std, float(delta)))
    on, ratio = OBJECTIVES.get("ratio_norm")(inp, make_method("grpo_guard").params)
    s = inp.std
    batch_bias = (inp.mu - inp.mu_old).pow(2).mean() / (2 * s**2)  # one scalar over the micro-batch
    official = torch.exp((inp.logp - inp.logp_old + batch_bias) * s)
    torch.testing.assert_close(ratio, official, rtol=1e-5, atol=1e-6)
    off, _ = OBJECTIVES.get("ratio_norm")(inp, make_method("grpo_guard", params={"method.reweight": False}).params)
    torch.testing.assert_close(on, off / float(delta))
    # two steps in one call: each sample's shift pooled over its own step's samples only
    mixed = torch.tensor([4, 4, 4, 7, 7, 7])
    inp = dataclasses.replace(inp, steps=mixed)
    _, r2 = OBJECTIVES.get("ratio_norm")(inp, make_method("grpo_guard").params)
    mse = (inp.mu - inp.mu_old).pow(2).flatten(1).mean(1)
    pooled = torch.cat([mse[:3].mean().expand(3), mse[3:].mean().expand(3)])
    torch.testing.assert_close(r2, torch.exp((inp.logp - inp.logp_old) * s + pooled / (2 * s)), rtol=1e-5, atol=1e-6)
    c = make_method("grpo_guard").config  # config/grpo_guard.py:111-124: beta 0.0, group std, clip 4e-6
    assert (c.kl, c.adv_norm, c.clip_range, c.kernel, c.noise_level) == ("none", "group", 4e-6, "flow", 0.7)


# --- Flow-DPPO --------------------------------------------------------------------------------------------
def test_flow_dppo_masks_as_unirl():
    """Tencent-Hunyuan/UniRL, unirl/algorithms/flowdppo.py ``_flowdppo_kl_adv_loss``: ``kl_per_sample`` = mean of
    ``(p - q) ** 2 / (2 * sigma ** 2)``; ``kl_mask = kl < kl_mask_threshold``; ``pos_rm = ~kl_mask & (ratio > 1)
    & (adv > 0)``; ``neg_rm = ~kl_mask & (ratio < 1) & (adv < 0)``; ``loss = where(~(pos_rm | neg_rm), -adv *
    ratio, 0)``; FlowDPPOConfig ``kl_mask_threshold = 1e-5``."""
    params = make_method("flow_dppo").params
    assert params.kl_threshold == 1e-5
    b, std = 8, torch.full((8,), 0.1)
    mu_old = torch.zeros(b, 3, 2, 2, 2)
    far = torch.tensor([0, 1] * 4, dtype=torch.bool)
    shift = torch.where(far, torch.tensor(0.1 * math.sqrt(2 * 4e-5)), torch.tensor(0.1 * math.sqrt(2 * 2e-6)))
    mu = mu_old + shift.view(-1, 1, 1, 1, 1)  # KL = shift^2 / (2 std^2): 4e-5 (far) or 2e-6 (near)
    up = torch.tensor([1, 1, 0, 0] * 2, dtype=torch.bool)
    logp_old = torch.zeros(b)
    logp = torch.where(up, torch.tensor(0.01), torch.tensor(-0.01))
    adv = torch.tensor([1.0] * 4 + [-1.0] * 4)
    inp = RatioInputs(logp, logp_old, adv, torch.ones(b), 1e-4, mu, mu_old, std, torch.ones(b), std)
    loss, ratio = OBJECTIVES.get("kl_mask")(inp, params)
    kl = (mu - mu_old).pow(2).flatten(1).mean(1) / (2 * std**2)
    rm = (kl >= 1e-5) & (((ratio > 1) & (adv > 0)) | ((ratio < 1) & (adv < 0)))
    assert rm.tolist() == [False, True, False, False, False, False, False, True]
    torch.testing.assert_close(loss, torch.where(rm, torch.zeros(b), -adv * ratio))


# --- TempFlow-GRPO ----------------------------------------------------------------------------------------
def test_tempflow_branches_one_step_and_weights_by_noise():
    """From the paper (arXiv:2508.04324), not verified against code (Shredded-Pork/TempFlow-GRPO holds only a
    README): one branching step per update, trained alone, with a noise-aware weight; ours: std_i over the mean
    std of the stochastic steps (mean 1 over them)."""
    m = make_method("tempflow_grpo")
    seen = set()
    for u in range(200):
        mask = m.update_steps(SIG10, u, generator(0, "window", u))
        assert int(mask.sum()) == 1
        seen.add(int(mask.nonzero()[0]))
        assert m.train_steps(SIG10, 4, generator(0, "steps", u), active=mask).tolist() == [[int(mask.nonzero()[0])]] * 4
    assert seen == set(range(9))
    table = StepTable.build(m, SIG10)
    stochastic = (table.std > 0).nonzero().flatten()
    weights = []
    for i in stochastic.tolist():
        inp = RatioInputs(torch.zeros(1), torch.zeros(1), torch.ones(1), torch.ones(1), 1e-4, torch.zeros(1, 2),
                          torch.zeros(1, 2), table.std[[i]], table.b[[i]].abs(), table.std)
        loss, _ = OBJECTIVES.get("noise_weighted")(inp)
        weights.append(-float(loss))  # -A * rho * w with A = rho = 1
    assert sum(weights) / len(weights) == pytest.approx(1.0, rel=1e-5)
    std = table.std[stochastic]
    torch.testing.assert_close(torch.tensor(weights), std / std.mean())  # proportional to the step's noise


def test_a_shared_prefix_gives_the_same_rollout_with_fewer_forwards():
    """share_prefix: the group's ODE prefix before the first SDE step runs once per group."""
    model, m = TinyModel(seed=0), make_method("tempflow_grpo")
    sig = schedule.sigmas(5, 3.0)
    active = torch.zeros(5, dtype=torch.bool)
    active[2] = True
    table = StepTable.build(m, sig, active=active)
    prompts = ["a red circle moving left", "a blue square moving up"]
    x0 = initial_noise(model.latent_shape, 2, 3, True, torch.Generator().manual_seed(0))
    rows = [p for p in prompts for _ in range(3)]
    kw = dict(guidance=1.0, stored=torch.tensor([2]), logprob="gaussian")
    plain = rollout(model, table, rows, x0, sde_gen=torch.Generator().manual_seed(1), **kw)
    shared = rollout(model, table, rows, x0, sde_gen=torch.Generator().manual_seed(1), share_group=3, **kw)
    torch.testing.assert_close(shared.x, plain.x, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(shared.videos, plain.videos, rtol=1e-5, atol=1e-6)
    assert plain.forward_rows == 5 * 6 and shared.forward_rows == 2 * 2 + 3 * 6
    assert not torch.equal(plain.x_next[0], plain.x_next[1])  # the group branches at step 2
    assert torch.equal(plain.x[0], plain.x[1])  # from one prefix


# DiffusionNFT: tests/methods/test_diffusion_nft.py (every official number, the old policy, the KL term).


# --- every field method trains on the tiny world ----------------------------------------------------------
@pytest.mark.parametrize("name", FIELD)
def test_field_method_trains_a_few_updates(name, tmp_path):
    cfg = tiny(method=name, steps=6, updates=3, minibatches=2, diag_every=2, save_videos=False, kl_warmup=1, threads=1)
    model = TinyModel(seed=0)
    before = {k: v.clone() for k, v in model.net.state_dict().items()}
    train(cfg, tmp_path / "run", model=model, reward=TinyReward())
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["update"] for r in rows] == [0, 1, 2]
    for r in rows:
        assert all(math.isfinite(r[k]) for k in ("policy_loss", "kl", "ratio_mean", "reward", "grad_norm")), r
        assert 0.5 < r["ratio_mean"] < 2  # no absurd importance weight
    moved = max(float((model.net.state_dict()[k] - v).abs().max()) for k, v in before.items())
    assert 0 < moved < 0.1  # the weights changed, by an optimizer-sized amount (lr 1e-3, 6 steps)
    if name == "diffusion_nft":  # the old policy follows once per update, not per optimizer step
        assert (rows[-1]["anchor_copies"], rows[-1]["optimizer_steps"]) == (3, 6)


# --- bad input: one line, exit 2, before any work ----------------------------------------------------------
TINY = ["updates=1", "prompts_per_update=1", "group_size=2", "eval_samples=1", "save_videos=false"]


@pytest.mark.parametrize("args, says", [
    (["--method", "flow_grpo_fast", "method.window_size=11", "steps=10"], "does not fit in the window range"),
    (["--method", "mix_grpo", "steps=2"], "leaves no trained step"),
    (["--method", "tempflow_grpo", "shared_noise=false"], "shared_noise: true"),
    (["--method", "grpo_guard", "method.no_such=1"], "has no parameter method.no_such; allowed: method.reweight"),
])
def test_bad_field_input_is_one_line_before_any_work(args, says, tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    given = {x.split("=")[0] for x in args}
    code, _, err = _cli(monkeypatch, capsys, "train", *args, "--out", str(out),
                        *[a for a in TINY if a.split("=")[0] not in given])
    assert code == 2 and says in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert not out.exists()


def _cli(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["grpo-bench", *args])
    with pytest.raises(SystemExit) as exit_:
        entry.main()
    out, err = capsys.readouterr()
    return exit_.value.code, out, err


def test_a_suite_with_a_group_it_cannot_fill_stops_before_any_cell(tmp_path, monkeypatch, capsys):
    suite = {"name": "bad_field", "base": {"setting": "A", "steps": 4, "updates": 1, "shared_noise": False},
             "grid": {"method": ["flow_grpo", "tempflow_grpo"]}, "seeds": [0]}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(suite))
    code, _, err = _cli(monkeypatch, capsys, "run", str(path), "--out", str(tmp_path / "runs"), "--jobs", "1")
    assert code == 2 and "tempflow_grpo" in err and "shared_noise: true" in err, err
    assert len(err.strip().splitlines()) == 1 and not list((tmp_path / "runs").rglob("config.yaml"))


def test_a_method_naming_a_hook_core_lacks_is_one_line():
    from grpo_bench.core.method import Method, MethodConfig

    @METHODS.register("needs_a_branch")
    class NeedsABranch(Method):
        """A method whose loss would need core to branch on its name: no registered objective of that name."""

        objective = "if_method_is_mine"
        defaults = MethodConfig(kernel="flow", noise_level=0.7)

    try:
        with pytest.raises(UserError, match=r"method 'needs_a_branch': objective: unknown policy objective "
                                            r"'if_method_is_mine'"):
            make_method("needs_a_branch")
    finally:
        METHODS.unregister("needs_a_branch")


def test_core_and_train_never_branch_on_a_method_name():
    """Core and the trainer reach methods through the registry and the declared hooks only: no method name in a
    comparison, a membership test, a dict key or an index (the run config's default method is a value)."""
    names = set(METHODS.names())

    def named(node: ast.AST) -> list[str]:
        return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and n.value in names]

    hits = []
    for path in [*(ROOT / "grpo_bench" / "core").glob("*.py"), *(ROOT / "grpo_bench" / "train").glob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            parts = ([node] if isinstance(node, (ast.Compare, ast.Subscript, ast.Match)) else
                     [k for k in node.keys if k is not None] if isinstance(node, ast.Dict) else [])
            hits += [f"{path.name}:{node.lineno} {v!r}" for part in parts for v in named(part)]
    assert not hits, hits


def test_check_run_refuses_a_window_that_leaves_an_update_untrained():
    m = make_method("flow_grpo_fast", params={"method.window_range_start": 9, "method.window_range_end": 10,
                                              "method.window_size": 1})  # the last step is never trained
    with pytest.raises(UserError, match=r"window at steps 9\.\.9 has no trained \(stochastic\) step"):
        m.check_run(SIG10, RunShape(updates=5, group_size=2, shared_noise=False))


def test_methods_listing_names_rule_loss_and_source_of_all_ten():
    import io

    from rich.console import Console

    from grpo_bench.report.methods_table import print_methods

    res = CliRunner().invoke(app, ["methods"], terminal_width=200)
    assert res.exit_code == 0
    buf = io.StringIO()
    print_methods(Console(file=buf, width=3000))  # one line per row: each cell's text whole
    text = re.sub(r"\s+", " ", buf.getvalue())
    assert len(METHODS.names()) >= 10
    for name in METHODS.names():
        d = make_method(name).describe()
        assert name in text and d["loss"] in text
    for needle in ("nft", "kl_mask", "ratio_norm", "noise_weighted", "not verified against code", "UniRL",
                   "MixGRPO", "GRPO_Guard", "DiffusionNFT", "flow_grpo"):
        assert needle in text, needle


class _Stop(Exception):
    pass


@pytest.mark.parametrize("name", ["flow_grpo_fast", "tempflow_grpo", "diffusion_nft"])
def test_a_field_run_resumes_to_the_same_metrics(name, tmp_path):
    """The window draw, the branching step and the old policy come back from (seed, update) and the checkpoint."""
    kw = dict(method=name, steps=6, prompts_per_update=2, group_size=2, updates=4, eval_every=2, eval_samples=1,
              diag_every=0, checkpoint_every=2, device="cpu", lr=1e-3, save_videos=False, threads=1)

    def stop_after(k):
        def progress(done, total, line):
            if done == k:
                raise _Stop
        return progress

    train(RunConfig(**kw), tmp_path / "whole", model=TinyModel(seed=0), reward=TinyReward())
    with pytest.raises(_Stop):
        train(RunConfig(**kw), tmp_path / "cut", model=TinyModel(seed=0), reward=TinyReward(), progress=stop_after(3))
    train(RunConfig(**kw), tmp_path / "cut", model=TinyModel(seed=0), reward=TinyReward())

    def rows(run):
        clock = ("wall_time", "compute_seconds")
        return [{k: v for k, v in json.loads(x).items() if not k.startswith("time_") and k not in clock}
                for x in (tmp_path / run / "metrics.jsonl").read_text().splitlines()]

    assert rows("cut") == rows("whole")
