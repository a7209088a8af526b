"""`grpo-bench sample` sets a kernel's own parameters as ``kernel.<name>=value`` (parsed as train's
key=value overrides, validated by the kernel's Params): they change the sampled videos, and a wrong key
or value is one line naming the key and the allowed keys, before any sampling."""

from __future__ import annotations

import json
import sys

import pytest

from grpo_bench.api import Field, Kernel, PluginParams, register_kernel
from grpo_bench.cli import entry
from grpo_bench.core.sde import KERNELS

PROMPT = "a red circle moving left"


@pytest.fixture
def scaled_kernel():
    """A kernel whose variance is eta^2 * Delta * scale (scale = its own parameter, default 1)."""

    @register_kernel("test_scaled")
    class ScaledKernel(Kernel):
        class Params(PluginParams):
            scale: float = Field(1.0, gt=0, le=4)

        def variance(self, sigma, sigma_next, sigma_1):
            return self.noise_level**2 * (sigma - sigma_next) * self.params.scale

    yield "test_scaled"
    KERNELS.unregister("test_scaled")


def _sample(tmp_path, monkeypatch, capsys, name, *extra):
    """(exit code, stderr, GIF path) of `grpo-bench sample` with the test kernel."""
    out = tmp_path / f"{name}.gif"
    monkeypatch.setattr(sys, "argv", ["grpo-bench", "sample", "--prompt", PROMPT, "--n", "1", "--steps", "3",
                                      "--kernel", "test_scaled", "--noise-level", "0.7", "--out", str(out),
                                      "--json", str(tmp_path / f"{name}.json"), *extra])
    with pytest.raises(SystemExit) as exit_:
        entry.main()
    return exit_.value.code, capsys.readouterr().err, out


def test_kernel_parameters_reach_the_kernel_and_change_the_videos(tmp_path, monkeypatch, capsys, scaled_kernel):
    code, err, default = _sample(tmp_path, monkeypatch, capsys, "default")
    assert code in (0, None), err
    assert json.loads((tmp_path / "default.json").read_text())["kernel_params"] == {"kernel.scale": 1.0}
    _, _, same = _sample(tmp_path, monkeypatch, capsys, "same", "kernel.scale=1")
    code, err, wider = _sample(tmp_path, monkeypatch, capsys, "wider", "kernel.scale=4")
    assert code in (0, None), err
    assert json.loads((tmp_path / "wider.json").read_text())["kernel_params"] == {"kernel.scale": 4.0}
    assert same.read_bytes() == default.read_bytes()  # the default value, given explicitly: same noise
    assert wider.read_bytes() != default.read_bytes()


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["kernel.scael=2"], ["has no parameter kernel.scael", "allowed: kernel.scale"]),
        (["kernel.scale=9"],
         ["parameter kernel.scale", "less than or equal to 4", "got 9", "(parameters: kernel.scale)"]),
        (["kernel.scale=abc"], ["parameter kernel.scale", "got 'abc'"]),
        (["steps=3"], ["takes only kernel parameters", "got 'steps'"]),
        (["kernel.scale"], ["is not of the form key=value"]),
        (["kernel.scale=2", "kernel.scale=3"], ["kernel.scale is given twice"]),
    ],
)
def test_bad_kernel_parameters_are_one_line_naming_key_and_allowed_keys(tmp_path, monkeypatch, capsys, scaled_kernel,
                                                                         args, needles):
    code, err, out = _sample(tmp_path, monkeypatch, capsys, "bad", *args)
    line = err.strip()
    assert code == 2, err
    assert "\n" not in line and line.startswith("error: command line: ") and "Traceback" not in line, err
    for needle in needles:
        assert needle in line, line
    assert not out.exists()  # rejected before any sampling
