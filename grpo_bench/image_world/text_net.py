"""The text task's base network: a small 2D U-Net predicting the flow velocity of 32x128 grey stills of a word.

Conditioning is spatial, because where a letter goes is fixed by the layout (text_render.py): every column gets
the embedding of the letter whose cell it falls in (before jitter) plus the embedding of its offset inside the
cell, so a column knows which part of which glyph to draw; a held-out word is a new arrangement of (cell, letter)
pairs the network has seen. The map is concatenated to the input; a 2x2 stride-2 stem and head keep the
levels at 16x64 (c0) -> 8x32 (c1) -> 4x16 (c2), cheap enough to pretrain on one core. Sigma and the word's
length modulate every residual block (FiLM, net.py ``ResBlock2d``). Null index NULL (every slot) is the
unconditional input of classifier-free guidance.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from grpo_bench.image_world.net import ResBlock2d
from grpo_bench.image_world.text_render import CELL, WIDTH
from grpo_bench.image_world.words import MAX_LETTERS, PAD
from grpo_bench.world.unet_parts import NetConfig, UNetBody, sigma_embedding

NULL = PAD + 1
"""Letter index of the unconditional input (every slot NULL)."""


@dataclass
class TextUNetConfig(NetConfig):
    """Architecture (stored in the weights file's metadata)."""

    channels: tuple[int, int, int] = (24, 48, 96)
    emb_dim: int = 96
    map_dim: int = 16
    mid_blocks: int = 1
    groups: int = 8


def column_letters(cond: Tensor) -> tuple[Tensor, Tensor]:
    """(letter index [B, WIDTH], offset in its cell [B, WIDTH]) of every column for cond LongTensor[B, MAX_LETTERS]:
    PAD outside the word, NULL everywhere for an unconditional row."""
    length = (cond < PAD).sum(dim=1)
    start = (WIDTH - CELL * length) // 2
    col = torch.arange(WIDTH, device=cond.device)[None]
    rel = col - start[:, None]
    slot = torch.div(rel, CELL, rounding_mode="floor")
    inside = (rel >= 0) & (slot < length[:, None])
    letter = torch.gather(cond, 1, slot.clamp(0, MAX_LETTERS - 1))
    letter = torch.where(inside, letter, torch.full_like(letter, PAD))
    letter = torch.where((cond[:, :1] == NULL), torch.full_like(letter, NULL), letter)
    return letter, rel.remainder(CELL)


class TextUNet(UNetBody):
    """v = net(x, sigma, cond) for x: Tensor[B, 1, 32, 128], sigma: Tensor[B], cond: LongTensor[B, MAX_LETTERS]."""

    _no_split_modules = ["ResBlock2d"]

    def __init__(self, config: TextUNetConfig | None = None) -> None:
        super().__init__()
        self.config = cfg = config or TextUNetConfig()
        c0 = cfg.channels[0]
        e, g, m = cfg.emb_dim, cfg.groups, cfg.map_dim
        self.letter_emb = nn.Embedding(NULL + 1, m)
        self.offset_emb = nn.Embedding(CELL, m)
        self.length_emb = nn.Embedding(MAX_LETTERS + 2, e)  # 0..MAX_LETTERS, then the null row's
        self.sigma_mlp = nn.Sequential(nn.Linear(e, e), nn.SiLU(), nn.Linear(e, e))
        self.emb_out = nn.Sequential(nn.SiLU(), nn.Linear(e, e))
        self.stem = nn.Conv2d(1 + m, c0, 2, stride=2)
        self.add_body(ResBlock2d, cfg.channels, e, g, cfg.mid_blocks)
        self.head = nn.Sequential(nn.GroupNorm(g, c0), nn.SiLU(), nn.ConvTranspose2d(c0, 1, 2, stride=2))
        nn.init.zeros_(self.head[-1].weight)
        nn.init.zeros_(self.head[-1].bias)

    def forward(self, x: Tensor, sigma: Tensor, cond: Tensor) -> Tensor:
        letter, offset = column_letters(cond)
        columns = self.letter_emb(letter) + self.offset_emb(offset)  # [B, WIDTH, m]
        plane = columns.transpose(1, 2)[:, :, None].expand(-1, -1, x.shape[2], -1).to(x.dtype)
        length = torch.where(cond[:, 0] == NULL, MAX_LETTERS + 1, (cond < PAD).sum(dim=1))
        emb = self.emb_out(self.length_emb(length) + self.sigma_mlp(sigma_embedding(sigma, self.config.emb_dim)))
        return self.head(self.body(self.stem(torch.cat([x, plane], dim=1)), emb))
