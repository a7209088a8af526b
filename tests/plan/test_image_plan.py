"""`grpo-bench plan` of the image models: the spec read off a built tiny model (text encoders, VAE,
transformer, the joint sequence its attention sees), the MMDiT forward FLOPs of the plan's model against
torch's FlopCounterMode on a built transformer, and both SD3.5 FlowGRPO suites sized on 1 and 8 GPUs."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from section_support import model_of, plan_of

from grpo_bench import models
from grpo_bench.config.run import from_dict
from grpo_bench.config.sections import section
from grpo_bench.plan.estimate import GB
from grpo_bench.plan.model_specs import model_spec
from grpo_bench.plan.spec import parameter_count, transformer_spec

pytestmark = pytest.mark.filterwarnings("ignore")
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("name", "side"), [("tiny-sd3", 16), ("tiny-flux", 16), ("tiny-qwen-image", 32)])
def test_the_spec_of_a_built_tiny_image_model_is_its_networks(name, side):
    cfg = from_dict({"model": name, "reward": "jpeg_incompressibility", "height": side, "width": side,
                     "device": "cpu"})
    spec = model_spec(section(cfg, models.ModelSection))
    model = model_of(cfg)
    pipe = model.pipe
    names = ("text_encoder", "text_encoder_2", "text_encoder_3")
    encoders = [getattr(pipe, n) for n in names if getattr(pipe, n, None)]
    assert spec.text_encoder_params == sum(parameter_count(e) for e in encoders) > 0
    assert spec.vae_params == parameter_count(pipe.vae) > 0
    assert spec.transformer_params == parameter_count(pipe.transformer)
    c, f, h, w = model.latent_shape
    assert spec.latent == (c, 1, h, w) and spec.video == (1, side, side)
    p = model.token_patch()
    assert spec.video_tokens == (h // p) * (w // p) and spec.text_tokens == model.text_tokens()
    plan = plan_of(cfg, spec=spec)
    assert plan.gpu["text_encoders_while_caching"] == spec.text_encoder_params * 4  # float32 compute
    assert plan.gpu["vae"] == spec.vae_params * 4


def test_sd3_joint_sequence_is_what_its_attention_sees():
    """The plan's tokens per image: the latent patches plus every text row, in one joint attention."""
    from diffusers.models.attention_processor import JointAttnProcessor2_0

    cfg = from_dict({"model": "tiny-sd3", "reward": "jpeg_incompressibility", "device": "cpu"})
    spec = model_spec(section(cfg, models.ModelSection))
    model = model_of(cfg)
    seen = []
    call = JointAttnProcessor2_0.__call__

    def recording(self, attn, hidden_states, encoder_hidden_states=None, *a, **k):
        seen.append(hidden_states.shape[1] + (0 if encoder_hidden_states is None else encoder_hidden_states.shape[1]))
        return call(self, attn, hidden_states, encoder_hidden_states, *a, **k)

    JointAttnProcessor2_0.__call__ = recording
    try:
        with torch.no_grad():
            model.velocity(torch.randn(1, *model.latent_shape), torch.tensor([0.5]), model.encode_prompts(["a cat"]))
    finally:
        JointAttnProcessor2_0.__call__ = call
    assert seen and set(seen) == {spec.tokens}


def test_mmdit_forward_flops_are_counted_not_two_params_per_token():
    """The plan counts an image denoiser's forward (FlopCounterMode on a meta twin, with attention); on a built
    SD3 MMDiT it equals the diffusers call counted by hand, and sits well below 2 x params x tokens + attention
    (each stream's weights see only its own tokens; the adaLN modulation runs once per sample)."""
    from diffusers import SD3Transformer2DModel
    from torch.utils.flop_counter import FlopCounterMode

    from grpo_bench.models.diffusers_image import denoiser_flops
    from grpo_bench.models.sd3 import SD3VelocityNet

    config = dict(sample_size=32, patch_size=2, in_channels=16, num_layers=4, attention_head_dim=32,
                  num_attention_heads=8, joint_attention_dim=256, caption_projection_dim=256,
                  pooled_projection_dim=128, out_channels=16, pos_embed_max_size=32)
    torch.manual_seed(0)
    tr = SD3Transformer2DModel(**config).eval()
    text = 64
    counted = denoiser_flops(SD3VelocityNet, tr, (16, 32, 32), text)
    with torch.device("meta"):
        twin = SD3Transformer2DModel(**config)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        twin(hidden_states=torch.zeros(1, 16, 32, 32, device="meta"), timestep=torch.zeros(1, device="meta"),
             encoder_hidden_states=torch.zeros(1, text, 256, device="meta"),
             pooled_projections=torch.zeros(1, 128, device="meta"), return_dict=False)
    assert counted == counter.get_total_flops()
    spec = transformer_spec(tr, (16, 1, 32, 32), text, joint_text=True)
    L, hid = spec.tokens, spec.hidden
    attention = 4 * L * L * hid * spec.layers
    assert attention < counted < 0.5 * (2 * spec.transformer_params * L + attention)
    # and the model's architecture hands the counted FLOPs to the plan
    cfg = from_dict({"model": "tiny-sd3", "reward": "jpeg_incompressibility", "device": "cpu"})
    model = model_of(cfg)
    c, _, h, w = model.latent_shape
    spec = model_spec(section(cfg, models.ModelSection))
    assert spec.forward_flops == denoiser_flops(SD3VelocityNet, model.net.transformer, (c, h, w),
                                                model.text_tokens()) > 0


@pytest.mark.parametrize(("suite", "gpus"), [("sd35_flow_grpo", 8), ("sd35_flow_grpo_1gpu", 1)])
def test_plan_sizes_the_flow_grpo_suites(suite, gpus):
    from grpo_bench.cli.plan import plan_cells
    from grpo_bench.suite.expand import expand
    from grpo_bench.suite.parse import load_suite

    s = load_suite(ROOT / "suites" / f"{suite}.yaml")
    cells = expand(s)
    plans = plan_cells(s, cells)
    assert len(plans) == 15 and {p.processes for _, p in plans} == {gpus}
    for _, p in plans:
        assert p.model == "sd3.5-medium" and p.params == pytest.approx(2.243e9, rel=0.01)  # + a 226M pos. buffer
        assert p.tokens == (512 // 8 // 2) ** 2 + 77 + 128  # 1,024 patches + CLIP + T5 rows (max_text_tokens 128)
        assert p.trainable == pytest.approx(18.8e6, rel=0.01)  # LoRA 32 on flow_grpo's 8 attention projections
        assert 0 < p.gpu_peak < 80 * GB and p.seconds_per_update > 0
    # one 512 x 512 forward of SD3.5-Medium, counted on meta: 2.22 TFLOP (2 x params x tokens would say 5.5)
    assert model_spec(section(cells[0].config, models.ModelSection)).forward_flops == pytest.approx(2.224e12, rel=0.01)
    spec = model_spec(models.ModelSection(model="sd3.5-medium", frames=1, height=512, width=512))
    # CLIP-L 123.7M + CLIP-G 694.7M + T5-XXL 4.76B text parameters; the 16-channel AutoencoderKL 83.8M
    assert spec.text_encoder_params == pytest.approx(5.58e9, rel=0.01)
    assert spec.vae_params == pytest.approx(83.8e6, rel=0.01) and spec.vae_flops_per_pixel > 0
