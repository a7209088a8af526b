"""The parts every embedded world's conditional U-Net is built from (the video world's 3D net, world/model.py; the
image world's 2D nets and judge, image_world/): the sigma embedding, the FiLM residual block in any number of
dimensions, the architecture config's dict round trip, and the three-level U-Net body (encoder, middle, decoder
with skips) between a net's own stem and head.

The parts register their submodules under the names the shipped weights were saved with (``enc0``, ``down1``,
``mid.0`` ..., ``norm1``, ``conv1``, ``film`` ...) and in the order the nets always created them, so a network
built from them loads every shipped file and starts from the same initial weights under one seed.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

CONV = {2: nn.Conv2d, 3: nn.Conv3d}
CONV_TRANSPOSE = {2: nn.ConvTranspose2d, 3: nn.ConvTranspose3d}


def sigma_embedding(sigma: Tensor, dim: int) -> Tensor:
    """Sinusoidal features of 1000*sigma: Tensor[B] -> Tensor[B, dim] (as diffusion timesteps)."""
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, device=sigma.device, dtype=torch.float32) / half)
    args = 1000.0 * sigma.float()[:, None] * freqs[None]
    return torch.cat([torch.sin(args), torch.cos(args)], dim=1)


class NetConfig:
    """A net's architecture dataclass as the plain dict stored in a weights file's metadata, and back (tuples
    stored as lists; ``channels`` read back as a tuple of ints)."""

    def to_dict(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls, d: dict) -> Any:
        d = dict(d)
        if "channels" in d:
            d["channels"] = tuple(int(c) for c in d["channels"])
        return cls(**d)


class FiLMResBlock(nn.Module):
    """GroupNorm-SiLU-Conv twice, FiLM from the conditioning vector, residual connection; ``dims`` (2 or 3) is
    the convolutions' (a subclass fixes it)."""

    dims = 3

    def __init__(self, c_in: int, c_out: int, emb_dim: int, groups: int) -> None:
        super().__init__()
        conv = CONV[self.dims]
        self.norm1 = nn.GroupNorm(groups, c_in)
        self.conv1 = conv(c_in, c_out, 3, padding=1)
        self.film = nn.Linear(emb_dim, 2 * c_out)
        self.norm2 = nn.GroupNorm(groups, c_out)
        self.conv2 = conv(c_out, c_out, 3, padding=1)
        self.skip = conv(c_in, c_out, 1) if c_in != c_out else nn.Identity()
        nn.init.zeros_(self.conv2.weight)  # start as identity: stable early training
        nn.init.zeros_(self.conv2.bias)

    def forward(self, x: Tensor, emb: Tensor) -> Tensor:
        h = self.conv1(F.silu(self.norm1(x)))
        scale, shift = self.film(emb)[(...,) + (None,) * self.dims].chunk(2, dim=1)  # [B, C, 1, ...] each
        h = self.norm2(h) * (1 + scale) + shift
        h = self.conv2(F.silu(h))
        return self.skip(x) + h


class UNetBody(nn.Module):
    """The three levels of the embedded worlds' U-Nets, between a net's own stem (created before
    ``add_body``) and head (after): enc0 at c0 -> down1 -> enc1 at c1 -> down2 -> ``mid_blocks`` at c2 -> up2 ->
    dec1 (skip from enc1) -> up1 -> dec0 (skip from enc0). ``down1`` / ``up1`` take ``level1`` as their stride
    and kernel (the video net keeps its frames there: (1, 2, 2)); ``down2`` / ``up2`` halve every axis."""

    def add_body(self, block: type[FiLMResBlock], channels: tuple[int, int, int], emb_dim: int, groups: int,
                 mid_blocks: int, level1: int | tuple[int, ...] = 2) -> None:
        c0, c1, c2 = channels
        conv, transpose = CONV[block.dims], CONV_TRANSPOSE[block.dims]
        self.enc0 = block(c0, c0, emb_dim, groups)
        self.down1 = conv(c0, c1, 3, stride=level1, padding=1)
        self.enc1 = block(c1, c1, emb_dim, groups)
        self.down2 = conv(c1, c2, 3, stride=2, padding=1)
        self.mid = nn.ModuleList([block(c2, c2, emb_dim, groups) for _ in range(mid_blocks)])
        self.up2 = transpose(c2, c1, 2, stride=2)
        self.dec1 = block(2 * c1, c1, emb_dim, groups)
        self.up1 = transpose(c1, c0, level1, stride=level1)
        self.dec0 = block(2 * c0, c0, emb_dim, groups)

    def body(self, h0: Tensor, emb: Tensor) -> Tensor:
        """The head's input for the stem's output ``h0`` under the conditioning vector ``emb``."""
        h0 = self.enc0(h0, emb)
        h1 = self.enc1(self.down1(h0), emb)
        h = self.down2(h1)
        for block in self.mid:
            h = block(h, emb)
        h = self.dec1(torch.cat([self.up2(h), h1], dim=1), emb)
        return self.dec0(torch.cat([self.up1(h), h0], dim=1), emb)
