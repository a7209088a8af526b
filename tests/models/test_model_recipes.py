"""``grpo-bench train --model NAME`` takes a named real checkpoint's recipe (grpo_bench/models/recipes.yaml) for the
keys the command leaves unset: the shipped suites' values where a suite runs that model, the pipeline's shift
at the run's resolution for FLUX.1 and Qwen-Image; a key the command gives wins."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from grpo_bench.cli import app
from grpo_bench.cli.train import build_config
from grpo_bench.models import names
from grpo_bench.suite.parse import load_suite
from grpo_bench.train.config import RunConfig
from grpo_bench.train.model_recipe import recipes
from grpo_bench.train.plan_models import real_specs

ROOT = Path(__file__).resolve().parents[2]


def _cfg(model: str, *overrides: str) -> RunConfig:
    reward = "pickscore" if real_specs()[model].get("modality") == "image" else "videoalign"
    return build_config({}, [f"model={model}", f"reward={reward}", *overrides])


@pytest.mark.parametrize(("model", "suite"), [("sd3.5-medium", "sd35_flow_grpo"), ("wan2.1-1.3b", "wan_small"),
                                              ("hunyuan15-480p", "hunyuan15_main_table")])
def test_a_models_recipe_is_its_suites_base(model, suite):
    base = load_suite(ROOT / "suites" / f"{suite}.yaml").base
    cfg = _cfg(model)
    recipe = {**recipes()[model], **({"window": None} if recipes()[model].get("ode_last_step") else {})}
    shared = sorted(set(recipe) & set(base))
    assert len(shared) >= 10 and set(recipe) - set(base) <= {"gradient_checkpointing", "ode_last_step"}
    for key in shared:
        assert getattr(cfg, key) == base[key], key  # what a plain `train --model` runs is the suite's


def test_a_plain_sd35_run_is_flow_grpos_recipe_not_the_worlds():
    cfg, world = _cfg("sd3.5-medium"), RunConfig()
    got = {k: getattr(cfg, k) for k in ("height", "width", "frames", "guidance", "lora_rank", "lora_alpha",
                                        "mixed_precision", "detach_uncond", "max_text_tokens")}
    assert got == {"height": 512, "width": 512, "frames": 1, "guidance": 4.5, "lora_rank": 32, "lora_alpha": 64,
                   "mixed_precision": "bf16", "detach_uncond": True, "max_text_tokens": 128}
    assert (world.height, world.guidance, world.lora_rank) == (16, 1.0, 0)  # what it took before
    assert cfg.window == [0, 9] and _cfg("sd3.5-medium", "steps=20").window == [0, 19]  # the last step the ODE
    assert _cfg("sd3.5-medium", "window=[0, 4]").window == [0, 4]


def _calculate_shift(tokens: int, base_seq: int, max_seq: int, base_shift: float, max_shift: float) -> float:
    from diffusers.pipelines.flux.pipeline_flux import calculate_shift

    return math.exp(calculate_shift(tokens, base_seq, max_seq, base_shift, max_shift))


@pytest.mark.parametrize(("model", "max_seq", "max_shift"), [("flux.1-dev", 4096, 1.15), ("qwen-image", 8192, 0.9)])
def test_flux_and_qwen_image_sample_at_their_pipelines_shift_for_the_runs_resolution(model, max_seq, max_shift):
    cfg = _cfg(model)
    assert (cfg.height, cfg.width) == (1024, 1024)
    assert cfg.shift == pytest.approx(_calculate_shift(64 * 64, 256, max_seq, 0.5, max_shift), rel=1e-12)
    small = _cfg(model, "height=512", "width=768")  # 32 x 48 tokens
    assert (small.height, small.width) == (512, 768)
    assert small.shift == pytest.approx(_calculate_shift(32 * 48, 256, max_seq, 0.5, max_shift), rel=1e-12)
    assert _cfg(model, "shift=2.5", "guidance=2.0").shift == 2.5  # a given key wins
    assert cfg.guidance_formula == ("norm_rescaled" if model == "qwen-image" else "cfg")  # its pipeline's true CFG
    assert _cfg(model, "guidance=2.0").guidance == 2.0


def test_the_world_and_like_take_no_recipe():
    world = build_config({}, [])
    assert dataclasses.asdict(world) == dataclasses.asdict(RunConfig())
    like = build_config({}, [], like=ROOT / "suites" / "sd35_flow_grpo_1gpu.yaml")
    base = load_suite(ROOT / "suites" / "sd35_flow_grpo_1gpu.yaml").base
    assert like.gradient_checkpointing == base["gradient_checkpointing"] and like.lora_rank == base["lora_rank"]


def test_every_recipe_names_a_registered_real_model_and_help_says_so():
    assert set(recipes()) <= set(names()) & set(real_specs())
    out = CliRunner().invoke(app, ["train", "--help"], env={"COLUMNS": "250"}).output
    assert "recipe" in out and "grpo_bench/models/recipes.yaml" in out
