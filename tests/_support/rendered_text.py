"""Text rendered with Pillow's shipped font (Aileron, ``load_default(size)``) and a noise image: what the OCR
tests and benchmarks/test_ocr_speed.py read."""

from __future__ import annotations

import numpy as np
from PIL import Image, ImageDraw, ImageFont


def rendered(text: str, width: int = 128, height: int = 32, size: int = 24) -> np.ndarray:
    """Black ``text`` centred on white, H x W x 3 uint8 RGB."""
    image = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default(size=size)
    left, top, right, bottom = draw.textbbox((0, 0), text, font=font)
    draw.text(((width - (right - left)) / 2 - left, (height - (bottom - top)) / 2 - top), text, fill="black",
              font=font)
    return np.asarray(image)


def noise(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (32, 128, 3), dtype=np.uint8)
