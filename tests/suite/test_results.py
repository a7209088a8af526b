"""Run folders -> rows of results.parquet: every kind of row, torn files, failures, stale cells."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import torch
from suite_support import EVAL_PROMPTS, fake_line, fake_train

from grpo_bench.config.identity import cell_id
from grpo_bench.config.run import RunConfig, resolve
from grpo_bench.suite.aggregate import aggregate
from grpo_bench.suite.results import COLUMNS, read_table
from grpo_bench.suite.rows import cell_rows
from grpo_bench.suite.run_folder import RESULTS, ROWS, record_failure
from grpo_bench.suite.strips import STRIP_PROMPTS, strip_pixels


def _meta(cfg: RunConfig, suite: str = "t") -> dict:
    return {"id": cell_id(cfg), "suite": suite, "labels": {"method": cfg.method, "seed": cfg.seed},
            "group": f"{cfg.method} kl={cfg.kl}", "config": cfg.to_dict()}


@pytest.fixture
def cfg() -> RunConfig:
    return resolve(RunConfig(method="sage_grpo", updates=5, eval_every=2, diag_every=2, steps=4, eval_samples=2))


def test_cell_rows_hold_curves_finals_videos_grads_and_strips(tmp_path, cfg):
    cdir = tmp_path / "cell"
    fake_train(cfg, cdir)
    rows = cell_rows(cdir, _meta(cfg), wall_time=3.0)
    lines = [fake_line(cfg, u) for u in range(cfg.updates)]
    upd = rows[rows["kind"] == "update"]
    n_scalar = sum(1 for ln in lines for k, v in ln.items() if k != "update" and not isinstance(v, list))
    assert len(upd) == n_scalar
    reward = upd[upd["metric"] == "reward"].sort_values("update")
    assert reward["value"].tolist() == pytest.approx([ln["reward"] for ln in lines])
    final = rows[rows["kind"] == "final"].set_index("metric")["value"]
    assert final["reward"] == pytest.approx(lines[-1]["reward"])
    assert final["eval_oracle_vq"] == pytest.approx(lines[-1]["eval_oracle_vq"])  # last eval = last update
    assert final["wall_time"] == 1.5 * cfg.updates  # the trainer's wall time wins over the runner's
    vids = rows[rows["kind"] == "video"]
    final_json = json.loads((cdir / "final.json").read_text())
    assert len(vids) == len(final_json["eval_videos"]) * 6  # 6 scalar metrics per video
    v0 = final_json["eval_videos"][0]
    got = vids[(vids["prompt"] == v0["prompt"]) & (vids["sample"] == 0) & (vids["metric"] == "oracle_ta")]
    assert got["value"].item() == pytest.approx(v0["oracle_ta"]) and got["video_seed"].item() == v0["seed"]
    grads = rows[rows["kind"] == "grad"]
    assert grads["update"].tolist() == [0, 2, 4]
    assert math.isnan(grads["array"].iloc[0][-1]) and len(grads["array"].iloc[0]) == cfg.steps
    strips = rows[rows["kind"] == "strip"]
    assert strips["prompt"].tolist() == EVAL_PROMPTS
    shape = list(strips["shape"].iloc[0])
    assert shape == [1, 4, 16, 16, 3]
    arr = strip_pixels(strips["text"].iloc[0], None, shape)  # stored compactly as PNG, lossless
    clip = torch.load(cdir / "samples" / "final_eval.pt", weights_only=True).float().numpy()  # [N, 3, F, H, W]
    pick = np.round(np.linspace(0, clip.shape[2] - 1, 4)).astype(int)
    expected = np.round((np.clip(clip[0][:, pick], -1, 1) + 1) * 127.5).astype(np.uint8).transpose(1, 2, 3, 0)
    np.testing.assert_allclose(arr[0].astype(int), expected.astype(int), atol=1)  # float16 rounding
    assert len(strips["text"].iloc[0]) < 2 * arr.size  # under 2 bytes per pixel (random noise), not 8 (float64)
    cell = rows[rows["kind"] == "cell"]
    assert json.loads(cell["text"].item())["status"] == "done"
    assert set(rows["group"]) == {"sage_grpo kl=dual"} and set(rows["seed"]) == {0}


def test_a_torn_last_metrics_line_is_skipped(tmp_path, cfg):
    cdir = tmp_path / "cell"
    fake_train(cfg, cdir)
    with open(cdir / "metrics.jsonl", "a") as fh:
        fh.write('{"update": 5, "rew')  # a writer killed mid-line
    rows = cell_rows(cdir, _meta(cfg))
    assert rows.loc[rows["kind"] == "update", "update"].max() == cfg.updates - 1


def test_aggregate_keeps_failures_and_ignores_stale_cells(tmp_path, cfg):
    suite_dir = tmp_path / "suite"
    good = _meta(cfg)
    fake_train(cfg, suite_dir / good["id"])
    other = resolve(RunConfig(method="cps", updates=2, steps=4))
    bad = _meta(other)
    (suite_dir / bad["id"]).mkdir(parents=True)
    try:
        raise RuntimeError("exploded at update 1")
    except RuntimeError as exc:
        rec = record_failure(suite_dir / bad["id"], exc, 0.5)
    assert "Traceback" in rec["traceback"] and "exploded" in rec["traceback"]
    stale = resolve(RunConfig(method="flow_grpo", updates=2, steps=4))
    fake_train(stale, suite_dir / cell_id(stale))  # a finished cell no longer in the suite
    frame = aggregate(suite_dir, [good, bad], {"name": "suite", "report": {}})
    assert set(frame["cell"].dropna()) - {""} == {good["id"], bad["id"]}
    err = frame[(frame["kind"] == "cell") & (frame["metric"] == "error")]
    assert "RuntimeError: exploded at update 1" in json.loads(err["text"].item())["error"]
    assert (suite_dir / good["id"] / ROWS).is_file()  # rows rebuilt for a DONE cell without them
    back = read_table(suite_dir / RESULTS)
    assert len(back) == len(frame) and list(back.columns) == list(COLUMNS)
    assert json.loads(back.loc[back["kind"] == "suite", "text"].item())["name"] == "suite"


def test_rows_are_deterministic(tmp_path, cfg):
    cdir = tmp_path / "cell"
    fake_train(cfg, cdir)
    a = cell_rows(cdir, _meta(cfg), 1.0)
    b = cell_rows(cdir, _meta(cfg), 2.0)  # the runner's time loses to the trainer's
    pd.testing.assert_frame_equal(a.drop(columns=["text"]), b.drop(columns=["text"]))


def test_base_strips_are_the_same_base_model_for_every_method_of_a_seed(tmp_path):
    """Each cell stores its eval at update 0 (the base model); every method of a seed starts from the same
    weights, prompts and eval noise, so their base strips are equal pixel for pixel, and they are the
    strips the report draws as its top row."""
    from grpo_bench.config.run import from_dict
    from grpo_bench.report import data
    from grpo_bench.train.trainer import train

    strips = {}
    for method in ("flow_grpo", "sage_grpo"):
        cfg = resolve(from_dict({"method": method, "updates": 2, "prompts_per_update": 1, "group_size": 2,
                                 "eval_samples": 1, "diag_every": 0, "reward": "world_oracle", "device": "cpu",
                                 "lr": 1e-2}))
        train(cfg, tmp_path / method)
        rows = cell_rows(tmp_path / method, _meta(cfg), wall_time=1.0)
        assert (rows["kind"] == "strip").sum() == 2 * STRIP_PROMPTS  # final and base
        strips[method] = data.strips(rows, base=True)[("A", f"{method} kl={cfg.kl}")]
        final = data.strips(rows)[("A", f"{method} kl={cfg.kl}")]
        assert [p for p, _ in final] == [p for p, _ in strips[method]]
        assert any(not np.array_equal(a, f) for (_, a), (_, f) in zip(strips[method], final))  # training showed
    for (pa, a), (pb, b) in zip(strips["flow_grpo"], strips["sage_grpo"]):
        assert pa == pb and np.array_equal(a, b)
