"""Suite files: validation errors (file, key path, allowed values), expansion, stable cell ids,
ablation grids, worker slots and GPU pinning."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
import yaml
from suite_support import SMALL_SUITE, TRAINER, write_suite
from support_paths import SUPPORT

from grpo_bench.config.run import EXECUTION_FIELDS, ID_NEUTRAL, from_dict, resolve
from grpo_bench.core.method import METHODS
from grpo_bench.core.trust_region import KL_VARIANTS
from grpo_bench.errors import UserError
from grpo_bench.report.suite_parts import load_suite_checked
from grpo_bench.suite import local_pool, runner
from grpo_bench.suite.ablation import ablation
from grpo_bench.suite.expand import expand
from grpo_bench.suite.parse import load_suite, parse_suite

SUITES = Path(__file__).resolve().parents[2] / "suites"


def _suite(**changes):
    data = json.loads(json.dumps(SMALL_SUITE))
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    return data


def test_expansion_labels_groups_and_ids_match_an_independent_resolve(tmp_path):
    suite = load_suite(write_suite(tmp_path / "s.yaml"))
    cells = expand(suite)
    # grid: 1 setting x 2 methods, union: 1 cell; x 2 seeds
    assert len(cells) == 6
    assert [c.group for c in cells[::2]] == ["dance_grpo kl=none", "sage_grpo kl=dual", "sage_grpo kl=none"]
    assert [c.labels["seed"] for c in cells[:2]] == [0, 1]
    # the id hashes the resolved config's science fields and the weights' digests, computed here
    # without the suite or identity code
    cfg = resolve(from_dict({**SMALL_SUITE["base"], "setting": "A", "method": "dance_grpo", "seed": 1}))
    science = {k: v for k, v in cfg.to_dict().items()
               if k not in EXECUTION_FIELDS and not (k in ID_NEUTRAL and v == ID_NEUTRAL[k])}
    blob = json.dumps({**science, "assets": _world_digests()}, sort_keys=True, separators=(",", ":"), default=str)
    expected = hashlib.sha256(blob.encode()).hexdigest()[:12]
    assert cells[1].id == expected
    assert cells[1].config.kl == "none" and cells[3].config.kl == "dual" and cells[3].config.equalizer is True


def _world_digests() -> dict[str, str]:
    """sha256 of the shipped world weights, computed here without the fingerprint module."""
    import hashlib

    from grpo_bench.models.world import DEFAULT_WEIGHTS as base
    from grpo_bench.rewards.world_judge import DEFAULT_WEIGHTS as judge

    return {k: hashlib.sha256(p.read_bytes()).hexdigest()[:16] for k, p in (("model", base), ("reward", judge))}


def test_cell_ids_change_when_the_shipped_judge_is_rebuilt(tmp_path, monkeypatch):
    from grpo_bench.rewards import world_judge

    before = [c.id for c in expand(load_suite(write_suite(tmp_path / "s.yaml")))]
    rebuilt = tmp_path / "world_judge.safetensors"
    rebuilt.write_bytes(world_judge.DEFAULT_WEIGHTS.read_bytes() + b"\0")  # other bytes, as after a retrain
    monkeypatch.setattr(world_judge.WorldJudgeReward, "shipped_weights", rebuilt)  # what the reward declares
    after = [c.id for c in expand(load_suite(write_suite(tmp_path / "s.yaml")))]
    assert len(set(after)) == len(after) and not set(before) & set(after)


def test_cell_ids_do_not_depend_on_key_order_or_where_a_value_is_written(tmp_path):
    a = load_suite(write_suite(tmp_path / "a.yaml"))
    data = _suite()
    data = {k: data[k] for k in reversed(list(data))}  # reversed top-level order
    data["base"] = {k: data["base"][k] for k in reversed(list(data["base"]))}
    data["grid"] = {"method": ["sage_grpo", "dance_grpo"], "setting": ["A"]}  # other key and value order
    data["base"].pop("updates")
    data["budget"] = {"updates": 4}  # same value, declared in the budget instead of the base
    b = load_suite(write_suite(tmp_path / "b.yaml", data))
    ids_a, ids_b = {c.id: c.labels["seed"] for c in expand(a)}, {c.id: c.labels["seed"] for c in expand(b)}
    assert ids_a == ids_b
    assert [c.id for c in expand(a)] == [c.id for c in expand(a)]  # stable across expansions
    # a changed budget value is a different run
    data["budget"] = {"updates": 5}
    assert not set(ids_a) & {c.id for c in expand(load_suite(write_suite(tmp_path / "c.yaml", data)))}


def test_runner_only_budget_keys_never_change_a_cell_id(tmp_path):
    a = expand(load_suite(write_suite(tmp_path / "a.yaml")))
    b = expand(load_suite(write_suite(tmp_path / "b.yaml", _suite(budget={"gpus_per_cell": 2, "timeout_min": 5}))))
    assert [c.id for c in a] == [c.id for c in b]


@pytest.mark.parametrize(
    "changes,needles",
    [
        ({"grdi": {"method": ["cps"]}}, ["unknown suite key 'grdi'", "did you mean 'grid'", "allowed: base, budget"]),
        ({"base": {"updates": "many"}}, ["base.updates:", "'updates' expects int"]),
        ({"base": {"lrr": 1e-4}}, ["base.lrr: unknown config key 'lrr'", "did you mean 'lr'"]),
        ({"grid": {"method": "sage_grpo"}}, ["grid.method must be a list"]),
        ({"grid": {}}, ["grid is empty"]),
        ({"grid": {"method": []}}, ["grid.method is an empty list"]),
        ({"grid": {"method": ["dance_grpo", "sage"]}},
         ["grid.method[1]: unknown method 'sage'", "allowed: " + ", ".join(sorted(METHODS.names()))]),
        ({"union": [{"kl": ["dual", "moving_kl"]}]},
         ["union[0].kl[1]: unknown KL variant 'moving_kl'", "allowed: " + ", ".join(sorted(KL_VARIANTS.names()))]),
        ({"grid": {"setting": ["A", "C"]}}, ["grid.setting[1]: unknown setting 'C'", "allowed: A, B"]),
        # a value's own range is checked where it is written, before any cell is built
        ({"union": [{"method": ["cps"], "group_size": [4, 1]}]},
         ["union[0].group_size[1]: config key 'group_size' must be >= 2 (GRPO needs a group), got 1"]),
        ({"base": {"adv_norm": "glob"}}, ["base.adv_norm: unknown adv_norm 'glob'", "allowed: global, group"]),
        ({"union": [{"method": ["sage_grpo"], "kl": ["dual"]}]}, ["are the same run", "remove one"]),
        ({"seeds": 3}, ["seeds must be a non-empty list"]),
        ({"seeds": [0, 0]}, ["lists a seed twice"]),
        ({"budget": {"lr": 1.0}}, ["unknown budget key 'lr'", "allowed:"]),
        ({"report": {"figures": ["reward_curve"]}}, ["report.figures[0]: unknown report figure 'reward_curve'",
                                                     "did you mean 'reward_curves'"]),
        ({"name": "my suite"}, ["name must be a folder-safe string"]),
    ],
)
def test_malformed_suites_name_file_key_path_and_allowed_values(tmp_path, changes, needles):
    path = write_suite(tmp_path / "bad.yaml", _suite(**changes))
    with pytest.raises(UserError) as err:  # as a command loads it: the report layer checks the part names
        expand(load_suite_checked(path))
    msg = str(err.value)
    assert msg.startswith(str(path)) and "\n" not in msg
    for needle in needles:
        assert needle in msg, msg


def test_report_part_names_are_checked_by_the_report_layer_where_a_command_loads_the_suite(tmp_path):
    """The suite layer checks the report block's shape and imports nothing from the report; the names are the
    report's, checked by the loader every command uses (report/suite_parts.py)."""
    path = write_suite(tmp_path / "s.yaml", _suite(report={"tables": ["table2", "tabel2"], "min_effect": {"Orcle": 1}}))
    assert load_suite(path).report.tables == ["table2", "tabel2"]
    with pytest.raises(UserError, match=r"report\.tables\[1\]: unknown report table 'tabel2'.*did you mean 'table2'"):
        load_suite_checked(path)
    path = write_suite(tmp_path / "s.yaml", _suite(report={"tables": ["table2"], "min_effect": {"Orcle": 1}}))
    with pytest.raises(UserError, match="unknown report.min_effect column 'Orcle'"):
        load_suite_checked(path)
    cli = Path(__file__).resolve().parents[1] / "grpo_bench" / "cli"
    unchecked = [p.name for p in sorted(cli.glob("*.py")) if "suite.parse import load_suite" in p.read_text()]
    assert unchecked == []  # every command loads suites through the check


def test_invalid_cell_combination_names_the_cell(tmp_path):
    data = _suite(union=[{"method": ["cps"], "minibatches": [1000]}])  # more optimizer steps than rollouts
    cell = r"cell \(method=cps, minibatches=1000, seed=0\)"
    with pytest.raises(UserError, match=cell + r".*'minibatches' \(1000\) exceeds"):
        expand(load_suite(write_suite(tmp_path / "bad.yaml", data)))


def test_command_line_overrides_apply_to_every_cell_but_not_to_grid_keys(tmp_path):
    path = write_suite(tmp_path / "s.yaml")
    cells = expand(load_suite(path, {"updates": 2}))
    assert {c.config.updates for c in cells} == {2}
    with pytest.raises(UserError, match="method is varied by"):
        load_suite(path, {"method": "cps"})


def test_ablation_builds_kl_equalizer_and_sde_grids(tmp_path):
    base = load_suite(write_suite(tmp_path / "s.yaml", _suite(seeds=[0])))
    kl = expand(ablation(base, ["none", "fixed", "stepwise", "moving", "dual"], None, None))
    assert [c.config.kl for c in kl] == ["none", "fixed", "stepwise", "moving", "dual"]
    eq = ablation(base, None, [True, False], ["sage", "flow_grpo", "dance", "cps"])
    cells = expand(eq)
    assert len(cells) == 8 and eq.name == "ablate_tiny_sde-all_eq-on-off"
    named = ablation(base, ["none", "dual"], None, ["sage_grpo", "dance"]).name
    assert named == "ablate_tiny_sde-sage-dance_kl-none-dual"
    every = ablation(base, ["none", "fixed", "stepwise", "moving", "dual"], [True, False],
                     ["sage", "flow", "dance", "cps"])
    assert len(every.name) <= 40
    assert {(c.config.method, c.config.equalizer) for c in cells} == {
        (m, e) for m in ("sage_grpo", "flow_grpo", "dance_grpo", "cps") for e in (True, False)}
    again = parse_suite(yaml.safe_load(eq.to_yaml()), "stored")  # the stored suite file re-expands identically
    assert [c.id for c in expand(again)] == [c.id for c in cells]
    with pytest.raises(UserError, match="--sde: unknown SDE .*'euler'.*allowed:.*cps"):
        ablation(base, None, None, ["euler"])


@pytest.mark.parametrize("name", ["smoke", "main_table", "main_table_shared", "ablate_equalizer", "ablate_kl",
                                  "kl_weight", "reference_recipes", "ablate_train_steps"])
def test_shipped_suites_validate_and_expand(name):
    suite = load_suite(SUITES / f"{name}.yaml")
    if name == "main_table":  # tuned: each method at its own lr (any chosen values), claim 1's row beside the block
        from grpo_bench.suite.tune import with_chosen

        lrs = {"dance_grpo": 3e-5, "flow_grpo": 1e-4, "cps": 3e-4, "sage_grpo": 1e-3}
        chosen = {**{m: {"lr": v} for m, v in lrs.items()}, "sage_grpo [kl=dual]": {"lr": 1e-3}}
        cells = expand(with_chosen(suite, chosen))
        assert all(c.config.lr == lrs[c.config.method] for c in cells) and min(suite.seeds) >= 1000
        dual = [c for c in cells if c.config.kl == "dual"]
        assert {(c.config.method, c.config.setting) for c in dual} == {("sage_grpo", "B")}
        assert len(dual) == 2 * len(suite.seeds)  # both reward tracks
        cells = [c for c in cells if c.config.kl != "dual"]
    else:
        cells = expand(suite)
    assert suite.name == name and len({c.id for c in cells}) == len(cells)
    if name in ("main_table", "main_table_shared"):  # the fair block: one trust region, both tracks and settings
        assert len(suite.seeds) >= 3 and min(suite.seeds) >= 1000
        strata = {(c.config.setting, c.config.reward) for c in cells}
        assert strata == {(s, r) for s in "AB" for r in ("world_oracle", "world_judge")}
        assert {c.config.method for c in cells} == {"dance_grpo", "flow_grpo", "cps", "sage_grpo"}
        shared = {(c.config.kl, c.config.max_train_steps, c.config.minibatches) for c in cells}
        assert len(shared) == 1 and suite.report.strata == ["setting", "reward"]
        assert (name == "main_table") == (len({c.config.lr for c in cells}) == 4)  # tuned, or one lr for all
    if name == "smoke":
        assert {c.config.method for c in cells} == {"dance_grpo", "flow_grpo", "cps", "sage_grpo"}


def test_plan_slots_pins_distinct_gpus_and_splits_cores():
    slots, threads = local_pool.plan_slots(None, 1, n_gpus=4, cpus=16)
    assert slots == [[0], [1], [2], [3]] and threads == 4
    slots, _ = local_pool.plan_slots(None, 2, n_gpus=4, cpus=16)
    assert slots == [[0, 1], [2, 3]]
    slots, threads = local_pool.plan_slots(2, 1, n_gpus=0, cpus=2)
    assert slots == [None, None] and threads == 1
    assert local_pool.plan_slots(None, 1, n_gpus=0, cpus=3) == ([None] * 3, 1)
    with pytest.raises(UserError, match="only 2 worker"):
        local_pool.plan_slots(3, 2, n_gpus=4, cpus=16)


def test_workers_get_their_own_gpu_and_thread_budget(tmp_path, monkeypatch):
    """With (pretend) 2 GPUs and no --jobs, two workers each see exactly one distinct GPU."""
    monkeypatch.setattr(local_pool, "gpu_count", lambda: 2)
    monkeypatch.setenv("FAKE_LOG", str(tmp_path / "log"))
    monkeypatch.setenv("FAKE_SLEEP", "0.3")  # both workers get a cell before either finishes
    suite = load_suite(write_suite(tmp_path / "s.yaml", _suite(union=None, seeds=[0], base={
        "updates": 2, "steps": 4, "eval_samples": 1, "eval_every": 1, "diag_every": 0})))
    summary = runner.run_suite(suite, expand(suite), tmp_path / "runs", trainer="suite_support:env_train")
    assert summary.count("done") == 2
    seen = [json.loads((summary.suite_dir / c.id / "env.json").read_text()) for c in expand(suite)]
    assert sorted(s["CUDA_VISIBLE_DEVICES"] for s in seen) == ["0", "1"]
    assert all(s["threads"] == max(1, (os.cpu_count() or 1) // 2) for s in seen)


def test_submitit_backend_runs_cells_through_the_local_executor(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_LOG", str(tmp_path / "log"))
    # submitit's jobs are fresh interpreters: they find the fake trainer through PYTHONPATH
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(SUPPORT), os.environ.get("PYTHONPATH", "")]))
    suite = load_suite(write_suite(tmp_path / "s.yaml", _suite(union=None, seeds=[0])))
    summary = runner.run_suite(suite, expand(suite), tmp_path / "runs", backend="submitit", cluster="local",
                               trainer=TRAINER, jobs=2)
    assert summary.count("done") == 2
    assert all((summary.suite_dir / c.id / "DONE").is_file() for c in expand(suite))
    assert (summary.suite_dir / "results.parquet").is_file()


def test_suite_files_are_plain_yaml():
    for path in SUITES.glob("*.yaml"):
        assert isinstance(yaml.safe_load(path.read_text()), dict), path
    assert parse_suite(SMALL_SUITE, "inline").name == "tiny"


def test_union_cells_are_labelled_by_their_own_keys(tmp_path):
    """kl_weight-style suite: constant-weight cells show kl_weight, schedule cells show the beta bounds."""
    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump({
        "name": "w", "base": {"method": "sage_grpo", "kl": "dual", "updates": 2}, "seeds": [0],
        "union": [{"kl_adaptive": [False], "kl_weight": [0.001]},
                  {"kl_adaptive": [True], "kl_beta_min": [0.003], "kl_beta_max": [0.03]}],
    }, sort_keys=False))
    groups = [c.group for c in expand(load_suite(path))]
    assert groups == ["sage_grpo kl=dual kl_adaptive=off kl_weight=0.001",
                      "sage_grpo kl=dual kl_adaptive=on kl_beta_min=0.003 kl_beta_max=0.03"]


def test_a_suite_moved_to_another_device_and_thread_count_resumes_its_finished_cells(tmp_path, monkeypatch):
    """Finished cells stay finished when the suite is resumed with other execution fields; the rest run
    with the new ones (cell.json is rewritten for them, a launched cell reads its config there)."""
    monkeypatch.setenv("FAKE_LOG", str(tmp_path / "log"))
    path = write_suite(tmp_path / "s.yaml", _suite(union=None, seeds=[0, 1]))
    suite = load_suite(path)
    cells = expand(suite)
    first = runner.run_suite(suite, cells[:2], tmp_path / "runs", trainer=TRAINER)
    assert first.count("done") == 2
    moved = load_suite(path, {"device": "cpu", "threads": 1, "checkpoint_every": 1})
    again = runner.run_suite(moved, expand(moved), tmp_path / "runs", trainer=TRAINER)
    assert [c.id for c in expand(moved)] == [c.id for c in cells]
    assert again.count("skipped") == 2 and again.count("done") == len(cells) - 2
    rerun = json.loads((again.suite_dir / cells[-1].id / "cell.json").read_text())
    assert rerun["config"]["threads"] == 1 and rerun["config"]["device"] == "cpu"
