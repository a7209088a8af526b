"""The world judge: a small learned reward model, the embedded world's stand-in for VideoAlign.

A 3D-conv network reads a video Tensor[B, 3, F, H, W] in [-1, 1] and the prompt's (colour, shape,
motion) indices and predicts the oracle's VQ, MQ and TA; attention-pooling heads over pixels read
the object's absolute colour, which the normalised conv path loses. It is trained by ``grpo-bench pretrain judge``
(``grpo_bench/pretrain/judge.py``) on rendered, corrupted and base-model videos; its raw heads estimate log VQ, log MQ
and TA (see ``pretrain/judge_targets.targets``). Like VideoAlign its outputs are z-scores: the raw heads are
normalised by their mean and std over base-model samples (stored in the weights file), so 0 is a
typical base-model video and +1 one standard deviation better.

Being learned, it is hackable: gradient ascent on its inputs raises its scores far beyond anything a
real video reaches while the oracle's manifold distance grows (tests/world/test_judge.py).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from grpo_bench.errors import UserError
from grpo_bench.rewards import register
from grpo_bench.rewards.base import FILE, Reward
from grpo_bench.rewards.compute import CountedForward
from grpo_bench.world.generator import palette_rgb
from grpo_bench.world.vocab import COLORS, MOTIONS, SHAPES, parse

DIMENSIONS = ("vq", "mq", "ta")
# Auxiliary heads: the oracle's sub-scores, regressed alongside (richer supervision, same network).
PARTS = (len(COLORS), len(SHAPES), len(MOTIONS))
AUXILIARY = ("bg", "edge", "palette", "velocity", "size", "constancy", "flicker", "color", "shape", "direction",
             "presence")
ASSETS = Path(__file__).resolve().parents[1] / "assets"
DEFAULT_WEIGHTS = ASSETS / "world_judge.safetensors"
REBUILD = "grpo-bench pretrain judge"


@dataclass
class JudgeConfig:
    """Architecture of the judge (stored in the weights file's metadata)."""

    width: int = 32
    """Channels of the first level; the three strided levels use 2x, 3x and 4x."""
    cond_dim: int = 64
    """Width of the summed (colour, shape, motion) embedding that modulates every level (FiLM)."""
    size: int = 16
    """Video height/width the judge was trained on (16 or 24)."""
    frames: int = 8
    """Frames per video."""
    pool_heads: int = 8
    """Attention-pooling heads over pixels: each reads a softmax-weighted mean of the raw video and of the
    video minus the prompted colour, which keeps absolute colour (GroupNorm in the conv path removes it)."""
    frame_stats: bool = False
    """Also read how the first level's features change over frames (the std over time of their per-frame
    spatial means) and how far each attention head's per-frame centroid strays from a
    constant-velocity path. MQ among clean base-model samples is ranked by exactly these (size and colour
    constancy, path straightness), which global pooling averages away. False in judges built before it."""


class _Block(nn.Module):
    """conv3d -> GroupNorm -> FiLM(cond) -> SiLU."""

    def __init__(self, cin: int, cout: int, stride: tuple[int, int, int], cond_dim: int) -> None:
        super().__init__()
        self.conv = nn.Conv3d(cin, cout, 3, stride=stride, padding=1)
        self.norm = nn.GroupNorm(8, cout)
        self.film = nn.Linear(cond_dim, 2 * cout)
        nn.init.zeros_(self.film.weight)
        nn.init.zeros_(self.film.bias)

    def forward(self, x: Tensor, c: Tensor) -> Tensor:
        scale, shift = self.film(c)[:, :, None, None, None].chunk(2, dim=1)
        return F.silu(self.norm(self.conv(x)) * (1 + scale) + shift)


class WorldJudge(nn.Module):
    """(videos Tensor[B, 3, F, H, W], cond LongTensor[B, 3]) -> raw scores Tensor[B, 3] (vq, mq, ta).

    ``score`` applies the stored z-normalisation; ``forward`` is differentiable in the videos."""

    def __init__(self, cfg: JudgeConfig | None = None) -> None:
        super().__init__()
        self.cfg = cfg or JudgeConfig()
        w, cd = self.cfg.width, self.cfg.cond_dim
        self.embed = nn.ModuleList([nn.Embedding(n, cd) for n in (len(COLORS), len(SHAPES), len(MOTIONS))])
        # 8x16x16 -> 8x8x8 -> 4x4x4 -> 2x2x2 (at 16x16); motion needs early layers to see time.
        self.blocks = nn.ModuleList([
            _Block(11, w, (1, 1, 1), cd),
            _Block(w, 2 * w, (1, 2, 2), cd),
            _Block(2 * w, 3 * w, (2, 2, 2), cd),
            _Block(3 * w, 4 * w, (2, 2, 2), cd),
        ])
        # Per-pixel attention logits from the first level's features (where the object is, per head).
        self.attend = nn.Conv3d(w, self.cfg.pool_heads, 1)
        self.trunk = nn.Sequential(nn.Linear(2 * 4 * w + cd + 6 * self.cfg.pool_heads + self.temporal_dim, 128),
                                   nn.SiLU())
        self.head = nn.Linear(128, len(DIMENSIONS) + len(AUXILIARY))
        # What the video shows, whatever the prompt: colour, shape and direction logits. TA reads the
        # log-probabilities of the prompted words, which is easier to learn than matching through FiLM alone.
        self.classes = nn.Linear(128, sum(PARTS))
        self.agree = nn.Sequential(nn.Linear(len(PARTS), 16), nn.SiLU(), nn.Linear(16, 1))
        # z-normalisation over base-model samples: score = (raw - mean) / std.
        self.register_buffer("mean", torch.zeros(len(DIMENSIONS)))
        self.register_buffer("std", torch.ones(len(DIMENSIONS)))

    @property
    def temporal_dim(self) -> int:
        """Width of the frame-statistics features (0 without ``frame_stats``)."""
        return self.cfg.width + self.cfg.pool_heads if self.cfg.frame_stats else 0

    def condition(self, prompts: list[str]) -> Tensor:
        """LongTensor[B, 3] of (colour, shape, motion) indices (UserError on words outside the vocabulary)."""
        return torch.tensor([parse(p) for p in prompts], dtype=torch.long).reshape(-1, 3)

    def forward(self, videos: Tensor, cond: Tensor, auxiliary: bool = False) -> Tensor:
        """Raw heads Tensor[B, 3] (vq, mq, ta); with ``auxiliary`` Tensor[B, 3 + len(AUXILIARY) + 11]: the
        sub-score heads and the colour/shape/direction logits follow."""
        cond = cond.to(videos.device)
        c = sum(emb(cond[:, i]) for i, emb in enumerate(self.embed))  # [B, cond_dim]
        x = self._features(videos.float(), cond)  # [B, 11, F, H, W]
        h = first = self.blocks[0](x, c)  # [B, w, F, H, W]
        logits_px = self.attend(h)  # [B, heads, F, H, W]
        attention = logits_px.flatten(2).softmax(-1)  # [B, heads, F*H*W]
        pixels = torch.cat([x[:, :3], x[:, -3:]], 1).flatten(2)  # [B, 6, F*H*W] video, video - prompted colour
        read = torch.einsum("bkn,bcn->bkc", attention, pixels).flatten(1)  # [B, heads * 6]
        for block in self.blocks[1:]:
            h = block(h, c)
        parts = [h.mean((2, 3, 4)), h.amax((2, 3, 4)), c, read]
        if self.cfg.frame_stats:
            parts.append(self._temporal(first, logits_px))
        pooled = torch.cat(parts, dim=1)
        hidden = self.trunk(pooled)
        out = self.head(hidden)
        logits = self.classes(hidden)
        agree = torch.stack([
            part.log_softmax(1).gather(1, cond[:, i:i + 1]).squeeze(1)
            for i, part in enumerate(logits.split(PARTS, dim=1))
        ], 1)  # [B, 3] log p(prompted colour), log p(prompted shape), log p(prompted direction)
        ta = out[:, 2:3] + self.agree(agree)
        out = torch.cat([out[:, :2], ta, out[:, 3:]], 1)
        return torch.cat([out, logits], 1) if auxiliary else out[:, : len(DIMENSIONS)]

    @staticmethod
    def _temporal(h: Tensor, logits: Tensor) -> Tensor:
        """Tensor[B, w + heads]: the std over frames of the per-frame spatial means of h [B, w, F, H, W]
        (the object's size and colour constancy), and the RMS deviation of each head's per-frame attention
        centroid (softmax of logits [B, heads, F, H, W] over pixels) from its least-squares constant-velocity
        path."""
        per_frame = h.mean((3, 4))  # [B, w, F]
        b, k, f, hh, ww = logits.shape
        weights = logits.flatten(3).softmax(-1).reshape(b, k, f, hh, ww)
        ys = torch.linspace(-1, 1, hh, device=h.device, dtype=h.dtype)
        xs = torch.linspace(-1, 1, ww, device=h.device, dtype=h.dtype)
        pos = torch.stack([(weights.sum(3) * xs).sum(-1), (weights.sum(4) * ys).sum(-1)], -1)  # [B, k, F, 2]
        t = torch.arange(f, device=h.device, dtype=h.dtype)
        tc = (t - t.mean())[None, None, :, None]
        slope = (tc * pos).sum(2, keepdim=True) / (tc**2).sum()
        resid = pos - pos.mean(2, keepdim=True) - slope * tc
        path = (resid**2).sum(-1).mean(-1).add(1e-8).sqrt()  # [B, k]
        return torch.cat([per_frame.std(2), path], 1)

    @staticmethod
    def _features(x: Tensor, cond: Tensor) -> Tensor:
        """Input Tensor[B, 11, F, H, W]: the video, its frame difference (motion, flicker), pixel coordinates
        in [-1, 1] (so pooled features can locate the object and read its direction) and the video minus
        the prompted palette colour (TA ranks base-model videos mostly by how far the object's colour is
        from the prompted one, a per-pixel comparison that FiLM alone learns poorly)."""
        b, _, f, h, w = x.shape
        ref = (palette_rgb(x.dtype).to(x.device)[cond[:, 0]] * 2 - 1)[:, :, None, None, None]  # [B, 3, 1, 1, 1]
        diff = torch.cat([x[:, :, 1:] - x[:, :, :-1], torch.zeros_like(x[:, :, :1])], dim=2)
        ys = torch.linspace(-1, 1, h, device=x.device, dtype=x.dtype)[:, None].expand(h, w)
        xs = torch.linspace(-1, 1, w, device=x.device, dtype=x.dtype)[None, :].expand(h, w)
        coords = torch.stack([xs, ys])[None, :, None].expand(b, 2, f, h, w)
        return torch.cat([x, diff, coords, x - ref], dim=1)

    def score(self, videos: Tensor, prompts: list[str]) -> dict[str, Tensor]:
        """z-scored {"vq", "mq", "ta"}: Tensor[B] each (differentiable; the reward wraps it in no_grad)."""
        self._check_input(videos, prompts)
        z = (self(videos, self.condition(prompts)) - self.mean) / self.std
        return {k: z[:, i] for i, k in enumerate(DIMENSIONS)}

    def _check_input(self, videos: Tensor, prompts: list[str]) -> None:
        shape = (3, self.cfg.frames, self.cfg.size, self.cfg.size)
        if videos.ndim != 5 or tuple(videos.shape[1:]) != shape:
            raise UserError(
                f"the world judge was trained on videos of shape [B, {', '.join(map(str, shape))}], got "
                f"{list(videos.shape)}; rebuild it for another size with `{REBUILD} --size N`"
            )
        if videos.shape[0] != len(prompts):
            raise ValueError(f"{videos.shape[0]} videos but {len(prompts)} prompts")


def save_judge(net: WorldJudge, path: Path, extra: dict | None = None) -> None:
    """Write the judge's weights (safetensors) with its config in the metadata; atomic (temp + rename)."""
    from safetensors.torch import save_file

    from grpo_bench.atomic import atomic_write

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {"format": "grpo-bench/world-judge/1", "config": json.dumps(asdict(net.cfg))}
    if extra:
        meta["info"] = json.dumps(extra)
    state = {k: v.detach().contiguous() for k, v in net.state_dict().items()}
    atomic_write(path, lambda tmp: save_file(state, str(tmp), metadata=meta))


def load_judge(path: Path | str | None = None, device: str | torch.device = "cpu") -> WorldJudge:
    """The judge stored at ``path`` (default: the shipped weights), in eval mode.

    A missing, truncated or foreign file raises a UserError naming the file and the rebuild command."""
    from safetensors import safe_open

    path = Path(path) if path is not None else DEFAULT_WEIGHTS
    rebuild = f"rebuild it with `{REBUILD}" + ("`" if path == DEFAULT_WEIGHTS else f" --out {path}`")
    if not path.is_file():
        raise UserError(f"world judge weights {path} not found; {rebuild}")
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            state = {k: f.get_tensor(k) for k in f.keys()}
        if meta.get("format") != "grpo-bench/world-judge/1":
            raise ValueError("not a world-judge weights file")
        net = WorldJudge(JudgeConfig(**json.loads(meta["config"])))
        net.load_state_dict(state)
    except Exception as exc:  # any unreadable or mismatching file is the same user-facing problem
        raise UserError(f"world judge weights {path} are corrupt or incompatible ({exc.__class__.__name__}: "
                        f"{str(exc).splitlines()[0] if str(exc) else 'unreadable'}); {rebuild}") from None
    return net.to(device).eval()


def _judge_example() -> tuple[WorldJudge, tuple[Tensor, Tensor]]:
    """The shipped judge and one video of the world's shape with a condition: what its FLOPs are counted on."""
    net = load_judge()
    return net, (torch.zeros(1, 3, net.cfg.frames, net.cfg.size, net.cfg.size), torch.zeros(1, 3, dtype=torch.long))


@register("world_judge", path_options={"path": FILE},  # reward_path: judge weights (.safetensors)
          compute=CountedForward(_judge_example))  # counted on the shipped network, per video
class WorldJudgeReward(Reward):
    """The learned judge as a reward: z-scored {"vq", "mq", "ta"} under no_grad."""

    dimensions = DIMENSIONS
    modality = "video"  # the embedded world's 8-frame videos
    shipped_weights = DEFAULT_WEIGHTS  # its digest is part of the id of every cell that loads it
    embedded = True  # ships with the package: no transformers needed
    label = "judge"  # how a run's summary names its training reward

    def __init__(self, path: Path | str | None = None, device: str | torch.device = "cpu") -> None:
        self.net = load_judge(path, device)
        for p in self.net.parameters():
            p.requires_grad_(False)

    @property
    def video_shape(self) -> tuple[int, int, int, int]:
        """(3, F, H, W) of the videos the judge was trained on (the trainer checks it before sampling)."""
        return (3, self.net.cfg.frames, self.net.cfg.size, self.net.cfg.size)

    @torch.no_grad()
    def __call__(self, videos: Tensor, prompts: list[str]) -> dict[str, Tensor]:
        return self.net.score(videos.to(self.net.mean.device), prompts)  # scores on the judge's device
