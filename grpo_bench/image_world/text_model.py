"""The text task's generator behind the model protocol, registered as ``image_world_text`` and, with an ink
decoder, as ``image_world_text_ink``.

Latents are grey pixels, Tensor[B, 1, 1, 32, 128] in [-1, 1]; ``decode`` clamps and repeats the grey channel,
so rewards, media and the evaluation see RGB stills Tensor[B, 3, 1, 32, 128] as from every other image model.
``image_world_text_ink`` decodes through a fixed saturating map instead (``InkTextWorldModel``): the same net,
weights, prompts and rewards, so only what a sample looks like after its last step differs.
``cond`` is a LongTensor[B, MAX_LETTERS] of letter indices (words.py ``letters``). Weights are one safetensors
file with its architecture in the metadata (model.py ``save_weights`` under this model's format).

The factory's ``run_defaults``: one frame, ``video_size`` 32 (the image's height; its width is 128),
``prompts: image_world_text``, the training OCR as reward, the exact reader as the evaluation oracle.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from grpo_bench.image_world.model import (
    POLICY_WEIGHTS,
    ImageWorldModel,
    load_weights,
    save_weights,
    still_model_factory,
)
from grpo_bench.image_world.text_net import NULL, TextUNet, TextUNetConfig
from grpo_bench.image_world.text_render import HEIGHT, WIDTH
from grpo_bench.image_world.words import MAX_LETTERS, letters, word_of

NAME = "image_world_text"
INK_NAME = "image_world_text_ink"
INK_GAIN = 3.0
"""The ink decoder's gain: the smallest of 2, 3, 4, 6 at which every field kernel's rollouts read as well as the
ODE's samples (benchmarks/rollout_readability.py --ink-gain; training words, base net, 10 steps)."""
PROMPT_SET = "image_world_text"
TRAINING_REWARD = "image_world_ocr"
ORACLE = "image_world_text_oracle"
ASSETS = Path(__file__).resolve().parent / "assets"
DEFAULT_WEIGHTS = ASSETS / "image_world_text_base.safetensors"
REBUILD_COMMAND = "python -m grpo_bench.image_world.text_pretrain"
FORMAT = "grpo-bench image world text model v1"


class TextWorldModel(ImageWorldModel):
    """Protocol adapter around a TextUNet for one-frame 32x128 grey stills."""

    def __init__(self, net: TextUNet) -> None:
        self.net = net
        self.latent_shape = (1, 1, HEIGHT, WIDTH)

    @property
    def video_shape(self) -> tuple[int, int, int, int]:
        return (3, 1, HEIGHT, WIDTH)

    def encode_prompts(self, prompts: list[str]) -> Tensor:
        """LongTensor[B, MAX_LETTERS] (UserError naming a prompt outside the vocabulary)."""
        rows = [letters(word_of(p)) for p in prompts]
        return torch.tensor(rows, dtype=torch.long, device=self.device).reshape(-1, MAX_LETTERS)

    def null_cond(self, n: int) -> Tensor:
        return torch.full((n, MAX_LETTERS), NULL, dtype=torch.long, device=self.device)

    def decode(self, x: Tensor) -> Tensor:
        return x.clamp(-1.0, 1.0).expand(-1, 3, -1, -1, -1)

    def save_policy(self, folder: Path, card: dict[str, Any], gathered: dict[int, Tensor] | None = None) -> dict:
        save_text_weights(self.net, Path(folder) / POLICY_WEIGHTS, extra={
            "grpo_bench_card": json.dumps({k: card[k] for k in ("method", "kl", "setting", "seed")})})
        return {"format": "image-world-text-safetensors", "weights": POLICY_WEIGHTS}


class InkTextWorldModel(TextWorldModel):
    """The text task with an ink decoder: ``tanh(g x) / tanh(g)`` per pixel (clamped), as a real model's VAE maps
    its last latent onto images of its data. Paper and ink (-1 and 1, what the base draws) stay where they are;
    the noise an SDE leaves at the last step (std 0.10-0.20 here) is pressed back toward them instead of speckling
    1-2 pixel strokes: with the plain clamp the FlowGRPO, DanceGRPO and SAGE-GRPO kernels' rollouts read 0.00,
    with this decoder 0.42-0.54 against the ODE's 0.45 (CPS 0.68; docs/image_world.md)."""

    def decode(self, x: Tensor) -> Tensor:
        return ink(x).expand(-1, 3, -1, -1, -1)


def ink(x: Tensor, gain: float = INK_GAIN) -> Tensor:
    """The ink decoder's per-pixel map, odd and increasing, -1 -> -1 and 1 -> 1."""
    return torch.tanh(gain * x.clamp(-1.0, 1.0)) / math.tanh(gain)


def save_text_weights(net: TextUNet, path: Path, extra: dict | None = None) -> None:
    save_weights(net, path, extra, fmt=FORMAT)


def load_text_weights(path: Path) -> TextUNet:
    return load_weights(path, fmt=FORMAT, build=lambda config: TextUNet(TextUNetConfig.from_dict(config)),
                        rebuild=REBUILD_COMMAND)


text_world_model = still_model_factory(
    NAME, HEIGHT, WIDTH, DEFAULT_WEIGHTS, load_text_weights, lambda config: TextUNet(config), TextWorldModel,
    {"prompts": PROMPT_SET, "reward": TRAINING_REWARD, "eval_oracle": True},
    ('the word "cat"', 'the word "moon"'),  # prompts of its vocabulary
    size_hint="its default; the height")
check_config = text_world_model.check_config

ink_text_world_model = still_model_factory(
    INK_NAME, HEIGHT, WIDTH, DEFAULT_WEIGHTS, load_text_weights, lambda config: TextUNet(config), InkTextWorldModel,
    {"prompts": PROMPT_SET, "reward": TRAINING_REWARD, "eval_oracle": True},
    ('the word "cat"', 'the word "moon"'),
    size_hint="its default; the height")
