"""The image world's text task: prompts asking for one short lowercase word, from a fixed vocabulary with words
held out for evaluation.

    <text-prompt> := 'the word "<word>"'

The word is quoted so that the project's OCR rewards (rewards/ocr.py ``quoted``) find it as they find flow_grpo's
text-rendering prompts. Words have 3 to MAX_LETTERS letters. The renderer (text_render.py) centres a word in
fixed-width letter cells, so a letter's place in the image depends on the word's length and its index; every
(cell, letter) of a held-out word occurs in some training word (tests/image_world/test_image_world_text.py): the
held-out words test composition, not unseen letters.
"""

from __future__ import annotations

import re
import string

from grpo_bench.errors import UserError

LETTERS = string.ascii_lowercase
MAX_LETTERS = 6
TRAIN_WORDS = (
    "cat dog sun red box car hat pen cup map bus fox owl bee egg ink jam key leg mud net oak pig rat sea tea toy "
    "van web zip fan log "
    "bird fish tree star boat cake door frog gold hand kite lamp milk nest park rain ship sock wind yarn blue jump "
    "west ring bell coat "
    "apple bread chair cloud dream earth flame grape house juice lemon mango night ocean queen river tiger water "
    "zebra sweet plant "
    "banana candle garden island jacket kitten market orange pencil rabbit silver window yellow basket bottle"
).split()
HELD_OUT_WORDS = ("hen", "pot", "moon", "sand", "stone", "piano", "planet")
"""Two words of each length 3-5 and one of 6, never seen in pretraining or RL."""
VOCABULARY = tuple(TRAIN_WORDS) + HELD_OUT_WORDS
FORM = "'the word \"<word>\"'"
_PROMPT = re.compile(r'^the word "([^"]*)"$')
PAD = len(LETTERS)
"""The letter index of an empty letter slot (a word shorter than MAX_LETTERS)."""


def _vocabulary_hint() -> str:
    shown = ", ".join(VOCABULARY[:6])
    return f"{len(VOCABULARY)} words of 3-{MAX_LETTERS} letters: {shown}, ..., in grpo_bench/image_world/words.py"


def word_of(prompt: str) -> str:
    """The word a text prompt asks for; one line naming the prompt and the vocabulary otherwise."""
    m = _PROMPT.match(" ".join(str(prompt).strip().split()))
    if not m:
        raise UserError(f"image-world text prompt {prompt!r} is not of the form {FORM}")
    word = m.group(1)
    if word not in VOCABULARY:
        raise UserError(f"image-world text prompt {prompt!r}: the word {word!r} is outside the vocabulary "
                        f"({_vocabulary_hint()})")
    return word


def prompt_of(word: str) -> str:
    return f'the word "{word}"'


def letters(word: str) -> tuple[int, ...]:
    """The word's letter indices, padded with PAD to MAX_LETTERS (the model's conditioning)."""
    return tuple(LETTERS.index(c) for c in word) + (PAD,) * (MAX_LETTERS - len(word))


SPLITS = ("train", "eval", "all")


def prompts(split: str = "train") -> list[str]:
    """The prompts of a split: 'train' (every word not held out), 'eval' (the held-out words) or 'all'."""
    if split not in SPLITS:
        raise UserError(f"unknown image-world text prompt split {split!r}; allowed: {', '.join(SPLITS)}")
    words = {"train": TRAIN_WORDS, "eval": HELD_OUT_WORDS, "all": VOCABULARY}[split]
    return [prompt_of(w) for w in words]
