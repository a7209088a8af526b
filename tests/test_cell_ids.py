"""Cell ids are stable: the shipped suites keep their ids, and adding a config field with a default
does not change the id of an existing cell, while changing a default does (docs/design.md §7)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pandas as pd
import pytest

from grpo_bench.suite.spec import expand, load_suite
from grpo_bench.train import config as config_mod
from grpo_bench.train.config import FIELDS, HASHED_FIELDS, ID_NEUTRAL, RunConfig, config_id, resolve

ROOT = Path(__file__).resolve().parents[1]
# {suite: [cell ids in expansion order]} (tests/golden/suite_cell_ids.json). Produced before the plug-in
# API changed any code (commit 2a65c82). Regenerated for a suite only when its content, a default it uses
# or the shipped world weights it loads changed on purpose (0.2: two optimizer steps per rollout by
# default, the retrained judge, the redesigned main table and KL ablation; hunyuan15_main_table and
# wan_small: the paper's trust region, guidance and optimizer-step schedule). "<suite>@0.1" keeps the
# ids of a stored report measured with 0.1.
GOLDEN = json.loads((ROOT / "tests" / "golden" / "suite_cell_ids.json").read_text())
STORED_WITH = {"ablate_equalizer": "ablate_equalizer@0.1", "kl_weight": "kl_weight@0.1"}
"""Stored reports not re-run since 0.1: their cells are the 0.1 suite's."""


@pytest.mark.parametrize("suite", ["main_table", "ablate_kl", "ablate_equalizer", "kl_weight", "smoke",
                                   "reference_recipes", "ablate_train_steps"])
def test_shipped_suites_keep_their_cell_ids(suite):
    assert [c.id for c in expand(load_suite(ROOT / "suites" / f"{suite}.yaml"))] == GOLDEN[suite]


@pytest.mark.parametrize("report", ["main_table", "ablate_kl", "ablate_equalizer", "kl_weight", "reference_recipes",
                                    "ablate_train_steps"])
def test_stored_reports_cells_are_the_golden_cells(report):
    """The rendered reports' results carry the ids the runner gave their cells; they are still the suite's."""
    cells = set(pd.read_parquet(ROOT / "reports" / report / "results.parquet")["cell"]) - {""}
    assert cells and cells <= set(GOLDEN[STORED_WITH.get(report, report)])


def test_every_field_is_hashed_or_declares_an_id_neutral_value():
    """A field added to RunConfig must say which value reproduces the configs from before it."""
    assert set(FIELDS) == set(HASHED_FIELDS) | set(ID_NEUTRAL)
    assert not set(HASHED_FIELDS) & set(ID_NEUTRAL)
    for name, neutral in ID_NEUTRAL.items():
        field = FIELDS[name]
        default = field.default_factory() if field.default_factory is not dataclasses.MISSING else field.default
        assert default == neutral, f"{name}: its default is not its id-neutral value, so adding it changed every id"


def test_adding_a_field_keeps_ids_and_changing_a_default_does_not(monkeypatch):
    cfg = resolve(RunConfig(method="flow_grpo"))
    before = config_id(cfg)
    # a field added later with its id-neutral default: same id; set to something else: another id
    monkeypatch.setitem(ID_NEUTRAL, "new_option", 0.5)
    assert config_id({**cfg.to_dict(), "new_option": 0.5}) == before
    assert config_id({**cfg.to_dict(), "new_option": 0.7}) != before
    # changing a default (of a hashed field, or of a new field away from its neutral value) changes the id
    assert config_id(dataclasses.replace(cfg, lr=cfg.lr * 2)) != before
    assert config_id({**cfg.to_dict(), "params": {"kernel.x": 1}}) != before
    monkeypatch.setattr(config_mod, "ID_NEUTRAL", {})  # without the declaration, the new field would count
    assert config_id({**cfg.to_dict(), "new_option": 0.5}) != config_id(cfg.to_dict())
