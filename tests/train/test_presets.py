"""Named presets keep calibrated values in one place (grpo_bench/config/presets.py): a suite that names
one expands to exactly the cells of the same suite with the values copied into its base, the base
refines the preset, and a wrong name is one line listing the presets."""

from __future__ import annotations

import json

import pytest
from suite_support import SMALL_SUITE, write_suite

from grpo_bench.config.presets import PRESETS
from grpo_bench.config.run import RunConfig, from_dict
from grpo_bench.errors import UserError
from grpo_bench.suite.expand import expand
from grpo_bench.suite.parse import load_suite


def _suite(**changes):
    return {**json.loads(json.dumps(SMALL_SUITE)), **changes}


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_is_a_valid_run_config_that_differs_from_the_defaults(name):
    cfg = from_dict({**PRESETS[name], "device": "cpu"}, where=f"preset {name}: ")
    assert any(getattr(cfg, k) != getattr(RunConfig(), k) for k in PRESETS[name])


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_a_preset_gives_the_cells_of_its_values_copied_into_the_base(tmp_path, name):
    inline = _suite(base={**PRESETS[name], "updates": 4, "eval_every": 2, "diag_every": 2, "eval_samples": 2})
    named = _suite(preset=name, base={"updates": 4, "eval_every": 2, "diag_every": 2, "eval_samples": 2})
    a = expand(load_suite(write_suite(tmp_path / "inline.yaml", inline)))
    b = expand(load_suite(write_suite(tmp_path / "named.yaml", named)))
    assert [c.id for c in a] == [c.id for c in b]
    assert [c.config for c in a] == [c.config for c in b]
    for key, value in PRESETS[name].items():
        assert {c.config.get(key) for c in b} == {value}


def test_the_base_refines_the_preset(tmp_path):
    suite = load_suite(write_suite(tmp_path / "s.yaml", _suite(preset="world_calibrated", base={"lr": 3e-4})))
    assert suite.base["lr"] == 3e-4
    assert suite.base["kl_beta_max"] == PRESETS["world_calibrated"]["kl_beta_max"]


@pytest.mark.parametrize("bad", ["world", ["world_calibrated"], None])
def test_an_unknown_preset_is_one_line_listing_the_presets(tmp_path, bad):
    path = write_suite(tmp_path / "s.yaml", _suite(preset=bad))
    with pytest.raises(UserError) as err:
        load_suite(path)
    msg = str(err.value)
    assert msg.startswith(f"{path}: preset: unknown preset {bad!r}") and "\n" not in msg
    assert msg.endswith("allowed: " + ", ".join(sorted(PRESETS)))
