"""Diffusers adapters on tiny random models (no download): shapes, caching, errors, and the
2-step ODE of the harness against the diffusers pipeline's own sampler on the same model and noise."""

from __future__ import annotations

import pytest
import torch
from harness_sampler import HarnessSpacingScheduler, harness_ode

from grpo_bench.core.schedule import sigmas as harness_sigmas
from grpo_bench.errors import UserError
from grpo_bench.models.adapter_options import AdapterOptions
from grpo_bench.models.velocity_net import TextCond

pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.fixture(scope="module")
def wan():
    from grpo_bench.models.wan import tiny_wan

    return tiny_wan(AdapterOptions(frames=9, height=32, width=32))


@pytest.fixture(scope="module")
def hunyuan():
    from grpo_bench.models.hunyuan15 import tiny_hunyuan15

    return tiny_hunyuan15(AdapterOptions(frames=9, height=16, width=16))


@pytest.mark.parametrize("name", ["wan", "hunyuan"])
def test_velocity_and_decode_shapes(name, request):
    model = request.getfixturevalue(name)
    c, f, h, w = model.latent_shape
    x = torch.randn(3, c, f, h, w)
    cond = model.encode_prompts(["a red circle", "a blue square moving left", "a red circle"])
    assert isinstance(cond, TextCond) and len(cond) == 3
    v = model.velocity(x, torch.tensor([1.0, 0.5, 0.1]), cond)
    assert v.shape == x.shape and v.dtype == torch.float32 and torch.isfinite(v).all()
    video = model.decode(x)
    o = model.options
    assert video.shape == (3, 3, o.frames, o.height, o.width)
    assert video.min() >= -1 and video.max() <= 1
    # Same prompt -> identical cached conditioning; the null cond is the "" prompt.
    for key, t in cond.items():
        assert torch.equal(t[0], t[2]), key
    assert set(model._cache) >= {"a red circle", "a blue square moving left"}
    null, empty = model.null_cond(2), model.encode_prompts([""])
    assert len(null) == 2 and all(torch.equal(null[k][1], empty[k][0]) for k in empty)


def test_prompts_are_encoded_once(wan, monkeypatch):
    calls = []
    original = wan.encode_batch
    monkeypatch.setattr(wan, "encode_batch", lambda prompts: calls.append(list(prompts)) or original(prompts))
    wan.encode_prompts(["a green ball", "a green ball", "a yellow cat"])
    wan.encode_prompts(["a yellow cat", "a green ball"])
    assert calls == [["a green ball", "a yellow cat"]]


@pytest.mark.parametrize("guidance", [1.0, 4.0])
def test_wan_two_step_ode_equals_pipeline(wan, guidance):
    from diffusers import WanPipeline

    shift = 3.0
    noise = torch.randn(2, *wan.latent_shape, generator=torch.Generator().manual_seed(1))
    prompts = ["a red circle moving left", "a blue square"]
    ours = harness_ode(wan, noise, prompts, 2, shift, guidance)
    parts = dict(wan.pipe.components, scheduler=HarnessSpacingScheduler.make(shift))
    pipe = WanPipeline(**parts)
    pipe.set_progress_bar_config(disable=True)
    o = wan.options
    theirs = pipe(
        prompt=prompts,
        negative_prompt="",
        latents=noise.clone(),
        num_inference_steps=2,
        guidance_scale=guidance,
        height=o.height,
        width=o.width,
        num_frames=o.frames,
        max_sequence_length=wan.max_sequence_length,
        output_type="latent",
    ).frames
    assert torch.allclose(pipe.scheduler.sigmas.double(), harness_sigmas(2, shift), atol=1e-6)
    assert (ours - noise).abs().max() > 1e-2  # the model moved the latents
    torch.testing.assert_close(ours, theirs.float(), atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("guidance", [1.0, 4.0])
def test_hunyuan15_two_step_ode_equals_pipeline(hunyuan, guidance):
    from diffusers import FlowMatchEulerDiscreteScheduler, HunyuanVideo15Pipeline
    from diffusers.guiders import ClassifierFreeGuidance

    from grpo_bench.models.hunyuan15 import apply_tiny_lengths

    shift = 5.0
    noise = torch.randn(2, *hunyuan.latent_shape, generator=torch.Generator().manual_seed(2))
    prompts = ["a red circle moving left", 'a sign saying "hi"']
    ours = harness_ode(hunyuan, noise, prompts, 2, shift, guidance)
    parts = dict(hunyuan.pipe.components, scheduler=FlowMatchEulerDiscreteScheduler(shift=shift),
                 guider=ClassifierFreeGuidance(guidance_scale=guidance))
    pipe = HunyuanVideo15Pipeline(**parts)
    apply_tiny_lengths(pipe)
    pipe.set_progress_bar_config(disable=True)
    o = hunyuan.options
    theirs = pipe(prompt=prompts, latents=noise.clone(), num_inference_steps=2, height=o.height, width=o.width,
                  num_frames=o.frames, output_type="latent").frames
    assert torch.allclose(pipe.scheduler.sigmas.double(), harness_sigmas(2, shift), atol=1e-6)
    assert (ours - noise).abs().max() > 1e-2
    torch.testing.assert_close(ours, theirs.float(), atol=2e-5, rtol=1e-5)


def test_lora_trains_only_adapters_and_disabled_equals_base():
    from grpo_bench.models.wan import tiny_wan

    base = tiny_wan(AdapterOptions(frames=5, height=16, width=16))
    lora = tiny_wan(
        AdapterOptions(frames=5, height=16, width=16, lora_rank=4, lora_targets=["to_q", "to_v", "ffn.net.2"])
    )
    trainable = {n for n, p in lora.trainable_module().named_parameters() if p.requires_grad}
    assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    assert all(p.requires_grad for p in base.trainable_module().parameters())  # full fine-tuning
    x = torch.randn(2, *lora.latent_shape)
    s = torch.tensor([0.9, 0.3])
    cond = lora.encode_prompts(["a red circle", "a cat"])
    with torch.no_grad():
        v_base = base.velocity(x, s, base.encode_prompts(["a red circle", "a cat"]))
        torch.testing.assert_close(lora.velocity(x, s, cond), v_base)  # lora_B = 0 at init
        for n, p in lora.trainable_module().named_parameters():
            if ".lora_B." in n:
                p.add_(0.1)
        assert (lora.velocity(x, s, cond) - v_base).abs().max() > 1e-4
        with lora.adapters_disabled():
            torch.testing.assert_close(lora.velocity(x, s, cond), v_base)


def test_gradient_checkpointing_same_gradients():
    from grpo_bench.models.wan import tiny_wan

    grads = []
    for ckpt in (False, True):
        m = tiny_wan(AdapterOptions(frames=5, height=16, width=16, lora_rank=2, gradient_checkpointing=ckpt))
        x = torch.randn(2, *m.latent_shape, generator=torch.Generator().manual_seed(0))
        m.velocity(x, torch.tensor([0.8, 0.4]), m.encode_prompts(["a dog", "a cat"])).square().mean().backward()
        grads.append({n: p.grad.clone() for n, p in m.trainable_module().named_parameters() if p.requires_grad})
    assert m.net.transformer.gradient_checkpointing
    for n in grads[0]:
        torch.testing.assert_close(grads[0][n], grads[1][n])


def test_bf16_autocast_returns_float32():
    from grpo_bench.models.wan import tiny_wan

    m = tiny_wan(AdapterOptions(frames=5, height=16, width=16, lora_rank=2, mixed_precision="bf16"))
    lora_dtypes = {p.dtype for p in m.trainable_module().parameters() if p.requires_grad}
    assert lora_dtypes == {torch.float32}
    assert m.net.transformer.blocks[0].attn1.to_q.base_layer.weight.dtype == torch.bfloat16
    v = m.velocity(torch.randn(1, *m.latent_shape), torch.tensor([0.5]), m.encode_prompts(["a dog"]))
    assert v.dtype == torch.float32 and torch.isfinite(v).all()


def test_frames_rounded_like_the_pipeline():
    from grpo_bench.models.wan import tiny_wan

    with pytest.warns(UserWarning, match="rounded"):
        m = tiny_wan(AdapterOptions(frames=8, height=16, width=16))
    assert m.options.frames == 9 and m.latent_shape == (16, 3, 2, 2)


def test_missing_model_is_a_clear_error_without_download(tmp_path, refused_network):
    from grpo_bench.models.hunyuan15 import HunyuanVideo15Model
    from grpo_bench.models.wan import WanModel

    with pytest.raises(UserError, match="hf download Wan-AI/Wan2.1-T2V-1.3B-Diffusers"):
        WanModel.from_pretrained("wan2.1-1.3b", AdapterOptions())
    with pytest.raises(UserError, match="not available locally"):
        HunyuanVideo15Model.from_pretrained("hunyuanvideo-community/HunyuanVideo-1.5-Diffusers-480p_t2v",
                                             AdapterOptions())
    with pytest.raises(UserError, match="model_index.json"):
        WanModel.from_pretrained(str(tmp_path), AdapterOptions())
    assert refused_network == []  # not even huggingface_hub's user-agent registry (grpo_bench/hub_offline.py)


def test_load_from_a_local_folder_by_pipeline_class(tmp_path):
    """A saved pipeline folder loads through models.load(path), dispatched on model_index.json."""
    from grpo_bench import models
    from grpo_bench.models.wan import WanModel, tiny_wan_pipeline

    tiny_wan_pipeline(seed=3).save_pretrained(tmp_path / "wan")
    loaded = models.load(str(tmp_path / "wan"), frames=5, height=16, width=16, max_sequence_length=16)
    fresh = models.load("tiny-wan", seed=3, frames=5, height=16, width=16)
    assert isinstance(loaded, WanModel) and loaded.latent_shape == fresh.latent_shape == (16, 2, 2, 2)
    x = torch.randn(1, *loaded.latent_shape)
    with torch.no_grad():
        torch.testing.assert_close(loaded.velocity(x, torch.tensor([0.6]), loaded.encode_prompts(["a red circle"])),
                                   fresh.velocity(x, torch.tensor([0.6]), fresh.encode_prompts(["a red circle"])))


def test_hunyuan15_text_tokens_are_the_rows_that_join_self_attention(hunyuan, monkeypatch):
    """The plan's joint sequence (video + text rows) counts what the transformer really concatenates:
    the text rows every attention call receives, Qwen2.5-VL, ByT5 glyph and image rows alike."""
    from grpo_bench.models.hunyuan_attention import KeyPaddingAttnProcessor

    seen: list[int] = []
    call = KeyPaddingAttnProcessor.__call__

    def recording(self, attn, hidden_states, encoder_hidden_states=None, *args, **kwargs):
        if encoder_hidden_states is not None:
            seen.append(encoder_hidden_states.shape[1])
        return call(self, attn, hidden_states, encoder_hidden_states, *args, **kwargs)

    monkeypatch.setattr(KeyPaddingAttnProcessor, "__call__", recording)
    x = torch.randn(1, *hunyuan.latent_shape)
    with torch.no_grad():
        hunyuan.velocity(x, torch.full((1,), 0.5), hunyuan.encode_prompts(["a cat"]))
    assert seen and set(seen) == {hunyuan.text_tokens()}


def test_loading_passes_the_dtype_by_the_name_this_diffusers_takes_and_nothing_warns(tmp_path):
    """diffusers 0.40 renamed from_pretrained's torch_dtype to dtype (torch_dtype warns that it goes in 1.0)."""
    import warnings

    import diffusers

    from grpo_bench import models
    from grpo_bench.models.pipeline_files import dtype_keyword
    from grpo_bench.models.wan import tiny_wan_pipeline

    assert [dtype_keyword(v) for v in ("0.36.0", "0.39.2", "0.40.0", "0.42.1", "1.0.0.dev0")] == [
        "torch_dtype", "torch_dtype", "dtype", "dtype", "dtype"]
    tiny_wan_pipeline(seed=3).save_pretrained(tmp_path / "wan")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded = models.load(str(tmp_path / "wan"), frames=5, height=16, width=16, max_sequence_length=16)
    about_dtype = [str(w.message) for w in caught if "torch_dtype" in str(w.message)]
    assert not about_dtype, about_dtype
    assert next(loaded.pipe.vae.parameters()).dtype == torch.float32  # the per-component dtypes still arrive
    assert dtype_keyword(diffusers.__version__) == "dtype"  # this environment's diffusers is past the rename
