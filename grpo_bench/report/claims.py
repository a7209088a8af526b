"""The ledger of the paper's claims: ``grpo-bench claims REPORTS_DIR`` writes ``REPORTS_DIR/CLAIMS.md``.

Every claim is one entry of ``CLAIMS`` below: the paper's sentence, the stored suite that tests it and a
few *checks*, each a small declarative object that reads only what a report folder stores
(``<suite>/results.parquet``; ``samplers/**/table1.{csv,md}``; a human study's ``analysis/table3.csv``).
Nothing is trained or sampled again. A check yields one *finding* per comparison it makes, each
``supported``, ``contradicted`` or ``undecided``:

    Beats     per seed, the row's learning minus a competitor's (paired by seed, as Table 2b): supported
              when the Holm-adjusted paired t-test (over the check's comparisons) is below 5% in the
              claimed direction; contradicted when it is below 5% the other way, or when the two are
              equivalent (TOST at 5%, ± the suite's min effect: the row does not beat it by the minimum
              effect); undecided otherwise, with the seeds for 80% power at the min effect (at level
              5% / comparisons, so that all of them could be decided)
    Moves     one row's own learning, tested against 0 the same way (e.g. "the oracle falls")
    Spread    per seed, the max / min over sampler steps of the mean per-step gradient norm; its
              geometric mean's 95% t-interval (over seeds, on the log) below or above a bound
    Samplers  Table 1's exact Gaussian computation: no sampling error, so a strict comparison decides
    WinRates  a human study's win rates (raters and prompts resampled): the interval above or below 0.5

A check holds for ``every`` or for ``some`` of its findings; a claim is supported when all its checks are,
contradicted when one is, undecided otherwise. Intervals and tests are the report's own
(``stats.mean_ci``, ``power.paired_p``, ``power.holm``, ``power.equivalent``, ``power.seeds_needed``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from grpo_bench.report import data
from grpo_bench.report.power import ALPHA, equivalent, holm, min_effect_of, min_effects, paired_p, seeds_needed
from grpo_bench.report.stats import mean_ci
from grpo_bench.report.tables import TABLE2

SUPPORTED, CONTRADICTED, UNDECIDED = "supported", "contradicted", "undecided"
METRICS = {title: (column, sign) for title, column, sign in TABLE2}
"""Headline title -> (learning column, +1 higher / -1 lower is better), as in Table 2."""


@dataclass
class Finding:
    """One comparison of one check."""

    label: str
    verdict: str
    effect: str
    strength: float = math.nan
    """How firmly it points the claimed way (a t-like score); the weakest finding stands for its check."""
    needed: int | str | None = None
    """Seeds (or votes, for a study) to decide an undecided finding, or what it needs instead (text);
    None: not computable or not needed."""
    unit: str = "seeds"

    def need_text(self) -> str:
        return self.needed if isinstance(self.needed, str) else f"{self.needed} {self.unit}"


Where = dict[str, Any]


class Suite:
    """One stored report folder, read once: its results table and views of it."""

    def __init__(self, root: Path, name: str):
        from grpo_bench.report import sources

        self.name, self.path = name, root / name
        self.df = data.with_grid_columns(sources.load_frame(self.path))
        self.info = data.suite_info(self.df)
        self.configs = {c: i.get("config", {}) for c, i in data._cell_infos(self.df).items()}
        rows = self.df[self.df["kind"] == "cell"].drop_duplicates("cell")
        self._groups = dict(zip(rows["cell"], rows["group"].astype(str)))
        self._learning: pd.DataFrame | None = None

    @property
    def learning(self) -> pd.DataFrame:
        if self._learning is None:
            self._learning = data.learning(self.df)
        return self._learning

    def min_effect(self, title: str) -> float:
        return min_effect_of(min_effects((self.info.get("report") or {}).get("min_effect")), title)

    def families(self, within: Where, split: Sequence[str]) -> dict[str, list[str]]:
        """Cells matching ``within``, grouped by their values of the ``split`` keys ('reward=world_judge')."""
        out: dict[str, list[str]] = {}
        for cell, cfg in self.configs.items():
            if _matches(cfg, within):
                label = ", ".join(f"{k}={_text(cfg.get(k))}" for k in split)
                out.setdefault(label, []).append(cell)
        return dict(sorted(out.items()))

    def groups(self, cells: Sequence[str], where: Where) -> list[str]:
        """Row labels (groups) of the given cells whose config matches ``where``, in suite order."""
        chosen = {self.group_of(c) for c in cells if _matches(self.configs[c], where)}
        return [g for g in data.group_order(self.df) if g in chosen]

    def group_of(self, cell: str) -> str:
        return self._groups[cell]

    def per_seed(self, cells: Sequence[str], group: str, column: str) -> pd.Series:
        """Learning of ``column`` per seed for one group among the given cells."""
        part = self.learning[self.learning["cell"].isin(cells) & (self.learning["group"] == group)]
        if part.empty or column not in part:
            return pd.Series(dtype=float)
        return part.set_index("seed")[column].astype(float).dropna()


def _matches(cfg: dict, where: Where) -> bool:
    return all(cfg.get(k) == v for k, v in where.items())


def _text(value: Any) -> str:
    return {True: "on", False: "off"}.get(value, str(value)) if isinstance(value, bool) else str(value)


def _short(group: str, keys: Sequence[str]) -> str:
    """A row label without the family's own keys (they are in the family label)."""
    for key in keys:
        group = data.without_key(group, key)
    return group


def _where_text(where: Where) -> str:
    return " ".join(f"{k}={_text(v)}" for k, v in where.items()) or "every row"


def _signed(mean: float, half: float) -> str:
    if not math.isfinite(mean):
        return "–"
    return f"{mean:+.3f}" + (f" ± {half:.3f}" if math.isfinite(half) else "")


def _t_decisions(findings: list[tuple[str, np.ndarray, int, float, str]]) -> list[Finding]:
    """(label, per-seed values, claimed sign, min effect, unit text) -> findings, Holm over the list."""
    adjusted = holm([paired_p(d) for _, d, _, _, _ in findings])
    out = []
    for (label, d, sign, margin, what), p in zip(findings, adjusted):
        mean, half, n = mean_ci(d)
        sd = float(np.std(d, ddof=1)) if n >= 2 else math.nan
        strength = sign * mean / (sd / math.sqrt(n)) if n >= 2 and sd > 0 else sign * math.copysign(math.inf, mean)
        effect = f"{_signed(mean, half)} {what} ({n} seed{'s' if n != 1 else ''})"
        if n < 2:
            out.append(Finding(label, UNDECIDED, effect, math.nan, None))
        elif math.isfinite(p) and p < ALPHA:
            out.append(Finding(label, SUPPORTED if sign * mean > 0 else CONTRADICTED, effect, strength))
        elif equivalent(d, margin):
            out.append(Finding(label, CONTRADICTED, effect + f", equivalent to 0 within ±{margin:g}", strength))
        else:
            needed = seeds_needed(margin, sd, alpha=ALPHA / len(findings)) if sd > 0 else None
            out.append(Finding(label, UNDECIDED, effect, strength, needed))
    return out


@dataclass(frozen=True)
class Beats:
    """``row`` learns more of ``metric`` than each competitor, paired by seed within each family.

    Families: the cells matching ``within``, split by the config keys ``split``. The row is the group
    matching ``row`` (``prefer`` narrows several); competitors are the groups matching any of ``versus``
    (None: every other group of the family)."""

    row: Where
    versus: tuple[Where, ...] | None = None
    within: Where = field(default_factory=dict)
    split: tuple[str, ...] = ()
    metric: str = "Oracle"
    prefer: Where = field(default_factory=dict)
    quantifier: str = "every"

    @property
    def what(self) -> str:
        rivals = "every other row" if self.versus is None else " / ".join(_where_text(v) for v in self.versus)
        scope = [*([_where_text(self.within)] if self.within else []), *(f"per {k}" for k in self.split)]
        return (f"{_where_text(self.row)} vs {rivals}" + (f" ({', '.join(scope)})" if scope else "")
                + f": paired {self.metric} learning")

    def findings(self, suite: Suite) -> list[Finding]:
        column, sign = METRICS[self.metric]
        tests, notes = [], []
        for family, cells in suite.families(self.within, self.split).items():
            rows = suite.groups(cells, self.row)
            preferred = suite.groups(cells, {**self.row, **self.prefer})
            if len(rows) > 1 and self.prefer:
                rows = [g for g in rows if g in preferred] or rows
            missing = f" (no {_where_text(self.prefer)} row)" if self.prefer and not preferred else ""
            if len(rows) != 1:
                notes.append(Finding(f"{family or suite.name}: row {_where_text(self.row)}", UNDECIDED,
                                     f"{len(rows)} rows match ({', '.join(rows) or 'none'})"))
                continue
            rivals = [g for g in data.group_order(suite.df) if g != rows[0] and g in (
                suite.groups(cells, {}) if self.versus is None else
                {x for v in self.versus for x in suite.groups(cells, v)})]
            base = suite.per_seed(cells, rows[0], column)
            for rival in rivals:
                other = suite.per_seed(cells, rival, column)
                seeds = base.index.intersection(other.index)
                d = (base.loc[seeds] - other.loc[seeds]).to_numpy()
                label = f"{_short(rows[0], self.split)}{missing} − {_short(rival, self.split)}" + (
                    f" ({family})" if family else "")
                tests.append((label, d, sign, suite.min_effect(self.metric), self.metric))
        return _t_decisions(tests) + notes if tests else notes or [
            Finding(f"{_where_text(self.row)}", UNDECIDED, "no matching rows in the stored results")]


@dataclass(frozen=True)
class Moves:
    """The learning of ``metric`` of the row matching ``row`` goes the ``direction`` way (+1 up, -1 down)."""

    row: Where
    metric: str
    direction: int
    quantifier: str = "every"

    @property
    def what(self) -> str:
        return f"{_where_text(self.row)}: {self.metric} learning {'> 0' if self.direction > 0 else '< 0'}"

    def findings(self, suite: Suite) -> list[Finding]:
        column, _ = METRICS[self.metric]
        tests = []
        for cells in suite.families({}, ()).values():
            for group in suite.groups(cells, self.row):
                d = suite.per_seed(cells, group, column).to_numpy()
                tests.append((group, d, self.direction, suite.min_effect(self.metric), self.metric))
        if not tests:
            return [Finding(_where_text(self.row), UNDECIDED, "no matching rows in the stored results")]
        return _t_decisions(tests)


@dataclass(frozen=True)
class Spread:
    """Per-step gradient spread (max / min over steps of the mean measured norm) of the rows matching
    ``row``, one finding per ``split`` family: its 95% interval over seeds below (``below``) or above ``bound``."""

    row: Where
    bound: float
    below: bool
    split: tuple[str, ...] = ("method",)
    quantifier: str = "every"

    @property
    def what(self) -> str:
        side = "<" if self.below else ">"
        return f"{_where_text(self.row)}: per-step gradient spread {side} {self.bound:g}× ({self.quantifier} " \
               f"{', '.join(self.split)})"

    def findings(self, suite: Suite) -> list[Finding]:
        grads = data.grads(suite.df)
        out = []
        for family, cells in suite.families({}, self.split).items():
            for group in suite.groups(cells, self.row):
                logs = []
                for _, part in grads[grads["cell"].isin(cells) & (grads["group"] == group)].groupby("seed"):
                    arr = np.vstack([np.asarray(a, dtype=float) for a in part["array"]])
                    with np.errstate(all="ignore"), _quiet():
                        mean = np.nanmean(arr, axis=0)
                    ok = np.isfinite(mean) & (mean > 0)
                    if ok.sum() > 1:
                        logs.append(math.log(mean[ok].max() / mean[ok].min()))
                out.append(self._finding(f"{group} ({family})", np.asarray(logs)))
        return out or [Finding(_where_text(self.row), UNDECIDED, "no gradient diagnostics stored")]

    def _finding(self, label: str, logs: np.ndarray) -> Finding:
        """Geometric mean spread and its interval against the bound (a one-sample t-test on the log)."""
        mean, half, n = mean_ci(logs)
        if n == 0:
            return Finding(label, UNDECIDED, "no gradient diagnostics stored")
        lo, hi = (math.exp(mean - half), math.exp(mean + half)) if math.isfinite(half) else (math.nan, math.nan)
        effect = f"{math.exp(mean):.1f}×" + (f" [{lo:.1f}, {hi:.1f}]" if math.isfinite(lo) else "") + f" ({n} seeds)"
        gap = (math.log(self.bound) - mean) * (1 if self.below else -1)  # > 0: on the claimed side
        sd = float(np.std(logs, ddof=1)) if n >= 2 else math.nan
        strength = gap / (sd / math.sqrt(n)) if n >= 2 and sd > 0 else math.copysign(math.inf, gap)
        if not math.isfinite(lo):
            return Finding(label, UNDECIDED, effect, strength)
        if (hi < self.bound) if self.below else (lo > self.bound):
            return Finding(label, SUPPORTED, effect, strength)
        if (lo > self.bound) if self.below else (hi < self.bound):
            return Finding(label, CONTRADICTED, effect, strength)
        return Finding(label, UNDECIDED, effect, strength, seeds_needed(abs(gap), sd) if sd > 0 else None)


class _quiet:
    """Silence numpy's all-NaN warnings (an untrained step)."""

    def __enter__(self):
        import warnings

        self._ctx = warnings.catch_warnings()
        self._ctx.__enter__()
        warnings.simplefilter("ignore", RuntimeWarning)

    def __exit__(self, *exc):
        return self._ctx.__exit__(*exc)


@dataclass(frozen=True)
class Samplers:
    """Table 1 (``REPORTS_DIR/samplers``): ``kernel``'s |excess over ODE| below ``than``'s in every stored block
    at a matched noise level (the blocks at each method's default level when none is matched)."""

    kernel: str
    than: str
    column: str = "excess_final_var_err"
    quantifier: str = "every"

    @property
    def what(self) -> str:
        return f"abs(excess final variance error over the ODE): {self.kernel} < {self.than}, every matched block"

    def findings(self, folder: Path) -> list[Finding]:
        blocks = []
        for csv in sorted(folder.rglob("table1.csv")):
            md = csv.with_name("table1.md")
            head = md.read_text() if md.is_file() else ""
            steps = re.search(r"T = (\d+)", head)
            level = re.search(r"every kernel at noise level ([0-9.eE+-]+)", head)
            blocks.append((int(steps.group(1)) if steps else None, float(level.group(1)) if level else None, csv))
        matched = [b for b in blocks if b[1] is not None] or blocks
        out = []
        for steps, level, csv in sorted(matched, key=lambda b: (b[0] or 0, b[1] or 0)):
            frame = pd.read_csv(csv)
            mine = frame[frame["kernel"].str.split().str[0] == self.kernel]
            other = frame[frame["kernel"].str.split().str[0] == self.than]
            label = f"T = {steps}, " + (f"noise level {level:g}" if level is not None else "default levels")
            if mine.empty or other.empty or self.column not in frame:
                out.append(Finding(label, UNDECIDED, "kernel missing from Table 1"))
                continue
            a, b = abs(float(mine[self.column].iloc[0])), abs(float(other[self.column].iloc[0]))
            verdict = SUPPORTED if a < b else (CONTRADICTED if a > b else UNDECIDED)
            energy = ""
            if "noise_energy" in frame:
                energy = (f"; noise energy {float(mine['noise_energy'].iloc[0]):.3f} vs "
                          f"{float(other['noise_energy'].iloc[0]):.3f}")
            out.append(Finding(label, verdict, f"{a:.4f} vs {b:.4f} (exact){energy}", b - a))
        return out or [Finding("Table 1", UNDECIDED, f"no table1.csv under {folder}")]


@dataclass(frozen=True)
class WinRates:
    """A human study of ``target`` against each baseline (``analysis/table3.csv`` of a kit stored under the
    reports folder): the 95% interval of every win rate above 0.5."""

    target: str
    quantifier: str = "every"

    @property
    def what(self) -> str:
        return f"human win rate of {self.target} against each baseline, per dimension, > 0.5"

    def findings(self, folder: Path) -> list[Finding]:
        tables = [p for p in sorted(folder.rglob("table3.csv")) if p.parent.name == "analysis"]
        out = []
        for path in tables:
            frame = pd.read_csv(path)
            frame = frame[frame["target"].astype(str).str.contains(self.target, regex=False)]
            for r in frame.itertuples():
                label = f"{r.target} vs {r.baseline}, {r.dimension}"
                if not r.votes:
                    out.append(Finding(label, UNDECIDED, "no votes"))
                    continue
                effect = f"{r.rate:.3f} [{r.ci_low:.3f}, {r.ci_high:.3f}] ({int(r.votes)} votes)"
                verdict = SUPPORTED if r.ci_low > 0.5 else (CONTRADICTED if r.ci_high < 0.5 else UNDECIDED)
                half, gap = (r.ci_high - r.ci_low) / 2, abs(r.rate - 0.5)
                needed = math.ceil(r.votes * (half / gap) ** 2) if verdict == UNDECIDED and gap > 0 else None
                out.append(Finding(label, verdict, effect, (r.rate - 0.5) / half if half > 0 else math.nan,
                                   needed, "votes"))
        return out or [Finding("human study", UNDECIDED, "no human votes stored (no analysis/table3.csv)",
                               needed="a human study (docs/human_study.md)")]


Check = Beats | Moves | Spread | Samplers | WinRates


@dataclass(frozen=True)
class Claim:
    """One sentence of the paper and the checks that test it on the stored reports."""

    key: str
    text: str
    suite: str
    """Report folder under REPORTS_DIR that holds the evidence ('samplers': Table 1's files)."""
    checks: tuple[Check, ...]


CLAIMS: tuple[Claim, ...] = (
    Claim("table2_B", "Table 2, Setting B: SAGE-GRPO with dual KL is the best method", "main_table",
          (Beats(row={"method": "sage_grpo"}, prefer={"kl": "dual"}, within={"setting": "B"}, split=("reward",)),)),
    Claim("table1_noise", "Table 1: SAGE's SDE has less excess noise than FlowGRPO's first-order SDE", "samplers",
          (Samplers(kernel="sage", than="flow"),)),
    Claim("equalizer", "The equalizer shrinks the per-step gradient spread from over 10× to a small constant and "
          "helps every SDE", "ablate_equalizer",
          (Spread(row={"equalizer": False}, bound=10.0, below=False, quantifier="some"),
           Spread(row={"equalizer": True}, bound=2.0, below=True),
           Beats(row={"equalizer": True}, versus=({"equalizer": False},), split=("method",)))),
    Claim("dual_kl", "Dual moving KL beats none / fixed / step-wise / moving KL", "ablate_kl",
          (Beats(row={"kl": "dual", "stepwise_ref": "rollout"},
                 versus=({"kl": "none"}, {"kl": "fixed"}, {"kl": "stepwise", "stepwise_ref": "rollout"},
                         {"kl": "moving"})),)),
    Claim("kl_weight", "The two-stage KL weight beats fixed weights and a milder schedule", "kl_weight",
          (Beats(row={"kl_adaptive": True, "kl_beta_min": 0.001, "kl_beta_max": 0.1}),)),
    Claim("hacking", "Without a KL term the reward is hacked (the judge rises while the true quality falls)",
          "ablate_kl",
          (Moves(row={"kl": "none"}, metric="Judge", direction=+1),
           Moves(row={"kl": "none"}, metric="Oracle", direction=-1))),
    Claim("user_study", "User study: raters prefer SAGE-GRPO over each baseline", "main_table",
          (WinRates(target="sage_grpo"),)),
)
"""The ledger's rows, in the paper's order. A claim is data: add one here, nothing else changes."""


@dataclass
class Verdict:
    claim: Claim
    verdict: str
    effect: str
    needed: str
    checks: list[tuple[Check, str, list[Finding]]]


def combine(verdicts: Sequence[str], quantifier: str = "every") -> str:
    """every: supported if all are, contradicted if one is; some: supported if one is, contradicted if all are."""
    if not verdicts:
        return UNDECIDED
    if quantifier == "some":
        if SUPPORTED in verdicts:
            return SUPPORTED
        return CONTRADICTED if all(v == CONTRADICTED for v in verdicts) else UNDECIDED
    if CONTRADICTED in verdicts:
        return CONTRADICTED
    return SUPPORTED if all(v == SUPPORTED for v in verdicts) else UNDECIDED


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
                Finding(claim.suite, UNDECIDED, f"{folder} not found")]
        else:
            suite = _load(root, claim.suite, cache)
            findings = ([Finding(claim.suite, UNDECIDED, f"not measured: {suite}")] if isinstance(suite, Exception)
                        else check.findings(suite))
        checks.append((check, combine([f.verdict for f in findings], check.quantifier), findings))
    verdict = combine([v for _, v, _ in checks])
    # the row shows the check that decides: a contradicting one, else an undecided one, else the weakest
    deciding = next((c for c in checks if c[1] == verdict), checks[0])
    shown = _deciding(deciding[2], deciding[1])
    many = len(deciding[2])
    effect = f"{shown.label}: {shown.effect}" + (f" (deciding comparison of {many})" if many > 1 else "")
    needed = "–"
    if verdict == UNDECIDED:
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
    if name not in cache:
        from grpo_bench.errors import UserError

        path = root / name / "results.parquet"
        try:
            cache[name] = Suite(root, name) if path.is_file() else FileNotFoundError(f"{path} not found")
        except (UserError, OSError, ValueError, KeyError) as exc:
            cache[name] = exc
    return cache[name]


def ledger(root: Path, claims: Sequence[Claim] = CLAIMS) -> tuple[str, list[Verdict]]:
    """CLAIMS.md's text and the verdicts behind it."""
    cache: dict[str, Suite | Exception] = {}
    verdicts = [evaluate(c, root, cache) for c in claims]
    rows = [[str(i), v.claim.text, f"`{v.claim.suite}`", "; ".join(c.what for c in v.claim.checks), v.effect,
             f"**{v.verdict}**", v.needed] for i, v in enumerate(verdicts, 1)]
    from grpo_bench.report.tables import markdown

    tally = {k: sum(v.verdict == k for v in verdicts) for k in (SUPPORTED, CONTRADICTED, UNDECIDED)}
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
        "interval is the geometric mean's over seeds. Definitions: `grpo_bench/report/claims.py`.", "",
        "## Sources", "", *sources, "",
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


def write_ledger(root: Path, out: Path | None = None,
                 claims: Sequence[Claim] = CLAIMS) -> tuple[Path, list[Verdict]]:
    from grpo_bench.atomic import atomic_write_text

    text, verdicts = ledger(root, claims)
    path = out if out is not None else root / "CLAIMS.md"
    atomic_write_text(path, text)
    return path, verdicts

