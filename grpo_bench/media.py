"""Videos a person can watch: animated GIF and MP4 grids, PNG grids of stills, and a labelled PNG strip.

Every function takes videos as ``Tensor[B, 3, F, H, W]`` in [-1, 1] (what models decode to); a still
image is a one-frame clip (F = 1), written as a PNG grid where a video is an MP4 / GIF (``is_still``).
Small videos (the embedded world's 16x16) are upscaled with nearest-neighbour so the pixels stay
visible; videos in a grid are separated by a dark gap. MP4 goes through imageio-ffmpeg.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import Tensor

GAP = 2
"""Background pixels between videos / frames (before upscaling)."""
GIF_FRAME_S = 0.15
MP4_FPS = 8
TARGET_SIDE = 128
"""Videos smaller than this are upscaled by an integer factor towards it."""


def to_uint8(videos: Tensor) -> np.ndarray:
    """Tensor[B, 3, F, H, W] in [-1, 1] -> uint8 array [B, F, H, W, 3]."""
    v = ((videos.detach().float().clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)
    return v.permute(0, 2, 3, 4, 1).cpu().numpy()


def upscale_factor(height: int) -> int:
    return max(1, TARGET_SIDE // max(1, height))


def tile(images: list[np.ndarray], axis: int, gap: int = GAP, value: int = 0) -> np.ndarray:
    """Concatenate [H, W, 3] images side by side (axis 1) or stacked (axis 0) with a gap."""
    h, w, _ = images[0].shape
    sep = np.full((h, gap, 3) if axis == 1 else (gap, w, 3), value, dtype=np.uint8)
    parts: list[np.ndarray] = []
    for i, im in enumerate(images):
        parts += [sep, im] if i and gap else [im]
    return np.concatenate(parts, axis=axis)


def grid_frames(videos: Tensor, columns: int = 8) -> np.ndarray:
    """uint8 [F, H', W', 3]: the videos in a grid of ``columns`` per row, upscaled."""
    v = to_uint8(videos)  # [B, F, H, W, 3]
    b, f, h, w, _ = v.shape
    columns = max(1, min(columns, b))
    pad = (-b) % columns
    if pad:
        v = np.concatenate([v, np.zeros((pad, f, h, w, 3), np.uint8)])
    k = upscale_factor(h)
    frames = []
    for t in range(f):
        rows = [tile(list(v[r * columns:(r + 1) * columns, t]), axis=1) for r in range(len(v) // columns)]
        frames.append(tile(rows, axis=0).repeat(k, axis=0).repeat(k, axis=1))
    return np.stack(frames)


def is_still(videos: Tensor) -> bool:
    """One frame per clip: the stills of an image model."""
    return videos.shape[2] == 1


def write_png(videos: Tensor, path: Path, columns: int = 8) -> Path:
    """PNG grid of stills (each clip's first frame), ``columns`` per row, upscaled like the videos."""
    import imageio.v3 as iio

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    iio.imwrite(path, grid_frames(videos[:, :, :1], columns)[0], extension=".png")
    return path


def write_gif(videos: Tensor, path: Path, columns: int = 8) -> Path:
    """Animated, looping GIF of the videos in a grid."""
    import imageio.v3 as iio

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    iio.imwrite(path, grid_frames(videos, columns), extension=".gif", duration=int(GIF_FRAME_S * 1000), loop=0)
    return path


def write_mp4(videos: Tensor, path: Path, columns: int = 8, fps: int = MP4_FPS) -> Path:
    """H.264 MP4 of the videos in a grid (padded to a multiple of 16 pixels, as encoders want)."""
    import imageio.v2 as iio2

    frames = grid_frames(videos, columns)
    _, h, w, _ = frames.shape
    frames = np.pad(frames, ((0, 0), (0, (-h) % 16), (0, (-w) % 16), (0, 0)))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with iio2.get_writer(path, format="FFMPEG", mode="I", fps=fps, codec="libx264", quality=8,
                         macro_block_size=16, ffmpeg_log_level="error") as writer:
        for frame in frames:
            writer.append_data(frame)
    return path


def labelled_strip(videos: Tensor, labels: list[str], path: Path, title: str = "") -> Path:
    """PNG: one row per video (label left of it, e.g. its scores), one column per frame, white
    lines between frames."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    v = to_uint8(videos)  # [B, F, H, W, 3]
    rows = [tile(list(video), axis=1, gap=1, value=255) for video in v]
    image = tile(rows, axis=0, gap=GAP, value=255)
    h = v.shape[2]
    k = upscale_factor(h)
    image = image.repeat(k, axis=0).repeat(k, axis=1)
    height_in = image.shape[0] / 100 + 0.6
    fig, ax = plt.subplots(figsize=(image.shape[1] / 100 + 3.2, height_in))
    ax.imshow(image, interpolation="nearest")
    ax.set_yticks([(i * (h + GAP) + h / 2) * k for i in range(len(rows))], labels, fontsize=7)
    frames = v.shape[1]
    ax.set_xticks([(j * (v.shape[3] + 1) + v.shape[3] / 2) * k for j in range(frames)],
                  [f"t{j}" for j in range(frames)], fontsize=6)
    ax.tick_params(length=0)
    for spine in ax.spines.values():
        spine.set_visible(False)
    if title:
        ax.set_title(title, fontsize=8)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return path
