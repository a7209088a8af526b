"""OCR reward (FlowGRPO's text-rendering task) on still images: how much of the prompt's quoted text an
OCR engine reads back.

Read from yifan123/flow_grpo ``flow_grpo/ocr.py`` (``OcrScorer``): the target is the prompt's first
double-quoted span (``prompt.split('"')[1]``); the recognised text is the concatenation of the engine's
lines; both are lower-cased with spaces removed; distance d = 0 when the target occurs in the recognised
text, else their Levenshtein distance, capped at the target's length; reward = 1 - d / len.

Engine: the PP-OCRv4 detection and recognition models that ship inside the ``rapidocr-onnxruntime`` wheel
(rewards/rapid_ocr.py; ``pip install 'grpo-bench[ocr]'``): the same model family as flow_grpo's PaddleOCR
(``PaddleOCR(use_angle_cls=False, lang="en")``: detection + recognition, no angle classifier, lines of
confidence >= 0.5), exported to ONNX, so nothing is downloaded and no Paddle is needed. The PaddleOCR
engine is dropped: paddleocr 3.x refuses its 2.x arguments, and 2.x needs paddlepaddle, which is not tried.
``detect=False`` reads each image as one known line (recognition only: a rendered word, a crop).

Unlike the reference, a failure to score is an error, never a 0: an engine failure stops the call, and a
prompt without a double-quoted span (nothing to read back) is one line naming the prompt. A reading of
nothing is a legitimate 0.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from grpo_bench.errors import UserError
from grpo_bench.rewards import register
from grpo_bench.rewards.base import Reward
from grpo_bench.rewards.compute import HostSeconds
from grpo_bench.rewards.rapid_ocr import edit_distance
from grpo_bench.rewards.still_images import stills

Reader = Callable[[Sequence[np.ndarray]], list[str]]
"""uint8 H x W x 3 RGB images -> the text read in each."""


def quoted(prompt: str) -> str:
    """The prompt's first double-quoted span (flow_grpo: ``prompt.split('"')[1]``); '' when none."""
    parts = prompt.split('"')
    return parts[1] if len(parts) > 2 else ""


def ocr_reward(recognised: str, target: str) -> float:
    """1 - min(d, len) / len with d = 0 if the target is contained, else the Levenshtein distance."""
    recognised, target = recognised.replace(" ", "").lower(), target.replace(" ", "").lower()
    if not target:
        raise ValueError("ocr_reward: the target text is empty")
    d = 0 if target in recognised else edit_distance(recognised, target)
    return 1 - min(d, len(target)) / len(target)


class OcrReward(Reward):
    """{"ocr": Tensor[B]}: the quoted text's OCR recall (see the module docstring)."""

    key = "ocr"
    dimensions = ("ocr",)
    settings = {"A": {"ocr": 1.0}, "B": {"ocr": 1.0}}
    modality = "image"
    example_prompts = ('a sign that says "open"', 'a mug that says "cat"')  # prompts of the form it scores

    def __init__(self, read: Reader, device: str | torch.device = "cpu") -> None:
        self.read, self.device = read, device

    @torch.no_grad()
    def __call__(self, videos: Tensor, prompts: list[str]) -> dict[str, Tensor]:
        targets = [quoted(p) for p in prompts]
        for prompt, target in zip(prompts, targets):
            if not target.replace(" ", ""):
                raise UserError(f"reward ocr: prompt {prompt!r} has no double-quoted text to read back; "
                                'the OCR reward scores prompts like: a sign that says "open"')
        images = stills(videos, "OCR")
        pixels = ((images.float().clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8).permute(0, 2, 3, 1).cpu().numpy()
        texts = self.read([np.ascontiguousarray(image) for image in pixels])
        if len(texts) != len(targets):
            raise RuntimeError(f"reward ocr: the engine read {len(texts)} texts for {len(targets)} images")
        scores = [ocr_reward(text, target) for text, target in zip(texts, targets)]
        return {self.key: torch.tensor(scores, dtype=torch.float32)}


# PP-OCRv4 through ONNX Runtime on the CPU: read_lines 0.6 s of one thread per 512 x 512 still with one line of
# text, measured (docs/rewards.md, benchmarks/test_ocr_speed.py); the models ship in the wheel: no reward_path
@register("ocr", compute=HostSeconds(per_image=0.6))
def ocr(detect: bool = True, threads: int = 1, device: str | None = None, **kw: Any) -> OcrReward:
    """PP-OCRv4 from the rapidocr-onnxruntime wheel, on the CPU (``threads`` ONNX threads): detection +
    recognition as flow_grpo, or recognition only (``detect=False``). Checks the package before any image."""
    from grpo_bench.rewards import rapid_ocr

    rapid_ocr.engine(threads)  # a missing or unsupported package fails here, in one line

    def read(images: Sequence[np.ndarray]) -> list[str]:
        return (rapid_ocr.read_lines if detect else rapid_ocr.recognize)(images, threads)

    return OcrReward(read, device or "cpu")

