"""The GRPO trainer on tiny random diffusers models with LoRA (CPU, no download): one update of
every method changes only adapter weights; the fixed-KL anchor (the initial adapter snapshot,
lora_B = 0) and the adapters-disabled forward both equal the base model; two processes under
``accelerate launch`` end with identical parameters."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from dist_train_script import ToyReward  # cheap deterministic VQ/MQ/TA of decoded videos
from section_support import model_of
from support_paths import SUPPORT

from grpo_bench.config.run import RunConfig

pytestmark = pytest.mark.filterwarnings("ignore")

METHODS = ["dance_grpo", "flow_grpo", "cps", "sage_grpo"]


def run_config(model: str, method: str, **kw) -> RunConfig:
    base = dict(model=model, method=method, updates=1, steps=4, prompts_per_update=2, group_size=2, frames=5,
                height=16, width=16, lora_rank=2, device="cpu", eval_samples=1, diag_every=0, save_videos=False,
                lr=1e-3, kl_weight=1e-2)
    base.update(kw)
    return RunConfig(**base)


@pytest.mark.parametrize("model_name", ["tiny-wan", "tiny-hunyuan15"])
def test_one_update_of_every_method_trains_only_lora(model_name, tmp_path):
    from grpo_bench.core.anchors import Anchors
    from grpo_bench.train.trainer import train

    base_config = run_config(model_name, "flow_grpo", lora_rank=0)
    base = model_of(base_config)  # same seed: the base weights
    x = torch.randn(2, *base.latent_shape, generator=torch.Generator().manual_seed(0))
    s = torch.tensor([0.8, 0.3])
    with torch.no_grad():
        v_base = base.velocity(x, s, base.encode_prompts(["a red circle", "a cat"]))
    for method in METHODS:
        cfg = run_config(model_name, method, guidance=3.0 if method == "sage_grpo" else 1.0)  # CFG: doubled batch
        model = model_of(cfg)
        module = model.trainable_module()
        before = {n: p.detach().clone() for n, p in module.named_parameters()}
        fixed = Anchors(["fixed"], model, module)  # the trainer's fixed-KL anchor: initial trainable snapshot
        final = train(cfg, tmp_path / f"{model_name}-{method}", model=model, reward=ToyReward())
        assert final["updates"] == 1 and final["optimizer_steps"] >= 1
        changed = {n for n, p in module.named_parameters() if not torch.equal(p, before[n])}
        assert changed, method
        assert all(".lora_A." in n or ".lora_B." in n for n in changed), (method, sorted(changed)[:3])
        cond = model.encode_prompts(["a red circle", "a cat"])
        with torch.no_grad():
            assert (model.velocity(x, s, cond) - v_base).abs().max() > 1e-6, method  # the update moved the policy
            with model.adapters_disabled():
                torch.testing.assert_close(model.velocity(x, s, cond), v_base)
            torch.testing.assert_close(fixed.velocity("fixed")(x, s, cond), v_base)


def test_train_command_runs_tiny_wan(tmp_path):
    """`grpo-bench train --model tiny-wan --method flow_grpo --updates 2` on a CPU."""
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "grpo_bench.cli", "train", "--model", "tiny-wan", "--method", "flow_grpo",
           "--updates", "2", "--device", "cpu", "--out", str(out), "prompts_per_update=2", "group_size=2",
           "steps=4", "eval_samples=1", "lora_rank=2", "frames=5", "reward=world_oracle"]
    res = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(lines) == 2 and (out / "DONE").is_file()


@pytest.mark.xdist_group("launches")  # several processes each, one launch at a time (tests/conftest.py)
def test_two_processes_end_identical(tmp_path):
    """``accelerate launch --num_processes 2`` on CPU (gloo): two updates; both ranks end with the same
    parameters; the data-parallel helpers shard, gather in rank order and average gradients; the compute counts
    are those of one process (grpo_bench/train/compute.py)."""
    script = SUPPORT / "dist_train_script.py"
    from launch_support import accelerate_launch

    cmd = [*accelerate_launch(), "--multi_gpu", "--num_processes", "2",
           "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", str(script), str(tmp_path)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert r0["world"] == r1["world"] == 2
    assert r0["digest"] == r1["digest"] and r0["lora_b_abs"] > 0
    assert r0["rows"] == [0, 4] and r1["rows"] == [4, 8]
    assert r0["gathered"] == r1["gathered"] == [10.0 * k for k in range(8)]
    assert r0["grad"] == r1["grad"] == [1.5, 1.5, 1.5]
    assert r0["rank_seed"] == 0 and r1["rank_seed"] not in (0, 1)
    # compute: every rank logs the launch's totals (summed over its processes), the one-process closed form
    assert r0["compute"] == r1["compute"] == r0["compute_expected"] and r0["compute"]["compute_training"] > 0


@pytest.mark.slow
@pytest.mark.xdist_group("launches")  # several processes each, one launch at a time (tests/conftest.py)
def test_accelerate_config_relaunch(tmp_path):
    """`grpo-bench train --accelerate-config FILE` re-launches itself through accelerate (2 CPU processes)."""
    cfg = tmp_path / "two_procs.yaml"
    cfg.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_GPU\nnum_machines: 1\n"
                   "num_processes: 2\nmixed_precision: 'no'\ndynamo_backend: 'NO'\nuse_cpu: false\n")
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "grpo_bench.cli", "train", "--accelerate-config", str(cfg), "--model", "tiny-wan",
           "--method", "sage_grpo", "--updates", "2", "--device", "cpu", "--out", str(out), "prompts_per_update=2",
           "group_size=2", "steps=4", "eval_samples=1", "reward=world_oracle"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 2 and (out / "DONE").is_file()


def test_user_error_under_a_launch_is_one_line(capfd):
    """A user error raised in the launched processes: printed once, exit code 2, and the launcher's
    traceback about the failed children dropped; other launcher output passes through untouched."""
    from grpo_bench.train import distributed

    script = ("import sys; w = sys.stderr.write; w('a warning\\n'); w('error: bad value x\\n'); "
              "w('error: bad value x\\n'); w('Traceback (most recent call last):\\n'); "
              "w('torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\\n'); sys.exit(1)")
    assert distributed._run_launcher([sys.executable, "-c", script]) == 2
    err = capfd.readouterr().err
    assert err == "a warning\nerror: bad value x\n"
    # without a user error: everything passes through, the launcher's exit code is kept, and one
    # last line names the first error a rank printed
    script = ("import sys; sys.stderr.write('[rank1]: Traceback (most recent call last):\\n[rank1]: ValueError: boom\\n"
              "[rank0]: RuntimeError: later\\n'); sys.exit(3)")
    assert distributed._run_launcher([sys.executable, "-c", script]) == 3
    assert capfd.readouterr().err == ("[rank1]: Traceback (most recent call last):\n[rank1]: ValueError: boom\n"
                                      "[rank0]: RuntimeError: later\n"
                                      "error: accelerate launch exited with 3: rank 1: ValueError: boom\n")
