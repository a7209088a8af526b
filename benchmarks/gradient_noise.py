"""How much of one update's policy gradient is signal, per world: K independent batches drawn at the base policy,
each one's policy-gradient vector (the method's own loss at ratio 1, every trained step, no optimizer step), then
the unbiased split of its expected squared norm into signal and noise.

    python benchmarks/gradient_noise.py [--world image|image_text|video] [--method flow_grpo] [--batches 8]
                                        [--prompts 8] [--group 8] [--seed 0] [--reward NAME] [--model NAME]

With g_k the gradient of batch k and mu = E g:
  signal = |mu|^2, estimated without bias by the mean of g_k . g_l over pairs k != l;
  noise  = E|g - mu|^2 (the trace of one batch's gradient covariance) = mean |g_k|^2 - signal.
Printed: both, their ratio (SNR of one batch's gradient), ``batches`` = noise / signal (how many such batches an
optimizer step would have to average for its noise to fall to its signal: the batch-size lever) and the mean
pairwise cosine of the g_k. A world whose SNR is far below another's at the same batch needs that many times
the samples per optimizer step to move as reliably. Development seeds only: it reads the training reward.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from world_cell_cost import SUITES, fair_cell  # noqa: E402

from grpo_bench.config.run import from_dict, resolve  # noqa: E402
from grpo_bench.core.loss import step_terms  # noqa: E402
from grpo_bench.train.collect import collect  # noqa: E402
from grpo_bench.train.optimize import trained_rows  # noqa: E402
from grpo_bench.train.trainer import Trainer  # noqa: E402


def _signal(gram: torch.Tensor) -> float:
    """Mean off-diagonal entry of a Gram matrix of batch gradients: the mean of g_k . g_l over pairs k != l."""
    k = gram.shape[0]
    return float((gram.sum() - gram.diagonal().sum()) / (k * (k - 1)))


def signal_noise(grads: torch.Tensor) -> dict[str, float]:
    """Unbiased signal |E g|^2 (with its jackknife standard error over batches) and noise E|g - E g|^2 of
    gradients Tensor[K >= 2, P], their ratio, the batches an average needs for noise = signal, and the mean
    pairwise cosine."""
    k = grads.shape[0]
    g = grads.double()
    gram = g @ g.T
    signal = _signal(gram)
    noise = float(gram.diagonal().mean()) - signal
    se = float("nan")
    if k >= 3:  # leave one batch out at a time: batch i's row and column leave the off-diagonal sum
        off = gram.sum() - gram.diagonal().sum()
        loo = (off - 2 * (gram.sum(1) - gram.diagonal())) / ((k - 1) * (k - 2))
        se = float(((k - 1) / k * ((loo - loo.mean()) ** 2).sum()).sqrt())  # conservative for this U-statistic
    unit = g / g.norm(dim=1, keepdim=True).clamp_min(1e-300)
    cos = unit @ unit.T
    mean_cos = float((cos.sum() - cos.diagonal().sum()) / (k * (k - 1)))
    return {"signal": signal, "signal_se": se, "noise": noise,
            "snr": signal / noise if noise > 0 else float("inf"),
            "batches": noise / signal if signal > 0 else float("inf"), "cosine": mean_cos}


def batch_gradient(tr: Trainer, u: int) -> torch.Tensor:
    """The flattened policy gradient of update u's batch (its prompts and noise) at the current parameters."""
    batch = collect(tr.policy, tr.reward, tr.method, tr.train_prompts, tr.cfg.seed, u, tr.groups, tr.shard,
                    tr.state.compute)
    rows = trained_rows(batch.advantages, tr.passes.group_size, tr.passes.bestofn)
    steps = batch.train_steps.to(tr.device)
    pair_rows, pair_steps = rows.repeat_interleave(steps.shape[1]), steps[rows].flatten()
    for p in tr.params:
        p.grad = None
    with tr.autocast():
        loss = step_terms(tr.ctx, batch.rollout, batch.advantages, pair_rows, pair_steps).policy.sum() / len(pair_rows)
    loss.backward()
    grad = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).flatten() for p in tr.params])
    return grad.detach().clone()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world", choices=sorted(SUITES), default="image")
    ap.add_argument("--method", default="flow_grpo")
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--prompts", type=int, default=8, help="prompts per update (the batch: prompts x group)")
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0, help="a development seed (never a table's)")
    ap.add_argument("--reward", default=None, help="train on this reward instead of the world's fair cell's "
                                                    "(a candidate training reward, e.g. image_world_ocr_prob)")
    ap.add_argument("--model", default=None, help="sample this model instead of the fair cell's (e.g. "
                                                   "image_world_text_ink, the text task's ink decoder)")
    a = ap.parse_args()
    if a.batches < 2:
        ap.error("--batches: at least 2 (the signal is a mean over pairs of batches)")
    suite, reward = SUITES[a.world]
    config = fair_cell(suite, reward, a.method)
    if config is None:
        ap.error(f"--method: {a.method!r} has no fair {a.world} row in {suite}")
    torch.manual_seed(a.seed)
    config = {**config, **{key: value for key, value in (("reward", a.reward), ("model", a.model)) if value}}
    cfg = resolve(from_dict({**config, "seed": a.seed, "prompts_per_update": a.prompts, "group_size": a.group,
                             "threads": 1}))
    with tempfile.TemporaryDirectory() as out:
        tr = Trainer(cfg, Path(out), None, None)
        grads = [batch_gradient(tr, u) for u in range(a.batches)]
    got = signal_noise(torch.stack(grads))
    print(f"{a.world} {cfg.model} {cfg.reward} {a.method} {a.prompts}x{a.group} seed {a.seed}, {a.batches} batches, "
          f"{grads[0].numel():,} parameters: signal {got['signal']:.3g} ± {got['signal_se']:.2g} (jackknife se), "
          f"noise {got['noise']:.3g}, "
          f"SNR {got['snr']:.3g}, batches for SNR 1: {got['batches']:.3g}, mean cosine {got['cosine']:+.3f}")


if __name__ == "__main__":
    main()
