"""Each component has its own config section (config/run.py COMPONENTS): a YAML mapping may nest a
component's keys under its name, which changes no value and no cell id; a core component is built from
its own section and holds nothing else of the run; the generator's options are declared once."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from grpo_bench.config.identity import cell_id
from grpo_bench.config.run import (
    COMPONENTS,
    KLWeighting,
    Optimisation,
    RunConfig,
    TrustRegion,
    flatten_sections,
    from_dict,
    resolve,
    section,
)
from grpo_bench.core.kl_weight import make_kl_weight
from grpo_bench.core.trust_region import KLOptions, make_kl
from grpo_bench.errors import UserError
from grpo_bench.models.adapter_options import AdapterOptions
from grpo_bench.models.options import GeneratorOptions, ModelSection
from grpo_bench.suite.expand import expand
from grpo_bench.suite.parse import load_suite
from grpo_bench.train.evaluation import EvalOptions
from grpo_bench.train.steppers import StepperOptions

ROOT = Path(__file__).resolve().parents[2]
FLAT = {"method": "flow_grpo", "kl": "dual", "lr": 3e-4, "anchor_every": 5, "beta_vel": 0.2, "kl_adaptive": False,
        "kl_weight": 0.02, "eval_samples": 3}


def _nested(flat: dict) -> dict:
    """The same values with every key under its component's section."""
    home = {f.name: name for name, c in COMPONENTS.items() for f in dataclasses.fields(c)}
    out: dict = {}
    for key, value in flat.items():
        out.setdefault(home.get(key, "method_options"), {})[key] = value
    return out


def test_nested_sections_give_the_flat_config_and_its_id():
    nested = _nested(FLAT)
    assert set(nested) == {"experiment", "method_options", "optimisation", "trust_region", "kl_weighting", "evaluation"}
    assert from_dict(nested) == from_dict(FLAT)
    assert cell_id(resolve(from_dict(nested))) == cell_id(resolve(from_dict(FLAT)))


def test_a_suite_with_a_nested_base_keeps_every_cell_id(tmp_path):
    data = yaml.safe_load((ROOT / "suites" / "main_table.yaml").read_text())
    flat_ids = [c.id for c in expand(load_suite(ROOT / "suites" / "main_table.yaml"))]
    data["base"] = _nested(data["base"])
    path = tmp_path / "main_table.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))  # the grid expands in its keys' order
    assert [c.id for c in expand(load_suite(path))] == flat_ids


def test_a_key_in_the_wrong_section_or_given_twice_is_one_line_naming_it():
    with pytest.raises(UserError, match=r"trust_region\.lr: 'lr' belongs to the optimisation section"):
        from_dict({"trust_region": {"lr": 1e-3}}, where="suites/x.yaml: ")
    with pytest.raises(UserError, match=r"unknown trust_region key 'anchor_evry'.*anchor_every"):
        from_dict({"trust_region": {"anchor_evry": 3}})
    with pytest.raises(UserError, match="anchor_every is given twice"):
        flatten_sections({"anchor_every": 3, "trust_region": {"anchor_every": 4}})
    assert flatten_sections({"kl": "fixed"}) == {"kl": "fixed"}  # flat keys pass through untouched


def test_section_is_exactly_its_components_fields():
    cfg = RunConfig(anchor_every=7, kl_warmup=3, lr=1e-2)
    tr = section(cfg, TrustRegion)
    assert type(tr) is TrustRegion and tr.anchor_every == 7
    assert not hasattr(tr, "lr") and not hasattr(tr, "kl_warmup")
    assert section(cfg, KLWeighting).kl_warmup == 3


def test_core_components_are_built_from_their_sections_alone():
    cfg = resolve(RunConfig(method="sage_grpo", kl="dual", beta_pos=0.7, anchor_every=4))
    variant = make_kl(section(cfg, TrustRegion), kind=cfg.kl, params=cfg.params)
    seen = set(vars(variant.cfg))
    assert seen == {f.name for f in dataclasses.fields(TrustRegion)} | {"kl", "params"}  # no lr, no model, no steps
    assert variant.cfg.beta_pos == 0.7 and type(variant) is type(make_kl(cfg))
    assert variant.anchor_policies()["moving"].every == 4
    for adaptive in (True, False):
        whole = RunConfig(kl_adaptive=adaptive, kl_weight=0.3, kl_feedback="proportional", kl_target_auto=True)
        own = make_kl_weight(section(whole, KLWeighting))
        assert type(own) is type(make_kl_weight(whole)) and own.state_dict() == make_kl_weight(whole).state_dict()


def test_the_stepper_and_the_evaluation_take_their_own_sections():
    """The launch's stepper and the evaluation are built from their sections (train/steppers.py StepperOptions,
    train/evaluation.py EvalOptions), each field a run-config key with its value, nothing else of the run; a KL
    variant's declared options (core KLOptions) are the trust-region section's fields with kl and params."""
    cfg = RunConfig(lr=3e-4, max_grad_norm=0.5, mixed_precision="bf16", sequence_parallel=2, eval_samples=3,
                    guidance=2.0, setting="B", prompts_per_update=5)
    stepper = section(cfg, StepperOptions)
    assert stepper.optimisation == section(cfg, Optimisation) and stepper.optimisation.lr == 3e-4
    assert (stepper.max_grad_norm, stepper.mixed_precision, stepper.sequence_parallel) == (0.5, "bf16", 2)
    evaluation = section(cfg, EvalOptions)
    assert (evaluation.eval_samples, evaluation.guidance, evaluation.setting, evaluation.prompts_per_update) == (
        3, 2.0, "B", 5)
    assert not hasattr(evaluation, "lr") and not hasattr(stepper, "eval_samples")
    assert set(KLOptions.__annotations__) == {f.name for f in dataclasses.fields(TrustRegion)} | {"kl", "params"}


def test_the_generator_options_are_declared_once():
    shared = {f.name: f for f in dataclasses.fields(GeneratorOptions)}
    adapter = {f.name: f for f in dataclasses.fields(AdapterOptions)}
    for name, f in shared.items():  # the adapter inherits them: same default, no second declaration
        assert adapter[name].default == f.default and adapter[name].default_factory == f.default_factory, name
    opts = AdapterOptions.from_section(section(RunConfig(frames=5, height=32, lora_rank=2, device="cpu"), ModelSection))
    assert (opts.frames, opts.height, opts.width, opts.lora_rank) == (5, 32, 16, 2)
