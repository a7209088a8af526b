"""Where a group's reward spread comes from in the image world: the initial noise or the SDE path. Each training
prompt gets N initial noises x M SDE paths from one kernel; a one-way analysis of variance per prompt splits the
checker's score into the part the initial noise fixes and the part the stochastic steps (which RL trains) add.

    python benchmarks/reward_spread_sources.py [--task text|compositional] [--ink-gain G] [--kernel flow]
                                               [--level 0.7] [--noises 8] [--paths 8] [--prompts 8] [--seed 0]

Printed per score: the noise's share of the variance (the intraclass correlation, (MSB - MSW) / (MSB + (M-1) MSW),
clipped at 0; averaged over prompts with a spread), and the share of groups of 8 (one path of each of 8 noises, as a
rollout group draws them) whose scores are not all equal: a group whose scores are all equal carries no advantage.
A noise share near 1 means the trained steps decide little of who wins a group; near 0, the SDE steps decide it.
"""

from __future__ import annotations

import argparse

import torch
from rollout_readability import task

from grpo_bench import models
from grpo_bench.core.sampling import sample
from grpo_bench.core.schedule import sigmas
from grpo_bench.core.sde import make_kernel


def noise_share(scores: torch.Tensor) -> float:
    """Intraclass correlation of scores Tensor[N noises, M paths]: the share of the variance between noises
    (one-way ANOVA estimator, clipped at 0); nan where every score is equal."""
    n, m = scores.shape
    means = scores.mean(1)
    msb = m * ((means - scores.mean()) ** 2).sum() / (n - 1)
    msw = ((scores - means[:, None]) ** 2).sum() / (n * (m - 1))
    if float(msb + (m - 1) * msw) == 0.0:
        return float("nan")
    return max(0.0, float((msb - msw) / (msb + (m - 1) * msw)))


def mixed_groups(scores: torch.Tensor) -> float:
    """Share of the M groups (column j: path j of each of the N noises) whose scores are not all equal."""
    return float((scores.max(0).values > scores.min(0).values).float().mean())


def spread_sources(task_name: str, kernel: str, level: float, noises: int, paths: int, n_prompts: int, seed: int,
                   ink_gain: float = 0.0, steps: int = 10, shift: float = 3.0) -> dict[str, list[tuple[float, float]]]:
    """{score: [(noise share, mixed-group share) per prompt]} for the first ``n_prompts`` training prompts taken
    at an even stride."""
    model_name, train, check = task(task_name)
    model = models.load(model_name, frames=1)
    if ink_gain > 0:
        from grpo_bench.image_world.text_model import ink

        model.decode = lambda x: ink(x, ink_gain).expand(-1, 3, -1, -1, -1)
    chosen = train[:: max(1, len(train) // n_prompts)][:n_prompts]
    out: dict[str, list[tuple[float, float]]] = {}
    g = torch.Generator().manual_seed(seed)
    for prompt in chosen:
        start = torch.randn(noises, *model.latent_shape, generator=g).repeat_interleave(paths, 0)
        with torch.no_grad():
            images = model.decode(sample(model, [prompt] * len(start), start, sigmas(steps, shift),
                                         make_kernel(kernel, level), guidance=1.0, generator=g))
        scores = check(images, [prompt] * len(start))
        for name in ("ta", "correct"):
            grid = scores[name].float().reshape(noises, paths)
            out.setdefault(name, []).append((noise_share(grid), mixed_groups(grid)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=["text", "compositional"], default="text")
    parser.add_argument("--ink-gain", type=float, default=0.0, help="text task: decode through the ink decoder")
    parser.add_argument("--kernel", default="flow")
    parser.add_argument("--level", type=float, default=0.7)
    parser.add_argument("--noises", type=int, default=8)
    parser.add_argument("--paths", type=int, default=8)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.ink_gain and args.task != "text":
        parser.error("--ink-gain: only the text task has the ink decoder")
    if args.noises < 2 or args.paths < 2:
        parser.error("--noises and --paths: at least 2 each (the analysis compares within and between)")
    torch.set_num_threads(1)
    result = spread_sources(args.task, args.kernel, args.level, args.noises, args.paths, args.prompts, args.seed,
                            args.ink_gain)
    print(f"{args.task} {args.kernel} {args.level}: {args.noises} noises x {args.paths} paths, "
          f"{args.prompts} prompts")
    for name, rows in result.items():
        shares = torch.tensor([s for s, _ in rows if s == s])
        mixed = torch.tensor([m for _, m in rows])
        spread = f"{shares.mean():.2f} (range {shares.min():.2f}-{shares.max():.2f})" if len(shares) else "n/a"
        print(f"  {name:>8}: noise share {spread}; groups with unequal scores {mixed.mean():.2f}")


if __name__ == "__main__":
    main()
