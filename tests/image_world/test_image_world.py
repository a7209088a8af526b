"""The image world's task: the prompt grammar and its held-out split, the renderer, and the exact checker
(grpo_bench/image_world/, docs/image_world.md)."""

from __future__ import annotations

import pytest
import torch

from grpo_bench.errors import UserError
from grpo_bench.image_world.checker import check, read, relation_holds
from grpo_bench.image_world.grammar import HELD_OUT_RELATIONS, MIRROR, Scene, held_out_scenes, parse, prompts
from grpo_bench.image_world.render import SIZE, render, render_objects
from grpo_bench.world.vocab import COLORS, SHAPES


def test_grammar_round_trips_and_splits_are_disjoint() -> None:
    every = prompts("all")
    assert len(every) == 4 * 12 + 12 * 11 * 4 == len(set(every))
    assert all(parse(p).text() == p for p in every)
    train, evals = set(prompts("train")), prompts("eval")
    assert len(evals) == 8 and not train & set(evals)
    assert len(train) == len(every) - 12  # the 8 eval prompts and the mirrors of its 4 relations
    for a, rel, b in HELD_OUT_RELATIONS:  # "a left of b" is "b right of a": neither phrasing is trained on
        assert Scene(1, b[0], b[1], MIRROR[rel], a[0], a[1]).text() not in train
    # every word, count and relation still occurs in training: the held-out prompts test composition only
    words = {w for p in train for w in p.replace("left of", "left_of").replace("right of", "right_of").split()}
    assert {*COLORS, *(s + "s" for s in SHAPES), *SHAPES, "two", "three", "four", "left_of", "above"} <= words
    assert held_out_scenes() == {parse(p) for p in every} - {parse(p) for p in train}


@pytest.mark.parametrize("prompt, fragment", [
    ("a purple circle", "unknown colour 'purple'"),
    ("five red circles", "is not of the forms"),
    ("two red circle", "plural"),
    ("a red circle left of a red circle", "must differ"),
    ("a red hexagon above a blue square", "unknown shape 'hexagon'"),
])
def test_prompt_outside_the_grammar_is_one_clear_line(prompt: str, fragment: str) -> None:
    with pytest.raises(UserError, match=fragment) as info:
        parse(prompt)
    assert prompt in str(info.value) and "\n" not in str(info.value)


def test_checker_reads_every_rendered_scene_back_exactly() -> None:
    """The checker is the ground truth on the world's own images: every constraint of every scene it draws holds
    (two draws of all 576 prompts)."""
    every = prompts("all")
    for seed in (0, 1):
        scores = check(render(every, seed), every)
        assert scores["correct"].min() == 1.0 and scores["ta"].min() == 1.0
        assert scores["vq"].min() > 0.98


def test_checker_counts_shapes_and_positions_of_constructed_scenes() -> None:
    """Scenes placed by hand: the right count, shape and relation are read, and a wrong one is scored wrong."""
    red, blue = COLORS.index("red"), COLORS.index("blue")
    circle, square, tri = (SHAPES.index(s) for s in ("circle", "square", "triangle"))
    three = render_objects([[(red, circle, 7.0, 7.0, 3.8), (red, circle, 24.0, 8.0, 3.8),
                             (red, circle, 15.0, 24.0, 3.8)]])
    assert [(f.colour, f.shape) for f in read(three[0])] == [("red", "circle")] * 3
    got = check(three.expand(3, -1, -1, -1, -1), ["three red circles", "two red circles", "three red squares"])
    assert got["correct"].tolist() == [1.0, 0.0, 0.0]
    assert got["count"].tolist() == [1.0, 0.0, 0.0]
    assert got["shape"].tolist() == [1.0, 1.0, 0.0]
    assert got["ta"][1].item() == pytest.approx(3 / 4)  # object, colour, shape met; count not
    pair = render_objects([[(blue, square, 8.0, 16.0, 3.8), (red, tri, 24.0, 15.0, 3.8)]])
    prompts_ = ["a blue square left of a red triangle", "a red triangle left of a blue square",
                "a blue square above a red triangle"]
    got = check(pair.expand(3, -1, -1, -1, -1), prompts_)
    assert got["position"].tolist() == [1.0, 0.0, 0.0] and got["object"].tolist() == [1.0, 1.0, 1.0]
    assert torch.isnan(got["count"]).all()  # a relation prompt has no count constraint


def test_relation_is_read_on_the_dominant_axis() -> None:
    from grpo_bench.image_world.checker import Found

    a, right, below = (Found("red", "circle", x, y, 40, 1.0) for x, y in ((10, 10), (20, 13), (12, 25)))
    assert relation_holds(a, right, "left of") and relation_holds(right, a, "right of")
    assert relation_holds(a, below, "above") and relation_holds(below, a, "below")
    assert not relation_holds(a, below, "left of")


def test_debris_and_noise_lower_vq_and_break_counts() -> None:
    clean = render(["two blue triangles"], 3)
    noisy = (clean + 0.8 * torch.randn(clean.shape, generator=torch.Generator().manual_seed(0))).clamp(-1, 1)
    c, n = check(clean, ["two blue triangles"]), check(noisy, ["two blue triangles"])
    assert c["vq"].item() == pytest.approx(1.0, abs=0.02) and n["vq"].item() < 0.8
    assert n["manifold"].item() > c["manifold"].item()


def test_image_of_the_wrong_size_is_one_clear_line() -> None:
    with pytest.raises(UserError, match=rf"Tensor\[B, 3, 1, {SIZE}, {SIZE}\].*got shape \(1, 3, 1, 16, 16\)"):
        check(torch.zeros(1, 3, 1, 16, 16), ["a red circle"])
    with pytest.raises(UserError, match="2 images but 1 prompts"):
        check(torch.zeros(2, 3, 1, SIZE, SIZE), ["a red circle"])


def test_render_is_deterministic_per_seed_and_in_range() -> None:
    a, b, c = render(["four green squares"], 5), render(["four green squares"], 5), render(["four green squares"], 6)
    assert a.shape == (1, 3, 1, SIZE, SIZE) and torch.equal(a, b) and not torch.equal(a, c)
    assert a.min() >= -1 and a.max() <= 1
