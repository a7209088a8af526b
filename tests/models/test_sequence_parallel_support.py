"""What the installed diffusers' context-parallel API (``ContextParallelConfig``, ``enable_parallelism``,
Ulysses / ring attention) offers, which grpo-bench's sequence parallelism (``sequence_parallel``,
grpo_bench/models/sequence_parallel.py) builds on: a pin, so that a diffusers release changing it is noticed.

diffusers 0.42 declares a context-parallel plan (``_cp_plan``) for ``WanTransformer3DModel`` (grpo-bench uses
it) but not for ``HunyuanVideo15Transformer3DModel`` (grpo-bench supplies its own, ``hunyuan15_cp_plan``); its
native (SDPA) backend supports Ulysses with a backward, not ring (no log-sum-exp)."""

from __future__ import annotations

import diffusers
import pytest


def test_the_installed_diffusers_context_parallel_api_declares_wans_plan_not_hunyuanvideo15s():
    from diffusers.models._modeling_parallel import ContextParallelConfig

    cfg = ContextParallelConfig(ulysses_degree=2)
    assert cfg.ulysses_degree == 2 and cfg.ring_degree == 1
    assert getattr(diffusers.WanTransformer3DModel, "_cp_plan", None), "Wan: a context-parallel plan"
    assert hasattr(diffusers.ModelMixin, "enable_parallelism")
    assert not getattr(diffusers.HunyuanVideo15Transformer3DModel, "_cp_plan", None), (
        "diffusers now declares HunyuanVideo 1.5's context-parallel plan: compare it with grpo-bench's "
        "hunyuan15_cp_plan (grpo_bench/models/sequence_parallel.py) and prefer diffusers' where they agree")


def test_the_native_backend_offers_ulysses_with_a_backward_but_not_ring():
    from diffusers.models import attention_dispatch as ad

    native = ad.AttentionBackendName.NATIVE
    assert ad._AttentionBackendRegistry._is_context_parallel_available(native)
    assert callable(ad._native_attention_forward_op) and callable(ad._native_attention_backward_op)
    with pytest.raises(ValueError, match="return_lse"):  # ring attention merges partial results by their LSE
        ad._native_attention_forward_op(None, *([None] * 3), return_lse=True, _save_ctx=False)
