"""The image world's base network: a small 2D conditional U-Net predicting the flow velocity of 32x32 stills.

The video world's U-Net (grpo_bench/world/model.py) in two dimensions, with the image world's six prompt parts
(count, colour, shape, relation, second colour, second shape): each part has its own embedding table with one
extra row, the null token of classifier-free guidance, and the part embeddings are summed with a sigma embedding
and modulate every residual block (FiLM). A held-out combination is a new sum of parts the network has seen.
Levels 32x32 (c0) -> 16x16 (c1) -> 8x8 (c2, the middle, where counts and positions are decided).

``patch`` p > 1 folds each p x p block of pixels into channels before the stem (``pixel_unshuffle``; 3p^2 channels)
and unfolds the head's output (``pixel_shuffle``), as latent transformers patchify: the levels then run at
32/p, 16/p, 8/p and a forward costs about p^2 less (the net still maps a 32x32 image to its 32x32 velocity, so the
sampler, the checker and the judge see the same pixels). The fold is a fixed permutation, not a learned encoder.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.nn.functional as F
from torch import Tensor, nn

from grpo_bench.image_world.grammar import PART_SIZES
from grpo_bench.world.unet_parts import FiLMResBlock, NetConfig, UNetBody, sigma_embedding

NULL_INDEX = PART_SIZES


@dataclass
class ImageUNetConfig(NetConfig):
    """Architecture (stored in the weights file's metadata)."""

    channels: tuple[int, int, int] = (32, 64, 128)
    emb_dim: int = 128
    mid_blocks: int = 2
    groups: int = 8
    patch: int = 1  # pixels folded into channels per side (1: none; the files before it have none)


class ResBlock2d(FiLMResBlock):
    """GroupNorm-SiLU-Conv2d twice, FiLM from the conditioning vector, residual connection (the video world's
    ResBlock in two dimensions)."""

    dims = 2


class ImageUNet(UNetBody):
    """v = net(x, sigma, cond) for x: Tensor[B, 3, H, W] (H, W divisible by 4 * patch), cond: LongTensor[B, 6]."""

    _no_split_modules = ["ResBlock2d"]

    def __init__(self, config: ImageUNetConfig | None = None) -> None:
        super().__init__()
        self.config = cfg = config or ImageUNetConfig()
        c0 = cfg.channels[0]
        e, g = cfg.emb_dim, cfg.groups
        folded = 3 * cfg.patch**2
        self.part_emb = nn.ModuleList([nn.Embedding(n + 1, e) for n in PART_SIZES])
        self.sigma_mlp = nn.Sequential(nn.Linear(e, e), nn.SiLU(), nn.Linear(e, e))
        self.emb_out = nn.Sequential(nn.SiLU(), nn.Linear(e, e))
        self.stem = nn.Conv2d(folded, c0, 3, padding=1)
        self.add_body(ResBlock2d, cfg.channels, e, g, cfg.mid_blocks)
        self.head = nn.Sequential(nn.GroupNorm(g, c0), nn.SiLU(), nn.Conv2d(c0, folded, 3, padding=1))
        nn.init.zeros_(self.head[-1].weight)
        nn.init.zeros_(self.head[-1].bias)

    def forward(self, x: Tensor, sigma: Tensor, cond: Tensor) -> Tensor:
        parts = sum(table(cond[:, i]) for i, table in enumerate(self.part_emb))
        emb = self.emb_out(parts + self.sigma_mlp(sigma_embedding(sigma, self.config.emb_dim)))
        p = self.config.patch
        h = self.stem(F.pixel_unshuffle(x, p) if p > 1 else x)
        v = self.head(self.body(h, emb))
        return F.pixel_shuffle(v, p) if p > 1 else v
