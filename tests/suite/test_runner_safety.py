"""The suite runner under stress: one runner per folder, busy cells, Ctrl-C, a full disk, a dead
worker. Cells are trained by the fast fake trainer (suite_support.py)."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from suite_support import SMALL_SUITE, TRAINER, write_suite
from support_paths import SUPPORT

from grpo_bench import atomic
from grpo_bench.errors import UserError
from grpo_bench.suite import cell, run_folder, runner
from grpo_bench.suite.expand import expand
from grpo_bench.suite.locks import SuiteLock
from grpo_bench.suite.parse import load_suite
from grpo_bench.suite.run_folder import ERROR, mark_done, record_failure


def _suite(tmp_path, **changes):
    data = json.loads(json.dumps(SMALL_SUITE))
    data.update(changes)
    suite = load_suite(write_suite(tmp_path / "s.yaml", data))
    return suite, expand(suite)


def _held(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    fh = open(path, "a+")
    fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fh


# --- one runner per suite folder ------------------------------------------------------------------
def test_a_second_runner_is_refused_with_one_line_naming_the_holder(tmp_path):
    suite, cells = _suite(tmp_path)
    with SuiteLock(tmp_path / "runs" / suite.name):
        with pytest.raises(UserError) as err:
            runner.run_suite(suite, cells, tmp_path / "runs", jobs=1, trainer=TRAINER)
    msg = str(err.value)
    assert "another runner" in msg and f"pid {os.getpid()}" in msg and "host" in msg and "\n" not in msg
    assert not any((tmp_path / "runs" / suite.name / c.id).exists() for c in cells)  # nothing touched


def test_a_dead_runners_lock_file_does_not_block_and_no_lock_file_is_left(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_LOG", str(tmp_path / "log"))
    suite, cells = _suite(tmp_path, union=[], seeds=[0])
    sdir = tmp_path / "runs" / suite.name
    sdir.mkdir(parents=True)
    (sdir / SuiteLock.NAME).write_text("pid 999999 on host gone, since yesterday\n")  # no flock held
    summary = runner.run_suite(suite, cells, tmp_path / "runs", jobs=1, trainer=TRAINER)
    assert summary.count("done") == 2
    assert not list(sdir.rglob("*.lock"))


def test_no_resume_never_deletes_a_cell_another_process_is_training(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_LOG", str(tmp_path / "log"))
    suite, cells = _suite(tmp_path, union=[], seeds=[0])
    busy = tmp_path / "runs" / suite.name / cells[0].id
    busy.mkdir(parents=True)
    (busy / "metrics.jsonl").write_text('{"update": 0}\n')
    lock = _held(busy / ".lock")
    try:
        summary = runner.run_suite(suite, cells, tmp_path / "runs", jobs=1, resume=False, trainer=TRAINER)
    finally:
        lock.close()
    status = {o.cell: o.status for o in summary.outcomes}
    assert status == {cells[0].id: "busy", cells[1].id: "done"}
    assert (busy / "metrics.jsonl").read_text() == '{"update": 0}\n'  # untouched
    assert not (busy / "DONE").exists()


def test_jobs_0_is_refused_before_the_suite_folder_is_written(tmp_path):
    suite, cells = _suite(tmp_path)
    with pytest.raises(UserError, match="--jobs must be >= 1"):
        runner.run_suite(suite, cells, tmp_path / "runs", jobs=0, trainer=TRAINER)
    assert not (tmp_path / "runs").exists()


# --- full disk, dead workers, DONE wins -----------------------------------------------------------------
def test_a_full_disk_fails_the_cell_in_one_line_even_when_the_error_record_cannot_be_written(tmp_path, monkeypatch):
    suite, cells = _suite(tmp_path)
    meta = cells[0].meta(suite.name)

    def full(path, write):
        raise atomic.DiskFull(path)

    def trainer(cfg, out, **kw):
        raise OSError(errno.ENOSPC, "No space left on device", str(out / "metrics.jsonl"))

    monkeypatch.setattr(cell, "load_trainer", lambda path: trainer)
    monkeypatch.setattr(atomic, "atomic_write", full)  # every write fails: ERROR.json too
    monkeypatch.setattr(run_folder, "atomic_write_json", lambda p, obj: full(p, None))
    out = cell.run_cell(meta, str(tmp_path / "cell"), "x:y", emit=lambda e: None)
    assert out.status == "failed" and out.disk_full
    assert out.error == f"no space left on {tmp_path / 'cell' / 'metrics.jsonl'}"


def test_a_full_disk_stops_scheduling_and_stale_temp_files_are_cleaned_on_start(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_LOG", str(tmp_path / "log"))
    monkeypatch.setenv("FAKE_ENOSPC", "dance_grpo")
    suite, cells = _suite(tmp_path)
    sdir = tmp_path / "runs" / suite.name
    stale_dir = sdir / cells[-1].id / "checkpoints" / ".tmp-update_000002"
    stale_dir.mkdir(parents=True)
    stale_file = sdir / cells[-1].id / ".final.json.x1y2.tmp"
    stale_file.write_text("{")
    summary = runner.run_suite(suite, cells, tmp_path / "runs", jobs=1, trainer=TRAINER)
    assert not stale_dir.exists() and not stale_file.exists()
    assert summary.disk_full.startswith("no space left on ")
    assert not any((sdir / c.id / "DONE").exists() for c in cells)
    # the first cell failed; at most the one already handed to the worker started after it, no later one
    started = [ln.split()[1] for ln in (tmp_path / "log").read_text().splitlines() if ln.startswith("start")]
    assert started[0] == cells[0].id and set(started) <= {cells[0].id, cells[1].id}
    assert summary.count("interrupted") >= len(cells) - 2


def test_a_dead_worker_fails_only_its_own_cell_and_the_pool_is_rebuilt(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_LOG", str(tmp_path / "log"))
    monkeypatch.setenv("FAKE_DIE", "dance_grpo")
    monkeypatch.setenv("FAKE_SLEEP", "0.5")  # the healthy worker is mid-cell when the other one dies
    suite, cells = _suite(tmp_path, union=[], seeds=[0])
    summary = runner.run_suite(suite, cells, tmp_path / "runs", jobs=2, trainer=TRAINER)
    status = {o.cell: o.status for o in summary.outcomes}
    dying = {c.id for c in cells if c.config.method == "dance_grpo"}
    assert {c for c, s in status.items() if s == "failed"} == dying
    assert all(s == "done" for c, s in status.items() if c not in dying)
    assert len(dying) == 1 and len(status) == 2
    for c in cells:
        err = summary.suite_dir / c.id / ERROR
        assert err.is_file() == (c.id in dying)  # no DONE cell carries an ERROR.json
    (dead,) = dying
    error = json.loads((summary.suite_dir / dead / ERROR).read_text())
    assert "worker running this cell died" in error["message"]
    assert (summary.suite_dir / "results.parquet").is_file()


def test_done_wins_over_a_late_error_record(tmp_path):
    cdir = tmp_path / "cell"
    cdir.mkdir()
    mark_done(cdir)
    record_failure(cdir, RuntimeError("late"), 0.0)
    assert not (cdir / ERROR).exists()


# --- Ctrl-C --------------------------------------------------------------------------------------------
CLI = """
import sys
import grpo_bench.cli.suite as cs
run_suite = cs.run_suite
cs.run_suite = lambda *a, **k: run_suite(*a, **{**k, "trainer": "suite_support:fake_train"})
from grpo_bench.cli import main
sys.argv = ["grpo-bench", "run", *sys.argv[1:]]
main()
"""


def _start(tmp_path: Path, sleep: float) -> subprocess.Popen:
    suite = write_suite(tmp_path / "s.yaml")
    env = {**os.environ, "FAKE_LOG": str(tmp_path / "log"), "FAKE_SLEEP": str(sleep), "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(SUPPORT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, "-c", CLI, str(suite), "--jobs", "2", "--out", str(tmp_path / "runs")],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _starts(tmp_path: Path) -> list[str]:
    log = tmp_path / "log"
    return [ln.split()[1] for ln in log.read_text().splitlines() if ln.startswith("start")] if log.is_file() else []


def _wait_for_starts(tmp_path: Path, proc: subprocess.Popen, n: int) -> None:
    deadline = time.monotonic() + 120
    while len(_starts(tmp_path)) < n:
        assert proc.poll() is None and time.monotonic() < deadline, "cells never started"
        time.sleep(0.1)


def _metric_lines(tmp_path: Path) -> int:
    return sum(len(p.read_text().splitlines()) for p in (tmp_path / "runs").rglob("metrics.jsonl"))


@pytest.mark.timeout(300)
def test_one_ctrl_c_stops_at_a_safe_point_exits_130_and_the_rerun_resumes(tmp_path):
    proc = _start(tmp_path, sleep=0.5)
    _wait_for_starts(tmp_path, proc, 2)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)  # bounded: the running cells stop after their current update
    assert proc.returncode == 130, err
    assert "interrupted" in out and "resume with: grpo-bench run" in out and "Traceback" not in out + err
    assert len(_starts(tmp_path)) == 2  # nothing was scheduled after Ctrl-C
    runs = tmp_path / "runs"
    assert not list(runs.rglob("*.lock")) and not list(runs.rglob(".*.tmp"))  # nothing stale to trip on
    partial = _metric_lines(tmp_path)
    assert 0 < partial < 2 * SMALL_SUITE["base"]["updates"]  # stopped mid-cell, progress kept
    rerun = _start(tmp_path, sleep=0.0)
    out, err = rerun.communicate(timeout=240)
    assert rerun.returncode == 0, err
    suite_dir = runs / SMALL_SUITE["name"]
    cells = [p for p in suite_dir.iterdir() if (p / "cell.json").is_file()]
    assert len(cells) == 6 and all((c / "DONE").is_file() for c in cells)
    for c in cells:  # resumed cells continued where they stopped: one line per update, no repeats
        assert [json.loads(x)["update"] for x in (c / "metrics.jsonl").read_text().splitlines()] == [0, 1, 2, 3]


def test_a_second_ctrl_c_stops_at_once(tmp_path):
    proc = _start(tmp_path, sleep=20.0)  # an update takes 20 s: only an immediate stop ends it sooner
    _wait_for_starts(tmp_path, proc, 2)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=15)
    assert proc.returncode == 130
    assert "stopped at once" in err and "Traceback" not in out + err
    assert _metric_lines(tmp_path) == 0  # the running updates were not waited for
    pids = {int(ln.split()[2]) for ln in (tmp_path / "log").read_text().splitlines()}
    time.sleep(1.0)
    assert not any(Path(f"/proc/{p}").exists() and Path(f"/proc/{p}/stat").read_text().split()[2] != "Z" for p in pids)


def test_each_attempt_records_its_thread_count_and_cell_ids_do_not_depend_on_it(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_LOG", str(tmp_path / "log"))
    suite, cells = _suite(tmp_path, union=[], seeds=[0])
    summary = runner.run_suite(suite, cells, tmp_path / "runs", jobs=1, trainer=TRAINER)
    for c in cells:
        (attempt,) = [json.loads(x) for x in (summary.suite_dir / c.id / cell.ATTEMPTS).read_text().splitlines()]
        assert attempt["threads"] == max(1, os.cpu_count() or 1) and attempt["pid"] != os.getpid()
    assert [c.id for c in expand(suite)] == [c.id for c in cells]  # ids come from the config alone


def test_files_get_the_users_umask_not_0600(tmp_path):
    old = os.umask(0o022)
    try:
        atomic.atomic_write_text(tmp_path / "a.txt", "x")
        atomic.atomic_write(tmp_path / "b.bin", lambda p: p.write_bytes(b"y"))
        os.umask(0o027)
        atomic.atomic_write_json(tmp_path / "c.json", {})
    finally:
        os.umask(old)
    modes = [oct((tmp_path / n).stat().st_mode & 0o777) for n in ("a.txt", "b.bin", "c.json")]
    assert modes == [oct(0o644), oct(0o644), oct(0o640)]


def test_read_jsonl_drops_only_a_torn_last_line(tmp_path):
    f = tmp_path / "m.jsonl"
    f.write_text('{"a": 1}\n{"a": 2}\n{"a": ')
    assert atomic.read_jsonl(f) == [{"a": 1}, {"a": 2}]
    f.write_text('{"a": 1}\n{"a": \n{"a": 3}\n')
    with pytest.raises(UserError, match=r"m.jsonl:2: not a JSON line"):
        atomic.read_jsonl(f)
