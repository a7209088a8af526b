"""``eval_at``: evaluations before given updates (a speed claim reads quality at the compute it names, not on a
straight line between two evals). They are recorded where asked, counted as the closed form says, leave the
trajectory exactly as it was (the eval stream has its own seeds) and never re-key a cell."""

from __future__ import annotations

import hashlib
import json

import pytest
import tiny_run
from tiny_world import TinyModel, TinyReward

from grpo_bench.config import expected_compute, metrics
from grpo_bench.config.identity import cell_id
from grpo_bench.config.run import RunConfig, resolve, validate
from grpo_bench.config.sections import section
from grpo_bench.errors import UserError
from grpo_bench.train.trainer import train

pytestmark = pytest.mark.filterwarnings("ignore")



def shape(cfg: RunConfig) -> expected_compute.ComputeShape:
    """The closed form's section of ``cfg``."""
    return section(cfg, expected_compute.ComputeShape)

def tiny(**kw) -> RunConfig:
    return tiny_run.tiny(**{**dict(method="flow_grpo", kl="fixed", updates=5, save_videos=False), **kw})


def run(tmp_path, name: str, **kw) -> tuple[list[dict], str]:
    """The metrics lines and a hash of the final checkpoint's tensors (RNG states left out)."""
    out = tmp_path / name
    train(tiny(**kw), out, model=TinyModel(seed=0), reward=TinyReward())
    tensors = hashlib.sha256()
    for f in sorted((out / "checkpoints").rglob("*.safetensors")):
        if not f.name.startswith("rng_"):
            tensors.update(f.name.encode() + f.read_bytes())
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()], tensors.hexdigest()


def test_evaluations_at_given_updates_leave_the_trajectory_alone(tmp_path):
    plain, plain_weights = run(tmp_path, "plain")
    extra, extra_weights = run(tmp_path, "extra", eval_at=[2, 3])
    assert [line.get(metrics.EVAL_AT) for line in plain if metrics.EVAL_AT in line] == [0, 5]
    assert [line.get(metrics.EVAL_AT) for line in extra if metrics.EVAL_AT in line] == [0, 2, 3, 5]
    assert extra_weights == plain_weights  # the same policy, bit for bit

    def training(line: dict) -> dict:
        return {k: v for k, v in line.items() if not k.startswith(("eval_", "time_", "compute_")) and k != "wall_time"}

    assert [training(x) for x in extra] == [training(x) for x in plain]
    # counted as the closed form counts them: two evaluations more, no training pass more
    cfg = resolve(tiny(eval_at=[2, 3]))
    for u, line in enumerate(extra):
        assert line[metrics.COMPUTE_EVAL] == expected_compute.expected(shape(cfg), u + 1)[metrics.COMPUTE_EVAL]
    one = expected_compute.per_update(shape(cfg))[metrics.COMPUTE_EVAL]
    assert extra[-1][metrics.COMPUTE_EVAL] == 4 * one and plain[-1][metrics.COMPUTE_EVAL] == 2 * one
    assert extra[-1][metrics.COMPUTE_TRAINING] == plain[-1][metrics.COMPUTE_TRAINING]
    assert cell_id(resolve(tiny(eval_at=[2, 3]))) == cell_id(resolve(tiny()))  # an execution field: same cell


@pytest.mark.parametrize("bad", [[0], [5], [2, 9]])
def test_an_eval_point_outside_the_run_is_one_line(bad):
    with pytest.raises(UserError, match=r"config key 'eval_at' \[.*\]: allowed updates 1 \.\. 4"):
        validate(resolve(tiny(eval_at=bad)))
