"""The view of one stored suite that the checks read (``<suite>/results.parquet``: its cells, their configs
and per-seed learning), and how a selection of rows by config values reads in the ledger."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from grpo_bench.report import data
from grpo_bench.report.claims import as_named, look, provenance
from grpo_bench.report.claims.finding import NOT_TESTED, NOT_VERIFIED, Finding
from grpo_bench.report.claims.fingerprint_lines import read_fingerprint_lines, row_label
from grpo_bench.report.power import min_effect_of, min_effects
from grpo_bench.suite.machine import cpu_identity

Where = dict[str, Any]
"""Config values that select rows: {"method": "sage_grpo", "kl": "dual"}; {} selects every row."""

FINGERPRINTS = provenance.FINGERPRINTS
"""``REPORTS_DIR/fingerprints.json``: {commit: {cpu: sha256 of benchmarks/behaviour_fingerprint.py's output}}
(provenance.py). Cells of two commits pair in one comparison only where both are recorded equal on one CPU, or
their printed lines (``fingerprint_lines.json``) are equal for every row the comparison reads."""
LABELLED_ABLATIONS = {"equalizer_proxy": "mismatched_gaussian"}
"""Config values that mark a labelled ablation row: such a row enters a check only when the check names the key."""


def normalised(cfg: dict[str, Any]) -> dict[str, Any]:
    """A stored config in today's terms: an equalizer that ran the Gaussian proxy on a non-Gaussian log-prob
    (release 0.4 and before: the default) is the labelled ``mismatched_gaussian`` row (config/run.py)."""
    if (cfg.get("equalizer") and cfg.get("logprob", "gaussian") != "gaussian"
            and cfg.get("equalizer_proxy", "gaussian") == "gaussian"):
        return {**cfg, "equalizer_proxy": "mismatched_gaussian"}
    return cfg


class Suite:
    """One stored report folder, read once: its results table and views of it."""

    def __init__(self, root: Path, name: str):
        from grpo_bench.report import sources

        self.name, self.path = name, root / name
        self.fingerprints = provenance.read_fingerprints(root)
        self.fingerprint_rows = read_fingerprint_lines(root)
        self.tuned = as_named.read_tuned(self.path)
        self.df = data.with_grid_columns(sources.load_frame(self.path))
        self.info = data.suite_info(self.df)
        infos = data.cell_infos(self.df)
        self.configs = {c: normalised(i.get("config", {})) for c, i in infos.items()}
        # the whole commit string: ten characters of it let a ``+dirty`` tree pass as its clean commit
        # with the precision and the CPU it ran at: float kernels differ between CPUs (a fingerprint is a fact about
        # a (commit, CPU) pair), so one commit at one precision on two CPUs is two behaviours; the CPU with the
        # kernels its line names (one model name covers several: "AMD EPYC (AVX2)")
        self.code = {c: (str(i.get("git_commit") or "?"), str(i.get("precision") or "?"),
                         cpu_identity(str(i.get("machine") or ""))) for c, i in infos.items()}
        self.labels = {c: dict(i.get("labels") or {}) for c, i in infos.items()}
        seeds = [int(c["seed"]) for c in self.configs.values() if isinstance(c.get("seed"), int)]
        self.look = look.suite_look(self.info, seeds, str(self.path / "results.parquet"))
        """Where a suite run under a sequential plan stands in it (claims/look.py); None: no plan."""
        self.level = look.level_of(self.look)
        """The level its comparisons are decided at: 5%, or its look's."""
        rows = self.df[self.df["kind"] == "cell"].drop_duplicates("cell")
        self._groups = dict(zip(rows["cell"], rows["group"].astype(str)))
        self._learning: pd.DataFrame | None = None
        self.requires: as_named.AsNamed | None = None
        """What the claim being evaluated names (``for_claim``); None: the rows as they ran."""

    def for_claim(self, requires: as_named.AsNamed | None) -> Suite:
        """This suite read for a claim that names its rows as ``requires`` says (the tables are shared)."""
        import copy

        if self._learning is None:
            self._learning = data.learning(self.df)
        view = copy.copy(self)
        view.requires = requires
        return view

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
            if matches(cfg, within):
                label = ", ".join(f"{k}={value_text(cfg.get(k))}" for k in split)
                out.setdefault(label, []).append(cell)
        return dict(sorted(out.items()))

    def groups(self, cells: Sequence[str], where: Where) -> list[str]:
        """Row labels (groups) of the given cells whose config matches ``where``, in suite order; a labelled
        ablation row only where ``where`` names its key."""
        chosen = {self.group_of(c) for c in cells if matches(self.configs[c], where) and not self._aside(c, where)}
        return [g for g in data.group_order(self.df) if g in chosen]

    def _aside(self, cell: str, where: Where) -> bool:
        return any(self.configs[cell].get(k) == v and k not in where for k, v in LABELLED_ABLATIONS.items())

    def set_aside_findings(self, cells: Sequence[str], where: Where) -> list[Finding]:
        """A not-tested finding for each labelled ablation row that matches ``where`` only by leaving its key
        out and whose named configuration (the same row without the label) was not run: the check never reads
        the labelled row instead. Where the named row is stored beside it, the check reads that one, silently."""
        named = set(self.groups(cells, where))
        aside = {self.group_of(c) for c in cells if matches(self.configs[c], where) and self._aside(c, where)
                 and _unlabelled(self.group_of(c)) not in named}
        return [Finding(g, NOT_TESTED, "only a labelled ablation row is stored here ("
                        + ", ".join(f"{k}={v}" for k, v in LABELLED_ABLATIONS.items()) + "); the named configuration "
                        "was not run", needed=f"a re-run of `{self.name}`")
                for g in data.group_order(self.df) if g in aside]

    def mixed_code(self, cells: Sequence[str], *groups: str) -> str:
        """'' when the groups' cells ran one behaviour: one commit, precision and CPU, or one precision and CPU and
        commits that are one behaviour pairwise for every row the groups read (``provenance.same_behaviour_for``:
        whole fingerprints equal on one CPU, or the printed lines of those rows equal); else what differs
        ("197a046d74/bf16, 1a2b3c4d5e/fp32"; the CPU named where it differs: "197a046d74/bf16 on AMD EPYC").

        The rows read are the fingerprint rows of all the groups' cells together (``row_label``: "sage_grpo dual",
        "dance_grpo fixed"), so each commit involved must print every compared row alike: SAGE-GRPO against
        DanceGRPO at two commits reads both rows at both. Why a row's own line suffices: it is a short run of that
        method under that KL on the tiny model through the shared core (the world-independent rollout, the loss,
        the optimizer, the KL, the eval and checkpoint code), hashing its metrics and checkpoints; a change in
        shared code moves every line, and a change in one method's recipe moves that method's lines. Lines that
        stay byte-identical across two commits say that those rows compute what they computed, whatever the
        script printed besides (the rows it added, other methods' changed recipes)."""
        mine = [c for c in cells if self.group_of(c) in groups]
        codes = sorted({self.code[c] for c in mine})
        if len(codes) <= 1:
            return ""
        commits, hosts = sorted({c for c, _, _ in codes}), {(p, cpu) for _, p, cpu in codes}
        rows = {row_label(self.configs[c], self.labels[c]) for c in mine}
        if len(hosts) == 1 and all(
                provenance.same_behaviour_for(self.fingerprints, self.fingerprint_rows, a, b, rows)
                for a, b in itertools.combinations(commits, 2)):
            return ""
        several_cpus = len({cpu for _, _, cpu in codes}) > 1
        return ", ".join(f"{_short(c)}/{p}" + (f" on {cpu}" if several_cpus else "") for c, p, cpu in codes)

    def unverified(self, cells: Sequence[str], *groups: str) -> list[str]:
        """The dirty trees among the groups' cells whose behaviour no fingerprint records (whole strings)."""
        return sorted({self.code[c][0] for c in cells if self.group_of(c) in groups
                       and not provenance.verified(self.fingerprints, self.code[c][0])})

    def not_as_named(self, cells: Sequence[str], *groups: str) -> str:
        """Why the groups are not the rows the claim names ("a and b: development seeds 0–2, untuned (...)"); ''
        when they are, or when the claim reads rows as they ran (``requires`` None)."""
        if self.requires is None:
            return ""
        by_reason: dict[str, list[str]] = {}
        for group in groups:
            mine = [c for c in cells if self.group_of(c) == group]
            if not mine:
                continue
            why = as_named.seed_reasons([int(self.configs[c].get("seed", -1)) for c in mine]) \
                if self.requires.test_seeds else []
            if self.requires.tuned:
                method = str(self.configs[mine[0]].get("method", ""))
                tuned_keys = set().union(*(v.keys() for v in (self.tuned or {}).values()))
                reading = as_named.reading_of(self.labels[mine[0]], tuned_keys)
                # a record keyed by method names the method's first reading in the suite (suite/tune.py)
                first = next(c for g in data.group_order(self.df) for c in self.cells_of(g)
                             if self.configs[c].get("method") == method)
                why += as_named.setting_reasons(self.tuned, method, reading,
                                                as_named.reading_of(self.labels[first], tuned_keys) == reading,
                                                [self.configs[c] for c in mine])
            if why:
                by_reason.setdefault(", ".join(why), []).append(group)
        return "; ".join(f"{' and '.join(gs)}: {why}" for why, gs in by_reason.items())

    def standing(self, cells: Sequence[str], *groups: str) -> tuple[str, str, str] | None:
        """(verdict, why, what it needs) when the groups' cells cannot decide the claim: cells of an unrecorded
        dirty tree (*not verified*; any as-named reasons said too), else rows that are not the ones the claim names
        (*not tested as named*); None when they can."""
        dirty, named = self.unverified(cells, *groups), self.not_as_named(cells, *groups)
        rerun = f"a re-run of `{self.name}` on test seeds at each row's own tuned choice"
        if dirty:
            also = f"; also not as named: {named}" if named else ""
            return (NOT_VERIFIED, f"cells of a dirty tree whose behaviour no fingerprint records "
                    f"({', '.join(dirty)}){also}",
                    rerun + " from a clean tree" if named else f"a re-run of `{self.name}` from a clean tree, or a "
                    "fingerprint of the tree that ran it")
        if named:
            return as_named.NOT_AS_NAMED, named, rerun
        return None

    def cells_of(self, group: str) -> list[str]:
        return [c for c, g in self._groups.items() if g == group]

    def group_of(self, cell: str) -> str:
        return self._groups[cell]

    def per_seed(self, cells: Sequence[str], group: str, column: str) -> pd.Series:
        """Learning of ``column`` per seed for one group among the given cells."""
        part = self.learning[self.learning["cell"].isin(cells) & (self.learning["group"] == group)]
        if part.empty or column not in part:
            return pd.Series(dtype=float)
        return part.set_index("seed")[column].astype(float).dropna()


def _unlabelled(group: str) -> str:
    """A labelled ablation row's label without its label: the row of the configuration the claim names."""
    for key in LABELLED_ABLATIONS:
        group = data.without_key(group, key)
    return group


def _short(commit: str) -> str:
    """A commit as the ledger shows it: ten characters and whether the tree was dirty (compared whole)."""
    return commit[:10] + (provenance.DIRTY if provenance.is_dirty(commit) else "")


def matches(cfg: dict, where: Where) -> bool:
    return all(cfg.get(k) == v for k, v in where.items())


def value_text(value: Any) -> str:
    return {True: "on", False: "off"}.get(value, str(value)) if isinstance(value, bool) else str(value)


def where_text(where: Where) -> str:
    return " ".join(f"{k}={value_text(v)}" for k, v in where.items()) or "every row"


def short_label(group: str, keys: Sequence[str]) -> str:
    """A row label without the family's own keys (they are in the family label)."""
    for key in keys:
        group = data.without_key(group, key)
    return group
