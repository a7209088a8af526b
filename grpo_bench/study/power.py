"""The smallest win-rate shift a study design detects (docs/human_study.md, "How many raters and pairs").

A win rate p is tested against 0.5 (two-sided 5%, 80% power): n = ((1.96·0.5 + 0.84·√(p(1−p))) / δ)²
independent votes detect p = 0.5 + δ. Votes of one rater or on one prompt are correlated, so R raters
answering P pairs each count as R·P / DE votes, DE = 1 + (P − 1)·ρ_r + (R − 1)·ρ_p.
"""

from __future__ import annotations

import math

Z_ALPHA, Z_POWER = 1.959963984540054, 0.8416212335729143


def effective_votes(raters: int, pairs: int, rho_rater: float = 0.0, rho_prompt: float = 0.0) -> float:
    return raters * pairs / (1 + (pairs - 1) * rho_rater + (raters - 1) * rho_prompt)


def detectable_shift(votes: float) -> float:
    """δ with n(0.5 + δ) = votes, by fixed-point iteration (it converges in a few steps: √(p(1−p)) is flat near 0.5)."""
    if votes <= 0:
        return math.inf
    delta = 0.1
    for _ in range(50):
        p = min(0.5 + delta, 1.0)
        delta = (Z_ALPHA * 0.5 + Z_POWER * math.sqrt(p * (1 - p))) / math.sqrt(votes)
    return delta


def statement(raters: int, pairs_per_baseline: int) -> str:
    """One line for pairs.json and the export summary: votes per baseline and dimension, and what they detect."""
    votes = raters * pairs_per_baseline
    if votes == 0:
        return "no main pairs per baseline: nothing to detect"
    iid = detectable_shift(votes)
    clustered = detectable_shift(effective_votes(raters, pairs_per_baseline, 0.05, 0.05))
    return (f"{raters} raters × {pairs_per_baseline} pairs = {votes} votes per baseline and dimension: detects a "
            f"win rate of 0.5 + {iid:.3f} with independent votes, 0.5 + {clustered:.3f} if rater and prompt each "
            "hold 5% of the variance (5% two-sided, 80% power)")
