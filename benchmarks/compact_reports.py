"""Re-encode a reports folder compactly (grpo_bench/report/compact.py): every results table in the results
writer's layout and encoding (grpo_bench/suite/results_codec.py; checked to read back as the same frame before it
is replaced) and every PNG figure as a 256-colour palette image; prints the bytes before and after, and the
tracked tree's size against its limit (grpo_bench/report/compact.py TREE_LIMIT_BYTES).

    python benchmarks/compact_reports.py reports          # after adding a result block under reports/
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from grpo_bench.errors import UserError
from grpo_bench.report.compact import TREE_LIMIT_BYTES, compact_folder


def tracked_bytes(root: Path) -> int | None:
    """Bytes of the files git tracks under ``root`` (None outside a git checkout)."""
    try:
        names = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return sum((root / n).stat().st_size for n in names.decode().split("\0") if n and (root / n).is_file())


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python benchmarks/compact_reports.py REPORTS_FOLDER", file=sys.stderr)
        return 2
    try:
        done = compact_folder(Path(argv[0]))
    except UserError as exc:
        print(f"compact_reports: {exc}", file=sys.stderr)
        return 2
    for suffix, c in done.items():
        print(f"{suffix}: {c.files} files, {c.before / 1e6:.2f} MB -> {c.after / 1e6:.2f} MB")
    size = tracked_bytes(Path(__file__).resolve().parents[1])
    if size is not None:
        print(f"tracked tree: {size / 1e6:.2f} MB of {TREE_LIMIT_BYTES / 1e6:.0f} MB (git ls-files; new files count "
              "once added)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
