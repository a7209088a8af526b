"""How much of one update's policy gradient is signal, per world: K independent batches drawn at the base policy,
each one's policy-gradient vector (the method's own loss at ratio 1, every trained step, no optimizer step), then
the unbiased split of its expected squared norm into signal and noise.

    python benchmarks/gradient_noise.py [--world image|image_text|video] [--method flow_grpo] [--batches 8]
                                        [--prompts 8] [--group 8] [--seed 0] [--reward NAME] [--model NAME]
                                        [--save DIR [--block 16]]
    python benchmarks/gradient_noise.py --read DIR

A long measurement is kept as it goes (``--save``): each block of ``--block`` batches lands in DIR as the sum of its
gradients, the sum of their squared norms and its count (the estimate below needs no more), written atomically; a
killed run re-run with the same arguments skips the blocks it has, and runs with other ``--seed`` s add independent
blocks of the same distribution (the policy is the base one: no optimizer step). ``--read`` pools every block in
DIR (one configuration; anything else there is refused) with a delete-one-block jackknife.

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
import os
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


def signal_noise(grads: torch.Tensor) -> dict[str, float]:
    """Unbiased signal |E g|^2 (with its jackknife standard error over batches) and noise E|g - E g|^2 of
    gradients Tensor[K >= 2, P], their ratio, the batches an average needs for noise = signal, and the mean
    pairwise cosine: ``block_signal_noise`` with a block a batch."""
    g = grads.double()
    got = block_signal_noise([(row, float(row @ row), 1) for row in g])
    k = g.shape[0]
    unit = g / g.norm(dim=1, keepdim=True).clamp_min(1e-300)
    cos = unit @ unit.T
    mean_cos = float((cos.sum() - cos.diagonal().sum()) / (k * (k - 1)))
    return {key: got[key] for key in ("signal", "signal_se", "noise", "snr", "batches")} | {"cosine": mean_cos}


def block_signal_noise(blocks: list[tuple[torch.Tensor, float, int]]) -> dict[str, float]:
    """``signal_noise``'s signal and noise over every batch of ``blocks``, each kept as (sum of its gradients, sum
    of their squared norms, its count): |sum g|^2 - sum |g|^2 is the sum over pairs k != l of g_k . g_l. The
    standard error is a delete-one-block jackknife (conservative for this U-statistic)."""
    total = sum(b[0].double() for b in blocks)  # summed in place of a stack: no second copy of every gradient
    sq, k = sum(float(b[1]) for b in blocks), sum(int(b[2]) for b in blocks)

    def signal(s: torch.Tensor, q: float, n: int) -> float:
        return float((s @ s - q) / (n * (n - 1)))

    est = signal(total, sq, k)
    noise = sq / k - est
    m, se = len(blocks), float("nan")
    if m >= 3:
        loo = torch.tensor([signal(total - b[0].double(), sq - float(b[1]), k - int(b[2])) for b in blocks])
        se = float(((m - 1) / m * ((loo - loo.mean()) ** 2).sum()).sqrt())
    return {"signal": est, "signal_se": se, "noise": noise, "batches_drawn": k, "blocks": m,
            "snr": est / noise if noise > 0 else float("inf"),
            "batches": noise / est if est > 0 else float("inf")}


def save_block(folder: Path, key: dict, seed: int, first: int, grads: list[torch.Tensor]) -> None:
    """Block ``first``.. of ``seed`` as its sums, written whole or not at all."""
    g = torch.stack(grads).double()
    path = folder / f"seed{seed}_u{first:05d}.pt"
    tmp = path.with_suffix(".tmp")
    torch.save({"key": key, "sum": g.sum(0), "sq": float((g * g).sum()), "count": len(grads)}, tmp)
    os.replace(tmp, path)


def read_blocks(folder: Path) -> tuple[dict, list[tuple[torch.Tensor, float, int]]]:
    """Every block in ``folder`` (data from disk: tensors only, one configuration, sane counts), or one line."""
    paths = sorted(folder.glob("seed*_u*.pt"))
    if not paths:
        sys.exit(f"{folder}: no blocks (seed<S>_u<U>.pt); write them with --save")
    key, blocks = None, []
    for path in paths:
        try:
            got = torch.load(path, map_location="cpu", weights_only=True)
            b = (got["sum"], float(got["sq"]), int(got["count"]))
            this = dict(got["key"])
        except Exception as exc:  # noqa: BLE001 - any unreadable block is one line, not a traceback
            sys.exit(f"{path}: not a gradient block ({type(exc).__name__}); delete it and re-run its --save")
        if not (isinstance(b[0], torch.Tensor) and b[0].ndim == 1 and b[2] >= 1 and b[1] >= 0):
            sys.exit(f"{path}: key sum/sq/count: a 1-D tensor, a norm >= 0 and a count >= 1")
        if key is None:
            key = this
        if this != key or (blocks and b[0].shape != blocks[0][0].shape):
            sys.exit(f"{path}: key {this} differs from {paths[0].name}'s {key}; one folder holds one configuration")
        blocks.append(b)
    return key, blocks


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
    ap.add_argument("--save", type=Path, default=None, help="keep each block of batches in this folder (resumable)")
    ap.add_argument("--block", type=int, default=16, help="batches a saved block sums")
    ap.add_argument("--read", type=Path, default=None, help="pool the blocks saved in this folder and print")
    a = ap.parse_args()
    if a.read is not None:
        key, blocks = read_blocks(a.read)
        got = block_signal_noise(blocks)
        print(f"{key}: {got['batches_drawn']} batches in {got['blocks']} blocks: signal {got['signal']:.3g} ± "
              f"{got['signal_se']:.2g} (block jackknife se), noise {got['noise']:.3g}, SNR {got['snr']:.3g}, "
              f"batches for SNR 1: {got['batches']:.3g}")
        return
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
        if a.save is not None:
            a.save.mkdir(parents=True, exist_ok=True)
            key = {"model": cfg.model, "reward": cfg.reward, "method": a.method, "batch": f"{a.prompts}x{a.group}"}
            for first in range(0, a.batches, a.block):
                if not (a.save / f"seed{a.seed}_u{first:05d}.pt").is_file():
                    last = min(first + a.block, a.batches)
                    save_block(a.save, key, a.seed, first, [batch_gradient(tr, u) for u in range(first, last)])
                    print(f"block seed {a.seed} batches {first}-{last - 1} saved", flush=True)
            return
        grads = [batch_gradient(tr, u) for u in range(a.batches)]
    got = signal_noise(torch.stack(grads))
    print(f"{a.world} {cfg.model} {cfg.reward} {a.method} {a.prompts}x{a.group} seed {a.seed}, {a.batches} batches, "
          f"{grads[0].numel():,} parameters: signal {got['signal']:.3g} ± {got['signal_se']:.2g} (jackknife se), "
          f"noise {got['noise']:.3g}, "
          f"SNR {got['snr']:.3g}, batches for SNR 1: {got['batches']:.3g}, mean cosine {got['cosine']:+.3f}")


if __name__ == "__main__":
    main()
