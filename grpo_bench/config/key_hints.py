"""The one-line error for a config key that does not exist: a did-you-mean from close spellings and
from the names other GRPO code bases use for the same knob (``learning_rate`` is ``lr`` here).

The full key list (about 70 names) would not fit one line, so the error names where they are
documented instead of listing them.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from grpo_bench.errors import UserError

SYNONYMS = {
    "learning_rate": "lr", "lr_rate": "lr", "base_lr": "lr",
    "num_updates": "updates", "n_updates": "updates", "iterations": "updates", "num_iterations": "updates",
    "max_steps": "updates", "train_steps": "updates",
    "num_generations": "group_size", "num_samples": "group_size", "samples_per_prompt": "group_size",
    "batch_size": "prompts_per_update", "prompts_per_step": "prompts_per_update",
    "num_steps": "steps", "sampling_steps": "steps", "num_inference_steps": "steps", "timesteps": "steps",
    "beta": "kl_weight", "kl_coef": "kl_weight", "kl_beta": "kl_weight", "kl_coeff": "kl_weight",
    "clip": "clip_range", "clip_eps": "clip_range", "epsilon": "clip_range", "cliprange": "clip_range",
    "guidance_scale": "guidance", "cfg": "guidance", "cfg_scale": "guidance",
    "eta": "noise_level", "noise": "noise_level", "sde_noise": "noise_level",
    "precision": "mixed_precision", "amp": "mixed_precision", "dtype": "param_dtype",
    "grad_clip": "max_grad_norm", "clip_grad_norm": "max_grad_norm", "max_norm": "max_grad_norm",
    "ppo_epochs": "inner_epochs", "num_epochs": "inner_epochs", "epochs": "inner_epochs",
    "resolution": "video_size", "num_frames": "frames", "reward_model": "reward", "algorithm": "method",
    "kl_type": "kl", "trust_region": "kl", "tracker": "trackers", "log_with": "trackers", "report_to": "trackers",
}
"""Other code bases' names (diffusers, TRL, FlowGRPO/DanceGRPO scripts) -> this config's key."""
WHERE = "grpo_bench/config/sections.py and grpo_bench/models/options.py document every key"


def unknown_key(name: str, keys: Iterable[str], where: str = "") -> UserError:
    keys = list(keys)
    guess = SYNONYMS.get(name.lower().replace("-", "_"))
    if guess not in keys:
        close = difflib.get_close_matches(name, keys, n=1)
        guess = close[0] if close else None
    hint = f" (did you mean {guess!r}?)" if guess else ""
    return UserError(f"{where}unknown config key {name!r}{hint}; {WHERE}")
