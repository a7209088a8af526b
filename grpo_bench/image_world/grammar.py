"""The image world's prompt grammar: counts of one object kind, or two objects in a relative position.

    <count-prompt>    := "a <colour> <shape>" | "<two|three|four> <colour> <shape>s"
    <relation-prompt> := "a <colour> <shape> <left of|right of|above|below> a <colour> <shape>"

Colours and shapes are the video world's (grpo_bench/world/vocab.py), so both worlds share a palette. The two
objects of a relation prompt differ in colour or shape (else "which one is left" has no answer).

Held out of pretraining and RL (evaluation only): four count combinations (count >= 2) and four relations, each
relation with its mirrored phrasing ("a left of b" is "b right of a"), so the model never saw the scene under
another wording. Every word, count and relation still occurs in training: the held-out prompts test composition.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from grpo_bench.errors import UserError
from grpo_bench.world.vocab import COLORS, SHAPES

COUNT_WORDS = ("a", "two", "three", "four")  # index + 1 objects
RELATIONS = ("left of", "right of", "above", "below")
MIRROR = {"left of": "right of", "right of": "left of", "above": "below", "below": "above"}
NONE = "none"

HELD_OUT_COUNTS = (
    (2, "red", "square"),
    (3, "green", "circle"),
    (4, "blue", "triangle"),
    (3, "yellow", "square"),
)
HELD_OUT_RELATIONS = (
    (("red", "circle"), "left of", ("blue", "square")),
    (("green", "triangle"), "above", ("yellow", "circle")),
    (("blue", "circle"), "right of", ("red", "triangle")),
    (("yellow", "square"), "below", ("green", "square")),
)


@dataclass(frozen=True)
class Scene:
    """What a prompt asks for: ``count`` objects of (colour, shape), or one of each of two kinds in ``relation``
    (``relation`` NONE and ``colour2``/``shape2`` NONE for a count prompt)."""

    count: int
    colour: str
    shape: str
    relation: str = NONE
    colour2: str = NONE
    shape2: str = NONE

    @property
    def is_relation(self) -> bool:
        return self.relation != NONE

    def text(self) -> str:
        if self.is_relation:
            return f"a {self.colour} {self.shape} {self.relation} a {self.colour2} {self.shape2}"
        if self.count == 1:
            return f"a {self.colour} {self.shape}"
        return f"{COUNT_WORDS[self.count - 1]} {self.colour} {self.shape}s"

    def cond(self) -> tuple[int, int, int, int, int, int]:
        """Part indices (count, colour, shape, relation, colour2, shape2); a relation's 0 is 'none' and the
        second object's last index is 'none' (PART_SIZES)."""
        return (self.count - 1, COLORS.index(self.colour), SHAPES.index(self.shape),
                (RELATIONS.index(self.relation) + 1) if self.is_relation else 0,
                COLORS.index(self.colour2) if self.is_relation else len(COLORS),
                SHAPES.index(self.shape2) if self.is_relation else len(SHAPES))


PART_SIZES = (len(COUNT_WORDS), len(COLORS), len(SHAPES), len(RELATIONS) + 1, len(COLORS) + 1, len(SHAPES) + 1)
"""Vocabulary size of each conditioning part (its null token for guidance is index == size)."""

_WORD = r"([a-z]+)"
_COUNT = re.compile(rf"^(a|an|two|three|four) {_WORD} {_WORD}$")
_RELATION = re.compile(rf"^an? {_WORD} {_WORD} (left of|right of|above|below) an? {_WORD} {_WORD}$")
FORMS = ("'a <colour> <shape>'", "'<two|three|four> <colour> <shape>s'",
         "'a <colour> <shape> <left of|right of|above|below> a <colour> <shape>'")


def _vocab() -> str:
    return f"colours {', '.join(COLORS)}; shapes {', '.join(SHAPES)}; relations {', '.join(RELATIONS)}"


def _word(prompt: str, word: str, allowed: tuple[str, ...], what: str) -> str:
    if word not in allowed:
        raise UserError(f"image-world prompt {prompt!r}: unknown {what} {word!r} ({_vocab()})")
    return word


def parse(prompt: str) -> Scene:
    """The scene a prompt asks for; one line naming the prompt, the word and the vocabulary otherwise."""
    text = " ".join(str(prompt).strip().lower().split())
    m = _RELATION.match(text)
    if m:
        c1, s1, rel, c2, s2 = m.groups()
        scene = Scene(1, _word(prompt, c1, COLORS, "colour"), _word(prompt, s1, SHAPES, "shape"), rel,
                      _word(prompt, c2, COLORS, "colour"), _word(prompt, s2, SHAPES, "shape"))
        if (c1, s1) == (c2, s2):
            raise UserError(f"image-world prompt {prompt!r}: the two objects must differ in colour or shape")
        return scene
    m = _COUNT.match(text)
    if not m:
        raise UserError(f"image-world prompt {prompt!r} is not of the forms {', '.join(FORMS)} ({_vocab()})")
    count_word, colour, shape = m.groups()
    count = 1 if count_word in ("a", "an") else COUNT_WORDS.index(count_word) + 1
    if count > 1:
        if not shape.endswith("s"):
            raise UserError(f"image-world prompt {prompt!r}: a count above one takes the plural ({shape}s)")
        shape = shape[:-1]
    return Scene(count, _word(prompt, colour, COLORS, "colour"), _word(prompt, shape, SHAPES, "shape"))


def every_scene() -> list[Scene]:
    """All 48 count scenes, then all 528 relation scenes, in a fixed order."""
    objects = [(c, s) for c in COLORS for s in SHAPES]
    counts = [Scene(n, c, s) for n in range(1, len(COUNT_WORDS) + 1) for c, s in objects]
    relations = [Scene(1, a[0], a[1], r, b[0], b[1]) for a in objects for r in RELATIONS for b in objects if a != b]
    return counts + relations


def eval_scenes() -> list[Scene]:
    """The held-out scenes evaluation scores, in their stated phrasing (4 counts, then 4 relations)."""
    return [Scene(n, c, s) for n, c, s in HELD_OUT_COUNTS] + [
        Scene(1, a[0], a[1], r, b[0], b[1]) for a, r, b in HELD_OUT_RELATIONS]


def held_out_scenes() -> set[Scene]:
    """Every scene kept out of training: the eval scenes and the mirrored phrasing of each held-out relation."""
    held = set(eval_scenes())
    held |= {Scene(1, a[0], a[1], MIRROR[r], b[0], b[1]) for b, r, a in HELD_OUT_RELATIONS}
    return held


SPLITS = ("train", "eval", "all")


def prompts(split: str = "train") -> list[str]:
    """The prompts of a split: 'train' (564: every scene not held out), 'eval' (the 8 held-out) or 'all' (576)."""
    if split not in SPLITS:
        raise UserError(f"unknown image-world prompt split {split!r}; allowed: {', '.join(SPLITS)}")
    if split == "eval":
        return [s.text() for s in eval_scenes()]
    held = held_out_scenes()
    return [s.text() for s in every_scene() if split == "all" or s not in held]
