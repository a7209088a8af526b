"""Portable CPU kernels: one commit computes nearly the same numbers on x86-64 CPUs with AVX2 (two measured).

Float kernels differ between CPUs: torch, oneDNN and MKL each pick the widest code their CPU runs (AMX,
AVX512-BF16, AVX512, AVX2), and each sums in its own order, so one cell trained on two kinds of CPU is two draws
(docs/statistics.md). A table whose looks must run on whatever machine is at hand declares ``budget.cpu_kernels:
avx2``: ``run`` then caps all three at AVX2 before any cell starts, and the world runs at fp32 (bf16 autocast needs
the wider units). Measured (docs/statistics.md, "Looks on any machine"): six cells of ``suites/field_image.yaml``
(both tasks, both reward tracks) trained under the caps on an Intel Xeon with AVX512-BF16 gave the same cells of an
AMD EPYC with AVX2 only every checker score and every reading at every eval as the same float (the text reader's
glyph scores within 2e-7), and their training rewards within 5e-6 relative; the KL, gradient norm and weight change
differ by up to 2e-5 relative (some reduction the caps do not reach), and that gap did not grow between update 40
and 120. Natively the two CPUs' cells are two draws (0.03 apart in held-out score by update 120). The price is
bf16's speed: there a compositional cell took 125 compute-s under the caps against 109 at bf16 (the AMD EPYC with
AVX512-BF16 the table first ran on: 55).

``native`` (the default) leaves the kernels to the CPU, the fastest, and a table then runs on one kind of CPU.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from grpo_bench.errors import UserError

CHOICES = ("native", "avx2")
CAPS = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_CBWR": "AVX2"}
"""torch's own kernels, oneDNN's (convolutions, bf16 matmuls) and MKL's code branch (fp32 matmuls), each capped
at AVX2. Each is read once, when its library first runs a kernel: they are set before a worker imports torch."""


def capped() -> bool:
    """Whether this process runs under the AVX2 caps (all three set as ``CAPS`` sets them)."""
    return all(os.environ.get(k, "").upper() == v.upper() for k, v in CAPS.items())


def check(choice: object, where: str = "") -> str:
    """``choice`` if it names kernels (``CHOICES``), else one line naming ``where`` and the allowed values."""
    if choice not in CHOICES:
        raise UserError(f"{where}cpu_kernels must be one of {', '.join(CHOICES)}, got {choice!r}")
    return str(choice)


def use(choice: str, where: str = "") -> None:
    """Run this process and the workers it spawns on ``choice``'s kernels (``avx2``: set ``CAPS``). Refused in one
    line where torch here already runs other kernels (the caps are read once, so they would not take)."""
    if check(choice, where) == "native":
        return
    os.environ.update(CAPS)
    if "torch" in sys.modules:
        import torch

        level = str(torch.backends.cpu.get_cpu_capability())
        if level not in ("AVX2", "DEFAULT"):
            raise UserError(f"{where}cpu_kernels avx2: torch in this process already runs {level} kernels; "
                            "start a new process with ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_CBWR=AVX2")


def for_suite(suite: Any) -> Any:
    """``suite`` (a suite/spec.py ``Suite``, not imported: this module sits below train/) after ``use`` of its
    ``budget.cpu_kernels``: called where a command loads a suite to run, before anything there can make torch choose
    its kernels."""
    choice = str(suite.resources.get("cpu_kernels", "native"))
    asked = {**suite.base, **suite.overrides}.get("mixed_precision", "auto")
    if choice == "avx2" and asked not in ("auto", "no"):  # bf16 below AVX512 is emulated: neither fast nor portable
        raise UserError(f"{suite.path}: mixed_precision {asked!r} with budget.cpu_kernels avx2: the portable kernels "
                        "run fp32; allowed: auto, no")
    use(choice, f"{suite.path}: budget.")
    return suite
