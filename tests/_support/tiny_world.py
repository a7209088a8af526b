"""A tiny VideoModel and reward for fast trainer tests (protocol-conforming, world-shaped videos)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from grpo_bench.models.base import BaseVideoModel
from grpo_bench.rewards.base import Reward
from grpo_bench.world.vocab import parse


class TinyNet(nn.Module):
    """v = conv(silu(conv(x) * (1 + film(emb)))): per-sample, ~3k parameters."""

    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.emb = nn.ModuleList([nn.Embedding(n + 1, 2 * width) for n in (4, 3, 4)])  # +1: null token
        self.sig = nn.Linear(1, 2 * width)
        self.inp = nn.Conv3d(3, width, 3, padding=1)
        self.out = nn.Conv3d(width, 3, 3, padding=1)

    def forward(self, x: Tensor, sigma: Tensor, cond: Tensor) -> Tensor:
        e = sum(t(cond[:, i]) for i, t in enumerate(self.emb)) + self.sig(sigma[:, None].float())
        scale, shift = e[:, :, None, None, None].chunk(2, dim=1)
        return self.out(torch.nn.functional.silu(self.inp(x) * (1 + scale) + shift))


class TinyModel(BaseVideoModel):
    """The VideoModel protocol around TinyNet; latents are the pixels (3, 8, 16, 16). The rest of the
    protocol (device placement, policy export: ``module.safetensors``) is BaseVideoModel's defaults."""

    latent_shape = (3, 8, 16, 16)

    def __init__(self, seed: int = 0) -> None:
        torch.manual_seed(seed)
        self.net = TinyNet()

    def encode_prompts(self, prompts: list[str]) -> Tensor:
        return torch.tensor([parse(p) for p in prompts], dtype=torch.long)

    def null_cond(self, n: int) -> Tensor:
        return torch.tensor([[4, 3, 4]] * n, dtype=torch.long)

    def velocity(self, x: Tensor, sigma: Tensor, cond: Tensor) -> Tensor:
        return self.net(x, sigma, cond)

    def decode(self, x: Tensor) -> Tensor:
        return x.clamp(-1, 1)

    def trainable_module(self) -> nn.Module:
        return self.net


_CHANNELS = {0: (0,), 1: (1,), 2: (2,), 3: (0, 1)}  # red, green, blue, yellow


class TinyReward(Reward):
    """vq: dark background; mq: small frame-to-frame change; ta: the prompted colour's channels."""

    dimensions = ("vq", "mq", "ta")

    def __call__(self, videos: Tensor, prompts: list[str]) -> dict[str, Tensor]:
        v = videos.float()
        ta = torch.stack([v[j, list(_CHANNELS[parse(p)[0]])].mean() for j, p in enumerate(prompts)])
        return {
            "vq": -(v + 1).abs().flatten(1).mean(1),
            "mq": -(v[:, :, 1:] - v[:, :, :-1]).abs().flatten(1).mean(1),
            "ta": ta,
        }
