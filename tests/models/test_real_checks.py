"""Checks that would catch a wrong real-model path (tiny random diffusers models, CPU): the decode
equals each pipeline's own ``output_type="pt"`` decode, Wan 2.2's per-token timesteps over two ODE
steps equal the pipeline's, and a bf16 LoRA update follows the float32 one."""

from __future__ import annotations

import pytest
import torch
from dist_train_script import ToyReward
from harness_sampler import HarnessSpacingScheduler, harness_ode

from grpo_bench.models.adapter_options import AdapterOptions

pytestmark = pytest.mark.filterwarnings("ignore")
PROMPTS = ["a red circle moving left", "a blue square"]


def wan_pipeline_output(model, noise, steps, shift, output_type):
    from diffusers import WanPipeline

    pipe = WanPipeline(**dict(model.pipe.components, scheduler=HarnessSpacingScheduler.make(shift)),
                       expand_timesteps=bool(model.pipe.config.get("expand_timesteps", False)))
    pipe.set_progress_bar_config(disable=True)
    o = model.options
    return pipe(prompt=PROMPTS, negative_prompt="", latents=noise.clone(), num_inference_steps=steps,
                guidance_scale=1.0, height=o.height, width=o.width, num_frames=o.frames,
                max_sequence_length=model.max_sequence_length, output_type=output_type).frames


def as_pipeline_video(ours: torch.Tensor) -> torch.Tensor:
    """[B, 3, F, H, W] in [-1, 1] -> the pipelines' "pt" layout [B, F, 3, H, W] in [0, 1]."""
    return (ours * 0.5 + 0.5).clamp(0, 1).permute(0, 2, 1, 3, 4)


def test_wan_decode_equals_the_pipelines_pt_output():
    from grpo_bench.models.wan import tiny_wan

    wan = tiny_wan(AdapterOptions(frames=9, height=32, width=32))
    noise = torch.randn(2, *wan.latent_shape, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        ours = wan.decode(harness_ode(wan, noise, PROMPTS, 2, 3.0, 1.0))
    theirs = wan_pipeline_output(wan, noise, 2, 3.0, "pt")
    assert theirs.shape == (2, 9, 3, 32, 32)
    torch.testing.assert_close(as_pipeline_video(ours), theirs.float(), atol=1e-4, rtol=1e-4)
    assert theirs.std() > 1e-3 and not torch.allclose(theirs.float(), as_pipeline_video(ours.flip(0)))


def test_hunyuan15_decode_equals_the_pipelines_pt_output():
    from diffusers import FlowMatchEulerDiscreteScheduler, HunyuanVideo15Pipeline
    from diffusers.guiders import ClassifierFreeGuidance

    from grpo_bench.models.hunyuan15 import apply_tiny_lengths, tiny_hunyuan15

    hy = tiny_hunyuan15(AdapterOptions(frames=9, height=16, width=16))
    # one video: diffusers 0.42's HunyuanVideo 1.5 VAE attention mask [B, L, L] does not broadcast over
    # a batch of several videos in its own decode (the adapter decodes one video per VAE call)
    noise = torch.randn(1, *hy.latent_shape, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        ours = hy.decode(harness_ode(hy, noise, PROMPTS[:1], 2, 5.0, 1.0))
    pipe = HunyuanVideo15Pipeline(**dict(hy.pipe.components, scheduler=FlowMatchEulerDiscreteScheduler(shift=5.0),
                                         guider=ClassifierFreeGuidance(guidance_scale=1.0)))
    apply_tiny_lengths(pipe)
    pipe.set_progress_bar_config(disable=True)
    theirs = pipe(prompt=PROMPTS[:1], latents=noise.clone(), num_inference_steps=2, height=16, width=16, num_frames=9,
                  output_type="pt").frames
    assert theirs.shape == (1, 9, 3, 16, 16) and theirs.std() > 1e-3
    torch.testing.assert_close(as_pipeline_video(ours), theirs.float(), atol=1e-4, rtol=1e-4)


def test_wan22_expand_timesteps_two_ode_steps_equal_the_pipeline(monkeypatch):
    from diffusers import WanPipeline

    from grpo_bench.models.wan import WanModel, tiny_wan_pipeline

    parts = tiny_wan_pipeline(seed=5).components
    model = WanModel(WanPipeline(**parts, expand_timesteps=True),
                     AdapterOptions(frames=9, height=32, width=32, max_sequence_length=16))
    assert model.net.expand_timesteps
    seen = []
    forward = type(model.pipe.transformer).forward

    def spy(self, *a, **kw):
        seen.append(tuple(kw["timestep"].shape))
        return forward(self, *a, **kw)

    monkeypatch.setattr(type(model.pipe.transformer), "forward", spy)
    noise = torch.randn(2, *model.latent_shape, generator=torch.Generator().manual_seed(6))
    ours = harness_ode(model, noise, PROMPTS, 2, 3.0, 1.0)
    _, f, h, w = model.latent_shape
    assert seen and set(seen) == {(2, f * (h // 2) * (w // 2))}  # one timestep per latent token
    seen.clear()
    theirs = wan_pipeline_output(model, noise, 2, 3.0, "latent")
    assert set(seen) == {(2, f * (h // 2) * (w // 2))}
    assert (ours - noise).abs().max() > 1e-2
    torch.testing.assert_close(ours, theirs.float(), atol=2e-5, rtol=1e-5)


def test_bf16_lora_update_follows_the_float32_update(tmp_path, fresh_accelerate_state):
    from section_support import model_of

    from grpo_bench.config.run import RunConfig
    from grpo_bench.train.trainer import train

    def lora_update(precision):
        from accelerate.state import AcceleratorState

        AcceleratorState._reset_state(reset_partial_state=True)  # one precision per accelerate state
        cfg = RunConfig(model="tiny-wan", method="flow_grpo", updates=1, steps=3, prompts_per_update=2, group_size=2,
                        frames=5, height=16, width=16, lora_rank=4, device="cpu", eval_samples=1, diag_every=0,
                        save_videos=False, eval_oracle=False, lr=1e-3, mixed_precision=precision, kl="none")
        model = model_of(cfg)
        params = {n: p for n, p in model.trainable_module().named_parameters() if p.requires_grad}
        before = {n: p.detach().clone() for n, p in params.items()}
        train(cfg, tmp_path / precision, model=model, reward=ToyReward())
        assert all(p.dtype == torch.float32 for p in params.values())  # adapters stay float32 under bf16
        return torch.cat([(params[n].detach() - before[n]).flatten() for n in sorted(params)])

    fp32, bf16 = lora_update("no"), lora_update("bf16")  # fresh_accelerate_state resets to "no" afterwards
    assert fp32.abs().max() > 0 and bf16.abs().max() > 0
    cosine = torch.nn.functional.cosine_similarity(fp32, bf16, dim=0)
    assert cosine > 0.9, float(cosine)
    assert (bf16 - fp32).norm() < 0.5 * fp32.norm()
