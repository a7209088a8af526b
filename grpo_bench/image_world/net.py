"""The image world's base network: a small 2D conditional U-Net predicting the flow velocity of 32x32 stills.

The video world's U-Net (grpo_bench/world/model.py) in two dimensions, with the image world's six prompt parts
(count, colour, shape, relation, second colour, second shape): each part has its own embedding table with one
extra row, the null token of classifier-free guidance, and the part embeddings are summed with a sigma embedding
and modulate every residual block (FiLM). A held-out combination is a new sum of parts the network has seen.
Levels 32x32 (c0) -> 16x16 (c1) -> 8x8 (c2, the middle, where counts and positions are decided).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from grpo_bench.image_world.grammar import PART_SIZES
from grpo_bench.world.model import sigma_embedding

NULL_INDEX = PART_SIZES


@dataclass
class ImageUNetConfig:
    """Architecture (stored in the weights file's metadata)."""

    channels: tuple[int, int, int] = (32, 64, 128)
    emb_dim: int = 128
    mid_blocks: int = 2
    groups: int = 8

    def to_dict(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, d: dict) -> ImageUNetConfig:
        d = dict(d)
        if "channels" in d:
            d["channels"] = tuple(int(c) for c in d["channels"])
        return cls(**d)


class ResBlock2d(nn.Module):
    """GroupNorm-SiLU-Conv2d twice, FiLM from the conditioning vector, residual connection."""

    def __init__(self, c_in: int, c_out: int, emb_dim: int, groups: int) -> None:
        super().__init__()
        self.norm1 = nn.GroupNorm(groups, c_in)
        self.conv1 = nn.Conv2d(c_in, c_out, 3, padding=1)
        self.film = nn.Linear(emb_dim, 2 * c_out)
        self.norm2 = nn.GroupNorm(groups, c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1)
        self.skip = nn.Conv2d(c_in, c_out, 1) if c_in != c_out else nn.Identity()
        nn.init.zeros_(self.conv2.weight)  # start as identity: stable early training
        nn.init.zeros_(self.conv2.bias)

    def forward(self, x: Tensor, emb: Tensor) -> Tensor:
        h = self.conv1(F.silu(self.norm1(x)))
        scale, shift = self.film(emb)[:, :, None, None].chunk(2, dim=1)
        h = self.conv2(F.silu(self.norm2(h) * (1 + scale) + shift))
        return self.skip(x) + h


class ImageUNet(nn.Module):
    """v = net(x, sigma, cond) for x: Tensor[B, 3, H, W] (H, W divisible by 4), cond: LongTensor[B, 6]."""

    _no_split_modules = ["ResBlock2d"]

    def __init__(self, config: ImageUNetConfig | None = None) -> None:
        super().__init__()
        self.config = cfg = config or ImageUNetConfig()
        c0, c1, c2 = cfg.channels
        e, g = cfg.emb_dim, cfg.groups
        self.part_emb = nn.ModuleList([nn.Embedding(n + 1, e) for n in PART_SIZES])
        self.sigma_mlp = nn.Sequential(nn.Linear(e, e), nn.SiLU(), nn.Linear(e, e))
        self.emb_out = nn.Sequential(nn.SiLU(), nn.Linear(e, e))
        self.stem = nn.Conv2d(3, c0, 3, padding=1)
        self.enc0 = ResBlock2d(c0, c0, e, g)
        self.down1 = nn.Conv2d(c0, c1, 3, stride=2, padding=1)
        self.enc1 = ResBlock2d(c1, c1, e, g)
        self.down2 = nn.Conv2d(c1, c2, 3, stride=2, padding=1)
        self.mid = nn.ModuleList([ResBlock2d(c2, c2, e, g) for _ in range(cfg.mid_blocks)])
        self.up2 = nn.ConvTranspose2d(c2, c1, 2, stride=2)
        self.dec1 = ResBlock2d(2 * c1, c1, e, g)
        self.up1 = nn.ConvTranspose2d(c1, c0, 2, stride=2)
        self.dec0 = ResBlock2d(2 * c0, c0, e, g)
        self.head = nn.Sequential(nn.GroupNorm(g, c0), nn.SiLU(), nn.Conv2d(c0, 3, 3, padding=1))
        nn.init.zeros_(self.head[-1].weight)
        nn.init.zeros_(self.head[-1].bias)

    def forward(self, x: Tensor, sigma: Tensor, cond: Tensor) -> Tensor:
        parts = sum(table(cond[:, i]) for i, table in enumerate(self.part_emb))
        emb = self.emb_out(parts + self.sigma_mlp(sigma_embedding(sigma, self.config.emb_dim)))
        h0 = self.enc0(self.stem(x), emb)
        h1 = self.enc1(self.down1(h0), emb)
        h = self.down2(h1)
        for block in self.mid:
            h = block(h, emb)
        h = self.dec1(torch.cat([self.up2(h), h1], dim=1), emb)
        h = self.dec0(torch.cat([self.up1(h), h0], dim=1), emb)
        return self.head(h)
