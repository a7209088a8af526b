"""Suite files: a YAML file that expands into cells, one training run each (docs/design.md §6–7).

A suite file::

    name: main_table              # folder under runs/; letters, digits, _ . -
    description: ...              # optional, free text
    base: {updates: 40, ...}      # a run config (RunConfig keys) shared by every cell
    grid: {setting: [A, B], method: [dance_grpo, sage_grpo]}   # cartesian product
    union:                        # extra grids for cells outside the product (optional)
      - {method: [sage_grpo], kl: [none, fixed]}
    seeds: [0, 1, 2]              # every cell runs once per seed
    budget: {updates: 40, prompts_per_update: 2, gpus_per_cell: 1}      # equal compute for all
    report: {tables: [table2], figures: [reward_curves], baseline: {method: dance_grpo}}
    decide: {max_seeds: 12, block: 3, alpha: 0.05}   # optional: ``run --until-decided`` adds seeds
    pick: [...]                   # optional: rows chosen by a rule from stored reports (report/picks.py)

How a suite becomes cells and what a cell id depends on: expand.py. Everything is validated before
anything runs; an error names the file, the key path (``grid.kl[2]``) and the allowed values.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from grpo_bench import safe_yaml
from grpo_bench.config.run import coerce
from grpo_bench.errors import UserError, unknown
from grpo_bench.preflight import folder_name, shown
from grpo_bench.suite.report_section import parse_report
from grpo_bench.suite.spec import DecideSpec, Suite
from grpo_bench.suite.values import check_name, config_values, grid_values, mapping

SUITE_KEYS = ("name", "description", "preset", "base", "grid", "union", "seeds", "budget", "report", "decide",
              "tune", "design", "pick")
BUDGET_CONFIG_KEYS = (
    "updates", "prompts_per_update", "group_size", "steps", "video_size", "inner_epochs", "minibatches",
    "micro_batch", "eval_every", "eval_at", "eval_samples", "diag_every", "checkpoint_every", "save_videos",
)
RESOURCE_KEYS = {"gpus_per_cell": int, "timeout_min": int, "cpus_per_cell": int, "gpu_memory_gb": int,
                 "accelerate_config": str, "requeue": int, "cpu_kernels": str}
"""Budget keys read by the runner, not by the trainer (they never change a cell id): GPUs per cell
(default 1 on a GPU machine, none on SLURM unless set), the SLURM time limit and the SLURM cpus per task;
GPU memory per device (``grpo-bench plan`` refuses cells predicted not to fit) and the accelerate
config a multi-GPU cell is launched with (default multi_gpu; fsdp2 / deepspeed_zero2 shard); how many times
the SLURM backend resubmits a cell whose job died at its time limit (``requeue``, default 0; ``grpo-bench
plan`` refuses a cell predicted to outlast timeout_min x (1 + requeue)); the CPU kernels every cell runs on
(``cpu_kernels``: ``native``, the default, or ``avx2``, one table on any x86-64 CPU: cpu_kernels.py)."""
DECIDE_KEYS = ("max_seeds", "block", "alpha")
MAX_SEEDS = 1000
MAX_SEED = 2**63 - 1
"""Seeds are stored as int64."""


def _decide(data: Any, seeds: list[int], where: str) -> DecideSpec:
    spec = mapping(data, where, "decide")
    for key in spec:
        if key not in DECIDE_KEYS:
            raise unknown("decide key", key, DECIDE_KEYS, where)
    out = DecideSpec()
    for key in ("max_seeds", "block"):
        value = spec.get(key, getattr(out, key))
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise UserError(f"{where}decide.{key} must be an integer >= 1, got {shown(value, 40)}")
    max_seeds, block = spec.get("max_seeds", out.max_seeds), spec.get("block", out.block)
    if not len(seeds) <= max_seeds <= MAX_SEEDS or max_seeds < 2:
        raise UserError(f"{where}decide.max_seeds must be an integer in {max(2, len(seeds))}..{MAX_SEEDS} "
                        f"(at least the {len(seeds)} listed seeds, and 2 for a paired test), got {max_seeds}")
    if max(seeds) + (max_seeds - len(seeds)) > MAX_SEED:
        raise UserError(f"{where}decide.max_seeds: added seeds continue after {max(seeds)} and would pass {MAX_SEED}")
    alpha = spec.get("alpha", out.alpha)
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha < 1:
        raise UserError(f"{where}decide.alpha must be a number strictly between 0 and 1, got {shown(alpha, 40)}")
    return DecideSpec(max_seeds=max_seeds, block=block, alpha=float(alpha))


Picker = Callable[[Any, str, str, list[int]], tuple[list[dict[str, list[Any]]], dict[str, Any]]]
"""Resolves a ``pick`` block into union grids and the baseline's values (report/picks.py ``resolve_picks``: it
reads stored reports, which the suite layer does not; the report layer hands it in)."""


def planned_seeds(seeds: list[int], decide: DecideSpec | None) -> list[int]:
    """Every seed a suite may run: its own, and those ``run --until-decided`` adds after them."""
    extra = decide.max_seeds - len(seeds) if decide else 0
    return [*seeds, *range(max(seeds) + 1, max(seeds) + 1 + extra)]


def parse_suite(data: Any, path: str = "<suite>", overrides: dict[str, Any] | None = None,
                picker: Picker | None = None) -> Suite:
    """Validate a suite mapping (as loaded from YAML); ``overrides`` are typed command-line values; ``picker``
    resolves a ``pick`` block (a suite with one is refused without it)."""
    where = f"{path}: "
    data = mapping(data, where, "a suite")
    for key in data:
        if key not in SUITE_KEYS:
            raise unknown("suite key", key, SUITE_KEYS, where)
    name = data.get("name")
    if not isinstance(name, str):
        raise UserError(f"{where}name must be a folder-safe string (letters, digits, _ . -), got {shown(name, 60)}")
    folder_name(name, where)
    base = config_values(data.get("base", {}), where, "base")
    if "preset" in data:  # named calibrated values (grpo_bench/config/presets.py); base refines them
        from grpo_bench.config.presets import preset

        base = {**config_values(preset(data["preset"], f"{where}preset: "), where, "preset"), **base}
    grid = grid_values(data["grid"], where, "grid") if "grid" in data else {}
    union_raw = data.get("union", [])
    if not isinstance(union_raw, list):
        raise UserError(f"{where}union must be a list of grids, got {type(union_raw).__name__}")
    union = [grid_values(g, where, f"union[{j}]") for j, g in enumerate(union_raw)]
    design = None
    if data.get("design") is not None:  # a factorial: its points join the union, its claims checked now
        from grpo_bench.suite.design import parse_design

        design = parse_design(data["design"], where, {k for g in [grid, *union] for k in g}, base.get("method"))
        union = [*union, *design.union()]
    seeds = data.get("seeds", [0])
    if (not isinstance(seeds, list) or not seeds
            or not all(isinstance(s, int) and not isinstance(s, bool) and 0 <= s <= MAX_SEED for s in seeds)):
        raise UserError(f"{where}seeds must be a non-empty list of integers in 0..{MAX_SEED}, got {shown(seeds, 80)}")
    if len(seeds) > MAX_SEEDS:
        raise UserError(f"{where}seeds lists {len(seeds)} seeds; at most {MAX_SEEDS}")
    if len(set(seeds)) != len(seeds):
        raise UserError(f"{where}seeds lists a seed twice: {seeds!r}")
    if "seed" in base:
        raise UserError(f"{where}base.seed: set seeds in the top-level 'seeds' list")
    decide = _decide(data["decide"], seeds, where) if data.get("decide") is not None else None
    baseline: dict[str, Any] = {}
    if data.get("pick") is not None:  # rows chosen by a declared rule from stored reports, tuned like the others
        if picker is None:
            raise UserError(f"{where}pick reads stored reports: load the suite through a grpo-bench command")
        picked, baseline = picker(data["pick"], where, path, planned_seeds(seeds, decide))
        union = [*union, *picked]
    budget_raw = mapping(data.get("budget", {}), where, "budget")
    allowed_budget = BUDGET_CONFIG_KEYS + tuple(RESOURCE_KEYS)
    resources: dict[str, int] = {}
    budget: dict[str, Any] = {}
    for key, value in budget_raw.items():
        if key not in allowed_budget:
            raise unknown("budget key", key, allowed_budget, where)
        if key in RESOURCE_KEYS:
            if key == "cpu_kernels":
                from grpo_bench.cpu_kernels import check

                check(value, f"{where}budget.")
            elif RESOURCE_KEYS[key] is str:  # accelerate_config: a shipped launch config or a YAML path
                from grpo_bench.config.accelerate_configs import config_path

                config_path(str(value))
            elif not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise UserError(f"{where}budget.{key} must be an integer >= 1, got {value!r}")
            resources[key] = value
        else:
            budget[key] = coerce(key, value, f"{where}budget.{key}: ")
    overrides = dict(overrides or {})
    varied = {k for g in [grid, *union] for k in g}
    clash = sorted(varied & set(overrides))
    if clash:
        raise UserError(f"command line: {', '.join(clash)} is varied by {path}'s grid; edit the suite instead")
    if "seed" in overrides:
        raise UserError(f"command line: seed is set by {path}'s 'seeds' list; edit the suite instead")
    for key, value in overrides.items():
        check_name(key, value, "command line: ")
    report = parse_report(data.get("report", {}), where)
    if baseline:
        if report.baseline:
            raise UserError(f"{where}report.baseline and a pick's baseline: true both name the baseline; keep one")
        report.baseline = baseline
    if design is not None:
        report.design = design.to_dict()
    description = data.get("description", "")
    if not isinstance(description, str):
        raise UserError(f"{where}description must be text, got {type(description).__name__}")
    tune = None
    if data.get("tune") is not None:
        from grpo_bench.config.run import RunConfig
        from grpo_bench.suite.tune import parse_tune

        updates = {**base, **budget, **overrides}.get("updates", RunConfig.updates)
        tune = parse_tune(data["tune"], where, seeds=seeds, grid=grid, union=union, base={**base, **overrides},
                          updates=updates, budget_keys=BUDGET_CONFIG_KEYS)
    return Suite(name, path, base, grid, union, seeds, budget, resources, report, description, overrides,
                 decide=decide, tune=tune, design=design)


def load_suite(path: str | Path, overrides: dict[str, Any] | None = None, picker: Picker | None = None) -> Suite:
    """A suite file through the bounded YAML loader (safe_yaml.py), validated."""
    text = safe_yaml.read_text(path, "suite file")
    suite = parse_suite(safe_yaml.load_text(text, str(path)), str(path), overrides, picker)
    suite.text = text
    return suite
