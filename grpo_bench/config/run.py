"""Typed run configuration, YAML loading and validation with clear errors (docs/design.md §3–4, §6).

A run's configuration is declared by component (config/sections.py), one dataclass each, every option once
with its default and doc: the experiment (``Compared``), the method's options (``MethodOptions``), sampling,
optimisation, the trust region, the KL weighting, evaluation, the system and the generator (``COMPONENTS``, by section
name). A core component is built from its own section (``section(cfg, KLWeighting)``), never from the
run config. ``RunConfig`` combines them into one flat config: every field is also a top-level key, the
same everywhere (YAML suites, ``key=value`` on the command line, Python's ``cfg.lr``); a YAML mapping may
nest a component's keys under its section name (``flatten_sections``), which changes no value and no id.
Method options default to None, meaning "the method's own
default" (methods/*.py); ``resolve`` fills them in so the stored config.yaml is complete. Plug-in
parameters (a kernel's, a KL variant's, an anchor policy's own) are dotted keys, ``kernel.gamma=0.3``,
``kl.tau=0.9``, ``anchor.tau=0.99``, kept in ``params`` (grpo_bench.params).

Each field's type carries its constraints (``Annotated[Int, Field(ge=1)]``, ``Literal[...]`` for
choices, finite floats; the types are in grpo_bench/fields.py); pydantic converts YAML / command-line
values to that type and checks them (``coerce``), and a failure becomes one line naming the file,
the key and the allowed values or type.
What pydantic cannot see is checked by hand in ``validate``: registered names (methods, KL variants,
rewards, models, trackers), the device, the prompt set, and the rules across fields.

A field that says where or how a run computes (device, threads, precision, micro-batching, trackers,
checkpoint and eval cadence ...) is declared with ``execution(...)`` and left out of the cell id
(config/identity.py, ``EXECUTION_FIELDS``). A science field added later declares an id-neutral value in
``ID_NEUTRAL``: while a config holds that value the field is left out of the id, so adding a field
with a default keeps every existing id; changing a default (or setting the field) changes the ids it
affects.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo_bench import params as plugin_params
from grpo_bench import safe_yaml

# The components and their sections live in sections.py; every config name is also read from here.
from grpo_bench.config.sections import (  # noqa: F401
    COMPONENTS,
    METHOD_OPTIONS,
    Compared,
    Evaluation,
    KLWeighting,
    MethodChoice,
    MethodOptions,
    Optimisation,
    Sampling,
    System,
    TrustRegion,
    flatten_sections,
    section,
)
from grpo_bench.errors import UserError, unknown
from grpo_bench.fields import (
    FieldRules,
)
from grpo_bench.models.options import GeneratorOptions
from grpo_bench.preflight import shown


# A dataclass takes its bases' fields last base first: listed in reverse, the flat field order is the
# reading order of COMPONENTS.
@dataclass
class RunConfig(GeneratorOptions, System, Evaluation, KLWeighting, TrustRegion, Optimisation, Sampling, MethodOptions,
                Compared):
    """One GRPO run: every field of every component, each a valid ``key=value`` override."""

    def method_overrides(self) -> dict[str, Any]:
        """The method options set in this config (None = keep the method default)."""
        out = {k: getattr(self, k) for k in METHOD_OPTIONS if getattr(self, k) is not None}
        if self.params:
            out["params"] = dict(self.params)
        return out

    def get(self, key: str) -> Any:
        """A field's value, or a dotted plug-in parameter's (None when not set)."""
        if plugin_params.is_param_key(key):
            return self.params.get(key)
        return getattr(self, key)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


FIELDS = {f.name: f for f in dataclasses.fields(RunConfig)}


EXECUTION_FIELDS = frozenset(name for name, f in FIELDS.items() if f.metadata.get("execution"))
"""Fields declared with ``execution(...)``: left out of every cell id (config/identity.py)."""

ID_NEUTRAL: dict[str, Any] = {
    "params": {}, "param_dtype": "float32", "reward_path": "", "reward_base_path": "", "equalizer_proxy": "gaussian",
    "stepwise_ref": "rollout", "kl_target_auto": False, "kl_feedback": "integral", "adv_norm": "group",
    "step_every": "minibatch", "kl_schedule_unit": "update", "kl_horizon": 10.0, "bestofn": 0, "optimizer": "adamw",
    "embedded_guidance": 0.0, "max_text_tokens": 0,  # image generators (models/options.py)
    "kernel": None, "method_revision": 0,  # a method's own kernel; its recipe's revision (core/method.py)
    "detach_uncond": False, "guidance_formula": "cfg",
    "step_rule": None, "objective": None,  # a method's own step rule and objective (core/step_rules.py, core/loss.py)
}
"""Science fields added since the id scheme of release 0.3: the value for which a field is left out of a
cell id. A new science field must be added here with the value that reproduces the behaviour from before
it existed, so that adding it keeps every existing id (tests/suite/test_cell_ids.py)."""


RULES = FieldRules(RunConfig)
"""Every field's declared type and constraints, checked with pydantic (grpo_bench/fields.py)."""
allowed_values = RULES.choices
UPPER_BOUNDS = RULES.upper_bounds()
"""The declared upper bounds (``upto``), by key."""


def coerce(name: str, value: Any, where: str = "") -> Any:
    """Convert a YAML/CLI value to the field's type and check its declared constraints (pydantic), or
    raise a UserError naming the key and the allowed values or type.

    Dotted plug-in parameters pass through; the plug-in validates them (``validate``)."""
    if plugin_params.is_param_key(name):
        return value
    if name == "params":
        if value is None:
            return {}
        bad = [k for k in value if not plugin_params.is_param_key(str(k))] if isinstance(value, dict) else [value]
        if bad:
            raise UserError(f"{where}config key 'params' maps dotted plug-in keys ('kernel.<name>', 'kl.<name>', "
                            f"'anchor.<name>') to values, got {bad[0]!r}")
        return dict(value)
    if name not in FIELDS:
        from grpo_bench.config.key_hints import unknown_key

        raise unknown_key(name, FIELDS, where)
    return RULES.check(name, value, where)



def parse_overrides(items: list[str], where: str = "command line: ") -> dict[str, Any]:
    """``["lr=1e-4", "kl=dual"]`` → typed dict (unknown keys and bad values are UserErrors)."""
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise UserError(f"{where}override {shown(item)} is not of the form key=value")
        key, raw = item.split("=", 1)
        key = key.strip()
        if key in out:
            raise UserError(f"{where}{key} is given twice ({key}={shown(out[key])} and {shown(item)}); give it once")
        value = safe_yaml.load_text(raw, f"{where}override {key}") if raw.strip() else raw
        if isinstance(value, bool) and key in FIELDS and RULES.is_text(key):
            value = raw.strip()  # a word typed on the command line stays that word (setting=no is not False)
        out[key] = coerce(key, value, where)
    return out


def fold_params(data: dict[str, Any]) -> dict[str, Any]:
    """A mapping with dotted plug-in keys moved into ``params`` (later keys win)."""
    flat = {k: v for k, v in data.items() if not plugin_params.is_param_key(k)}
    dotted = {k: v for k, v in data.items() if plugin_params.is_param_key(k)}
    if dotted:
        flat["params"] = {**(flat.get("params") or {}), **dotted}
    return flat


def from_dict(data: dict[str, Any], where: str = "") -> RunConfig:
    """Build and validate a RunConfig from a plain mapping."""
    if not isinstance(data, dict):
        raise UserError(f"{where}a run config must be a mapping of key: value, got {type(data).__name__}")
    typed = {k: coerce(k, v, where) for k, v in flatten_sections(data, where).items()}
    # a still-image generator's defaults: one frame, no world oracle (models/diffusers_image.py)
    defaults = _model_defaults(typed.get("model", FIELDS["model"].default))
    typed.update({k: v for k, v in defaults.items() if k not in typed})
    cfg = RunConfig(**fold_params(typed))
    validate(cfg, where)
    return cfg


def validate(cfg: RunConfig, where: str = "") -> None:
    """Every field against its declared type and constraints (pydantic, as ``coerce``), then what the
    types cannot say: registered names, the device, the prompt set and rules across fields. Checked
    before any work starts."""
    from grpo_bench.core.method import METHODS
    from grpo_bench.rewards.base import SETTINGS

    for name in FIELDS:
        if name != "params":
            RULES.check(name, getattr(cfg, name), where)
    METHODS.get(cfg.method, where=where)
    if cfg.setting not in SETTINGS:
        raise unknown("setting", cfg.setting, SETTINGS, where)
    if cfg.kl is not None:
        from grpo_bench.core.trust_region import KL_VARIANTS

        KL_VARIANTS.get(cfg.kl, where=where)
    from grpo_bench.config.trackers import check_trackers

    check_trackers(cfg.trackers, where)
    bad = [u for u in cfg.eval_at if not 0 < u < cfg.updates]
    if bad:
        raise UserError(f"{where}config key 'eval_at' {bad}: allowed updates 1 .. {cfg.updates - 1} (the eval before "
                        "update 0 and the one after the last are always made)")
    if cfg.window is not None and len(cfg.window) == 2 and cfg.window[0] + cfg.window[1] > cfg.steps:
        raise UserError(f"{where}config key 'window' [{cfg.window[0]}, {cfg.window[1]}] reaches step "
                        f"{cfg.window[0] + cfg.window[1] - 1}, past the last step {cfg.steps - 1} (steps={cfg.steps})")
    from grpo_bench.preflight import device

    device(cfg.device, f"{where}config key 'device': ")
    _check_model_and_reward(section(cfg, Compared), cfg.frames, cfg.video_size, cfg.sequence_parallel, where)
    if cfg.minibatches > cfg.prompts_per_update * cfg.group_size:
        raise UserError(f"{where}config key 'minibatches' ({cfg.minibatches}) exceeds the rollout batch "
                        f"prompts_per_update * group_size = {cfg.prompts_per_update * cfg.group_size}")
    from grpo_bench.config import recipe

    # one process here; the trainer and plan check their own number of processes
    recipe.check(section(cfg, recipe.UpdateShape), 1, where)
    if cfg.kl_beta_max < cfg.kl_beta_min:
        raise UserError(f"{where}KL weights must satisfy 0 <= kl_beta_min <= kl_beta_max, got kl_beta_min "
                        f"{cfg.kl_beta_min} > kl_beta_max {cfg.kl_beta_max}")
    from grpo_bench.config.prompts import load_prompt_set

    prompt_set = load_prompt_set(cfg.prompts, where)
    from grpo_bench.rewards import declares_ground_truth

    if cfg.eval_oracle and not declares_ground_truth(cfg.prompts):  # a prompt file: the video world's oracle
        prompt_set.require_world_eval(where)
    if cfg.model == "world" and cfg.prompts != "world":
        prompt_set.require_world_train(where, cfg.prompts)
    if cfg.prompts_per_update > len(prompt_set.train):  # each update draws distinct prompts, without replacement
        raise UserError(f"{where}config key 'prompts_per_update' ({cfg.prompts_per_update}) exceeds the "
                        f"{len(prompt_set.train)} training prompt(s) of prompts {cfg.prompts!r}: each update draws "
                        f"that many distinct prompts; allowed 1..{len(prompt_set.train)}")
    # The method accepts its overrides (ranges of noise level, clip, window …), the plug-ins their parameters.
    choice = section(cfg, MethodChoice)
    try:
        _plugin_params(choice, section(cfg, TrustRegion))
        _check_method_run(choice, section(cfg, Sampling), cfg.updates)
    except UserError as exc:
        raise UserError(f"{where}{exc}") from None


def _check_method_run(choice: MethodChoice, sampling: Sampling, updates: int) -> None:
    """The method's own refusals (core/method.py ``check_run``): a window schedule that leaves an update
    without a trained step, a branching rule that cannot fill its group."""
    from grpo_bench.core import schedule
    from grpo_bench.core.method import RunShape

    method = choice.build()
    method.check_run(schedule.sigmas(sampling.steps, sampling.shift),
                     RunShape(updates=updates, group_size=sampling.group_size,
                              shared_noise=bool(method.config.shared_noise)))


def _plugin_params(choice: MethodChoice, region: TrustRegion) -> dict[str, Any]:
    """Every plug-in parameter of the run (kernel, KL variant, anchor policies), defaults filled in and
    validated; a UserError names a bad key or value.

    The run's own ``params`` must all be taken by a component; the method's default params only
    where they apply (a method's ``anchor.tau`` is dropped when the run chooses ``kl: fixed``)."""
    from grpo_bench.core.anchors import ANCHOR_POLICIES
    from grpo_bench.core.trust_region import KL_VARIANTS, resolved_params

    method = choice.build()
    kl = choice.kl if choice.kl is not None else method.config.kl
    variant = KL_VARIANTS.get(kl)
    applies = {f"kl.{k}" for k in variant.Params.model_fields}
    applies |= {f"anchor.{k}" for p in variant.anchors.values() for k in ANCHOR_POLICIES.get(p).Params.model_fields}
    params = {k: v for k, v in method.defaults.params.items()
              if k.startswith(("kernel.", "method.")) or k in applies}
    params.update(choice.params)
    out = plugin_params.dump(method.kernel.params, "kernel")
    out.update(plugin_params.dump(method.params, "method"))  # a method's own parameters (none for most)
    out.update(method.step_rule_params())  # steps.*: none while the method's own rule runs (ids unchanged)
    out.update(resolved_params(region, kind=kl, params=params))
    return out


def _shipped_world_size() -> int | None:
    """The video size the shipped world weights were trained on (read from the file header)."""
    from safetensors import safe_open

    from grpo_bench.models.world import DEFAULT_WEIGHTS

    try:
        with safe_open(str(DEFAULT_WEIGHTS), framework="pt") as f:
            return int((f.metadata() or {}).get("size", 16))
    except Exception:  # missing or corrupt weights: the model's own loader explains how to rebuild them
        return None


def _model_defaults(model: Any) -> dict[str, Any]:
    """Values a model kind changes from RunConfig's defaults: an image model makes one frame and is not
    scored by the world's oracle; a registered model may declare its own (``run_defaults``: an embedded world's
    size, prompts and reward)."""
    from grpo_bench import models

    try:
        image = isinstance(model, str) and models.modality(model) == "image"
        declared = dict(getattr(models.MODELS.get(model), "run_defaults", {})) if model in models.MODELS else {}
        return {**({"frames": 1, "eval_oracle": False} if image else {}), **declared}
    except Exception:  # an unreadable folder or cache: validate names the problem
        return {}


def _check_model_and_reward(experiment: Compared, frames: int, video_size: int, sequence_parallel: int,
                            where: str) -> None:
    """The reward and model names (registered, a hub id or a folder), and what the model requires of the run's
    frames, video size and sequence parallelism."""
    from grpo_bench import models, rewards
    from grpo_bench.config.weights import check_modality

    rewards.REWARDS.get(experiment.reward, where=f"{where}config key 'reward': ")
    name = experiment.model
    if name not in models.MODELS and "/" not in name and not Path(name).expanduser().exists():
        msg = unknown("model", name, models.names(), f"{where}config key 'model': ")
        raise UserError(f"{msg} (or a hub id org/name, or an existing folder)")
    check_modality(experiment, frames, where)
    own_check = getattr(models.MODELS.get(name), "check_config", None) if name in models.MODELS else None
    if own_check is not None:  # what a registered model requires of its runs (an embedded world's image size)
        own_check(video_size, where)
    if sequence_parallel > 1:
        _check_sequence_parallel_model(name, sequence_parallel, where)
    if name == "world":
        trained = _shipped_world_size()
        if trained is not None and video_size != trained:
            raise UserError(f"{where}config key 'video_size' is {video_size}, but the shipped world weights "
                            f"were trained on {trained}x{trained} videos; use video_size: {trained}")


def _check_sequence_parallel_model(model: str, sequence_parallel: int, where: str) -> None:
    """Sequence parallelism splits a diffusers video transformer's tokens (models/sequence_parallel.py): the
    embedded world model and still-image generators have no such path."""
    from grpo_bench import models

    kind = "the embedded world model" if model == "world" else (
        "an image model" if models.modality(model) == "image" else None)
    if kind is not None:
        raise UserError(f"{where}config key 'sequence_parallel' ({sequence_parallel}) is for the diffusers "
                        f"video transformers (Wan, HunyuanVideo 1.5); model {model!r} is {kind}: "
                        "use sequence_parallel: 1")


def resolve(cfg: RunConfig) -> RunConfig:
    """A copy with every method option filled from the method's defaults."""
    from grpo_bench.core.method import make_method

    method = make_method(cfg.method, **cfg.method_overrides())
    filled = {k: getattr(method.config, k) for k in METHOD_OPTIONS}
    if filled["kernel"] == method.defaults.kernel:
        filled["kernel"] = None  # the method's own kernel, whichever revision: ``method_revision`` names that
    if method.own_rule:
        filled["step_rule"] = None  # the method's own rule, named or not: one cell, one id
    else:
        filled["step_rule"] = method.rule.name
    if method.own_objective:
        filled["objective"] = None
    filled["method_revision"] = type(method).revision
    if cfg.adv_norm is None:
        filled["adv_norm"] = method.config.adv_norm
    if filled["window"] is not None:
        filled["window"] = list(filled["window"])
    filled["params"] = _plugin_params(section(cfg, MethodChoice), section(cfg, TrustRegion))
    filled["equalizer_proxy"] = _equalizer_proxy(cfg.equalizer_proxy, filled["equalizer"], filled["logprob"],
                                                 cfg.method)
    return dataclasses.replace(cfg, **filled)


def _equalizer_proxy(proxy: str, equalizer: bool, logprob: str, method: str) -> str:
    """The proxy as the cell id records it: 'gaussian' wherever it is what runs (no equalizer: inert; a Gaussian
    log-prob: the fitted proxy is lambda/std), 'logprob' for the fitted proxy of another form; a hand-set
    'gaussian' that does not fit the form is refused, 'mismatched_gaussian' is the labelled ablation row."""
    if not equalizer:
        return "gaussian"  # inert: the id ignores what does not change the result
    fitted = "gaussian" if logprob == "gaussian" else "logprob"
    if proxy in ("auto", "logprob"):
        return fitted
    if proxy == "gaussian" and fitted != "gaussian":
        raise UserError(f"equalizer_proxy: 'gaussian' (lambda/std) does not fit {method}'s {logprob!r} log-prob, "
                        "whose per-step gradient scale is lambda*std; leave equalizer_proxy at 'auto', or set "
                        "'mismatched_gaussian' to run the mismatch as a labelled ablation row")
    if proxy == "mismatched_gaussian" and fitted == "gaussian":
        return "gaussian"  # lambda/std is this form's own proxy: nothing mismatched runs
    return proxy
