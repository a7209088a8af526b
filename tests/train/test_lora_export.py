"""docs/lora_export.md's snippet, run as written on a tiny SD3 pipeline: the exported adapters of a trained run,
loaded into a freshly built diffusers pipeline, make its transformer compute what the trained policy computed."""

from __future__ import annotations

import torch
from image_train_support import run_config
from section_support import model_of


def test_an_exported_lora_loads_into_a_diffusers_pipeline_as_documented(tmp_path):
    from peft import LoraConfig, inject_adapter_in_model, set_peft_model_state_dict
    from safetensors.torch import load_file

    from grpo_bench.models.sd3 import tiny_sd3_pipeline
    from grpo_bench.train.trainer import train

    cfg = run_config("tiny-sd3", "flow_grpo", lr=1e-2)
    model = model_of(cfg)
    train(cfg, tmp_path / "run", model=model)
    folder = tmp_path / "run" / "policy"
    assert (folder / "adapter_config.json").is_file() and (folder / "adapter_model.safetensors").is_file()

    pipe = tiny_sd3_pipeline(seed=0)  # the same base weights as the run's tiny-sd3
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 4, 16, 16, generator=g)
    text = torch.randn(2, 6, pipe.transformer.config.joint_attention_dim, generator=g)
    pooled = torch.randn(2, pipe.transformer.config.pooled_projection_dim, generator=g)
    t = torch.tensor([800.0, 300.0])
    with torch.no_grad():
        base = pipe.transformer(x, encoder_hidden_states=text, pooled_projections=pooled, timestep=t).sample
    inject_adapter_in_model(LoraConfig.from_pretrained(str(folder)), pipe.transformer)
    set_peft_model_state_dict(pipe.transformer, load_file(f"{folder}/adapter_model.safetensors"))
    trained = model.net.transformer  # the trained policy's diffusers transformer, adapters on
    with torch.no_grad():
        loaded = pipe.transformer(x, encoder_hidden_states=text, pooled_projections=pooled, timestep=t).sample
        want = trained(x, encoder_hidden_states=text, pooled_projections=pooled, timestep=t).sample
    assert not torch.allclose(loaded, base)  # the adapters carry what training learned
    torch.testing.assert_close(loaded, want.float(), rtol=1e-4, atol=1e-5)
