"""ImageReward (Xu et al. 2023) on still images, through the ``image-reward`` package (module
``ImageReward``): BLIP with an MLP head, trained on human rankings.

flow_grpo's ``flow_grpo/imagereward_scorer.py`` scores each (prompt, image) with
``model.inference_rank(prompt, [image])``, whose reward is the package's ``score``: the head's output
normalised by the package's fixed mean and std (``(r - mean) / std``, ImageReward.py). Here
``model.score(prompt, images)`` is called once per prompt's images (the same numbers).

Optional, and NOT under transformers 5: image-reward 1.5 (the latest) imports ``apply_chunking_to_forward``,
``find_pruneable_heads_and_indices`` and ``prune_linear_layer`` from ``transformers.modeling_utils``
(``models/BLIP/med.py``); transformers 5 removed all three from there (checked on 5.25: the last is gone
everywhere), so the import fails. Under transformers >= 5 the load is refused in one line naming that
conflict, before anything is imported; score ImageReward in an environment with transformers < 5 (the
project admits >= 4.46). The package also imports OpenAI's ``clip`` without declaring it (``clip-anytorch``
provides it, and that needs ``pkg_resources``: setuptools < 81) and needs torchvision. Its glue is tested on
a stand-in model (no environment here imports it: this project's CPU torch has no torchvision build).
Strict loading: the checkpoint (``ImageReward.pt``) and its ``med_config.json`` are local files, and the
BLIP text tokenizer (``bert-base-uncased``) must be in the local Hugging Face cache; the load runs with the
hub offline, so a missing file is one line, never a download.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from grpo_bench.errors import UserError
from grpo_bench.hub_offline import offline_hub
from grpo_bench.rewards import register
from grpo_bench.rewards.base import FILE, Reward, RewardModelWeights
from grpo_bench.rewards.compute import ImageTowers, Tower
from grpo_bench.rewards.still_images import distribution_version, local_file, optional_module, pil_images, stills

DEFAULT_CHECKPOINT = "ImageReward.pt"
DISTRIBUTION = "image-reward"
INSTALL = ("in an environment with transformers<5: pip install -e . 'transformers>=4.46,<5' image-reward clip-anytorch "
           "'setuptools<81' torchvision (image-reward pins timm==0.6.13 and fairscale==0.4.13)")
REMOVED_IN_TRANSFORMERS_5 = ("apply_chunking_to_forward", "find_pruneable_heads_and_indices", "prune_linear_layer")


def refuse_transformers_conflict() -> None:
    """One line when image-reward is installed beside transformers >= 5, whose removals it cannot import."""
    have, transformers = distribution_version(DISTRIBUTION), distribution_version("transformers")
    if have is None or transformers is None or int(transformers.split(".")[0]) < 5:
        return
    raise UserError(f"reward imagereward: {DISTRIBUTION} {have} does not work with transformers {transformers}: it "
                    f"imports {', '.join(REMOVED_IN_TRANSFORMERS_5)} from transformers.modeling_utils, removed in "
                    f"transformers 5; {INSTALL}")


class ImageRewardScore(Reward):
    """{"imagereward": Tensor[B]}: the package's normalised ImageReward score of each still."""

    key = "imagereward"
    dimensions = ("imagereward",)
    settings = {"A": {"imagereward": 1.0}, "B": {"imagereward": 1.0}}
    modality = "image"

    def __init__(self, model: Any, device: str | torch.device = "cpu") -> None:
        self.model, self.device = model, torch.device(device)

    @torch.no_grad()
    def __call__(self, videos: Tensor, prompts: list[str]) -> dict[str, Tensor]:
        images = pil_images(stills(videos, "ImageReward"))
        scores = []
        for prompt, image in zip(prompts, images):
            s = self.model.score(prompt, [image])
            scores.append(float(s[0] if isinstance(s, (list, tuple)) else s))
        return {self.key: torch.tensor(scores, dtype=torch.float32)}


# BLIP ViT-L/16 303.3M + BERT-base with cross-attention to 1024-wide image tokens 142.0M + MLP head 0.9M, counted
# on the meta device from those configs (446.2M; float32 as the package loads it)
MODEL_WEIGHTS = RewardModelWeights(4.46e8)
COMPUTE = ImageTowers(  # THUDM/ImageReward@c1392c6, one image per call (``score`` loops)
    towers=(
        # ImageReward/ImageReward.py:76 BLIP_Pretrain(image_size=224, vit='large'); models/BLIP/blip.py:33-36 ViT-L:
        # width 1024, depth 24, patch 16; models/BLIP/vit.py:115 mlp_ratio 4: 14 x 14 patches + the class token
        Tower(width=1024, layers=24, tokens=197, patches=196, patch_inputs=3 * 16 * 16),
        # the BERT text encoder (train/src/config/med_config.json:8-20, the med_config.json utils.py:76 downloads:
        # hidden 768, intermediate 3072, 12 layers, add_cross_attention) over the prompt padded to 35 tokens
        # (ImageReward.py:110 max_length=35), cross-attending to the 197 image tokens of width 1024
        # (models/BLIP/blip_pretrain.py:36 encoder_width = vision_width)
        Tower(width=768, layers=12, tokens=35, cross_width=1024, cross_tokens=197)),
    max_frames=1, call_images=1,
    head_flops=2 * (768 * 1024 + 1024 * 128 + 128 * 64 + 64 * 16 + 16),  # ImageReward.py:45-57 MLP(768) on one token
)


@register("imagereward", path_options={"checkpoint": FILE, "med_config": FILE},  # reward_path, reward_base_path
          model_weights=MODEL_WEIGHTS, compute=COMPUTE)
def imagereward(checkpoint: str = DEFAULT_CHECKPOINT, med_config: str = "", device: str | None = None,
                **kw: Any) -> ImageRewardScore:
    """ImageReward-v1.0 from local files through the image-reward package (never downloads)."""
    from grpo_bench.rewards.videoalign import auto_device

    refuse_transformers_conflict()
    download = "download it first, e.g. `hf download THUDM/ImageReward ImageReward.pt med_config.json`"
    path = local_file(checkpoint, "ImageReward", download)
    config = local_file(med_config or str(path.with_name("med_config.json")), "ImageReward med_config", download)
    rm = optional_module("ImageReward", INSTALL, "reward imagereward")
    device = auto_device(device)
    try:
        with offline_hub():  # the BLIP tokenizer comes from the local cache or not at all
            model = rm.load(str(path), device=device, med_config=str(config))
    except (OSError, ValueError) as exc:
        raise UserError(f"ImageReward: cannot load {str(path)!r} from local files ({str(exc).splitlines()[0][:120]}); "
                        "its BLIP tokenizer needs `hf download bert-base-uncased` in the Hugging Face cache") from None
    return ImageRewardScore(model.eval(), device=device)
