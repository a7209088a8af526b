"""The corrected field recipes (release 0.5), each against the official file and line it follows: Flow-GRPO-Fast's
CFG-free SD3.5 config, Flow-DPPO's sparse SDE steps, MixGRPO's FlowGRPO SDE and FlowGRPO's own KL estimator."""

from __future__ import annotations

import math

import pytest
import torch

from grpo_bench.config.run import RunConfig
from grpo_bench.core import schedule
from grpo_bench.core.method import RunShape, make_method
from grpo_bench.core.rollout import StepTable, generator
from grpo_bench.core.trust_region import KL_VARIANTS, KLInputs, make_kl
from grpo_bench.errors import UserError

SIG10 = schedule.sigmas(10, 3.0)


def test_flow_grpo_fast_samples_with_the_nocfg_configs_cps_kernel():
    """config/grpo.py pickscore_sd3_fast_nocfg (run by scripts/multi_node/sd3_fast.sh:17): ``sde_type = "cps"``
    (l.351), ``noise_level = 0.8`` (l.348), ``global_std = True`` (l.347), ``clip_range = 1e-5`` (l.345),
    ``beta = 0`` (l.346); the cps step's log-prob ``-((prev_sample.detach() - prev_sample_mean) ** 2)``
    (sd3_sde_with_logprob.py:86) with std ``sigma_prev * sin(noise_level * pi / 2)`` (l.71)."""
    m = make_method("flow_grpo_fast")
    c = m.config
    assert (c.kernel, c.noise_level, c.logprob, c.adv_norm, c.clip_range, c.kl, c.shared_noise) == (
        "cps", 0.8, "unscaled", "global", 1e-5, "none", False)
    table = StepTable.build(m, SIG10)
    for i in range(5):  # the window's range
        assert float(table.std[i]) == pytest.approx(float(SIG10[i + 1]) * math.sin(0.8 * math.pi / 2), rel=1e-6)


def test_flow_dppo_draws_three_distinct_sde_steps_in_the_first_half():
    """UniRL@1a7b501 unirl/utils/scheduler_utils.py AllSDEScheduler (l.98-124): pool ``range(int(T * 0.0),
    int(T * 0.5))``, ``rng.choice(pool, size=num_sde_steps, replace=False)`` once per rollout;
    examples/diffusion/sd3_flowdppo.yaml: timestep_fraction [0.0, 0.5] (l.151), num_sde_steps 3 (l.152), eta 0.7
    (l.141), adv_use_global_std (l.27), init_same_noise false (l.144). Every SDE step is trained; ODE elsewhere."""
    m = make_method("flow_dppo")
    c = m.config
    assert (c.kernel, c.noise_level, c.adv_norm, c.shared_noise, c.kl) == ("flow", 0.7, "global", False, "none")
    sets = set()
    for u in range(200):
        mask = m.update_steps(SIG10, u, generator(0, "window", u))
        idx = mask.nonzero().flatten().tolist()
        assert len(idx) == 3 and all(0 <= i < 5 for i in idx)
        sets.add(tuple(idx))
        assert m.train_steps(SIG10, 2, generator(0, "steps", u), active=mask).tolist() == [idx] * 2
        table = StepTable.build(m, SIG10, active=mask)
        assert (table.std > 0).nonzero().flatten().tolist() == idx  # the ODE everywhere else
    assert len(sets) == 10  # every 3 of 5
    with pytest.raises(UserError, match="sde_steps=3"):
        m.check_run(schedule.sigmas(4, 3.0), RunShape(updates=2, group_size=4, shared_noise=False))


def test_mix_grpo_samples_with_flowgrpos_sde():
    """Tencent-Hunyuan/MixGRPO@e5cdd6a: scripts/finetune/finetune_flux_grpo_MixGRPO.sh passes
    ``--flow_grpo_sampling`` (l.196; its help in fastvideo/train_grpo_flux.py: "True for MixGRPO, False for
    DanceGRPO"), eta 0.7 (l.55); fastvideo/utils/sampling_utils.py flow_grpo_step: ``std_dev_t = sqrt(sigma / (1 -
    where(sigma == 1, sigma_max, sigma))) * eta`` (l.177), noise ``std_dev_t * sqrt(-dt)``; train_grpo_flux.py:448
    ``group_rewards.std() + 1e-8`` (torch's unbiased std)."""
    m = make_method("mix_grpo")
    assert (m.config.kernel, m.config.noise_level, m.config.adv_norm, m.config.shared_noise) == (
        "flow", 0.7, "group_unbiased", True)
    table = StepTable.build(m, SIG10)
    sigma_max = float(SIG10[1])
    for i in range(8):
        s, d = float(SIG10[i]), float(SIG10[i] - SIG10[i + 1])
        std_dev_t = math.sqrt(s / (1 - (sigma_max if s == 1 else s))) * 0.7
        assert float(table.std[i]) == pytest.approx(std_dev_t * math.sqrt(d), rel=1e-5)


def test_flow_grpo_kl_is_flowgrpos_code_formula():
    """flow_grpo scripts/train_sd3.py:900 divides the squared mean shift by 2 std_dev_t^2, std_dev_t the flow
    kernel's noise per unit time a*sqrt(sigma/(1-sigma)) (sd3_sde_with_logprob.py:50), not the step's variance
    std_dev_t^2 * Delta: computed here from the flow kernel's own numbers, and ``fixed`` is 1/Delta stronger."""
    from grpo_bench.core import schedule
    from grpo_bench.core.method import make_method
    from grpo_bench.core.sampling import StepTable

    sigmas = schedule.sigmas(10, 3.0)
    table = StepTable.build(make_method("flow_grpo"), sigmas)
    steps = torch.tensor([1, 4, 8])
    g = torch.Generator().manual_seed(3)
    mu, ref = torch.randn(3, 2, 1, 2, 2, generator=g), torch.randn(3, 2, 1, 2, 2, generator=g)
    x = KLInputs(mu=mu, logp=torch.zeros(3), logp_old=torch.zeros(3), mu_old=mu, mu_ref={"initial": ref},
                 var=table.std[steps] ** 2, delta=table.delta[steps])
    s = sigmas[steps].double()
    std_dev_t = 0.7 * torch.sqrt(s / (1 - s))  # noise_level 0.7, flow_grpo's default
    expected = (mu.double() - ref.double()).pow(2).flatten(1).mean(1) / (2 * std_dev_t**2)
    got = make_kl(RunConfig(kl="flow_grpo"))(x)["kl"]
    torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=0)
    torch.testing.assert_close(make_kl(RunConfig(kl="fixed"))(x)["kl"] * x.delta, got, rtol=1e-5, atol=0)
    assert dict(KL_VARIANTS.get("flow_grpo").anchors) == {"initial": "never"}
