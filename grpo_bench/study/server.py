"""``grpo-bench study serve KIT``: the raters' web page (FastAPI + Jinja2, run by uvicorn).

It serves exactly three things: its own pages, its own static files, and the kit's clips by id.
key.json, votes.sqlite and every other path are unreachable because no route maps onto the kit
folder: a clip is looked up by id in pairs.json, never by a path taken from the URL.
Each rater answers one block of the design (given on arrival, stored in votes.sqlite) in their own pair
order with their own left/right sides, drawn from a seed made of the kit's salt and the rater id, so a
reopened tab resumes at the first unanswered pair in the same order.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import random
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlencode

from fastapi import FastAPI, Form, HTTPException, Request
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from starlette.exceptions import HTTPException as StarletteHTTPException

from grpo_bench.study import votes
from grpo_bench.study.kit import CLIPS, DIMENSIONS, TOKEN, VOTES, Kit, Pair, load_kit

HERE = Path(__file__).parent
MAX_RATER = 64
Choice = Annotated[Literal["left", "right", "tie"], Form()]
Text = Annotated[str, Form()]


@dataclass
class Shown:
    pair: Pair
    left: str
    right: str


def layout(kit: Kit, rater: str, block: int = 0) -> list[Shown]:
    """This rater's pairs (their block of the design) in their order, each with its sides (deterministic
    in salt and rater)."""
    seed = int(hashlib.sha256(f"{kit.salt}\x00{rater}".encode()).hexdigest()[:16], 16)
    rng = random.Random(seed)
    pairs = list(kit.blocks[block])
    rng.shuffle(pairs)
    out = []
    for p in pairs:
        a, b = p.clips if rng.random() < 0.5 else p.clips[::-1]
        out.append(Shown(p, a, b))
    return out


def clean_rater(raw: str | None) -> str:
    rater = (raw or "").strip()
    if not rater or len(rater) > MAX_RATER or any(ord(c) < 32 or ord(c) == 127 for c in rater):
        raise HTTPException(400, f"A rater id is 1 to {MAX_RATER} printable characters.")
    return rater


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds")


def create_app(root: str | Path) -> FastAPI:
    kit = load_kit(root)
    clip_dir = (kit.root / CLIPS).resolve()
    clip_ids = kit.clip_ids
    con = votes.connect(kit.root / VOTES)
    lock = threading.Lock()  # one sqlite connection, used from uvicorn's worker threads in turn
    templates = Jinja2Templates(directory=str(HERE / "templates"))  # autoescapes every .html template
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)  # no API pages: only the rater's
    app.mount("/static", StaticFiles(directory=str(HERE / "static")), name="static")

    @app.middleware("http")
    async def headers(request: Request, call_next):
        response = await call_next(request)
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Content-Security-Policy"] = ("default-src 'self'; media-src 'self'; img-src 'self'; "
                                                       "object-src 'none'")
        response.headers["Referrer-Policy"] = "no-referrer"
        response.headers["Cache-Control"] = response.headers.get("Cache-Control", "no-store")
        return response

    @app.exception_handler(StarletteHTTPException)  # ours and the router's 404/405
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        return templates.TemplateResponse(
            request, "error.html", {"message": str(exc.detail)}, status_code=exc.status_code)

    def rater_layout(rater: str) -> list[Shown]:
        with lock:
            block = votes.block_of(con, rater, len(kit.blocks), _now())
        return layout(kit, rater, block)

    @app.get("/", response_class=HTMLResponse)
    def start(request: Request) -> Response:
        return templates.TemplateResponse(request, "start.html", {"pairs": len(kit.blocks[0])})

    @app.get("/rate", response_class=HTMLResponse)
    def rate(request: Request, rater: str | None = None) -> Response:
        rater = clean_rater(rater)
        shown = rater_layout(rater)
        with lock:
            done = votes.answered(con, rater)
        todo = [s for s in shown if s.pair.id not in done]
        context = {"rater": rater, "done": len(shown) - len(todo), "total": len(shown)}
        if not todo:
            return templates.TemplateResponse(request, "done.html", context)
        s = todo[0]
        still = (clip_dir / f"{s.left}.png").is_file()  # an image model's kit: stills, not videos
        return templates.TemplateResponse(request, "pair.html", {
            **context, "pair": s.pair, "left": s.left, "right": s.right, "shown_at": _now(),
            "dimensions": DIMENSIONS, "fps": kit.fps, "still": still})

    @app.post("/answer")
    def answer(rater: Text, pair_id: Text, shown_at: Text, vq: Choice, mq: Choice, ta: Choice) -> Response:
        rater = clean_rater(rater)
        try:
            dt.datetime.fromisoformat(shown_at)
        except ValueError:
            raise HTTPException(400, "shown_at is not an ISO time.") from None
        shown = {s.pair.id: s for s in rater_layout(rater)}
        if pair_id not in shown:
            raise HTTPException(400, "Unknown pair.")
        s, at = shown[pair_id], _now()
        rows = [(rater, pair_id, dim, choice, s.left, s.right, shown_at, at)
                for dim, choice in (("vq", vq), ("mq", mq), ("ta", ta))]
        with lock:
            votes.record(con, rows)  # a double submit inserts nothing: the first answer stands
        return RedirectResponse(f"/rate?{urlencode({'rater': rater})}", status_code=303)

    @app.get("/clips/{name}")
    def clip(name: str) -> Response:
        stem, _, ext = name.rpartition(".")
        kinds = {"mp4": "video/mp4", "png": "image/png"}  # a video; a still of an image model
        if ext not in kinds or not TOKEN.match(stem) or stem not in clip_ids or not (clip_dir / name).is_file():
            raise HTTPException(404, "Not found.")
        return FileResponse(clip_dir / name, media_type=kinds[ext], headers={"Cache-Control": "private, max-age=3600"})

    app.state.connection = con
    return app


def serve(root: str | Path, host: str = "127.0.0.1", port: int = 8765) -> None:
    import uvicorn

    app = create_app(root)
    uvicorn.run(app, host=host, port=port, log_level="info", server_header=False)
