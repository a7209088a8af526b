"""``grpo-bench study export RUN_DIR --out KIT``: pairs of final eval videos, target row vs each baseline
row, that share seed, prompt and initial noise (the eval noise depends on the run seed alone), written
as a blind kit (see grpo_bench.study) in the balanced block design of grpo_bench.study.design."""

from __future__ import annotations

import json
import math
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from grpo_bench.atomic import atomic_write_bytes, atomic_write_json
from grpo_bench.errors import UserError, unknown
from grpo_bench.report import data
from grpo_bench.study import clips as clipmod
from grpo_bench.study import design
from grpo_bench.study import power as study_power
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
    """Main pairs of each baseline that one rater sees, each on a target video of its own (the paper: 32
    prompts); fewer when the rows share fewer eval videos (export says so)."""
    raters: int = 29
    """Raters the study plans (the paper: 29), split over the design's blocks; recorded in pairs.json and
    used by the power statement."""
    checks: int = 2
    """Attention checks of each kind (identical clips; a broken clip)."""
    repeats: int = 4
    """Main pairs of each block shown a second time (rater consistency)."""
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
            # a missing score is null in final.json (strict JSON) or NaN in one written before: None either way
            scores = {k: (float(x) if x is not None and math.isfinite(float(x)) else None) for k, x in v.items()
                      if k not in ("prompt", "sample", "seed")
                      and (x is None or isinstance(x, (int, float)) and not isinstance(x, bool))}
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


def _shared_keys(run_dir: Path, videos: dict[str, dict[VideoKey, Video]], target: str) -> list[VideoKey]:
    """(seed, prompt, sample) keys every row has: the rotation may pair any target video with any baseline."""
    common = set(videos[target])
    for row, vids in videos.items():
        if not common & set(vids):
            raise UserError(f"{run_dir}: rows {target!r} and {row!r} share no (seed, prompt, sample) eval video")
        common &= set(vids)
    if not common:
        raise UserError(f"{run_dir}: no (seed, prompt, sample) eval video is shared by all of {', '.join(videos)}")
    return sorted(common)


class _ClipWriter:
    """Every shown clip gets a fresh random id, so no id in pairs.json links two pairs; a video shown under
    several ids is encoded once and its bytes copied."""

    def __init__(self, out: Path, setting: str, fps: int) -> None:
        self.out, self.setting, self.fps = out, setting, fps
        self.clips: dict[str, dict[str, Any]] = {}
        self._encoded: dict[tuple[str, VideoKey], Path] = {}

    def __call__(self, video: Video) -> str:
        cid = secrets.token_hex(8)
        first = self._encoded.get((video.row, video.key))
        if first is None:  # a video as MP4, a still (an image model's one frame) as PNG
            frames = clipmod.upscale(clipmod.to_frames(video.tensor))
            path = clipmod.write_clip(self.out / CLIPS / cid, frames, self.fps)
            self._encoded[(video.row, video.key)] = path
        else:
            atomic_write_bytes(self.out / CLIPS / f"{cid}{first.suffix}", first.read_bytes())
        self.clips[cid] = {"row": video.row, "seed": video.key[0], "prompt": video.key[1], "sample": video.key[2],
                           "setting": self.setting, "cell": video.cell, "scores": video.scores, "broken": False}
        return cid

    def broken(self, video: Video, rng: np.random.Generator) -> str:
        cid = secrets.token_hex(8)
        frames = clipmod.broken(clipmod.to_frames(video.tensor), rng)
        clipmod.write_clip(self.out / CLIPS / cid, clipmod.upscale(frames), self.fps)
        self.clips[cid] = {"row": video.row, "seed": video.key[0], "prompt": video.key[1], "sample": video.key[2],
                           "setting": self.setting, "cell": video.cell, "scores": {}, "broken": True}
        return cid


def export_kit(run_dir: str | Path, out: str | Path, opts: ExportOptions) -> dict[str, Any]:
    """Write the kit; returns a summary (pairs per kind, per rater, clips, rows, the design)."""
    run_dir, out = Path(run_dir), Path(out)
    for name, value in (("--pairs", opts.pairs), ("--raters", opts.raters), ("--fps", opts.fps)):
        if value < 1:
            raise UserError(f"{name} must be at least 1, got {value}")
    if opts.checks < 0 or opts.repeats < 0:
        raise UserError("--checks and --repeats must be 0 or more")
    if (out / PAIRS).exists() or (out / KEY).exists():
        raise UserError(f"{out}: already holds a kit (its votes would no longer match); choose another --out")
    setting, target, baselines, cells = _rows(run_dir, opts)
    rng = np.random.default_rng(opts.seed)
    videos = {row: _load_row(run_dir, cells, row) for row in [target, *baselines]}
    shared = _shared_keys(run_dir, videos, target)
    size = design.size(len(shared), opts.pairs, len(baselines))
    keys = _spread(shared, size.videos, rng)
    clip = _ClipWriter(out, setting, opts.fps)
    pairs: dict[str, dict[str, Any]] = {}
    key_pairs: dict[str, dict[str, Any]] = {}

    def add(kind: str, prompt: str, a: str, b: str, **extra: Any) -> str:
        pid = secrets.token_hex(6)
        pair = [a, b] if rng.random() < 0.5 else [b, a]  # which clip is listed first says nothing either
        pairs[pid] = {"id": pid, "prompt": prompt, "clips": pair}
        key_pairs[pid] = {"kind": kind, **extra}
        return pid

    def main_pair(kind: str, k: VideoKey, base: str, **extra: Any) -> str:
        t, b = clip(videos[target][k]), clip(videos[base][k])
        return add(kind, k[1], t, b, target=t, baseline=b, baseline_row=base, video=list(k), **extra)

    blocks: list[list[str]] = []
    for block in design.blocks(keys, baselines):
        main = [main_pair("main", k, base) for k, base in block]
        again = [main[i] for i in rng.choice(len(main), min(opts.repeats, len(main)), replace=False)]
        repeats = [main_pair("repeat", tuple(key_pairs[p]["video"]), key_pairs[p]["baseline_row"], of=p)
                   for p in again]  # a repeat shows the same videos under fresh ids, in the same block
        blocks.append(main + repeats)
    checks: list[str] = []
    pool = [(row, k) for k in keys for row in (target, *baselines)]
    for _ in range(opts.checks):  # the same checks in every block; they may show a video a second time
        row, k = pool[int(rng.integers(len(pool)))]
        a, b = clip(videos[row][k]), clip(videos[row][k])
        checks.append(add("identical", k[1], a, b, clips=[a, b]))
        row, k = pool[int(rng.integers(len(pool)))]
        intact, bad = clip(videos[row][k]), clip.broken(videos[row][k], rng)
        checks.append(add("broken", k[1], intact, bad, intact=intact, broken=bad))
    blocks = [b + checks for b in blocks]
    listed = list(pairs.values())
    order = rng.permutation(len(listed))  # pairs.json order mixes kinds; raters get their own order anyway
    per_block = design.raters_per_block(opts.raters, len(blocks))
    power = study_power.statement(opts.raters, size.per_baseline)
    # pairs.json states the blocks but not which pairs are checks or how many: that stays in the key
    atomic_write_json(out / PAIRS, {"salt": secrets.token_hex(8), "fps": opts.fps, "design": {
        "rule": "the comparisons are rotated over raters and prompts (docs/human_study.md); a rater answers "
                "one block; a new rater joins the block with the fewest raters",
        "raters": opts.raters, "raters_per_block": per_block, "blocks": blocks},
        "pairs": [listed[i] for i in order]})
    summary_design = {"blocks": len(blocks), "raters": opts.raters, "raters_per_block": per_block,
                      "target_videos_per_rater": size.videos, "pairs_per_baseline_per_rater": size.per_baseline,
                      "pairs_per_rater": len(blocks[0]), "asked_pairs_per_baseline": opts.pairs,
                      "shortfall": size.shortfall, "power": power}
    atomic_write_json(out / KEY, {"setting": setting, "target": target, "baselines": baselines,
                                  "world": _is_world(clip.clips), "run_dir": str(run_dir.resolve()),
                                  "design": summary_design, "clips": clip.clips, "pairs": key_pairs})
    _register(run_dir, out)
    kinds = [k["kind"] for k in key_pairs.values()]
    return {"kit": str(out), "setting": setting, "target": target, "baselines": baselines, "clips": len(clip.clips),
            "design": summary_design,
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
