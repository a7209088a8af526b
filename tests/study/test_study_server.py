"""The rating server through starlette's TestClient: only clips and its own pages are reachable
(plain, dotted and percent-encoded traversal), rater strings are escaped, malformed posts get a 4xx
and change nothing, a double submit counts once, and each rater's order and sides are their own."""

from __future__ import annotations

import html
import re
import sqlite3

import pytest
from fastapi.testclient import TestClient
from study_support import build_suite

from grpo_bench.study.export import ExportOptions, export_kit
from grpo_bench.study.kit import load_kit
from grpo_bench.study.server import create_app, layout


@pytest.fixture(scope="module")
def kit(tmp_path_factory):
    root = build_suite(tmp_path_factory.mktemp("suite"))
    export_kit(root, root / "kit", ExportOptions(pairs=3, checks=1, repeats=1, seed=3))
    (root / "secret.txt").write_text("outside the kit")
    return root / "kit"


@pytest.fixture
def client(kit):
    (kit / "votes.sqlite").unlink(missing_ok=True)
    with TestClient(create_app(kit)) as c:
        yield c


def _rows(kit):
    con = sqlite3.connect(kit / "votes.sqlite")
    try:
        return con.execute("SELECT rater, pair_id, dimension, choice, left_clip, right_clip FROM votes").fetchall()
    finally:
        con.close()


def _form(page: str) -> dict[str, str]:
    fields = {k: html.unescape(v) for k, v in re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', page)}
    return {**fields, "vq": "left", "mq": "right", "ta": "tie"}


@pytest.mark.parametrize("path", [
    "/key.json", "/votes.sqlite", "/pairs.json", "/clips/../key.json", "/clips/%2e%2e/key.json",
    "/clips/..%2fkey.json", "/clips/%2e%2e%2fkey.json", "/clips/%2E%2E%2F%2E%2E%2Fsecret.txt",
    "/static/../key.json", "/static/%2e%2e/%2e%2e/key.json", "/static/..%2f..%2fkit.py", "/clips/key.json",
    "/clips/votes.sqlite", "/clips/", "/../secret.txt", "/%2e%2e/secret.txt", "/docs", "/openapi.json",
])
def test_nothing_but_clips_and_pages_is_reachable(client, path):
    res = client.get(path)
    assert res.status_code == 404, (path, res.status_code)
    assert "outside the kit" not in res.text and '"clips"' not in res.text and "SQLite" not in res.text


def test_clips_are_served_by_id_and_pages_name_no_method(client, kit):
    clip = min((kit / "clips").iterdir())
    res = client.get(f"/clips/{clip.name}")
    assert res.status_code == 200 and res.content == clip.read_bytes()
    assert res.headers["content-type"] == "video/mp4"
    part = client.get(f"/clips/{clip.name}", headers={"Range": "bytes=0-99"})  # Safari plays video only with ranges
    assert part.status_code == 206 and part.content == clip.read_bytes()[:100]
    assert client.get("/static/study.js").status_code == 200
    page = client.get("/rate", params={"rater": "r1"}).text
    for word in ("sage", "dance", "flow", "grpo", "kl="):
        assert word not in page.lower()


def test_rater_strings_are_escaped(client, kit):
    evil = '<script>alert("x")</script>&'
    page = client.get("/rate", params={"rater": evil}).text
    assert "<script>alert" not in page
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;&amp;" in page
    res = client.post("/answer", data=_form(page), follow_redirects=False)
    assert res.status_code == 303
    assert {r[0] for r in _rows(kit)} == {evil}  # stored as typed; only the page escapes it


def test_malformed_posts_get_a_4xx_and_change_nothing(client, kit):
    good = _form(client.get("/rate", params={"rater": "r1"}).text)
    bad = [
        {k: v for k, v in good.items() if k != "vq"},           # a missing answer
        {**good, "vq": "both"},                                  # not a choice
        {**good, "pair_id": "deadbeefdead"},                     # not a pair of the kit
        {**good, "pair_id": "../key.json"},
        {**good, "rater": ""},                                   # no rater
        {**good, "rater": "x" * 65},                             # too long
        {**good, "rater": "a\nb"},                               # control character
        {**good, "shown_at": "yesterday"},                       # not a time
    ]
    for form in bad:
        res = client.post("/answer", data=form)
        assert 400 <= res.status_code < 500, form
    assert client.post("/answer", content=b"\x00\xff garbage",
                       headers={"content-type": "application/x-www-form-urlencoded"}).status_code in (400, 422)
    assert client.get("/rate").status_code == 400
    assert _rows(kit) == []


def test_double_submit_counts_once_and_the_first_answer_stands(client, kit):
    form = _form(client.get("/rate", params={"rater": "r1"}).text)
    assert client.post("/answer", data=form, follow_redirects=False).status_code == 303
    again = client.post("/answer", data={**form, "vq": "right"}, follow_redirects=False)
    assert again.status_code == 303
    rows = _rows(kit)
    assert len(rows) == 3 and {r[2]: r[3] for r in rows} == {"vq": "left", "mq": "right", "ta": "tie"}
    con = sqlite3.connect(kit / "votes.sqlite")
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    con.close()


def _blocks(kit):
    con = sqlite3.connect(kit / "votes.sqlite")
    try:
        return dict(con.execute("SELECT rater, block FROM raters").fetchall())
    finally:
        con.close()


def test_raters_join_the_emptiest_block_and_keep_it(client, kit):
    k = load_kit(kit)
    assert len(k.blocks) == 2
    for rater in ("alice", "bob", "carol", "dave", "erin"):
        client.get("/rate", params={"rater": rater})
    client.get("/rate", params={"rater": "alice"})  # a returning rater keeps their block
    assert _blocks(kit) == {"alice": 0, "bob": 1, "carol": 0, "dave": 1, "erin": 0}
    page = client.get("/rate", params={"rater": "bob"}).text
    assert f'name="pair_id" value="{layout(k, "bob", 1)[0].pair.id}"' in page
    assert f'max="{len(k.blocks[1])}"' in page


def test_order_and_sides_are_per_rater_and_progress_resumes(client, kit):
    k = load_kit(kit)
    a, b = layout(k, "alice", 0), layout(k, "bob", 0)
    assert sorted(s.pair.id for s in a) == sorted(p.id for p in k.blocks[0])
    assert [s.pair.id for s in a] != [s.pair.id for s in b] or [s.left for s in a] != [s.left for s in b]
    assert [(s.pair.id, s.left) for s in a] == [(s.pair.id, s.left) for s in layout(k, "alice", 0)]  # stable
    for step in range(2):
        page = client.get("/rate", params={"rater": "alice"}).text
        assert f'value="{step}" max="{len(a)}"' in page
        assert f'name="pair_id" value="{a[step].pair.id}"' in page and f"/clips/{a[step].left}.mp4" in page
        client.post("/answer", data=_form(page))
    rows = _rows(kit)
    assert {(r[1], r[4], r[5]) for r in rows} == {(s.pair.id, s.left, s.right) for s in a[:2]}
    for _ in a[2:]:  # answer the rest: the done page
        client.post("/answer", data={**_form(client.get("/rate", params={"rater": "alice"}).text)})
    assert 'id="done"' in client.get("/rate", params={"rater": "alice"}).text
    other = next(p for p in k.blocks[1] if p.id not in {q.id for q in k.blocks[0]})
    form = {**_form(client.get("/rate", params={"rater": "alice"}).text), "rater": "alice", "pair_id": other.id,
            "shown_at": "2026-01-01T00:00:00"}
    assert client.post("/answer", data=form).status_code == 400  # a pair of another block is not this rater's
