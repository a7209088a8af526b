"""Trackers: TensorBoard end to end on a one-update run (hparams flattened to scalars), and tracker
names checked before any work with one line naming the allowed names or the extra to install."""

from __future__ import annotations

import importlib.util

import pytest
from typer.testing import CliRunner

from grpo_bench.cli import app
from grpo_bench.config.run import RunConfig
from grpo_bench.config.trackers import check_trackers
from grpo_bench.errors import UserError
from grpo_bench.train.tracking import hparams


def test_hparams_are_scalars_a_tensorboard_writer_accepts():
    flat = hparams(RunConfig(trackers=["tensorboard"]).to_dict())
    assert all(isinstance(v, (bool, int, float, str)) for v in flat.values())
    assert flat["trackers"] == '["tensorboard"]' and flat["kl"] == "none"


@pytest.mark.skipif(importlib.util.find_spec("tensorboard") is None, reason="tensorboard not installed")
def test_tensorboard_tracker_end_to_end(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from grpo_bench.train.trainer import train

    cfg = RunConfig(method="flow_grpo", updates=1, steps=4, prompts_per_update=1, group_size=2, eval_samples=1,
                    diag_every=0, device="cpu", trackers=["tensorboard"])
    final = train(cfg, tmp_path / "run")
    events = sorted((tmp_path / "run").rglob("events.out.tfevents.*"))
    assert events
    tags = set()
    for e in events:
        acc = EventAccumulator(str(e.parent))
        acc.Reload()
        tags |= set(acc.Tags()["scalars"])
        for tag in acc.Tags()["scalars"]:
            if tag == "reward":
                assert acc.Scalars(tag)[0].value == pytest.approx(final["metrics"]["reward"], rel=1e-5)
    assert "reward" in tags


def test_unknown_tracker_is_one_line_before_any_work(tmp_path):
    out = tmp_path / "run"
    res = CliRunner().invoke(app, ["train", "--out", str(out), "trackers=[tensorbord]"])
    assert res.exit_code != 0 and isinstance(res.exception, UserError)
    assert "did you mean 'tensorboard'" in str(res.exception) and "wandb" in str(res.exception)
    assert not out.exists()


def test_missing_tracker_package_names_the_extra(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    with pytest.raises(UserError, match=r"grpo-bench\[wandb\]"):
        check_trackers(["wandb"])


def test_truncate_rewrites_a_bare_nan_read_back_from_disk_as_null(tmp_path):
    """metrics.jsonl of an older run (or edited by hand) may hold a bare NaN; the resume rewrite is strict JSON."""
    import json

    from grpo_bench.train.tracking import METRICS, MetricsSink

    (tmp_path / METRICS).write_text('{"update": 0, "kl": NaN, "reward": 0.5}\n'
                                    '{"update": 1, "kl": Infinity, "reward": 0.7}\n'
                                    '{"update": 2, "kl": 0.1, "reward": 0.9}\n')
    kept = MetricsSink(tmp_path).truncate(before_update=2)
    assert [r["update"] for r in kept] == [0, 1]

    def refuse(constant: str) -> None:
        raise ValueError(f"bare {constant} in metrics.jsonl")

    lines = [json.loads(line, parse_constant=refuse) for line in (tmp_path / METRICS).read_text().splitlines()]
    assert lines == [{"update": 0, "kl": None, "reward": 0.5}, {"update": 1, "kl": None, "reward": 0.7}]
