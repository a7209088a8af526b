"""Train the compositional task's judge (``python -m grpo_bench.image_world.judge_pretrain --minutes 4``), as the
video world's judge is trained (grpo_bench/pretrain/judge.py), on one thread.

Data, every image scored by the exact checker (its vq, mq, ta are the targets):

* rendered scenes of training prompts, half of them damaged: re-noised (x = (1-s) x0 + s z, what an unfinished
  sampler leaves), speckled (random pixels set to palette colours) or colour-swapped (the channels permuted);
* a pool of base-model samples drawn once before training, 10 steps, from the ODE and the SDE kernel (noise
  level 0.7), from the base model and from copies with Gaussian noise on their weights (stand-ins for where RL
  moves the model);
* any of the above with its prompt swapped for another training prompt (a quarter), so TA must read the prompt.

Loss: mean squared error on the three scores. Then the raw heads are z-normalised over a second, held-out pool
of base-model samples, and the card records the Spearman correlation of each head with the checker there.
"""

from __future__ import annotations

import copy
import hashlib
import json
import time
from pathlib import Path

import torch

from grpo_bench.image_world.checker import check
from grpo_bench.image_world.grammar import prompts
from grpo_bench.image_world.judge import DEFAULT_JUDGE, DIMENSIONS, REBUILD, ImageJudge, encode, save_judge
from grpo_bench.image_world.pretrain import command_line, write_card
from grpo_bench.image_world.render import render
from grpo_bench.world.generator import palette_rgb

BATCH, LR, POOL, PERTURB = 64, 2e-3, 768, (0.0, 0.02, 0.05)


def targets(images: torch.Tensor, texts: list[str]) -> torch.Tensor:
    scores = check(images[:, :, None], texts)
    return torch.stack([scores[k] for k in DIMENSIONS], dim=1).float()


def base_pool(n: int, seed: int, train_prompts: list[str]) -> tuple[torch.Tensor, list[str]]:
    """n base-model samples [n, 3, 32, 32] of random training prompts (ODE and SDE, base and perturbed)."""
    from grpo_bench.core.sampling import sample
    from grpo_bench.core.schedule import sigmas
    from grpo_bench.core.sde import make_kernel
    from grpo_bench.models import load

    g = torch.Generator().manual_seed(seed)
    base = load("image_world")
    images, texts = [], []
    per = n // (2 * len(PERTURB))
    for scale in PERTURB:
        model = copy.deepcopy(base)
        with torch.no_grad():
            for p in model.net.parameters():
                p.add_(scale * p.abs().mean() * torch.randn(p.shape, generator=g))
        for kernel in (make_kernel("ode"), make_kernel("flow", 0.7)):
            chunk = [train_prompts[int(i)] for i in torch.randint(len(train_prompts), (per,), generator=g)]
            noise = torch.randn(per, *model.latent_shape, generator=g)
            with torch.no_grad():
                x = sample(model, chunk, noise, sigmas(10, 3.0), kernel, generator=g)
            images.append(model.decode(x)[:, :, 0])
            texts += chunk
    return torch.cat(images), texts


def damage(x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """One damage per image: re-noise, speckle or colour swap (each a third)."""
    kind = torch.randint(3, (len(x),), generator=g)
    s = torch.rand(len(x), 1, 1, 1, generator=g) * 0.6
    noised = (1 - s) * x + s * torch.randn(x.shape, generator=g)
    mask = torch.rand(len(x), 1, *x.shape[2:], generator=g) < 0.05 * torch.rand(len(x), 1, 1, 1, generator=g) * 4
    colours = palette_rgb(torch.float32)[torch.randint(len(palette_rgb(torch.float32)), x.shape[2:], generator=g)]
    speckled = torch.where(mask, 2 * colours.permute(2, 0, 1)[None] - 1, x)
    swapped = x[:, torch.randperm(3, generator=g)]
    return torch.where((kind == 0)[:, None, None, None], noised, torch.where((kind == 1)[:, None, None, None],
                                                                            speckled, swapped))


def batch(g: torch.Generator, pool: tuple[torch.Tensor, torch.Tensor, list[str]], train_prompts: list[str]) -> tuple:
    n_render = BATCH // 2
    texts = [train_prompts[int(i)] for i in torch.randint(len(train_prompts), (n_render,), generator=g)]
    rendered = render(texts, seed=int(torch.randint(2**62, (1,), generator=g)))[:, :, 0]
    hurt = torch.rand(n_render, generator=g) < 0.5
    rendered = torch.where(hurt[:, None, None, None], damage(rendered, g), rendered)
    pool_images, _, pool_texts = pool
    pick = torch.randint(len(pool_images), (BATCH - n_render,), generator=g)
    images = torch.cat([rendered, pool_images[pick]])
    texts = texts + [pool_texts[int(i)] for i in pick]
    swap = torch.rand(BATCH, generator=g) < 0.25
    texts = [train_prompts[int(torch.randint(len(train_prompts), (1,), generator=g))] if s else t
             for s, t in zip(swap.tolist(), texts)]
    return images, encode(texts), targets(images, texts)


def spearman(a: torch.Tensor, b: torch.Tensor) -> float:
    ra, rb = a.argsort().argsort().float(), b.argsort().argsort().float()
    return float(torch.corrcoef(torch.stack([ra, rb]))[0, 1])


def train(out: Path, minutes: float | None, steps: int | None, seed: int = 0) -> dict:
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    train_prompts = prompts("train")
    t0 = time.perf_counter()
    images, texts = base_pool(POOL, seed, train_prompts)
    pool = (images, None, texts)
    held_images, held_texts = base_pool(POOL // 2, seed + 1, train_prompts)
    net = ImageJudge()
    opt = torch.optim.AdamW(net.parameters(), lr=LR)
    deadline = t0 + 60.0 * minutes if minutes is not None else float("inf")
    step, running = 0, None
    while (steps is None or step < steps) and time.perf_counter() < deadline:
        x, cond, y = batch(g, pool, train_prompts)
        loss = (net.raw(x, cond) - y).pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step += 1
        running = loss.item() if running is None else 0.98 * running + 0.02 * loss.item()
        if step % 100 == 0:
            print(f"step {step}  loss {running:.4f}", flush=True)
    net.eval()
    with torch.no_grad():
        raw = net.raw(held_images, encode(held_texts))
        net.mean.copy_(raw.mean(dim=0))
        net.std.copy_(raw.std(dim=0).clamp(min=1e-3))
    truth = targets(held_images, held_texts)
    save_judge(net, out, extra={"steps": step, "seed": seed})
    return {
        "model": "image world judge (CNN on 32x32 stills + prompt parts, regresses the checker's vq, mq, ta)",
        "weights": out.name, "command": f"{REBUILD} --steps {step} --seed {seed} --out {out.name}",
        "seed": seed, "steps": step, "batch": BATCH, "lr": LR, "pool": POOL, "perturb": list(PERTURB),
        "wall_time_s": round(time.perf_counter() - t0, 1), "final_loss_ema": round(running or 0.0, 5),
        "params": sum(p.numel() for p in net.parameters()),
        "spearman_heldout_base": {k: round(spearman(raw[:, i], truth[:, i]), 3) for i, k in enumerate(DIMENSIONS)},
        "heldout_samples": len(held_texts), "sha256": hashlib.sha256(out.read_bytes()).hexdigest(),
    }


def main(argv: list[str] | None = None) -> None:
    args = command_line(__doc__.splitlines()[0], DEFAULT_JUDGE, argv)
    card = train(args.out, args.minutes, args.steps, args.seed)
    write_card(args.out, card)
    print(json.dumps(card, indent=2))


if __name__ == "__main__":
    main()
