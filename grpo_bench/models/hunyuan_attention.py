"""A memory-efficient attention processor for HunyuanVideo 1.5 (same outputs, no L x L mask).

diffusers' ``HunyuanVideo15AttnProcessor2_0`` turns the per-token padding mask m: [B, L] into a
dense boolean ``[B, 1, L, L]`` mask ``m_i & m_j`` (at 480p x 81 frames L is about 35k tokens: 1.2
GB per video and per layer, and it rules out the flash kernels). For every *valid* query i that mask
row is exactly m_j, the key-padding mask; rows of padded queries differ, but padded text tokens
are never attended to by any valid token (they are masked as keys in every layer) and are not part
of the transformer's video output. So this processor passes the key-padding mask as a broadcast
``[B, 1, 1, L]`` mask (SDPA's memory-efficient kernel takes it; no L x L tensor). The mask is passed
whenever the transformer gives one, even when nothing is padded: deciding that would read the mask's
values on the host, a device synchronisation in every attention call (the text streams are padded to
fixed lengths, so in practice there is always padding). The velocity is unchanged; a test compares both
processors, another that a call reads nothing back to the host.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F


class KeyPaddingAttnProcessor:
    """Drop-in for ``HunyuanVideo15AttnProcessor2_0`` with a [B, 1, 1, L] key mask."""

    _attention_backend = None
    _parallel_config = None

    def __call__(self, attn: Any, hidden_states: torch.Tensor, encoder_hidden_states: torch.Tensor | None = None,
                 attention_mask: torch.Tensor | None = None, image_rotary_emb: torch.Tensor | None = None) -> Any:
        from diffusers.models.attention_dispatch import dispatch_attention_fn
        from diffusers.models.embeddings import apply_rotary_emb

        query = attn.norm_q(attn.to_q(hidden_states).unflatten(2, (attn.heads, -1)))
        key = attn.norm_k(attn.to_k(hidden_states).unflatten(2, (attn.heads, -1)))
        value = attn.to_v(hidden_states).unflatten(2, (attn.heads, -1))
        if image_rotary_emb is not None:
            query = apply_rotary_emb(query, image_rotary_emb, sequence_dim=1)
            key = apply_rotary_emb(key, image_rotary_emb, sequence_dim=1)
        if encoder_hidden_states is not None:
            eq = attn.add_q_proj(encoder_hidden_states).unflatten(2, (attn.heads, -1))
            ek = attn.add_k_proj(encoder_hidden_states).unflatten(2, (attn.heads, -1))
            ev = attn.add_v_proj(encoder_hidden_states).unflatten(2, (attn.heads, -1))
            if attn.norm_added_q is not None:
                eq = attn.norm_added_q(eq)
            if attn.norm_added_k is not None:
                ek = attn.norm_added_k(ek)
            query, key, value = torch.cat([query, eq], 1), torch.cat([key, ek], 1), torch.cat([value, ev], 1)
        batch, seq_len = query.shape[:2]
        mask = None
        if attention_mask is not None:  # no host sync: the mask is never inspected, only reshaped
            keys = F.pad(attention_mask, (seq_len - attention_mask.shape[1], 0), value=True).bool()  # [B, L]
            mask = keys.view(batch, 1, 1, seq_len)  # broadcast over heads and queries: no L x L tensor
        out = dispatch_attention_fn(query, key, value, attn_mask=mask, dropout_p=0.0, is_causal=False,
                                    backend=self._attention_backend, parallel_config=self._parallel_config)
        out = out.flatten(2, 3).to(query.dtype)
        if encoder_hidden_states is None:  # as diffusers' processor: no output projection here
            return out, None
        n_text = encoder_hidden_states.shape[1]
        out, enc = out[:, :-n_text], out[:, -n_text:]
        if getattr(attn, "to_out", None) is not None:
            out = attn.to_out[1](attn.to_out[0](out))
        if getattr(attn, "to_add_out", None) is not None:
            enc = attn.to_add_out(enc)
        return out, enc


def use_key_padding_attention(transformer: torch.nn.Module) -> int:
    """Install the processor on every attention module that uses diffusers' HunyuanVideo 1.5 one;
    returns how many were replaced."""
    from diffusers.models.transformers.transformer_hunyuan_video15 import (
        HunyuanVideo15AttnProcessor2_0,
    )

    replaced = 0
    for module in transformer.modules():
        if isinstance(getattr(module, "processor", None), HunyuanVideo15AttnProcessor2_0):
            module.set_processor(KeyPaddingAttnProcessor())
            replaced += 1
    return replaced
