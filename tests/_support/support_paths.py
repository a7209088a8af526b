"""Where the test suite's shared files live, for tests in any layer folder: this folder (helpers, and the scripts
tests launch as subprocesses, which find the helpers beside them), the golden values and the repository root."""

from __future__ import annotations

from pathlib import Path

SUPPORT = Path(__file__).resolve().parent
TESTS = SUPPORT.parent
ROOT = TESTS.parent
GOLDEN = TESTS / "golden"
