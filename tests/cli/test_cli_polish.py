"""First-day CLI details: the live suite view (Setting column, no source-path log lines, ETA from
finished cells), `run --device`, `--dry-run` shown as a flag, wide tables off a terminal, one line
per distinct failure, the suite's INDEX.md, `samplers` writing under runs/, and the report wording."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from rich.console import Console
from suite_support import write_suite
from typer.testing import CliRunner

from grpo_bench.cli import app
from grpo_bench.suite.live import SuiteDisplay

ROOT = Path(__file__).resolve().parents[2]


def _display(**kw) -> tuple[SuiteDisplay, io.StringIO]:
    buf = io.StringIO()
    d = SuiteDisplay("t", Console(file=buf, width=200, force_terminal=False), **kw)
    return d, buf


def test_live_view_lines_name_the_setting_and_no_source_file():
    d, buf = _display(settings={"c1": "B"})
    d.begin(total=2, done=0, jobs=1, updates=[4, 4])
    d.event(("start", 0, "c1", "sage_grpo kl=dual", 0, 4))
    for u in range(1, 5):
        d.event(("update", 0, "c1", u, 4, 0.5))
    d.event(("end", 0, "c1", "done", 8.0))
    d.finish()
    out = buf.getvalue()
    line = next(ln for ln in out.splitlines() if "done c1" in ln)
    assert " B sage_grpo kl=dual" in line
    assert "live.py" not in out


def test_a_stopped_cell_is_stopped_not_failed_and_the_header_has_a_row_of_its_own():
    d, buf = _display()
    d.begin(total=2, done=0, jobs=1, updates=[4, 4])
    d.event(("start", 0, "c1", "g", 0, 4))
    d.event(("update", 0, "c1", 1, 4, 0.5))
    d.event(("end", 0, "c1", "interrupted", 3.0))  # what run_cell sends after Ctrl-C
    assert (d.failed, d.stopped) == (0, 1)
    d.finish()
    out = buf.getvalue()
    assert "failed" not in out and "stopped c1" in out and "0/2 done, 1 stopped" in out
    rows = out.splitlines()
    header = next(ln for ln in rows if "worker" in ln)
    suite = next(ln for ln in rows if "0/2 done" in ln)
    assert header != suite and "reward" in header and "reward" not in suite


def test_eta_is_zero_when_nothing_is_left_and_unknown_only_before_a_measurement():
    d, buf = _display()
    d.begin(total=1, done=0, jobs=1, updates=[2])
    assert d.eta() is None
    d.event(("start", 0, "c1", "g", 0, 2))
    d.event(("update", 0, "c1", 2, 2, None))
    assert d.eta() == 0.0
    d.finish()
    suite_row = next(ln for ln in buf.getvalue().splitlines() if "0/1 done" in ln)
    assert "ETA 0:00:00" in suite_row and "ETA ?" not in suite_row


def test_index_calls_a_cell_with_updates_but_no_done_stopped(tmp_path):
    from grpo_bench.cli.suite import INDEX, write_index
    from grpo_bench.suite.expand import expand
    from grpo_bench.suite.parse import load_suite

    suite = load_suite(write_suite(tmp_path / "tiny.yaml"))
    cells = expand(suite)
    cdir = tmp_path / "runs" / "tiny" / cells[0].id
    cdir.mkdir(parents=True)
    (cdir / "metrics.jsonl").write_text('{"update": 0}\n{"update": 1}\n')
    index = write_index(suite, cells, tmp_path / "runs").read_text()
    row = next(ln for ln in index.splitlines() if cells[0].id in ln)
    assert f"| stopped (2/{cells[0].config.updates} updates) |" in row and "partial" not in index
    assert (tmp_path / "runs" / "tiny" / INDEX).is_file()


def test_eta_uses_the_pace_of_finished_cells():
    d, _ = _display()
    d.begin(total=3, done=0, jobs=1, updates=[4, 4, 4])
    d.event(("start", 0, "c1", "g", 0, 4))
    for u in range(1, 5):
        d.event(("update", 0, "c1", u, 4, None))
    d.event(("end", 0, "c1", "done", 40.0))  # 10 s per update, whatever the wall clock of this test says
    assert d.eta() == pytest.approx(8 * 10.0)
    d.event(("start", 0, "c2", "g", 1, 4))
    d.event(("update", 0, "c2", 3, 4, None))  # resumed at update 2: only 2 of its 4 updates were left
    d.event(("update", 0, "c2", 4, 4, None))
    d.event(("end", 0, "c2", "done", 10.0))
    assert d.updates_left == 4
    assert d.eta() == pytest.approx(4 * (50.0 / 6))  # 4 + 2 updates ran in 40 + 10 s
    d.finish()


def test_run_accepts_device_and_dry_run_is_a_flag(tmp_path):
    suite = write_suite(tmp_path / "tiny.yaml")
    res = CliRunner().invoke(app, ["run", str(suite), "--device", "cpu", "--dry-run", "--out", str(tmp_path / "runs")])
    assert res.exit_code == 0, res.output
    assert not (tmp_path / "runs" / "tiny").exists()
    env = {**os.environ, "COLUMNS": "200"}
    help_text = subprocess.run([sys.executable, "-m", "grpo_bench.cli", "run", "--help"], capture_output=True,
                               text=True, env=env).stdout
    dry = next(ln for ln in help_text.splitlines() if "--dry-run" in ln)
    assert "<bool>" not in dry
    assert "--device" in help_text


def test_tables_are_not_cut_at_80_columns_in_a_pipe():
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    out = subprocess.run([sys.executable, "-m", "grpo_bench.cli", "methods"], capture_output=True, text=True,
                         env=env).stdout
    assert "…" not in out and "equalizer" in out  # rich cuts headers to "equa…" at 80 columns


def test_failures_with_one_cause_print_once_and_the_index_names_every_folder(tmp_path, monkeypatch):
    from grpo_bench.cli.suite import INDEX, execute
    from grpo_bench.suite.parse import load_suite

    monkeypatch.setenv("FAKE_FAIL", "sage_grpo")
    suite = load_suite(write_suite(tmp_path / "tiny.yaml"))
    buf = io.StringIO()
    summary = execute(suite, tmp_path / "runs", 1, "local", False, True, Console(file=buf, width=200),
                      trainer="suite_support:fake_train")
    out = buf.getvalue()
    assert summary.count("failed") == 4
    assert out.count("RuntimeError: fake failure of sage_grpo") == 1 and "4 cells" in out
    index = (tmp_path / "runs" / "tiny" / INDEX).read_text()
    for o in summary.outcomes:
        assert o.cell in index
    assert index.count("| failed |") == 4 and index.count("| done |") == 2


def test_samplers_writes_under_runs_by_default(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(app, ["samplers", "--steps", "4"])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "runs" / "samplers" / "table1.md").is_file()
    assert not (tmp_path / "reports").exists()


def test_report_header_counts_seeds_per_row_and_names_them(tmp_path):
    res = CliRunner().invoke(app, ["report", str(ROOT / "reports" / "kl_weight" / "results.parquet"),
                                   "--out", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    header = (tmp_path / "r" / "report.md").read_text()
    cells = pd.read_parquet(ROOT / "reports" / "kl_weight" / "results.parquet", columns=["kind", "seed"])
    seeds = sorted(int(s) for s in cells.loc[cells["kind"] == "cell", "seed"].unique())
    assert len(seeds) == 3  # the stored table: one look of 3 test seeds a row
    assert f"seeds per row: 3 (seed values {', '.join(map(str, seeds))})" in header


def _cell_flags(c) -> dict:
    return {"method": c.method, "kl": c.kl, "setting": c.setting, "seed": c.seed}


def test_train_like_a_suite_reproduces_its_cell_config():
    from grpo_bench.cli.train import build_config
    from grpo_bench.config.run import resolve
    from grpo_bench.suite.expand import expand
    from grpo_bench.suite.parse import load_suite

    path = ROOT / "suites" / "main_table.yaml"
    cell = expand(load_suite(path))[-1]
    c = cell.config
    like = build_config(_cell_flags(c), [], like=path)
    assert resolve(like).to_dict() == c.to_dict()
    plain = build_config(_cell_flags(c), [])
    assert resolve(plain).to_dict() != c.to_dict()  # why --like exists: train's defaults are not the suites'


def test_rerunning_a_finished_train_says_it_is_already_done(tmp_path, monkeypatch):
    from suite_support import fake_train

    from grpo_bench.cli import train as train_cli
    from grpo_bench.config.run import resolve

    cfg = train_cli.build_config({"method": "cps", "seed": 0, "updates": 2, "device": "cpu"},
                                 ["steps=4", "eval_samples=1"])
    fake_train(resolve(cfg), tmp_path / "run")
    calls = []
    monkeypatch.setattr("grpo_bench.train.trainer.train", lambda *a, **k: calls.append(a))
    buf = io.StringIO()
    final = train_cli.run_train(cfg, tmp_path / "run", True, Console(file=buf, width=200))
    assert not calls and "already done" in buf.getvalue() and final["cell_id"]


def test_ablate_resumes_a_folder_started_under_the_long_name(tmp_path):
    base = write_suite(tmp_path / "tiny.yaml")
    legacy = tmp_path / "runs" / "ablate_tiny_sde-sage_grpo-flow_grpo-dance_grpo-cps"
    legacy.mkdir(parents=True)
    res = CliRunner().invoke(app, ["ablate", "--sde", "sage,flow,dance,cps", "--base", str(base), "--dry-run",
                                   "--out", str(tmp_path / "runs")])
    assert res.exit_code == 0, res.output
    assert legacy.name in res.output.replace("\n", "")
    fresh = CliRunner().invoke(app, ["ablate", "--sde", "sage,flow,dance,cps", "--base", str(base), "--dry-run",
                                     "--out", str(tmp_path / "other")])
    assert "ablate_tiny_sde-all" in fresh.output


def test_train_help_states_the_budget_defaults_of_runconfig():
    from grpo_bench.cli.train_cost import BUDGET_DEFAULTS, BUDGET_HELP
    from grpo_bench.config.run import RunConfig

    cfg = RunConfig()
    assert BUDGET_DEFAULTS == {k: getattr(cfg, k) for k in BUDGET_DEFAULTS}
    for key, value in BUDGET_DEFAULTS.items():
        assert f"{key}={value}" in BUDGET_HELP
    env = {**os.environ, "COLUMNS": "300"}
    help_text = subprocess.run([sys.executable, "-m", "grpo_bench.cli", "train", "--help"], capture_output=True,
                               text=True, env=env, cwd=ROOT).stdout
    assert "updates=200, prompts_per_update=2" in " ".join(help_text.split())


def test_the_estimate_counts_updates_evaluations_and_diagnostics_left():
    from grpo_bench.cli.train_cost import estimate_line
    from grpo_bench.config.sections import Cadence

    cfg = Cadence(updates=7, eval_every=2, eval_at=[], diag_every=3)
    line = {"time_rollout": 2.0, "time_reward": 1.0, "time_train": 7.0, "time_eval": 5.0, "time_diag": 4.0}
    # after update 1 of 7: 6 updates x 10 s, evaluations before u = 2, 4 and the final one (3 x 5 s),
    # diagnostics at u = 3 and 6 (2 x 4 s): 60 + 15 + 8 = 83 s
    text = estimate_line(1, 7, line, cfg)
    assert text.startswith("update 1 of 7 took 10 s (rollout 2 s, reward 1 s, train 7 s)")
    assert "the other 6 and 3 evaluation(s) take about 1 min 23 s more" in text


def test_plan_prints_durations_a_person_reads():
    from grpo_bench.cli.plan import duration

    got = [duration(x) for x in (0.4234, 12.34, 1490.3, 30 * 3600, 5 * 86400)]
    assert got == ["0.423 s", "12 s", "24.8 min", "30.0 h", "5.0 days"] and not any("e+" in d for d in got)


def test_methods_describes_each_plug_in_in_whole_sentences():
    out = subprocess.run([sys.executable, "-m", "grpo_bench.cli", "methods"], capture_output=True, text=True,
                         env={**os.environ, "COLUMNS": "400"}, cwd=ROOT).stdout
    row = next(ln for ln in out.splitlines() if "│ previous" in ln)
    assert row.split("│")[-2].strip().endswith("(live: evaluated at loss time).")


def test_a_warning_on_the_command_line_is_one_line_without_python_source(monkeypatch, capsys):
    import warnings

    from grpo_bench.cli import entry

    def warn_and_exit() -> None:
        warnings.warn("frames x height x width 9x33x33 rounded to 9x32x32", UserWarning, stacklevel=1)
        raise SystemExit(0)

    monkeypatch.setattr(entry, "app", warn_and_exit)
    monkeypatch.setattr(warnings, "showwarning", warnings.showwarning)  # main() replaces it: restore after
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        with pytest.raises(SystemExit):
            entry.main()
    err = capsys.readouterr().err
    assert err.strip() == "warning: frames x height x width 9x33x33 rounded to 9x32x32"


def test_the_chosen_points_table_shows_a_readings_row_name_whole():
    """A reading's row ("sage_grpo [kl=dual]", suite/tune.py) printed as rich markup lost its bracket, so two rows
    read "sage_grpo" in the table; escaped, the row is named whole."""
    import io

    from rich.console import Console

    from grpo_bench.cli.tuning import _print_chosen

    entry = {"chosen": {"lr": 3e-5}, "score": 0.2, "grid": [{"point": {"lr": 3e-5}, "mean": 0.2}]}
    out = io.StringIO()
    _print_chosen({"suite": "s", "rule": "r", "methods": {"sage_grpo": entry, "sage_grpo [kl=dual]": entry}},
                  Console(file=out, width=200))
    assert "sage_grpo [kl=dual]" in out.getvalue()


def test_report_parts_from_renders_the_suite_files_parts_on_a_stored_table(tmp_path):
    """A table stored before a part existed (kl_weight's stored spec lists no `transfer`) gets the parts its suite
    file lists now (a suite file of another suite: test_malformed_inputs)."""
    import yaml

    stored = ROOT / "reports" / "kl_weight" / "results.parquet"
    suite = yaml.safe_load((ROOT / "suites" / "kl_weight.yaml").read_text())
    suite["report"] = {**suite.get("report", {}), "tables": ["table2", "transfer"]}
    (tmp_path / "kl_weight.yaml").write_text(yaml.safe_dump(suite))
    plain = CliRunner().invoke(app, ["report", str(stored), "--out", str(tmp_path / "plain")])
    res = CliRunner().invoke(app, ["report", str(stored), "--out", str(tmp_path / "r"),
                                   "--parts-from", str(tmp_path / "kl_weight.yaml")])
    assert plain.exit_code == 0 and res.exit_code == 0, res.output
    assert "## Transfer between worlds" not in (tmp_path / "plain" / "report.md").read_text()
    rendered = (tmp_path / "r" / "report.md").read_text()
    assert "## Transfer between worlds" in rendered
    assert f"- report section: `{(tmp_path / 'kl_weight.yaml').as_posix()}`'s, not the one stored" in rendered
