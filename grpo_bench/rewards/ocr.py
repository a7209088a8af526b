"""OCR reward (FlowGRPO's text-rendering task) on still images: how much of the prompt's quoted text an
OCR engine reads back.

Read from yifan123/flow_grpo ``flow_grpo/ocr.py`` (``OcrScorer``): the target is the prompt's first
double-quoted span (``prompt.split('"')[1]``); the recognised text is the concatenation of the engine's
lines with confidence > 0; both are lower-cased with spaces removed; distance d = 0 when the target occurs
in the recognised text, else their Levenshtein distance, capped at the target's length; reward = 1 - d / len.
An engine failure on one image gives that image the maximum penalty (reward 0), as the reference.

Engine: PaddleOCR as the reference (``PaddleOCR(use_angle_cls=False, lang="en")``), optional:
``pip install paddleocr paddlepaddle`` (not installed in this project's environment here: the formula is
tested with a stand-in engine). Strict loading: the detection and recognition model folders are local
(reward_path = det_model_dir, reward_base_path = rec_model_dir); nothing is downloaded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from grpo_bench.errors import UserError
from grpo_bench.rewards import register
from grpo_bench.rewards.still_images import optional_module, stills

INSTALL = "pip install paddleocr paddlepaddle"


def levenshtein(a: str, b: str) -> int:
    """Edit distance (insertions, deletions, substitutions of one character each)."""
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def quoted(prompt: str) -> str:
    """The prompt's first double-quoted span (flow_grpo: ``prompt.split('"')[1]``); '' when none."""
    parts = prompt.split('"')
    return parts[1] if len(parts) > 2 else ""


def ocr_reward(recognised: str, target: str) -> float:
    """1 - min(d, len) / len with d = 0 if the target is contained, else the Levenshtein distance."""
    recognised, target = recognised.replace(" ", "").lower(), target.replace(" ", "").lower()
    if not target:
        return 0.0
    d = 0 if target in recognised else levenshtein(recognised, target)
    return 1 - min(d, len(target)) / len(target)


class OcrReward:
    """{"ocr": Tensor[B]}: the quoted text's OCR recall (see the module docstring)."""

    key = "ocr"
    dimensions = ("ocr",)
    settings = {"A": {"ocr": 1.0}, "B": {"ocr": 1.0}}
    modality = "image"

    def __init__(self, engine: Any, device: str | torch.device = "cpu") -> None:
        self.engine, self.device = engine, device

    def read(self, image: np.ndarray) -> str:
        """The engine's lines with confidence > 0, concatenated (PaddleOCR's ``ocr`` result layout)."""
        result = self.engine.ocr(image, cls=False)
        lines = result[0] if result else None
        return "".join(line[1][0] for line in lines if line[1][1] > 0) if lines else ""

    @torch.no_grad()
    def __call__(self, videos: Tensor, prompts: list[str]) -> dict[str, Tensor]:
        images = stills(videos, "OCR")
        pixels = ((images.float().clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8).permute(0, 2, 3, 1).cpu().numpy()
        scores = []
        for image, prompt in zip(pixels, prompts):
            target = quoted(prompt)
            try:
                scores.append(ocr_reward(self.read(np.ascontiguousarray(image)), target))
            except Exception:  # an engine failure on one image: the maximum penalty, as the reference
                scores.append(0.0)
        return {self.key: torch.tensor(scores, dtype=torch.float32)}


@register("ocr")
def ocr(det_model_dir: str = "", rec_model_dir: str = "", device: str | None = None, **kw: Any) -> OcrReward:
    """PaddleOCR from local model folders (never downloads)."""
    for name, value in (("det_model_dir (reward_path)", det_model_dir), ("rec_model_dir (reward_base_path)",
                                                                          rec_model_dir)):
        if not value or not Path(value).expanduser().is_dir():
            raise UserError(f"reward ocr: {name} {value!r} is not a local folder; grpo-bench never downloads "
                            "weights: put PaddleOCR's English detection and recognition models on disk and pass "
                            "reward_path=DET_DIR reward_base_path=REC_DIR")
    paddleocr = optional_module("paddleocr", INSTALL, "reward ocr")
    engine = paddleocr.PaddleOCR(use_angle_cls=False, lang="en", det_model_dir=det_model_dir,
                                 rec_model_dir=rec_model_dir, use_gpu=str(device or "").startswith("cuda"),
                                 show_log=False)
    return OcrReward(engine, device or "cpu")


ocr.path_options = ("det_model_dir", "rec_model_dir")  # reward_path, reward_base_path
ocr.modality = "image"
