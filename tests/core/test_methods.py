"""Contract test over the method registry, and the schedule."""

import pytest
import torch

from grpo_bench.core.method import METHODS, MethodConfig, make_method
from grpo_bench.core.sampling import StepTable, transition
from grpo_bench.core.schedule import sigmas
from grpo_bench.core.sde import log_prob
from grpo_bench.errors import UserError

SIG = sigmas(10, 3.0)


def test_schedule_ends_and_shift():
    s = sigmas(10, 3.0)
    assert s.shape == (11,) and float(s[0]) == 1.0 and float(s[-1]) == 0.0
    assert (s[1:] < s[:-1]).all()
    u = 0.5  # shift maps s to shift*s/(1+(shift-1)s)
    assert float(sigmas(2, 3.0)[1]) == pytest.approx(3 * u / (1 + 2 * u))
    torch.testing.assert_close(sigmas(4, 1.0), torch.linspace(1, 0, 5, dtype=torch.float64))


@pytest.mark.parametrize("name", METHODS.names())
def test_method_contract(name):
    cls = METHODS.get(name)
    assert cls.__doc__ and len(cls.__doc__.strip()) > 40
    assert isinstance(cls.defaults, MethodConfig)
    m = make_method(name)
    assert m.kernel.name == m.config.kernel and m.kernel.noise_level == m.config.noise_level

    # shapes and float32 results under a bfloat16 input, through the table the trainer builds
    x = torch.randn(4, 3, 2, 6, 6).bfloat16()
    v = torch.randn(4, 3, 2, 6, 6).bfloat16()
    table = StepTable.build(m, SIG)
    for i in m.sde_steps(SIG).nonzero().flatten().tolist():
        mu, std = transition(table, torch.full((4,), i, dtype=torch.long), x, v)
        assert mu.shape == x.shape and mu.dtype == torch.float32 and std.dtype == torch.float32
        assert std.shape == (4, 1, 1, 1, 1) and (std > 0).all()  # an SDE step draws noise
        x_next = mu + std * torch.randn(mu.shape, generator=torch.Generator().manual_seed(i))
        lp = log_prob(x_next, mu, std, m.config.logprob)
        assert lp.shape == (4,) and lp.dtype == torch.float32 and torch.isfinite(lp).all()

    # trained steps: shape, range, determinism under a seeded generator, stochastic only
    steps = m.train_steps(SIG, 5, torch.Generator().manual_seed(3))
    again = m.train_steps(SIG, 5, torch.Generator().manual_seed(3))
    assert steps.shape[0] == 5 and torch.equal(steps, again)
    stochastic = m.sde_steps(SIG) if m.needs_logprob else torch.ones(len(SIG) - 1, dtype=torch.bool)
    assert stochastic[steps].all()  # a likelihood-free family (DiffusionNFT) trains re-noised samples at any step
    assert (steps[:, 1:] > steps[:, :-1]).all()  # sorted, no repeats


def test_reference_defaults_from_design():
    d = {n: make_method(n).config for n in METHODS.names()}
    assert (d["dance_grpo"].kernel, d["dance_grpo"].noise_level, d["dance_grpo"].shared_noise) == ("dance", 0.3, True)
    assert (d["flow_grpo"].kernel, d["flow_grpo"].noise_level, d["flow_grpo"].kl, d["flow_grpo"].adv_norm) == (
        "flow", 0.7, "flow_grpo", "global")  # its code's KL estimator (train_sd3.py:900) and global_std
    assert (d["cps"].kernel, d["cps"].logprob) == ("cps", "unscaled")
    assert (d["sage_grpo"].kernel, d["sage_grpo"].kl, d["sage_grpo"].equalizer) == ("sage", "dual", True)
    assert all(d[n].clip_range == 1e-4 for n in ("dance_grpo", "flow_grpo", "cps", "sage_grpo"))
    # trained steps: dance a random 60% of 0..T-2, flow/cps 0..T-2, sage every stochastic step
    assert make_method("dance_grpo").train_steps(SIG, 2).shape[1] == round(0.6 * 9)
    assert make_method("flow_grpo").train_steps(SIG, 1).tolist() == [list(range(9))]
    assert make_method("cps").train_steps(SIG, 1).tolist() == [list(range(9))]
    assert make_method("sage_grpo").train_steps(SIG, 1).tolist() == [list(range(10))]


def test_window_restricts_sde_and_training():
    m = make_method("flow_grpo", window=[2, 3])
    assert m.sde_steps(SIG).nonzero().flatten().tolist() == [2, 3, 4]
    assert m.train_steps(SIG, 2).tolist() == [[2, 3, 4]] * 2


def test_unknown_method_and_option():
    with pytest.raises(UserError, match="unknown method 'grpo'.*allowed: .*sage_grpo"):
        make_method("grpo")
    with pytest.raises(UserError, match="unknown method option"):
        make_method("cps", noise=0.3)
    with pytest.raises(UserError, match=">= 0"):
        make_method("sage_grpo", noise_level=-1.0)
