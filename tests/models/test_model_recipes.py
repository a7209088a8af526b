"""``grpo-bench train --model NAME`` takes a named real checkpoint's recipe (grpo_bench/models/recipes.yaml) for the
keys the command leaves unset: the shipped suites' values where a suite runs that model, the pipeline's shift
at the run's resolution for FLUX.1 and Qwen-Image, the official generation defaults elsewhere; a key the command
gives wins. Every registered real checkpoint has one, its numbers in range; one without is refused in one line."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from grpo_bench.cli import app
from grpo_bench.cli.train import build_config
from grpo_bench.config import model_recipe
from grpo_bench.config.model_recipe import RECIPE_KEYS, real_checkpoints, recipes
from grpo_bench.config.run import RunConfig
from grpo_bench.models import names
from grpo_bench.plan.model_specs import real_specs
from grpo_bench.suite.parse import load_suite

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



# --- every registered real checkpoint has a recipe, its numbers in range; one without is refused -------------------
def test_every_registered_real_checkpoint_has_a_recipe():
    real = real_checkpoints()
    assert {"sd3.5-large", "flux.1-schnell", "wan2.1-14b", "wan2.2-5b", "hunyuan15-720p", "sd3-medium"} <= set(real)
    assert sorted(set(real) - set(recipes())) == []  # none takes the world's 16 x 16 pixels silently


@pytest.mark.parametrize("model", sorted(recipes()))
def test_each_recipes_numbers_are_in_range_for_its_model(model):
    recipe, spec = recipes()[model], real_specs()[model]
    assert set(RECIPE_KEYS) - {"shift"} <= set(recipe) and ("shift" in recipe) != ("shift_from" in recipe)
    image = spec.get("modality") == "image"
    step = spec["vae_spatial"] * spec["patch"][-1]  # pixels per latent token side
    assert isinstance(recipe["frames"], int) and (recipe["frames"] == 1 if image else
                                                  recipe["frames"] > 1 and (recipe["frames"] - 1) % 4 == 0)
    for side in ("height", "width"):
        assert isinstance(recipe[side], int) and 256 <= recipe[side] <= 2048 and recipe[side] % step == 0, side
    assert isinstance(recipe["guidance"], float) and 1.0 <= recipe["guidance"] <= 10.0
    assert recipe["guidance"] == 1.0 if spec["guidance_distilled"] else recipe["guidance"] > 1.0
    if "shift" in recipe:
        assert isinstance(recipe["shift"], float) and 1.0 <= recipe["shift"] <= 12.0
    assert isinstance(recipe.get("steps", 10), int) and 1 <= recipe.get("steps", 10) <= 100
    assert isinstance(recipe.get("max_text_tokens", 256), int) and 64 <= recipe.get("max_text_tokens", 256) <= 1024
    assert isinstance(recipe["lora_rank"], int) and recipe["lora_rank"] in (16, 32, 64, 128)
    rank, alpha = recipe["lora_rank"], recipe["lora_alpha"]
    assert isinstance(alpha, int) and rank <= alpha <= 2 * rank
    assert recipe["mixed_precision"] == "bf16" and recipe["gradient_checkpointing"] is True
    assert image or recipe["eval_oracle"] is False  # the exact oracle is the embedded world's alone
    cfg = _cfg(model)  # the whole recipe passes the run config's own validation
    assert (cfg.frames, cfg.height, cfg.width, cfg.guidance) == tuple(recipe[k] for k in ("frames", "height", "width",
                                                                                         "guidance"))


@pytest.mark.parametrize(("model", "expected"), [
    ("sd3.5-large", {"height": 1024, "guidance": 4.5, "shift": 3.0, "max_text_tokens": 256}),
    ("flux.1-schnell", {"height": 1024, "steps": 4, "guidance": 1.0, "shift": 1.0, "max_text_tokens": 256}),
    # the RL repositories' training sizes (recipes.yaml quotes file and line): Flow-Factory's Wan2.1-T2V-14B LoRA
    # example, VeRL-Omni's Wan2.2-TI2V-5B DanceGRPO script (8 frames, rounded to 9), UniRL's HunyuanVideo 1.5
    ("wan2.1-14b", {"frames": 5, "height": 256, "width": 256, "steps": 10, "guidance": 5.0, "shift": 3.0,
                    "micro_batch": 1, "lora_rank": 64, "lora_alpha": 128.0}),
    ("wan2.2-5b", {"frames": 9, "height": 704, "width": 1280, "steps": 10, "guidance": 5.0, "shift": 5.0,
                   "micro_batch": 4}),
    ("hunyuan15-720p", {"frames": 5, "height": 480, "width": 480, "steps": 16, "guidance": 6.0, "shift": 5.0,
                        "micro_batch": 1, "lora_rank": 64, "lora_alpha": 64.0}),
])
def test_a_plain_run_of_a_newly_recipied_model_takes_its_official_defaults(model, expected):
    cfg = _cfg(model)
    assert {k: getattr(cfg, k) for k in expected} == expected
    assert cfg.lora_rank > 0 and cfg.mixed_precision == "bf16"


GENERATION_SIZES = {"wan2.1-14b": (81, 720, 1280), "wan2.2-5b": (121, 704, 1280), "hunyuan15-720p": (121, 720, 1280)}
"""The official generation sizes (Wan2.1 generate.py:84-85, :112; Wan2.2 wan_ti2v_5B.py:36; HunyuanVideo-1.5
generate.py:302 and its 16:9 720p bucket), which the recipes replaced by RL training sizes."""


@pytest.mark.parametrize("model", sorted(GENERATION_SIZES))
def test_a_video_recipe_fits_one_80gb_gpu_by_plan_where_its_generation_size_does_not(model):
    """The point of taking the RL sizes: ``train --model M`` on one H100 passes the memory check (cli/train_memory.py)
    with the recipe as it is, and would be refused at the checkpoint's generation size."""
    from section_support import plan_of

    from grpo_bench.plan.estimate import GB

    frames, height, width = GENERATION_SIZES[model]
    assert plan_of(_cfg(model)).gpu_peak < 80 * GB
    assert plan_of(_cfg(model, f"frames={frames}", f"height={height}", f"width={width}")).gpu_peak > 80 * GB


def test_hunyuan15_720ps_generation_size_is_the_official_16_9_bucket():
    """hunyuan_video_pipeline.py get_closest_resolution_given_original_size with the 720p bucket (base 960, stride 16):
    generate_crop_size_list and get_closest_ratio (hyvideo/utils/data_utils.py), re-implemented here."""
    patches = round((960 / 16) ** 2)
    sizes, wp, hp = [], patches, 1
    while wp > 0:
        if max(wp, hp) / min(wp, hp) <= 4.0:
            sizes.append((wp * 16, hp * 16))
        if (hp + 1) * wp <= patches:
            hp += 1
        else:
            wp -= 1
    height, width = min(sizes, key=lambda s: abs(s[0] / s[1] - 9 / 16))
    assert GENERATION_SIZES["hunyuan15-720p"][1:] == (height, width)


@pytest.mark.parametrize("model", sorted(recipes()))
def test_every_recipes_lora_targets_name_modules_of_its_transformer(model):
    """Built from real_specs.yaml on ``meta``: a target that matches no module fails at load time (models/lora.py),
    minutes into a real run; here it fails at once. Matched as peft and lora.py match them: the name or its suffix."""
    import diffusers
    import torch

    targets = recipes()[model].get("lora_targets", RunConfig().lora_targets)
    spec = real_specs()[model]["transformer"]
    with torch.device("meta"):
        transformer = getattr(diffusers, spec["class"])(**spec["config"])
    names = [n for n, _ in transformer.named_modules()]
    assert not [t for t in targets if not any(n == t or n.endswith(f".{t}") for n in names)]


def test_a_registered_checkpoint_without_a_recipe_is_refused_in_one_line(monkeypatch, capsys, tmp_path):
    import sys

    import grpo_bench.cli.entry as entry

    kept = {k: v for k, v in recipes().items() if k != "wan2.1-14b"}
    monkeypatch.setattr(model_recipe, "recipes", lambda: kept)
    out = tmp_path / "run"
    monkeypatch.setattr(sys, "argv", ["grpo-bench", "train", "--model", "wan2.1-14b", "reward=videoalign_16fps",
                                      "--out", str(out)])
    with pytest.raises(SystemExit) as exit_:
        entry.main()
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert exit_.value.code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert not out.exists()  # refused before any work
    assert "'wan2.1-14b' has no recipe in grpo_bench/models/recipes.yaml" in lines[0]
    assert "wan2.1-1.3b" in lines[0] and "frames=" in lines[0] and "shift=" in lines[0]
    given = ["frames=33", "height=480", "width=832", "guidance=5.0", "shift=3.0", "mixed_precision=bf16",
             "lora_rank=32", "lora_alpha=32", "gradient_checkpointing=true"]
    cfg = build_config({}, ["model=wan2.1-14b", "reward=videoalign_16fps", *given])  # every recipe key given: runs
    assert (cfg.frames, cfg.height, cfg.lora_rank) == (33, 480, 32)
    with pytest.raises(Exception, match="lora_alpha="):  # one left out: refused, naming it
        build_config({}, ["model=wan2.1-14b", "reward=videoalign_16fps", *given[:-2], given[-1]])
