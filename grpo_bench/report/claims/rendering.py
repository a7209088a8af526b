"""CLAIMS.md: the ledger's text (a row per claim, its sources, every comparison) from the verdicts, and
writing it into the reports folder."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from grpo_bench.report import data
from grpo_bench.report.claims.catalogue import CLAIMS, Claim
from grpo_bench.report.claims.finding import CONTRADICTED, SUPPORTED, UNDECIDED, VERDICTS
from grpo_bench.report.claims.suite import Suite
from grpo_bench.report.claims.table1 import Samplers
from grpo_bench.report.claims.verdicts import Verdict, combine, evaluate


def ledger_wide(verdicts: Sequence[Verdict]) -> tuple[list[str], int]:
    """Each claim's verdict with the Holm family the whole ledger (every paired t-test and every equivalence test
    of every claim corrected together), instead of each check's own comparisons; and the number of tests. Each
    test keeps its own level (5%, or its sequential suite's look level: claims/look.py): an adjusted p is held
    against it, so a test's chance of a false decision is at most its level over the number of true nulls, as in
    Holm's proof."""
    from grpo_bench.report.claims.learning import decide
    from grpo_bench.report.power import holm

    tested = [f for v in verdicts for _, _, fs in v.checks for f in fs if math.isfinite(f.p)]
    adjusted, adjusted_eq = holm([f.p for f in tested]), holm([f.p_equivalent for f in tested])
    redecided = {id(f): decide(p, f.toward, q, f.level) for f, p, q in zip(tested, adjusted, adjusted_eq)}
    out = []
    for v in verdicts:
        checks = [combine([redecided.get(id(f), f.verdict) for f in fs], check.quantifier) for check, _, fs in v.checks]
        out.append(combine(checks))
    return out, len(tested)


def ledger(root: Path, claims: Sequence[Claim] = CLAIMS) -> tuple[str, list[Verdict]]:
    """CLAIMS.md's text and the verdicts behind it."""
    from grpo_bench.report.claims.as_named import read_tuned
    from grpo_bench.report.claims.fingerprint_lines import read_fingerprint_lines
    from grpo_bench.report.claims.provenance import read_fingerprints

    # the records the ledger trusts are data from disk: a malformed one is one line (exit 2) before any claim
    read_fingerprints(root)
    read_fingerprint_lines(root)
    for name in dict.fromkeys(c.suite for c in claims):
        read_tuned(root / name)
    cache: dict[str, Suite | Exception] = {}
    verdicts = [evaluate(c, root, cache) for c in claims]
    wide, n_tests = ledger_wide(verdicts)
    rows = [[str(i), v.claim.text, f"`{v.claim.suite}`", "; ".join(c.what for c in v.claim.checks), v.effect,
             f"**{v.verdict}**", w if w == v.verdict else f"**{w}**", v.needed]
            for i, (v, w) in enumerate(zip(verdicts, wide), 1)]
    from grpo_bench.report.tables import markdown

    kinds = VERDICTS
    tally = {k: sum(v.verdict == k for v in verdicts) for k in kinds}
    counted = ", ".join(f"{tally[k]} {k}" for k in kinds if tally[k] or k in (SUPPORTED, CONTRADICTED, UNDECIDED))
    lines = [
        "# The paper's claims, tested on the stored reports", "",
        "Rendered by `grpo-bench claims " + root.name + "` from the stored results alone (nothing re-run): "
        f"{counted} of {len(verdicts)}.", "",
        f"Multiplicity: the declared Holm family is each check's own comparisons (the *Verdict* column); the "
        f"*Ledger-wide* column corrects all {n_tests} paired tests of the ledger together (t-tests and equivalence "
        "tests alike); a verdict that differs between the two readings is in bold there. A suite run under a "
        "sequential plan (`run --until-decided`) is read as a look of that plan: its tests are decided at the level "
        "the plan's spending function spends at the seeds stored (Sources; `grpo_bench/report/claims/look.py`), "
        "not at 5%, in both readings.", "",
        markdown(["#", "Claim", "Suite", "Test", "Measured (95% interval over seeds)", "Verdict", "Ledger-wide",
                  "Would need"], rows, "llllllll"),
        "How to read: learning = held-out eval after the last update minus at update 0 (Table 2); a paired "
        "difference is taken per seed and its interval is the 95% t-interval over seeds (the seed is the cluster). "
        "A comparison is *supported* when its Holm-adjusted paired t-test (over the check's comparisons) is below "
        "5% in the claimed direction, *contradicted* when it is below 5% the other way or the two are equivalent "
        "(TOST at 5% within ± the suite's minimum effect, Holm-adjusted over the same comparisons: no gain of the "
        "size that matters), *undecided* otherwise; *not tested* when the configuration the claim names is not "
        "among the stored results (no other row stands in for it; *Would need* names the suite that tests it) or "
        "only a labelled ablation row is; *not tested as named* when the rows are stored but are not the "
        "configuration the claim names (development or tuning seeds, no tuning record, or an lr other than the "
        "row's own tuned choice, e.g. borrowed from another row: the reason is given and the measured effect "
        "shown, but it decides nothing and stays out of the Holm family); *not verified* when a comparison reads "
        "cells of a dirty tree (`+dirty`, the whole commit string compared) whose behaviour `fingerprints.json` "
        "does not record; a pair of rows run on different code (commit or precision; `fingerprints.json` records "
        "commits whose behaviour is identical on one CPU: a fingerprint is a (commit, CPU) fact) is not decided; "
        "*Would need* gives the seeds for 80% power at the minimum effect, at level 5% / the number of "
        "comparisons, for the comparison that needs most. The measured column shows the comparison that decides "
        "the verdict (the weakest in the claimed direction). Table 1 is an exact computation (no interval). The "
        "gradient spread is max / min over sampler steps of the mean measured per-step gradient norm; its "
        "interval is the geometric mean's over seeds. Definitions: `grpo_bench/report/claims/`.", "",
        "## Sources", "", *_sources(root, claims, cache), "",
        "## Every comparison", "",
    ]
    for i, v in enumerate(verdicts, 1):
        lines.append(f"### {i}. {v.claim.text} — {v.verdict}")
        lines.append("")
        for check, verdict, findings in v.checks:
            lines.append(f"- {check.what} ({check.quantifier}): **{verdict}**")
            for f in findings:
                extra = f"; would need {f.need_text()}" if f.verdict == UNDECIDED and f.needed else ""
                lines.append(f"  - {f.label}: {f.effect} — {f.verdict}{extra}")
        lines.append("")
    return "\n".join(lines), verdicts


def _sources(root: Path, claims: Sequence[Claim], cache: dict[str, Suite | Exception]) -> list[str]:
    """The Sources list: each suite read (or why not), each Table 1 folder's blocks, the human studies found."""
    sources = []
    for name, suite in sorted(cache.items()):
        if isinstance(suite, Suite):
            cells = data.cells(suite.df)
            seeds = sorted(int(s) for s in cells["seed"].dropna().unique())
            at = f"; {suite.look.text}" if suite.look is not None else ""
            sources.append(f"- `{name}/results.parquet`: {len(cells)} cells, seeds {', '.join(map(str, seeds))}{at}")
        else:
            sources.append(f"- `{name}`: {suite}")
    for name in dict.fromkeys(c.suite for c in claims if any(isinstance(k, Samplers) for k in c.checks)):
        found = sorted((root / name).rglob("table1.csv")) if (root / name).is_dir() else []
        sources.append(f"- `{name}/`: {len(found)} Table 1 block(s) "
                       f"({', '.join(str(p.relative_to(root)) for p in found) or 'none'}), exact")
    studies = [p for p in sorted(root.rglob("table3.csv")) if p.parent.name == "analysis"]
    sources.append(f"- human studies: {', '.join(str(p.relative_to(root)) for p in studies) or 'none stored'}")
    return sources


def write_ledger(root: Path, out: Path | None = None,
                 claims: Sequence[Claim] = CLAIMS) -> tuple[Path, list[Verdict]]:
    """Write CLAIMS.md (to ``out``, default ``root / "CLAIMS.md"``); the path written and the verdicts."""
    from grpo_bench.atomic import atomic_write_text

    text, verdicts = ledger(root, claims)
    path = out if out is not None else root / "CLAIMS.md"
    atomic_write_text(path, text)
    return path, verdicts
