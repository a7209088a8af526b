"""`grpo-bench methods` and `grpo-bench samplers` end to end, and their bad-input paths."""

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from grpo_bench.cli import app
from grpo_bench.core.method import METHODS
from grpo_bench.core.sde import KERNELS
from grpo_bench.core.trust_region import KL_VARIANTS
from grpo_bench.report.samplers import marginal_variance

runner = CliRunner()


def test_methods_lists_every_registered_name():
    res = runner.invoke(app, ["methods"], terminal_width=250)
    assert res.exit_code == 0, res.output
    for name in (*METHODS.names(), *KERNELS.names(), *KL_VARIANTS.names()):
        assert name in res.output


def test_samplers_writes_table_figure_and_json(tmp_path):
    out, js = tmp_path / "s", tmp_path / "s.json"
    res = runner.invoke(
        app, ["samplers", "--steps", "12", "--shift", "2", "--data-std", "0.4", "--out", str(out), "--json", str(js)]
    )
    assert res.exit_code == 0, res.output
    for f in ("table1.md", "table1.tex", "table1.csv", "figure1.png"):
        assert (out / f).stat().st_size > 100
    data = json.loads(js.read_text())
    assert len(data["sigmas"]) == 13
    ode = data["kernels"]["ode"]
    assert len(ode["std"]) == 12 and all(s == 0 for s in ode["std"])
    # Independent check of the first ODE step: Var_1 = (1 - Delta*c(1))^2 * V(1), c(1) = 1.
    s1 = data["sigmas"][1]
    var1 = (1 - (1 - s1) * 1.0) ** 2
    assert ode["var_rel_err"][0] == pytest.approx(var1 / marginal_variance(s1, 0.4) - 1, rel=1e-9)
    sage = next(v for k, v in data["kernels"].items() if k.startswith("sage"))
    assert all(s > 0 for s in sage["std"])


def test_samplers_noise_level_puts_every_kernel_at_one_level(tmp_path):
    js = tmp_path / "m.json"
    res = runner.invoke(app, ["samplers", "--noise-level", "0.5", "--out", str(tmp_path / "m"), "--json", str(js)])
    assert res.exit_code == 0, res.output
    data = json.loads(js.read_text())
    assert data["noise_level"] == 0.5
    labels = [k for k in data["kernels"] if k != "ode"]
    assert labels and all(k.endswith(", 0.5)") for k in labels)
    # dance at eta: var_i = eta^2 * Delta_i, independently of the method's default eta (0.3)
    dance = next(v for k, v in data["kernels"].items() if k.startswith("dance"))
    deltas = [a - b for a, b in zip(data["sigmas"], data["sigmas"][1:])]
    assert [s * s for s in dance["std"]] == pytest.approx([0.25 * d for d in deltas], rel=1e-12)


@pytest.mark.parametrize(
    "args,needle",
    [
        (["samplers", "--noise-level", "-1"], "--noise-level"),
        (["samplers", "--steps", "0"], "steps must be"),
        (["samplers", "--shift", "-1"], "shift must be"),
        (["samplers", "--data-std", "0"], "--data-std"),
    ],
)
def test_bad_input_exits_2_with_one_line_and_no_traceback(args, needle, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "grpo_bench.cli", *args, "--out", str(tmp_path)], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert needle in proc.stderr and "Traceback" not in proc.stderr + proc.stdout
    assert len(proc.stderr.strip().splitlines()) == 1
