"""The study's balanced block design: which main pairs each rater sees.

A rater who saw the target's video of one (seed, prompt, sample) against every baseline would see
that video once per baseline and could learn that it is the one that keeps coming back. So the
baselines are rotated instead: raters are split into as many blocks as there are baselines, and
block g pairs the target's i-th video with baseline (i + g) mod B. Every rater sees each target video
once and each baseline equally often (the videos are spread over prompts before they are numbered,
so the rotation runs over prompts too); the B blocks together cover every (video, baseline) pair once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

Key = TypeVar("Key")


@dataclass(frozen=True)
class Size:
    videos: int
    """Target videos a rater sees (= main pairs a rater sees)."""
    per_baseline: int
    """Main pairs of each baseline a rater sees (the smallest, when videos is not a multiple of B)."""
    shortfall: str | None
    """Why fewer than asked, in words; None when the ask is met."""


def size(available: int, asked_per_baseline: int, baselines: int) -> Size:
    """How many target videos a rater sees: asked_per_baseline for each of the baselines, each video once,
    rounded down to a multiple of the baselines so every baseline gets the same share."""
    wanted = asked_per_baseline * baselines
    videos = min(available, wanted)
    if videos >= baselines:
        videos -= videos % baselines
    per_baseline = videos // baselines
    if videos == wanted:
        return Size(videos, per_baseline, None)
    why = (f"the rows share {available} eval videos (seed, prompt, sample) and a rater sees each target video "
           f"once, so {baselines} baseline(s) × {asked_per_baseline} would need {wanted}")
    if per_baseline == 0:
        why += "; with fewer videos than baselines some baselines get no pair from a rater"
    return Size(videos, per_baseline, why)


def blocks(keys: list[Key], baselines: list[str]) -> list[list[tuple[Key, str]]]:
    """Block g: (keys[i], baselines[(i + g) % B]) for every i (a Latin-square rotation)."""
    n = len(baselines)
    return [[(k, baselines[(i + g) % n]) for i, k in enumerate(keys)] for g in range(n)]


def raters_per_block(raters: int, n_blocks: int) -> list[int]:
    """Raters are assigned to the block with the fewest raters as they arrive: sizes differ by at most one."""
    return [raters // n_blocks + (1 if g < raters % n_blocks else 0) for g in range(n_blocks)]
