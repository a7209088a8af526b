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

from dataclasses import dataclass

from torch import Tensor, nn

from grpo_bench.world.unet_parts import FiLMResBlock, NetConfig, UNetBody, sigma_embedding
from grpo_bench.world.vocab import COLORS, MOTIONS, SHAPES

# Vocabulary sizes per part; index == size is that part's null (unconditional) token.
PART_SIZES = (len(COLORS), len(SHAPES), len(MOTIONS))
NULL_INDEX = PART_SIZES


@dataclass
class WorldUNetConfig(NetConfig):
    """Architecture of the world U-Net (stored in the weights file's metadata)."""

    channels: tuple[int, int, int] = (16, 32, 96)
    """Feature channels at the three levels (full res, half spatial, half spatio-temporal)."""
    emb_dim: int = 128
    """Width of the conditioning vector (prompt parts + sigma) fed to every block."""
    mid_blocks: int = 2
    """Residual blocks at the coarsest level (where direction and shape are decided)."""
    groups: int = 8
    """GroupNorm groups (must divide every channel count)."""


class ResBlock(FiLMResBlock):
    """GroupNorm-SiLU-Conv3d twice, FiLM from the conditioning vector, residual connection."""

    dims = 3


class WorldUNet(UNetBody):
    """v = net(x, sigma, cond) for x: Tensor[B, 3, F, H, W] with F divisible by 2 and H, W by 4."""

    _no_split_modules = ["ResBlock"]  # diffusers' convention: the units FSDP2 shards one by one (sharding.py)

    def __init__(self, config: WorldUNetConfig | None = None) -> None:
        super().__init__()
        self.config = cfg = config or WorldUNetConfig()
        c0 = cfg.channels[0]
        e = cfg.emb_dim
        # One table per part, +1 row for the null token.
        self.part_emb = nn.ModuleList([nn.Embedding(n + 1, e) for n in PART_SIZES])
        self.sigma_mlp = nn.Sequential(nn.Linear(e, e), nn.SiLU(), nn.Linear(e, e))
        self.emb_out = nn.Sequential(nn.SiLU(), nn.Linear(e, e))

        self.stem = nn.Conv3d(3, c0, 3, padding=1)
        # level 1 halves H and W only (time is pooled at the middle level); the middle halves F, H and W
        self.add_body(ResBlock, cfg.channels, e, cfg.groups, cfg.mid_blocks, level1=(1, 2, 2))
        self.head = nn.Sequential(nn.GroupNorm(cfg.groups, c0), nn.SiLU(), nn.Conv3d(c0, 3, 3, padding=1))
        nn.init.zeros_(self.head[-1].weight)
        nn.init.zeros_(self.head[-1].bias)

    def embed(self, sigma: Tensor, cond: Tensor) -> Tensor:
        """Conditioning vector Tensor[B, emb_dim] from sigma: Tensor[B] and cond: LongTensor[B, 3]."""
        parts = sum(table(cond[:, i]) for i, table in enumerate(self.part_emb))
        s = self.sigma_mlp(sigma_embedding(sigma, self.config.emb_dim))
        return self.emb_out(parts + s)

    def forward(self, x: Tensor, sigma: Tensor, cond: Tensor) -> Tensor:
        # levels [B, c0, F, H, W] -> [B, c1, F, H/2, W/2] -> [B, c2, F/2, H/4, W/4] and back
        return self.head(self.body(self.stem(x), self.embed(sigma, cond)))


def param_count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())
