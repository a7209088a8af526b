"""`grpo-bench run` / `ablate` end to end: kill -9 and resume, errors that start nothing, dry runs,
and the smoke suite on the real trainer."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from suite_support import SMALL_SUITE, write_suite
from support_paths import ROOT, SUPPORT
from typer.testing import CliRunner

from grpo_bench.cli import app
from grpo_bench.suite.results import read_table

RUN = """
import sys
from pathlib import Path
from grpo_bench.suite.runner import run_suite
from grpo_bench.suite.expand import expand
from grpo_bench.suite.parse import load_suite
suite = load_suite(sys.argv[1])
run_suite(suite, expand(suite), Path(sys.argv[2]), jobs=2, trainer="suite_support:fake_train")
"""


def _env(tmp_path: Path, sleep: float) -> dict:
    return {**os.environ, "FAKE_LOG": str(tmp_path / "log"), "FAKE_SLEEP": str(sleep), "OMP_NUM_THREADS": "1",
            "PYTHONPATH": os.pathsep.join([str(SUPPORT), os.environ.get("PYTHONPATH", "")])}


def _log(tmp_path: Path) -> list[tuple[str, str, int]]:
    path = tmp_path / "log"
    if not path.is_file():
        return []
    return [(e, c, int(p)) for e, c, p in (ln.split() for ln in path.read_text().splitlines())]


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.is_file() else 0


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.is_file() and stat.read_text().split()[2] == "Z")


def test_sigkill_mid_run_then_resume_runs_every_cell_exactly_once(tmp_path):
    data = json.loads(json.dumps(SMALL_SUITE))
    data["base"]["updates"] = 8
    data["seeds"] = [0]  # 3 cells on 2 workers: two finish, the third is part-way when the runner dies
    suite, out = write_suite(tmp_path / "tiny.yaml", data), tmp_path / "runs"
    env = _env(tmp_path, sleep=0.1)
    cmd = [sys.executable, "-c", RUN, str(suite), str(out)]
    proc = subprocess.Popen(cmd, env=env, cwd=tmp_path)
    deadline = time.time() + 90
    while time.time() < deadline:  # kill once some cells finished and others are part-way
        log = _log(tmp_path)
        finished = {c for e, c, _ in log if e == "finish"}
        partial = [c for e, c, _ in log if e == "start" and c not in finished
                   and _lines(out / "tiny" / c / "metrics.jsonl") >= 2]
        if len(finished) >= 2 and partial:
            break
        time.sleep(0.03)
    else:
        proc.kill()
        pytest.fail("the suite never reached a mid-run state")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    workers = {p for _, _, p in _log(tmp_path)}
    deadline = time.time() + 10
    while any(_alive(p) for p in workers) and time.time() < deadline:
        time.sleep(0.05)
    assert not any(_alive(p) for p in workers), "workers outlived the killed runner"
    n_before = len(_log(tmp_path))
    suite_dir = out / "tiny"
    # rows.parquet follows DONE (the runner writes it after the trainer): a kill in between leaves a
    # finished cell without it, which the resumed run's aggregation writes
    done_before = {c.name: {f: _digest(c / f) for f in ("final.json", "metrics.jsonl", "rows.parquet")
                            if (c / f).is_file()}
                   for c in suite_dir.iterdir() if (c / "DONE").is_file()}
    assert len(done_before) >= 2

    subprocess.run(cmd, env=env, cwd=tmp_path, check=True, timeout=120)
    log = _log(tmp_path)
    cells = [c for c in suite_dir.iterdir() if (c / "cell.json").is_file()]
    assert len(cells) == 3
    finishes = [c for e, c, _ in log if e == "finish"]
    assert sorted(finishes) == sorted(c.name for c in cells)  # each cell finished exactly once
    restarted = {c for e, c, _ in log[n_before:] if e == "start"}
    assert not restarted & set(done_before)  # finished cells were not started again
    for name, digests in done_before.items():  # and their results are byte-identical
        assert {f: _digest(suite_dir / name / f) for f in digests} == digests
    assert all((c / "rows.parquet").is_file() for c in cells)
    for c in cells:  # every update of every cell ran once (partial cells resumed, not restarted)
        lines = [json.loads(ln) for ln in (c / "metrics.jsonl").read_text().splitlines()]
        assert [ln["update"] for ln in lines] == list(range(8))
    table = read_table(suite_dir / "results.parquet")
    assert sorted(table.loc[table["kind"] == "cell", "cell"]) == sorted(c.name for c in cells)


def test_failing_cell_is_recorded_and_the_suite_goes_on(tmp_path, monkeypatch):
    from rich.console import Console

    from grpo_bench.cli.suite import execute
    from grpo_bench.suite.parse import load_suite

    monkeypatch.setenv("FAKE_FAIL", "dance_grpo")
    data = json.loads(json.dumps(SMALL_SUITE))
    data["seeds"] = [0]
    summary = execute(load_suite(write_suite(tmp_path / "s.yaml", data)), tmp_path / "runs", 1, "local", False, True,
                      Console(file=open(os.devnull, "w")), trainer="suite_support:fake_train")
    assert (summary.count("done"), summary.count("failed")) == (2, 1)
    failed = next(o for o in summary.outcomes if o.status == "failed")
    err = json.loads((summary.suite_dir / failed.cell / "ERROR.json").read_text())
    assert err["message"] == "fake failure of dance_grpo" and "fake_train" in err["traceback"]
    assert "fake failure of dance_grpo" in (summary.suite_dir / "report" / "report.md").read_text()


def test_a_finished_run_prints_each_rows_learning_as_table_2_has_it(tmp_path):
    """The summary printed when a suite ends is the report's Table 2, row for row (its headline columns)."""
    import csv
    import io

    from rich.console import Console

    from grpo_bench.cli.suite import execute
    from grpo_bench.suite.parse import load_suite

    buf = io.StringIO()
    summary = execute(load_suite(write_suite(tmp_path / "s.yaml", SMALL_SUITE)), tmp_path / "runs", 1, "local", False,
                      True, Console(file=buf, width=240), trainer="suite_support:fake_train")
    out = buf.getvalue()
    with (summary.suite_dir / "report" / "tables" / "table2.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows and "held-out learning" in out
    for row in rows:  # every row with its Oracle learning as the stored table has it
        assert row["group"] in out and f"{float(row['Oracle_mean']):+.3f}" in out


def test_bad_suite_exits_2_with_one_line_and_starts_nothing(tmp_path):
    data = {**json.loads(json.dumps(SMALL_SUITE)), "grid": {"method": ["sage_grpo", "ppo"]}}
    path = write_suite(tmp_path / "bad.yaml", data)
    proc = subprocess.run([sys.executable, "-m", "grpo_bench.cli", "run", str(path), "--out", str(tmp_path / "runs")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "grid.method[1]: unknown method 'ppo'" in proc.stderr and str(path) in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) <= 2  # one (soft-wrapped) line
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("args,needle", [
    (["run", "{suite}", "ppo=1"], "command line: unknown config key 'ppo'"),
    (["run", "{suite}", "method=cps"], "method is varied by"),
    (["run", "{bad}"], "are the same run"),
    (["run", "{parts}", "--dry-run"], "report.tables[0]: unknown report table 'tabel2'"),  # the report layer's check
    (["run", "{suite}", "--backend", "slurm"], "--backend: unknown backend 'slurm'"),
    (["ablate", "--kl", "dual,moveing", "--base", "{suite}"], "--kl: unknown KL variant 'moveing'"),
    (["ablate", "--equalizer", "maybe", "--base", "{suite}"], "--equalizer: unknown value 'maybe'"),
    (["ablate", "--base", "{suite}"], "give at least one of --kl, --equalizer, --sde"),
])
def test_command_line_mistakes_exit_2_and_start_nothing(tmp_path, monkeypatch, capsys, args, needle):
    import grpo_bench.cli.entry as cli

    suite = write_suite(tmp_path / "s.yaml")
    bad = write_suite(tmp_path / "bad.yaml", {**SMALL_SUITE, "union": [{"method": ["sage_grpo"], "kl": ["dual"]}]})
    parts = write_suite(tmp_path / "parts.yaml", {**SMALL_SUITE, "report": {"tables": ["tabel2"]}})
    argv = [a.format(suite=suite, bad=bad, parts=parts) for a in args] + ["--out", str(tmp_path / "runs")]
    monkeypatch.setattr(sys, "argv", ["grpo-bench", *argv])
    with pytest.raises(SystemExit) as exc:
        cli.main()
    assert exc.value.code == 2
    assert needle in capsys.readouterr().err.replace("\n", " ")
    assert not (tmp_path / "runs").exists()


def test_dry_run_lists_cells_and_runs_nothing(tmp_path):
    path = write_suite(tmp_path / "s.yaml")
    res = CliRunner().invoke(app, ["run", str(path), "--dry-run", "--out", str(tmp_path / "runs"), "updates=2"],
                             terminal_width=200)
    assert res.exit_code == 0, res.output
    assert "6 cells" in res.output and "sage_grpo kl=none" in res.output and "pending" in res.output
    assert not (tmp_path / "runs").exists()
    res = CliRunner().invoke(app, ["ablate", "--kl", "all", "--equalizer", "on,off", "--base", str(path),
                                   "--dry-run", "--out", str(tmp_path / "runs")], terminal_width=200)
    assert res.exit_code == 0, res.output
    assert "24 cells" in res.output  # 6 KL variants (flow_grpo: FlowGRPO's own estimator) x 2 equalizer x 2 seeds


def _world_ready() -> bool:
    assets = ROOT / "grpo_bench" / "assets"
    return (assets / "world_base.safetensors").is_file() and (assets / "world_judge.safetensors").is_file()


@pytest.mark.skipif(not _world_ready(), reason="the world's base model and judge are not built yet")
def test_smoke_suite_end_to_end(tmp_path):
    """CI: every method through the real trainer, then results.parquet and the report (< 3 min on 2 cores)."""
    proc = subprocess.run([sys.executable, "-m", "grpo_bench.cli", "run", str(ROOT / "suites" / "smoke.yaml"),
                           "--out", str(tmp_path), "--jobs", "2"], capture_output=True, text=True, timeout=400,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    table = read_table(tmp_path / "smoke" / "results.parquet")
    cells = table[table["kind"] == "cell"]
    assert sorted(cells["method"]) == ["cps", "dance_grpo", "flow_grpo", "sage_grpo"]
    assert (cells["metric"] == "wall_time").all()
    finals = table[(table["kind"] == "final") & (table["metric"] == "eval_oracle_ta")]
    assert len(finals) == 4 and finals["value"].between(0, 1).all()
    assert len(table[table["kind"] == "video"]["cell"].unique()) == 4
    report = (tmp_path / "smoke" / "report" / "report.md").read_text()
    assert "Not available" not in report and "## Table 3" in report
