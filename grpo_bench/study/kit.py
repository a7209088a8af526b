"""The kit's files and the reading of them that the server and the analysis share."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_bench.errors import UserError

PAIRS = "pairs.json"
KEY = "key.json"
VOTES = "votes.sqlite"
CLIPS = "clips"
ANALYSIS = "analysis"
DIMENSIONS = {"vq": "Visual quality", "mq": "Motion quality", "ta": "Semantic alignment"}
CHOICES = ("left", "right", "tie")
PAIR_KINDS = ("main", "repeat", "identical", "broken")
"""main: target vs a baseline; repeat: a main pair shown again (rater consistency); identical: one clip
twice (the right answer is tie); broken: a clip against a visibly corrupted copy of itself."""
TOKEN = re.compile(r"^[0-9a-f]{8,32}$")
"""Clip and pair ids: lowercase hex tokens. Anything else in a URL or a form is refused."""


@dataclass
class Pair:
    id: str
    prompt: str
    clips: tuple[str, str]


@dataclass
class Kit:
    """pairs.json: everything a rater may see, and nothing more."""

    root: Path
    pairs: list[Pair]
    salt: str
    """Seeds each rater's order and sides (random per kit, so ids say nothing about order)."""
    fps: int = 8
    design: dict[str, Any] = field(default_factory=dict)

    @property
    def blocks(self) -> list[list[Pair]]:
        """The design's blocks (grpo_bench.study.design): a rater answers the pairs of one block. A kit
        without blocks is one block of every pair."""
        by_id = self.by_id
        listed = self.design.get("blocks") or [[p.id for p in self.pairs]]
        return [[by_id[i] for i in block] for block in listed]

    @property
    def by_id(self) -> dict[str, Pair]:
        return {p.id: p for p in self.pairs}

    @property
    def clip_ids(self) -> set[str]:
        return {c for p in self.pairs for c in p.clips}


def load_kit(root: str | Path) -> Kit:
    root = Path(root)
    path = root / PAIRS
    if not path.is_file():
        raise UserError(f"{root}: no {PAIRS} (export a kit first: grpo-bench study export RUN_DIR --out {root})")
    try:
        data = json.loads(path.read_text())
        pairs = [Pair(str(p["id"]), str(p["prompt"]), (str(p["clips"][0]), str(p["clips"][1]))) for p in data["pairs"]]
        kit = Kit(root, pairs, str(data["salt"]), int(data.get("fps", 8)), dict(data.get("design", {})))
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        raise UserError(f"{path}: not a study kit's pairs file ({type(exc).__name__}: {exc})") from None
    bad = [i for p in pairs for i in (p.id, *p.clips) if not TOKEN.match(i)]
    if bad:
        raise UserError(f"{path}: ids must be lowercase hex tokens; got {bad[0]!r}")
    blocks = kit.design.get("blocks")
    if blocks is not None:
        ids = kit.by_id
        def valid(block: Any) -> bool:
            return isinstance(block, list) and bool(block) and all(isinstance(i, str) and i in ids for i in block)

        if not isinstance(blocks, list) or not blocks or not all(valid(b) for b in blocks):
            raise UserError(f"{path}: design.blocks must be non-empty lists of the file's pair ids")
    return kit


def load_key(root: str | Path) -> dict[str, Any]:
    path = Path(root) / KEY
    if not path.is_file():
        raise UserError(f"{root}: no {KEY} (the analysis needs the kit's key)")
    key = json.loads(path.read_text())
    if not isinstance(key.get("clips"), dict) or not isinstance(key.get("pairs"), dict):
        raise UserError(f"{path}: needs 'clips' and 'pairs' mappings")
    return key
