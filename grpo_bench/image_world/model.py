"""The image world's generator behind the model protocol (grpo_bench/models/base.py), registered as
``image_world``.

Stills are one-frame clips: latents and images are Tensor[B, 3, 1, 32, 32] in [-1, 1] (pixels are the latents,
``decode`` only clamps). ``cond`` is a LongTensor[B, 6] of prompt-part indices (grammar.py ``Scene.cond``); the
unconditional ``null_cond`` uses each part's reserved null index. Weights live in one safetensors file whose
metadata records the architecture, so the file alone rebuilds the network.

The factory declares what the core reads instead of naming this world (config/run.py, config/identity.py,
cli/train.py): its ``run_defaults`` (one 32x32 frame, its prompts, its oracle as the training reward), its
``shipped_weights`` (their digest is part of every cell id that loads them), and ``embedded`` (no diffusers
stack needed).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from grpo_bench.atomic import atomic_write
from grpo_bench.errors import UserError
from grpo_bench.image_world.grammar import parse
from grpo_bench.image_world.net import NULL_INDEX, ImageUNet, ImageUNetConfig
from grpo_bench.image_world.render import SIZE
from grpo_bench.models.base import BaseVideoModel
from grpo_bench.models.options import ModelSection
from grpo_bench.models.registry import MODELS
from grpo_bench.world.unet_parts import NetConfig

NAME = "image_world"
PROMPT_SET = "image_world"
ORACLE = "image_world_oracle"
ASSETS = Path(__file__).resolve().parent / "assets"
DEFAULT_WEIGHTS = ASSETS / "image_world_base.safetensors"
REBUILD_COMMAND = "python -m grpo_bench.image_world.pretrain"
POLICY_WEIGHTS = "model.safetensors"
FORMAT = "grpo-bench image world model v1"


class ImageWorldModel(BaseVideoModel):
    """Protocol adapter around an ImageUNet for one-frame 32x32 clips."""

    modality = "image"
    bf16_by_default = True
    """bf16 autocast where the CPU or GPU has bf16 units, as the video world (train/precision.py)."""

    def __init__(self, net: ImageUNet) -> None:
        self.net = net
        self.latent_shape = (3, 1, SIZE, SIZE)

    @property
    def device(self) -> torch.device:
        return next(self.net.parameters()).device

    def encode_prompts(self, prompts: list[str]) -> Tensor:
        """LongTensor[B, 6] of part indices (UserError naming the prompt and the vocabulary otherwise)."""
        return torch.tensor([parse(p).cond() for p in prompts], dtype=torch.long, device=self.device).reshape(-1, 6)

    def null_cond(self, n: int) -> Tensor:
        return torch.tensor([NULL_INDEX] * n, dtype=torch.long, device=self.device).reshape(-1, 6)

    @staticmethod
    def cat_cond(a: Tensor, b: Tensor) -> Tensor:
        return torch.cat([a, b], dim=0)

    def velocity(self, x: Tensor, sigma: Tensor, cond: Tensor) -> Tensor:
        """v: Tensor[B, 3, 1, H, W] for x of that shape and sigma: Tensor[B] (or a scalar)."""
        sigma = torch.as_tensor(sigma, dtype=torch.float32, device=x.device)
        if sigma.ndim == 0:
            sigma = sigma.expand(x.shape[0])
        return self.net(x[:, :, 0], sigma, cond)[:, :, None]

    def decode(self, x: Tensor) -> Tensor:
        return x.clamp(-1.0, 1.0)

    def trainable_module(self) -> nn.Module:
        return self.net

    def save_policy(self, folder: Path, card: dict[str, Any], gathered: dict[int, Tensor] | None = None) -> dict:
        """The base model's own format, so ``models.load("image_world", path=RUN/policy/model.safetensors)`` reads
        the trained policy; the run's key facts ride in its metadata."""
        save_weights(self.net, Path(folder) / POLICY_WEIGHTS,
                     extra={"grpo_bench_card": json.dumps({k: card[k] for k in ("method", "kl", "setting", "seed")})})
        return {"format": "image-world-safetensors", "weights": POLICY_WEIGHTS}


def save_weights(net: nn.Module, path: Path, extra: dict | None = None, fmt: str = FORMAT) -> None:
    """Write the network's weights with its architecture, ``fmt`` and ``extra`` as string metadata (atomically)."""
    meta = {"format": fmt, "config": json.dumps(net.config.to_dict()), "size": str(SIZE)}
    meta.update({k: str(v) for k, v in (extra or {}).items()})
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu().contiguous() for k, v in net.state_dict().items()}
    atomic_write(path, lambda tmp: save_file(state, str(tmp), metadata=meta))


def load_weights(path: Path, fmt: str = FORMAT, build: Callable[[dict], nn.Module] | None = None,
                 rebuild: str = REBUILD_COMMAND, what: str = "image-world model weights") -> nn.Module:
    """The network of a weights file of format ``fmt``, built by ``build(config dict)`` (default: an ImageUNet);
    untrusted: one line naming ``what`` the file is and how to ``rebuild`` it otherwise."""
    path = Path(path)
    build = build or (lambda config: ImageUNet(ImageUNetConfig.from_dict(config)))
    fix = f"rebuild it with `{rebuild} --out {path}`"
    if not path.is_file():
        raise UserError(f"{what} {path} not found; {fix}")
    try:
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as f:
            meta = dict(f.metadata() or {})
        if meta.get("format") != fmt:
            raise ValueError(f"format {meta.get('format')!r}, expected {fmt!r}")
        net = build(json.loads(meta["config"]))
        net.load_state_dict(load_file(str(path)))
    except (SafetensorError, OSError, KeyError, TypeError, ValueError, RuntimeError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UserError(f"{what} {path} are corrupt or incompatible ({reason}); {fix}") from None
    return net


def still_model_factory(name: str, height: int, width: int, shipped: Path, load: Callable[[Path], nn.Module],
                        fresh: Callable[[NetConfig | None], nn.Module], wrap: type[ImageWorldModel],
                        run_defaults: dict, example_prompts: tuple[str, ...], size_hint: str) -> Callable:
    """Register the factory of one of the image world's generators under ``name``: the ``shipped`` weights (or
    a file's, through ``load``) or a ``fresh(config)`` network, ``wrap``-ped; it declares what the core reads
    instead of naming the world (the module docstring), ``run_defaults`` beside one ``height`` frame, and its
    ``check_config`` refuses another ``video_size`` in one line (``size_hint`` says what the default is)."""

    def factory(pretrained: bool = True, path: str | Path | None = None, config: NetConfig | None = None,
                device: str | torch.device = "cpu", section: ModelSection | None = None,
                frames: int = 1) -> ImageWorldModel:
        # the run's model section holds nothing this net reads: its size is fixed (``check_config`` refuses another
        # video_size before any work) and the trainer places it on the run's device
        if frames != 1:  # `grpo-bench sample --model` asks an image model for one frame
            raise UserError(f"model {name!r} makes still images ({height}x{width}, one frame), not {frames} frames")
        net = load(Path(path) if path is not None else shipped).eval() if pretrained else fresh(config)
        return wrap(net).to(device)

    def check_config(video_size: int, where: str = "") -> None:
        """What a run of this model must have (read by config/run.py before any work): its image size, the run's
        ``video_size``."""
        if video_size != height:
            raise UserError(f"{where}config key 'video_size' is {video_size}; model {name!r} makes "
                            f"{height}x{width} images: use video_size: {height} ({size_hint})")

    factory.__name__ = factory.__qualname__ = f"{name}_model"
    factory.__doc__ = (f"The shipped {name} base model (or the weights at ``path``), or a fresh network when not "
                       "``pretrained``.")
    factory.embedded = True  # type: ignore[attr-defined]
    factory.example_prompts = example_prompts  # type: ignore[attr-defined]
    factory.shipped_weights = shipped  # type: ignore[attr-defined]
    factory.check_config = check_config  # type: ignore[attr-defined]
    factory.run_defaults = {"frames": 1, "video_size": height, **run_defaults}  # type: ignore[attr-defined]
    return MODELS.register(name, wrap.modality)(factory)  # the still generator's class says 'image'


image_world_model = still_model_factory(
    NAME, SIZE, SIZE, DEFAULT_WEIGHTS, load_weights, lambda config: ImageUNet(config), ImageWorldModel,
    {"prompts": PROMPT_SET, "reward": ORACLE, "eval_oracle": True},
    ("a red circle", "three blue squares"),  # prompts of its grammar
    size_hint="its default")
check_config = image_world_model.check_config
