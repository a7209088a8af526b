"""The ledger of the paper's claims: ``grpo-bench claims REPORTS_DIR`` writes ``REPORTS_DIR/CLAIMS.md``.

Every claim is one entry of ``CLAIMS``: the paper's sentence, the stored suite that tests it and a few
*checks*, each a small declarative object that reads only what a report folder stores
(``<suite>/results.parquet``; ``samplers/**/table1.{csv,md}``; a human study's ``analysis/table3.csv``).
Nothing is trained or sampled again. A check yields one *finding* per comparison it makes, each
``supported``, ``contradicted`` or ``undecided``:

    Beats     per seed, the row's learning minus a competitor's (paired by seed, as Table 2b): supported
              when the Holm-adjusted paired t-test (over the check's comparisons) is below 5% in the
              claimed direction; contradicted when it is below 5% the other way, or when the two are
              equivalent (TOST at 5%, ± the suite's min effect: the row does not beat it by the minimum
              effect); a suite run under a sequential plan is read at its look's level instead of 5%
              (look.py); undecided otherwise, with the seeds for 80% power at the min effect (at level
              5% / comparisons, so that all of them could be decided)
    Moves     one row's own learning, tested against 0 the same way (e.g. "the oracle falls")
    Spread    per seed, the max / min over sampler steps of the mean per-step gradient norm; its
              geometric mean's 95% t-interval (over seeds, on the log) below or above a bound
    Samplers  Table 1's exact Gaussian computation: no sampling error, so a strict comparison decides
    WinRates  a human study's win rates (raters and prompts resampled): the interval above or below 0.5
    Faster    a speed claim at equal quality: one row's learning at an eval taken at a fraction of another's
              training compute non-inferior to the other's at its end, with the part of the saving that is a
              dropped KL reference; *not tested* while the suite that makes those rows (``tested_by``) has not
              stored them

A comparison the stored rows cannot decide is labelled instead: *not verified* where it reads cells of a dirty
tree (``+dirty``, the whole commit string kept) whose behaviour ``fingerprints.json`` does not record
(provenance.py: a fingerprint is a (commit, CPU) fact); *not tested as named* where the claim names its rows at
their tuned settings on test seeds (``Claim.as_named``) and a row ran on development or tuning seeds, untuned, or
at an lr other than its own tuned choice (as_named.py). A labelled comparison is shown, never decided.

A check holds for ``every`` or for ``some`` of its findings; a claim is supported when all its checks are,
contradicted when one is, else the first open label (verdicts.py ``OPEN_KINDS``), else undecided. Intervals and
tests are the report's own (``stats.mean_ci``, ``power.paired_p``, ``power.holm``, ``power.equivalent``,
``power.seeds_needed``).

Modules, in reading order:

    finding.py      Finding, the verdicts and the labels
    provenance.py   which code a cell ran: whole commit strings, fingerprints per (commit, CPU), one
                    behaviour for the rows a comparison reads
    fingerprint_lines.py  the printed lines behind each fingerprint (fingerprint_lines.json), self-verifying
    as_named.py     whether a row is the one a claim names: test seeds, its own tuned choice (tuned.json)
    look.py         the level a suite is decided at: 5%, or its sequential plan's at the look its seeds reached
    suite.py        Suite: the view of one stored suite that the checks read
    learning.py     Beats, Moves (paired learning, Holm-adjusted t-tests)
    spread.py       Spread (per-step gradient norms)
    table1.py       Samplers (Table 1, exact)
    speed.py        Faster (speed claims, on training compute)
    human_study.py  WinRates (a human study's Table 3)
    catalogue.py    Claim and CLAIMS
    verdicts.py     combine, evaluate, Verdict
    rendering.py    ledger, write_ledger (CLAIMS.md)
"""

from grpo_bench.report.claims.catalogue import CLAIMS, Check, Claim
from grpo_bench.report.claims.finding import CONTRADICTED, NOT_TESTED, SUPPORTED, UNDECIDED, Finding
from grpo_bench.report.claims.human_study import WinRates
from grpo_bench.report.claims.learning import Beats, Moves
from grpo_bench.report.claims.rendering import ledger, write_ledger
from grpo_bench.report.claims.speed import Faster
from grpo_bench.report.claims.spread import Spread
from grpo_bench.report.claims.suite import Suite
from grpo_bench.report.claims.table1 import Samplers
from grpo_bench.report.claims.verdicts import Verdict, combine, evaluate

__all__ = [
    "CLAIMS", "CONTRADICTED", "NOT_TESTED", "SUPPORTED", "UNDECIDED", "Beats", "Check", "Claim", "Faster", "Finding",
    "Moves", "Samplers",
    "Spread", "Suite", "Verdict", "WinRates", "combine", "evaluate", "ledger", "write_ledger",
]
