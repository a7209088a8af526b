"""Table 1 / Figure 1: how much noise each method's SDE injects, measured against ground truth.

For Gaussian data x0 ~ N(0, s^2 I) the exact velocity is linear in x:

    V(sigma)  = (1-sigma)^2 s^2 + sigma^2                     (marginal variance of x_sigma)
    v*(x)     = E[z - x0 | x] = c(sigma) x,  c = (sigma - (1-sigma) s^2) / V(sigma)

Every kernel is mu = a x + b v, so one step maps the variance as
``Var' = (a + b c)^2 Var + var``, starting from Var_0 = V(1) = 1. A kernel that preserves the
marginal keeps Var_i = V(sigma_i); the relative error Var_{i+1}/V(sigma_{i+1}) - 1 measures the
discretisation error each kernel's noise schedule adds (the paper's "excess noise energy").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch
from rich.console import Console
from rich.table import Table

from grpo_bench.core.method import METHODS, make_method
from grpo_bench.core.sampling import StepTable, transition
from grpo_bench.core.schedule import sigmas as make_sigmas
from grpo_bench.core.sde import Kernel, make_kernel
from grpo_bench.errors import UserError
from grpo_bench.report.compact import save_figure


def marginal_variance(sigma: float, data_std: float) -> float:
    """V(sigma) for x_sigma = (1-sigma) x0 + sigma z, x0 ~ N(0, s^2)."""
    return (1 - sigma) ** 2 * data_std**2 + sigma**2


def exact_velocity_gain(sigma: float, data_std: float) -> float:
    """c(sigma) with v*(x) = c x for Gaussian data."""
    return (sigma - (1 - sigma) * data_std**2) / marginal_variance(sigma, data_std)


@dataclass
class KernelAnalysis:
    label: str
    kernel: Kernel
    std: list[float]  # [T] per-step noise std
    variance: list[float]  # [T+1] marginal variance after each step (closed form), Var_0 = 1
    var_rel_err: list[float]  # [T] Var_{i+1} / V(sigma_{i+1}) - 1

    @property
    def noise_energy(self) -> float:
        return sum(s * s for s in self.std)


def analyse_kernel(kernel: Kernel, sigmas: torch.Tensor, data_std: float, label: str = "") -> KernelAnalysis:
    """Closed-form variance recursion of one kernel under the exact Gaussian model."""
    s = [float(x) for x in sigmas]
    var_path, errs = [1.0], []
    for i, (a, b, var) in enumerate(kernel.table(sigmas)):
        gain = a + b * exact_velocity_gain(s[i], data_std)
        var_path.append(gain**2 * var_path[-1] + var)
        errs.append(var_path[-1] / marginal_variance(s[i + 1], data_std) - 1)
    std = [math.sqrt(v) for v in kernel.variances(sigmas)]
    return KernelAnalysis(label or kernel.name, kernel, std, var_path, errs)


def monte_carlo_variance(
    kernel: Kernel, sigmas: torch.Tensor, data_std: float, n: int = 200_000, seed: int = 0
) -> list[float]:
    """Per-step sample variance of the same process, simulated (used to confirm the closed form) with the
    arithmetic training runs: the kernel's ``StepTable`` through ``transition`` (core/sampling.py)."""
    g = torch.Generator().manual_seed(seed)
    table = StepTable.of_kernel(kernel, sigmas)
    x = torch.randn(n, 1, generator=g, dtype=torch.float64)
    out = [float(x.var())]
    for i in range(len(sigmas) - 1):
        v = exact_velocity_gain(float(sigmas[i]), data_std) * x
        mu, std = transition(table, torch.full((n,), i, dtype=torch.long), x, v)
        x = mu.double() + std.double() * torch.randn(n, 1, generator=g, dtype=torch.float64)
        out.append(float(x.var()))
    return out


def default_kernels(noise_level: float | None = None) -> list[tuple[str, Kernel]]:
    """Each registered method's kernel at its defaults (noise level, kernel parameters), plus the ODE;
    with `noise_level`, every kernel at that one level (a matched comparison: eta and a play the same
    role, the scale of the diffusion coefficient)."""
    if noise_level is not None and not (math.isfinite(noise_level) and noise_level >= 0):
        raise UserError(f"--noise-level must be a finite number >= 0, got {noise_level!r}")
    rows: dict[tuple, tuple[str, Kernel, bool]] = {}
    for name in METHODS.names():
        method = make_method(name) if noise_level is None else make_method(name, noise_level=noise_level)
        if not method.needs_logprob:  # a likelihood-free method samples the base ODE: its row is below
            continue
        key = (method.config.kernel, method.config.noise_level,
               tuple(sorted(method.kernel.params.model_dump().items())))
        owner = type(method).__module__ == type(method.kernel).__module__  # the method whose file defines the kernel
        if key not in rows or (owner and not rows[key][2]):  # one row per distinct kernel, named by its owner
            rows[key] = (f"{method.config.kernel} ({name}, {method.config.noise_level:g})", method.kernel, owner)
    ordered = sorted(rows.values(), key=lambda r: r[0].split(" (")[1])  # by method name, as before
    return [("ode", make_kernel("ode")), *((label, kernel) for label, kernel, _ in ordered)]


def analyse(steps: int = 10, shift: float = 3.0, data_std: float = 0.5,
            noise_level: float | None = None) -> tuple[torch.Tensor, list[KernelAnalysis]]:
    if not (math.isfinite(data_std) and data_std > 0):
        raise UserError(f"--data-std must be a finite number > 0, got {data_std!r}")
    sig = make_sigmas(steps, shift)
    return sig, [analyse_kernel(k, sig, data_std, label) for label, k in default_kernels(noise_level)]


def table1_frame(steps: int = 10, shift: float = 3.0, data_std: float = 0.5,
                 noise_level: float | None = None) -> pd.DataFrame:
    """Table 1 as a DataFrame: one row per kernel.

    The ODE's own discretisation error is in every row; `excess_final_var_err` subtracts it, so it is
    the error the kernel's noise adds (at T = 10 the ODE alone is far from exact).
    """
    _, rows = analyse(steps, shift, data_std, noise_level)
    ode_final = next(r.var_rel_err[-1] for r in rows if r.kernel.name == "ode")
    return pd.DataFrame(
        {
            "kernel": [r.label for r in rows],
            "std": [r.kernel.std_formula for r in rows],
            "noise_energy": [r.noise_energy for r in rows],
            "max_abs_var_err": [max(abs(e) for e in r.var_rel_err) for r in rows],
            "final_var_err": [r.var_rel_err[-1] for r in rows],
            "excess_final_var_err": [r.var_rel_err[-1] - ode_final for r in rows],
        }
    )


def _latex(df: pd.DataFrame) -> str:
    cols = ["Kernel", "Noise std", "$\\sum_i \\mathrm{var}_i$", "max $|\\Delta V/V|$", "final $\\Delta V/V$",
            "excess over ODE"]
    lines = ["\\begin{tabular}{llrrrr}", "\\toprule", " & ".join(cols) + " \\\\", "\\midrule"]
    for r in df.itertuples():
        std = (
            r.std.replace("·", "\\cdot ")
            .replace("σ", "\\sigma")
            .replace("Δ", "\\Delta")
            .replace("η", "\\eta")
            .replace("π", "\\pi")
        )
        name = r.kernel.replace("_", "\\_")
        lines.append(f"{name} & ${std}$ & {r.noise_energy:.4f} & {r.max_abs_var_err:.2e} & {r.final_var_err:+.2e} & "
                     f"{r.excess_final_var_err:+.2e} \\\\")
    return "\n".join(lines + ["\\bottomrule", "\\end{tabular}", ""])


def _markdown(df: pd.DataFrame, steps: int, shift: float, data_std: float, noise_level: float | None = None) -> str:
    levels = "each method's default noise level"
    if noise_level is not None:
        levels = f"every kernel at noise level {noise_level:g}"
    head = (
        f"Table 1 — noise injected by each kernel and its marginal-variance error against the exact "
        f"Gaussian model (T = {steps}, shift = {shift:g}, data std s = {data_std:g}, {levels}).\n\n"
        "| kernel | noise std | Σ var (noise energy) | max abs rel. var error | final rel. var error "
        "| excess over ODE |\n"
        "|---|---|---:|---:|---:|---:|\n"
    )
    body = "".join(
        f"| {r.kernel} | `{r.std}` | {r.noise_energy:.4f} | {r.max_abs_var_err:.2e} | {r.final_var_err:+.2e} | "
        f"{r.excess_final_var_err:+.2e} |\n"
        for r in df.itertuples()
    )
    return head + body


def figure1(sig: torch.Tensor, rows: list[KernelAnalysis], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = [float(x) for x in sig]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for colour, r in zip(plt.rcParams["axes.prop_cycle"].by_key()["color"], rows):
        if r.kernel.name != "ode":  # zero std everywhere: nothing to draw on a log axis
            std = [x if x > 0 else float("nan") for x in r.std]
            ax1.plot(s[:-1], std, marker="o", ms=3, color=colour, label=r.label)
        ax2.plot(s[1:], r.var_rel_err, marker="o", ms=3, color=colour, label=r.label)
    ax1.set(
        xlabel="σ at the start of the step", ylabel="noise std per step", title="Injected noise per step", yscale="log"
    )
    ax2.set(xlabel="σ after the step", ylabel="Var / V(σ) − 1", title="Relative marginal-variance error")
    ax2.axhline(0, color="k", lw=0.8)
    for ax in (ax1, ax2):
        ax.invert_xaxis()  # sampling runs from σ = 1 (noise) to σ = 0 (data)
        ax.grid(alpha=0.3)
    ax2.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=130)
    plt.close(fig)


def run_samplers_report(
    steps: int, shift: float, data_std: float, out: Path, json_path: Path | None, console: Console,
    noise_level: float | None = None,
) -> pd.DataFrame:
    from grpo_bench.atomic import atomic_write_text, strict_json

    sig, rows = analyse(steps, shift, data_std, noise_level)
    df = table1_frame(steps, shift, data_std, noise_level)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "table1.md", _markdown(df, steps, shift, data_std, noise_level))
    atomic_write_text(out / "table1.tex", _latex(df))
    atomic_write_text(out / "table1.csv", df.to_csv(index=False))
    figure1(sig, rows, out / "figure1.png")
    if json_path is not None:
        payload = {
            "sigmas": [float(x) for x in sig],
            "data_std": data_std,
            "noise_level": noise_level,
            "kernels": {r.label: {"std": r.std, "var_rel_err": r.var_rel_err} for r in rows},
        }
        json_path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(json_path, strict_json(payload, indent=1))
    level = "default levels" if noise_level is None else f"noise level {noise_level:g}"
    table = Table(title=f"Table 1 — T={steps}, shift={shift:g}, s={data_std:g}, {level}")
    for col in ("kernel", "noise std", "Σ var", "max |ΔV/V|", "final ΔV/V", "excess over ODE"):
        table.add_column(col, justify="right" if col != "kernel" else "left")
    for r in df.itertuples():
        table.add_row(r.kernel, r.std, f"{r.noise_energy:.4f}", f"{r.max_abs_var_err:.2e}", f"{r.final_var_err:+.2e}",
                      f"{r.excess_final_var_err:+.2e}")
    console.print(table)
    console.print(
        f"wrote {out}/table1.{{md,tex,csv}} and {out}/figure1.png" + (f" and {json_path}" if json_path else "")
    )
    return df
