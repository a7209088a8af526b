"""Fuzzing suite files, key=value overrides and stored tables given to restore: every input ends in success or
one UserError line, never another exception or a hang, and restore never writes outside its folder (hypothesis;
about half a minute)."""

from __future__ import annotations

import json
import math

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grpo_bench import safe_yaml
from grpo_bench.config.run import FIELDS, parse_overrides
from grpo_bench.errors import UserError
from grpo_bench.suite.expand import expand
from grpo_bench.suite.parse import BUDGET_CONFIG_KEYS, SUITE_KEYS, parse_suite

KEYS = st.sampled_from([*FIELDS, *SUITE_KEYS, *BUDGET_CONFIG_KEYS, "gpus_per_cell", "x", "seed", ""])
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12), st.sampled_from(["sage_grpo", "dance_grpo", "dual", "none", "A", "B", "cpu", "world",
                                           "[/x]", "[red]x", "1e12", ".inf"]),
)
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
                      max_leaves=8)
SUITES = st.fixed_dictionaries(
    {"name": st.one_of(st.sampled_from(["s", "ok-name", "ok-name", "ok-name", ".", "..", "a" * 300]),
                       st.text(max_size=8))},
    optional={"base": st.dictionaries(KEYS, VALUES, max_size=4), "grid": st.dictionaries(KEYS, VALUES, max_size=2),
              "seeds": VALUES, "budget": st.dictionaries(KEYS, VALUES, max_size=2), "union": VALUES,
              "report": VALUES, "description": VALUES, "extra": VALUES},
)
YAMLISH = st.text(alphabet=st.sampled_from(list("ab:-[]{}&*!|>'\"#%@`,?\n \t0123456789.eE")), max_size=80)


def _ends_cleanly(action) -> None:
    try:
        action()
    except UserError as exc:
        assert "\n" not in str(exc).strip(), str(exc)


def _suite_from_text(text: str) -> None:
    data = safe_yaml.load_text(text, "fuzz.yaml")
    suite = parse_suite(data, "fuzz.yaml")
    if math.prod(len(v) for v in suite.grid.values()) * len(suite.seeds) <= 8:  # keep each example fast
        expand(suite)


FAST = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(SUITES)
def test_structured_suites_end_in_success_or_one_user_error(data):
    _ends_cleanly(lambda: _suite_from_text(yaml.safe_dump(data, allow_unicode=True)))


@FAST
@given(YAMLISH)
def test_arbitrary_yaml_text_ends_in_success_or_one_user_error(text):
    _ends_cleanly(lambda: _suite_from_text(text))


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(KEYS, st.one_of(YAMLISH, SCALARS.map(str))), max_size=3))
def test_override_strings_end_in_success_or_one_user_error(pairs):
    _ends_cleanly(lambda: parse_overrides([f"{k}={v}" for k, v in pairs]))


CELL_IDS = st.one_of(st.sampled_from(["../..", "..", ".", "a/b", "/tmp/x", "", "ok_cell", "c" * 300]),
                     st.text(max_size=12))
RECORDS = st.one_of(st.none(), st.text(max_size=20), st.sampled_from(['{"status": "done"}', "[1]", "{broken",
                                                                     '{"status": "done", "config": 3}']),
                    st.dictionaries(st.sampled_from(["status", "labels", "config"]),
                                    st.one_of(st.just("done"), VALUES), max_size=3).map(json.dumps))


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(CELL_IDS, RECORDS), min_size=1, max_size=3))
def test_restore_of_a_hostile_table_ends_cleanly_and_stays_in_its_folder(tmp_path, cells):
    """Stored tables whose cell ids and records are arbitrary: restore ends in success or one UserError line,
    and every file it writes lies inside the target folder."""
    import uuid

    import pandas as pd

    from grpo_bench.suite.restore import restore_cells
    from grpo_bench.suite.results import COLUMNS

    root = tmp_path / uuid.uuid4().hex
    rows = [{"cell": cell, "kind": "cell", "text": text, "suite": "s", "group": "g"} for cell, text in cells]
    frame = pd.DataFrame(rows, columns=list(COLUMNS)).astype({k: v for k, v in COLUMNS.items() if v != "object"})
    (root / "stored").mkdir(parents=True)
    frame.to_parquet(root / "stored" / "results.parquet")
    target = root / "deep" / "target"
    _ends_cleanly(lambda: restore_cells(root / "stored", target))
    written = {p for p in root.rglob("*") if p.is_file()} - {root / "stored" / "results.parquet"}
    assert all(target in p.parents for p in written), written
