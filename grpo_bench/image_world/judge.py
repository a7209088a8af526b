"""The compositional task's learned judge (``image_world_judge``): a small CNN that regresses the exact checker's
VQ, MQ and TA from an image and its prompt, the training reward of the image world's judge track.

Trained like the video world's judge (grpo_bench/pretrain/judge.py; here judge_pretrain.py): rendered scenes,
clean and damaged, base-model samples from the ODE and the SDE kernels (also from copies with noise on their
weights), prompts swapped for another, each scored by the checker; its raw heads are z-normalised over held-out
base-model samples. It sees only what its data showed it, so a policy can find images it over-scores: it is
hackable by construction, and the judge track measures how far each method drifts from what the checker (still
the evaluation oracle) says.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from grpo_bench.errors import UserError
from grpo_bench.image_world.grammar import PART_SIZES, parse
from grpo_bench.image_world.model import ASSETS, load_weights, save_weights
from grpo_bench.image_world.net import ResBlock2d
from grpo_bench.image_world.render import SIZE
from grpo_bench.rewards import register
from grpo_bench.rewards.base import Reward
from grpo_bench.rewards.compute import CountedForward
from grpo_bench.world.unet_parts import NetConfig

NAME = "image_world_judge"
DEFAULT_JUDGE = ASSETS / "image_world_judge.safetensors"
FORMAT = "grpo-bench image world judge v1"
REBUILD = "python -m grpo_bench.image_world.judge_pretrain"
DIMENSIONS = ("vq", "mq", "ta")


@dataclass
class ImageJudgeConfig(NetConfig):
    channels: tuple[int, int, int] = (16, 32, 64)
    emb_dim: int = 64


class ImageJudge(nn.Module):
    """raw scores Tensor[B, 3] = judge(images Tensor[B, 3, 32, 32], cond LongTensor[B, 6]); ``mean``/``std``
    buffers z-normalise them (set after training)."""

    def __init__(self, config: ImageJudgeConfig | None = None) -> None:
        super().__init__()
        self.config = cfg = config or ImageJudgeConfig()
        c0, c1, c2 = cfg.channels
        e = cfg.emb_dim
        self.part_emb = nn.ModuleList([nn.Embedding(n + 1, e) for n in PART_SIZES])
        self.stem = nn.Conv2d(3, c0, 3, padding=1)
        self.block0 = ResBlock2d(c0, c0, e, 8)
        self.down1 = nn.Conv2d(c0, c1, 3, stride=2, padding=1)
        self.block1 = ResBlock2d(c1, c1, e, 8)
        self.down2 = nn.Conv2d(c1, c2, 3, stride=2, padding=1)
        self.block2 = ResBlock2d(c2, c2, e, 8)
        self.head = nn.Sequential(nn.Linear(c2 + e, 128), nn.SiLU(), nn.Linear(128, len(DIMENSIONS)))
        self.register_buffer("mean", torch.zeros(len(DIMENSIONS)))
        self.register_buffer("std", torch.ones(len(DIMENSIONS)))

    def raw(self, images: Tensor, cond: Tensor) -> Tensor:
        emb = sum(table(cond[:, i]) for i, table in enumerate(self.part_emb))
        h = self.block0(self.stem(images), emb)
        h = self.block1(self.down1(h), emb)
        h = self.block2(self.down2(h), emb)
        return self.head(torch.cat([h.mean(dim=(2, 3)), emb], dim=1))

    def forward(self, images: Tensor, cond: Tensor) -> Tensor:
        return (self.raw(images, cond) - self.mean) / self.std


def encode(prompts: list[str]) -> Tensor:
    return torch.tensor([parse(p).cond() for p in prompts], dtype=torch.long).reshape(-1, len(PART_SIZES))


def save_judge(net: ImageJudge, path: Path, extra: dict | None = None) -> None:
    save_weights(net, path, extra, fmt=FORMAT)


def load_judge(path: Path | None = None) -> ImageJudge:
    """The judge of a weights file (untrusted: one line naming it and the rebuild command otherwise)."""
    path = Path(path) if path is not None else DEFAULT_JUDGE
    net = load_weights(path, fmt=FORMAT, build=lambda config: ImageJudge(ImageJudgeConfig.from_dict(config)),
                       rebuild=REBUILD, what="image-world judge weights")
    return net.eval()


class ImageWorldJudgeReward(Reward):
    """{"vq", "mq", "ta"}: the judge's z-normalised scores (Tensor[B] each) of 32x32 stills and their prompts."""

    dimensions = DIMENSIONS
    modality = "image"
    example_prompts = ("a red circle", "three blue squares")  # prompts of its grammar
    media_size = SIZE
    embedded = True
    label = "judge"

    def __init__(self, net: ImageJudge, device: str | torch.device = "cpu") -> None:
        self.net, self.device = net, device

    @torch.no_grad()
    def __call__(self, images: Tensor, prompts: list[str]) -> dict[str, Tensor]:
        cond = encode(prompts)
        if images.ndim != 5 or tuple(images.shape[1:]) != (3, 1, SIZE, SIZE):
            raise UserError(f"reward {NAME}: expected images Tensor[B, 3, 1, {SIZE}, {SIZE}], got shape "
                            f"{tuple(images.shape)}")
        scores = self.net(images[:, :, 0].detach().float().cpu(), cond)
        return {k: scores[:, i].to(images.device) for i, k in enumerate(DIMENSIONS)}


def _judge_example() -> tuple[ImageJudge, tuple[Tensor, Tensor]]:
    """The shipped judge, one still and a condition: what its FLOPs are counted on."""
    return load_judge(), (torch.zeros(1, 3, SIZE, SIZE), torch.zeros(1, len(PART_SIZES), dtype=torch.long))


@register(NAME, compute=CountedForward(_judge_example))  # the shipped weights: no reward_path
def image_world_judge(path: str | Path | None = None, device: str | None = None, **kw: object) -> ImageWorldJudgeReward:
    """The shipped judge (or the weights at ``path``); it judges ``prompts: image_world``."""
    return ImageWorldJudgeReward(load_judge(Path(path) if path is not None else None), device or "cpu")


image_world_judge.embedded = True
image_world_judge.shipped_weights = DEFAULT_JUDGE  # its digest is part of every cell id trained on it
