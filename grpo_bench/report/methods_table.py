"""`grpo-bench methods`: the registered methods, kernels and KL variants as rich tables."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from grpo_bench.core.anchors import ANCHOR_POLICIES
from grpo_bench.core.method import METHODS, make_method
from grpo_bench.core.schedule import sigmas
from grpo_bench.core.sde import KERNELS
from grpo_bench.core.trust_region import KL_VARIANTS
from grpo_bench.params import PluginParams


def _params(cls: type[PluginParams], prefix: str) -> str:
    """The parameters a plug-in declares, as ``prefix.key=default`` (what a suite or the CLI sets)."""
    return " ".join(f"{prefix}.{k}={f.default!r}" for k, f in cls.model_fields.items()) or "-"


def _doc(obj: object) -> str:
    """The docstring's first paragraph on one line (its first line alone may stop mid-sentence)."""
    return escape(" ".join((obj.__doc__ or "").strip().split("\n\n")[0].split())) if obj.__doc__ else ""


def _trained(method, steps: int = 10, shift: float = 3.0) -> str:
    """Which steps are trained, shown on the default 10-step schedule."""
    sig = sigmas(steps, shift)
    eligible = method.eligible_steps(sig).nonzero().flatten().tolist()
    span = f"{eligible[0]}..{eligible[-1]}" if eligible else "none"
    frac, k = method.config.train_fraction, method.trained_count(len(eligible)) if eligible else 0
    return span if k >= len(eligible) else f"random {k} ({frac:.0%}) of {span}"  # k: the method's own count rule


def print_methods(console: Console) -> None:
    table = Table(title="Registered methods (reference defaults; formulas and papers: docs/design.md §2–4)")
    table.add_column("method", no_wrap=True)
    for col in ("kernel", "noise", "log-prob", "trained (T=10)", "shared noise", "clip", "KL", "equalizer"):
        table.add_column(col)
    for name in METHODS.names():
        m = make_method(name)
        c = m.config
        table.add_row(
            name, c.kernel, f"{c.noise_level:g}", c.logprob, _trained(m), "yes" if c.shared_noise else "no",
            f"{c.clip_range:g}", c.kl, "on" if c.equalizer else "off",
        )
    console.print(table)
    rules = Table(title="Methods: trained-step rule, loss family, own parameters and where the formulas were read "
                        "(docs/adding_a_method.md, docs/design.md §3a)")
    for col in ("method", "kernel", "trained-step rule", "loss family (objective)", "parameters", "source"):
        rules.add_column(col, no_wrap=col == "method", overflow="fold")
    for name in METHODS.names():
        m = make_method(name)
        d = m.describe()
        rules.add_row(name, d["kernel"], escape(d["steps"]), escape(d["loss"]), _params(type(m).Params, "method"),
                      escape(d["source"]))
    console.print(rules)
    kernels = Table(title="Step kernels")
    kernels.add_column("kernel")
    kernels.add_column("noise std")
    kernels.add_column("parameters")
    kernels.add_column("description")
    for name in KERNELS.names():
        cls = KERNELS.get(name)
        kernels.add_row(name, cls.std_formula, _params(cls.Params, "kernel"), _doc(cls))
    console.print(kernels)
    kl = Table(title="KL trust regions")
    for col in ("variant", "anchors (update policy)", "parameters", "description"):
        kl.add_column(col)
    for name in KL_VARIANTS.names():
        cls = KL_VARIANTS.get(name)
        anchors = ", ".join(f"{a} ({p})" for a, p in cls.anchors.items()) or "-"
        kl.add_row(name, anchors, _params(cls.Params, "kl"), _doc(cls))
    console.print(kl)
    policies = Table(title="Anchor update policies")
    for col in ("policy", "parameters", "description"):
        policies.add_column(col)
    for name in ANCHOR_POLICIES.names():
        cls = ANCHOR_POLICIES.get(name)
        policies.add_row(name, _params(cls.Params, "anchor"), _doc(cls))
    console.print(policies)
