"""A fifth GRPO variant from one file that imports only grpo_bench.api, with no core edit.

docs/examples/tempered_grpo.py (the walk-through of docs/adding_a_method.md) brings a kernel with a
parameter of its own, its own trained-step rule and an EMA KL anchor. It is copied to a temporary
folder and loaded the two documented ways, GRPO_BENCH_PLUGINS and an entry point of the
``grpo_bench.plugins`` group, then passes the registries' contracts and runs through ``train``, a
suite and ``samplers``.
"""

from __future__ import annotations

import ast
import json
import shutil
import sys
from importlib import metadata
from pathlib import Path

import pytest
import torch
import yaml
from contracts import check_anchor_policy, check_kernel, check_kl_variant, check_method
from typer.testing import CliRunner

from grpo_bench import api, registry
from grpo_bench.cli import app
from grpo_bench.config.identity import cell_id
from grpo_bench.config.run import from_dict, resolve
from grpo_bench.core.anchors import ANCHOR_POLICIES
from grpo_bench.core.method import METHODS, make_method
from grpo_bench.core.schedule import sigmas
from grpo_bench.core.sde import KERNELS
from grpo_bench.core.trust_region import KL_VARIANTS
from grpo_bench.errors import UserError
from grpo_bench.suite.results import read_table

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "tempered_grpo.py"
NAMES = ((METHODS, "tempered_grpo"), (KERNELS, "tempered"), (KL_VARIANTS, "ema"))
TINY = ["steps=4", "updates=2", "prompts_per_update=1", "group_size=2", "eval_samples=1", "diag_every=0",
        "save_videos=false", "video_size=16", "checkpoint_every=5", "anchor_every=1", "minibatches=1"]


def _forget(entry: str, module: str) -> None:
    for reg, name in NAMES:
        reg.unregister(name)
    registry._PluginState.loaded.discard(entry)
    sys.modules.pop(module, None)


@pytest.fixture
def plugin_file(tmp_path, monkeypatch):
    """The example copied outside the package and named in GRPO_BENCH_PLUGINS; unloaded afterwards."""
    path = tmp_path / "plugins" / "tempered_grpo.py"
    path.parent.mkdir()
    shutil.copy(EXAMPLE, path)
    monkeypatch.setenv(registry.PLUGIN_ENV, str(path))
    yield path
    _forget(str(path), "grpo_bench_plugin_tempered_grpo")


def test_the_example_imports_only_the_public_api():
    tree = ast.parse(EXAMPLE.read_text())
    modules = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    modules |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert {m for m in modules if m.startswith("grpo_bench")} == {"grpo_bench.api"}
    assert modules <= {"grpo_bench.api", "torch"}
    assert _api_names(tree) <= set(api.__all__)


def test_plugin_registers_everywhere_and_passes_the_contracts(plugin_file):
    for reg, name in NAMES:
        assert name in reg.names()
    check_kernel("tempered")
    check_method("tempered_grpo")
    check_kl_variant("ema")
    check_anchor_policy("ema")
    method = make_method("tempered_grpo")
    # its own step rule: the first ceil(T/2) steps
    assert method.eligible_steps(sigmas(10, 3.0)).nonzero().flatten().tolist() == [0, 1, 2, 3, 4]
    # its kernel parameter: var = eta^2 * Delta * sigma^power (independent of the kernel code)
    sig = sigmas(4, 3.0)
    for power in (0.0, 2.0):
        k = make_method("tempered_grpo", params={"kernel.power": power}).kernel
        expected = [0.25 * float(sig[i] - sig[i + 1]) * float(sig[i]) ** power for i in range(4)]
        assert k.variances(sig) == pytest.approx(expected, rel=1e-12)


def test_plugin_parameters_resolve_validate_and_change_the_cell_id(plugin_file):
    base = resolve(from_dict({"method": "tempered_grpo"}))
    assert base.params == {"kernel.power": 1.5, "kl.scale": 1.0, "anchor.tau": 0.95}  # the file's defaults
    tuned = resolve(from_dict({"method": "tempered_grpo", "kernel.power": 2, "anchor.tau": "0.5"}))
    assert tuned.params == {"kernel.power": 2.0, "kl.scale": 1.0, "anchor.tau": 0.5}
    # the id: setting a parameter to its default is the same cell, another value (or default) is not
    same = resolve(from_dict({"method": "tempered_grpo", "kernel.power": 1.5}))
    assert cell_id(same) == cell_id(base) != cell_id(tuned)
    # a KL variant without an EMA anchor drops the method's anchor.tau, but refuses the user's
    assert "anchor.tau" not in resolve(from_dict({"method": "tempered_grpo", "kl": "fixed"})).params
    with pytest.raises(UserError, match=r"anchor\.tau.*allowed: none"):
        from_dict({"method": "tempered_grpo", "kl": "fixed", "anchor.tau": 0.5})
    with pytest.raises(UserError, match=r"has no parameter kernel\.pow; allowed: kernel\.power"):
        from_dict({"method": "tempered_grpo", "kernel.pow": 2})
    with pytest.raises(UserError, match=r"kernel\.power: Input should be less than or equal to 4"):
        from_dict({"method": "tempered_grpo", "kernel.power": 9})
    with pytest.raises(UserError, match=r"anchor\.tau must be in \[0, 1\)"):
        from_dict({"method": "tempered_grpo", "anchor.tau": 1.0})


def test_plugin_trains_from_the_command_line(plugin_file, tmp_path):
    out = tmp_path / "run"
    res = CliRunner().invoke(app, ["train", "--method", "tempered_grpo", "--out", str(out), *TINY, "kernel.power=2"])
    assert res.exit_code == 0, res.output
    cfg = yaml.safe_load((out / "config.yaml").read_text())
    assert cfg["kl"] == "ema" and cfg["params"] == {"kernel.power": 2.0, "kl.scale": 1.0, "anchor.tau": 0.95}
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["update"] for r in rows] == [0, 1]
    # the EMA anchor moved after every optimizer step, and the policy then differs from it
    assert rows[-1]["anchor_copies"] == rows[-1]["optimizer_steps"] == 2
    assert rows[0]["kl"] == 0.0 and rows[1]["kl"] > 0
    assert all(torch.isfinite(torch.tensor(r["reward"])) for r in rows)


@pytest.fixture
def inline_backend():
    """A runner backend that trains the cells in this process (the same run_cell the workers call)."""
    from grpo_bench.suite import cell, runner

    @runner.BACKENDS.register("inline")
    def run_inline(work, trainer, slots, threads, display, **_):
        return [cell.run_cell(meta, str(cdir), trainer, display.event) for meta, cdir in work]

    yield "inline"
    runner.BACKENDS.unregister("inline")


# The local backend's spawned workers load the plug-in from GRPO_BENCH_PLUGINS too (slow: a worker
# imports torch and the trainer); the inline backend checks the same suite path in this process.
@pytest.mark.parametrize("backend", ["inline", pytest.param("local", marks=pytest.mark.slow)])
def test_plugin_runs_in_a_suite_and_in_samplers(plugin_file, tmp_path, inline_backend, backend):
    suite = {
        "name": "plugin", "base": {"setting": "A", **dict(kv.split("=") for kv in TINY)},
        "grid": {"method": ["tempered_grpo"], "kernel.power": [0.0, 2.0]}, "seeds": [0],
        "report": {"tables": ["table2"], "figures": []},
    }
    suite["base"] = {k: yaml.safe_load(v) for k, v in suite["base"].items()}
    path = tmp_path / "plugin.yaml"
    path.write_text(yaml.safe_dump(suite))
    res = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "runs"), "--jobs", "1",
                                   "--backend", backend])
    assert res.exit_code == 0, res.output
    table = read_table(tmp_path / "runs" / "plugin" / "results.parquet")
    cells = table[table["kind"] == "cell"]
    assert sorted(cells["method"]) == ["tempered_grpo", "tempered_grpo"] and cells["cell"].nunique() == 2

    js = tmp_path / "samplers.json"
    res = CliRunner().invoke(app, ["samplers", "--steps", "6", "--out", str(tmp_path / "s"), "--json", str(js)])
    assert res.exit_code == 0, res.output
    row = next(v for k, v in json.loads(js.read_text())["kernels"].items() if k.startswith("tempered"))
    sig = sigmas(6, 3.0)  # samplers' default shift; the method's own kernel.power (1.5) is used
    expected = [0.5 * (float(sig[i] - sig[i + 1]) * float(sig[i]) ** 1.5) ** 0.5 for i in range(6)]
    assert row["std"] == pytest.approx(expected, rel=1e-9)


def test_plugin_loads_from_an_entry_point(tmp_path, monkeypatch):
    """An installed package declares ``[project.entry-points."grpo_bench.plugins"]``; the registries load it."""
    shutil.copy(EXAMPLE, tmp_path / "tempered_pkg.py")
    monkeypatch.syspath_prepend(str(tmp_path))
    fake = metadata.EntryPoint(name="tempered", value="tempered_pkg", group=registry.PLUGIN_GROUP)
    monkeypatch.setattr(registry, "_entry_points", lambda: [fake])
    monkeypatch.setattr(registry._PluginState, "entry_points_loaded", False)
    try:
        assert "tempered_grpo" in METHODS.names() and "ema" in KL_VARIANTS and "ema" in ANCHOR_POLICIES
    finally:
        _forget("", "tempered_pkg")


def test_a_broken_plugin_is_one_clear_error(tmp_path, monkeypatch):
    bad = tmp_path / "broken.py"
    bad.write_text("raise RuntimeError('boom')\n")
    monkeypatch.setenv(registry.PLUGIN_ENV, str(bad))
    try:
        with pytest.raises(
            UserError, match=r"GRPO_BENCH_PLUGINS: plug-in .*broken\.py.* failed to import: RuntimeError: boom"
        ):
            METHODS.names()
    finally:
        registry._PluginState.loaded.discard(str(bad))


@pytest.mark.parametrize("path", sorted((Path(__file__).resolve().parents[2] / "methods").glob("[!_]*.py")),
                         ids=lambda p: p.stem)
def test_shipped_method_files_import_only_the_public_api(path):
    tree = ast.parse(path.read_text())
    modules = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    modules |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert {m for m in modules if m.startswith("grpo_bench")} == {"grpo_bench.api"}
    assert _api_names(tree) <= set(api.__all__)  # a name api imports for itself is not the plug-in's to read


def _api_names(tree: ast.Module) -> set[str]:
    return {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "grpo_bench.api"
            for a in n.names}


def test_api_exports_views_of_a_loss_not_the_cores_records():
    """A loss family reads ``LossSamples`` and ``LossVelocities``; core's ``LossContext`` and ``Rollout`` (and the
    helpers that read them) stay core's, neither exported nor importable from the api."""
    assert {"LossSamples", "LossVelocities", "StepTerms", "register_loss_family"} <= set(api.__all__)
    for name in ("LossContext", "Rollout", "guided_velocity", "index_cond"):
        assert name not in api.__all__ and not hasattr(api, name), name
