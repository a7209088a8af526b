"""Typed parameters of a plug-in (kernel, KL variant, anchor policy, method), set as dotted ``key=value``.

A plug-in class declares its own parameters as a nested pydantic model::

    class GammaKernel(Kernel):
        class Params(PluginParams):
            gamma: float = Field(0.5, gt=0, le=1)
            \"\"\"Share of the noise ...\"\"\"

and reads them as ``self.params.gamma``. Runs, suites and the command line set them with the
component as prefix: ``kernel.gamma=0.3``, ``kl.tau=0.9``, ``anchor.tau=0.99``, ``method.window_size=2``,
``steps.size=3`` (``PREFIXES``; ``method.*`` are a method's own parameters: its step schedule and loss hooks;
``steps.*`` those of the step rule a run chose, core/step_rules.py). The resolved run config stores every such
value, defaults included, under ``params``, so a cell's id changes when a plug-in's default changes.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from grpo_bench.errors import UserError

PREFIXES = ("kernel", "kl", "anchor", "method", "steps")
"""Components whose parameters are set as ``<prefix>.<name>``."""


class PluginParams(BaseModel):
    """Base of a plug-in's parameters: unknown keys are errors, values are validated and frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class NoParams(PluginParams):
    """A plug-in without parameters of its own."""


def of_config(options: object) -> dict[str, Any]:
    """The flat ``params`` mapping of a run config's section (or of anything holding ``params``); empty without
    one."""
    return dict(getattr(options, "params", None) or {})


def is_param_key(key: str) -> bool:
    """True for a dotted plug-in parameter key such as ``kernel.gamma``."""
    prefix, dot, rest = key.partition(".")
    return bool(dot) and prefix in PREFIXES and bool(rest)


def component(params: dict[str, Any] | None, prefix: str) -> dict[str, Any]:
    """The ``prefix.*`` entries of a flat params mapping, without the prefix."""
    return {k.split(".", 1)[1]: v for k, v in (params or {}).items() if k.startswith(prefix + ".")}


def allowed_keys(params_cls: type[PluginParams], prefix: str) -> list[str]:
    return [f"{prefix}.{k}" for k in params_cls.model_fields]


def parse(params_cls: type[PluginParams], values: dict[str, Any], prefix: str, owner: str) -> PluginParams:
    """Validate ``values`` (keys without prefix) against ``params_cls``; one-line UserError naming the key."""
    try:
        return params_cls(**values)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(p) for p in err.get("loc", ())) or "?"
        allowed = ", ".join(allowed_keys(params_cls, prefix)) or "none"
        if err.get("type") == "extra_forbidden":
            raise UserError(f"{owner} has no parameter {prefix}.{key!s}; allowed: {allowed}") from None
        raise UserError(f"{owner}: parameter {prefix}.{key}: {err.get('msg')}, got {err.get('input')!r} "
                        f"(parameters: {allowed})") from None


def dump(params: PluginParams, prefix: str) -> dict[str, Any]:
    """``{prefix.key: value}`` of validated parameters (what a resolved config stores)."""
    return {f"{prefix}.{k}": v for k, v in params.model_dump().items()}
