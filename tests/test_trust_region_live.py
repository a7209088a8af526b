"""Every shipped suite that claims a trust region runs with that term acting (docs/design.md §4).

A KL term that is identically zero, a PPO ratio stuck at 1 or a clip that never acts makes a suite's
rows equal by construction (the stored main table before grpo-bench 0.2 had ratio ≡ 1 and the
step-wise KL ≡ 0 in all 1,440 update lines). Each distinct trust-region configuration of every
embedded-world suite is run for two updates at the suite's own optimizer settings.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grpo_bench.suite.spec import expand, load_suite
from grpo_bench.train.trainer import train

ROOT = Path(__file__).resolve().parents[1]
TRUST_KEYS = ("method", "kl", "stepwise_ref", "stepwise_estimator", "minibatches", "inner_epochs", "anchor_every",
              "clip_range")


def _trust_region_cells() -> dict[tuple, dict]:
    out: dict[tuple, dict] = {}
    for path in sorted((ROOT / "suites").glob("*.yaml")):
        for cell in expand(load_suite(path)):
            cfg = cell.config.to_dict()
            if cfg["model"] != "world" or cfg["kl"] == "none":
                continue
            out.setdefault(tuple(str(cfg[k]) for k in TRUST_KEYS), {"suite": path.stem, **cfg})
    return out


CELLS = _trust_region_cells()


def test_every_current_suite_takes_at_least_two_optimizer_steps_per_rollout():
    assert CELLS, "no shipped suite claims a trust region"
    for key, cfg in CELLS.items():
        assert cfg["minibatches"] * cfg["inner_epochs"] >= 2, f"{cfg['suite']}: {key} takes one optimizer step"


@pytest.mark.parametrize("key", sorted(CELLS), ids=lambda k: "-".join(k[:3]))
def test_trust_region_terms_are_live(tmp_path, key):
    cfg = dict(CELLS[key])
    cfg.pop("suite")
    cfg.update(updates=2, prompts_per_update=1, group_size=4, eval_every=100, eval_samples=1, diag_every=0,
               checkpoint_every=100, save_videos=False, reward="world_oracle", device="cpu", threads=1,
               max_train_steps=3)
    from grpo_bench.train.config import from_dict

    train(from_dict(cfg), tmp_path / "run")
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    parts = {"dual": ("kl_moving", "kl_stepwise")}.get(cfg["kl"], ("kl",))
    for row in rows:
        for part in parts:
            assert row[part] != 0.0, f"{part} is zero in update {row['update']}"
        assert row["ratio_mean"] != 1.0, "the PPO ratio never moved"
    assert any(r["clip_frac"] > 0 for r in rows), "the clip never acted"
