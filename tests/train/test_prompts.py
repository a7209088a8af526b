"""Prompt sets: the world default, prompt files, and a real-model run on its own prompts."""

import json
import math

import pytest

from grpo_bench.api import Reward
from grpo_bench.config.prompts import load_prompt_set
from grpo_bench.config.run import from_dict
from grpo_bench.errors import UserError
from grpo_bench.world import prompts as world_prompts


def test_world_is_the_default_prompt_set():
    ps = load_prompt_set("world")
    assert ps.train == world_prompts("train") and ps.eval == world_prompts("eval")
    assert not set(ps.train) & set(ps.eval)


def test_yaml_and_text_prompt_files(tmp_path):
    y = tmp_path / "p.yaml"
    y.write_text("train: [a cat, a dog]\neval: [a bird]\n")
    assert load_prompt_set(str(y)).train == ["a cat", "a dog"] and load_prompt_set(str(y)).eval == ["a bird"]
    t = tmp_path / "p.txt"
    t.write_text("# comment\na cat\n\n a dog \n")
    ps = load_prompt_set(str(t))
    assert ps.train == ps.eval == ["a cat", "a dog"]


@pytest.mark.parametrize(
    "content,match",
    [
        ("train: [a]\n", "exactly the keys"),
        ("train: []\neval: [b]\n", "non-empty list"),
        ("train: [a\n", "invalid YAML"),
    ],
)
def test_bad_prompt_files_name_the_file(tmp_path, content, match):
    f = tmp_path / "bad.yaml"
    f.write_text(content)
    with pytest.raises(UserError, match=match):
        load_prompt_set(str(f))


def test_config_validation_of_prompts_and_oracle(tmp_path):
    with pytest.raises(UserError, match="neither a built-in prompt set"):
        from_dict({"prompts": str(tmp_path / "missing.yaml")})
    f = tmp_path / "p.yaml"
    f.write_text("train: [a cat]\neval: [a bird]\n")
    with pytest.raises(UserError, match="eval_oracle is on"):
        from_dict({"prompts": str(f)})
    # the world model conditions on the world's vocabulary only: refused up front, not at the first rollout
    with pytest.raises(UserError, match="model 'world' knows only the world's vocabulary"):
        from_dict({"prompts": str(f), "eval_oracle": False})
    # one training prompt: an update can draw one prompt, not the default two
    with pytest.raises(UserError, match="'prompts_per_update' \\(2\\) exceeds the 1 training prompt"):
        from_dict({"prompts": str(f), "eval_oracle": False, "model": "tiny-wan"})
    one = {"prompts": str(f), "eval_oracle": False, "model": "tiny-wan", "prompts_per_update": 1, "minibatches": 1}
    assert from_dict(one).prompts == str(f)


class PromptFreeReward(Reward):
    """A reward that reads no prompt (real prompts are outside the world's vocabulary)."""

    dimensions = ("vq", "mq", "ta")

    def __call__(self, videos, prompts):
        v = videos.float()
        return {"vq": -v.abs().flatten(1).mean(1), "mq": -(v[:, :, 1:] - v[:, :, :-1]).abs().flatten(1).mean(1),
                "ta": v.flatten(1).mean(1)}


def test_real_model_run_trains_and_evaluates_on_its_prompt_file(tmp_path):
    from grpo_bench.train.trainer import train

    f = tmp_path / "p.yaml"
    f.write_text("train: [a red car on a road, waves on a beach]\neval: [a bird in the sky]\n")
    cfg = from_dict({
        "model": "tiny-wan", "method": "flow_grpo", "prompts": str(f), "eval_oracle": False,
        "updates": 1, "prompts_per_update": 2, "group_size": 2, "steps": 3, "eval_samples": 2, "lora_rank": 2,
        "frames": 5, "device": "cpu", "diag_every": 0,
    })
    final = train(cfg, tmp_path / "run", reward=PromptFreeReward())
    rows = final["eval_videos"]
    assert {r["prompt"] for r in rows} == {"a bird in the sky"} and len(rows) == 2
    assert all(math.isnan(r["oracle_vq"]) and math.isfinite(r["judge_reward"]) for r in rows)
    assert math.isfinite(final["eval"]["eval_reward"]) and math.isnan(final["eval"]["eval_oracle_ta"])
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(lines) == 1 and math.isfinite(lines[0]["reward"])
