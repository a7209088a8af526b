"""Sequence parallelism (the official SAGE-GRPO ``--sp_size 2``) through diffusers' context-parallel API
(``ContextParallelConfig``, Ulysses / ring attention), as far as the installed diffusers supports it.

diffusers 0.42 declares a context-parallel plan (``_cp_plan``: how inputs are split along the sequence and
the output gathered) for ``WanTransformer3DModel`` but not for ``HunyuanVideo15Transformer3DModel``, so
HunyuanVideo 1.5, the paper's model, cannot be split through that API. grpo-bench therefore runs one video
per GPU (FSDP2 shards weights, gradients and optimizer state instead; docs/real_models.md states the
limit). This test pins what the installed diffusers offers, so that a release adding HunyuanVideo 1.5's
plan is noticed."""

from __future__ import annotations

import diffusers


def test_the_installed_diffusers_context_parallel_api_covers_wan_but_not_hunyuanvideo15():
    from diffusers.models._modeling_parallel import ContextParallelConfig

    cfg = ContextParallelConfig(ulysses_degree=2)
    assert cfg.ulysses_degree == 2 and cfg.ring_degree == 1
    assert getattr(diffusers.WanTransformer3DModel, "_cp_plan", None), "Wan: a context-parallel plan"
    assert hasattr(diffusers.ModelMixin, "enable_parallelism")
    assert not getattr(diffusers.HunyuanVideo15Transformer3DModel, "_cp_plan", None), (
        "diffusers now declares HunyuanVideo 1.5's context-parallel plan: sequence parallelism can be wired "
        "(docs/real_models.md, 'Sequence parallelism')")
