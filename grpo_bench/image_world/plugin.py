"""What the image world registers, imported by the core's plug-in loader (pyproject's ``grpo_bench.plugins``
entry point ``image_world``): the compositional task's model, oracle reward and prompt set, and the text task's
model, OCR reward, exact reader and prompt set."""

from grpo_bench.image_world import judge, model, reward, text_model, text_reward

__all__ = ["judge", "model", "reward", "text_model", "text_reward"]
