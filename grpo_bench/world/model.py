"""The world's base video model: a small spatio-temporal 3D-conv U-Net predicting the flow velocity.

Input x: Tensor[B, 3, F, H, W] (pixels are the latents), sigma: Tensor[B] in [0, 1], and
cond: LongTensor[B, 3] of (colour, shape, motion) indices. Each part has its own embedding
table with one extra row, the learned null token used for classifier-free guidance; the three
part embeddings are summed with a sigma embedding and modulate every residual block (FiLM).
Because the parts are embedded separately, a held-out combination (e.g. "a blue triangle
moving up") is a new sum of parts the network has seen, which is what makes it compositional.

Levels (F x H x W at 16x16): 8x16x16 (c0=16) -> 8x8x8 (c1=32) -> 4x4x4 (c2=96, the middle), and back
up with skip connections. Time is only pooled at the middle level so early layers see all
frames and motion stays sharp. Convolutions are full 3x3x3. Most parameters sit in the cheap
middle level; the full-resolution level is kept narrow because it dominates the compute
(about 1.4M parameters, ~115 training videos/s on 2 CPU cores at batch 64).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from grpo_bench.world.vocab import COLORS, MOTIONS, SHAPES

# Vocabulary sizes per part; index == size is that part's null (unconditional) token.
PART_SIZES = (len(COLORS), len(SHAPES), len(MOTIONS))
NULL_INDEX = PART_SIZES


@dataclass
class WorldUNetConfig:
    """Architecture of the world U-Net (stored in the weights file's metadata)."""

    channels: tuple[int, int, int] = (16, 32, 96)
    """Feature channels at the three levels (full res, half spatial, half spatio-temporal)."""
    emb_dim: int = 128
    """Width of the conditioning vector (prompt parts + sigma) fed to every block."""
    mid_blocks: int = 2
    """Residual blocks at the coarsest level (where direction and shape are decided)."""
    groups: int = 8
    """GroupNorm groups (must divide every channel count)."""

    def to_dict(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, d: dict) -> WorldUNetConfig:
        d = dict(d)
        if "channels" in d:
            d["channels"] = tuple(int(c) for c in d["channels"])
        return cls(**d)


def sigma_embedding(sigma: Tensor, dim: int) -> Tensor:
    """Sinusoidal features of 1000*sigma: Tensor[B] -> Tensor[B, dim] (as diffusion timesteps)."""
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, device=sigma.device, dtype=torch.float32) / half)
    args = 1000.0 * sigma.float()[:, None] * freqs[None]
    return torch.cat([torch.sin(args), torch.cos(args)], dim=1)


class ResBlock(nn.Module):
    """GroupNorm-SiLU-Conv3d twice, FiLM from the conditioning vector, residual connection."""

    def __init__(self, c_in: int, c_out: int, emb_dim: int, groups: int) -> None:
        super().__init__()
        self.norm1 = nn.GroupNorm(groups, c_in)
        self.conv1 = nn.Conv3d(c_in, c_out, 3, padding=1)
        self.film = nn.Linear(emb_dim, 2 * c_out)
        self.norm2 = nn.GroupNorm(groups, c_out)
        self.conv2 = nn.Conv3d(c_out, c_out, 3, padding=1)
        self.skip = nn.Conv3d(c_in, c_out, 1) if c_in != c_out else nn.Identity()
        nn.init.zeros_(self.conv2.weight)  # start as identity: stable early training
        nn.init.zeros_(self.conv2.bias)

    def forward(self, x: Tensor, emb: Tensor) -> Tensor:
        h = self.conv1(F.silu(self.norm1(x)))
        scale, shift = self.film(emb)[:, :, None, None, None].chunk(2, dim=1)  # [B, C, 1, 1, 1] each
        h = self.norm2(h) * (1 + scale) + shift
        h = self.conv2(F.silu(h))
        return self.skip(x) + h


class WorldUNet(nn.Module):
    """v = net(x, sigma, cond) for x: Tensor[B, 3, F, H, W] with F divisible by 2 and H, W by 4."""

    _no_split_modules = ["ResBlock"]  # diffusers' convention: the units FSDP2 shards one by one (sharding.py)

    def __init__(self, config: WorldUNetConfig | None = None) -> None:
        super().__init__()
        self.config = cfg = config or WorldUNetConfig()
        c0, c1, c2 = cfg.channels
        e = cfg.emb_dim
        # One table per part, +1 row for the null token.
        self.part_emb = nn.ModuleList([nn.Embedding(n + 1, e) for n in PART_SIZES])
        self.sigma_mlp = nn.Sequential(nn.Linear(e, e), nn.SiLU(), nn.Linear(e, e))
        self.emb_out = nn.Sequential(nn.SiLU(), nn.Linear(e, e))

        self.stem = nn.Conv3d(3, c0, 3, padding=1)
        self.enc0 = ResBlock(c0, c0, e, cfg.groups)
        self.down1 = nn.Conv3d(c0, c1, 3, stride=(1, 2, 2), padding=1)  # H/2, W/2
        self.enc1 = ResBlock(c1, c1, e, cfg.groups)
        self.down2 = nn.Conv3d(c1, c2, 3, stride=2, padding=1)  # F/2, H/4, W/4
        self.mid = nn.ModuleList([ResBlock(c2, c2, e, cfg.groups) for _ in range(cfg.mid_blocks)])
        self.up2 = nn.ConvTranspose3d(c2, c1, 2, stride=2)
        self.dec1 = ResBlock(2 * c1, c1, e, cfg.groups)
        self.up1 = nn.ConvTranspose3d(c1, c0, (1, 2, 2), stride=(1, 2, 2))
        self.dec0 = ResBlock(2 * c0, c0, e, cfg.groups)
        self.head = nn.Sequential(nn.GroupNorm(cfg.groups, c0), nn.SiLU(), nn.Conv3d(c0, 3, 3, padding=1))
        nn.init.zeros_(self.head[-1].weight)
        nn.init.zeros_(self.head[-1].bias)

    def embed(self, sigma: Tensor, cond: Tensor) -> Tensor:
        """Conditioning vector Tensor[B, emb_dim] from sigma: Tensor[B] and cond: LongTensor[B, 3]."""
        parts = sum(table(cond[:, i]) for i, table in enumerate(self.part_emb))
        s = self.sigma_mlp(sigma_embedding(sigma, self.config.emb_dim))
        return self.emb_out(parts + s)

    def forward(self, x: Tensor, sigma: Tensor, cond: Tensor) -> Tensor:
        emb = self.embed(sigma, cond)
        h0 = self.enc0(self.stem(x), emb)  # [B, c0, F, H, W]
        h1 = self.enc1(self.down1(h0), emb)  # [B, c1, F, H/2, W/2]
        h = self.down2(h1)  # [B, c2, F/2, H/4, W/4]
        for block in self.mid:
            h = block(h, emb)
        h = self.dec1(torch.cat([self.up2(h), h1], dim=1), emb)
        h = self.dec0(torch.cat([self.up1(h), h0], dim=1), emb)
        return self.head(h)


def param_count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())
