"""Eval videos to MP4 clips a person can watch: uint8 frames, nearest-neighbour upscaling of the
world's tiny videos, H.264 through imageio-ffmpeg (its bundled ffmpeg; nothing hand-encoded). A still
(a one-frame clip of an image model) is a PNG instead (``suffix``, ``write_png``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

MIN_SIDE = 256
"""Videos whose longer side is below this are upscaled by an integer factor (the world's 16 px videos
become 256 px); real-model videos are kept at their own size."""


def to_frames(video: torch.Tensor) -> np.ndarray:
    """Tensor[3, F, H, W] in [-1, 1] -> uint8 [F, H, W, 3]."""
    x = ((video.float().clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)
    return x.permute(1, 2, 3, 0).contiguous().numpy()


def upscale(frames: np.ndarray, min_side: int = MIN_SIDE) -> np.ndarray:
    """Nearest-neighbour (pixel repetition) by the smallest integer factor reaching min_side; even sides
    (H.264 with 4:2:0 chroma needs them) by repeating the last row/column."""
    factor = max(1, -(-min_side // max(frames.shape[1:3])))
    out = frames.repeat(factor, axis=1).repeat(factor, axis=2) if factor > 1 else frames
    pad_h, pad_w = out.shape[1] % 2, out.shape[2] % 2
    if pad_h or pad_w:
        out = np.pad(out, ((0, 0), (0, pad_h), (0, pad_w), (0, 0)), mode="edge")
    return out


def broken(frames: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """An obviously broken copy for attention checks: frames shuffled, coarse blocks of the picture
    swapped and heavy noise on top. A rater who prefers it on visual quality is not looking."""
    f, h, w, _ = frames.shape
    out = frames[rng.permutation(f)].astype(np.int16)
    bh, bw = max(1, h // 4), max(1, w // 4)
    blocks = [(i, j) for i in range(0, h - bh + 1, bh) for j in range(0, w - bw + 1, bw)]
    order = rng.permutation(len(blocks))
    src = out.copy()
    for (i, j), k in zip(blocks, order):
        si, sj = blocks[k]
        out[:, i:i + bh, j:j + bw] = src[:, si:si + bh, sj:sj + bw]
    out += rng.integers(-110, 111, out.shape, dtype=np.int16)
    return out.clip(0, 255).astype(np.uint8)


def write_mp4(path: Path, frames: np.ndarray, fps: int) -> None:
    """H.264 MP4 (yuv420p, faststart) written to a temp name, then renamed: a kit never holds half a clip."""
    import imageio_ffmpeg

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.mp4")
    h, w = frames.shape[1:3]
    writer = imageio_ffmpeg.write_frames(
        str(tmp), (w, h), fps=fps, codec="libx264", pix_fmt_in="rgb24", pix_fmt_out="yuv420p",
        macro_block_size=1, quality=None, bitrate=None,
        output_params=["-crf", "18", "-movflags", "+faststart"], ffmpeg_log_level="error")
    writer.send(None)
    for frame in frames:
        writer.send(np.ascontiguousarray(frame))
    writer.close()
    tmp.replace(path)


def suffix(frames: np.ndarray) -> str:
    """The clip file a rater sees: '.png' for a still (one frame), '.mp4' for a video."""
    return ".png" if frames.shape[0] == 1 else ".mp4"


def write_png(path: Path, frames: np.ndarray) -> None:
    """The first frame as a PNG, written to a temp name, then renamed."""
    import imageio.v3 as iio

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.png")
    iio.imwrite(tmp, np.ascontiguousarray(frames[0]), extension=".png")
    tmp.replace(path)


def write_clip(path_stem: Path, frames: np.ndarray, fps: int) -> Path:
    """A still as ``<stem>.png``, a video as ``<stem>.mp4``; returns the path written."""
    path = path_stem.with_name(path_stem.name + suffix(frames))
    if path.suffix == ".png":
        write_png(path, frames)
    else:
        write_mp4(path, frames, fps)
    return path
