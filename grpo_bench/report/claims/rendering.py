"""CLAIMS.md: the ledger's text (a row per claim, its sources, every comparison) from the verdicts, and
writing it into the reports folder."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from grpo_bench.report import data
from grpo_bench.report.claims.catalogue import CLAIMS, Claim
from grpo_bench.report.claims.finding import CONTRADICTED, SUPPORTED, UNDECIDED
from grpo_bench.report.claims.suite import Suite
from grpo_bench.report.claims.table1 import Samplers
from grpo_bench.report.claims.verdicts import Verdict, evaluate


def ledger(root: Path, claims: Sequence[Claim] = CLAIMS) -> tuple[str, list[Verdict]]:
    """CLAIMS.md's text and the verdicts behind it."""
    cache: dict[str, Suite | Exception] = {}
    verdicts = [evaluate(c, root, cache) for c in claims]
    rows = [[str(i), v.claim.text, f"`{v.claim.suite}`", "; ".join(c.what for c in v.claim.checks), v.effect,
             f"**{v.verdict}**", v.needed] for i, v in enumerate(verdicts, 1)]
    from grpo_bench.report.tables import markdown

    tally = {k: sum(v.verdict == k for v in verdicts) for k in (SUPPORTED, CONTRADICTED, UNDECIDED)}
    lines = [
        "# The paper's claims, tested on the stored reports", "",
        "Rendered by `grpo-bench claims " + root.name + "` from the stored results alone (nothing re-run): "
        f"{tally[SUPPORTED]} supported, {tally[CONTRADICTED]} contradicted, {tally[UNDECIDED]} undecided of "
        f"{len(verdicts)}.", "",
        markdown(["#", "Claim", "Suite", "Test", "Measured (95% interval over seeds)", "Verdict", "Would need"],
                 rows, "lllllll"),
        "How to read: learning = held-out eval after the last update minus at update 0 (Table 2); a paired "
        "difference is taken per seed and its interval is the 95% t-interval over seeds (the seed is the cluster). "
        "A comparison is *supported* when its Holm-adjusted paired t-test (over the check's comparisons) is below "
        "5% in the claimed direction, *contradicted* when it is below 5% the other way or the two are equivalent "
        "(TOST at 5% within ± the suite's minimum effect: no gain of the size that matters), *undecided* "
        "otherwise; *Would need* gives the seeds for 80% power at the minimum effect, at level 5% / the number of "
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
            sources.append(f"- `{name}/results.parquet`: {len(cells)} cells, seeds {', '.join(map(str, seeds))}")
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
