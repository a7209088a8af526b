"""A named real checkpoint's recipe defaults (grpo_bench/models/recipes.yaml): what ``grpo-bench train --model NAME``
takes for the keys the command leaves unset, so that a plain run samples at the model's resolution and guidance,
in bf16 with its LoRA, instead of the embedded world's defaults (16 x 16, guidance 1.0, float32 full fine-tuning).

``ode_last_step`` (SD3.5 as flow_grpo samples it) makes the run's last step the ODE step (``window``); ``shift_from``
(FLUX.1, Qwen-Image) is the scheduler's dynamic-shift config: the shift is the pipeline's at the
run's own resolution (models/diffusers_image.py ``dynamic_shift``), so a smaller ``height`` gets its shift too.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from grpo_bench import safe_yaml

RECIPES = Path(__file__).resolve().parents[1] / "models" / "recipes.yaml"
LATENT_PIXELS_PER_TOKEN = 16
"""FLUX.1 and Qwen-Image: a VAE of spatial factor 8, then 2 x 2 latent pixels packed into one token."""


RECIPE_KEYS = ("frames", "height", "width", "guidance", "shift", "mixed_precision", "lora_rank", "lora_alpha",
               "gradient_checkpointing")
"""What every recipe sets (``shift`` also as ``shift_from``): without them a real checkpoint would sample at the
embedded world's 16 x 16 pixels, guidance 1.0 and float32 full fine-tuning."""


@functools.cache
def recipes() -> dict[str, dict[str, Any]]:
    """Model name -> its recipe (the shipped file)."""
    return safe_yaml.load_file(RECIPES, "model recipes") or {}


def real_checkpoints() -> list[str]:
    """The registered models that name a real checkpoint (a factory with a hub id), not tiny presets or worlds."""
    from grpo_bench.models import MODELS

    return [n for n in MODELS.names() if getattr(MODELS.get(n), "hub_id", None) is not None]


def refuse_without_recipe(model: Any, given: Mapping[str, Any]) -> None:
    """UserError (one line) for a registered real checkpoint that has no recipe while the command leaves some of
    RECIPE_KEYS unset: it would run at the world's defaults without a word."""
    from grpo_bench.errors import UserError

    if not isinstance(model, str) or model in recipes() or model not in real_checkpoints():
        return
    missing = [k for k in RECIPE_KEYS if k not in given]
    if missing:
        raise UserError(f"grpo-bench train: model {model!r} has no recipe in grpo_bench/models/recipes.yaml (models "
                        f"with one: {', '.join(sorted(recipes()))}); add one, or give "
                        f"{', '.join(f'{k}=' for k in missing)} on the command line")


def recipe_defaults(model: Any, given: Mapping[str, Any]) -> dict[str, Any]:
    """The recipe's values for the keys ``given`` does not set; {} for a model without a recipe (a registered real
    checkpoint without one is refused unless ``given`` sets every RECIPE_KEYS)."""
    refuse_without_recipe(model, given)
    recipe = dict(recipes().get(model, {})) if isinstance(model, str) else {}
    scheduler = recipe.pop("shift_from", None)
    ode_last_step = recipe.pop("ode_last_step", False)
    out = {k: v for k, v in recipe.items() if k not in given}
    if ode_last_step and "window" not in given:  # every step stochastic but the last (suites/sd35_flow_grpo.yaml)
        out["window"] = [0, int(given.get("steps", recipe["steps"])) - 1]
    if scheduler is not None and "shift" not in given:
        from grpo_bench.models.diffusers_image import dynamic_shift

        height, width = given.get("height", recipe["height"]), given.get("width", recipe["width"])
        tokens = (int(height) // LATENT_PIXELS_PER_TOKEN) * (int(width) // LATENT_PIXELS_PER_TOKEN)
        out["shift"] = dynamic_shift(tokens, scheduler)
    return out
