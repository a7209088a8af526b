"""Weight paths checked before any work, reward/model shape incompatibilities caught before sampling,
`run` refusing a real-model cell that will not fit, and a failed multi-process launch read as one line."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from grpo_bench.config.run import RunConfig
from grpo_bench.config.sections import Compared, section
from grpo_bench.config.weights import (
    check_video_shape,
    check_weight_paths,
    reward_kwargs,
)
from grpo_bench.errors import UserError

pytestmark = pytest.mark.filterwarnings("ignore")
ROOT = Path(__file__).resolve().parents[2]


def test_missing_model_folder_names_the_key_and_path_not_a_download(tmp_path):
    with pytest.raises(UserError) as err:
        check_weight_paths(Compared(model="./does/not/exist"))
    assert "'model'" in str(err.value) and "./does/not/exist" in str(err.value) and "hf download" not in str(err.value)
    (tmp_path / "pipe").mkdir()
    with pytest.raises(UserError, match="has no model_index.json"):
        check_weight_paths(Compared(model=str(tmp_path / "pipe")))
    from grpo_bench import models

    with pytest.raises(UserError, match="does not exist") as err:
        models.load("./does/not/exist")
    assert "hf download" not in str(err.value)
    check_weight_paths(Compared(model="tiny-wan"))  # registered names and hub ids pass
    check_weight_paths(Compared(model="org/some-model"))


def test_reward_paths_map_to_each_rewards_options_and_are_checked(tmp_path):
    (tmp_path / "ck").mkdir()
    (tmp_path / "base").mkdir()
    cfg = Compared(reward="videoalign", reward_path=str(tmp_path / "ck"), reward_base_path=str(tmp_path / "base"))
    check_weight_paths(cfg)
    assert reward_kwargs(cfg) == {"checkpoint": str(tmp_path / "ck"), "base_model": str(tmp_path / "base")}
    assert reward_kwargs(Compared(reward="clip_score", reward_path="/m")) == {"model": "/m"}
    assert reward_kwargs(Compared(reward="pickscore", reward_path="/m", reward_base_path="/p")) == {
        "model": "/m", "processor": "/p"}
    assert reward_kwargs(Compared(reward="world_judge", reward_path="/j.safetensors")) == {"path": "/j.safetensors"}
    with pytest.raises(UserError, match=r"'reward_path': '/no/such/VideoReward' does not exist"):
        check_weight_paths(Compared(reward="videoalign", reward_path="/no/such/VideoReward"))
    with pytest.raises(UserError, match="'reward_base_path': reward 'clip_score' takes only reward_path"):
        check_weight_paths(Compared(reward="clip_score", reward_path=str(tmp_path / "ck"),
                                    reward_base_path=str(tmp_path / "base")))
    with pytest.raises(UserError, match="takes no weight path"):
        check_weight_paths(Compared(reward="world_oracle", reward_path=str(tmp_path / "ck")))


def test_reward_paths_are_the_file_or_folder_each_reward_declares(tmp_path):
    """HPSv2 and ImageReward take checkpoint files, VideoAlign and the CLIP family folders: each path is held to
    its reward's declaration (rewards/base.py), and the wrong kind is one line naming the key and the kind."""
    weights = tmp_path / "HPS_v2.1_compressed.pt"
    weights.write_bytes(b"not read before the load")
    med = tmp_path / "med_config.json"
    med.write_text("{}")
    folder = tmp_path / "VideoReward"
    folder.mkdir()
    check_weight_paths(Compared(reward="hpsv2", reward_path=str(weights)))
    check_weight_paths(Compared(reward="imagereward", reward_path=str(weights), reward_base_path=str(med)))
    check_weight_paths(Compared(reward="world_judge", reward_path=str(weights)))
    check_weight_paths(Compared(reward="videoalign", reward_path=str(folder)))
    with pytest.raises(UserError, match=r"'reward_path': '.*VideoReward' is not a file \(reward 'hpsv2' takes its "
                                        r"checkpoint as a local file\)$"):
        check_weight_paths(Compared(reward="hpsv2", reward_path=str(folder)))
    with pytest.raises(UserError, match=r"'reward_base_path': .* is not a file .*its med_config as a local file"):
        check_weight_paths(Compared(reward="imagereward", reward_path=str(weights), reward_base_path=str(folder)))
    with pytest.raises(UserError, match=r"'reward_path': .*HPS_v2.1_compressed.pt' is not a folder .*its checkpoint "
                                        r"as a local folder"):
        check_weight_paths(Compared(reward="videoalign", reward_path=str(weights)))
    # every registered reward declares a kind for each of its path options
    from grpo_bench.rewards import REWARDS
    from grpo_bench.rewards.base import FILE, FOLDER, PATH_KINDS, factory_declaration

    for name in REWARDS.names():
        assert set(factory_declaration(REWARDS.get(name)).path_options.values()) <= set(PATH_KINDS), name
    assert factory_declaration(REWARDS.get("hpsv2")).path_options == {"checkpoint": FILE}
    assert factory_declaration(REWARDS.get("pickscore")).path_options == {"model": FOLDER, "processor": FOLDER}


def test_world_judge_on_a_tiny_diffusers_model_is_refused_before_sampling():
    from section_support import model_of

    from grpo_bench import models, rewards

    cfg = RunConfig(model="tiny-wan", frames=8, device="cpu")
    model = model_of(cfg)  # 8 frames round to 9 (1 + 4k)
    with pytest.raises(UserError, match="8x16x16 but model 'tiny-wan' makes 9x16x16.*reward=world_oracle"):
        check_video_shape(section(cfg, Compared), model, rewards.load("world_judge"))
    check_video_shape(section(cfg, Compared), model, rewards.load("world_oracle"))  # declares no shape: any video
    with pytest.raises(UserError, match="set video_size: 16"):  # a randomly initialised 24 x 24 world model
        check_video_shape(Compared(), models.build("world", size=24), rewards.load("world_judge"))


def test_run_refuses_a_real_model_cell_that_will_not_fit(tmp_path):
    from grpo_bench.cli import app

    suite = yaml.safe_load((ROOT / "suites" / "hunyuan15_paper.yaml").read_text())
    suite["base"]["prompts"] = str(ROOT / "suites" / "prompts" / "video_prompts.yaml")
    suite["budget"]["gpu_memory_gb"] = 24
    path = tmp_path / "small_gpus.yaml"
    path.write_text(yaml.safe_dump(suite))
    res = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "runs")])
    assert isinstance(res.exception, UserError), res.output
    assert "exceeds gpu_memory_gb=24" in str(res.exception) and "\n" not in str(res.exception)
    assert not (tmp_path / "runs").exists()  # refused before any work


LOG = """\
W1130 12:00:00 torch/distributed/run.py:793] Setting OMP_NUM_THREADS environment variable
[rank1]: Traceback (most recent call last):
[rank1]:   File "grpo_bench/train/trainer.py", line 120, in update
[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.00 GiB
[rank0]: Traceback (most recent call last):
[rank0]: RuntimeError: NCCL communicator was aborted
Traceback (most recent call last):
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
"""


def test_first_error_and_the_runner_records_one_line(tmp_path, monkeypatch):
    from grpo_bench.launch_log import LaunchError, first_error
    from grpo_bench.suite import accelerate_launch

    assert first_error(LOG) == "rank 1: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.00 GiB"
    assert first_error("noise\nerror: config key 'lr' must be > 0\n") == "error: config key 'lr' must be > 0"
    assert first_error("all fine\n") is None
    commands = []

    class FailedLaunch:
        returncode = 1

        def __init__(self, cmd, **kw):
            commands.append(cmd)
            kw["stdout"].write(LOG)

        def poll(self):
            return 1

    monkeypatch.setattr(accelerate_launch.subprocess, "Popen", FailedLaunch)
    with pytest.raises(LaunchError) as err:
        accelerate_launch.launch_accelerate(tmp_path, "x:y", [0, 1], lambda u: None, "fsdp2")
    msg = str(err.value)
    assert msg.startswith("rank 1: torch.OutOfMemoryError: CUDA out of memory") and str(tmp_path / "launch.log") in msg
    assert "\n" not in msg
    assert "--config_file" in commands[0] and commands[0][commands[0].index("--config_file") + 1].endswith("fsdp2.yaml")
