"""Offline OCR with the PP-OCRv4 ONNX models that ship inside the ``rapidocr-onnxruntime`` wheel: no weights
to download, no Paddle, CPU by default.

Readings:

    recognize(images)   recognition only, on images that each hold one known line of text (a rendered
                        word, a crop): the text recogniser alone, no detector, no angle classifier
    frame_probabilities(images)
                        the same recognition's per-frame character distributions (its CTC output), from
                        which ``recognize`` takes the greedy reading and ``target_probability`` the chance
                        of one given reading
    read_lines(images)  detection + recognition (flow_grpo's OCR reward: the lines found anywhere in a
                        generated image, each kept when its confidence is >= 0.5, joined in reading order)

and one score, ``word_score(text, target)`` = 1 - normalised edit distance (see its docstring).

Images are H x W (grey) or H x W x 3 (RGB) uint8 numpy arrays. The wheel's engine expects OpenCV's BGR
order for a 3-channel array, so RGB is reversed here before it is read.

Supported: rapidocr-onnxruntime 1.3.5 to 1.4.x (``pip install 'grpo-bench[ocr]'``); a missing or other
version is one line naming the pip command, before any image is read. The engine is built once per
thread count and kept (its three ONNX sessions load in about 0.1 s).
"""

from __future__ import annotations

import functools
import importlib
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from grpo_bench.errors import UserError

DISTRIBUTION = "rapidocr-onnxruntime"
MODULE = "rapidocr_onnxruntime"
SUPPORTED = ((1, 3, 5), (2, 0, 0))
"""[lowest, first unsupported) (major, minor, patch). Tested: 1.3.5, 1.3.6, 1.3.12, 1.3.25, 1.4.0 and 1.4.4 read
the rendered test lines right; 1.3.0, 1.3.2 and 1.3.4 run the detector even when called with ``use_det=False``
(a line comes back as two boxes). 2.x is a different package (``rapidocr``)."""
INSTALL = "pip install 'grpo-bench[ocr]' (or: pip install 'rapidocr-onnxruntime>=1.3.5,<2')"


def check_installed() -> str:
    """The installed version of rapidocr-onnxruntime, or one UserError line naming the pip command."""
    from importlib import metadata

    try:
        version = metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        raise UserError(f"OCR needs the {DISTRIBUTION} package, which is not installed; {INSTALL}") from None
    found = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", version)
    key = tuple(int(part or 0) for part in found.groups()) if found else (-1, -1, -1)
    if not SUPPORTED[0] <= key < SUPPORTED[1]:
        raise UserError(f"OCR supports {DISTRIBUTION} >=1.3.5,<2, found {version}; {INSTALL}")
    return version


@functools.lru_cache(maxsize=4)
def engine(threads: int = 1) -> Any:
    """The RapidOCR engine with ``threads`` intra-op threads per ONNX session (1: one core, the measured
    setting; OCR runs beside training, which owns the other cores)."""
    check_installed()
    try:
        module = importlib.import_module(MODULE)
    except ImportError as exc:  # e.g. onnxruntime, or OpenCV without the system's libGL (a bare container)
        cause = str(exc).splitlines()[0][:120]
        fix = ("OpenCV needs libGL: apt-get install libgl1, or pip install opencv-python-headless" if "libGL" in cause
               else f"reinstall it: {INSTALL}")
        raise UserError(f"OCR: {DISTRIBUTION} is installed but does not import ({cause}); {fix}") from None
    return module.RapidOCR(intra_op_num_threads=int(threads), inter_op_num_threads=1)


def bgr(image: Any, index: int) -> np.ndarray:
    """One input image as the engine's contiguous BGR uint8 array; UserError naming the image otherwise."""
    if not isinstance(image, np.ndarray) or image.dtype != np.uint8 or not (
            image.ndim == 2 or (image.ndim == 3 and image.shape[2] == 3)):
        what = (f"{image.dtype} array of shape {image.shape}" if isinstance(image, np.ndarray)
                else type(image).__name__)
        raise UserError(f"OCR image {index}: expected an H x W or H x W x 3 uint8 array, got {what}")
    if min(image.shape[:2]) < 1:
        raise UserError(f"OCR image {index}: empty image of shape {image.shape}")
    rgb = np.repeat(image[:, :, None], 3, axis=2) if image.ndim == 2 else image
    return np.ascontiguousarray(rgb[:, :, ::-1])


def recognize(images: Sequence[np.ndarray], threads: int = 1) -> list[str]:
    """The one line of text in each image (recognition only), stripped; '' where nothing is read."""
    ocr = engine(threads)
    texts = []
    for i, image in enumerate(images):
        result, _ = ocr(bgr(image, i), use_det=False, use_cls=False, use_rec=True)
        if not result or len(result) != 1:  # rec-only always returns one [text, score] per image
            raise RuntimeError(f"OCR image {i}: the recogniser returned {result!r}, not one line")
        texts.append(str(result[0][0]).strip())
    return texts


def frame_probabilities(images: Sequence[np.ndarray], threads: int = 1) -> tuple[list[str], list[np.ndarray]]:
    """(the recogniser's characters, index 0 its CTC blank; per image its Tensor[frames, characters] of per-frame
    probabilities): the very input ``recognize`` decodes (same resizing and padding, one image at a time), so
    the greedy path through it is that reading. It reads the engine's recogniser (``text_rec``) directly; a test
    checks that greedy path against ``recognize`` on the installed version."""
    ocr = engine(threads)
    rec = ocr.text_rec
    _, height, width = rec.rec_image_shape
    frames = []
    for i, image in enumerate(images):
        line, _, _ = ocr.preprocess(bgr(image, i))
        wh_ratio = max(width / height, line.shape[1] / line.shape[0])
        frames.append(rec.session(rec.resize_norm_img(line, wh_ratio)[np.newaxis].astype(np.float32))[0][0])
    return list(rec.postprocess_op.character), frames


def target_probability(probs: np.ndarray, target: Sequence[int], blank: int = 0) -> float:
    """P(the CTC reading of per-frame distributions Tensor[frames, classes] is ``target``), summed over every
    alignment (the CTC forward pass, torch's ``ctc_loss``): the chance that sampling one class a frame, then
    merging repeats and dropping blanks, yields exactly ``target`` (class indices, none of them ``blank``)."""
    import torch

    if not len(target):
        return float(np.prod(probs[:, blank]))
    logp = torch.from_numpy(np.log(np.clip(probs, 1e-30, None))).double()[:, None, :]
    nll = torch.nn.functional.ctc_loss(logp, torch.tensor([list(target)]), torch.tensor([probs.shape[0]]),
                                       torch.tensor([len(target)]), blank=blank, reduction="sum", zero_infinity=False)
    return float(torch.exp(-nll))


def read_lines(images: Sequence[np.ndarray], threads: int = 1) -> list[str]:
    """The text found anywhere in each image (detection + recognition, no angle classifier): its lines of
    confidence >= 0.5 (the engine's ``text_score``) in reading order, joined by spaces; '' where none."""
    ocr = engine(threads)
    texts = []
    for i, image in enumerate(images):
        result, _ = ocr(bgr(image, i), use_det=True, use_cls=False, use_rec=True)
        texts.append(" ".join(str(line[1]).strip() for line in result or []).strip())
    return texts


def normalise(text: str) -> str:
    """Case-folded, every run of whitespace (the recogniser's ideographic space included) one space, ends
    stripped: the recogniser pads a short word with spaces, and case is not what a prompt asks for."""
    return " ".join(text.casefold().split())


def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance: insertions, deletions and substitutions of one character each."""
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def word_score(text: str, target: str) -> float:
    """1 - d / max(len(text), len(target)) in [0, 1], d the edit distance of the normalised strings
    (``normalise``: case-insensitive, whitespace runs as one space): 1 for an exact reading, 0 when no
    character lines up; extra characters read beside the target cost as much as missing ones. Both empty: 1."""
    text, target = normalise(text), normalise(target)
    longest = max(len(text), len(target))
    return 1.0 if longest == 0 else 1 - edit_distance(text, target) / longest
