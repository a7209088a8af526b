"""How readable each kernel's rollouts are in the image world: the exact checker's scores of base-model samples
drawn with each method's SDE at its own noise level, beside the ODE's (training prompts only).

    python benchmarks/rollout_readability.py [--task text|compositional] [--per-prompt 2] [--seed 0] [--steps 10]
                                             [--ink-gain G]

RL scores rollouts, and the held-out evaluation scores ODE samples. Where a kernel's rollouts score far below the
ODE's, the training reward grades noise the evaluation never sees: on the text task, 10 steps at shift 3 leave the
last SDE step's noise on 1-2 pixel strokes that the exact reader's templates reject. ``--ink-gain G`` decodes the
text task's samples through the ink decoder at gain G (image_world/text_model.py ``ink``; ``image_world_text_ink``
ships G = 3) instead of the plain clamp.
"""

from __future__ import annotations

import argparse

import torch

from grpo_bench import models
from grpo_bench.core.sampling import sample
from grpo_bench.core.schedule import sigmas
from grpo_bench.core.sde import make_kernel

KERNELS = [("ode", 0.0), ("flow", 0.7), ("flow", 0.3), ("flow", 0.1), ("dance", 0.3), ("cps", 0.7), ("sage", 0.5)]
"""(kernel, noise level): each method's own level (flow 0.7 FlowGRPO, dance 0.3 DanceGRPO, cps 0.7 CPS, sage 0.5
SAGE-GRPO) and flow at two lower levels."""


def task(name: str):
    """(model name, training prompts, checker) of one image-world task."""
    if name == "text":
        from grpo_bench.image_world.text_checker import check
        from grpo_bench.image_world.words import prompts
        return "image_world_text", prompts("train"), check
    from grpo_bench.image_world.checker import check
    from grpo_bench.image_world.reward import image_world_prompts
    return "image_world", image_world_prompts()[0][::3], check


def readability(task_name: str, per_prompt: int, seed: int, steps: int = 10, shift: float = 3.0,
                ink_gain: float = 0.0) -> dict[tuple[str, float], dict[str, float]]:
    """{(kernel, level): mean of the checker's ta / correct / mq / vq} over the same starting noise per kernel
    (``ink_gain`` > 0: the text task decoded through the ink decoder at that gain)."""
    model_name, train, check = task(task_name)
    model = models.load(model_name, frames=1)
    if ink_gain > 0:
        from grpo_bench.image_world.text_model import ink

        model.decode = lambda x: ink(x, ink_gain).expand(-1, 3, -1, -1, -1)
    texts = [p for p in train for _ in range(per_prompt)]
    out = {}
    for name, level in KERNELS:
        g = torch.Generator().manual_seed(seed)
        noise = torch.randn(len(texts), *model.latent_shape, generator=g)
        with torch.no_grad():
            images = model.decode(sample(model, texts, noise, sigmas(steps, shift), make_kernel(name, level),
                                         guidance=1.0, generator=g))
        scores = check(images, texts)
        out[(name, level)] = {k: float(scores[k].mean()) for k in ("ta", "correct", "mq", "vq")}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=["text", "compositional"], default="text")
    parser.add_argument("--per-prompt", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=10, help="sampling steps (the field's 10 by default)")
    parser.add_argument("--ink-gain", type=float, default=0.0, help="text task: decode through the ink decoder")
    args = parser.parse_args()
    if args.ink_gain and args.task != "text":
        parser.error("--ink-gain: only the text task has the ink decoder")
    torch.set_num_threads(1)
    print(f"{args.task}: kernel level      ta  correct      mq      vq")
    for (name, level), row in readability(args.task, args.per_prompt, args.seed, args.steps,
                                                ink_gain=args.ink_gain).items():
        print(f"{name:>{len(args.task) + 7}} {level:5.1f}  " + "  ".join(f"{row[k]:6.3f}" for k in
                                                                       ("ta", "correct", "mq", "vq")))


if __name__ == "__main__":
    main()
