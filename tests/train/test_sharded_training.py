"""Sharded launches on two CPU processes (gloo): FSDP2 (grpo_bench/train/sharding.py) and DeepSpeed ZeRO-2
(grpo_bench/train/steppers.py), and the clear errors of launches the trainer cannot honour.

The launched runs (tests/_support/sharded_train_script.py): two GRPO updates of tiny-wan with LoRA and the fixed KL
anchor, once under the plain data-parallel launch (shared by the tests of this module), once under an
FSDP2 config and once under the DeepSpeed ZeRO-2 config (the shipped files made CPU-sized). The sharded
runs are interrupted after update 1 and resumed from their checkpoint; each ends with the data-parallel
run's parameters."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml
from launch_support import accelerate_launch
from support_paths import SUPPORT

from grpo_bench import rewards
from grpo_bench.config import accelerate_configs
from grpo_bench.errors import UserError
from grpo_bench.train import distributed, sharding, steppers

SCRIPT = SUPPORT / "sharded_train_script.py"
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}


def _launch(args: list[str], out: Path, mode: str) -> list[dict]:
    res = subprocess.run([*accelerate_launch(), *args, str(SCRIPT), str(out), mode], capture_output=True, text=True,
                         env=ENV, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    return [json.loads((out / f"{mode}-rank{r}.json").read_text()) for r in (0, 1)]


def _cpu_sized(name: str, out: Path) -> Path:
    """A shipped accelerate config for two CPU processes, its sharding block as shipped."""
    cfg = yaml.safe_load(accelerate_configs.config_path(name).read_text())
    cfg.update(num_processes=2)
    cfg.pop("gpu_ids", None)
    path = out / f"{name}_cpu.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.fixture(scope="module")
def data_parallel(tmp_path_factory) -> tuple[list[dict], dict]:
    out = tmp_path_factory.mktemp("dp")
    dp = _launch(["--multi_gpu", "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
                  "--dynamo_backend", "no"], out, "dp")
    assert not dp[0]["sharded"] and not dp[0]["all_dtensor"]
    return dp, torch.load(out / "dp-params.pt")


def _same_params(a: dict, b: dict) -> None:
    assert a.keys() == b.keys() and len(a) > 0
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=1e-5, atol=1e-6, msg=name)
    assert max(float((a[n] - b[n]).abs().max()) for n in a) < 1e-6 < max(float(t.abs().max()) for t in a.values())


def _resumed_like_data_parallel(runs: list[dict], dp: list[dict]) -> None:
    for r in runs:
        assert r["interrupted_after"] == ["update_000001"]  # killed after its first checkpoint ...
        assert r["updates"] == 2 and r["optimizer_steps"] == 2  # ... and resumed to the end
        assert r["anchor_vs_base"] == 0.0  # the fixed anchor (lora_B = 0) = the base model
        assert r["policy_vs_base"] > 1e-4 and r["policy_restored"] == 0.0  # policy trained, intact after
    assert runs[0]["digest"] == runs[1]["digest"]  # full tensors on both ranks agree
    # the gradients are averaged over the ranks like average_gradients: the clipped norms agree
    assert runs[0]["grad_norm"] == pytest.approx(dp[0]["grad_norm"], rel=1e-5)
    assert runs[0]["kl"][0] == 0.0 and runs[0]["kl"][1] > 0  # the anchored KL is live after the first step
    assert all(v is None or v > 0 for line in runs[0]["diag"] for v in line)  # per-step norms measured


@pytest.mark.xdist_group("launches")  # several processes each, one launch at a time (tests/conftest.py)
def test_fsdp2_shards_matches_data_parallel_and_resumes(tmp_path, data_parallel):
    dp, dp_params = data_parallel
    fs = _launch(["--config_file", str(_cpu_sized("fsdp2", tmp_path))], tmp_path, "fsdp")
    for r in fs:
        assert r["sharded"] and r["all_dtensor"]  # every trainable parameter is a DTensor
        assert r["local_numel"] * 2 == r["full_numel"]  # each rank holds half (LoRA rank 2 splits evenly)
    _resumed_like_data_parallel(fs, dp)
    _same_params(dp_params, torch.load(tmp_path / "fsdp-params.pt"))
    assert fs[0]["policy_keys_match"] and fs[0]["policy_max_diff"] == 0.0  # the sharded policy was exported whole


# Opt-in (docs/testing.md): the slowest default test (two DeepSpeed processes, 168 s on the loaded 2-core machine);
# test_fsdp2_... keeps a sharded launch against data parallel in the default run, and
# test_deepspeed_launch_is_checked the DeepSpeed glue.
@pytest.mark.slow
@pytest.mark.xdist_group("launches")  # several processes each, one launch at a time (tests/conftest.py)
def test_deepspeed_zero2_partitions_matches_data_parallel_and_resumes(tmp_path, data_parallel):
    pytest.importorskip("deepspeed", reason="the deepspeed extra: pip install -e '.[deepspeed]'")
    dp, dp_params = data_parallel
    zs = _launch(["--config_file", str(_cpu_sized("deepspeed_zero2", tmp_path))], tmp_path, "zero2")
    for r in zs:
        assert r["zero_stage"] == 2 and not r["sharded"]  # full parameters on every rank ...
        assert r["partition_numel"] * 2 == r["full_numel"] == r["adam_state_numel"] * 2  # ... half the state
        # the launch file says bf16, the run config says no: the weights stay fp32 (no DeepSpeed bf16 cast)
        assert r["param_dtypes"] == ["torch.float32"]
    _resumed_like_data_parallel(zs, dp)
    # per-step norms by autograd.grad: the engine's gradient hooks do not fire, each rank's own rows
    pairs = [(z, d) for zl, dl in zip(zs[0]["diag"], dp[0]["diag"], strict=True) for z, d in zip(zl, dl, strict=True)]
    assert all((z is None) == (d is None) for z, d in pairs)
    assert [z for z, d in pairs if d is not None] == pytest.approx([d for z, d in pairs if d is not None], rel=1e-5)
    _same_params(dp_params, torch.load(tmp_path / "zero2-params.pt"))
    ckpt = tmp_path / "zero2-run" / "checkpoints" / "update_000002" / "engine" / "pytorch_model"
    assert sorted(p.name for p in ckpt.glob("zero_pp_rank_*_optim_states.pt")) == [
        "zero_pp_rank_0_mp_rank_00_optim_states.pt", "zero_pp_rank_1_mp_rank_00_optim_states.pt"]


def test_deepspeed_launch_is_checked(monkeypatch):
    monkeypatch.setattr(distributed, "_run_launcher", lambda *a, **k: pytest.fail("launched"))
    with monkeypatch.context() as m:  # DeepSpeed absent: the error names the install command, nothing starts
        m.setattr("importlib.util.find_spec", lambda name, *a: None)
        with pytest.raises(UserError, match="pip install deepspeed"):
            distributed.relaunch("deepspeed_zero2", ["train", "--accelerate-config", "deepspeed_zero2"])
        monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
        with pytest.raises(UserError, match="pip install deepspeed"):
            steppers.check_launch("bf16")
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    with monkeypatch.context() as m:
        m.setattr("importlib.util.find_spec", lambda name, *a: object())
        steppers.check_launch("bf16")  # installed: bf16 and no are accepted
        with pytest.raises(UserError, match="fp16"):
            steppers.check_launch("fp16")
    # ZeRO-3 would partition the weights the trainer calls directly: refused before the engine is built
    acc = SimpleNamespace(state=SimpleNamespace(deepspeed_plugin=SimpleNamespace(
        deepspeed_config={"zero_optimization": {"stage": 3}})))
    with pytest.raises(UserError, match="zero_stage 3 is not supported"):
        steppers.DeepSpeedStepper(acc, torch.nn.Linear(2, 2), SimpleNamespace(model="tiny-wan"))


def test_fsdp_launch_settings_are_checked(monkeypatch):
    class Acc:  # what fsdp2_requested reads of an Accelerator on CPU (MULTI_CPU)
        from accelerate.utils import DistributedType

        distributed_type = DistributedType.MULTI_CPU

    assert not sharding.fsdp2_requested(Acc())
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    monkeypatch.setenv("FSDP_VERSION", "2")
    assert sharding.fsdp2_requested(Acc())
    with pytest.raises(UserError, match="fp16"):
        steppers.check_launch("fp16")
    monkeypatch.setenv("FSDP_VERSION", "1")
    with pytest.raises(UserError, match="fsdp_version"):
        sharding.fsdp2_requested(Acc())


def test_every_reward_takes_the_trainer_device():
    """The trainer loads its reward with device=<its device> (videos are scored where they are sampled)."""
    for name in rewards.names():
        params = inspect.signature(rewards.REWARDS.get(name)).parameters
        assert "device" in params or any(p.kind is p.VAR_KEYWORD for p in params.values()), name
