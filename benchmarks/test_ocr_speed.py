"""OCR speed on one core (grpo_bench/rewards/rapid_ocr.py): recognition only on 128 x 32 single lines, and
detection + recognition on a 512 x 512 image with one line (flow_grpo's OCR task at SD3.5's size).

One ONNX thread, the engine built and warmed first; reported as pytest-benchmark stats per call of a
batch, plus seconds per image in extra_info. Text is Pillow's shipped font (tests/_support/rendered_text.py).

    python -m pytest benchmarks/test_ocr_speed.py -s -p no:randomly
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "_support"))
from rendered_text import noise, rendered  # noqa: E402

from grpo_bench.rewards.rapid_ocr import engine, read_lines, recognize  # noqa: E402

LINES = [rendered("hello world"), rendered("cat"), noise()] * 10


@pytest.mark.benchmark
def test_recognize_128x32(benchmark):
    engine(1)
    assert recognize(LINES[:3]) == ["hello world", "cat", ""]  # warm-up, and what is timed reads right
    benchmark.pedantic(recognize, args=(LINES,), rounds=3, iterations=1)
    benchmark.extra_info["s_per_image"] = benchmark.stats.stats.min / len(LINES)


@pytest.mark.benchmark
def test_read_lines_512x512(benchmark):
    scene = np.full((512, 512, 3), 200, np.uint8)
    scene[240:272, 192:320] = rendered("hello world")
    assert read_lines([scene]) == ["hello world"]
    batch = [scene] * 5
    benchmark.pedantic(read_lines, args=(batch,), rounds=3, iterations=1)
    benchmark.extra_info["s_per_image"] = benchmark.stats.stats.min / len(batch)
