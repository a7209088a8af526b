"""Real reward adapters on tiny random CLIP / Qwen2-VL models (no download): one score per video and
dimension, the documented scaling, batching, and loading from local folders laid out like the
real checkpoints."""

from __future__ import annotations

import json
import math

import pytest
import torch

from grpo_bench import rewards
from grpo_bench.errors import UserError
from grpo_bench.models._tiny_text import word_tokenizer

pytestmark = pytest.mark.filterwarnings("ignore")

PROMPTS = ["a red circle moving left", "a blue square", "a cat", "a green triangle moving up"]


def videos(b=4, f=5, h=20, w=24, seed=0):
    return torch.rand(b, 3, f, h, w, generator=torch.Generator().manual_seed(seed)) * 2 - 1


def test_clip_score_scaling_and_frame_mean(clip_parts):
    from grpo_bench.rewards.clip_score import ClipScore

    model, tok = clip_parts
    r = ClipScore(model, tok, size=30, crop=30, frames=8, batch_size=3)
    v = videos()
    s = r(v, PROMPTS)
    assert set(s) == {"clip"} and s["clip"].shape == (4,) and s["clip"].dtype == torch.float32
    assert (s["clip"].abs() <= 1).all()
    # mean over frames: with every frame sampled (F = 5 <= 8), the score is the mean of the
    # single-frame scores (each frame repeated to a constant video).
    per_frame = torch.stack([r(v[:, :, k : k + 1].expand(-1, -1, 5, -1, -1), PROMPTS)["clip"] for k in range(5)])
    torch.testing.assert_close(s["clip"], per_frame.mean(0), atol=1e-5, rtol=1e-5)
    # batching does not change a video's score
    torch.testing.assert_close(r(v[2:3], PROMPTS[2:3])["clip"], s["clip"][2:3], atol=1e-5, rtol=1e-5)


def test_frames_sampled_evenly():
    from grpo_bench.rewards.clip_common import sample_frames

    v = torch.arange(17.0).view(1, 1, 17, 1, 1).expand(1, 3, 17, 1, 1)
    assert sample_frames(v, 8)[0, :, 0, 0, 0].tolist() == [0, 2, 5, 7, 9, 11, 14, 16]


def test_clip_preprocessing_matches_the_transformers_processor():
    import numpy as np
    from transformers import CLIPImageProcessorPil

    from grpo_bench.rewards.clip_common import clip_preprocess

    img = torch.rand(1, 3, 48, 64, generator=torch.Generator().manual_seed(3)) * 2 - 1
    proc = CLIPImageProcessorPil(size={"shortest_edge": 24}, crop_size={"height": 24, "width": 24})
    u8 = ((img[0].permute(1, 2, 0) + 1) * 127.5).round().clamp(0, 255).byte().numpy()
    ref = torch.tensor(np.asarray(proc(images=[u8], return_tensors="np")["pixel_values"]))
    ours = clip_preprocess(
        (torch.tensor(u8).permute(2, 0, 1)[None].float() / 127.5) - 1, 24, 24, proc.image_mean, proc.image_std
    )
    assert ours.shape == ref.shape == (1, 3, 24, 24)
    assert (ours - ref).abs().mean() < 0.02 and (ours - ref).abs().max() < 0.25  # resampler differences only


def test_pickscore_is_logit_scale_times_cosine(clip_parts):
    from grpo_bench.rewards.clip_score import ClipScore
    from grpo_bench.rewards.pickscore import PickScore

    model, tok = clip_parts
    with torch.no_grad():
        model.logit_scale.fill_(math.log(50.0))
    v = videos(seed=1)
    pick = PickScore(model, tok, size=30, crop=30)(v, PROMPTS)
    clip = ClipScore(model, tok, size=30, crop=30)(v, PROMPTS)
    assert set(pick) == {"pickscore"} and pick["pickscore"].shape == (4,)
    torch.testing.assert_close(pick["pickscore"], 50.0 * clip["clip"], atol=1e-4, rtol=1e-5)
    from grpo_bench.rewards.base import composite

    torch.testing.assert_close(composite(pick, PickScore.settings["B"]), pick["pickscore"])


def test_clip_loads_from_a_local_folder_and_missing_is_clear(clip_parts, tmp_path, refused_network):
    from transformers import CLIPImageProcessorPil

    model, tok = clip_parts
    model.save_pretrained(tmp_path / "clip")
    tok.save_pretrained(tmp_path / "clip")
    CLIPImageProcessorPil(size={"shortest_edge": 30}, crop_size={"height": 30, "width": 30}).save_pretrained(
        tmp_path / "clip"
    )
    r = rewards.load("clip_score", model=str(tmp_path / "clip"))
    assert (r.size, r.crop) == (30, 30)
    from grpo_bench.rewards.clip_score import ClipScore

    v = videos(seed=2)
    torch.testing.assert_close(r(v, PROMPTS)["clip"], ClipScore(model, tok, size=30, crop=30)(v, PROMPTS)["clip"])
    with pytest.raises(UserError, match="hf download openai/clip-vit-large-patch14"):
        rewards.load("clip_score")
    with pytest.raises(UserError, match="PickScore"):
        rewards.load("pickscore")
    assert refused_network == []


# --- VideoAlign ---------------------------------------------------------------------------------
QWEN_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
                 "<|video_pad|>", "<|image_pad|>"]

NORM = {"VQ_mean": 0.5, "VQ_std": 2.0, "MQ_mean": -1.0, "MQ_std": 0.5, "TA_mean": 3.0, "TA_std": 4.0}


def videoalign_config(max_pixels):
    return {
        "data_config": {
            "fps": 2.0,
            "num_frames": None,
            "max_frame_pixels": max_pixels,
            "min_frame_pixels": 28 * 28,
            "sample_type": "uniform",
            "eval_dim": ["VQ", "MQ", "TA"],
            "prompt_template_type": "detailed_special",
        },
        "model_config": {
            "model_name_or_path": "base",
            "output_dim": 1,
            "use_special_tokens": True,
            "reward_token": "special",
        },
        "peft_lora_config": {
            "lora_enable": True,
            "vision_lora": False,
            "lora_r": 4,
            "lora_alpha": 8,
            "lora_dropout": 0.05,
            "lora_namespan_exclude": ["lm_head", "rm_head", "embed_tokens", "visual"],
            "num_lora_modules": -1,
            "lora_task_type": "CAUSAL_LM",
            "use_rslora": False,
        },
        "inference_config": NORM,
    }


def tiny_qwen2vl(tok):
    from transformers import Qwen2VLConfig

    from grpo_bench.rewards.videoalign import reward_model_class

    ids = tok.convert_tokens_to_ids
    cfg = Qwen2VLConfig(
        text_config=dict(vocab_size=len(tok) + 3, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, rope_theta=1e4,
                         rope_scaling={"type": "mrope", "mrope_section": [4, 2, 2]}, pad_token_id=0,
                         bos_token_id=1, eos_token_id=2),
        vision_config=dict(depth=1, embed_dim=32, hidden_size=32, num_heads=2, mlp_ratio=2, patch_size=14,
                           spatial_merge_size=2, temporal_patch_size=2, in_channels=3),
        image_token_id=ids("<|image_pad|>"), video_token_id=ids("<|video_pad|>"),
        vision_start_token_id=ids("<|vision_start|>"), vision_end_token_id=ids("<|vision_end|>"),
    )
    torch.manual_seed(0)
    return reward_model_class()(cfg, output_dim=1).eval()


@pytest.fixture(scope="module")
def videoalign_parts():
    from grpo_bench.rewards.videoalign import build_reward_model
    from grpo_bench.rewards.videoalign_prep import SPECIAL_TOKENS

    tok = word_tokenizer(QWEN_SPECIALS, pad="<|endoftext|>", eos="<|im_end|>", model_max_length=4096)
    tok.padding_side = "right"
    base = tiny_qwen2vl(tok)
    tok.add_special_tokens({"additional_special_tokens": list(SPECIAL_TOKENS)})
    config = videoalign_config(56 * 56)
    model = build_reward_model(base, config, tok)
    torch.manual_seed(1)
    with torch.no_grad():  # a "trained" checkpoint: nonzero LoRA B and head
        for n, p in model.named_parameters():
            if "lora_B" in n or "rm_head" in n:
                p.normal_(0, 0.5)
    return model, tok, config


def test_videoalign_scores_and_normalisation(videoalign_parts):
    from grpo_bench.rewards.videoalign import VideoAlignReward

    model, tok, config = videoalign_parts
    v = videos(b=3, f=9, h=40, w=50, seed=4)
    r = VideoAlignReward(model, tok, config, source_fps=4.0, batch_size=2)
    s = r(v, PROMPTS[:3])
    assert set(s) == {"vq", "mq", "ta"} and all(t.shape == (3,) and torch.isfinite(t).all() for t in s.values())
    raw = VideoAlignReward(model, tok, config, source_fps=4.0, batch_size=3, use_norm=False)(v, PROMPTS[:3])
    for d in ("vq", "mq", "ta"):
        u = d.upper()
        torch.testing.assert_close(s[d], (raw[d] - NORM[f"{u}_mean"]) / NORM[f"{u}_std"], atol=1e-4, rtol=1e-4)
    # batch composition (right padding) does not change a video's score
    alone = VideoAlignReward(model, tok, config, source_fps=4.0, batch_size=1, use_norm=False)(v[1:2], PROMPTS[1:2])
    for d in raw:
        torch.testing.assert_close(alone[d], raw[d][1:2], atol=1e-4, rtol=1e-4)
    # 9 frames at 4 fps sampled at 2 fps -> round_2(4.5) = 4 frames -> 2 temporal patches;
    # 40x50 -> smart_resize 28x56 -> 2x4 patches of 14 -> 2 tokens after the 2x2 merge, per temporal patch
    batch = r.inputs(v[:1], PROMPTS[:1])
    assert batch["video_grid_thw"].tolist() == [[2, 2, 4]]
    assert batch["pixel_values_videos"].shape == (16, 3 * 2 * 14 * 14)
    assert int((batch["input_ids"] == tok.convert_tokens_to_ids("<|video_pad|>")).sum()) == 4


def test_videoalign_loads_a_reference_layout_checkpoint(videoalign_parts, tmp_path):
    """A folder laid out like KlingTeam/VideoReward (legacy peft keys) loads into the same scores."""
    from safetensors.torch import save_file

    from grpo_bench.rewards.videoalign import VideoAlignReward, reward_model_class

    model, tok, config = videoalign_parts
    base_dir, ck_dir = tmp_path / "qwen2vl", tmp_path / "videoreward"
    fresh_base = tiny_qwen2vl(
        word_tokenizer(QWEN_SPECIALS, pad="<|endoftext|>", eos="<|im_end|>", model_max_length=4096)
    )
    fresh_base.save_pretrained(base_dir)
    word_tokenizer(QWEN_SPECIALS, pad="<|endoftext|>", eos="<|im_end|>", model_max_length=4096).save_pretrained(
        base_dir
    )

    def legacy(k):  # this model's key -> the reference checkpoint's key
        k = (
            k.replace("model.language_model.", "model.")
            .replace("model.visual.", "visual.")
            .replace(".default.weight", ".weight")
        )
        return "base_model.model." + k

    state = model.state_dict()
    lora = {legacy(k): v.contiguous() for k, v in state.items() if "lora_" in k}
    non_lora = {
        legacy(k): v for k, v in state.items() if k in ("rm_head.weight", "model.language_model.embed_tokens.weight")
    }
    (ck_dir / "checkpoint-7").mkdir(parents=True)
    save_file(lora, str(ck_dir / "checkpoint-7" / "adapter_model.safetensors"))
    torch.save(non_lora, ck_dir / "checkpoint-7" / "non_lora_state_dict.pth")
    cfg = json.loads(json.dumps(config))
    cfg["model_config"]["model_name_or_path"] = str(base_dir)
    (ck_dir / "model_config.json").write_text(json.dumps(cfg))
    loaded = rewards.load("videoalign", checkpoint=str(ck_dir), source_fps=4.0, dtype="float32")
    assert isinstance(loaded.model, reward_model_class().__mro__[1]) and any(
        "lora_A" in n for n, _ in loaded.model.named_parameters()
    )
    v = videos(b=2, f=9, h=40, w=50, seed=5)
    ref = VideoAlignReward(model, tok, config, source_fps=4.0)(v, PROMPTS[:2])
    got = loaded(v, PROMPTS[:2])
    for d in ref:
        torch.testing.assert_close(got[d], ref[d], atol=1e-4, rtol=1e-4)
    with pytest.raises(UserError, match="hf download KlingTeam/VideoReward"):
        rewards.load("videoalign")


def test_videoalign_loads_the_released_model_pth_layout_without_unpickling(videoalign_parts, tmp_path):
    """checkpoint-N/model.pth as the released VideoReward folder holds it: the PeftModel's whole state
    dict (``base_model.model.`` prefix, legacy ``model.layers`` / ``visual`` names, ``base_layer`` and
    ``lora_A.default`` keys), read with weights_only=True; a file holding other objects is refused."""
    import collections

    from grpo_bench.rewards.videoalign import VideoAlignReward

    model, tok, config = videoalign_parts
    base_dir, ck_dir = tmp_path / "qwen2vl", tmp_path / "videoreward"
    tiny_qwen2vl(
        word_tokenizer(QWEN_SPECIALS, pad="<|endoftext|>", eos="<|im_end|>", model_max_length=4096)
    ).save_pretrained(base_dir)
    word_tokenizer(QWEN_SPECIALS, pad="<|endoftext|>", eos="<|im_end|>",
                   model_max_length=4096).save_pretrained(base_dir)

    def released(k):  # this model's key -> the released PeftModel key
        k = k.replace("model.language_model.", "model.").replace("model.visual.", "visual.")
        return "base_model.model." + k

    state = collections.OrderedDict((released(k), v.clone()) for k, v in model.state_dict().items())
    assert any(".base_layer.weight" in k for k in state) and any(".lora_A.default.weight" in k for k in state)
    assert any(k.startswith("base_model.model.visual.") for k in state)
    (ck_dir / "checkpoint-3").mkdir(parents=True)
    torch.save(state, ck_dir / "checkpoint-3" / "model.pth")
    cfg = json.loads(json.dumps(config))
    cfg["model_config"]["model_name_or_path"] = str(base_dir)
    (ck_dir / "model_config.json").write_text(json.dumps(cfg))
    loaded = rewards.load("videoalign", checkpoint=str(ck_dir), source_fps=4.0, dtype="float32")
    v = videos(b=2, f=9, h=40, w=50, seed=6)
    ref = VideoAlignReward(model, tok, config, source_fps=4.0)(v, PROMPTS[:2])
    got = loaded(v, PROMPTS[:2])
    for d in ref:
        torch.testing.assert_close(got[d], ref[d], atol=1e-4, rtol=1e-4)
    torch.save({"weights": state, "note": collections.Counter("xy")}, ck_dir / "checkpoint-3" / "model.pth")
    with pytest.raises(UserError, match="refusing to load it|mapping of names to tensors"):
        rewards.load("videoalign", checkpoint=str(ck_dir), source_fps=4.0, dtype="float32")


def test_reward_weights_for_single_score_rewards(clip_parts):
    from tiny_world import TinyReward

    from grpo_bench.rewards.base import composite, reward_weights
    from grpo_bench.rewards.clip_score import ClipScore

    model, tok = clip_parts
    r = ClipScore(model, tok, size=30, crop=30)
    assert reward_weights(r, "B") == {"clip": 1.0}
    assert reward_weights(TinyReward(), "B") == {"vq": 0.5, "mq": 0.5, "ta": 1.0}  # no table: the VQ/MQ/TA one
    s = r(videos(b=2), PROMPTS[:2])
    torch.testing.assert_close(composite(s, reward_weights(r, "A")), s["clip"])


def test_videoalign_refuses_a_checkpoint_with_missing_or_unexpected_keys(videoalign_parts, tmp_path):
    """The tiny layout's checkpoint without its reward head or one LoRA weight, or with a stray key, is
    refused with the keys named (loading it would leave those weights random without a word)."""
    from safetensors.torch import save_file

    model, tok, config = videoalign_parts
    base_dir = tmp_path / "qwen2vl"
    make_tok = lambda: word_tokenizer(QWEN_SPECIALS, pad="<|endoftext|>", eos="<|im_end|>",  # noqa: E731
                                      model_max_length=4096)
    tiny_qwen2vl(make_tok()).save_pretrained(base_dir)
    make_tok().save_pretrained(base_dir)
    state = model.state_dict()
    lora = {"base_model.model." + k: v.contiguous() for k, v in state.items() if "lora_" in k}
    head = {"base_model.model.rm_head.weight": state["rm_head.weight"]}
    dropped = sorted(lora)[0]

    def folder(name, lora_part, non_lora):
        ck = tmp_path / name
        (ck / "checkpoint-1").mkdir(parents=True)
        save_file(lora_part, str(ck / "checkpoint-1" / "adapter_model.safetensors"))
        torch.save(non_lora, ck / "checkpoint-1" / "non_lora_state_dict.pth")
        cfg = json.loads(json.dumps(config))
        cfg["model_config"]["model_name_or_path"] = str(base_dir)
        (ck / "model_config.json").write_text(json.dumps(cfg))
        return str(ck)

    def load(ck):
        return rewards.load("videoalign", checkpoint=ck, source_fps=4.0, dtype="float32")

    load(folder("complete", lora, head))  # the whole layout loads
    with pytest.raises(UserError, match=r"1 missing \(rm_head.weight\)") as err:
        load(folder("no_head", lora, {}))
    assert "\n" not in str(err.value)
    name = dropped.removeprefix("base_model.model.")
    with pytest.raises(UserError, match=rf"1 missing \({name}\)"):
        load(folder("no_lora", {k: v for k, v in lora.items() if k != dropped}, head))
    with pytest.raises(UserError, match=r"1 unexpected \(stray.weight\)"):
        load(folder("stray", lora, {**head, "base_model.model.stray.weight": torch.zeros(2)}))


def test_clip_refuses_a_checkpoint_with_missing_keys(clip_parts, tmp_path):
    from safetensors.torch import load_file, save_file

    model, tok = clip_parts
    model.save_pretrained(tmp_path / "clip")
    tok.save_pretrained(tmp_path / "clip")
    from transformers import CLIPImageProcessorPil

    CLIPImageProcessorPil(size={"shortest_edge": 30}, crop_size={"height": 30, "width": 30}).save_pretrained(
        tmp_path / "clip")
    weights = tmp_path / "clip" / "model.safetensors"
    state = load_file(str(weights))
    gone = next(k for k in sorted(state) if "visual_projection" in k)
    save_file({k: v for k, v in state.items() if k != gone}, str(weights), metadata={"format": "pt"})
    with pytest.raises(UserError, match=rf"missing \({gone}\)"):
        rewards.load("clip_score", model=str(tmp_path / "clip"))
