"""What a ``train`` run will cost: the budget keys in its help, an estimate before it starts, and one after its first
update.

Before the first update the estimate counts the run's sample-step passes (train/compute.py's closed form) and
prices them at the pace of cells finished on this machine (suite/pace.py ``pass_pace``, every suite folder under
``runs/``); where none ran here, at ``grpo-bench plan``'s arithmetic for one GPU. Either is labelled as what it is.

The help text is static (the CLI must start without importing the config and pydantic), so a test
holds it to RunConfig's defaults. The estimate reads the first update's own phase times from its
metrics line (``time_*``): per-update work, evaluations every ``eval_every`` updates and the final
one, gradient diagnostics every ``diag_every``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the CLI's help loads without the config's imports
    from grpo_bench.config.run import RunConfig
    from grpo_bench.config.sections import Cadence, Sampling

BUDGET_HELP = (
    "Budget keys (key=value; RunConfig's defaults): updates=200, prompts_per_update=2, group_size=8 (rollouts "
    "per prompt), steps=10 (sampler steps), minibatches=2 (optimizer steps per rollout), inner_epochs=1, "
    "eval_every=25, eval_samples=4, diag_every=50, video_size=16. Each update samples prompts_per_update x "
    "group_size videos of steps steps; train prints an estimate of the whole run before it starts and a "
    "measured one after its first update (--updates 5 for a first look)."
)
BUDGET_DEFAULTS = {"updates": 200, "prompts_per_update": 2, "group_size": 8, "steps": 10, "minibatches": 2,
                   "inner_epochs": 1, "eval_every": 25, "eval_samples": 4, "diag_every": 50, "video_size": 16}
"""What BUDGET_HELP states (a test compares it with RunConfig)."""


def clock(seconds: float) -> str:
    seconds = int(round(max(0.0, seconds)))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds // 60 % 60:02d} min"


def plan_line(sampling: Sampling, cadence: Cadence) -> str:
    """Before the first update: how much work the run is."""
    return (f"{cadence.updates} updates x {sampling.prompts_per_update} prompts x {sampling.group_size} rollouts, "
            f"{sampling.steps} sampler steps; an evaluation every {cadence.eval_every} updates")


def suite_folders(runs: Path) -> list[Path]:
    """The suite folders under ``runs`` (each holds cell folders; ``runs/train`` holds none and measures nothing)."""
    return sorted(p for p in runs.iterdir() if p.is_dir()) if runs.is_dir() else []


def before_line(cfg: RunConfig, runs: Path = Path("runs")) -> str:
    """Before the first update: what the whole run will take, and what that estimate rests on."""
    from grpo_bench.config.expected_compute import ComputeShape
    from grpo_bench.config.run import resolve, section
    from grpo_bench.suite.pace import pass_pace, run_passes

    resolved = resolve(cfg)
    passes = run_passes(section(resolved, ComputeShape))
    measured = pass_pace(suite_folders(runs), resolved.model)
    if measured is not None:
        pace, cells = measured
        return (f"estimate: about {clock(passes * pace)} for {passes:,} sample-step passes, at the pace of {cells} "
                f"cell(s) of model {resolved.model} finished on this machine ({runs}/); a measured estimate "
                "follows update 1")
    from grpo_bench.cli.plan import DEFAULT_TFLOPS
    from grpo_bench.plan.estimate import estimate
    from grpo_bench.plan.inputs import PlanInputs

    plan = estimate(section(resolved, PlanInputs), tflops=DEFAULT_TFLOPS)
    return (f"estimate: about {clock(plan.seconds_per_update * resolved.updates)} by grpo-bench plan's arithmetic "
            f"for one GPU at {DEFAULT_TFLOPS:g} TFLOP/s (no cell measured on this machine yet; a CPU is slower); "
            "a measured estimate follows update 1")


def _count(start: int, stop: int, every: int) -> int:
    """Updates u in [start, stop) with u % every == 0 (every 0: none)."""
    return 0 if every <= 0 or stop <= start else len(range(-(-start // every) * every, stop, every))


def estimate_line(done: int, total: int, line: dict[str, Any], cadence: Cadence) -> str:
    """After the first update of this invocation: what it took and what the rest will take (``cadence``: when the
    run evaluates and diagnoses)."""
    work = {name: float(line.get(f"time_{name}") or 0.0) for name in ("rollout", "reward", "train")}
    per_update = sum(work.values())
    left = total - done
    evals = _count(done, total - 1, cadence.eval_every) + 1  # the schedule's evaluations, then the final one
    evals += sum(1 for u in set(cadence.eval_at) if done <= u < total - 1 and u % cadence.eval_every)
    diags = _count(done, total, cadence.diag_every)
    t_eval, t_diag = line.get("time_eval"), line.get("time_diag")
    rest = left * per_update + evals * float(t_eval or per_update) + diags * float(t_diag or 0.0)
    parts = ", ".join(f"{name} {clock(t)}" for name, t in work.items())
    return (f"update {done} of {total} took {clock(per_update)} ({parts}); the other {left} and {evals} "
            f"evaluation(s) take about {clock(rest)} more at this pace")
