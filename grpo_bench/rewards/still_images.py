"""Shared pieces of the still-image rewards (HPSv2, ImageReward, OCR): the one-frame check, PIL images
of stills, and loading an optional package or a local checkpoint with a one-line failure."""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from grpo_bench.errors import UserError


def stills(videos: Tensor, what: str) -> Tensor:
    """Tensor[B, 3, 1, H, W] -> Tensor[B, 3, H, W]; a clip of more frames is a ValueError (the config check
    refuses a video model before sampling, train/weights.py ``check_modality``)."""
    if videos.shape[2] != 1:
        raise ValueError(f"{what} scores still images (one frame), got {videos.shape[2]} frames")
    return videos[:, :, 0]


def pil_images(images: Tensor) -> list[Any]:
    """Tensor[B, 3, H, W] in [-1, 1] -> RGB PIL images (uint8, rounded)."""
    from PIL import Image

    pixels = ((images.detach().float().clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)
    return [Image.fromarray(np.ascontiguousarray(im)) for im in pixels.permute(0, 2, 3, 1).cpu().numpy()]


def optional_module(module: str, install: str, what: str) -> Any:
    """``importlib.import_module(module)``, or one line naming the install (a missing optional extra is
    never a traceback). A package that is there but fails to import (a dependency it does not declare, an
    API its dependency removed) is told apart from one that is missing: "not installed" would send the
    user to reinstall what they have."""
    top = module.split(".")[0]
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        cause = str(exc).splitlines()[0][:160]
        if not installed(top):
            raise UserError(f"{what} needs the {top!r} package, which is not installed; {install}") from None
        raise UserError(f"{what}: the {top!r} package is installed but does not import ({cause}); {install}") from None


def installed(top: str) -> bool:
    """Whether the top-level module ``top`` can be found (without importing it)."""
    try:
        return importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):  # a module entry set to None, or one without a spec
        return False


def distribution_version(name: str) -> str | None:
    """The installed version of the distribution ``name`` (e.g. 'image-reward'); None when not installed."""
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def local_file(path: str, what: str, download: str) -> Path:
    """An existing local checkpoint file, or one line naming what to download (nothing is downloaded)."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise UserError(f"{what}: checkpoint {path!r} is not a local file and grpo-bench never downloads weights; "
                        f"{download}, then pass reward_path=FILE")
    return p
