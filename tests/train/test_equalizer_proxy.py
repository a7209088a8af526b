"""The equalizer's proxy fits the kernel's log-prob form (config/run.py ``_equalizer_proxy``): 'auto' divides
by the form's own per-step gradient scale, so the equalized scale is flat; a hand-set Gaussian proxy on CPS's
unscaled surrogate is refused, and runs only as the labelled 'mismatched_gaussian' ablation row."""

from __future__ import annotations

import math

import pytest

from grpo_bench.config.identity import cell_id
from grpo_bench.config.run import RunConfig, resolve
from grpo_bench.core.method import make_method
from grpo_bench.core.schedule import sigmas
from grpo_bench.core.sde import equalizer
from grpo_bench.errors import UserError


def cps_scales(a: float, steps: int, shift: float) -> list[tuple[float, float]]:
    """(lambda_i, std_i) of CPS's stochastic steps, from the paper's formulas (not the kernel's code):
    mu = (1-s')x0_hat + s' cos(a pi/2) x1_hat, so |d mu / d v| = |-s(1-s') + s' cos(a pi/2)(1-s)|;
    std = s' sin(a pi/2)."""
    s = [1 - i / steps for i in range(steps + 1)]
    sig = [shift * x / (1 + (shift - 1) * x) for x in s]
    out = []
    for i in range(steps):
        hi, lo = sig[i], sig[i + 1]
        std = lo * math.sin(a * math.pi / 2)
        if std > 0:
            out.append((abs(-hi * (1 - lo) + lo * math.cos(a * math.pi / 2) * (1 - hi)), std))
    return out


def spread(values: list[float]) -> float:
    return max(values) / min(values)


def test_the_fitted_proxy_flattens_cps_per_step_scale_and_the_gaussian_one_widens_it():
    method = make_method("cps", equalizer=True)
    sig = sigmas(10, 3.0)
    scales = cps_scales(method.config.noise_level, 10, 3.0)
    raw = [lam * std for lam, std in scales]  # d/dv of -(x'-mu)^2 scales as lambda * std
    fitted = [w for w in equalizer(method.kernel, sig, "unscaled").tolist() if w > 0]
    gauss = [w for w in equalizer(method.kernel, sig, "gaussian").tolist() if w > 0]
    assert len(fitted) == len(raw) == 9  # the last CPS step is deterministic
    assert spread([r * w for r, w in zip(raw, fitted)]) == pytest.approx(1.0, abs=1e-5)
    mismatched = spread([r * w for r, w in zip(raw, gauss)])
    assert mismatched > 10 > spread(raw)  # the issue's ≈ 15× against ≈ 4× without the equalizer
    assert mismatched == pytest.approx(spread([std * std for _, std in scales]), rel=1e-5)  # = spread of std²


def test_auto_resolves_to_the_forms_proxy_and_keeps_the_ids_of_gaussian_methods():
    assert resolve(RunConfig(method="cps", equalizer=True)).equalizer_proxy == "logprob"
    for method in ("sage_grpo", "flow_grpo", "dance_grpo"):
        auto = resolve(RunConfig(method=method, equalizer=True))
        assert auto.equalizer_proxy == "gaussian"
        assert cell_id(auto) == cell_id(resolve(RunConfig(method=method, equalizer=True, equalizer_proxy="gaussian")))
    # without the equalizer the proxy is inert: one id whatever it says
    ids = {cell_id(resolve(RunConfig(method="cps", equalizer=False, equalizer_proxy=p)))
           for p in ("auto", "logprob", "mismatched_gaussian")}
    assert len(ids) == 1


def test_a_hand_set_mismatch_is_refused_in_one_line_and_the_labelled_row_is_its_own_cell():
    with pytest.raises(UserError) as err:
        resolve(RunConfig(method="cps", equalizer=True, equalizer_proxy="gaussian"))
    text = str(err.value)
    assert "equalizer_proxy" in text and "mismatched_gaussian" in text and "'auto'" in text and "\n" not in text
    row = resolve(RunConfig(method="cps", equalizer=True, equalizer_proxy="mismatched_gaussian"))
    assert row.equalizer_proxy == "mismatched_gaussian"
    assert cell_id(row) != cell_id(resolve(RunConfig(method="cps", equalizer=True)))
