"""``grpo-bench study export RUN_DIR --out KIT``: pairs of final eval videos, target row vs each baseline
row, that share seed, prompt and initial noise (the eval noise depends on the run seed alone), written
as a blind kit (see grpo_bench.study)."""

from __future__ import annotations

import json
import math
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from grpo_bench.atomic import atomic_write_json
from grpo_bench.errors import UserError, unknown
from grpo_bench.report import data
from grpo_bench.study import clips as clipmod
from grpo_bench.study.kit import CLIPS, KEY, PAIRS
from grpo_bench.suite.results import load_results

VideoKey = tuple[int, str, int]
"""(seed, prompt, sample): the same key in two rows = the same prompt and the same initial noise."""


@dataclass
class ExportOptions:
    target: str | None = None
    """Row label as in Table 2 (the suite's group); default: the last row (suites list the proposed method last)."""
    baselines: list[str] | None = None
    """Default: every other row of the setting."""
    setting: str | None = None
    pairs: int = 32
    """Main pairs per baseline (the paper: 32 prompts)."""
    raters_per_pair: int = 29
    """The design's raters (every rater sees every pair); recorded in pairs.json for the power statement."""
    checks: int = 2
    """Attention checks of each kind (identical clips; a broken clip)."""
    repeats: int = 4
    """Main pairs shown a second time (rater consistency)."""
    seed: int = 0
    fps: int = 8


@dataclass
class Video:
    row: str
    cell: str
    key: VideoKey
    scores: dict[str, float | None]
    tensor: torch.Tensor


def _rows(run_dir: Path, opts: ExportOptions) -> tuple[str, str, list[str], Any]:
    df = load_results(run_dir)
    cells = data.cells(df)
    cells = cells[cells["status"] == "done"]
    if cells.empty:
        raise UserError(f"{run_dir}/results.parquet: no finished cells to take videos from")
    settings = sorted(cells["setting"].unique())
    setting = opts.setting
    if setting is None:
        if len(settings) > 1:
            raise UserError(f"{run_dir}: several settings ({', '.join(settings)}); choose one with --setting")
        setting = settings[0]
    elif setting not in settings:
        raise unknown("setting", setting, settings, "--setting: ")
    cells = cells[cells["setting"] == setting]
    order = [g for g in data.group_order(df) if g in set(cells["group"])]
    target = opts.target or order[-1]
    if target not in order:
        raise unknown("row", target, order, "--target: ")
    baselines = opts.baselines or [g for g in order if g != target]
    for b in baselines:
        if b not in order or b == target:
            raise unknown("row", b, [g for g in order if g != target], "--baselines: ")
    if not baselines:
        raise UserError(f"{run_dir}: setting {setting} has only the row {target!r}; nothing to compare it with")
    return setting, target, list(dict.fromkeys(baselines)), cells


def _load_row(run_dir: Path, cells: Any, row: str) -> dict[VideoKey, Video]:
    out: dict[VideoKey, Video] = {}
    for cell in cells[cells["group"] == row].itertuples():
        cdir = run_dir / cell.cell
        final, clip_path = cdir / "final.json", cdir / "samples" / "final_eval.pt"
        if not clip_path.is_file():
            raise UserError(
                f"{clip_path}: missing (the cell ran with save_videos: false; rerun it with save_videos: true)")
        rows = json.loads(final.read_text()).get("eval_videos") or []
        videos = torch.load(clip_path, map_location="cpu", weights_only=True)  # run folders are untrusted
        for i, v in enumerate(rows[: videos.shape[0]]):
            key = (int(v.get("seed", cell.seed)), str(v["prompt"]), int(v.get("sample", 0)))
            scores = {k: (float(x) if math.isfinite(float(x)) else None) for k, x in v.items()
                      if k not in ("prompt", "sample", "seed")
                      and isinstance(x, (int, float)) and not isinstance(x, bool)}
            out[key] = Video(row, cell.cell, key, scores, videos[i])
    return out


def _spread(keys: list[VideoKey], n: int, rng: np.random.Generator) -> list[VideoKey]:
    """n keys, as many distinct prompts as possible: shuffled, then round-robin over prompts."""
    keys = [keys[i] for i in rng.permutation(len(keys))]
    by_prompt: dict[str, list[VideoKey]] = {}
    for k in keys:
        by_prompt.setdefault(k[1], []).append(k)
    picked: list[VideoKey] = []
    while len(picked) < n and any(by_prompt.values()):
        for bucket in by_prompt.values():
            if bucket and len(picked) < n:
                picked.append(bucket.pop(0))
    return picked


def export_kit(run_dir: str | Path, out: str | Path, opts: ExportOptions) -> dict[str, Any]:
    """Write the kit; returns a summary (pairs per kind, clips, rows)."""
    run_dir, out = Path(run_dir), Path(out)
    for name, value in (("--pairs", opts.pairs), ("--raters-per-pair", opts.raters_per_pair), ("--fps", opts.fps)):
        if value < 1:
            raise UserError(f"{name} must be at least 1, got {value}")
    if opts.checks < 0 or opts.repeats < 0:
        raise UserError("--checks and --repeats must be 0 or more")
    if (out / PAIRS).exists() or (out / KEY).exists():
        raise UserError(f"{out}: already holds a kit (its votes would no longer match); choose another --out")
    setting, target, baselines, cells = _rows(run_dir, opts)
    rng = np.random.default_rng(opts.seed)
    videos = {row: _load_row(run_dir, cells, row) for row in [target, *baselines]}
    clip_ids: dict[tuple[str, VideoKey], str] = {}
    key_clips: dict[str, dict[str, Any]] = {}
    pairs: list[dict[str, Any]] = []
    key_pairs: dict[str, dict[str, Any]] = {}

    def clip(video: Video) -> str:
        ident = (video.row, video.key)
        if ident not in clip_ids:
            cid = secrets.token_hex(8)
            clipmod.write_mp4(out / CLIPS / f"{cid}.mp4", clipmod.upscale(clipmod.to_frames(video.tensor)), opts.fps)
            clip_ids[ident] = cid
            key_clips[cid] = {"row": video.row, "seed": video.key[0], "prompt": video.key[1], "sample": video.key[2],
                              "setting": setting, "cell": video.cell, "scores": video.scores, "broken": False}
        return clip_ids[ident]

    def add(kind: str, prompt: str, a: str, b: str, **extra: Any) -> str:
        pid = secrets.token_hex(6)
        pair = [a, b] if rng.random() < 0.5 else [b, a]  # which clip is listed first says nothing either
        pairs.append({"id": pid, "prompt": prompt, "clips": pair})
        key_pairs[pid] = {"kind": kind, **extra}
        return pid

    main: list[str] = []
    for base in baselines:
        common = sorted(set(videos[target]) & set(videos[base]))
        if not common:
            raise UserError(f"{run_dir}: rows {target!r} and {base!r} share no (seed, prompt, sample) eval video")
        for k in _spread(common, opts.pairs, rng):
            t, b = clip(videos[target][k]), clip(videos[base][k])
            main.append(add("main", k[1], t, b, target=t, baseline=b, baseline_row=base))
    for pid in [main[i] for i in rng.choice(len(main), min(opts.repeats, len(main)), replace=False)]:
        original = key_pairs[pid]
        add("repeat", next(p["prompt"] for p in pairs if p["id"] == pid), original["target"], original["baseline"],
            target=original["target"], baseline=original["baseline"], baseline_row=original["baseline_row"], of=pid)
    pool = sorted(key_clips)
    for _ in range(opts.checks):
        cid = pool[int(rng.integers(len(pool)))]
        add("identical", key_clips[cid]["prompt"], cid, cid, clip=cid)
        src = pool[int(rng.integers(len(pool)))]
        info = key_clips[src]
        video = videos[info["row"]][(info["seed"], info["prompt"], info["sample"])]
        bad = secrets.token_hex(8)
        frames = clipmod.broken(clipmod.to_frames(video.tensor), rng)
        clipmod.write_mp4(out / CLIPS / f"{bad}.mp4", clipmod.upscale(frames), opts.fps)
        key_clips[bad] = {**info, "broken": True, "scores": {}}
        add("broken", info["prompt"], src, bad, intact=src, broken=bad)
    order = rng.permutation(len(pairs))  # pairs.json order mixes kinds; raters get their own order anyway
    # how many pairs are checks stays in the key: pairs.json says nothing a rater could use
    atomic_write_json(out / PAIRS, {"salt": secrets.token_hex(8), "fps": opts.fps,
                                    "design": {"raters_per_pair": opts.raters_per_pair},
                                    "pairs": [pairs[i] for i in order]})
    atomic_write_json(out / KEY, {"setting": setting, "target": target, "baselines": baselines,
                                  "world": _is_world(key_clips), "run_dir": str(run_dir.resolve()),
                                  "clips": key_clips, "pairs": key_pairs})
    _register(run_dir, out)
    kinds = [k["kind"] for k in key_pairs.values()]
    return {"kit": str(out), "setting": setting, "target": target, "baselines": baselines, "clips": len(key_clips),
            **{kind: kinds.count(kind) for kind in ("main", "repeat", "identical", "broken")}}


def _is_world(key_clips: dict[str, dict[str, Any]]) -> bool:
    """A world kit has oracle scores (real models have none: their oracle columns are NaN)."""
    return any(c["scores"].get("oracle_vq") is not None for c in key_clips.values())


STUDIES = "studies.json"
"""RUN_DIR/studies.json: kits exported from this run; the report links their analysis when present."""


def _register(run_dir: Path, kit: Path) -> None:
    path = run_dir / STUDIES
    known = json.loads(path.read_text()) if path.is_file() else []
    entry = str(kit.resolve())
    if entry not in known:
        atomic_write_json(path, [*known, entry])
