"""Real ``grpo-bench study serve`` processes on 127.0.0.1 and raters that follow the page's protocol
(GET /rate for the next pair, POST /answer, a 303 back to /rate), for the load and restart tests.

The server runs in a subprocess (not a thread) so it can be SIGKILLed like a crashed host, and so the
raters' threads and the server do not share one interpreter lock. A vote counts as acknowledged only
when its POST got the 303: that is all a browser ever learns, so it is what must survive.
"""

from __future__ import annotations

import html
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from launch_support import free_port  # noqa: F401  (tests import it from here)

REPO = Path(__file__).resolve().parents[2]
DIMENSIONS = ("vq", "mq", "ta")
CHOICES = ("left", "right", "tie")
HIDDEN = re.compile(r'<input type="hidden" name="(\w+)" value="([^"]*)"')


class ServerProcess:
    """``python -m grpo_bench.cli study serve KIT --port PORT`` with this checkout's code on the path."""

    def __init__(self, kit: Path, port: int, log: Path):
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
        self.url = f"http://127.0.0.1:{port}"
        self.log = log.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "grpo_bench.cli", "study", "serve", str(kit), "--port", str(port)],
            env=env, stdout=self.log, stderr=subprocess.STDOUT)
        self._wait_ready(log)

    def _wait_ready(self, log: Path, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited {self.proc.returncode}:\n{log.read_text()[-3000:]}")
            try:
                if httpx.get(self.url + "/", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        self.kill()
        raise RuntimeError(f"server not ready in {timeout} s:\n{log.read_text()[-3000:]}")

    def kill(self) -> None:
        """SIGKILL: no shutdown hook, no flush, no checkpoint; what survives is what was committed."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self.log.close()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()


@dataclass
class Tally:
    """What the raters' side saw, shared by all rater threads (behind one lock)."""
    acked: dict[tuple[str, str], tuple[str, ...]] = field(default_factory=dict)  # (rater, pair) -> choices
    retries: int = 0             # acknowledged answers posted a second time (a client retry)
    interrupted: set[tuple[str, str]] = field(default_factory=set)  # posts whose reply never came
    shown_again: list[tuple[str, str]] = field(default_factory=list)  # an acknowledged pair served again
    errors: list[str] = field(default_factory=list)
    raters: dict[int, str] = field(default_factory=dict)  # seat -> the rater id sitting there now
    lock: threading.Lock = field(default_factory=threading.Lock)


def answer_form(page: str, rng: random.Random) -> dict[str, str]:
    fields = {k: html.unescape(v) for k, v in HIDDEN.findall(page)}
    return {**fields, **{dim: rng.choice(CHOICES) for dim in DIMENSIONS}}


def answer_next(client: httpx.Client, rater: str, tally: Tally, rng: random.Random, retry_every: int) -> bool:
    """One step of the page's protocol; False when this rater has answered every pair of their block."""
    page = client.get("/rate", params={"rater": rater})
    if page.status_code != 200:
        raise RuntimeError(f"GET /rate {page.status_code}")
    if 'id="done"' in page.text:
        return False
    form = answer_form(page.text, rng)
    key = (rater, form["pair_id"])
    with tally.lock:
        if key in tally.acked:
            tally.shown_again.append(key)
    try:
        res = client.post("/answer", data=form, follow_redirects=False)
    except httpx.TransportError:
        with tally.lock:
            tally.interrupted.add(key)
        raise
    if res.status_code != 303:
        raise RuntimeError(f"POST /answer {res.status_code}")
    with tally.lock:
        tally.acked.setdefault(key, tuple(form[d] for d in DIMENSIONS))
        retry = len(tally.acked) % retry_every == 0
    if retry:  # the same answer again, as a browser retrying a reply it did not see would send it
        again = client.post("/answer", data=form, follow_redirects=False)
        if again.status_code != 303:
            raise RuntimeError(f"retried POST /answer {again.status_code}")
        with tally.lock:
            tally.retries += 1
    return True


def rater_seat(url: str, seat: int, tally: Tally, keep_going, retry_every: int = 5) -> None:
    """One of the 29 raters. When a rater finishes their block a new one takes the seat, so the server
    keeps 29 concurrent raters for the whole run, however short the blocks. Stops at the first failure."""
    rng = random.Random(seat)
    generation = 0
    rater = f"seat{seat:02d}"
    with tally.lock:
        tally.raters[seat] = rater
    with httpx.Client(base_url=url, timeout=30) as client:
        while keep_going():
            try:
                more = answer_next(client, rater, tally, rng, retry_every)
            except (httpx.TransportError, RuntimeError) as exc:
                with tally.lock:
                    tally.errors.append(f"{rater}: {type(exc).__name__}: {exc}")
                return
            if not more:
                generation += 1
                rater = f"seat{seat:02d}.{generation}"
                with tally.lock:
                    tally.raters[seat] = rater


def run_seats(url: str, seats: int, tally: Tally, keep_going) -> list[threading.Thread]:
    threads = [threading.Thread(target=rater_seat, args=(url, i, tally, keep_going), daemon=True)
               for i in range(seats)]
    for t in threads:
        t.start()
    return threads


def stored_votes(db: Path) -> list[tuple[str, str, str, str]]:
    """(rater, pair_id, dimension, choice) of every row, read straight from the SQLite file."""
    con = sqlite3.connect(db, timeout=30)
    try:
        return con.execute("SELECT rater, pair_id, dimension, choice FROM votes").fetchall()
    finally:
        con.close()


def stored_answers(rows) -> dict[tuple[str, str], tuple[str, ...]]:
    """(rater, pair) -> (vq, mq, ta) choices, from stored_votes rows."""
    by_key: dict[tuple[str, str], dict[str, str]] = {}
    for rater, pair, dim, choice in rows:
        by_key.setdefault((rater, pair), {})[dim] = choice
    return {k: tuple(v.get(d, "") for d in DIMENSIONS) for k, v in by_key.items()}
