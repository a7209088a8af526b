"""The text task's rewards and prompt set.

* ``image_world_ocr`` (the training reward): PP-OCRv4 recognition (rewards/rapid_ocr.py ``recognize``, the
  models in the rapidocr-onnxruntime wheel) reads each 32x128 still as one line; the score is ``word_score``
  (1 - normalised edit distance) of the reading to the prompt's word. The reading is first reduced to what the
  task can ask for: NFKC (the recogniser emits full-width forms such as 'ｒ'), case-folded, letters a-z only
  (it adds stray marks such as 'ä' or '²' beside letter-spaced words: unreduced, the renderer's own images of
  every 4th word score 0.87). Reduced, it reads every vocabulary word the renderer draws exactly (101 of 101 at
  two jitter seeds, measured with ``ocr_scores``).
* ``image_world_ocr_exact``: the same reading scored 1 if it is the word, else 0 (base samples: 0.73, against a
  word score of 0.92-0.94 that leaves an update little to gain).
* ``image_world_ocr_prob``: the chance that PP-OCRv4 reads exactly the word, summed over its CTC alignments
  (``ocr_probability``): the expectation of ``image_world_ocr_exact`` under the recogniser's own per-frame
  distributions, so it moves with every frame's confidence where the greedy reading moves only when a letter
  flips.
* ``image_world_text_oracle`` (ground truth of ``prompts: image_world_text``): the exact reader
  (text_checker.py), independent of the OCR, so over-fitting PP-OCRv4 shows as a gap between the two.
* ``prompts: image_world_text``: the training words / the held-out words (words.py).

A missing or unsupported rapidocr-onnxruntime is one line naming the pip command, when the reward is built.
"""

from __future__ import annotations

import functools
import re
import unicodedata

import numpy as np
import torch
from torch import Tensor

from grpo_bench.image_world.text_checker import check, ink_of
from grpo_bench.image_world.text_model import ORACLE, PROMPT_SET, TRAINING_REWARD
from grpo_bench.image_world.words import prompts, word_of
from grpo_bench.registry import PROMPT_SETS
from grpo_bench.rewards import register
from grpo_bench.rewards.base import Reward
from grpo_bench.rewards.compute import HostSeconds, NoNetwork


def letters_only(text: str) -> str:
    """The reading reduced to the task's alphabet: NFKC, case-folded, a-z kept."""
    return re.sub(r"[^a-z]", "", unicodedata.normalize("NFKC", text).casefold())


def _lines(images: Tensor, prompts: list[str], reward: str, threads: int) -> tuple[list[str], list[np.ndarray]]:
    """(each prompt's word, each image as the recogniser's grey uint8 line): the prompts, the images' size and the
    OCR package checked first, each a one-line error naming ``reward``."""
    from grpo_bench.rewards import rapid_ocr

    targets = [word_of(p) for p in prompts]
    ink = ink_of(images, f"reward {reward}")
    rapid_ocr.engine(threads)
    grey = ((1.0 - 2.0 * ink + 1.0) * 127.5).round().to(torch.uint8).numpy()
    return targets, [np.ascontiguousarray(g) for g in grey]


def ocr_scores(images: Tensor, prompts: list[str], threads: int = 1) -> dict[str, Tensor]:
    """{"ocr": word score, "ocr_exact": reading == word} of images Tensor[B, 1 or 3, 1, 32, 128] for text
    prompts; a prompt outside the vocabulary, an image of the wrong size or a missing OCR package is one line,
    before any image is read."""
    from grpo_bench.rewards import rapid_ocr

    targets, lines = _lines(images, prompts, TRAINING_REWARD, threads)
    texts = [letters_only(t) for t in rapid_ocr.recognize(lines, threads)]
    return {"ocr": torch.tensor([rapid_ocr.word_score(t, w) for t, w in zip(texts, targets)], dtype=torch.float32),
            "ocr_exact": torch.tensor([float(t == w) for t, w in zip(texts, targets)])}


@functools.lru_cache(maxsize=2)
def letter_classes(characters: tuple[str, ...]) -> Tensor:
    """Tensor[len(characters), 27]: which task class each recogniser character counts as, column 0 the blank
    (the CTC blank and every character ``letters_only`` drops: spaces, digits, marks; a character that reduces
    to more than one letter, such as a ligature, too) and columns 1-26 the letters a-z (each letter's case and
    width forms summed)."""
    classes = torch.zeros(len(characters), 27)
    for i, character in enumerate(characters):
        reduced = letters_only(character) if i else ""
        classes[i, ord(reduced) - ord("a") + 1 if len(reduced) == 1 else 0] = 1.0
    return classes


def ocr_probability(images: Tensor, prompts: list[str], threads: int = 1) -> Tensor:
    """Tensor[B]: P(PP-OCRv4's reading, reduced like ``letters_only``, is the prompt's word), from its per-frame
    distributions merged onto blank + a-z (``letter_classes``). One approximation: a letter's two cases in
    adjacent frames merge as one letter here, where the greedy reading keeps both."""
    from grpo_bench.rewards import rapid_ocr

    targets, lines = _lines(images, prompts, TRAINING_REWARD + "_prob", threads)
    characters, frames = rapid_ocr.frame_probabilities(lines, threads)
    classes = letter_classes(tuple(characters)).numpy()
    return torch.tensor([rapid_ocr.target_probability(f.astype(np.float64) @ classes, [ord(c) - 96 for c in w])
                         for f, w in zip(frames, targets)], dtype=torch.float32)


class TextOcrReward(Reward):
    """{"ocr": Tensor[B]}: PP-OCRv4's reading of the word, scored against the prompt's (module docstring)."""

    dimensions = ("ocr",)  # one column: the ``ocr_scores`` score of that name
    settings = {"A": {"ocr": 1.0}, "B": {"ocr": 1.0}}
    modality = "image"
    example_prompts = ('the word "cat"', 'the word "moon"')  # prompts of the form it scores
    media_size = (32, 128)  # the rendered line it reads
    embedded = True
    label = "ocr"

    def __init__(self, threads: int = 1, device: str | torch.device = "cpu") -> None:
        self.threads, self.device = int(threads), device

    @torch.no_grad()
    def __call__(self, images: Tensor, prompts: list[str]) -> dict[str, Tensor]:
        (score,) = self.dimensions
        return {score: ocr_scores(images, prompts, self.threads)[score].to(images.device)}


class TextOcrExactReward(TextOcrReward):
    """{"ocr_exact": Tensor[B]}: 1 where PP-OCRv4 reads exactly the prompt's word, else 0. The stricter score:
    base-model samples read exactly 0.73 of the time against a word score of 0.92, so an update can gain 0.27."""

    dimensions = ("ocr_exact",)
    settings = {"A": {"ocr_exact": 1.0}, "B": {"ocr_exact": 1.0}}
    label = "ocr exact"


class TextOcrProbabilityReward(TextOcrReward):
    """{"ocr_prob": Tensor[B]}: the chance PP-OCRv4 reads exactly the prompt's word (``ocr_probability``)."""

    dimensions = ("ocr_prob",)
    settings = {"A": {"ocr_prob": 1.0}, "B": {"ocr_prob": 1.0}}
    label = "ocr probability"

    @torch.no_grad()
    def __call__(self, images: Tensor, prompts: list[str]) -> dict[str, Tensor]:
        return {"ocr_prob": ocr_probability(images, prompts, self.threads).to(images.device)}


def _built(reward: type[TextOcrReward], threads: int, device: str | None) -> TextOcrReward:
    """``reward`` on a built PP-OCRv4 engine; the package is checked every time (the engine is cached across
    builds), before any image."""
    from grpo_bench.rewards import rapid_ocr

    rapid_ocr.check_installed()
    rapid_ocr.engine(threads)
    return reward(threads, device or "cpu")


# PP-OCRv4 recognition on the CPU: at most 0.06 s of one thread per 128 x 32 line, measured (docs/rewards.md); the
# models ship in the wheel: no reward_path
@register(TRAINING_REWARD, compute=HostSeconds(per_image=0.06))
def image_world_ocr(threads: int = 1, device: str | None = None, **kw: object) -> TextOcrReward:
    """PP-OCRv4 recognition on the CPU (``threads`` ONNX threads); checks the package before any image."""
    return _built(TextOcrReward, threads, device)


@register(TRAINING_REWARD + "_exact", compute=HostSeconds(per_image=0.06))
def image_world_ocr_exact(threads: int = 1, device: str | None = None, **kw: object) -> TextOcrReward:
    """PP-OCRv4's exact reading as a 0/1 reward (``TextOcrExactReward``); checks the package like image_world_ocr."""
    return _built(TextOcrExactReward, threads, device)


@register(TRAINING_REWARD + "_prob", compute=HostSeconds(per_image=0.06))
def image_world_ocr_prob(threads: int = 1, device: str | None = None, **kw: object) -> TextOcrReward:
    """PP-OCRv4's chance of reading the word exactly (``TextOcrProbabilityReward``); checks the package alike."""
    return _built(TextOcrProbabilityReward, threads, device)


@register(ORACLE, ground_truth_for=PROMPT_SET, compute=NoNetwork("the exact glyph reader's closed-form checks"))
class TextOracleReward(Reward):
    """{"vq", "mq", "ta"} of the exact reader (text_checker.py); its ``ground_truth`` gives every column."""

    dimensions = ("vq", "mq", "ta")
    example_prompts = ('the word "cat"', 'the word "moon"')  # prompts of the form it scores
    media_size = (32, 128)  # the rendered line it reads
    modality = "image"
    has_ground_truth = True
    embedded = True
    label = "oracle"

    def __init__(self, device: str | torch.device = "cpu") -> None:
        self.device = device

    @torch.no_grad()
    def ground_truth(self, images: Tensor, prompts: list[str]) -> dict[str, Tensor]:
        return check(images, prompts)

    @torch.no_grad()
    def __call__(self, images: Tensor, prompts: list[str]) -> dict[str, Tensor]:
        scores = check(images, prompts)
        return {k: scores[k].to(images.device) for k in self.dimensions}


@PROMPT_SETS.register(PROMPT_SET)
def image_world_text_prompts() -> tuple[list[str], list[str]]:
    """(train, eval) prompts of the text task."""
    return prompts("train"), prompts("eval")
