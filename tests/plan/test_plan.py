"""``grpo-bench plan``: parameter counts from the real configs (no weights), memory terms that follow
the config, the refusal above gpu_memory_gb, and the estimator against measured CPU peaks.

Tolerance of the measured checks: measured / predicted within [0.65, 1.5] (the activation constants
were fitted on a different stack: a 4-layer Wan stack at 1280 tokens; these use other widths, depths,
token counts and the HunyuanVideo 1.5 block)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from plan_configs import hy
from section_support import plan_of
from typer.testing import CliRunner

from grpo_bench.cli import app
from grpo_bench.config.run import RunConfig, resolve
from grpo_bench.config.sections import section
from grpo_bench.errors import UserError
from grpo_bench.models import ModelSection
from grpo_bench.plan.estimate import GB, check_fits
from grpo_bench.plan.model_specs import model_spec

pytestmark = pytest.mark.filterwarnings("ignore")
ROOT = Path(__file__).resolve().parents[2]
TOLERANCE = (0.65, 1.5)
# glibc otherwise raises its mmap threshold after the first large free and keeps freed tensors in
# the heap, so the resident set would not follow the tensors that are alive
MEASURE_ENV = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072", "OMP_NUM_THREADS": "1"}


def test_real_parameter_counts_come_from_the_configs():
    p = plan_of(hy(), processes=8)
    assert 8.2e9 < p.params < 8.45e9  # HunyuanVideo 1.5: "8.3B parameters"
    assert p.tokens == 21 * 30 * 53 + 1985  # latent tokens at 81 x 480 x 848 + joint text rows
    assert 0 < p.trainable < 1e8  # LoRA rank 64 on the attention projections
    wan = plan_of(hy(model="wan2.1-1.3b", width=832, reward="videoalign_16fps"), processes=8)
    assert 1.2e9 < wan.params < 1.5e9 and wan.tokens == 21 * 30 * 52
    w14 = plan_of(hy(model="wan2.1-14b", width=832, reward="videoalign_16fps", lora_rank=0), processes=8)
    assert 13.5e9 < w14.params < 14.8e9 and w14.trainable == w14.params


def test_memory_follows_the_config():
    base = plan_of(hy(), processes=8)
    assert plan_of(hy(micro_batch=1), processes=8).gpu["activations"] == pytest.approx(base.gpu["activations"] / 2)
    assert plan_of(hy(guidance=6.0), processes=8).gpu["activations"] == pytest.approx(base.gpu["activations"] * 2)
    assert plan_of(hy(gradient_checkpointing=False), processes=8).gpu_peak > base.gpu_peak
    full = plan_of(hy(lora_rank=0, param_dtype="bf16"), processes=8)
    sharded = plan_of(hy(lora_rank=0, param_dtype="bf16"), processes=8, sharding="fsdp2")
    assert sharded.gpu["optimizer"] == pytest.approx(full.gpu["optimizer"] / 8)
    assert sharded.gpu["weights"] < full.gpu["weights"] / 4
    # bf16 loading: about 2 bytes per transformer and text-encoder weight on the host (float32 was ~65 GB)
    fp32_everything = 4 * (base.params + base.host["offloaded_text_encoders"] / 2)
    assert base.host["load"] < 0.6 * fp32_everything  # the VAE alone stays float32
    assert plan_of(hy(lora_rank=0), processes=8).host["load"] > base.host["load"] + 1.9 * base.params  # fp32 master


def test_refusal_is_one_line_naming_the_limit():
    p = plan_of(hy(), processes=8)
    check_fits(p, p.gpu_peak / GB + 1, "x: ")
    with pytest.raises(UserError, match=r"x: predicted peak GPU memory .* exceeds gpu_memory_gb=10 ") as err:
        check_fits(p, 10, "x: ")
    assert "\n" not in str(err.value)


def test_plan_command_runs_on_both_hunyuan_suites_and_refuses():
    runner = CliRunner()
    for suite in ("hunyuan15_main_table.yaml", "hunyuan15_paper.yaml"):
        res = runner.invoke(app, ["plan", str(ROOT / "suites" / suite), "--gpu-memory-gb", "141"])
        assert res.exit_code == 0, res.output
        assert "hunyuan15-480p" in res.output and "8.33B" in res.output
    res = runner.invoke(app, ["plan", str(ROOT / "suites" / "hunyuan15_paper.yaml"), "--gpu-memory-gb", "8"])
    assert res.exit_code != 0 and isinstance(res.exception, UserError)
    assert "exceeds gpu_memory_gb=8" in str(res.exception)


def _measure(*args: str) -> dict:
    out = subprocess.run([sys.executable, str(ROOT / "tests" / "plan_measure_script.py"), *args], env=MEASURE_ENV,
                         capture_output=True, text=True, timeout=300, cwd=ROOT, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # a fresh process per measurement (~20-40 s each on a shared 2-core machine)
@pytest.mark.parametrize("family, ckpt", [("wan", "0"), ("hunyuan", "1")])
def test_activation_estimate_against_measured_cpu_peak(family, ckpt):
    r = _measure(family, ckpt)
    ratio = r["measured"] / r["predicted"]
    assert TOLERANCE[0] <= ratio <= TOLERANCE[1], r


@pytest.mark.slow
def test_host_peak_of_a_tiny_preset_update_against_measured():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--device", "cpu", "--cases",
                          "tiny-hunyuan15", "--json", "/dev/stdout"], env=MEASURE_ENV, capture_output=True, text=True,
                         timeout=300, cwd=ROOT, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    (row,) = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]  # the --json lines
    assert TOLERANCE[0] <= row["measured_gb"] / row["predicted_gb"] <= TOLERANCE[1], row


def test_gpu_check_dry_run_prints_the_plan_column(capsys):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gpu_check

    rows = gpu_check.main(["--dry-run", "--device", "cpu", "--blocks", "2"])
    assert [r["case"].split(" ")[0] for r in rows] == ["tiny-wan", "tiny-hunyuan15", "hunyuan15-stack", "wan13b-stack"]
    stack = rows[2]
    assert stack["tokens"] == 20_003 == 21 * 22 * 39 + 1985 and stack["measured_gb"] is None  # hunyuan15_paper's
    assert rows[3]["tokens"] == 14_040 == 9 * 30 * 52  # wan_small's 33 x 480 x 832
    assert 2 * (8.33e9 / 54) < stack["params"] < 4 * (8.33e9 / 54)  # two of HunyuanVideo 1.5's 54 blocks (+ embedders)
    assert "plan GB" in capsys.readouterr().out
    world = plan_of(RunConfig(model="world", device="cpu"))
    assert world.params > 0 and world.gpu_peak == 0 and world.host_peak > 0


def test_a_local_pipeline_folder_is_planned_as_the_checkpoint_it_holds(tmp_path):
    from grpo_bench.plan.model_specs import identify_folder, real_specs

    (tmp_path / "transformer").mkdir()
    conf = {"_class_name": "WanTransformer3DModel", **real_specs()["wan2.1-1.3b"]["transformer"]["config"]}
    (tmp_path / "transformer" / "config.json").write_text(json.dumps(conf))
    assert identify_folder(str(tmp_path)) == "wan2.1-1.3b"
    p = plan_of(hy(model=str(tmp_path), width=832, reward="videoalign_16fps"), processes=8)
    assert p.model == "wan2.1-1.3b" and 1.2e9 < p.params < 1.5e9
    conf["num_layers"] = 7  # not a known checkpoint
    (tmp_path / "transformer" / "config.json").write_text(json.dumps(conf))
    assert identify_folder(str(tmp_path)) is None


def test_durations_read_as_time():
    from grpo_bench.cli.plan import duration

    assert [duration(x) for x in (4.25, 45, 750, 7.5 * 3600, 4.3 * 86400)] == ["4.25 s", "45 s", "12.5 min", "7.5 h",
                                                                                "4.3 days"]


def test_cell_totals_vae_reward_and_communication_terms():
    from grpo_bench.config.recipe import UpdateShape
    from grpo_bench.plan.costs import VAE_DECODE_MAPS, PlannedUpdate, communication_bytes

    cfg = hy(updates=300, step_every="micro_step", guidance=6.0)
    p = plan_of(cfg, processes=8)
    assert p.seconds_per_cell == pytest.approx(300 * p.seconds_per_update)
    assert p.seconds_per_update == pytest.approx(sum(p.seconds.values()))
    assert p.seconds["vae"] > 0 and p.seconds["reward"] > 0 and p.seconds["communication"] > 0
    # one video per VAE call, tiled in space: 81 frames x one 256 x 256 tile x the top stage's channels, float32
    assert p.gpu["vae_decode"] == VAE_DECODE_MAPS * 128 * 81 * 256 * 256 * 4
    assert p.gpu["reward_activations"] > 0
    assert plan_of(hy(reward="world_oracle"), processes=8).gpu["reward_activations"] == 0
    # replicated LoRA, one optimizer step per (sample, trained step): a float32 ring all-reduce each
    trained = 3  # max_train_steps
    calls = 4  # 4 rollouts per process, one sample (two rows with guidance) per call at micro_batch 2
    want = 7 / 8 * 2 * p.trainable * 4 * trained * calls
    r = resolve(cfg)
    update = PlannedUpdate(section(r, UpdateShape), r.guidance, lora=True, rows=4, trained=trained, anchors=2)
    spec = model_spec(section(r, ModelSection))
    assert communication_bytes(update, spec, p.trainable, 2, 8, "none") == pytest.approx(want)
    assert plan_of(cfg, processes=1).seconds["communication"] == 0


@pytest.mark.parametrize(("reward", "device", "reward_bytes"), [
    ("pickscore", "auto", 9.86e8 * 4),  # CLIP ViT-H/14 in float32
    ("clip_score", "auto", 4.28e8 * 4),  # CLIP ViT-L/14 in float32
    ("hpsv2", "auto", 9.86e8 * 4),  # OpenCLIP ViT-H-14, precision "amp": float32 weights
    ("imagereward", "auto", 4.46e8 * 4),  # BLIP ViT-L + BERT-base + MLP in float32
    ("videoalign", "auto", 2.21e9 * 2),  # Qwen2-VL-2B + head, bfloat16 on a GPU
    ("videoalign", "cpu", 2.21e9 * 4),  # ... and float32 on the CPU
    ("world_oracle", "auto", 0.0),
])
def test_the_reward_is_counted_while_prompts_are_cached_in_its_load_dtype(reward, device, reward_bytes):
    """The trainer loads the reward before it caches the prompts (train/trainer.py), so the cache phase holds the
    whole transformer, the VAE, the text encoders and the reward, in the dtype its factory loads it in. A spec
    with 40B text-encoder parameters makes that phase the peak; the peak is then in closed form."""
    import dataclasses

    from grpo_bench.plan.estimate import FRAGMENTATION, GPU_OVERHEAD_GB

    cfg = hy(reward=reward, device=device, frames=1 if reward in ("hpsv2", "imagereward") else 81)
    spec = dataclasses.replace(model_spec(section(cfg, ModelSection)), text_encoder_params=40_000_000_000)
    p = plan_of(cfg, processes=8, spec=spec)
    assert p.gpu["reward"] == pytest.approx(reward_bytes)
    cache_phase = spec.transformer_params * 2 + spec.vae_params * 4 + spec.text_encoder_params * 2 + reward_bytes
    if device == "cpu":  # everything on the host
        assert p.gpu_peak == 0
        assert p.host_peak == pytest.approx(p.host["baseline"] + cache_phase + p.host["prompt_cache"])
    else:  # bf16 LoRA base, float32 VAE, bf16 text encoders
        assert p.gpu_peak == pytest.approx(cache_phase * FRAGMENTATION + GPU_OVERHEAD_GB * GB)
    assert p.host["reward_load"] == pytest.approx(reward_bytes)


def test_plan_checks_every_cell_against_an_h200_when_nothing_is_declared(monkeypatch, tmp_path):
    import torch
    import yaml

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    suite = yaml.safe_load((ROOT / "suites" / "wan_small.yaml").read_text())
    suite["budget"].pop("gpu_memory_gb", None)
    suite["base"]["prompts"] = str(ROOT / "suites" / "prompts" / "video_prompts.yaml")
    path = tmp_path / "undeclared.yaml"
    path.write_text(yaml.safe_dump(suite))
    res = CliRunner().invoke(app, ["plan", str(path), "frames=257", "height=720", "width=1280", "micro_batch=64"])
    assert res.exit_code != 0 and isinstance(res.exception, UserError)
    assert "exceeds gpu_memory_gb=141" in str(res.exception) and "\n" not in str(res.exception)
    assert "checked against 141 GB" in res.output
    ok = CliRunner().invoke(app, ["plan", str(path)])
    assert ok.exit_code == 0 and "node-days" in ok.output and "e+0" not in ok.output
    declared = CliRunner().invoke(app, ["plan", str(ROOT / "suites" / "wan_small.yaml")])
    assert declared.exit_code == 0 and "checked against 80 GB per GPU (the suite's" in declared.output


def test_autocast_copy_lora_backward_and_per_step_overheads_are_counted():
    """Float32 masters under bf16 autocast: a bf16 copy of every weight during a forward; LoRA's backward
    computes no base weight gradient; each optimizer step and transformer call costs fixed time."""
    from grpo_bench.plan.costs import CALL_OVERHEAD_S, STEP_OVERHEAD_S, training_pass_factor

    full = plan_of(hy(lora_rank=0, param_dtype="float32"), processes=8, sharding="fsdp2")
    assert full.gpu["autocast_copy"] == pytest.approx(2 * full.params)  # ~15.5 GiB for the 8.3B transformer
    assert plan_of(hy(lora_rank=0, param_dtype="bf16"), processes=8, sharding="fsdp2").gpu["autocast_copy"] == 0
    lora = plan_of(hy(), processes=8)
    assert lora.gpu["autocast_copy"] == pytest.approx(2 * lora.trainable)
    assert [training_pass_factor(lo, ck) for lo in (True, False) for ck in (True, False)] == [3, 2, 4, 3]
    one = plan_of(hy(minibatches=1, step_every="minibatch"), processes=8)
    many = plan_of(hy(step_every="micro_step"), processes=8)
    assert one.seconds["per_step"] >= STEP_OVERHEAD_S + CALL_OVERHEAD_S
    assert many.seconds["per_step"] > one.seconds["per_step"] + 10 * STEP_OVERHEAD_S  # 4 x 3 steps, not 1
    muon = plan_of(hy(lora_rank=0, optimizer="muon", minibatches=1), processes=8, sharding="fsdp2")
    adamw = plan_of(hy(lora_rank=0, minibatches=1), processes=8, sharding="fsdp2")
    assert muon.seconds["per_step"] > adamw.seconds["per_step"]  # Newton-Schulz iterations


def test_a_cell_that_outlasts_its_time_limit_is_refused_or_requeued():
    from grpo_bench.plan.estimate import check_time

    p = plan_of(hy(updates=300), processes=8)
    hours = p.seconds_per_cell / 3600
    limit = int(p.seconds_per_cell / 60 / 2.5)  # the cell needs three submissions of this limit
    check_time(p, None, 0, 10, "x: ")  # no limit declared: nothing to check
    check_time(p, limit, 2, 10, "x: ")
    with pytest.raises(UserError, match=rf"x: predicted {hours:.1f} h per cell exceeds budget.timeout_min={limit} "
                                        r"x 1 submission\(s\).*budget.requeue: 2") as err:
        check_time(p, limit, 0, 10, "x: ")
    assert "\n" not in str(err.value)
    with pytest.raises(UserError, match="between checkpoints .* would restart from the same checkpoint"):
        check_time(p, limit, 100, 300, "x: ")


def test_plan_refuses_a_suite_whose_cells_outlast_timeout_min():
    res = CliRunner().invoke(app, ["plan", str(ROOT / "suites" / "hunyuan15_paper.yaml"), "updates=5000"])
    assert res.exit_code != 0 and isinstance(res.exception, UserError)
    assert "exceeds budget.timeout_min=2880" in str(res.exception)
