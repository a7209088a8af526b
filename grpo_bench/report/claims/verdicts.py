"""A claim's verdict: each check's findings combined by its quantifier, the checks combined into the claim's
verdict, and the comparison and the seeds that the ledger shows for it."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from grpo_bench.report.claims.catalogue import Check, Claim
from grpo_bench.report.claims.finding import (
    CONTRADICTED,
    DEPENDS,
    NOT_AS_NAMED,
    NOT_TESTED,
    NOT_VERIFIED,
    SUPPORTED,
    UNDECIDED,
    Finding,
)
from grpo_bench.report.claims.human_study import WinRates
from grpo_bench.report.claims.suite import Suite
from grpo_bench.report.claims.table1 import Samplers

OPEN_KINDS = (NOT_TESTED, NOT_AS_NAMED, NOT_VERIFIED, DEPENDS)
"""Verdicts that are neither a decision nor a plain lack of seeds, in the order one stands for a claim."""


@dataclass
class Verdict:
    claim: Claim
    verdict: str
    effect: str
    needed: str
    checks: list[tuple[Check, str, list[Finding]]]


def combine(verdicts: Sequence[str], quantifier: str = "every") -> str:
    """every: supported if all are, contradicted if one is; some: supported if one is, contradicted if all are.
    Otherwise: not tested where a named configuration is absent, then not tested as named (its rows are not the
    named configuration), then not verified (unrecorded dirty-tree cells), then depends on the reference, then
    undecided."""
    if not verdicts:
        return UNDECIDED
    if quantifier == "some":
        if SUPPORTED in verdicts:
            return SUPPORTED
        if all(v == CONTRADICTED for v in verdicts):
            return CONTRADICTED
    else:
        if CONTRADICTED in verdicts:
            return CONTRADICTED
        if all(v == SUPPORTED for v in verdicts):
            return SUPPORTED
    for open_kind in OPEN_KINDS:
        if open_kind in verdicts:
            return open_kind
    return UNDECIDED


def _deciding(findings: list[Finding], verdict: str) -> Finding:
    """The finding that stands for a check: the first contradicting one, else the weakest of its verdict."""
    same = [f for f in findings if f.verdict == verdict] or findings
    return min(same, key=lambda f: math.inf if math.isnan(f.strength) else f.strength)


def evaluate(claim: Claim, root: Path, cache: dict[str, Suite | Exception] | None = None) -> Verdict:
    """A claim's verdict from the stored report folder ``root / claim.suite``."""
    cache = {} if cache is None else cache
    checks = []
    for check in claim.checks:
        if isinstance(check, (Samplers, WinRates)):
            folder = root / claim.suite if isinstance(check, Samplers) else root
            findings = check.findings(folder) if folder.is_dir() else [
                Finding(claim.suite, NOT_TESTED, f"{folder} not found")]
        else:
            suite = _load(root, claim.suite, cache)
            findings = ([Finding(claim.suite, NOT_TESTED, f"not measured: {suite}")] if isinstance(suite, Exception)
                        else check.findings(suite.for_claim(claim.as_named)))
        checks.append((check, combine([f.verdict for f in findings], check.quantifier), findings))
    verdict = combine([v for _, v, _ in checks])
    # the row shows the check that decides: a contradicting one, else an undecided one, else the weakest
    deciding = next((c for c in checks if c[1] == verdict), checks[0])
    shown = _deciding(deciding[2], deciding[1])
    many = len(deciding[2])
    effect = f"{shown.label}: {shown.effect}" + (f" (deciding comparison of {many})" if many > 1 else "")
    needed = "–"
    if verdict == NOT_TESTED:
        needed = f"a run of `{claim.tested_by}`" if claim.tested_by else "a suite that has the named configuration"
    elif verdict in (NOT_AS_NAMED, NOT_VERIFIED):
        needed = shown.need_text() if shown.needed else "a re-run of the suite"
    elif verdict == UNDECIDED:
        needs = [_needed(fs, check.quantifier) for check, v, fs in checks if v == UNDECIDED]
        texts = [n for n in needs if isinstance(n, str)]
        counts = [n for n in needs if isinstance(n, Finding)]
        if texts:
            needed = texts[0]
        elif counts and len(counts) == len(needs):
            needed = max(counts, key=lambda f: f.needed).need_text()
        else:
            needed = "not computable from these results"
    return Verdict(claim, verdict, effect, needed, checks)


def _needed(findings: list[Finding], quantifier: str) -> Finding | str | None:
    """What an undecided check needs: the finding needing most seeds (every) or least (some), or a text."""
    open_ = [f for f in findings if f.verdict == UNDECIDED]
    texts = [f.needed for f in open_ if isinstance(f.needed, str)]
    if texts:
        return texts[0]
    known = [f for f in open_ if isinstance(f.needed, int)]
    if not known or (quantifier == "every" and len(known) < len(open_)):
        return None
    return (min if quantifier == "some" else max)(known, key=lambda f: f.needed)


def _load(root: Path, name: str, cache: dict[str, Suite | Exception]) -> Suite | Exception:
    """The stored suite ``root / name``, read once per ledger; why it cannot be read, as the exception."""
    if name not in cache:
        from grpo_bench.errors import UserError

        path = root / name / "results.parquet"
        try:
            cache[name] = Suite(root, name) if path.is_file() else FileNotFoundError(f"{path} not found")
        except (UserError, OSError, ValueError, KeyError) as exc:
            cache[name] = exc
    return cache[name]
