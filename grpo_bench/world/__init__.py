"""The embedded world: procedurally generated tiny videos with a known ground truth."""

from grpo_bench.world.corrupt import CORRUPTIONS, corrupt
from grpo_bench.world.generator import VideoParams, render, render_params, sample_params
from grpo_bench.world.oracle import oracle
from grpo_bench.world.vocab import COLORS, EVAL_COMBOS, MOTIONS, SHAPES, parse, prompt_text, prompts

__all__ = [
    "COLORS", "EVAL_COMBOS", "MOTIONS", "SHAPES", "VideoParams", "parse", "prompt_text", "prompts",
    "render", "render_params", "sample_params", "oracle", "CORRUPTIONS", "corrupt",
]
