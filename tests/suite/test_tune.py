"""Tuning parity (suite/tune.py, suite/selection.py, cli/tuning.py): every method gets the same grid, seeds and
per-cell budget; the rule reads the training side only; test seeds are never tuning seeds; the table runs each
method at its own chosen point. Bad input is one line before any cell runs."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from rich.console import Console
from suite_support import TRAINER, lr_gain
from tune_support import LRS, suite_data

from grpo_bench.errors import UserError
from grpo_bench.suite.expand import expand
from grpo_bench.suite.parse import parse_suite
from grpo_bench.suite.selection import CHOSEN, cell_learning, choose, read_chosen
from grpo_bench.suite.tune import SelectRule, seed_major, tuned_rows, tuning_suite, with_chosen


def test_the_tuning_grid_is_the_same_for_every_method_on_the_family_and_tuning_seeds():
    suite = parse_suite(suite_data(), "s.yaml")
    cells = expand(tuning_suite(suite))
    assert len(cells) == 3 * len(LRS) * 2  # rows x grid x tuning seeds: the dual-KL reading is a row of its own
    assert [name for name, _, _ in tuned_rows(suite)] == ["dance_grpo", "sage_grpo", "sage_grpo [kl=dual]"]
    per_row = pd.Series([(c.labels["method"], c.labels.get("kl")) for c in cells]).value_counts()
    assert per_row.to_dict() == {("dance_grpo", None): 8, ("sage_grpo", None): 8, ("sage_grpo", "dual"): 8}
    assert {c.config.kl for c in cells if c.labels.get("kl") == "dual"} == {"dual"}  # tuned under its own KL
    assert {c.config.setting for c in cells} == {"A"}  # the family
    assert {c.config.seed for c in cells} == {100, 101}
    assert {c.config.updates for c in cells} == {12}  # the table's own budget
    ordered = seed_major(cells)
    first_seed = ordered[: len(cells) // 2]  # a run stopped half-way holds every method's whole grid on seed 100
    assert {c.config.seed for c in first_seed} == {100}
    assert [c.labels["method"] for c in ordered[:3]] == ["dance_grpo", "sage_grpo", "sage_grpo"]


@pytest.mark.parametrize("change, needle", [
    ({"methods": {"sage_grpo": {"noise_level": [0.3, 0.7]}}}, "unequal budgets (dance_grpo 4, sage_grpo 8"),
    ({"select": {"metric": "eval_oracle_ta"}}, "held-out eval metric"),
    ({"select": {"metric": "kl"}}, "allowed: reward, reward_mq, reward_ta, reward_vq"),
    ({"seeds": [1000, 101]}, "outside the tuning range"),
    ({"seeds": [5]}, "outside the tuning range"),
    ({"budget": {"updates": 4}}, "run the suite's own 12 updates"),
    ({"grid": {"method": ["cps"]}}, "cannot be tuned"),
    ({"select": {"window": 50}}, "exceeds the suite's 12 updates"),
    ({"colour": 1}, "unknown tune key 'colour'"),
])
def test_a_bad_tune_block_is_one_line_naming_the_key(change, needle):
    with pytest.raises(UserError, match=None) as err:
        parse_suite(suite_data(**change), "s.yaml")
    assert needle in str(err.value) and str(err.value).startswith("s.yaml: ")
    assert "\n" not in str(err.value)


def test_test_seeds_must_be_fresh_and_disjoint_from_the_tuning_seeds():
    data = suite_data()
    data["seeds"] = [100, 1000]
    with pytest.raises(UserError, match=r"test seeds \[100\] are also tuning seeds"):
        parse_suite(data, "s.yaml")
    data["seeds"] = [3, 1000]
    with pytest.raises(UserError, match=r"seeds \[3\] lie below 1000"):
        parse_suite(data, "s.yaml")


def test_a_tuned_key_varied_by_the_suites_own_grid_is_refused():
    data = suite_data()
    data["grid"]["lr"] = [1e-4]
    with pytest.raises(UserError, match="tune and grid both vary lr"):
        parse_suite(data, "s.yaml")


def _frame(values: dict[tuple[str, float, int], list[float]]) -> pd.DataFrame:
    rows = []
    for (method, lr, seed), rewards in values.items():
        for u, r in enumerate(rewards):
            rows.append({"kind": "update", "metric": "reward", "cell": f"{method}-{lr}-{seed}", "method": method,
                         "seed": seed, "lr": lr, "update": u, "value": r})
        rows.append({"kind": "update", "metric": "eval_reward", "cell": f"{method}-{lr}-{seed}", "method": method,
                     "seed": seed, "lr": lr, "update": len(rewards) - 1, "value": 99.0})  # never read
    return pd.DataFrame(rows)


def test_learning_is_the_mean_of_the_last_window_minus_update_0_and_the_argmax_is_chosen():
    # closed form: cell learning = mean(last 2) - first
    frame = _frame({("m", 1e-4, 100): [1.0, 2.0, 4.0, 6.0], ("m", 1e-4, 101): [0.0, 0.0, 1.0, 1.0],
                    ("m", 3e-4, 100): [1.0, 1.0, 1.0, 2.0], ("m", 3e-4, 101): [0.0, 5.0, 5.0, 5.0]})
    learning = cell_learning(frame, SelectRule("reward", window=2), ["lr"])
    got = {(r.lr, r.seed): r.learning for r in learning.itertuples()}
    assert got == {(1e-4, 100): 4.0, (1e-4, 101): 1.0, (3e-4, 100): 0.5, (3e-4, 101): 5.0}
    chosen = choose(learning, {"m": [{"lr": 1e-4}, {"lr": 3e-4}]}, [100, 101], SelectRule("reward", 2))
    assert chosen["methods"]["m"]["chosen"] == {"lr": 3e-4}  # mean 2.75 beats 2.5
    assert chosen["methods"]["m"]["score"] == pytest.approx(2.75)
    grid = chosen["methods"]["m"]["grid"]
    assert grid[0]["sd"] == pytest.approx(math.sqrt(((4 - 2.5) ** 2 + (1 - 2.5) ** 2) / 1))


def test_a_tie_goes_to_the_first_grid_point_and_a_partial_grid_is_refused():
    frame = _frame({("m", 1e-4, 100): [0.0, 1.0], ("m", 3e-4, 100): [0.0, 1.0]})
    learning = cell_learning(frame, SelectRule("reward", 1), ["lr"])
    chosen = choose(learning, {"m": [{"lr": 1e-4}, {"lr": 3e-4}]}, [100], SelectRule("reward", 1))
    assert chosen["methods"]["m"]["chosen"] == {"lr": 1e-4}
    with pytest.raises(UserError, match="tuning incomplete: 2 of 4 tuning cells finished"):
        choose(learning, {"m": [{"lr": 1e-4}, {"lr": 3e-4}]}, [100, 101], SelectRule("reward", 1))


def test_the_table_runs_each_method_at_its_own_chosen_point():
    suite = parse_suite(suite_data(), "s.yaml")
    tuned = with_chosen(suite, {"dance_grpo": {"lr": 1e-3}, "sage_grpo": {"lr": 3e-5},
                                "sage_grpo [kl=dual]": {"lr": 1e-4}})
    cells = expand(tuned)
    assert len(cells) == len(expand(suite))  # the same cells, each row at its lr
    assert {c.config.lr for c in cells if c.config.method == "dance_grpo"} == {1e-3}
    assert {c.config.lr for c in cells if c.config.method == "sage_grpo" and c.config.kl == "fixed"} == {3e-5}
    dual = [c for c in cells if c.config.kl == "dual"]
    assert dual and {c.config.setting for c in dual} == {"B"} and {c.config.lr for c in dual} == {1e-4}
    assert {c.config.seed for c in cells} == {1000, 1001}
    with pytest.raises(UserError, match=r"no chosen point for sage_grpo, sage_grpo \[kl=dual\]"):
        with_chosen(suite, {"dance_grpo": {"lr": 1e-3}})
    with pytest.raises(UserError, match=r"no chosen point for sage_grpo \[kl=dual\]"):  # a reading never borrows
        with_chosen(suite, {"dance_grpo": {"lr": 1e-3}, "sage_grpo": {"lr": 3e-5}})


def test_tune_then_table_end_to_end_on_the_fake_trainer(tmp_path):
    """The fake trainer's training reward gains 0.05 * u * g(lr) (suite_support.lr_gain), highest at 3e-4 of
    the grid; its eval columns are random. The rule must pick 3e-4 for both methods, and the table's cells
    run at it on the test seeds."""
    from grpo_bench.cli.tuning import tuned_suite

    assert max(LRS, key=lr_gain) == 3e-4
    suite = parse_suite(suite_data(), "s.yaml")
    console = Console(file=open(tmp_path / "out.txt", "w"), width=200)
    tuned, code = tuned_suite(suite, tmp_path, 2, "local", False, True, console, trainer=TRAINER)
    assert code == 0
    chosen = read_chosen(tmp_path / "tuned_tune")
    assert {m: v["chosen"] for m, v in chosen["methods"].items()} == {"dance_grpo": {"lr": 3e-4},
                                                                     "sage_grpo": {"lr": 3e-4},
                                                                     "sage_grpo [kl=dual]": {"lr": 3e-4}}
    assert (tmp_path / "tuned_tune" / CHOSEN).is_file() and (tmp_path / "tuned" / "tuned.json").is_file()
    report = (tmp_path / "tuned_tune" / "report" / "report.md").read_text()
    assert "Tuning grid" in report and (tmp_path / "tuned_tune" / "report" / "figures" / "tuning_curves.png").is_file()
    titles = [line for line in report.splitlines() if line.startswith("## ")]
    assert titles and not [t for t in titles if "oracle" in t.lower() or "compute" in t.lower() or "Power" in t]
    assert "grid's edge" not in report  # 3e-4 lies inside the grid
    marked = [line for line in report.splitlines() if line.startswith("| ") and "**✓**" in line]
    assert sorted(line.split(" | ")[0][2:] for line in marked) == ["dance_grpo", "sage_grpo", "sage_grpo [kl=dual]"]
    assert {c.config.lr for c in expand(tuned)} == {3e-4}
    # a dry run of the finished grid lists the table at the stored choice and writes nothing
    (tmp_path / "tuned" / "tuned.json").unlink()
    listed, code = tuned_suite(suite, tmp_path, 2, "local", True, True, console, trainer=TRAINER)
    assert code == 0 and [c.id for c in expand(listed)] == [c.id for c in expand(tuned)]
    assert not (tmp_path / "tuned" / "tuned.json").exists()
    (tmp_path / "tuned_tune" / expand(tuning_suite(suite))[0].id / "DONE").unlink()  # a grid no longer finished
    assert tuned_suite(suite, tmp_path, 2, "local", True, True, console, trainer=TRAINER) == (None, 0)
    tuned, code = tuned_suite(suite, tmp_path, 2, "local", False, True, console, trainer=TRAINER)  # reruns that cell
    # the table's report says which seeds served for what
    from grpo_bench.cli.suite import execute

    execute(tuned, tmp_path, 2, "local", False, True, console, trainer=TRAINER)
    table = (tmp_path / "tuned" / "report" / "report.md").read_text()
    assert "chosen on tuning seeds 100, 101" in table and "(1000, 1001) are test seeds" in table


def test_restore_seeds_a_run_folder_so_a_stopped_grid_resumes_without_rerunning(tmp_path, monkeypatch):
    """Cells of a stored table come back as finished cells: the next run skips them and aggregates the same rows."""
    from grpo_bench.suite.restore import restore_cells
    from grpo_bench.suite.results import load_results
    from grpo_bench.suite.runner import run_suite

    suite = parse_suite(suite_data(), "s.yaml")
    grid = tuning_suite(suite)
    cells = seed_major(expand(grid))
    run_suite(grid, cells[:4], tmp_path / "first", jobs=2, trainer=TRAINER)  # a grid stopped after four cells
    stored = load_results(tmp_path / "first" / grid.name)
    log = tmp_path / "log.txt"
    monkeypatch.setenv("FAKE_LOG", str(log))
    restored, kept = restore_cells(tmp_path / "first" / grid.name, tmp_path / "second" / grid.name)
    assert sorted(restored) == sorted(c.id for c in cells[:4]) and kept == []
    run_suite(grid, cells[:6], tmp_path / "second", jobs=2, trainer=TRAINER)
    started = {line.split()[1] for line in log.read_text().splitlines() if line.startswith("start")}
    assert started == {c.id for c in cells[4:6]}  # only the two cells the stored table lacked
    again = load_results(tmp_path / "second" / grid.name)
    columns = ["cell", "kind", "update", "metric", "value"]
    mine = again[again["cell"].isin(restored)][columns].sort_values(columns).reset_index(drop=True)
    theirs = stored[stored["cell"].isin(restored)][columns].sort_values(columns).reset_index(drop=True)
    pd.testing.assert_frame_equal(mine, theirs)
    with pytest.raises(UserError, match="no finished cells"):
        restore_cells(tmp_path / "first" / grid.name, tmp_path / "third", only={"nothing"})


def test_a_choice_on_the_grids_edge_is_named_and_an_interior_one_is_not():
    """The first tuned main table chose 3e-5, then the grid's lowest lr, for every method: the report must say so."""
    from grpo_bench.report.tuning import edge_choices

    learning = pd.DataFrame([{"method": m, "lr": lr, "learning": 0.0} for m in ("cps", "sage_grpo") for lr in LRS])
    picked = {"cps": {"lr": LRS[0]}, "sage_grpo": {"lr": LRS[1]}}
    assert edge_choices(learning, ["lr"], picked) == ["cps (lr=3e-05, the lowest of the grid)"]
    assert edge_choices(learning, ["lr"], {"cps": {"lr": LRS[-1]}}) == ["cps (lr=0.001, the highest of the grid)"]
