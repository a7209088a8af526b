"""Cell ids name the science of a run (config/identity.py, docs/design.md §7): the shipped suites keep their
ids, no execution field (device, threads, precision, cadences ...) ever re-keys a cell, adding a science
field with a default keeps every id while changing a default does not, and one id names a run everywhere."""

from __future__ import annotations

import dataclasses
import json
import typing
from pathlib import Path

import pytest
import yaml
from shipped_suites import shipped, waiting

from grpo_bench.config import identity
from grpo_bench.config.identity import cell_id
from grpo_bench.config.run import EXECUTION_FIELDS, FIELDS, ID_NEUTRAL, RULES, RunConfig, resolve
from grpo_bench.errors import UserError
from grpo_bench.report.suite_parts import load_suite_checked
from grpo_bench.suite.expand import expand
from grpo_bench.suite.results import read_table

ROOT = Path(__file__).resolve().parents[2]
SUITES = sorted(shipped())  # a pre-registered suite joins once the report its picks read is stored
# {suite: [cell ids in expansion order]} (tests/golden/suite_cell_ids.json), of the id scheme of 0.3 (science
# fields only). Regenerated for a suite only when its content, a default it uses or the shipped world weights
# it loads changed on purpose. "<suite>@0.1" / "@0.2" / "@0.3" keep the ids of stored reports measured then.
GOLDEN = json.loads((ROOT / "tests" / "golden" / "suite_cell_ids.json").read_text())
STORED_WITH: dict[str, str] = {"main_table_tune": "main_table", "field_image_tune": "field_image",
                               "ablate_kl_tune": "ablate_kl", "kl_weight_tune": "kl_weight",
                               "ablate_equalizer_tune": "ablate_equalizer"}
"""Stored reports whose cells carry another suite's or an older release's ids ({report: "<suite>@<release>"}):
the tuned main table's tuning grid carries the ids its golden entry lists (a tuned suite's golden ids are its
tuning cells). A stored tuned table (its ``tuned.json`` beside the results) is checked against the suite expanded at
that choice. ablate_equalizer, ablate_kl and kl_weight are tuned suites on test seeds since 0.5 and are stored so
(each tuning grid carries the ids its golden entry lists; release 0.4's untuned equalizer table, whose CPS rows ran
the mismatched Gaussian proxy, keeps its ids under ``ablate_equalizer@2ae01f4`` in git history). The
image world's first look at release 0.5's budget (7ce08f0: the unfolded base net, one prompt's group for 40 updates)
keeps its ids in the golden file as ``field_image@7ce08f0`` (its results in git history); its tuning grid and
table at the suite's budget carry the suite's own ids."""


SUITE_OF = {"field_image_avx2": "field_image"}
"""Stored tables of a suite under another name: the image world's table on portable kernels (its looks from the
second on; docs/image_world.md), beside the suite's first look at bf16 (``field_image``)."""


def shipped_cells(path: Path) -> list:
    """A suite's cells as ``run`` starts them: a tuned suite's tuning grid (its table follows from the choice)."""
    from grpo_bench.suite.tune import tuning_suite

    suite = load_suite_checked(path)
    return expand(tuning_suite(suite) if suite.tune else suite)


@pytest.mark.parametrize("suite", SUITES)
def test_shipped_suites_keep_their_cell_ids(suite):
    assert [c.id for c in shipped_cells(ROOT / "suites" / f"{suite}.yaml")] == GOLDEN[suite]


def test_every_suite_without_golden_ids_waits_only_for_a_stored_report():
    """A shipped suite is either here with its golden ids or a pre-registered one whose pick's source report (or the
    look it reads) is not stored yet; nothing else leaves the list (shipped_suites raises on any other error)."""
    names = {p.stem for p in (ROOT / "suites").glob("*.yaml")}
    assert set(shipped()) | set(waiting()) == names and not set(shipped()) & set(waiting())
    for name in waiting():
        assert "pick" in yaml.safe_load((ROOT / "suites" / f"{name}.yaml").read_text()), name


@pytest.mark.parametrize("report", sorted(p.name for p in (ROOT / "reports").iterdir()
                                          if (p / "results.parquet").is_file()))
def test_stored_reports_cells_are_the_golden_cells(report):
    """The rendered reports' results carry the ids the runner gave their cells: the suite's (or a release's); a
    tuned table's are the suite's own cells at the chosen points it stored, expanded here again."""
    cells = set(read_table(ROOT / "reports" / report / "results.parquet")["cell"]) - {""}
    chosen_file = ROOT / "reports" / report / "tuned.json"
    if chosen_file.is_file() and report not in STORED_WITH:
        from grpo_bench.suite.selection import chosen_points
        from grpo_bench.suite.tune import tuned_rows, with_chosen

        suite = load_suite_checked(ROOT / "suites" / f"{SUITE_OF.get(report, report)}.yaml")  # picks resolved
        stored = chosen_points(json.loads(chosen_file.read_text()))
        # a table stored before each reading was tuned apart ran every row of a method at the method's choice
        chosen = {name: stored.get(name, stored.get(method)) for name, method, _ in tuned_rows(suite)}
        tuned = with_chosen(suite, chosen)
        if suite.decide is not None:  # a sequential plan's later looks continue the seeds (cli/decide.py seeds_at)
            import dataclasses

            from grpo_bench.cli.decide import seeds_at

            tuned = dataclasses.replace(tuned, seeds=seeds_at(tuned.seeds, suite.decide.max_seeds))
        expected = {c.id for c in expand(tuned)}
    else:
        expected = set(GOLDEN[STORED_WITH.get(report, report)])
    assert cells and cells <= expected


def _another_value(name: str, value: typing.Any) -> typing.Any:
    """A valid value of field ``name`` other than ``value`` (from its declared type)."""
    choices = RULES.choices(name)
    if choices:
        return next(c for c in choices if c != value)
    tp = RULES.declared(name)[0]
    if tp is bool:
        return not value
    if tp is int:
        return value + 1
    if name == "device":
        return "cpu" if value != "cpu" else "auto"
    if name == "trackers":
        return [] if value else ["tensorboard"]
    if name == "eval_at":
        return [] if value else [1]
    raise AssertionError(f"no other value known for execution field {name!r}: add it here")


@pytest.mark.parametrize("suite", SUITES)
def test_no_execution_field_changes_a_shipped_suites_ids(suite, monkeypatch):
    """Moving a suite to another device, thread count, precision or cadence keeps every id."""
    monkeypatch.setattr("grpo_bench.config.trackers.check_trackers", lambda names, where="": None)
    path = ROOT / "suites" / f"{suite}.yaml"
    cells = expand(load_suite_checked(path))
    before = [c.id for c in cells]
    first = cells[0].config
    for name in sorted(EXECUTION_FIELDS):
        override = {name: _another_value(name, getattr(first, name))}
        if name == "sequence_parallel" and not _splits_video_tokens(first.model):
            with pytest.raises(UserError, match="'sequence_parallel'"):  # refused there, never re-keyed
                expand(load_suite_checked(path, override))
            continue
        assert [c.id for c in expand(load_suite_checked(path, override))] == before, name


def _splits_video_tokens(model: str) -> bool:
    """sequence_parallel applies to the diffusers video transformers only (refused on the world and images)."""
    from grpo_bench import models

    return model != "world" and models.modality(model) == "video"


def test_a_science_field_changes_the_id_and_an_execution_field_does_not():
    cfg = resolve(RunConfig(method="flow_grpo"))
    same = dataclasses.replace(cfg, device="cpu", threads=3, mixed_precision="bf16", micro_batch=4, eval_every=7,
                               diag_every=0, checkpoint_every=3, save_videos=False, trackers=["tensorboard"])
    assert cell_id(same) == cell_id(cfg) == cell_id(cfg.to_dict())  # a stored config.yaml gives the same id
    for name, value in {"lr": cfg.lr * 2, "seed": 1, "updates": cfg.updates + 1, "eval_samples": 8}.items():
        assert cell_id(dataclasses.replace(cfg, **{name: value})) != cell_id(cfg), name


def test_every_science_field_added_later_declares_an_id_neutral_default():
    """A field in ID_NEUTRAL must default to its neutral value, or adding it re-keyed every cell."""
    assert not set(EXECUTION_FIELDS) & set(ID_NEUTRAL)
    for name, neutral in ID_NEUTRAL.items():
        field = FIELDS[name]
        default = field.default_factory() if field.default_factory is not dataclasses.MISSING else field.default
        if name == "equalizer_proxy":  # 'auto' is resolved to what runs: 'gaussian' for every release-0.4 cell
            default = resolve(RunConfig()).equalizer_proxy
        assert default == neutral, f"{name}: its default is not its id-neutral value, so adding it changed every id"


def test_adding_a_field_keeps_ids_and_changing_a_default_does_not(monkeypatch):
    cfg = resolve(RunConfig(method="flow_grpo"))
    before = cell_id(cfg)
    # a field added later with its id-neutral default: same id; set to something else: another id
    monkeypatch.setitem(ID_NEUTRAL, "new_option", 0.5)
    assert cell_id({**cfg.to_dict(), "new_option": 0.5}) == before
    assert cell_id({**cfg.to_dict(), "new_option": 0.7}) != before
    assert cell_id({**cfg.to_dict(), "params": {"kernel.x": 1}}) != before
    monkeypatch.setattr(identity, "ID_NEUTRAL", {})  # without the declaration, the new field would count
    assert cell_id({**cfg.to_dict(), "new_option": 0.5}) != cell_id(cfg.to_dict())
