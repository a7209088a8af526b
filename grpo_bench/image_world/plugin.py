"""What the image world registers, imported by the core's plug-in loader (pyproject's ``grpo_bench.plugins``
entry point ``image_world``): the model, the oracle reward and the prompt set."""

from grpo_bench.image_world import model, reward

__all__ = ["model", "reward"]
