"""FSDP2 sharding of the trainable module (grpo_bench/sharding.py) on two CPU processes (gloo), and the
clear errors of launches the trainer cannot honour.

The launched runs (tests/fsdp_train_script.py): two GRPO updates of tiny-wan with LoRA and the fixed KL
anchor, once under the plain data-parallel launch and once under an FSDP2 config (the shipped
fsdp2.yaml made CPU-sized); the FSDP2 run is interrupted after update 1 and resumed from its
checkpoint. Its parameters are DTensors holding half of each tensor per rank, and it ends with the
data-parallel run's parameters."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from grpo_bench import distributed, rewards, sharding
from grpo_bench.errors import UserError

SCRIPT = Path(__file__).with_name("fsdp_train_script.py")
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
LAUNCH = [sys.executable, "-m", "accelerate.commands.launch"]


def _launch(args: list[str], out: Path, mode: str) -> list[dict]:
    res = subprocess.run([*LAUNCH, *args, str(SCRIPT), str(out), mode], capture_output=True, text=True, env=ENV,
                         timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    return [json.loads((out / f"{mode}-rank{r}.json").read_text()) for r in (0, 1)]


def test_fsdp2_shards_matches_data_parallel_and_resumes(tmp_path):
    fsdp_cfg = yaml.safe_load(distributed.config_path("fsdp2").read_text())
    fsdp_cfg.update(num_processes=2, mixed_precision="no")  # CPU-sized; the fsdp_config block as shipped
    fsdp_cfg.pop("gpu_ids", None)
    (tmp_path / "fsdp2_cpu.yaml").write_text(yaml.safe_dump(fsdp_cfg))
    dp = _launch(["--multi_gpu", "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
                  "--dynamo_backend", "no"], tmp_path, "dp")
    fs = _launch(["--config_file", str(tmp_path / "fsdp2_cpu.yaml")], tmp_path, "fsdp")

    assert not dp[0]["sharded"] and not dp[0]["all_dtensor"]
    for r in fs:
        assert r["sharded"] and r["all_dtensor"]  # every trainable parameter is a DTensor
        assert r["local_numel"] * 2 == r["full_numel"]  # each rank holds half (LoRA rank 2 splits evenly)
        assert r["interrupted_after"] == ["update_000001"]  # killed after its first checkpoint ...
        assert r["updates"] == 2 and r["optimizer_steps"] == 2  # ... and resumed to the end
        assert r["anchor_vs_base"] == 0.0  # the fixed anchor (lora_B = 0) evaluated on shards = base model
        assert r["policy_vs_base"] > 1e-4 and r["policy_restored"] == 0.0  # policy trained, swapped back intact
    assert fs[0]["digest"] == fs[1]["digest"]  # full tensors gathered on both ranks agree
    a, b = (torch.load(tmp_path / f"{m}-params.pt") for m in ("dp", "fsdp"))
    assert a.keys() == b.keys() and len(a) > 0
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=1e-5, atol=1e-6, msg=name)
    assert max(float((a[n] - b[n]).abs().max()) for n in a) < 1e-6 < max(float(t.abs().max()) for t in a.values())
    # FSDP's reduce-scatter averages like average_gradients: the clipped norms agree
    assert fs[0]["grad_norm"] == pytest.approx(dp[0]["grad_norm"], rel=1e-5)
    assert fs[0]["kl"][0] == 0.0 and fs[0]["kl"][1] > 0  # the anchored KL is live after the first step
    assert all(v is None or v > 0 for line in fs[0]["diag"] for v in line)  # per-step norms, sharded variant


def test_deepspeed_config_fails_early(monkeypatch):
    monkeypatch.setattr(distributed.subprocess, "call", lambda *a, **k: pytest.fail("launched"))
    with pytest.raises(UserError, match="deepspeed"):
        distributed.relaunch("deepspeed_zero2", ["train", "--accelerate-config", "deepspeed_zero2"])
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    with monkeypatch.context() as m:  # DeepSpeed absent (as here): the error names the install command
        m.setattr("importlib.util.find_spec", lambda name, *a: None)
        with pytest.raises(UserError, match="pip install deepspeed"):
            sharding.check_launch("bf16")
    with monkeypatch.context() as m:  # present: still a one-line error pointing at fsdp2
        m.setattr("importlib.util.find_spec", lambda name, *a: object())
        with pytest.raises(UserError, match="fsdp2"):
            sharding.check_launch("bf16")


def test_fsdp_launch_settings_are_checked(monkeypatch):
    class Acc:  # what fsdp2_requested reads of an Accelerator on CPU (MULTI_CPU)
        from accelerate.utils import DistributedType

        distributed_type = DistributedType.MULTI_CPU

    assert not sharding.fsdp2_requested(Acc())
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    monkeypatch.setenv("FSDP_VERSION", "2")
    assert sharding.fsdp2_requested(Acc())
    with pytest.raises(UserError, match="fp16"):
        sharding.check_launch("fp16")
    monkeypatch.setenv("FSDP_VERSION", "1")
    with pytest.raises(UserError, match="fsdp_version"):
        sharding.fsdp2_requested(Acc())


def test_every_reward_takes_the_trainer_device():
    """The trainer loads its reward with device=<its device> (videos are scored where they are sampled)."""
    for name in rewards.names():
        params = inspect.signature(rewards.REWARDS.get(name)).parameters
        assert "device" in params or any(p.kind is p.VAR_KEYWORD for p in params.values()), name
