"""The judge's agreement with the oracle over several fresh base draws, written to its card.

One draw (``judge_check.check_judge``, seed CHECK_SEED) is what the card's ``check`` reports; other
draws of the same size land a few hundredths away, which decides whether a Spearman near the 0.70
target is above it. This samples ``--draws`` more draws (seeds CHECK_SEED + 1000 k) and stores, per
split and dimension, the min / median / max over every draw (the card's own included) as
``spread_over_draws``. Nothing is retrained; the judge's weights (and so every cell id) are unchanged.

    python benchmarks/judge_spread.py --draws 5
"""

from __future__ import annotations

import argparse
import json
import statistics

from grpo_bench.pretrain.judge_check import CHECK_SEED, check_judge
from grpo_bench.rewards.world_judge import DEFAULT_WEIGHTS, load_judge


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=5)
    args = parser.parse_args()
    card_path = DEFAULT_WEIGHTS.with_suffix(".json")
    card = json.loads(card_path.read_text())
    judge = load_judge()
    draws = [card["check"]] + [check_judge(judge.score, seed=CHECK_SEED + 1000 * k) for k in range(1, args.draws + 1)]
    spread = {"draws": len(draws), "seeds": [d["seed"] for d in draws],
              "videos": draws[0]["videos"], "target": 0.70}
    for split in ("spearman_train", "spearman_heldout"):
        spread[split] = {dim: {"min": min(v), "median": statistics.median(v), "max": max(v)}
                         for dim in ("vq", "mq", "ta") for v in [[round(d[split][dim], 4) for d in draws]]}
    for pairs in ("speckle_pairs", "shuffle_pairs"):
        spread[pairs] = {"min": min(d[pairs] for d in draws), "max": max(d[pairs] for d in draws)}
    card["spread_over_draws"] = spread
    card_path.write_text(json.dumps(card, indent=1) + "\n")
    print(json.dumps(spread, indent=1))


if __name__ == "__main__":
    main()
