"""The world judge's training data (``pretrain/judge.py``): base-model samples drawn with the harness's
own kernels, rendered videos (clean, damaged or re-noised), and the augmentations of both (a mirrored
or reversed video, a prompt that differs in one word)."""

from __future__ import annotations

import random

import torch
from torch import Tensor

from grpo_bench.world.corrupt import CORRUPTIONS, shuffle_frames
from grpo_bench.world.generator import render
from grpo_bench.world.vocab import COLORS, MOTIONS, SHAPES, parse, prompt_text
from grpo_bench.world.vocab import prompts as all_prompts

# (kernel, noise level, steps) of the base-model samples: the evaluation sampler and RL's rollout kernels.
BASE_SAMPLERS = (("ode", 0.0, 20), ("ode", 0.0, 10), ("sage", 0.5, 10), ("flow", 0.7, 10), ("dance", 0.3, 10),
                 ("cps", 0.7, 10), ("sage", 1.0, 10))
# Relative std of Gaussian noise added to every base-model weight tensor: stand-ins for the models RL makes.
# Measured on 32 10-step ODE samples: oracle MQ 0.34 (0), 0.32 (0.05), 0.28 (0.1), 0.18 (0.2).
PERTURB_SCALES = (0.0, 0.05, 0.1, 0.2)

def perturbed(model, scale: float, seed: int):
    """A copy of the base model with Gaussian noise of std ``scale`` x (each weight tensor's std) added to
    every weight tensor: a cheap stand-in for the models RL moves to (0: the model itself)."""
    import copy

    if scale == 0:
        return model
    out = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in out.net.parameters():
            if p.numel() > 1:
                p.add_(scale * p.std() * torch.randn(p.shape, generator=g))
    return out


def sample_base(n: int, size: int, seed: int, checkpoint: str = "", chunk: int = 64,
                samplers: tuple = BASE_SAMPLERS, perturb: tuple[float, ...] = (0.0,)) -> tuple[Tensor, list[str]]:
    """n base-model videos Tensor[n, 3, 8, size, size] over all prompts; chunk k uses ``samplers[k % len]`` and
    the model perturbed by ``perturb[(k // len(samplers)) % len(perturb)]`` (see ``perturbed``)."""
    from grpo_bench.core.sampling import sample
    from grpo_bench.core.schedule import sigmas
    from grpo_bench.core.sde import make_kernel
    from grpo_bench.models import load

    kw = {"size": size}
    if checkpoint:
        kw["path"] = checkpoint
    base = load("world", **kw)
    models = {scale: perturbed(base, scale, seed * 7 + i) for i, scale in enumerate(perturb)}
    rng = random.Random(seed)
    texts = all_prompts("all")
    videos, prompts = [], []
    for k, start in enumerate(range(0, n, chunk)):
        m = min(chunk, n - start)
        kernel_name, level, steps = samplers[k % len(samplers)]
        model = models[perturb[(k // len(samplers)) % len(perturb)]]
        batch_prompts = [rng.choice(texts) for _ in range(m)]
        g = torch.Generator().manual_seed(seed * 100_003 + k)
        noise = torch.randn(m, *model.latent_shape, generator=g)
        x = sample(model, batch_prompts, noise, sigmas(steps, 3.0), make_kernel(kernel_name, level), generator=g)
        videos.append(model.decode(x).clamp(-1, 1).float())
        prompts += batch_prompts
    return torch.cat(videos), prompts


def mismatched(prompts: list[str], share: float, rng: random.Random) -> list[str]:
    """Replace one word (colour, shape or motion) of a share of the prompts by another vocabulary word."""
    out = []
    for p in prompts:
        if rng.random() >= share:
            out.append(p)
            continue
        parts = list(parse(p))
        which = rng.randrange(3)
        vocab = (COLORS, SHAPES, MOTIONS)[which]
        parts[which] = rng.choice([i for i in range(len(vocab)) if i != parts[which]])
        out.append(prompt_text(COLORS[parts[0]], SHAPES[parts[1]], MOTIONS[parts[2]]))
    return out


_OPPOSITE = {"left": "right", "right": "left", "up": "down", "down": "up"}


def mirror(videos: Tensor, prompts: list[str], rng: random.Random) -> tuple[Tensor, list[str]]:
    """Label-preserving augmentation of sampled videos: a left-right flip and/or time reversal, with the
    prompt's motion changed to match (the world is symmetric under both; targets are re-scored anyway)."""
    videos, prompts = videos.clone(), list(prompts)
    for i, p in enumerate(prompts):
        motion = p.split()[-1]
        flip, reverse = rng.random() < 0.5, rng.random() < 0.5
        if flip:
            videos[i] = videos[i].flip(-1)
            motion = {"left": "right", "right": "left"}.get(motion, motion)
        if reverse:
            videos[i] = videos[i].flip(1)
            motion = _OPPOSITE[motion]
        prompts[i] = p.rsplit(" ", 1)[0] + " " + motion
    return videos, prompts


def damage(v: Tensor, rng: random.Random) -> Tensor:
    """One or two corruptions of random kind and strength (``world/corrupt.py``), or a frame shuffle."""
    names = CORRUPTIONS.names()
    for _ in range(1 if rng.random() < 0.75 else 2):
        if rng.random() < 0.2:
            v = shuffle_frames(v, rng.random(), rng.randrange(2**31))
        else:
            v = CORRUPTIONS.get(rng.choice(names))(v, rng.random() ** 1.5, rng.randrange(2**31))
    return v


def synthetic_batch(n: int, size: int, rng: random.Random) -> tuple[Tensor, list[str]]:
    """n rendered videos: clean, damaged (``damage``) or partially re-noised, in groups of 8."""
    texts = all_prompts("all")
    prompts = [rng.choice(texts) for _ in range(n)]
    videos = render(prompts, rng.randrange(2**31), size=size)
    out = []
    for lo in range(0, n, 8):  # corruptions act on groups of 8 (one kind and strength per group)
        v = videos[lo:lo + 8]
        kind = rng.random()
        if kind < 0.15:
            pass  # clean
        elif kind < 0.75:
            v = damage(v, rng)
        else:
            s = rng.random() * 0.6
            g = torch.Generator().manual_seed(rng.randrange(2**31))
            v = ((1 - s) * v + s * torch.randn(v.shape, generator=g)).clamp(-1, 1)
        out.append(v)
    return torch.cat(out), prompts


