"""KIT/votes.sqlite: one row per (rater, pair, dimension), written in one transaction per answered pair;
and table raters(rater, block, joined_at): the design block each rater was given on arrival.

WAL journal: a reader (the analysis) never blocks the server, and a crash loses at most the answer
being written. A unique index (outside the table's own schema, which the issue fixes) makes a double
submit count once: the first answer stands.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

SCHEMA = """
CREATE TABLE IF NOT EXISTS votes(
    rater TEXT, pair_id TEXT,
    dimension TEXT CHECK(dimension IN ('vq','mq','ta')),
    choice TEXT CHECK(choice IN ('left','right','tie')),
    left_clip TEXT, right_clip TEXT, shown_at TEXT, answered_at TEXT);
CREATE UNIQUE INDEX IF NOT EXISTS votes_once ON votes(rater, pair_id, dimension);
CREATE TABLE IF NOT EXISTS raters(rater TEXT PRIMARY KEY, block INTEGER NOT NULL, joined_at TEXT);
"""
COLUMNS = ["rater", "pair_id", "dimension", "choice", "left_clip", "right_clip", "shown_at", "answered_at"]


def connect(path: Path) -> sqlite3.Connection:
    # explicit BEGIN/COMMIT below; the server shares one connection across threads behind its own lock
    con = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=FULL")
    con.executescript(SCHEMA)
    return con


def record(con: sqlite3.Connection, rows: Iterable[tuple[str, ...]]) -> int:
    """Insert one answer's rows atomically; returns how many were new (0: a double submit)."""
    con.execute("BEGIN IMMEDIATE")
    try:
        before = con.total_changes
        con.executemany(f"INSERT OR IGNORE INTO votes({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})",
                        list(rows))
        new = con.total_changes - before
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return new


def block_of(con: sqlite3.Connection, rater: str, n_blocks: int, now: str) -> int:
    """The rater's block of the design; a new rater joins the block with the fewest raters (the lowest
    such block), in the same transaction that reads the counts, so the blocks stay balanced."""
    con.execute("BEGIN IMMEDIATE")
    try:
        row = con.execute("SELECT block FROM raters WHERE rater = ?", (rater,)).fetchone()
        if row is None:
            counts = dict(con.execute("SELECT block, COUNT(*) FROM raters GROUP BY block").fetchall())
            block = min(range(n_blocks), key=lambda g: (counts.get(g, 0), g))
            con.execute("INSERT INTO raters(rater, block, joined_at) VALUES (?, ?, ?)", (rater, block, now))
        else:
            block = int(row[0])
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return block % n_blocks


def answered(con: sqlite3.Connection, rater: str) -> set[str]:
    """Pairs this rater has answered (all three dimensions are written together)."""
    return {r[0] for r in con.execute("SELECT DISTINCT pair_id FROM votes WHERE rater = ?", (rater,))}


def read_votes(path: Path) -> pd.DataFrame:
    if not path.is_file():
        return pd.DataFrame(columns=COLUMNS)
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return pd.read_sql_query(f"SELECT {', '.join(COLUMNS)} FROM votes ORDER BY rowid", con)
    finally:
        con.close()
