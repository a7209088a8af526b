"""Run configs by component, each field validated by its declared pydantic type: YAML / key=value
values convert as documented, and every broken rule is one line naming the file, the key and the
allowed values or type (docs/design.md §3–4)."""

from __future__ import annotations

import dataclasses
import typing

import pytest
import yaml

from grpo_bench.config.run import (
    COMPONENTS,
    FIELDS,
    UPPER_BOUNDS,
    RunConfig,
    allowed_values,
    coerce,
    parse_overrides,
    validate,
)
from grpo_bench.errors import UserError

WHERE = "suites/x.yaml: base.{}: "


def _default(name: str):
    f = FIELDS[name]
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def test_every_field_belongs_to_exactly_one_component_in_reading_order():
    owned = [f.name for component in COMPONENTS.values() for f in dataclasses.fields(component)]
    assert owned == list(FIELDS)  # no field twice, none outside a component, flat order = component order
    assert all(issubclass(RunConfig, c) for c in COMPONENTS.values())
    assert RunConfig(lr=1e-4, kl="dual").lr == 1e-4  # flat attribute access and keyword construction


@pytest.mark.parametrize("name", [n for n in FIELDS if n != "params"])
def test_every_default_passes_its_own_field_and_survives_a_key_value_round_trip(name):
    default = _default(name)
    assert coerce(name, default) == default
    text = yaml.safe_dump(default, default_flow_style=True).strip().removesuffix("...").strip()
    assert parse_overrides([f"{name}={text}"]) == {name: default}


@pytest.mark.parametrize(
    ("name", "given", "expected"),
    [
        ("score_term", "yes", True), ("score_term", "ON", True), ("save_videos", "false", False),
        ("save_videos", "off", False), ("eval_oracle", 0, False),
        ("noise_level", "none", None), ("noise_level", "null", None), ("max_train_steps", "None", None),
        ("kl", "none", "none"),  # 'none' is a real value of text fields: the no-KL variant
        ("kl", "null", None), ("kl", None, None),
        ("updates", 1e3, 1000), ("updates", "1e3", 1000), ("seed", "7", 7),
        ("lr", "1e-4", 1e-4), ("lr", 1, 1.0), ("setting", 1, "1"),
        ("window", "1,3", [1, 3]), ("window", "[1, 3]", [1, 3]), ("window", (2, 2), [2, 2]),
        ("trackers", "tensorboard", ["tensorboard"]), ("lora_targets", "to_q,to_k", ["to_q", "to_k"]),
    ],
)
def test_values_convert_as_documented(name, given, expected):
    got = coerce(name, given)
    assert got == expected and type(got) is type(expected)


@pytest.mark.parametrize(
    ("name", "given", "message"),
    [
        ("lr", "abc", "config key 'lr' expects float, got 'abc'"),
        ("lr", float("nan"), "config key 'lr' must be a finite number, got nan"),
        ("kl_beta_max", float("inf"), "config key 'kl_beta_max' must be a finite number, got inf"),
        ("lr", 0, "config key 'lr' must be a finite number > 0, got 0"),
        ("lr", True, "config key 'lr' expects float, got True"),
        ("updates", 2.5, "config key 'updates' expects int, got 2.5"),
        ("updates", True, "config key 'updates' expects int, got True"),
        ("updates", 0, "config key 'updates' must be >= 1, got 0"),
        ("updates", "1e12", "config key 'updates' must be <= 10000000, got"),
        ("micro_batch", -1, "config key 'micro_batch' must be >= 0, got -1"),
        ("kl_weight", -0.5, "config key 'kl_weight' must be >= 0, got -0.5"),
        ("group_size", 1, "config key 'group_size' must be >= 2 (GRPO needs a group), got 1"),
        ("seed", -1, "config key 'seed' must be in 0..2**63-1, got -1"),
        ("seed", 2**63, "config key 'seed' must be in 0..2**63-1, got"),
        ("noise_level", "abc", "config key 'noise_level' expects float or null, got 'abc'"),
        ("window", [1.5, 2], "config key 'window' expects list[int] or null, got [1.5, 2]"),
        ("trackers", {"a": 1}, "config key 'trackers' expects list[str], got {'a': 1}"),
        ("steps", None, "config key 'steps' cannot be null"),
        ("save_videos", "maybe", "config key 'save_videos' expects bool, got 'maybe'"),
        ("adv_norm", "glob",
         "unknown adv_norm 'glob' (did you mean 'global'?); allowed: global, group, group_unbiased"),
        ("mixed_precision", True,
         "allowed: auto, bf16, fp16, no (YAML reads an unquoted yes/no/on/off as true: quote it)"),
        ("lrr", 1, "unknown config key 'lrr' (did you mean 'lr'?)"),
        ("learning_rate", 1e-4, "unknown config key 'learning_rate' (did you mean 'lr'?)"),
        ("num_generations", 8, "unknown config key 'num_generations' (did you mean 'group_size'?)"),
        ("params", {"gamma": 1}, "config key 'params' maps dotted plug-in keys"),
    ],
)
def test_each_broken_rule_is_one_line_naming_file_key_and_allowed(name, given, message):
    where = WHERE.format(name)
    with pytest.raises(UserError) as err:
        coerce(name, given, where)
    text = str(err.value)
    assert text.startswith(where) and "\n" not in text
    assert message in text, text


@pytest.mark.parametrize("name", [n for n in FIELDS if n != "params" and allowed_values(n)])
def test_a_choice_field_lists_every_choice_it_accepts(name):
    choices = allowed_values(name)
    for choice in choices:
        assert coerce(name, choice) == choice
    with pytest.raises(UserError, match=f"unknown {name} 'bogus'; allowed: " + ", ".join(sorted(choices))):
        coerce(name, "bogus")


def test_upper_bounds_are_the_declared_ones_and_reject_typos():
    assert UPPER_BOUNDS["updates"] == 10_000_000 and UPPER_BOUNDS["group_size"] == 4096
    for name, most in UPPER_BOUNDS.items():
        assert coerce(name, most) == most
        with pytest.raises(UserError, match=f"'{name}' must be (<= {most}|in )"):
            coerce(name, most + 1)


def test_validate_checks_python_built_configs_by_the_same_declarations():
    """A RunConfig built in Python (not through coerce) meets the same rules, with the same message."""
    cases = {"updates": 0, "lr": float("inf"), "adv_norm": "glob", "group_size": 1, "steps": "ten"}
    for name, bad in cases.items():
        with pytest.raises(UserError) as via_validate:
            validate(RunConfig(**{name: bad}, device="cpu"), "x.yaml: ")
        with pytest.raises(UserError) as via_coerce:
            coerce(name, bad, "x.yaml: ")
        assert str(via_validate.value) == str(via_coerce.value)


def test_rules_across_fields_stay_checked_by_hand():
    with pytest.raises(UserError, match="kl_beta_min 0.5 > kl_beta_max 0.1"):
        validate(RunConfig(kl_beta_min=0.5, kl_beta_max=0.1, device="cpu"), "x.yaml: ")
    with pytest.raises(UserError, match="'minibatches' \\(17\\) exceeds the rollout batch"):
        validate(RunConfig(minibatches=17, prompts_per_update=2, group_size=8, device="cpu"), "x.yaml: ")


def test_field_types_carry_their_constraints():
    """Constraints are declared on the field (pydantic metadata), not in a list elsewhere."""
    hints = typing.get_type_hints(RunConfig, include_extras=True)
    assert typing.get_origin(hints["updates"]) is typing.Annotated
    assert set(UPPER_BOUNDS) <= {n for n, h in hints.items() if typing.get_origin(h) is typing.Annotated}


def test_an_unknown_key_names_where_keys_are_documented_instead_of_a_cut_off_list():
    with pytest.raises(UserError) as err:
        coerce("zzzz", 1, "command line: ")
    text = str(err.value)
    assert text == ("command line: unknown config key 'zzzz'; "
                    "grpo_bench/config/sections.py and grpo_bench/models/options.py document every key")


def test_words_yaml_reads_as_bools_are_words_for_word_fields(tmp_path):
    from grpo_bench.config.run import from_dict, parse_overrides
    from grpo_bench.suite.expand import expand
    from grpo_bench.suite.parse import load_suite

    assert parse_overrides(["mixed_precision=no"]) == {"mixed_precision": "no"}
    assert coerce("mixed_precision", False) == "no"  # what YAML makes of an unquoted `no`
    assert parse_overrides(["save_videos=no"]) == {"save_videos": False}  # a bool field keeps the bool
    with pytest.raises(UserError, match="unknown setting 'no'"):  # a name field: the word, judged as a name
        from_dict(parse_overrides(["setting=no"]))
    path = tmp_path / "s.yaml"
    path.write_text("name: s\nbase: {updates: 1, mixed_precision: no}\ngrid: {method: [cps]}\nseeds: [0]\n")
    (cell,) = expand(load_suite(path))
    assert cell.config.mixed_precision == "no"


def test_prompts_per_update_beyond_the_training_prompts_is_one_line(tmp_path):
    """Each update draws prompts_per_update distinct training prompts; a set with fewer used to reach the rollout
    and fail there with an index error. Now validate names the key, the set's size and the allowed range."""
    prompts = tmp_path / "one.yaml"
    prompts.write_text("train: ['a red circle moving left']\neval: ['a red circle moving left']\n")
    line = r"'prompts_per_update' \(2\) exceeds the 1 training prompt\(s\).*allowed 1\.\.1"
    with pytest.raises(UserError, match=line):
        validate(RunConfig(prompts=str(prompts), prompts_per_update=2, eval_oracle=False, device="cpu"), "x.yaml: ")
    validate(RunConfig(prompts=str(prompts), prompts_per_update=1, minibatches=1, eval_oracle=False, device="cpu"),
             "x.yaml: ")  # at the set's size it runs
