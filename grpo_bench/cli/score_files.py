"""The user's own images and videos for ``grpo-bench score``: each file read into the harness's clip layout
(Tensor[1, 3, F, H, W] in [-1, 1]; a still is a one-frame clip) and checked against the reward, before
the reward is loaded, so a wrong file is one line naming it and no model was built for nothing.

Files on disk are untrusted: the suffix says how a file is read, the decoder says whether it is one, and
the frame count and size are bounded (a 4K hour-long video would not fit in memory as float32).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from grpo_bench.errors import UserError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp", ".tif", ".tiff")
VIDEO_SUFFIXES = (".mp4", ".webm", ".mov", ".avi", ".mkv", ".gif")
MAX_FRAMES = 1024
MAX_PIXELS = 4096 * 4096
"""Per frame: larger is refused rather than decoded (a decompression bomb, or a file that is not a frame)."""


@dataclass(frozen=True)
class ScoredFile:
    """One file as the reward will see it."""

    path: Path
    clip: Tensor  # [1, 3, F, H, W] float32 in [-1, 1]

    @property
    def frames(self) -> int:
        return int(self.clip.shape[2])

    @property
    def kind(self) -> str:
        """'image' (one frame) or 'video': the words of a reward's ``modality``."""
        return "image" if self.frames == 1 else "video"


def _pixels(path: Path) -> np.ndarray:
    """Decoded uint8 frames [F, H, W, 3]; UserError naming the file when it is not what its suffix says."""
    suffix = path.suffix.lower()
    try:
        if suffix in IMAGE_SUFFIXES:
            from PIL import Image

            with Image.open(path) as image:
                if image.width * image.height > MAX_PIXELS:
                    raise UserError(f"score: {path}: {image.width}x{image.height} pixels is more than "
                                    f"{MAX_PIXELS} per frame; resize it first")
                return np.asarray(image.convert("RGB"))[None]
        import imageio.v3 as iio

        shape = iio.improps(path, index=None).shape  # [F, H, W, C]; F may be inf (a stream): read before decoding
        if len(shape) >= 3 and (shape[1] * shape[2] > MAX_PIXELS or MAX_FRAMES < shape[0] < math.inf):
            raise UserError(f"score: {path}: {shape[0]} frames of {shape[2]}x{shape[1]} is more than {MAX_FRAMES} "
                            f"frames or {MAX_PIXELS} pixels per frame; cut or resize it first")
        decoded = []
        for frame in iio.imiter(path):  # frame by frame: a stream of unknown length stops at the limit
            if len(decoded) == MAX_FRAMES:
                raise UserError(f"score: {path} has more than {MAX_FRAMES} frames; cut it first")
            decoded.append(np.asarray(frame))
        frames = np.stack(decoded) if decoded else np.zeros((0, 0, 0, 3), np.uint8)
    except UserError:
        raise
    except Exception as exc:  # any decoder's own error: the file is not an image or video it can read
        detail = " ".join(str(exc).split())[:160]
        raise UserError(f"score: {path} cannot be read as {'an image' if suffix in IMAGE_SUFFIXES else 'a video'} "
                        f"({type(exc).__name__}: {detail}); give a {'/'.join(IMAGE_SUFFIXES + VIDEO_SUFFIXES)} "
                        "file") from None
    if frames.ndim == 3:  # grey frames
        frames = np.repeat(frames[..., None], 3, axis=-1)
    if frames.ndim != 4 or frames.shape[-1] not in (3, 4) or frames.dtype != np.uint8:
        raise UserError(f"score: {path}: decoded to {frames.dtype} frames of shape {frames.shape}, not 8-bit RGB "
                        "video frames")
    return frames[..., :3]


def read_file(path: Path) -> ScoredFile:
    """``path`` as a clip; one UserError line naming it when it is missing, of an unknown kind or unreadable."""
    if not path.is_file():
        raise UserError(f"score: {path} {'is a folder' if path.is_dir() else 'does not exist'}; "
                        "give image or video files")
    if path.suffix.lower() not in IMAGE_SUFFIXES + VIDEO_SUFFIXES:
        raise UserError(f"score: {path} is not an image or a video by its suffix {path.suffix or '(none)'!r}; "
                        f"allowed: images {', '.join(IMAGE_SUFFIXES)}; videos {', '.join(VIDEO_SUFFIXES)}")
    frames = _pixels(path)
    f, h, w = frames.shape[:3]
    if f < 1 or h < 1 or w < 1:
        raise UserError(f"score: {path} holds no pixels (frames x height x width {f}x{h}x{w})")
    if f > MAX_FRAMES or h * w > MAX_PIXELS:
        raise UserError(f"score: {path}: {f} frames of {w}x{h} is more than {MAX_FRAMES} frames or {MAX_PIXELS} "
                        "pixels per frame; cut or resize it first")
    clip = torch.from_numpy(np.array(frames, copy=True))  # decoders may hand back read-only buffers
    clip = clip.permute(3, 0, 1, 2)[None].float() / 127.5 - 1
    return ScoredFile(path, clip)


def check_fits(item: ScoredFile, reward_name: str, modality: str, video_shape: Any = None) -> None:
    """The reward scores this kind of file ('image', 'video' or 'any') at this shape, if it declares one."""
    if modality not in ("any", item.kind):
        what = "still images (one frame)" if modality == "image" else "videos (more than one frame)"
        kind = "an image" if item.kind == "image" else f"a {item.frames}-frame video"
        raise UserError(f"score: {item.path} is {kind} but reward {reward_name!r} scores {what} only; give it "
                        f"{what}, or choose a reward of {item.kind}s")
    if video_shape is not None and tuple(video_shape) != tuple(item.clip.shape[1:]):
        want = "x".join(map(str, tuple(video_shape)[1:]))
        have = "x".join(map(str, tuple(item.clip.shape[2:])))
        raise UserError(f"score: {item.path} is frames x height x width {have} but reward {reward_name!r} scores "
                        f"{want} only")
