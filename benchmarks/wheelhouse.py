"""Build the wheelhouse a bare GPU machine needs to run benchmarks/gpu_check.sh offline.

The device has Python 3.12 with torch, transformers, accelerate, peft, pandas, pyarrow, scipy and matplotlib
(``DEVICE_HAS``) and reaches no package registry. What this project needs beyond them is the closure of its
requirements minus the closure of ``DEVICE_HAS``, both read from this environment's installed metadata, less
``SKIPPED`` (imageio-ffmpeg: a 29 MB ffmpeg binary for MP4 eval videos, which the check never writes), plus
setuptools and wheel (the device builds the project from its tree). Each is pinned at the version installed
here and fetched with ``pip download --no-deps`` for the device's platform. The repository and the
wheelhouse travel together in at most 64 MiB: a wheelhouse over what the tracked tree leaves is refused in
one line (exit 2).

    python benchmarks/wheelhouse.py                         # ./wheelhouse for manylinux x86_64, CPython 3.12
    python benchmarks/wheelhouse.py --host --out /tmp/wh    # for this machine's Python (the offline test)
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

from grpo_bench.report.compact import COPY_LIMIT_BYTES as COPY_LIMIT  # the device copy: tree and wheelhouse

ROOT = Path(__file__).resolve().parents[1]
DEVICE_HAS = ("torch", "transformers", "accelerate", "peft", "pandas", "pyarrow", "scipy", "matplotlib")
SKIPPED = ("imageio-ffmpeg",)
BUILD = ("setuptools", "wheel")
PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_28_x86_64")


def _name(n: str) -> str:
    return re.sub(r"[-_.]+", "-", n).lower()


def closure(roots: list[str]) -> set[str]:
    """Distributions ``roots`` need, transitively, as installed here (extras and unmet markers left out)."""
    seen: set[str] = set()
    todo = [_name(r) for r in roots]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue  # not installed here: not needed by this environment either
        seen.add(name)
        for text in requires:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(_name(req.name))
    return seen


def needed() -> list[str]:
    """``name==version`` of every distribution the device lacks."""
    project = [Requirement(r).name for r in metadata.requires("grpo-bench") or [] if "extra ==" not in r]
    missing = closure(project) - closure(list(DEVICE_HAS)) - {_name(s) for s in SKIPPED}
    return sorted(_pin(n) for n in missing | set(BUILD))


def _pin(name: str) -> str:
    try:
        return f"{name}=={metadata.version(name)}"
    except metadata.PackageNotFoundError:  # a build tool this environment lacks: the newest wheel
        return name


def tracked_bytes() -> int:
    names = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    return sum((ROOT / n).stat().st_size for n in names.decode().split("\0") if n and (ROOT / n).is_file())


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "wheelhouse"))
    ap.add_argument("--host", action="store_true", help="wheels for this machine's Python instead of the device's")
    ap.add_argument("--python-version", default="3.12")
    args = ap.parse_args(argv)
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    pins = needed()
    target = [] if args.host else ["--python-version", args.python_version, "--implementation", "cp",
                                   *[a for p in PLATFORMS for a in ("--platform", p)]]
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:", "-d", str(out),
           *target, *pins]
    if subprocess.run(cmd, check=False).returncode:
        print(f"wheelhouse: pip download failed for {' '.join(pins)}", file=sys.stderr)
        return 2
    size = sum(f.stat().st_size for f in out.glob("*.whl"))
    room = COPY_LIMIT - tracked_bytes()
    if size > room:
        print(f"wheelhouse: {out} holds {size / 1e6:.1f} MB of wheels but the tracked tree leaves {room / 1e6:.1f} MB "
              f"of the 64 MiB device copy; drop a package from it or compact reports/ "
              "(python benchmarks/compact_reports.py reports)", file=sys.stderr)
        return 2
    print(f"wheelhouse: {len(pins)} wheels, {size / 1e6:.1f} MB in {out} ({room / 1e6:.1f} MB allowed): "
          + ", ".join(pins))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
