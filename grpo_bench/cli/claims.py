"""``grpo-bench claims REPORTS_DIR``: the ledger of the paper's claims (``grpo_bench/report/claims/``)
rendered to ``REPORTS_DIR/CLAIMS.md`` from the stored results alone; nothing is trained or sampled."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from grpo_bench.errors import UserError


def claims_command(reports_dir: Path, out: Path | None, console: Console) -> int:
    from grpo_bench import preflight

    if not reports_dir.is_dir():
        raise UserError(f"{reports_dir}: not a folder; give the folder that holds the stored reports "
                        "(e.g. reports, with reports/main_table/results.parquet)")
    target = out if out is not None else reports_dir / "CLAIMS.md"
    preflight.out_file(target, "--out" if out is not None else "claims ledger")
    from grpo_bench.report.claims import write_ledger
    from grpo_bench.report.claims.fingerprint_lines import read_fingerprint_lines
    from grpo_bench.report.claims.provenance import read_fingerprints

    read_fingerprints(reports_dir)  # shared by every suite: damaged, it is refused, not skipped
    read_fingerprint_lines(reports_dir)

    path, verdicts = write_ledger(reports_dir, target)
    from grpo_bench.report.claims.finding import VERDICTS as kinds

    counts = {k: sum(v.verdict == k for v in verdicts) for k in kinds}
    counts = {k: n for k, n in counts.items() if n or k in kinds[:3]}
    console.print(f"claims: {path} ({', '.join(f'{n} {k}' for k, n in counts.items())} of {len(verdicts)})",
                  markup=False, highlight=False)
    return 0
