"""The rewards tests' shared tiny random CLIP (no download), built once per module."""

from __future__ import annotations

import pytest
import torch

from grpo_bench.models._tiny_text import word_tokenizer


def tiny_clip(tok):
    from transformers import CLIPConfig, CLIPModel

    torch.manual_seed(0)
    cfg = CLIPConfig(
        text_config=dict(vocab_size=len(tok), hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                         num_attention_heads=4, max_position_embeddings=77, bos_token_id=0,
                         eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id),
        vision_config=dict(image_size=30, patch_size=6, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                           num_attention_heads=4),
        projection_dim=16,
    )
    return CLIPModel(cfg).eval()


@pytest.fixture(scope="module")
def clip_parts():
    tok = word_tokenizer(["<pad>", "</s>"], pad="<pad>", eos="</s>", append_eos=True)
    return tiny_clip(tok), tok
