"""VideoAlign (VideoReward) inputs: frame sampling, Qwen2-VL video patches and the prompt, as the
reference inference builds them (KwaiVGI/VideoAlign ``inference.py`` + ``vision_process.py``,
``prompt_template.py``), in torch and batched.

Frames: the reference writes each video to mp4 and reads it back with ``fps`` from the checkpoint's
data_config (2.0 for the released checkpoint): n = round_2(F / source_fps * fps) clamped to
[4, F] (``smart_nframes``), indices ``linspace(0, F-1, n).round()`` (``sample_type: uniform``);
with ``num_frames`` set in data_config, n = round_2(num_frames). Pixels are quantised to uint8 as
the mp4 round trip does (codec loss is not modelled). Each frame is resized (bicubic, antialiased)
to ``smart_resize(H, W, 28, min_pixels = 128*28*28, max_pixels = data_config.max_frame_pixels)``.
The Qwen2-VL processor then rescales by 1/255, normalises with the CLIP mean/std and cuts
2 x 14 x 14 patches (temporal x spatial), which ``patchify`` reproduces exactly.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

IMAGE_FACTOR = 28
VIDEO_MIN_PIXELS = 128 * 28 * 28
FRAME_FACTOR = 2
FPS_MIN_FRAMES = 4
FPS_MAX_FRAMES = 768
QWEN_MEAN = (0.48145466, 0.4578275, 0.40821073)
QWEN_STD = (0.26862954, 0.26130258, 0.27577711)
SPECIAL_TOKENS = ("<|VQ_reward|>", "<|MQ_reward|>", "<|TA_reward|>")

# Qwen2-VL's chat template for one user turn [video, text] (its default system message included).
CHAT = (
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
    "<|vision_start|><|video_pad|><|vision_end|>{text}<|im_end|>\n<|im_start|>assistant\n"
)

# VideoAlign prompt_template.py, DETAILED_PROMPT_WITH_SPECIAL_TOKEN (template "detailed_special").
DETAILED_PROMPT_WITH_SPECIAL_TOKEN = """
You are tasked with evaluating a generated video based on three distinct criteria: Visual Quality, Motion Quality, and Text Alignment. Please provide a rating from 0 to 10 for each of the three categories, with 0 being the worst and 10 being the best. Each evaluation should be independent of the others.

**Visual Quality:**  
Evaluate the overall visual quality of the video, with a focus on static factors. The following sub-dimensions should be considered:
- **Reasonableness:** The video should not contain any significant biological or logical errors, such as abnormal body structures or nonsensical environmental setups.
- **Clarity:** Evaluate the sharpness and visibility of the video. The image should be clear and easy to interpret, with no blurring or indistinct areas.
- **Detail Richness:** Consider the level of detail in textures, materials, lighting, and other visual elements (e.g., hair, clothing, shadows).
- **Aesthetic and Creativity:** Assess the artistic aspects of the video, including the color scheme, composition, atmosphere, depth of field, and the overall creative appeal. The scene should convey a sense of harmony and balance.
- **Safety:** The video should not contain harmful or inappropriate content, such as political, violent, or adult material. If such content is present, the image quality and satisfaction score should be the lowest possible. 

Please provide the ratings of Visual Quality: <|VQ_reward|>
END

**Motion Quality:**  
Assess the dynamic aspects of the video, with a focus on dynamic factors. Consider the following sub-dimensions:
- **Stability:** Evaluate the continuity and stability between frames. There should be no sudden, unnatural jumps, and the video should maintain stable attributes (e.g., no fluctuating colors, textures, or missing body parts).
- **Naturalness:** The movement should align with physical laws and be realistic. For example, clothing should flow naturally with motion, and facial expressions should change appropriately (e.g., blinking, mouth movements).
- **Aesthetic Quality:** The movement should be smooth and fluid. The transitions between different motions or camera angles should be seamless, and the overall dynamic feel should be visually pleasing.
- **Fusion:** Ensure that elements in motion (e.g., edges of the subject, hair, clothing) blend naturally with the background, without obvious artifacts or the feeling of cut-and-paste effects.
- **Clarity of Motion:** The video should be clear and smooth in motion. Pay attention to any areas where the video might have blurry or unsteady sections that hinder visual continuity.
- **Amplitude:** If the video is largely static or has little movement, assign a low score for motion quality.

Please provide the ratings of Motion Quality: <|MQ_reward|>
END

**Text Alignment:**  
Assess how well the video matches the textual prompt across the following sub-dimensions:
- **Subject Relevance** Evaluate how accurately the subject(s) in the video (e.g., person, animal, object) align with the textual description. The subject should match the description in terms of number, appearance, and behavior.
- **Motion Relevance:** Evaluate if the dynamic actions (e.g., gestures, posture, facial expressions like talking or blinking) align with the described prompt. The motion should match the prompt in terms of type, scale, and direction.
- **Environment Relevance:** Assess whether the background and scene fit the prompt. This includes checking if real-world locations or scenes are accurately represented, though some stylistic adaptation is acceptable.  
- **Style Relevance:** If the prompt specifies a particular artistic or stylistic style, evaluate how well the video adheres to this style.
- **Camera Movement Relevance:** Check if the camera movements (e.g., following the subject, focus shifts) are consistent with the expected behavior from the prompt.

Textual prompt - {text_prompt}
Please provide the ratings of Text Alignment: <|TA_reward|>
END
"""


def round_by(x: float, f: int) -> int:
    return round(x / f) * f


def smart_nframes(total: int, source_fps: float, fps: float | None, num_frames: int | None) -> int:
    """Frames the reference feeds the model (vision_process.smart_nframes)."""
    if num_frames is not None:
        n = round_by(num_frames, FRAME_FACTOR)
    else:
        lo = math.ceil(FPS_MIN_FRAMES / FRAME_FACTOR) * FRAME_FACTOR
        hi = math.floor(min(FPS_MAX_FRAMES, total) / FRAME_FACTOR) * FRAME_FACTOR
        n = round_by(min(max(total / source_fps * fps, lo), hi), FRAME_FACTOR)
    return max(min(n, total), 1)


def smart_resize(h: int, w: int, min_pixels: int, max_pixels: int, factor: int = IMAGE_FACTOR) -> tuple[int, int]:
    """vision_process.smart_resize: sides multiples of 28, area within [min_pixels, max_pixels]."""
    hb, wb = max(factor, round_by(h, factor)), max(factor, round_by(w, factor))
    if hb * wb > max_pixels:
        beta = math.sqrt(h * w / max_pixels)
        hb, wb = math.floor(h / beta / factor) * factor, math.floor(w / beta / factor) * factor
    elif hb * wb < min_pixels:
        beta = math.sqrt(min_pixels / (h * w))
        hb, wb = math.ceil(h * beta / factor) * factor, math.ceil(w * beta / factor) * factor
    return hb, wb


def prepare_frames(video: Tensor, source_fps: float, fps: float | None, num_frames: int | None,
                   min_pixels: int, max_pixels: int) -> Tensor:
    """One video Tensor[3, F, H, W] in [-1, 1] -> sampled, resized frames Tensor[n, 3, h, w] in [0, 255]."""
    total, (h, w) = video.shape[1], video.shape[-2:]
    n = smart_nframes(total, source_fps, fps, num_frames)
    idx = torch.linspace(0, total - 1, n).round().long()
    frames = ((video[:, idx].transpose(0, 1).float().clamp(-1, 1) + 1) * 127.5).round()  # uint8 levels
    rh, rw = smart_resize(h, w, min_pixels, max_pixels)
    return F.interpolate(frames, size=(rh, rw), mode="bicubic", antialias=True, align_corners=False)


def patchify(frames: Tensor, patch: int = 14, temporal: int = 2, merge: int = 2) -> tuple[Tensor, Tensor]:
    """Qwen2-VL video patches from frames Tensor[n, 3, h, w] in [0, 255]:
    (pixel_values_videos Tensor[t*gh*gw, 3*temporal*patch*patch], grid_thw LongTensor[3])."""
    x = frames / 255.0
    x = (x - torch.tensor(QWEN_MEAN, device=x.device).view(1, 3, 1, 1)) / torch.tensor(QWEN_STD, device=x.device).view(1, 3, 1, 1)
    if x.shape[0] % temporal:  # the processor repeats the last frame
        x = torch.cat([x, x[-1:].expand(temporal - x.shape[0] % temporal, -1, -1, -1)])
    n, c, h, w = x.shape
    gt, gh, gw = n // temporal, h // patch, w // patch
    x = x.reshape(gt, temporal, c, gh // merge, merge, patch, gw // merge, merge, patch)
    x = x.permute(0, 3, 6, 4, 7, 2, 1, 5, 8)
    return x.reshape(gt * gh * gw, c * temporal * patch * patch), torch.tensor([gt, gh, gw])


def build_text(prompt: str, video_tokens: int) -> str:
    """The chat text with the detailed prompt and ``video_tokens`` <|video_pad|> placeholders."""
    text = DETAILED_PROMPT_WITH_SPECIAL_TOKEN.format(text_prompt=prompt)
    return CHAT.format(text=text).replace("<|video_pad|>", "<|video_pad|>" * video_tokens)
