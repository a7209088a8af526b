"""Frame strips: a few frames of a cell's eval videos, stored in results.parquet as base64 PNG.

A ``strip`` row is one prompt: the first sample's frames at STRIP_FRAMES evenly spaced times, for
the figure of sample frames; ``strip_pixels`` decodes a row back to pixels.
"""

from __future__ import annotations

import base64
import io
from pathlib import Path
from typing import Any

STRIP_PROMPTS = 4
"""Eval prompts shown per cell in the frame strip."""
STRIP_FRAMES = 4
"""Frames per video in the strip (evenly spaced, first and last included)."""

BASE_STRIP = "base"
"""``metric`` of the strip rows of the base model (the cell's eval at update 0, ``samples/base_eval.pt``);
the final policy's strip rows have no metric."""


def strip_rows(cell_dir: Path, videos: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """First sample of the first STRIP_PROMPTS prompts: STRIP_FRAMES frames each, as uint8; of the final
    policy and, where stored, of the base model (same prompts and noise)."""
    rows = _strip_rows_of(cell_dir / "samples" / "final_eval.pt", videos)
    base = _strip_rows_of(cell_dir / "samples" / "base_eval.pt", videos)
    return rows + [{**r, "metric": BASE_STRIP} for r in base]


def _strip_rows_of(path: Path, videos: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if not path.is_file() or not videos:
        return []
    import torch

    clip = torch.load(path, map_location="cpu", weights_only=True)  # Tensor[N, 3, F, H, W]
    first: dict[str, int] = {}
    for i, row in enumerate(videos[: clip.shape[0]]):
        first.setdefault(row["prompt"], i)
    rows = []
    frames = clip.shape[2]
    pick = torch.linspace(0, frames - 1, min(STRIP_FRAMES, frames)).round().long()
    for prompt, i in list(first.items())[:STRIP_PROMPTS]:
        img = ((clip[i, :, pick].clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8)  # [3, K, H, W]
        img = img.permute(1, 2, 3, 0).unsqueeze(0)  # [1, K, H, W, 3]
        rows.append({"kind": "strip", "prompt": prompt, "sample": int(videos[i].get("sample", 0)),
                     "text": _png(img[0].numpy()), "shape": list(img.shape)})
    return rows


def _png(frames: Any) -> str:
    """uint8 [K, H, W, 3] -> base64 PNG of the K frames side by side (lossless, ~20x smaller than floats)."""
    import imageio.v3 as iio
    import numpy as np

    k, h, w, c = frames.shape
    wide = np.ascontiguousarray(frames.transpose(1, 0, 2, 3).reshape(h, k * w, c))
    return base64.b64encode(iio.imwrite("<bytes>", wide, extension=".png")).decode("ascii")


def strip_pixels(text: Any, array: Any, shape: Any) -> Any:
    """uint8 [videos, frames, H, W, 3] of a strip row: from its PNG text, or an older file's array."""
    import numpy as np

    shape = [int(x) for x in shape]
    if isinstance(text, str) and text:
        import imageio.v3 as iio

        wide = iio.imread(io.BytesIO(base64.b64decode(text)), extension=".png")  # [H, K*W, 3]
        _, k, h, w, c = shape
        return wide.reshape(h, k, w, c).transpose(1, 0, 2, 3)[None].astype(np.uint8)
    return np.asarray(array, dtype=np.uint8).reshape(shape)
