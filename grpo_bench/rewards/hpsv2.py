"""HPSv2 / HPSv2.1 (Human Preference Score v2, Wu et al. 2023) on still images, through the ``hpsv2``
package's own OpenCLIP (``hpsv2.src.open_clip``: ViT-H-14).

Read from tgxs002/HPSv2 ``hpsv2/img_score.py``: the model is ``create_model_and_transforms('ViT-H-14',
...)`` with the HPS checkpoint's ``state_dict`` loaded strictly, images go through OpenCLIP's validation
transform (resize 224 bicubic, centre crop, OpenAI CLIP mean / std: ``clip_common.clip_preprocess``), and
the score is the diagonal of ``normalize(image_features) @ normalize(text_features).T``, the raw cosine
(HPSv2.1 scores of good images are about 0.25-0.33); no logit scale.

Optional, installed without its pins: hpsv2 1.2.0 pins pytest==7.2.0 and protobuf<4, which would downgrade
this project's test stack (pytest>=8) and onnxruntime's protobuf, so ``pip install hpsv2`` is the wrong
command; none of the pins is needed to score. ``pip install --no-deps hpsv2==1.2.0`` and the modules its
scoring path imports (read from its files: ``hpsv2/__init__.py`` imports ``hpsv2/utils.py``, which imports
``clint``; its OpenCLIP imports torchvision and ftfy) install it beside transformers 5: its OpenCLIP
imports transformers only for HF text towers, inside a try, and ViT-H-14 has none. Checked here up to
torchvision, which this project's CPU torch has no build of; so its scoring is tested on a stand-in model.
The checkpoint is a local file (``HPS_v2.1_compressed.pt``, e.g. ``hf download xswu/HPSv2
HPS_v2.1_compressed.pt``), never downloaded.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from grpo_bench.errors import UserError
from grpo_bench.rewards import register
from grpo_bench.rewards.base import FILE, Reward, RewardModelWeights, refuse_mismatched_keys
from grpo_bench.rewards.clip_common import OPENAI_CLIP_MEAN, OPENAI_CLIP_STD, VIT_H_14, clip_preprocess
from grpo_bench.rewards.compute import clip_towers
from grpo_bench.rewards.still_images import local_file, optional_module, stills

DEFAULT_CHECKPOINT = "HPS_v2.1_compressed.pt"
INSTALL = ("pip install --no-deps hpsv2==1.2.0 && pip install torchvision ftfy clint (not plain `pip install "
           "hpsv2`: it pins pytest==7.2.0 and protobuf<4, which scoring does not need)")


class HPSv2(Reward):
    """{"hps": Tensor[B]}: cos(E_img(image), E_txt(prompt)) of the HPS-tuned OpenCLIP ViT-H-14."""

    key = "hps"
    dimensions = ("hps",)
    settings = {"A": {"hps": 1.0}, "B": {"hps": 1.0}}
    modality = "image"

    def __init__(self, model: nn.Module, tokenizer: Any, device: str | torch.device = "cpu", size: int = 224) -> None:
        self.device = torch.device(device)
        self.model = model.requires_grad_(False).eval().to(self.device)
        self.tokenizer, self.size = tokenizer, size

    @torch.no_grad()
    def __call__(self, videos: Tensor, prompts: list[str]) -> dict[str, Tensor]:
        images = stills(videos, "HPSv2").to(self.device)
        pixels = clip_preprocess(images, self.size, self.size, OPENAI_CLIP_MEAN, OPENAI_CLIP_STD)
        img = F.normalize(self.model.encode_image(pixels).float(), dim=-1)
        txt = F.normalize(self.model.encode_text(self.tokenizer(prompts).to(self.device)).float(), dim=-1)
        return {self.key: (img * txt).sum(-1).cpu()}


@register(
    "hpsv2",
    path_options={"checkpoint": FILE},  # reward_path: the .pt file
    # OpenCLIP ViT-H-14: 986M parameters; precision="amp" keeps them float32 (autocast computes in 16 bits)
    model_weights=RewardModelWeights(9.86e8),
    # img_score.py:21 create_model_and_transforms('ViT-H-14', ...): one still per image; a call encodes every still
    # it is given at once (32 assumed, the CLIP family's batch)
    compute=clip_towers(VIT_H_14["vision"], VIT_H_14["text"], max_frames=1, call_images=32),
)
def hpsv2(checkpoint: str = DEFAULT_CHECKPOINT, device: str | None = None, **kw: Any) -> HPSv2:
    """HPSv2.1 from a local checkpoint file through the hpsv2 package (never downloads)."""
    from grpo_bench.rewards.videoalign import auto_device

    path = local_file(checkpoint, "HPSv2", "download it first, e.g. `hf download xswu/HPSv2 HPS_v2.1_compressed.pt`")
    open_clip = optional_module("hpsv2.src.open_clip", INSTALL, "reward hpsv2")
    model, _, _ = open_clip.create_model_and_transforms("ViT-H-14", pretrained=None, precision="amp", device="cpu",
                                                         jit=False, force_quick_gelu=False)
    state = torch.load(str(path), map_location="cpu", weights_only=True)
    state = state.get("state_dict", state) if isinstance(state, dict) else state
    try:
        missing, unexpected = model.load_state_dict(state, strict=False)
    except RuntimeError as exc:  # a tensor of another shape
        detail = str(exc).splitlines()[-1].strip()[:160]
        raise UserError(f"HPSv2 {path}: the checkpoint does not match the model ({detail})") from None
    refuse_mismatched_keys("HPSv2", path, missing, unexpected)
    return HPSv2(model, open_clip.get_tokenizer("ViT-H-14"), device=auto_device(device))

