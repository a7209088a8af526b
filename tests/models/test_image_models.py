"""Image adapters (SD3 / SD3.5, FLUX.1, Qwen-Image) on tiny random models (no download): a still is a
one-frame clip; the harness's 2-step ODE equals each diffusers pipeline's own sampler on the same model
and noise; LoRA, full fine-tuning and the checks that refuse bad input before a model is built."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from harness_sampler import HarnessSpacingScheduler, harness_ode, harness_sigmas

from grpo_bench.errors import UserError
from grpo_bench.models.adapter_options import AdapterOptions

pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.fixture(scope="module")
def sd3():
    from grpo_bench.models.sd3 import tiny_sd3

    return tiny_sd3(AdapterOptions(frames=1, height=16, width=16))


@pytest.fixture(scope="module")
def flux():
    from grpo_bench.models.flux import tiny_flux

    return tiny_flux(AdapterOptions(frames=1, height=16, width=16))


@pytest.fixture(scope="module")
def qwen():
    from grpo_bench.models.qwen_image import tiny_qwen_image

    return tiny_qwen_image(AdapterOptions(frames=1, height=32, width=32))


@pytest.mark.parametrize("name", ["sd3", "flux", "qwen"])
def test_a_still_is_a_one_frame_clip(name, request):
    model = request.getfixturevalue(name)
    c, f, h, w = model.latent_shape
    assert f == 1 and model.modality == "image" and model.video_shape[1] == 1
    x = torch.randn(2, c, f, h, w)
    cond = model.encode_prompts(["a red circle", "a blue square"])
    v = model.velocity(x, torch.tensor([0.9, 0.2]), cond)
    assert v.shape == x.shape and v.dtype == torch.float32 and torch.isfinite(v).all()
    images = model.decode(x)
    assert images.shape == (2, 3, 1, model.options.height, model.options.width)
    assert images.min() >= -1 and images.max() <= 1


def test_pack_unpack_are_the_pipelines():
    from diffusers import FluxPipeline

    from grpo_bench.models.diffusers_image import pack_latents, unpack_latents

    x = torch.randn(2, 3, 8, 6)
    tokens = pack_latents(x)
    torch.testing.assert_close(tokens, FluxPipeline._pack_latents(x, 2, 3, 8, 6), atol=0, rtol=0)
    torch.testing.assert_close(unpack_latents(tokens, 8, 6), x, atol=0, rtol=0)


@pytest.mark.parametrize("guidance", [1.0, 4.5])
def test_sd3_two_step_ode_equals_pipeline(sd3, guidance):
    from diffusers import StableDiffusion3Pipeline

    shift = 3.0
    noise = torch.randn(2, *sd3.latent_shape, generator=torch.Generator().manual_seed(1))
    prompts = ["a red circle", "a blue square moving left"]
    ours = harness_ode(sd3, noise, prompts, 2, shift, guidance)
    pipe = StableDiffusion3Pipeline(**dict(sd3.pipe.components, scheduler=HarnessSpacingScheduler.make(shift)))
    pipe.set_progress_bar_config(disable=True)
    theirs = pipe(prompt=prompts, negative_prompt="", latents=noise[:, :, 0].clone(), num_inference_steps=2,
                  guidance_scale=guidance, height=16, width=16, max_sequence_length=sd3.max_sequence_length,
                  output_type="latent").images
    assert (ours - noise).abs().max() > 1e-2
    torch.testing.assert_close(ours[:, :, 0], theirs.float(), atol=2e-5, rtol=1e-5)


def test_flux_two_step_ode_equals_pipeline_with_its_distilled_guidance(flux):
    """guidance 1 (FLUX.1-dev samples without CFG); the embedding gets the pipeline's guidance_scale 3.5;
    the pipeline's dynamic shift mu is exp(mu) = the harness's shift."""
    from diffusers import FluxPipeline

    from grpo_bench.models.diffusers_image import pack_latents, unpack_latents

    noise = torch.randn(2, *flux.latent_shape, generator=torch.Generator().manual_seed(2))
    prompts = ["a red circle", "a cat"]
    shift = flux.pipeline_shift()
    ours = harness_ode(flux, noise, prompts, 2, shift, 1.0)
    pipe = FluxPipeline(**flux.pipe.components)
    pipe.set_progress_bar_config(disable=True)
    theirs = pipe(prompt=prompts, latents=pack_latents(noise[:, :, 0]), num_inference_steps=2, guidance_scale=3.5,
                  height=16, width=16, max_sequence_length=flux.max_sequence_length, output_type="latent").images
    assert flux.net.embedded_guidance == 3.5
    assert (ours - noise).abs().max() > 1e-2
    torch.testing.assert_close(ours[:, :, 0], unpack_latents(theirs.float(), 16, 16), atol=2e-5, rtol=1e-5)
    # the distilled embedding acts: another scale, another velocity
    x, s, cond = noise, torch.tensor([0.7, 0.7]), flux.encode_prompts(prompts)
    v = flux.velocity(x, s, cond)
    flux.net.embedded_guidance = 1.0
    try:
        assert (flux.velocity(x, s, cond) - v).abs().max() > 1e-4
    finally:
        flux.net.embedded_guidance = 3.5


def test_qwen_image_two_step_ode_equals_pipeline(qwen):
    """guidance 1 (the pipeline's true_cfg rescales the guided norm, the harness does not: see the module);
    the cached prompts are padded to max_sequence_length with a zero mask, the pipeline pads to the longest."""
    from diffusers import QwenImagePipeline

    from grpo_bench.models.diffusers_image import pack_latents, unpack_latents
    from grpo_bench.models.qwen_image import apply_tiny_template

    noise = torch.randn(2, *qwen.latent_shape, generator=torch.Generator().manual_seed(3))
    prompts = ["a red circle moving left slowly", "a cat"]  # different lengths: padding is exercised
    ours = harness_ode(qwen, noise, prompts, 2, qwen.pipeline_shift(), 1.0)
    pipe = QwenImagePipeline(**qwen.pipe.components)
    apply_tiny_template(pipe)
    pipe.set_progress_bar_config(disable=True)
    _, _, _, h, w = noise.shape
    theirs = pipe(prompt=prompts, latents=pack_latents(noise[:, :, 0]), num_inference_steps=2, true_cfg_scale=1.0,
                  height=32, width=32, max_sequence_length=qwen.max_sequence_length, output_type="latent").images
    assert (ours - noise).abs().max() > 1e-2
    torch.testing.assert_close(ours[:, :, 0], unpack_latents(theirs.float(), h, w), atol=2e-5, rtol=1e-5)


def test_qwen_image_true_cfg_is_the_pipelines_norm_rescaled_guidance(qwen):
    """guidance 4.0 with ``guidance_formula: norm_rescaled`` (core/sampling.py) equals QwenImagePipeline's
    true_cfg_scale 4.0 on the "" negative prompt; the plain formula does not."""
    from diffusers import QwenImagePipeline

    from grpo_bench.core.sampling import StepTable, integrate
    from grpo_bench.models.diffusers_image import pack_latents, unpack_latents
    from grpo_bench.models.qwen_image import apply_tiny_template

    noise = torch.randn(2, *qwen.latent_shape, generator=torch.Generator().manual_seed(4))
    prompts = ["a red circle moving left slowly", "a cat"]
    table = StepTable.ode(harness_sigmas(2, qwen.pipeline_shift()))
    cond, null = qwen.encode_prompts(prompts), qwen.null_cond(2)

    def ours(formula):
        return integrate(qwen.velocity, table, noise, cond, null, 4.0, None, formula=formula)

    pipe = QwenImagePipeline(**qwen.pipe.components)
    apply_tiny_template(pipe)
    pipe.set_progress_bar_config(disable=True)
    _, _, _, h, w = noise.shape
    theirs = pipe(prompt=prompts, negative_prompt="", latents=pack_latents(noise[:, :, 0]), num_inference_steps=2,
                  true_cfg_scale=4.0, height=32, width=32, max_sequence_length=qwen.max_sequence_length,
                  output_type="latent").images
    theirs = unpack_latents(theirs.float(), h, w)
    torch.testing.assert_close(ours("norm_rescaled")[:, :, 0], theirs, atol=2e-5, rtol=1e-5)
    assert (ours("cfg")[:, :, 0] - theirs).abs().max() > 1e-2  # the plain formula is another sampler here


def test_flux_shift_is_the_pipelines_mu():
    """calculate_shift of FluxPipeline at 512 x 512 and 1024 x 1024 (the checkpoint's scheduler config)."""
    import math

    from diffusers.pipelines.flux.pipeline_flux import calculate_shift

    from grpo_bench.models.flux import tiny_flux

    for side, latent in ((16, 16), (32, 32)):
        m = tiny_flux(AdapterOptions(frames=1, height=side, width=side))
        mu = calculate_shift((latent // 2) ** 2, 256, 4096, 0.5, 1.15)
        assert m.pipeline_shift() == pytest.approx(math.exp(mu))
    assert math.exp(calculate_shift(64 * 64, 256, 4096, 0.5, 1.15)) == pytest.approx(3.158, abs=1e-3)  # 1024^2


def test_lora_on_flow_grpos_targets_trains_only_adapters():
    """flow_grpo's scripts/train_sd3.py LoRA targets on the MMDiT: adapters only, starting at the base."""
    from grpo_bench.models.sd3 import tiny_sd3

    targets = ["attn.add_k_proj", "attn.add_q_proj", "attn.add_v_proj", "attn.to_add_out", "attn.to_k",
               "attn.to_out.0", "attn.to_q", "attn.to_v"]
    base = tiny_sd3(AdapterOptions(frames=1))
    lora = tiny_sd3(AdapterOptions(frames=1, lora_rank=4, lora_alpha=8, lora_targets=targets))
    trainable = {n for n, p in lora.trainable_module().named_parameters() if p.requires_grad}
    assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    wrapped = {n.split(".lora_")[0].split("attn.")[-1] for n in trainable}
    # every target is wrapped: to_add_out in the first joint block (the last, context_pre_only, has none)
    assert wrapped == {t.split("attn.")[-1] for t in targets}
    assert not any("transformer_blocks.1.attn.to_add_out" in n for n in trainable)
    assert all(p.requires_grad and p.dtype == torch.float32 for p in base.trainable_module().parameters())
    x, s = torch.randn(2, *lora.latent_shape), torch.tensor([0.8, 0.3])
    with torch.no_grad():
        v0 = base.velocity(x, s, base.encode_prompts(["a dog", "a cat"]))
        torch.testing.assert_close(lora.velocity(x, s, lora.encode_prompts(["a dog", "a cat"])), v0)


def test_full_fine_tuning_keeps_float32_masters_under_bf16():
    from grpo_bench.models.flux import tiny_flux

    m = tiny_flux(AdapterOptions(frames=1, mixed_precision="bf16"))
    assert {p.dtype for p in m.trainable_module().parameters() if p.requires_grad} == {torch.float32}
    v = m.velocity(torch.randn(1, *m.latent_shape), torch.tensor([0.5]), m.encode_prompts(["a dog"]))
    assert v.dtype == torch.float32 and torch.isfinite(v).all()


def test_an_image_model_refuses_frames():
    from grpo_bench.models.sd3 import tiny_sd3

    with pytest.raises(UserError, match="frames must be 1"):
        tiny_sd3(AdapterOptions(frames=5))


def test_missing_checkpoint_is_one_line_without_download(refused_network):
    from grpo_bench.models.flux import FluxModel
    from grpo_bench.models.qwen_image import QwenImageModel
    from grpo_bench.models.sd3 import SD3Model

    with pytest.raises(UserError, match="hf download stabilityai/stable-diffusion-3.5-medium"):
        SD3Model.from_pretrained("sd3.5-medium", AdapterOptions(frames=1))
    with pytest.raises(UserError, match="not available locally"):
        FluxModel.from_pretrained("flux.1-dev", AdapterOptions(frames=1))
    with pytest.raises(UserError, match="not available locally"):
        QwenImageModel.from_pretrained("qwen-image", AdapterOptions(frames=1))
    assert refused_network == []


def test_a_saved_image_pipeline_folder_loads_and_is_known_as_an_image_model(tmp_path):
    from grpo_bench import models
    from grpo_bench.models.sd3 import SD3Model, tiny_sd3_pipeline

    tiny_sd3_pipeline(seed=4).save_pretrained(tmp_path / "sd3")
    folder = str(tmp_path / "sd3")
    assert models.modality(folder) == "image" and models.modality("tiny-wan") == "video"
    loaded = models.load(folder, frames=1, max_sequence_length=16)
    fresh = models.load("tiny-sd3", seed=4, frames=1)
    assert isinstance(loaded, SD3Model) and loaded.latent_shape == fresh.latent_shape
    x = torch.randn(1, *loaded.latent_shape)
    with torch.no_grad():
        torch.testing.assert_close(loaded.velocity(x, torch.tensor([0.6]), loaded.encode_prompts(["a red circle"])),
                                   fresh.velocity(x, torch.tensor([0.6]), fresh.encode_prompts(["a red circle"])))


# --- the config checks, before any model is built ---------------------------------------------------
@pytest.mark.parametrize(("overrides", "match"), [
    ({"reward": "world_oracle"}, "scores videos only, but model 'tiny-sd3' makes images"),
    ({"reward": "videoalign"}, "choose one of .*clip_score, hpsv2, imagereward, jpeg_compressibility"),
    ({"reward": "jpeg_compressibility", "frames": 5}, "config key 'frames'.*still images"),
    ({"reward": "jpeg_compressibility", "eval_oracle": True}, "config key 'eval_oracle'"),
])
def test_bad_image_input_is_one_line_before_a_model_is_built(overrides, match, monkeypatch):
    from grpo_bench import models
    from grpo_bench.config.run import from_dict

    monkeypatch.setattr(models, "from_section", lambda section: pytest.fail("a model was built"))
    with pytest.raises(UserError, match=match) as err:
        from_dict({"model": "tiny-sd3", **overrides})
    assert "\n" not in str(err.value)


def test_a_video_reward_on_an_image_model_and_the_reverse():
    from grpo_bench.config.run import from_dict

    with pytest.raises(UserError, match="'jpeg_compressibility' scores images only, but model 'tiny-wan'"):
        from_dict({"model": "tiny-wan", "reward": "jpeg_compressibility"})
    cfg = from_dict({"model": "tiny-flux", "reward": "pickscore"})  # CLIP-family rewards score stills too
    assert cfg.frames == 1 and cfg.eval_oracle is False
    assert from_dict({"model": "tiny-wan", "reward": "world_oracle"}).frames == 8  # video defaults unchanged


def test_jpeg_rewards_follow_flow_grpo():
    """flow_grpo/rewards.py: incompressibility = JPEG kB at quality 95, compressibility = -kB / 500."""
    import io

    from PIL import Image

    from grpo_bench.rewards import load

    g = torch.Generator().manual_seed(0)
    flat = torch.zeros(1, 3, 1, 32, 32)
    noisy = torch.rand(1, 3, 1, 32, 32, generator=g) * 2 - 1
    images = torch.cat([flat, noisy])
    kb = load("jpeg_incompressibility")(images, ["a", "b"])["jpeg"]
    pixels = ((noisy[0, :, 0].clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8).permute(1, 2, 0).numpy()
    buffer = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(pixels)).save(buffer, format="JPEG", quality=95)
    assert kb[1].item() == pytest.approx(buffer.tell() / 1000) and kb[0] < kb[1]
    torch.testing.assert_close(load("jpeg_compressibility")(images, ["a", "b"])["jpeg"], -kb / 500)


def test_a_named_checkpoint_missing_from_the_cache_stops_train_before_a_model_is_built(tmp_path, monkeypatch):
    from grpo_bench import models
    from grpo_bench.config.run import RunConfig
    from grpo_bench.train.trainer import train

    monkeypatch.setattr(models, "from_section", lambda section: pytest.fail("a model was built"))
    cfg = RunConfig(model="sd3.5-medium", reward="jpeg_compressibility", frames=1, eval_oracle=False, device="cpu")
    with pytest.raises(UserError, match="hf download stabilityai/stable-diffusion-3.5-medium") as err:
        train(cfg, tmp_path / "run")
    assert "\n" not in str(err.value) and not (tmp_path / "run").exists()
