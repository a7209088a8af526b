"""Tiny word-level tokenizers built in code, for the random tiny presets and tests.

Real checkpoints ship their tokenizers; tiny presets cannot download one, so they build a
``tokenizers`` WordLevel tokenizer over a small vocabulary (the world's prompt words plus a few
more) and wrap it in ``PreTrainedTokenizerFast``. Unknown words map to ``<unk>``.
"""

from __future__ import annotations

from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

WORDS = (
    "a an the of in on with and red green blue yellow white black circle square triangle ball cat dog monkey "
    "moving left right up down dance dancing walks runs video camera slowly fast system user assistant"
).split()


def word_tokenizer(
    specials: list[str],
    pad: str,
    eos: str | None = None,
    unk: str = "<unk>",
    append_eos: bool = False,
    chat_template: str | None = None,
    extra: list[str] | None = None,
    model_max_length: int = 512,
) -> PreTrainedTokenizerFast:
    """A whitespace/punctuation word-level tokenizer: ids 0.. are ``specials`` (in order), then words."""
    vocab: dict[str, int] = {}
    for tok in [*specials, unk, *(extra or []), *WORDS]:
        vocab.setdefault(tok, len(vocab))
    tk = Tokenizer(models.WordLevel(vocab, unk_token=unk))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    if append_eos and eos is not None:
        tk.post_processor = processors.TemplateProcessing(single=f"$A {eos}", special_tokens=[(eos, vocab[eos])])
    kwargs = {"pad_token": pad, "unk_token": unk, "model_max_length": model_max_length}
    if eos is not None:
        kwargs["eos_token"] = eos
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, chat_template=chat_template, **kwargs)
    tok.add_special_tokens({"additional_special_tokens": [s for s in specials if s not in (pad, eos)]})
    return tok
