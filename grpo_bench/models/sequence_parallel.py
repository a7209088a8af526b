"""Sequence parallelism (Ulysses) of a diffusers video transformer through diffusers' context-parallel API.

``sequence_parallel: sp`` splits every transformer forward of one video batch over sp processes along the
token sequence: the processes of one group feed the same inputs, each keeps 1/sp of the tokens through
the blocks, attention exchanges heads for tokens (Ulysses all-to-all: each process attends over the
whole sequence for heads/sp heads), and the output is all-gathered at ``proj_out``, so every process of
the group returns the full velocity. This is ``ModelMixin.enable_parallelism`` with
``ContextParallelConfig(ulysses_degree=sp)``:

* Wan: diffusers' own plan (``WanTransformer3DModel._cp_plan``: RoPE output and the first block's
  hidden states split, ``proj_out`` gathered; the text of the cross-attention is not split).
* HunyuanVideo 1.5: diffusers 0.42 declares no plan; ``HUNYUAN15_CP_PLAN`` below is written here in the
  same format: the first double-stream block's video tokens, text tokens, text mask and RoPE tables are
  split, ``proj_out`` gathered. Its attention runs through the project's key-padding processor
  (models/hunyuan_attention.py): a [B, 1, 1, L_local] key mask that diffusers' Ulysses attention
  all-gathers to the full sequence (diffusers' own processor builds an L_local x L_local mask that
  cannot be gathered). The text rows (Qwen2.5-VL + ByT5 + image rows) are padded with masked rows so that
  sp divides them (``text_rows_padding``): masked keys change no valid token, and text rows are not
  part of the output.

Ring attention is not offered: diffusers' ring needs the attention's log-sum-exp (``return_lse``), which
its native (SDPA) backend does not return; the backends that do (flash, sage, cudnn) need a GPU.
The attention backend is diffusers' default, ``native`` (torch SDPA), which diffusers registers as
context-parallel capable with a backward (``_native_attention_forward_op`` / ``_backward_op``): it runs
on CPU (gloo) and on GPUs alike.

Gradients: the loss is computed on the gathered output, identical on every process of a group; the
gather's backward hands each process the gradient of its own tokens, so each process holds a partial
gradient and the group's sum is the gradient of the unsplit model (tests/models/test_sequence_parallel.py
checks it). train/distributed.py sums over a group and averages over the groups.
"""

from __future__ import annotations

from typing import Any

import torch

from grpo_bench.errors import UserError


def hunyuan15_cp_plan() -> dict[str, Any]:
    """The context-parallel plan of ``HunyuanVideo15Transformer3DModel`` (diffusers' ``_cp_plan`` format).

    The transformer's forward builds the RoPE tables (cos, sin: [L_video, D]), the text stream
    ([B, L_text, C], reordered valid rows first) and its mask ([B, L_text]) before the blocks; they are
    split where they enter the first block, and the blocks' outputs stay split until ``proj_out``."""
    from diffusers.models._modeling_parallel import ContextParallelInput, ContextParallelOutput

    def rows(dims: int, dim: int = 1) -> ContextParallelInput:
        return ContextParallelInput(split_dim=dim, expected_dims=dims, split_output=False)

    return {
        "transformer_blocks.0": {
            "hidden_states": rows(3),  # [B, L_video, C]
            "encoder_hidden_states": rows(3),  # [B, L_text, C]
            "attention_mask": rows(2),  # [B, L_text]
            "freqs_cis": (rows(2, 0), rows(2, 0)),  # cos, sin: [L_video, D]
        },
        "proj_out": ContextParallelOutput(gather_dim=1, expected_dims=3),
    }


def text_rows_padding(text_rows: int, sp: int) -> int:
    """Masked rows to add so that sp divides the text rows (0 when it already does)."""
    return (-int(text_rows)) % int(sp)


def check_degree(sp: int, world: int, where: str = "") -> int:
    """The data-parallel size of ``world`` processes in groups of ``sp`` (a UserError when sp does not divide)."""
    if world % sp:
        raise UserError(f"{where}config key 'sequence_parallel' ({sp}) must divide the number of processes ({world}): "
                        f"processes form groups of {sp} consecutive ranks, one group per data-parallel rank")
    return world // sp


def check_shapes(family: str, heads: int, video_tokens: int, sp: int) -> None:
    """Ulysses splits the heads and the video tokens evenly: both must divide by sp."""
    if heads % sp:
        raise UserError(f"config key 'sequence_parallel' ({sp}) must divide the {family} transformer's "
                        f"{heads} attention heads (Ulysses gives each process heads/sp heads)")
    if video_tokens % sp:
        raise UserError(f"config key 'sequence_parallel' ({sp}) must divide the {video_tokens} video tokens of "
                        f"{family} at this frames x height x width (each process keeps tokens/sp); choose frames "
                        "or size so that it does")


def build_mesh(sp: int, device: torch.device) -> Any:
    """A (dp, ring, ulysses) = (world/sp, 1, sp) device mesh: groups of sp consecutive ranks (a collective)."""
    from torch.distributed.device_mesh import init_device_mesh

    world = torch.distributed.get_world_size()
    return init_device_mesh(device.type, (world // sp, 1, sp), mesh_dim_names=("dp", "ring", "ulysses"))


def enable(transformer: torch.nn.Module, sp: int, device: torch.device, plan: dict[str, Any] | None = None) -> Any:
    """``transformer.enable_parallelism`` with Ulysses degree ``sp`` over groups of sp consecutive ranks;
    ``plan``: a cp plan for a model that declares none. Every rank must call it (it builds process groups).
    Returns the ParallelConfig."""
    from diffusers.models._modeling_parallel import ContextParallelConfig, ParallelConfig

    mesh = build_mesh(sp, device)
    config = ContextParallelConfig(ulysses_degree=sp, mesh=mesh)

    def resolve(cfg: ContextParallelConfig | ParallelConfig) -> ParallelConfig:
        # Replaces diffusers' ``ModelMixin._resolve_parallel_config`` (0.42) for this call: it picks the
        # device as ``rank % torch.accelerator.device_count()``, a ZeroDivisionError without an accelerator
        # (CPU, gloo). Otherwise the same: wrap the config, set it up on our mesh, record it on the model.
        if isinstance(cfg, ContextParallelConfig):
            cfg = ParallelConfig(context_parallel_config=cfg)
        cfg.setup(torch.distributed.get_rank(), torch.distributed.get_world_size(), device, mesh=mesh)
        transformer._parallel_config = cfg
        return cfg

    transformer._resolve_parallel_config = resolve  # an instance attribute shadows the method
    try:
        import logging

        log = logging.getLogger("diffusers.models.modeling_utils")
        level = log.level
        log.setLevel(logging.ERROR)  # "enable_parallelism is an experimental feature" on every rank
        try:
            transformer.enable_parallelism(config=config, cp_plan=plan)
        finally:
            log.setLevel(level)
    finally:
        del transformer._resolve_parallel_config
    return transformer._parallel_config
