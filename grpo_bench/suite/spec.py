"""Suites: a YAML file that expands into cells, one training run each (docs/design.md §6–7).

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

A cell's config is RunConfig defaults <- base <- budget <- command-line overrides <- its grid
values <- its seed, then ``resolve``d (method defaults filled in). Its id is ``cell_id`` of that
resolved config (train/identity.py): its science fields and the digests of the shipped world weights it
loads, so it does not depend on key order, on which file declared a value, on the host, its device,
thread count or precision, and it changes when the world model or judge is rebuilt. Everything is
validated before anything runs; an error names the file, the key path (``grid.kl[2]``) and the allowed
values.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from grpo_bench import safe_yaml
from grpo_bench.errors import UserError, unknown
from grpo_bench.params import is_param_key
from grpo_bench.preflight import folder_name, shown
from grpo_bench.train.config import FIELDS, RunConfig, coerce, flatten_sections, from_dict, resolve
from grpo_bench.train.identity import cell_id

SUITE_KEYS = ("name", "description", "preset", "base", "grid", "union", "seeds", "budget", "report", "decide")
BUDGET_CONFIG_KEYS = (
    "updates", "prompts_per_update", "group_size", "steps", "video_size", "inner_epochs", "minibatches",
    "micro_batch", "eval_every", "eval_samples", "diag_every", "checkpoint_every", "save_videos",
)
RESOURCE_KEYS = {"gpus_per_cell": int, "timeout_min": int, "cpus_per_cell": int, "gpu_memory_gb": int,
                 "accelerate_config": str}
"""Budget keys read by the runner, not by the trainer (they never change a cell id): GPUs per cell
(default 1 on a GPU machine, none on SLURM unless set), the SLURM time limit and the SLURM cpus per task;
GPU memory per device (``grpo-bench plan`` refuses cells predicted not to fit) and the accelerate
config a multi-GPU cell is launched with (default multi_gpu; fsdp2 / deepspeed_zero2 shard)."""
REPORT_KEYS = ("tables", "figures", "baseline", "smooth", "min_effect", "strata")
DECIDE_KEYS = ("max_seeds", "block", "alpha")
MAX_SEEDS = 1000
MAX_SEED = 2**63 - 1
"""Seeds are stored as int64."""
MAX_CELLS = 10_000
"""Cells of one suite (a grid that expands further is a typo, not a plan)."""
LABEL_FIRST = ("method", "kl")
"""Keys always shown in a cell's row label, in this order (their resolved values)."""


@dataclass
class ReportSpec:
    """What ``grpo-bench report`` renders for a suite."""

    tables: list[str] = field(default_factory=lambda: ["table2", "winrates"])
    """Registered tables (grpo_bench.report.parts.TABLES)."""
    figures: list[str] = field(default_factory=lambda: ["reward_curves", "kl_curves", "drift", "strips"])
    """Registered figures (grpo_bench.report.parts.FIGURES)."""
    baseline: dict[str, Any] = field(default_factory=dict)
    """Config values selecting the baseline row of each setting for paired differences."""
    smooth: int = 5
    """Rolling window (updates) of the training-reward curves."""
    min_effect: float | dict[str, float] | None = None
    """Smallest difference of interest for the power table: a number, or {column title: number,
    'default': number}; None keeps the defaults (oracle 0.05, judge 0.25)."""
    strata: list[str] = field(default_factory=lambda: ["setting"])
    """Config keys that split the report into separate families (each with its own baseline row,
    bold, Holm family and power rows), e.g. [setting, reward] for a table with two reward tracks."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class DecideSpec:
    """How ``grpo-bench run --until-decided`` adds seeds (docs/statistics.md, "Adding seeds in blocks")."""

    max_seeds: int = 12
    """Stop at this many seeds at the latest (the information fraction of a look is seeds / max_seeds)."""
    block: int = 3
    """Seeds added per look."""
    alpha: float = 0.05
    """Overall two-sided level, spent with O'Brien-Fleming over the planned looks."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class Suite:
    """A validated suite."""

    name: str
    path: str
    base: dict[str, Any]
    grid: dict[str, list[Any]]
    union: list[dict[str, list[Any]]]
    seeds: list[int]
    budget: dict[str, Any]
    resources: dict[str, int]
    report: ReportSpec
    description: str = ""
    overrides: dict[str, Any] = field(default_factory=dict)
    text: str = ""
    """The suite file as read (stored next to the results); empty for a generated suite."""
    decide: DecideSpec | None = None
    """The ``decide`` block (None: the suite has none; ``run --until-decided`` then refuses)."""

    def to_yaml(self) -> str:
        """The suite as a file (what ``run`` stores next to the results of a generated suite)."""
        data = {"name": self.name, "description": self.description, "base": {**self.base, **self.overrides},
                "grid": self.grid, "union": self.union, "seeds": self.seeds,
                "budget": {**self.budget, **self.resources}, "report": self.report.to_dict(),
                "decide": self.decide.to_dict() if self.decide else {}}
        return yaml.safe_dump({k: v for k, v in data.items() if v not in ({}, [], "")}, sort_keys=False)

    def grids(self) -> list[dict[str, list[Any]]]:
        return ([self.grid] if self.grid else []) + self.union

    def label_keys(self) -> list[str]:
        """Grid keys of all grids, in declared order, without seed/setting; method and kl first."""
        keys = list(LABEL_FIRST)
        for g in self.grids():
            keys += [k for k in g if k not in keys and k != "setting"]
        return keys


@dataclass(frozen=True)
class Cell:
    """One run of a suite."""

    id: str
    labels: dict[str, Any]
    """The grid values and the seed that made this cell (user-facing names)."""
    group: str
    """Row label without seed and setting, from resolved values ("sage_grpo kl=dual")."""
    config: RunConfig
    """The resolved config the trainer receives."""

    def meta(self, suite: str) -> dict[str, Any]:
        return {"id": self.id, "suite": suite, "labels": self.labels, "group": self.group,
                "config": self.config.to_dict()}


# --- validation ----------------------------------------------------------------------------
def _mapping(value: Any, where: str, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise UserError(f"{where}{what} must be a mapping of key: value, got {type(value).__name__}")
    return value


def _check_name(key: str, value: Any, where: str) -> None:
    """Names are checked where they are written, so the error shows the key path."""
    if key == "method":
        from grpo_bench.core.method import METHODS

        METHODS.get(value, where=where)
    elif key == "setting":
        from grpo_bench.rewards.base import SETTINGS

        if value not in SETTINGS:
            raise unknown("setting", value, SETTINGS, where)
    elif key == "kl" and value is not None:
        from grpo_bench.core.trust_region import KL_VARIANTS

        KL_VARIANTS.get(value, where=where)


def _config_values(data: Any, where: str, what: str, allowed: tuple[str, ...] | None = None) -> dict[str, Any]:
    out = {}
    for key, value in flatten_sections(_mapping(data, where, what), f"{where}{what}: ").items():
        if allowed is not None and key not in allowed:
            raise unknown(f"{what} key", key, allowed, where)
        out[key] = coerce(key, value, f"{where}{what}.{key}: ")
        _check_name(key, out[key], f"{where}{what}.{key}: ")
    return out


def _grid(data: Any, where: str, path: str) -> dict[str, list[Any]]:
    grid = _mapping(data, where, path)
    if not grid:
        raise UserError(f"{where}{path} is empty; give at least one key: [values] (or leave it out)")
    out = {}
    for key, values in grid.items():
        if key == "seed":
            raise UserError(f"{where}{path}.seed: seeds go in the top-level 'seeds' list, not in a grid")
        if key not in FIELDS and not is_param_key(key):
            raise unknown("config key", key, FIELDS, f"{where}{path}: ")
        if not isinstance(values, list):
            raise UserError(f"{where}{path}.{key} must be a list of values, got {values!r}")
        if not values:
            raise UserError(f"{where}{path}.{key} is an empty list; give at least one value")
        out[key] = []
        for i, v in enumerate(values):
            item = coerce(key, v, f"{where}{path}.{key}[{i}]: ")
            _check_name(key, item, f"{where}{path}.{key}[{i}]: ")
            out[key].append(item)
    return out


def _report(data: Any, where: str) -> ReportSpec:
    from grpo_bench.report.parts import FIGURES, TABLES

    spec = _mapping(data, where, "report")
    for key in spec:
        if key not in REPORT_KEYS:
            raise unknown("report key", key, REPORT_KEYS, where)
    out = ReportSpec()
    for key, registry in (("tables", TABLES), ("figures", FIGURES)):
        if key in spec:
            names = spec[key]
            if not isinstance(names, list):
                raise UserError(f"{where}report.{key} must be a list of names; allowed: {', '.join(registry.names())}")
            for i, name in enumerate(names):
                registry.get(str(name), where=f"{where}report.{key}[{i}]: ")
            setattr(out, key, [str(n) for n in names])
    if "baseline" in spec:
        out.baseline = _config_values(spec["baseline"], where, "report.baseline")
    if "smooth" in spec:
        if not isinstance(spec["smooth"], int) or isinstance(spec["smooth"], bool) or spec["smooth"] < 1:
            raise UserError(f"{where}report.smooth must be an integer >= 1, got {spec['smooth']!r}")
        out.smooth = spec["smooth"]
    if spec.get("min_effect") is not None:  # None: a stored spec without one
        out.min_effect = _min_effect(spec["min_effect"], where)
    if "strata" in spec:
        keys = spec["strata"]
        if not isinstance(keys, list) or not keys:
            raise UserError(f"{where}report.strata must be a non-empty list of config keys, e.g. [setting, reward]")
        for i, key in enumerate(keys):
            if key not in FIELDS:
                raise unknown(f"report.strata[{i}] config key", key, FIELDS, where)
        out.strata = [str(k) for k in keys]
    return out


def _min_effect(value: Any, where: str) -> float | dict[str, float]:
    from grpo_bench.report.tables import TABLE2

    def positive(v: Any, key: str) -> float:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise UserError(f"{where}{key} must be a finite number > 0, got {v!r}")
        return float(v)

    if not isinstance(value, dict):
        return positive(value, "report.min_effect")
    allowed = [*(title for title, _, _ in TABLE2), "default"]  # Table 2's headline columns
    for key in value:
        if key not in allowed:
            raise unknown("report.min_effect column", key, allowed, where)
    return {str(k): positive(v, f"report.min_effect.{k}") for k, v in value.items()}


def _decide(data: Any, seeds: list[int], where: str) -> DecideSpec:
    spec = _mapping(data, where, "decide")
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


def parse_suite(data: Any, path: str = "<suite>", overrides: dict[str, Any] | None = None) -> Suite:
    """Validate a suite mapping (as loaded from YAML); ``overrides`` are typed command-line values."""
    where = f"{path}: "
    data = _mapping(data, where, "a suite")
    for key in data:
        if key not in SUITE_KEYS:
            raise unknown("suite key", key, SUITE_KEYS, where)
    name = data.get("name")
    if not isinstance(name, str):
        raise UserError(f"{where}name must be a folder-safe string (letters, digits, _ . -), got {shown(name, 60)}")
    folder_name(name, where)
    base = _config_values(data.get("base", {}), where, "base")
    if "preset" in data:  # named calibrated values (grpo_bench/train/presets.py); base refines them
        from grpo_bench.train.presets import preset

        base = {**_config_values(preset(data["preset"], f"{where}preset: "), where, "preset"), **base}
    grid = _grid(data["grid"], where, "grid") if "grid" in data else {}
    union_raw = data.get("union", [])
    if not isinstance(union_raw, list):
        raise UserError(f"{where}union must be a list of grids, got {type(union_raw).__name__}")
    union = [_grid(g, where, f"union[{j}]") for j, g in enumerate(union_raw)]
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
    budget_raw = _mapping(data.get("budget", {}), where, "budget")
    allowed_budget = BUDGET_CONFIG_KEYS + tuple(RESOURCE_KEYS)
    resources: dict[str, int] = {}
    budget: dict[str, Any] = {}
    for key, value in budget_raw.items():
        if key not in allowed_budget:
            raise unknown("budget key", key, allowed_budget, where)
        if key in RESOURCE_KEYS:
            if RESOURCE_KEYS[key] is str:  # accelerate_config: a shipped launch config or a YAML path
                from grpo_bench.train.distributed import config_path

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
        _check_name(key, value, "command line: ")
    report = _report(data.get("report", {}), where)
    description = data.get("description", "")
    if not isinstance(description, str):
        raise UserError(f"{where}description must be text, got {type(description).__name__}")
    decide = _decide(data["decide"], seeds, where) if data.get("decide") is not None else None
    return Suite(name, path, base, grid, union, seeds, budget, resources, report, description, overrides,
                 decide=decide)


def load_suite(path: str | Path, overrides: dict[str, Any] | None = None) -> Suite:
    """A suite file through the bounded YAML loader (safe_yaml.py), validated."""
    text = safe_yaml.read_text(path, "suite file")
    suite = parse_suite(safe_yaml.load_text(text, str(path)), str(path), overrides)
    suite.text = text
    return suite


# --- expansion ------------------------------------------------------------------------------
def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, list):
        return ",".join(map(str, value))
    return str(value)


def group_label(cfg: RunConfig, keys: list[str]) -> str:
    parts = [cfg.method] + [f"{k}={_show(cfg.get(k))}" for k in keys if k != "method"]
    return " ".join(parts)


def expand(suite: Suite) -> list[Cell]:
    """Every cell of the suite, in grid order then seed order; duplicate runs are an error."""
    fixed = {**suite.base, **suite.budget, **suite.overrides}
    keys = suite.label_keys()
    cells: list[Cell] = []
    seen: dict[str, dict[str, Any]] = {}
    n = sum(math.prod(len(v) for v in g.values()) for g in suite.grids()) or 1
    if n * len(suite.seeds) > MAX_CELLS:
        raise UserError(f"{suite.path}: {n * len(suite.seeds)} cells (grid x seeds); at most {MAX_CELLS}")
    combos = [dict(zip(g, values)) for g in suite.grids() for values in itertools.product(*g.values())] or [{}]
    for combo in combos:
        for seed in suite.seeds:
            labels = {**combo, "seed": seed}
            shown = ", ".join(f"{k}={_show(v)}" for k, v in labels.items())
            cfg = resolve(from_dict({**fixed, **labels}, where=f"{suite.path}: cell ({shown}): "))
            cid = cell_id(cfg)
            if cid in seen:
                first = ", ".join(f"{k}={_show(v)}" for k, v in seen[cid].items())
                raise UserError(f"{suite.path}: cells ({first}) and ({shown}) are the same run (identical "
                                f"resolved configs, id {cid}); remove one of them from grid/union")
            seen[cid] = labels
            # A row shows method, kl and the keys its own grid sets (a union entry's keys only on its cells).
            shown_keys = [k for k in keys if k in LABEL_FIRST or k in combo]
            cells.append(Cell(cid, labels, group_label(cfg, shown_keys), cfg))
    return cells


# --- ablations ----------------------------------------------------------------------------------
def _sde_methods(names: list[str]) -> list[str]:
    """--sde accepts method names or kernel names (the method whose kernel it is)."""
    from grpo_bench.core.method import METHODS

    by_kernel = {METHODS.get(m).defaults.kernel: m for m in METHODS.names()}
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
    """'all' for every registered name, else the short names joined (folder names stay short)."""
    return "all" if sorted(names) == sorted(every) else "-".join(shown)


def legacy_ablation_name(base: Suite, grid: dict[str, list[Any]]) -> str:
    """The folder name ablations had before short names (full method and KL names), so that a
    suite started under it resumes there."""
    parts = []
    if "method" in grid:
        parts.append("sde-" + "-".join(grid["method"]))
    if "kl" in grid:
        parts.append("kl-" + "-".join(grid["kl"]))
    if "equalizer" in grid:
        parts.append("eq-" + "-".join(_show(e) for e in grid["equalizer"]))
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
        parts.append("sde-" + _listed(grid["method"], METHODS.names(), kernels))
    if kl:
        for name in kl:
            KL_VARIANTS.get(name, where="--kl: ")
        grid["kl"] = list(kl)
        parts.append("kl-" + _listed(kl, KL_VARIANTS.names(), kl))
    if equalizer:
        grid["equalizer"] = list(equalizer)
        parts.append("eq-" + "-".join(_show(e) for e in equalizer))
    if not grid:
        raise UserError("ablate: give at least one of --kl, --equalizer, --sde")
    name = f"ablate_{base.name.removeprefix('ablate_')}_" + "_".join(parts)
    return dataclasses.replace(base, name=name, path=f"{base.path} (ablate)", grid=grid, union=[])
