"""Ablation suites (``grpo-bench ablate``): a grid over KL variant, equalizer and SDE on a base suite."""

from __future__ import annotations

import dataclasses
from typing import Any

from grpo_bench.errors import UserError, unknown
from grpo_bench.suite.expand import show_value
from grpo_bench.suite.spec import Suite


def kernel_owners() -> dict[str, str]:
    """Kernel name -> the method whose file defines the kernel (FlowGRPO for ``flow``, not the other methods
    that reuse it); a kernel no method file defines (``ode``) has no owner."""
    from grpo_bench.core.method import METHODS
    from grpo_bench.core.sde import KERNELS

    owners: dict[str, str] = {}
    for m in METHODS.names():
        kernel = METHODS.get(m).defaults.kernel
        if KERNELS.get(kernel).__module__ == METHODS.get(m).__module__:
            owners.setdefault(kernel, m)
    return owners


def _sde_methods(names: list[str]) -> list[str]:
    """--sde accepts method names or kernel names (the method whose file defines the kernel)."""
    from grpo_bench.core.method import METHODS

    by_kernel = kernel_owners()
    out = []
    for name in names:
        if name in METHODS:
            out.append(name)
        elif name in by_kernel:
            out.append(by_kernel[name])
        else:
            raise unknown("SDE (method or kernel)", name, [*METHODS.names(), *by_kernel], "--sde: ")
    return out


def _listed(names: list[str], every: list[str], shown: list[str]) -> str:
    """'all' for every registered name, else the short names joined; a long list (more names than a folder name
    holds) as 'n<count>-' and a digest of the list, so folder names stay short and distinct."""
    import hashlib

    if sorted(names) == sorted(every):
        return "all"
    joined = "-".join(shown)
    if len(joined) <= 20:
        return joined
    return f"n{len(names)}-" + hashlib.sha256(joined.encode()).hexdigest()[:4]


def legacy_ablation_name(base: Suite, grid: dict[str, list[Any]]) -> str:
    """The folder name ablations had before short names (full method and KL names), so that a
    suite started under it resumes there."""
    parts = []
    if "method" in grid:
        parts.append("sde-" + "-".join(grid["method"]))
    if "kl" in grid:
        parts.append("kl-" + "-".join(grid["kl"]))
    if "equalizer" in grid:
        parts.append("eq-" + "-".join(show_value(e) for e in grid["equalizer"]))
    return f"ablate_{base.name.removeprefix('ablate_')}_" + "_".join(parts)


def ablation(base: Suite, kl: list[str] | None, equalizer: list[bool] | None, sde: list[str] | None) -> Suite:
    """A suite varying KL variant, equalizer and SDE on ``base``'s config, budget, seeds and report."""
    from grpo_bench.core.method import METHODS
    from grpo_bench.core.trust_region import KL_VARIANTS

    grid: dict[str, list[Any]] = {}
    parts = []
    if sde:
        grid["method"] = _sde_methods(sde)
        kernels = [METHODS.get(m).defaults.kernel for m in grid["method"]]
        parts.append("sde-" + _listed(grid["method"], list(kernel_owners().values()), kernels))
    if kl:
        for name in kl:
            KL_VARIANTS.get(name, where="--kl: ")
        grid["kl"] = list(kl)
        parts.append("kl-" + _listed(kl, KL_VARIANTS.names(), kl))
    if equalizer:
        grid["equalizer"] = list(equalizer)
        parts.append("eq-" + "-".join(show_value(e) for e in equalizer))
    if not grid:
        raise UserError("ablate: give at least one of --kl, --equalizer, --sde")
    name = f"ablate_{base.name.removeprefix('ablate_')}_" + "_".join(parts)
    return dataclasses.replace(base, name=name, path=f"{base.path} (ablate)", grid=grid, union=[])
