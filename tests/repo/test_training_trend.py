"""benchmarks/training_trend.py: a cell's training-reward trend with the drawn prompts' strata held fixed, and the
trainer's prompt draw it reads back (train.collect.drawn_prompts)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from grpo_bench.config.prompts import load_prompt_set
from grpo_bench.config.run import RunConfig, resolve
from grpo_bench.train.collect import collect, drawn_prompts

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import training_trend  # noqa: E402

LEVEL = {"single": 2.6, "count": 2.3, "relation": 1.9}  # the image world's rough reward by prompt kind


def _cell(tmp_path, slope: float, noise: float = 0.01) -> Path:
    """A finished image-world cell whose update u logs LEVEL of its drawn prompts' kinds + slope * u + noise."""
    cfg = RunConfig(model="image_world", video_size=32, reward="image_world_oracle", prompts="image_world",
                    prompts_per_update=2, seed=5, updates=120, device="cpu")
    cell = tmp_path / "c1"
    cell.mkdir()
    (cell / "cell.json").write_text(json.dumps({"config": cfg.to_dict()}))
    train = load_prompt_set("image_world").train
    rng = np.random.default_rng(0)
    rows = []
    for u in range(120):
        kinds = [training_trend.stratum(p, "kind") for p in drawn_prompts(train, 5, u, 2)]
        rows.append({"kind": "update", "update": u, "value:reward":
                     np.mean([LEVEL[k] for k in kinds]) + slope * u + noise * rng.standard_normal()})
    pd.DataFrame(rows).to_parquet(cell / "rows.parquet")
    (cell / "DONE").write_text("")
    return cell


@pytest.mark.parametrize("slope", [0.0, 0.002])
def test_the_kind_adjusted_trend_recovers_the_slope_the_draw_hides(tmp_path, slope):
    """The logged reward is the drawn kinds' level plus slope * u: the adjusted trend is slope * 119 within its
    interval; the plain line's residual sd carries the draw (kinds move the reward by up to 0.7)."""
    cell = _cell(tmp_path, slope)
    got = training_trend.cell_trend(cell, "kind")
    assert abs(got["trend"] - slope * 119) < max(got["half"], 0.01)
    assert got["half"] < 0.02 and got["resid_sd"] < 0.02
    plain = training_trend.cell_trend(cell, "none")
    assert plain["resid_sd"] > 10 * got["resid_sd"]


def test_until_reads_the_first_updates_only(tmp_path):
    """A reward flat for 60 updates and rising after: the first 60 show no trend, the whole run its rise."""
    cell = _cell(tmp_path, 0.0)
    rows = pd.read_parquet(cell / "rows.parquet")
    rows["value:reward"] += 0.004 * (rows["update"] - 60).clip(lower=0)
    rows.to_parquet(cell / "rows.parquet")
    assert abs(training_trend.cell_trend(cell, "kind", until=60)["trend"]) < 0.01
    assert training_trend.cell_trend(cell, "kind")["trend"] > 0.1
    assert training_trend.main([str(tmp_path), "--until", "2"]) == 2


def test_strata_of_image_world_prompts_and_others():
    assert [training_trend.stratum(p, "kind") for p in
            ("a red circle", "three green squares", "a blue square left of a red circle")] == \
        ["single", "count", "relation"]
    assert training_trend.stratum("a red circle moving left", "kind") == ""  # a video-world prompt: one stratum
    assert training_trend.stratum("a red circle", "prompt") == "a red circle"


def test_collect_scores_the_prompts_drawn_prompts_names(tmp_path):
    """The trainer's rows are drawn_prompts(...) each repeated group_size times, so the analysis reads back the
    prompts an update scored."""
    from tiny_world import TinyModel, TinyReward  # tests/_support on the path

    from grpo_bench.train.trainer import Trainer

    cfg = RunConfig(method="flow_grpo", steps=4, prompts_per_update=3, group_size=2, updates=2, eval_every=10,
                    minibatches=1, eval_samples=1, diag_every=0, checkpoint_every=10, device="cpu", seed=11,
                    save_videos=False, threads=1)
    tr = Trainer(resolve(cfg), tmp_path / "run", model=TinyModel(seed=0), reward=TinyReward())
    for u in (0, 1):
        batch = collect(tr.policy, tr.reward, tr.method, tr.train_prompts, 11, u, tr.groups, tr.shard)
        want = [p for p in drawn_prompts(tr.train_prompts, 11, u, 3) for _ in range(2)]
        assert batch.rollout.prompts == want


def test_a_folder_without_finished_cells_is_one_line(tmp_path, capsys):
    assert training_trend.main([str(tmp_path)]) == 2
    assert "no finished cell" in capsys.readouterr().err


def test_rows_of_different_rewards_are_read_apart(tmp_path, capsys):
    """Two cells alike but for their training reward are two rows, each with its own seed: a pilot's rewards side
    by side are never averaged into one trend."""
    for name, reward, slope in (("a", "image_world_oracle", 0.0), ("b", "image_world_judge", 0.002)):
        (tmp_path / name).mkdir()
        cell = _cell(tmp_path / name, slope)
        info = json.loads((cell / "cell.json").read_text())
        info["config"]["reward"] = reward
        (cell / "cell.json").write_text(json.dumps(info))
        cell.rename(tmp_path / f"cell_{name}")
    assert training_trend.main([str(tmp_path)]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  (")]
    assert len(rows) == 2 and all("(1 seeds)" in line for line in rows)
    trends = {("judge" if "image_world_judge" in line else "oracle"): float(line.split("): ")[1].split()[0])
              for line in rows}
    assert abs(trends["judge"] - 0.002 * 119) < 0.01 and abs(trends["oracle"]) < 0.01


def test_too_few_updates_for_the_strata_is_one_line(tmp_path, capsys):
    _cell(tmp_path, 0.0)
    assert training_trend.main([str(tmp_path), "--strata", "prompt", "--until", "5"]) == 2
    assert "cannot fit" in capsys.readouterr().err
