"""A study that holds its raters (issue 22): the real server on 127.0.0.1 under 29 concurrent raters
loses no acknowledged vote and stores none twice, even when clients retry; and a server SIGKILLed while
raters are posting restarts on the same kit with every acknowledged vote, each rater resuming at a pair
they have not answered.

The short load run is in the default suite (GRPO_BENCH_STUDY_LOAD_S seconds, default 8); the 60 s run
is opt-in (``pytest -m slow tests/study/test_study_load.py``).
"""

from __future__ import annotations

import os
import random
import sqlite3
import time
from collections import Counter

import httpx
import pytest
from study_load_support import (
    ServerProcess,
    Tally,
    answer_next,
    free_port,
    run_seats,
    stored_answers,
    stored_votes,
)
from study_support import build_suite

from grpo_bench.study import votes
from grpo_bench.study.export import ExportOptions, export_kit
from grpo_bench.study.kit import load_kit
from grpo_bench.study.server import layout

pytest.importorskip("uvicorn", reason="the study extra is not installed (pip install -e '.[study]')")

RATERS = 29  # the paper's study size
SHORT_S = float(os.environ.get("GRPO_BENCH_STUDY_LOAD_S", "8"))


@pytest.fixture(scope="module")
def kit(tmp_path_factory):
    root = build_suite(tmp_path_factory.mktemp("suite"))
    export_kit(root, root / "kit", ExportOptions(pairs=8, checks=1, repeats=1, seed=3))  # 2 blocks of 11 pairs
    return root / "kit"


@pytest.fixture
def db(kit):
    path = kit / "votes.sqlite"
    for p in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        p.unlink(missing_ok=True)
    return path


def _stored_once(db):
    """(rater, pair) -> choices as stored, asserting no (rater, pair, dimension) row is there twice."""
    rows = stored_votes(db)
    triples = Counter((r, p, d) for r, p, d, _ in rows)
    assert max(triples.values(), default=1) == 1, "a (rater, pair, dimension) is stored twice"
    return stored_answers(rows)


@pytest.mark.parametrize("seconds", [SHORT_S, pytest.param(60.0, marks=pytest.mark.slow)])
def test_29_concurrent_raters_lose_no_vote_and_store_none_twice(kit, db, tmp_path, seconds):
    server = ServerProcess(kit, free_port(), tmp_path / "server.log")
    tally = Tally()
    start = time.monotonic()
    try:
        threads = run_seats(server.url, RATERS, tally, lambda: time.monotonic() - start < seconds)
        for t in threads:
            t.join(seconds + 60)
        elapsed = time.monotonic() - start
        live = _stored_once(db)  # read while the server still holds the file
    finally:
        server.stop()
    assert not any(t.is_alive() for t in threads), "a rater hung"
    assert tally.errors == [], tally.errors[:5]
    print(f"\n{RATERS} raters, {elapsed:.1f} s: {len(tally.acked)} answers acknowledged "
          f"({len(tally.acked) / elapsed:.0f}/s), {tally.retries} retried, {len(live)} stored "
          f"({3 * len(live)} rows), {len(tally.raters)} seats")
    assert len(tally.acked) >= 2 * RATERS, "too few answers to call this a load test"
    assert tally.retries > 0
    assert live == tally.acked  # no lost vote, none extra, and the first answer's choices are the ones kept
    assert _stored_once(db) == tally.acked  # and after the server is gone
    assert tally.shown_again == [], "an acknowledged pair was served to its rater again"
    con = sqlite3.connect(db)
    blocks = Counter(b for (b,) in con.execute("SELECT block FROM raters"))
    con.close()
    assert max(blocks.values()) - min(blocks.values()) <= 1, blocks  # concurrent arrivals stay balanced


def test_a_killed_server_restarts_with_every_acknowledged_vote(kit, db, tmp_path):
    port = free_port()
    server = ServerProcess(kit, port, tmp_path / "server.log")
    tally = Tally()
    threads = run_seats(server.url, RATERS, tally, lambda: True)  # until the server dies under them
    deadline = time.monotonic() + 60
    while len(tally.acked) < 150 and time.monotonic() < deadline and not tally.errors:
        time.sleep(0.02)
    assert tally.errors == [] and len(tally.acked) >= 150, (len(tally.acked), tally.errors[:3])
    server.kill()  # mid-answer: 29 raters are posting
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    assert len(tally.errors) == RATERS  # every rater saw the server go
    assert tally.interrupted, "no post was in flight at the kill"

    # The analysis reads the file as left by the crash (read-only, WAL not yet checkpointed).
    after_crash = votes.read_votes(db)
    assert set(zip(after_crash.rater, after_crash.pair_id)) >= set(tally.acked)
    crashed = _stored_once(db)
    assert {k: crashed[k] for k in tally.acked} == tally.acked  # every acknowledged vote, as answered
    assert set(crashed) - set(tally.acked) <= tally.interrupted  # the only extras: committed, reply lost
    print(f"\nkilled after {len(tally.acked)} acknowledged answers; {len(tally.interrupted)} in flight, "
          f"{len(set(crashed) & tally.interrupted)} of them committed")

    server = ServerProcess(kit, port, tmp_path / "server.log")  # same kit, same database, same address
    try:
        k = load_kit(kit)
        con = sqlite3.connect(db)
        block = dict(con.execute("SELECT rater, block FROM raters").fetchall())
        con.close()
        resumed, rng = 0, random.Random(22)
        with httpx.Client(base_url=server.url, timeout=30) as client:
            for rater in sorted(set(tally.raters.values()) | {r for r, _ in tally.interrupted}):
                done = {p for r, p in crashed if r == rater}
                todo = [s.pair.id for s in layout(k, rater, block[rater]) if s.pair.id not in done]
                page = client.get("/rate", params={"rater": rater}).text
                if not todo:
                    assert 'id="done"' in page
                    continue
                assert f'name="pair_id" value="{todo[0]}"' in page, rater  # the first pair not answered
                for _ in range(min(2, len(todo))):  # and they answer on
                    answer_next(client, rater, tally, rng, retry_every=2)
                resumed += 1
    finally:
        server.stop()
    assert resumed >= RATERS // 2 and tally.shown_again == []
    final = _stored_once(db)
    assert {k: final[k] for k in tally.acked} == tally.acked
    assert set(final) - set(tally.acked) <= tally.interrupted

