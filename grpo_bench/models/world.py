"""The embedded world's video model behind the generator-model protocol (models/base.py).

Latents are pixels: ``latent_shape`` is (3, F, H, W) and ``decode`` only clamps to [-1, 1].
``cond`` is a LongTensor[B, 3] of (colour, shape, motion) indices; the unconditional
``null_cond`` uses each part's reserved null index (its vocabulary size).

Weights live in one safetensors file whose metadata records the architecture and the video
size, so a file alone rebuilds the network.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from grpo_bench.atomic import atomic_write
from grpo_bench.errors import UserError
from grpo_bench.models.base import BaseVideoModel
from grpo_bench.models.options import ModelSection
from grpo_bench.models.registry import MODELS
from grpo_bench.world.model import NULL_INDEX, WorldUNet, WorldUNetConfig
from grpo_bench.world.vocab import parse

ASSETS = Path(__file__).resolve().parent.parent / "assets"
DEFAULT_WEIGHTS = ASSETS / "world_base.safetensors"
REBUILD_COMMAND = "grpo-bench pretrain base"
FRAMES = 8
POLICY_WEIGHTS = "model.safetensors"
"""A trained world policy's weights file in ``RUN/policy/`` (the base model's format)."""


class WorldVideoModel(BaseVideoModel):
    """Protocol adapter around a WorldUNet for videos of ``size`` x ``size`` and ``frames`` frames."""

    def __init__(self, net: WorldUNet, size: int = 16, frames: int = FRAMES) -> None:
        self.net = net
        self.size = int(size)
        self.frames = int(frames)
        self.latent_shape = (3, self.frames, self.size, self.size)

    bf16_by_default = True
    """``mixed_precision: auto`` runs this model under bf16 autocast where the hardware has bf16 units
    (train/precision.py; checked equivalent to fp32 by tests/train/test_bf16_equivalence.py)."""

    gif_preview = True
    """16x16 videos: a GIF shows them in any browser or viewer at once."""

    @property
    def device(self) -> torch.device:
        return next(self.net.parameters()).device

    def encode_prompts(self, prompts: list[str]) -> Tensor:
        """LongTensor[B, 3] of part indices (UserError listing the vocabulary for an unknown word)."""
        return torch.tensor([parse(p) for p in prompts], dtype=torch.long, device=self.device).reshape(-1, 3)

    def null_cond(self, n: int) -> Tensor:
        return torch.tensor([NULL_INDEX] * n, dtype=torch.long, device=self.device).reshape(-1, 3)

    @staticmethod
    def cat_cond(a: Tensor, b: Tensor) -> Tensor:
        return torch.cat([a, b], dim=0)

    def velocity(self, x: Tensor, sigma: Tensor, cond: Tensor) -> Tensor:
        """v: Tensor[B, 3, F, H, W] for x of the same shape, sigma: Tensor[B] (or a scalar)."""
        sigma = torch.as_tensor(sigma, dtype=torch.float32, device=x.device)
        if sigma.ndim == 0:
            sigma = sigma.expand(x.shape[0])
        return self.net(x, sigma, cond)

    def decode(self, x: Tensor) -> Tensor:
        return x.clamp(-1.0, 1.0)

    def trainable_module(self) -> nn.Module:
        return self.net

    def save_policy(self, folder: Path, card: dict[str, Any], gathered: dict[int, Tensor] | None = None) -> dict:
        """The shipped base model's own format, so ``grpo-bench sample --checkpoint RUN`` and
        ``load("world", path=...)`` read the trained policy; the run's key facts ride in its metadata."""
        save_weights(self.net, Path(folder) / POLICY_WEIGHTS, self.size, self.frames,
                     extra={"grpo_bench_card": json.dumps({k: card[k] for k in ("method", "kl", "setting", "seed")})})
        return {"format": "world-safetensors", "weights": POLICY_WEIGHTS}


def save_weights(net: WorldUNet, path: Path, size: int, frames: int = FRAMES, extra: dict | None = None) -> None:
    """Write the network's weights with the architecture, size and ``extra`` as string metadata."""
    meta = {
        "format": "grpo-bench world model v1",
        "config": json.dumps(net.config.to_dict()),
        "size": str(int(size)),
        "frames": str(int(frames)),
    }
    meta.update({k: str(v) for k, v in (extra or {}).items()})
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu().contiguous() for k, v in net.state_dict().items()}
    # atomic: a killed save never leaves a half-written weights file
    atomic_write(path, lambda tmp: save_file(state, str(tmp), metadata=meta))


def load_weights(path: Path) -> tuple[WorldUNet, dict[str, str]]:
    """(network, metadata) from a weights file; UserError naming the file and the rebuild command."""
    path = Path(path)
    fix = f"rebuild it with `{REBUILD_COMMAND} --out {path}`"
    if not path.is_file():
        raise UserError(f"world model weights {path} not found; {fix}")
    try:
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as f:
            meta = dict(f.metadata() or {})
        state = load_file(str(path))
        net = WorldUNet(WorldUNetConfig.from_dict(json.loads(meta["config"])))
        net.load_state_dict(state)
    except (SafetensorError, OSError, KeyError, TypeError, ValueError, RuntimeError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UserError(f"world model weights {path} are corrupt or incompatible ({reason}); {fix}") from None
    return net, meta


@MODELS.register("world")
def world_model(
    pretrained: bool = True,
    size: int | None = None,
    path: str | Path | None = None,
    config: WorldUNetConfig | None = None,
    device: str | torch.device = "cpu",
    section: ModelSection | None = None,
) -> WorldVideoModel:
    """The world's base video model: the shipped weights (or ``path``), or a fresh network.

    size: video height/width (default: the run's ``section.video_size``, else 16); pretrained
    weights fix it (a different size is a UserError). Of the run's model section only ``video_size`` is read.
    """
    if size is None and section is not None:
        size = section.video_size
    if not pretrained:
        return WorldVideoModel(WorldUNet(config), 16 if size is None else int(size)).to(device)
    path = Path(path) if path is not None else DEFAULT_WEIGHTS
    net, meta = load_weights(path)
    trained = int(meta.get("size", 16))
    if size is not None and int(size) != trained:
        raise UserError(
            f"world model weights {path} were trained on {trained}x{trained} videos, not {size}x{size}; "
            f"use video_size: {trained}, or train weights for it with `{REBUILD_COMMAND} --size {size} --out FILE`"
        )
    net.eval()
    return WorldVideoModel(net, trained, int(meta.get("frames", FRAMES))).to(device)


world_model.shipped_weights = DEFAULT_WEIGHTS  # its digest is part of the id of every cell that loads it
world_model.embedded = True  # ships with the package: no diffusers stack needed
