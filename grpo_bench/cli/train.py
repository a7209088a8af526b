"""``grpo-bench train``: build and validate the run config, choose the run folder, show progress.

Everything the user typed is validated (method, KL variant, setting, override keys and values,
group size) before a model is loaded or a single sample is drawn.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from grpo_bench.config.identity import cell_id
from grpo_bench.config.run import RunConfig, from_dict, parse_overrides, resolve, section


def suite_base(path: Path) -> dict[str, Any]:
    """What ``train --like SUITE`` starts from: the suite's base config and budget (what every cell
    of it shares), so that a run with a cell's method, setting and seed reproduces that cell: on the suite's CPU
    kernels too (``budget.cpu_kernels``, set here before the run makes torch choose)."""
    from grpo_bench.cpu_kernels import for_suite
    from grpo_bench.report.suite_parts import load_suite_checked

    suite = for_suite(load_suite_checked(path))
    return {**suite.base, **suite.budget}


FLAG_ALIASES = ("method", "kl", "setting", "seed", "updates", "lr", "device", "model")
"""The config keys ``train`` also takes as --flags. The rule is key=value for every RunConfig key (docs/cli.md);
these common ones have a --flag alias each (``--lr 3e-4`` is ``lr=3e-4``), and a test holds train's options to
this list."""


def build_config(flags: dict[str, Any], overrides: list[str], like: Path | None = None) -> RunConfig:
    """The validated RunConfig: a suite's base (``--like``), then the --flag aliases (``FLAG_ALIASES``, None: not
    given), then key=value overrides (which must not contradict the flags). Without ``--like``, a named real model's
    recipe (models/recipes.yaml) fills the keys none of them set."""
    from grpo_bench.errors import UserError

    data: dict[str, Any] = dict(suite_base(like)) if like is not None else {}
    given = {k: v for k, v in flags.items() if v is not None}
    unknown = sorted(set(flags) - set(FLAG_ALIASES))
    if unknown:  # a programming error, not a user's: the CLI declares exactly these
        raise ValueError(f"build_config: {unknown[0]} is no flag alias; allowed: {', '.join(FLAG_ALIASES)}")
    data.update(given)
    extra = parse_overrides(overrides or [])
    both = sorted(set(extra) & set(given))
    if both:
        k = both[0]
        raise UserError(f"grpo-bench train: {k} is given both as --{k.replace('_', '-')} {given[k]} and as "
                        f"{k}={extra[k]}; give it once")
    data.update(extra)
    if like is None:
        from grpo_bench.config.model_recipe import recipe_defaults

        data.update(recipe_defaults(data.get("model"), data))
    return from_dict(data, where="grpo-bench train: ")


@dataclass(frozen=True)
class RunName:
    """What a train run's default folder is named by, besides its cell id: the resolved config's method, KL
    variant, setting and seed (``section(resolve(cfg), RunName)``)."""

    method: str
    kl: str | None
    setting: str
    seed: int


def default_out(name: RunName, cid: str) -> Path:
    """runs/train/<method>-<kl>-<setting>-s<seed>-<cell id>."""
    return Path("runs") / "train" / f"{name.method}-{name.kl}-{name.setting}-s{name.seed}-{cid}"


def finished(out: Path, cid: str) -> dict[str, Any] | None:
    """final.json of ``out`` when it holds the finished run of cell ``cid`` (its resolved config's id), else
    None."""
    import json

    import yaml

    if not ((out / "DONE").is_file() and (out / "final.json").is_file() and (out / "config.yaml").is_file()):
        return None
    try:
        old = yaml.safe_load((out / "config.yaml").read_text()) or {}
        if cell_id(old) != cid:
            return None
        return json.loads((out / "final.json").read_text())
    except (OSError, ValueError, yaml.YAMLError):
        return None


def require_real_model_stack(model: str, reward: str) -> None:
    """A real model or reward needs diffusers / transformers / peft: say which is missing before the progress
    bar and the run folder, not at the model load."""
    from grpo_bench import models, rewards
    from grpo_bench.extras import require

    # an embedded world's model and rewards ship with the package (their factories declare ``embedded``)
    if not (model in models.MODELS and getattr(models.MODELS.get(model), "embedded", False)):
        for module in ("diffusers", "transformers", "peft"):
            require(module, f"model {model}")
    if not (reward in rewards.REWARDS and getattr(rewards.REWARDS.get(reward), "embedded", False)):
        require("transformers", f"reward {reward}")


def run_train(cfg: RunConfig, out: Path | None, resume: bool, console: Console) -> dict[str, Any]:
    from grpo_bench.config.sections import Cadence, Sampling
    from grpo_bench.train.trainer import train

    require_real_model_stack(cfg.model, cfg.reward)
    chosen = out is None
    resolved = resolve(cfg)
    cid = cell_id(resolved)
    out = default_out(section(resolved, RunName), cid) if out is None else out
    done = finished(out, cid) if resume and int(os.environ.get("RANK", "0")) == 0 else None
    if done is not None:
        console.print(f"already done: {out} finished this run earlier (policy in {out / 'policy'}); "
                      "nothing to train. Use --no-resume to train it again.", highlight=False)
        _print_done(out, done, cfg.reward, console)
        return done
    if int(os.environ.get("RANK", "0")) != 0:  # launched data-parallel: rank 0 alone reports
        return train(cfg, out, resume=resume)
    if chosen:
        console.print(f"run folder: [bold]{out}[/]")
    columns = (
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
        TextColumn("reward {task.fields[reward]}"), TextColumn("kl {task.fields[kl]}"),
        TimeElapsedColumn(), TimeRemainingColumn(),
    )
    from grpo_bench import interrupt

    def first_ctrl_c() -> None:
        console.print("stopping after this update (a checkpoint is written); Ctrl-C again stops at once",
                      markup=False, highlight=False)

    interrupt.reset()
    from grpo_bench.cli.train_cost import before_line, estimate_line, plan_line

    cadence = section(cfg, Cadence)
    console.print(plan_line(section(cfg, Sampling), cadence), highlight=False)
    console.print(before_line(cfg), highlight=False, soft_wrap=True)
    told: list[bool] = []
    with interrupt.first_stops_second_kills(on_first=first_ctrl_c), \
            Progress(*columns, console=console, transient=False) as bar:
        task = bar.add_task(f"{cfg.method} train", total=cfg.updates, reward="-", kl="-")

        def progress(done: int, total: int, line: dict[str, Any]) -> None:
            bar.update(task, completed=done, reward=f"{line.get('reward', float('nan')):+.4f}",
                       kl=f"{line.get('kl', float('nan')):.2e}")
            if not told and done < total:  # once, after this invocation's first update
                told.append(True)
                bar.console.print(estimate_line(done, total, line, cadence), highlight=False)

        final = train(cfg, out, resume=resume, progress=progress)
    if "metrics" not in final:  # non-main ranks of a multi-process run write and report nothing
        return final
    _print_done(out, final, cfg.reward, console)
    return final


def reward_label(reward: str) -> str:
    """How the summary line names a run's training reward (eval_reward is that reward's composite): the reward's
    declared ``label`` (an embedded world's judge or oracle), else its name."""
    from grpo_bench.rewards import REWARDS

    return str(getattr(REWARDS.get(reward), "label", reward)) if reward in REWARDS else reward


def _number(value: Any) -> float:
    """A value of final.json as a float: its null (a missing value, strict JSON) reads as NaN."""
    return float("nan") if value is None else float(value)


def _print_done(out: Path, final: dict[str, Any], reward: str, console: Console) -> None:
    ev = final.get("eval") or {}
    console.print(
        f"done: {out}  reward {_number((final.get('metrics') or {}).get('reward')):+.4f}  "
        f"eval {reward_label(reward)} {_number(ev.get('eval_reward')):+.4f}  "
        f"oracle correct {_number(ev.get('eval_correct')):.3f}  "
        f"wall {_number(final.get('wall_time') or 0):.0f}s", highlight=False
    )
