"""VideoAlign: the VideoReward checkpoint (KlingTeam/VideoReward) — Qwen2-VL-2B-Instruct with its
LoRA (language model linears) and a linear reward head read at three special tokens.

Scaling (papers differ, so it is spelled out): for each video the head gives raw VQ, MQ, TA (the
logits at <|VQ_reward|>, <|MQ_reward|>, <|TA_reward|> of the "detailed_special" prompt); the reward
returns them normalised with the checkpoint's own statistics from model_config.json:
    vq = (VQ_raw - VQ_mean) / VQ_std,  mq = (MQ_raw - MQ_mean) / MQ_std,  ta = (TA_raw - TA_mean) / TA_std
exactly as the reference ``VideoVLMRewardInference.reward(..., use_norm=True)``; its "Overall" is
vq + mq + ta, i.e. Setting A (DanceGRPO and SAGE-GRPO train on these z-scores). ``use_norm=False``
returns the raw logits. Frames and pixels are prepared as the reference inference does
(videoalign_prep.py).

Architecture as the reference (VideoAlign trainer.py ``Qwen2VLRewardModelBT``): token embeddings
with the video features scattered in, the language model with plain sequential positions (the
reference passes no M-RoPE position ids), ``rm_head`` (no bias) on the last hidden states. The
checkpoint's legacy key layout (``model.layers``, ``visual``) is translated to transformers 5's
(``model.language_model.layers``, ``model.visual``).
"""

from __future__ import annotations

import glob
import json
import os
import re
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from grpo_bench.errors import UserError, unknown
from grpo_bench.hub_offline import offline_hub
from grpo_bench.rewards import register
from grpo_bench.rewards.base import FOLDER, Reward, RewardModelWeights, refuse_mismatched_keys
from grpo_bench.rewards.compute import VisionLanguageVideo
from grpo_bench.rewards.videoalign_prep import SPECIAL_TOKENS, VIDEO_MIN_PIXELS, build_text, patchify, prepare_frames

DEFAULT_CHECKPOINT = "KlingTeam/VideoReward"
DIMS = ("vq", "mq", "ta")
MODEL_WEIGHTS = RewardModelWeights(2.21e9, gpu_dtype="bfloat16", cpu_dtype="float32")
"""Qwen2-VL-2B (vision tower 0.67B, language model 1.54B) plus the reward head, loaded in bfloat16 on a GPU and
float32 on the CPU unless ``dtype`` is passed (the factory's default reads this declaration)."""


def video_compute(source_fps: float) -> VisionLanguageVideo:
    """Qwen2-VL-2B's forward on a video (parameter-count based: vision tower 0.67B of width 1280, language model
    1.54B of width 1536), frames of up to 336 x 588 pixels (videoalign_prep.py's max pixels at the 2-fps sampling)."""
    return VisionLanguageVideo(vision_params=6.7e8, vision_hidden=1280, lm_params=1.54e9, lm_hidden=1536,
                               pixels=336 * 588, source_fps=source_fps)


class VideoAlignReward(Reward):
    """{"vq", "mq", "ta"}: Tensor[B] each, normalised with the checkpoint's mean/std (module docstring)."""

    dimensions = DIMS
    modality = "video"  # scores motion and frames at the source fps (config/weights.py check_modality)

    def __init__(self, model: nn.Module, tokenizer: Any, config: dict, source_fps: float = 16.0,
                 batch_size: int = 2, device: str | torch.device = "cpu", use_norm: bool = True) -> None:
        self.device = torch.device(device)
        self.model = model.requires_grad_(False).eval().to(self.device)
        self.tokenizer = tokenizer
        self.data = config["data_config"]
        self.norm = config.get("inference_config")
        self.source_fps, self.batch_size, self.use_norm = float(source_fps), int(batch_size), use_norm
        self.special_ids = tokenizer.convert_tokens_to_ids(list(SPECIAL_TOKENS))
        vis = model.config.vision_config
        self.patch, self.temporal, self.merge = vis.patch_size, vis.temporal_patch_size, vis.spatial_merge_size

    def inputs(self, videos: Tensor, prompts: list[str]) -> dict[str, Tensor]:
        """Tokenised batch with video patches (what the reference processor returns)."""
        pix, grids, texts = [], [], []
        for video, prompt in zip(videos, prompts):
            frames = prepare_frames(video, self.source_fps, self.data.get("fps"), self.data.get("num_frames"),
                                    self.data.get("min_frame_pixels", VIDEO_MIN_PIXELS), self.data["max_frame_pixels"])
            p, g = patchify(frames, self.patch, self.temporal, self.merge)
            pix.append(p)
            grids.append(g)
            texts.append(build_text(prompt, int(g.prod()) // self.merge**2))
        enc = self.tokenizer(texts, padding=True, return_tensors="pt")
        return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"],
                "pixel_values_videos": torch.cat(pix), "video_grid_thw": torch.stack(grids)}

    def raw(self, batch: dict[str, Tensor]) -> Tensor:
        """Raw head outputs Tensor[b, 3] (VQ, MQ, TA) for a prepared batch."""
        m = self.model.model  # Qwen2VLModel: .visual, .language_model
        ids = batch["input_ids"].to(self.device)
        embeds = m.get_input_embeddings()(ids)
        video = m.get_video_features(batch["pixel_values_videos"].to(self.device, m.visual.dtype),
                                     batch["video_grid_thw"].to(self.device)).pooler_output
        video = torch.cat(list(video)).to(embeds.dtype)
        mask = (ids == self.model.config.video_token_id).unsqueeze(-1).expand_as(embeds)
        embeds = embeds.masked_scatter(mask, video)
        hidden = m.language_model(
            inputs_embeds=embeds, attention_mask=batch["attention_mask"].to(self.device)
        ).last_hidden_state
        logits = self.model.rm_head(hidden)  # [b, L, out]
        special = torch.zeros_like(ids, dtype=torch.bool)
        for t in self.special_ids:
            special |= ids == t
        pooled = logits[special].view(ids.shape[0], 3, -1)  # [b, 3, out]
        if pooled.shape[-1] == 3:
            pooled = pooled.diagonal(dim1=1, dim2=2)
        return pooled.reshape(ids.shape[0], -1).float()

    @torch.no_grad()
    def __call__(self, videos: Tensor, prompts: list[str]) -> dict[str, Tensor]:
        if videos.shape[0] != len(prompts):
            raise ValueError(f"{videos.shape[0]} videos but {len(prompts)} prompts")
        out = torch.cat([self.raw(self.inputs(videos[i : i + self.batch_size], prompts[i : i + self.batch_size]))
                         for i in range(0, len(prompts), self.batch_size)]).cpu()
        scores = {d: out[:, k] for k, d in enumerate(DIMS)}
        if self.use_norm and self.norm:
            scores = {
                d: (s - self.norm[f"{d.upper()}_mean"]) / self.norm[f"{d.upper()}_std"] for d, s in scores.items()
            }
        return scores


# --- the model structure and the checkpoint ----------------------------------------------------
def reward_model_class() -> type:
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    class Qwen2VLRewardModel(Qwen2VLForConditionalGeneration):
        """Qwen2-VL with VideoAlign's ``rm_head`` (Linear(hidden, output_dim, bias=False))."""

        def __init__(self, config: Qwen2VLConfig, output_dim: int = 1) -> None:
            super().__init__(config)
            self.rm_head = nn.Linear(config.text_config.hidden_size, output_dim, bias=False)

    return Qwen2VLRewardModel


def lora_targets(model: nn.Module, exclude: list[str], num_lora_modules: int = -1) -> list[str]:
    """VideoAlign train_reward.find_target_linear_names: every Linear/Embedding outside ``exclude``."""
    names = [n for n, m in model.named_modules()
             if not any(e in n for e in exclude) and isinstance(m, (nn.Linear, nn.Embedding))]
    return names[-num_lora_modules:] if num_lora_modules > 0 else names


def translate_key(key: str, adapter: str = "default") -> str:
    """A VideoAlign checkpoint key (peft-prefixed, legacy Qwen2-VL layout) -> this model's key."""
    key = key.removeprefix("base_model.model.")
    key = re.sub(r"^visual", "model.visual", key)
    key = re.sub(r"^model(?!\.(language_model|visual))", "model.language_model", key)
    return re.sub(r"\.(lora_[AB]|lora_embedding_[AB])\.weight$", rf".\1.{adapter}.weight", key)


def build_reward_model(base: nn.Module | None, config: dict, tokenizer: Any, base_source: str | None = None,
                       dtype: torch.dtype = torch.float32) -> nn.Module:
    """The reference structure: Qwen2-VL (+ special tokens) + rm_head + LoRA (peft) from model_config.json."""
    from peft import LoraConfig, inject_adapter_in_model

    mc, lc = config["model_config"], config["peft_lora_config"]
    cls = reward_model_class()
    if base is None:
        model, info = cls.from_pretrained(base_source, output_dim=mc["output_dim"], dtype=dtype, local_files_only=True,
                                          output_loading_info=True)
        # rm_head is VideoAlign's own (the checkpoint supplies it); anything else missing stays random
        refuse_mismatched_keys("VideoAlign base model", base_source,
                               [k for k in info["missing_keys"] if not k.startswith("rm_head.")],
                               info["unexpected_keys"])
    else:
        model = base
    model.resize_token_embeddings(len(tokenizer))
    if lc.get("lora_enable", False):
        exclude = list(lc.get("lora_namespan_exclude") or [])
        if not lc.get("vision_lora", False) and "visual" not in exclude:
            exclude.append("visual")
        targets = lora_targets(model, exclude, lc.get("num_lora_modules", -1))
        cfg = LoraConfig(r=lc["lora_r"], lora_alpha=lc["lora_alpha"], lora_dropout=lc.get("lora_dropout", 0.0),
                         target_modules=targets, use_rslora=lc.get("use_rslora", False), bias="none")
        inject_adapter_in_model(cfg, model)
    return model.to(dtype)


def load_checkpoint_weights(model: nn.Module, checkpoint_dir: Path, step: int = -1) -> None:
    """VideoAlign utils.load_model_from_checkpoint, with keys translated; every stored key must land and
    every LoRA and reward-head weight must be stored (a UserError names the keys otherwise)."""
    from safetensors.torch import load_file

    paths = sorted(glob.glob(str(checkpoint_dir / "checkpoint-*")), key=lambda p: int(p.rsplit("-", 1)[-1]))
    if not paths:
        raise UserError(f"VideoAlign: no checkpoint-* folder in {checkpoint_dir}")
    chosen = next((p for p in paths if p.endswith(f"checkpoint-{step}")), paths[-1])
    ck = Path(chosen)
    if (ck / "model.pth").is_file():
        state = _tensors(ck / "model.pth")
    else:
        state = _tensors(ck / "non_lora_state_dict.pth")
        state.update(load_file(str(ck / "adapter_model.safetensors")))
    own = model.state_dict()
    mapped = {}
    for key, value in state.items():
        k = translate_key(key)
        if k not in own:  # a LoRA-wrapped linear keeps its weight under base_layer
            k = k.replace(".weight", ".base_layer.weight") if k.replace(".weight", ".base_layer.weight") in own else k
        mapped[k] = value
    # what the checkpoint must supply (the rest comes from the base model): the LoRA adapters and rm_head
    required = {k for k in own if ".lora_" in k or k.startswith("rm_head.")}
    refuse_mismatched_keys("VideoAlign checkpoint", ck, required - set(mapped), {k for k in mapped if k not in own})
    model.load_state_dict(mapped, strict=False)


def _tensors(path: Path) -> dict[str, Tensor]:
    """A plain state dict from a .pth file, never unpickling code (``weights_only=True``)."""
    import pickle

    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError) as exc:
        raise UserError(f"VideoAlign checkpoint {path}: not a plain tensor state dict, refusing to load it "
                        f"({str(exc).splitlines()[0][:120]})") from None
    if not isinstance(state, dict) or not all(isinstance(v, Tensor) for v in state.values()):
        raise UserError(f"VideoAlign checkpoint {path}: expected a mapping of names to tensors")
    return dict(state)


def auto_device(device: str | None) -> str:
    """'cuda:<LOCAL_RANK>' when a GPU is available (each accelerate process scores its own videos), else 'cpu'."""
    if device not in (None, "auto"):
        return device
    return f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}" if torch.cuda.is_available() else "cpu"


TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
PATH_OPTIONS = {"checkpoint": FOLDER, "base_model": FOLDER}  # reward_path, reward_base_path


@register("videoalign", path_options=PATH_OPTIONS, model_weights=MODEL_WEIGHTS,
          compute=video_compute(24.0))  # the factory's source_fps
def videoalign(
    checkpoint: str = DEFAULT_CHECKPOINT,
    base_model: str | None = None,
    device: str | None = None,
    source_fps: float = 24.0,
    batch_size: int = 2,
    dtype: str | None = None,
    use_norm: bool = True,
) -> VideoAlignReward:
    """VideoAlign from local folders / the local HF cache only (never downloads).

    checkpoint: the VideoReward folder (model_config.json + checkpoint-*/) or its hub id;
    base_model: Qwen2-VL-2B-Instruct folder or hub id (default: model_config's model_name_or_path);
    source_fps: frame rate of the generated videos (HunyuanVideo 1.5: 24, the default; Wan: 16, see
    ``videoalign_16fps``): it sets how many frames the checkpoint's 2-fps sampling keeps;
    device: default the process's GPU, else CPU; dtype: default bfloat16 on GPU, float32 on CPU."""
    from transformers import AutoTokenizer

    device = auto_device(device)
    dtype = dtype or MODEL_WEIGHTS.dtype(device)
    if dtype not in TORCH_DTYPES:
        raise unknown("VideoAlign dtype", dtype, TORCH_DTYPES)
    ck = _local(checkpoint, "model_config.json", "VideoAlign checkpoint")
    config = json.loads((ck / "model_config.json").read_text())
    base = base_model or config["model_config"]["model_name_or_path"]
    base_dir = _local(base, "config.json", "VideoAlign base model (Qwen2-VL-2B-Instruct)")
    with offline_hub():  # both folders are local: nothing to ask the Hub, not even its user-agent registry
        tokenizer = AutoTokenizer.from_pretrained(str(base_dir), padding_side="right", local_files_only=True)
        if config["model_config"].get("use_special_tokens", False):
            tokenizer.add_special_tokens({"additional_special_tokens": list(SPECIAL_TOKENS)})
        model = build_reward_model(None, config, tokenizer, str(base_dir), TORCH_DTYPES[dtype])
    load_checkpoint_weights(model, ck)
    return VideoAlignReward(model, tokenizer, config, source_fps=source_fps, batch_size=batch_size, device=device,
                            use_norm=use_norm)



@register("videoalign_16fps", path_options=PATH_OPTIONS, model_weights=MODEL_WEIGHTS, compute=video_compute(16.0))
def videoalign_16fps(**kw: Any) -> VideoAlignReward:
    """VideoAlign for 16-fps generators (Wan 2.1/2.2)."""
    kw.setdefault("source_fps", 16.0)
    return videoalign(**kw)



def _local(source: str, marker: str, what: str) -> Path:
    """A local folder holding ``marker``: the path itself, or the hub id's snapshot in the HF cache."""
    path = Path(os.path.expanduser(source))
    if path.is_dir():
        if not (path / marker).is_file():
            raise UserError(f"{what}: folder {str(path)!r} has no {marker}")
        return path
    if source.count("/") == 1:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(source, marker)
        if isinstance(cached, str):
            return Path(cached).parent
    raise UserError(f"{what} {source!r} is not available locally and grpo-bench never downloads weights; run "
                    f"`hf download {source}` (into the Hugging Face cache, found by name), or download it to a "
                    f"folder and pass the folder (rewards.load(..., checkpoint=DIR / base_model=DIR))")
