"""Every registered reward declares what its forward costs (rewards/compute.py), and ``grpo-bench plan`` reads that
declaration: a reward that loads a network has non-zero FLOPs, and the towers' closed-form FLOPs agree with torch's
own count of the same architecture built from the official config."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from grpo_bench.plan.costs import ROLLOUT_BYTES, reward_cost
from grpo_bench.rewards import REWARDS, names
from grpo_bench.rewards.base import factory_declaration
from grpo_bench.rewards.clip_common import VIT_H_14
from grpo_bench.rewards.compute import HostSeconds, ImageTowers, NoNetwork, Tower


def _compute(name: str):
    return factory_declaration(REWARDS.get(name)).compute


@pytest.mark.parametrize("name", names())
def test_every_registered_reward_declares_its_compute(name):
    compute = _compute(name)
    assert compute is not None, f"reward {name} declares no compute (rewards/compute.py)"
    forward = compute.forward(1)
    if isinstance(compute, NoNetwork):
        assert factory_declaration(REWARDS.get(name)).model_weights is None  # loads no network, counts none
        assert (forward.flops, forward.host_seconds) == (0.0, 0.0)
    elif isinstance(compute, HostSeconds):  # an engine on the CPU: measured seconds, not GPU FLOPs
        assert forward.host_seconds > 0
    else:
        assert forward.flops > 0, f"reward {name} runs a network but declares 0 FLOPs"


@pytest.mark.parametrize("name", [n for n in names() if factory_declaration(REWARDS.get(n)).model_weights])
def test_a_reward_that_loads_weights_on_the_gpu_declares_flops_for_stills_and_videos(name):
    for frames in (1, 81):
        act, flops, host = reward_cost(name, frames)
        assert flops > 1e9 and act > 0 and host == 0.0, (name, frames)


def _counted(model: torch.nn.Module, **inputs) -> float:
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(**inputs)
    return float(counter.get_total_flops())


def test_hpsv2s_flops_are_torchs_count_of_openclip_vit_h_14_from_its_config():
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPVisionConfig, CLIPVisionModel

    vision, text = VIT_H_14["vision"], VIT_H_14["text"]
    with torch.device("meta"):  # the towers of hpsv2/src/open_clip/model_configs/ViT-H-14.json, no weights
        v = CLIPVisionModel(CLIPVisionConfig(hidden_size=vision["width"], intermediate_size=4 * vision["width"],
                                             num_hidden_layers=vision["layers"], num_attention_heads=16,
                                             patch_size=vision["patch_size"], image_size=vision["image_size"]))
        t = CLIPTextModel(CLIPTextConfig(hidden_size=text["width"], intermediate_size=4 * text["width"],
                                         num_hidden_layers=text["layers"], num_attention_heads=16,
                                         max_position_embeddings=text["context_length"]))
        counted = (_counted(v, pixel_values=torch.zeros(1, 3, 224, 224))
                   + _counted(t, input_ids=torch.zeros(1, 77, dtype=torch.long)))
    _, flops, _ = reward_cost("hpsv2", 1)
    assert flops == pytest.approx(counted, rel=1e-3)  # 381.7 GFLOP per still
    assert 3.8e11 < flops < 3.9e11


def test_imagerewards_vit_l_16_is_two_flops_per_parameter_and_token():
    from transformers import ViTConfig, ViTModel

    with torch.device("meta"):  # BLIP's ViT-L/16 at 224 (ImageReward.py:76, BLIP/blip.py:33-36)
        vit = ViTModel(ViTConfig(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096,
                                 patch_size=16, image_size=224), add_pooling_layer=False)
        counted = _counted(vit, pixel_values=torch.zeros(1, 3, 224, 224))
    params = sum(p.numel() for p in vit.parameters())
    tower = _compute("imagereward").towers[0]
    assert params == pytest.approx(303.3e6, rel=1e-3)
    assert tower.flops() == pytest.approx(2 * params * 197, rel=0.04)  # 2 x params x tokens, attention beside it
    assert tower.flops() == pytest.approx(counted, rel=1e-3)  # torch's count of the same network
    _, flops, _ = reward_cost("imagereward", 1)
    assert flops > tower.flops() + 2 * 12 * 12 * 768**2 * 35  # the BERT text encoder's 12 layers on 35 tokens


def test_a_tower_with_cross_attention_counts_both_sequences():
    plain = Tower(width=8, layers=1, tokens=3)
    cross = Tower(width=8, layers=1, tokens=3, cross_width=16, cross_tokens=5)
    # q, o on 3 tokens (2 x 2 x 64 x 3), k, v from 5 tokens of width 16 (2 x 2 x 128 x 5), QK^T and AV 4 x 3 x 5 x 8
    assert cross.flops() - plain.flops() == 2 * 2 * 64 * 3 + 2 * 2 * 128 * 5 + 4 * 3 * 5 * 8


def test_the_plan_reads_the_declaration_not_a_table(monkeypatch):
    import dataclasses

    from grpo_bench.rewards import base

    factory = REWARDS.get("hpsv2")
    towers = ImageTowers(towers=(Tower(width=10, layers=2, tokens=4),), max_frames=1, call_images=3)
    declared = dataclasses.replace(base.factory_declaration(factory), compute=towers)
    monkeypatch.setitem(base._FACTORIES, factory, declared)
    act, flops, _ = reward_cost("hpsv2", 1)
    assert flops == 2 * (2 * 12 * 100 * 4 + 4 * 4 * 4 * 10)  # 2 layers: 12 w^2 per token, attention 4 t^2 w
    assert act == 3 * 4 * 10 * ROLLOUT_BYTES
