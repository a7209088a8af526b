"""grpo_bench/rewards/rapid_ocr.py on text rendered with Pillow's shipped font (Aileron, ``load_default(size)``):
the real PP-OCRv4 recogniser from the rapidocr-onnxruntime wheel (the ``test`` extra installs it), no stand-in."""

from __future__ import annotations

import re
from importlib import metadata

import numpy as np
import pytest
from rendered_text import noise, rendered

from grpo_bench.errors import UserError
from grpo_bench.rewards import rapid_ocr
from grpo_bench.rewards.rapid_ocr import recognize, word_score


def test_the_prompt_word_scores_high_and_a_wrong_word_and_noise_low():
    hello, cat, static = recognize([rendered("hello world"), rendered("cat"), noise()])
    assert word_score(hello, "Hello World") == 1.0  # read exactly (case and padding spaces aside)
    assert word_score(cat, "cat") == 1.0
    assert word_score(cat, "dog") < 0.4
    assert word_score(hello, "goodbye moon") < 0.4
    assert word_score(static, "cat") < 0.4


def test_a_grey_image_reads_as_its_rgb():
    image = rendered("cat")
    assert recognize([image[:, :, 0]]) == recognize([image])


def test_word_score_is_one_minus_the_normalised_edit_distance():
    assert word_score("  Hello \u3000 WORLD ", "hello world") == 1.0  # case and whitespace runs do not count
    assert word_score("helo world", "hello world") == pytest.approx(1 - 1 / 11)  # one deletion of 11
    assert word_score("hcat", "cat") == pytest.approx(1 - 1 / 4)  # an extra character costs like a missing one
    assert word_score("dog", "cat") == 0.0
    assert word_score("", "cat") == 0.0
    assert word_score("", "") == 1.0


@pytest.mark.parametrize("image, match", [
    (np.zeros((32, 128, 3), dtype=np.float32), "image 1: expected an H x W or H x W x 3 uint8 array, got float32"),
    (np.zeros((32, 128, 4), dtype=np.uint8), r"image 1: .* shape \(32, 128, 4\)"),
    ("cat.png", "image 1: .* got str"),
])
def test_an_image_of_the_wrong_kind_is_one_line_naming_it(image, match):
    with pytest.raises(UserError, match=match):
        recognize([rendered("cat"), image])


@pytest.mark.parametrize("version, match", [
    (None, "not installed; pip install 'grpo-bench\\[ocr\\]'"),
    ("1.2.9", "supports rapidocr-onnxruntime >=1.3.5,<2, found 1.2.9; pip install"),
    ("1.3.4", "found 1.3.4; pip install"),  # runs the detector when told not to
    ("2.0.1", "found 2.0.1; pip install"),
])
def test_a_missing_or_unsupported_package_is_one_line_naming_the_pip_command(monkeypatch, version, match):
    def installed(name: str) -> str:
        if version is None:
            raise metadata.PackageNotFoundError(name)
        return version

    monkeypatch.setattr(metadata, "version", installed)
    rapid_ocr.engine.cache_clear()
    try:
        with pytest.raises(UserError, match=match):
            recognize([rendered("cat")])
    finally:
        rapid_ocr.engine.cache_clear()


def as_still(image: np.ndarray):
    """H x W x 3 uint8 -> the harness's one-frame clip Tensor[1, 3, 1, H, W] in [-1, 1]."""
    import torch

    return (torch.from_numpy(image.copy()).permute(2, 0, 1)[None, :, None].float() / 127.5) - 1


def test_the_ocr_reward_reads_the_quoted_text_in_a_scene_and_on_a_known_line():
    from grpo_bench.rewards import load

    scene = np.full((256, 256, 3), 200, np.uint8)  # grey ground, the sign in its middle: detection finds it
    scene[100:132, 64:192] = rendered("hello world")
    detect = load("ocr")
    assert detect(as_still(scene), ['a sign that says "Hello World"'])["ocr"].item() == 1.0
    assert detect(as_still(scene), ['a sign that says "goodbye"'])["ocr"].item() < 0.4
    assert detect(as_still(noise()), ['a sign that says "cat"'])["ocr"].item() < 0.4
    line = load("ocr", detect=False)  # recognition only: the whole image is the line
    assert line(as_still(rendered("cat")), ['the word "cat"'])["ocr"].item() == 1.0
    assert line(as_still(scene), ['a sign that says "hello world"'])["ocr"].item() < 0.4  # no detector: misread


@pytest.mark.parametrize("cause, fix", [
    ("libGL.so.1: cannot open shared object file: No such file or directory", "apt-get install libgl1"),
    ("No module named 'onnxruntime'", "reinstall it: pip install 'grpo-bench[ocr]'"),
])
def test_an_installed_package_that_does_not_import_names_the_fix(monkeypatch, cause, fix):
    import importlib

    real = importlib.import_module

    def failing(name, *args):
        if name == rapid_ocr.MODULE:
            raise ImportError(cause)
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", failing)
    rapid_ocr.engine.cache_clear()
    try:
        with pytest.raises(UserError, match=f"installed but does not import \\({cause[:20]}.*{re.escape(fix)}"):
            recognize([rendered("cat")])
    finally:
        rapid_ocr.engine.cache_clear()


def _collapse(path: tuple[int, ...], blank: int = 0) -> tuple[int, ...]:
    """CTC's reading of one path of classes: merge repeats, then drop blanks."""
    merged = [c for i, c in enumerate(path) if i == 0 or c != path[i - 1]]
    return tuple(c for c in merged if c != blank)


@pytest.mark.parametrize("target", [(1, 2), (1, 1), (2,), ()])
def test_target_probability_sums_every_path_that_reads_as_the_target(target):
    """Against brute force: the probability of each of the 4^5 paths through 5 frames of 4 classes, summed over the
    paths whose CTC reading is the target (a repeated letter needs a blank between its frames)."""
    import itertools

    probs = np.random.default_rng(len(target)).dirichlet(np.ones(4), size=5)
    brute = sum(np.prod([probs[t, c] for t, c in enumerate(path)])
                for path in itertools.product(range(4), repeat=5) if _collapse(path) == target)
    assert rapid_ocr.target_probability(probs, list(target)) == pytest.approx(brute, rel=1e-9)


def test_the_greedy_path_of_the_frame_probabilities_is_recognizes_reading():
    """``frame_probabilities`` is the very input ``recognize`` decodes: the argmax path, merged and without blanks,
    is its reading, on clean and noisy lines of several widths."""
    images = [rendered("cat"), rendered("hello world"), noise(), rendered("moon")[:, :, 0]]
    characters, frames = rapid_ocr.frame_probabilities(images)
    assert characters[0] == "blank"
    greedy = ["".join(characters[c] for c in _collapse(tuple(f.argmax(axis=1)))).strip() for f in frames]
    assert greedy == recognize(images)
    assert all(np.allclose(f.sum(axis=1), 1, atol=1e-4) for f in frames)  # distributions over the characters
