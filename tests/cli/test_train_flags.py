"""``train`` says what it costs before it starts, and takes config keys by one rule (issue 45, item 5): every
key as key=value, the common ones with a --flag alias each (cli/train.py FLAG_ALIASES, docs/cli.md)."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pandas as pd
import pytest
import typer
from rich.console import Console

from grpo_bench.cli import train as train_cli
from grpo_bench.cli.train import FLAG_ALIASES, build_config
from grpo_bench.cli.train_cost import before_line, clock
from grpo_bench.config.expected_compute import ComputeShape
from grpo_bench.config.identity import cell_id
from grpo_bench.config.run import from_dict, resolve
from grpo_bench.config.sections import section
from grpo_bench.errors import UserError
from grpo_bench.suite.machine import host
from grpo_bench.suite.pace import run_passes

ROOT = Path(__file__).resolve().parents[2]
NOT_CONFIG = {"out", "resume", "accelerate_config", "like", "overrides", "gpu_memory", "memory_check"}
"""train's parameters that are no config key (they have no key=value form)."""
ALIAS_VALUES = {"method": "cps", "kl": "dual", "setting": "B", "seed": 7, "updates": 3, "lr": 2.5e-4,
                "device": "cpu", "model": "tiny-wan"}


def _train_params() -> set[str]:
    from grpo_bench.cli.entry import app

    command = typer.main.get_command(app).commands["train"]
    return {p.name for p in command.params}


def test_train_declares_exactly_the_documented_flag_aliases():
    assert _train_params() - NOT_CONFIG == set(FLAG_ALIASES)
    assert set(ALIAS_VALUES) == set(FLAG_ALIASES)
    doc = (ROOT / "docs" / "cli.md").read_text()
    for key in FLAG_ALIASES:  # the table row: `--key X` | `key=X`
        assert re.search(rf"\| `--{key} \w+` \| `{key}=\w+` \|", doc), key


@pytest.mark.parametrize("key", FLAG_ALIASES)
def test_a_flag_builds_the_same_config_as_its_key_value(key):
    value = ALIAS_VALUES[key]
    by_flag = build_config({key: value}, [])
    by_key = build_config({}, [f"{key}={value}"])
    assert by_flag.to_dict() == by_key.to_dict() and getattr(by_flag, key) == value
    assert cell_id(resolve(by_flag)) == cell_id(resolve(by_key))


def test_lr_is_a_flag_like_updates_and_a_key_given_twice_is_one_line():
    cfg = build_config({"lr": 3e-4, "updates": 4}, ["group_size=2"])
    assert (cfg.lr, cfg.updates, cfg.group_size) == (3e-4, 4, 2)
    with pytest.raises(UserError, match=r"lr is given both as --lr 0.0003 and as lr=0.0001; give it once"):
        build_config({"lr": 3e-4}, ["lr=1e-4"])


def _stored_cell(folder: Path, name: str, machine: str, seconds: float, config: dict) -> None:
    cdir = folder / name
    cdir.mkdir(parents=True)
    text = json.dumps({"machine": machine, "config": config})
    pd.DataFrame([{"kind": "cell", "metric": "wall_time", "value": seconds, "text": text}]).to_parquet(
        cdir / "rows.parquet")
    (cdir / "DONE").write_text("")


def test_the_estimate_before_the_first_update_prices_passes_at_this_machines_pace(tmp_path):
    here = f"{host()}, no GPU, torch x, Linux y"
    small = {"updates": 10, "group_size": 4, "steps": 4, "eval_every": 5, "method": "cps"}
    large = {"updates": 20, "group_size": 8, "steps": 6, "method": "sage_grpo"}
    _stored_cell(tmp_path / "runs" / "s", "c1", here, 30.0, small)
    _stored_cell(tmp_path / "runs" / "s_tune", "c2", here, 90.0, large)
    _stored_cell(tmp_path / "runs" / "s", "c3", "Another CPU, 64 CPUs, no GPU", 1.0, small)  # not this machine
    _stored_cell(tmp_path / "runs" / "s", "c4", here, 1.0, {**small, "model": "tiny-wan"})  # another model
    passes = [run_passes(section(resolve(from_dict(c)), ComputeShape)) for c in (small, large)]
    assert passes[0] > 0 and passes[1] > passes[0]
    cfg = build_config({"updates": 50}, ["group_size=2", "steps=5"])
    total = run_passes(section(resolve(cfg), ComputeShape))
    want = total * 120.0 / sum(passes)  # independent: total seconds over total passes
    line = before_line(cfg, tmp_path / "runs")
    minutes, seconds = divmod(int(round(want)), 60)
    assert f"about {minutes} min {seconds:02d} s for {total:,} sample-step passes" in line
    assert "2 cell(s) of model world finished on this machine" in line


def test_with_nothing_measured_the_estimate_says_it_is_plan_arithmetic(tmp_path):
    from section_support import plan_of

    cfg = build_config({"updates": 40}, [])
    line = before_line(cfg, tmp_path / "no_runs")
    plan = plan_of(cfg, tflops=400.0)
    assert "grpo-bench plan's arithmetic for one GPU at 400 TFLOP/s" in line and "no cell measured" in line
    assert f"about {clock(plan.seconds_per_update * 40)} by" in line


def test_train_prints_its_updates_and_estimate_before_the_first_update(tmp_path, monkeypatch):
    printed_before: list[str] = []
    buf = io.StringIO()

    def fake_train(cfg, out, resume=True, progress=None):
        printed_before.append(buf.getvalue())  # what the user saw when training began
        return {"cell_id": "x"}

    monkeypatch.setattr("grpo_bench.train.trainer.train", fake_train)
    monkeypatch.chdir(tmp_path)
    cfg = build_config({"updates": 7, "device": "cpu"}, [])
    train_cli.run_train(cfg, tmp_path / "run", False, Console(file=buf, width=300))
    assert len(printed_before) == 1
    assert "7 updates x 2 prompts x 8 rollouts" in printed_before[0]
    assert "estimate: about" in printed_before[0]
