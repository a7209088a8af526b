"""benchmarks/behaviour_fingerprint.py --record: the printed lines' sha256 lands in the fingerprints file under this
checkout's commit and this CPU, and the lines behind it in fingerprint_lines.json (the short runs are replaced by
fixed lines here: what is tested is the recording, which no other test reaches)."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import behaviour_fingerprint  # noqa: E402

from grpo_bench.suite.machine import cpu_identity, cpu_of, host, kernels, machine  # noqa: E402
from grpo_bench.train.export import provenance  # noqa: E402


def test_record_stores_the_printed_lines_under_commit_and_cpu(tmp_path, monkeypatch, capsys):
    def fixed(method, kl, folder, steps=3):  # two 16-hex hashes, as the short runs give
        return f"{len(method):016x}", f"{steps:016x}"

    monkeypatch.setattr(behaviour_fingerprint, "fingerprint", fixed)
    target = tmp_path / "fingerprints.json"
    monkeypatch.setattr(sys, "argv", ["behaviour_fingerprint.py", "--record", str(target)])
    behaviour_fingerprint.main()
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 * len(behaviour_fingerprint.METHODS) + len(behaviour_fingerprint.FIELD)
    assert lines[0] == f"dance_grpo fixed {10:016x} {3:016x}" and lines[-1] == f"diffusion_nft own {13:016x} {6:016x}"
    out = "".join(f"{line}\n" for line in lines)  # sha256sum of the script's stdout
    digest = hashlib.sha256(out.encode()).hexdigest()
    held = json.loads(target.read_text())
    assert held == {provenance()["git_commit"]: {cpu_identity(machine()): digest}}
    assert cpu_identity(machine()) == f"{cpu_of(host())} ({kernels()})"  # the model and its kernels, not the model
    behind = json.loads((tmp_path / "fingerprint_lines.json").read_text())
    assert behind == {digest: lines}
