"""How far the world judge can be trusted: the numbers ``pretrain judge`` stores in its card.

* ``spearman_train`` / ``spearman_heldout``: Spearman correlation between the judge and the oracle, per
  dimension, on fresh 10-step ODE samples of the base model (the evaluation sampler) of the training
  prompts and of the held-out (eval) prompts. Clean ODE samples are where the judge is hardest to read:
  they crowd into a narrow band of each score, and GRPO only sees differences inside such a band.
* ``speckle_pairs`` / ``shuffle_pairs``: the share of (clean, damaged) pairs of the same video in which
  the judge's overall score (the sum of its z-scores, what RL maximises) is strictly lower for the
  damaged one: speckle (``world/corrupt.py``) and a random permutation of the frames.

``judge_metrics`` is the pure part (scores in, numbers out); ``check_judge`` samples the videos and calls it.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from grpo_bench.world.corrupt import shuffle_frames, speckle

DIMENSIONS = ("vq", "mq", "ta")
TARGET_SPEARMAN = 0.70
TARGET_PAIRS = 0.80
SPECKLE_STRENGTH = 0.5  # 5% of pixels replaced per frame
CHECK_SEED = 777_000  # sampling seed of the check: no training draw uses it

Scorer = Callable[[Tensor, list[str]], dict[str, Tensor]]


def spearman(a: Tensor, b: Tensor) -> float:
    """Spearman rank correlation of two Tensor[N] (average ranks for ties; 0 when either is constant)."""
    from scipy.stats import spearmanr

    if len(a) < 3 or float(a.double().std()) == 0 or float(b.double().std()) == 0:
        return 0.0
    r = spearmanr(a.double().numpy(), b.double().numpy()).statistic
    return float(r) if math.isfinite(r) else 0.0


def overall(scores: dict[str, Tensor]) -> Tensor:
    """The judge's overall score: the sum of its dimensions (the reward RL maximises)."""
    return sum(scores[k].double() for k in DIMENSIONS)


def pair_accuracy(clean: Tensor, damaged: Tensor) -> float:
    """Share of pairs in which the damaged video scores strictly lower than its clean original."""
    return float((damaged < clean).double().mean())


def judge_metrics(judge: dict[str, dict[str, Tensor]], truth: dict[str, dict[str, Tensor]]) -> dict:
    """The card's numbers from scores. ``judge`` holds the judge's {"vq","mq","ta"} Tensor[N] for the keys
    "train" and "heldout" (clean base samples) and "train_speckle", "train_shuffle" (the same "train"
    videos, damaged); ``truth`` holds the oracle's scores for "train" and "heldout"."""
    out = {f"spearman_{split}": {k: round(spearman(judge[split][k], truth[split][k]), 4) for k in DIMENSIONS}
           for split in ("train", "heldout")}
    clean = overall(judge["train"])
    out["speckle_pairs"] = round(pair_accuracy(clean, overall(judge["train_speckle"])), 4)
    out["shuffle_pairs"] = round(pair_accuracy(clean, overall(judge["train_shuffle"])), 4)
    out["passes"] = bool(
        min(min(out["spearman_train"].values()), min(out["spearman_heldout"].values())) >= TARGET_SPEARMAN
        and min(out["speckle_pairs"], out["shuffle_pairs"]) >= TARGET_PAIRS
    )
    return out


def ode_samples(prompts: list[str], seed: int, size: int = 16, steps: int = 10, checkpoint: str = "",
                chunk: int = 64) -> Tensor:
    """Base-model videos Tensor[N, 3, 8, size, size], one per prompt, deterministic ODE with ``steps`` steps."""
    from grpo_bench.core.sampling import sample
    from grpo_bench.core.schedule import sigmas
    from grpo_bench.core.sde import make_kernel
    from grpo_bench.models import load

    model = load("world", size=size, **({"path": checkpoint} if checkpoint else {}))
    out = []
    for k, lo in enumerate(range(0, len(prompts), chunk)):
        batch = prompts[lo:lo + chunk]
        g = torch.Generator().manual_seed(seed * 1_000_003 + k)
        noise = torch.randn(len(batch), *model.latent_shape, generator=g)
        x = sample(model, batch, noise, sigmas(steps, 3.0), make_kernel("ode"))
        out.append(model.decode(x).clamp(-1, 1).float())
    return torch.cat(out)


@torch.no_grad()
def check_judge(score: Scorer, per_train_prompt: int = 8, per_heldout_prompt: int = 32, size: int = 16,
                seed: int = CHECK_SEED, checkpoint: str = "") -> dict:
    """Sample fresh 10-step ODE base videos (``per_*_prompt`` per prompt), score them with ``score`` (a
    judge's z-scores, e.g. ``WorldJudge.score``) and the oracle, and return ``judge_metrics`` plus sizes."""
    from grpo_bench.world.oracle import oracle
    from grpo_bench.world.vocab import prompts as world_prompts

    texts = {"train": [p for p in world_prompts("train") for _ in range(per_train_prompt)],
             "heldout": [p for p in world_prompts("eval") for _ in range(per_heldout_prompt)]}
    videos = {split: ode_samples(t, seed + i, size, checkpoint=checkpoint)
              for i, (split, t) in enumerate(texts.items())}
    videos["train_speckle"] = speckle(videos["train"], SPECKLE_STRENGTH, seed)
    videos["train_shuffle"] = shuffle_frames(videos["train"], 1.0, seed)
    texts["train_speckle"] = texts["train_shuffle"] = texts["train"]

    def scores(split: str) -> dict[str, Tensor]:
        return {k: v.detach().float() for k, v in score(videos[split], texts[split]).items()}

    judge = {split: scores(split) for split in videos}
    truth = {split: oracle(videos[split], texts[split]) for split in ("train", "heldout")}
    out = judge_metrics(judge, truth)
    out["videos"] = {"train": len(texts["train"]), "heldout": len(texts["heldout"])}
    out["sampler"] = "ode, 10 steps, shift 3"
    out["speckle_strength"] = SPECKLE_STRENGTH
    out["seed"] = seed
    return out
