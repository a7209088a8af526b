"""The image world's text task: vocabulary and held-out words, renderer, the exact reader (the held-out evaluator),
the PP-OCRv4 training reward and bad input (docs/image_world.md)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from grpo_bench.errors import UserError
from grpo_bench.image_world import text_checker
from grpo_bench.image_world.text_checker import check, read
from grpo_bench.image_world.text_net import NULL, column_letters
from grpo_bench.image_world.text_render import CELL, JITTER_X, JITTER_Y, WIDTH, glyphs, ink, render, start_x
from grpo_bench.image_world.words import (
    HELD_OUT_WORDS,
    LETTERS,
    MAX_LETTERS,
    PAD,
    TRAIN_WORDS,
    VOCABULARY,
    letters,
    prompt_of,
    prompts,
    word_of,
)
from grpo_bench.rewards.rapid_ocr import word_score


def _image(coverage: np.ndarray) -> torch.Tensor:
    """Ink coverage [B, H, W] -> RGB stills Tensor[B, 3, 1, H, W] in [-1, 1], as a model decodes."""
    return torch.from_numpy(1.0 - 2.0 * coverage).float()[:, None, None].expand(-1, 3, -1, -1, -1)


def test_held_out_words_are_new_arrangements_of_seen_letter_cells() -> None:
    assert not set(HELD_OUT_WORDS) & set(TRAIN_WORDS) and len(set(VOCABULARY)) == len(VOCABULARY)
    assert {len(w) for w in VOCABULARY} == set(range(3, MAX_LETTERS + 1))

    def cells(word: str) -> set[tuple[int, str]]:
        return {(start_x(len(word)) + CELL * i, c) for i, c in enumerate(word)}

    seen = set().union(*(cells(w) for w in TRAIN_WORDS))
    for word in HELD_OUT_WORDS:
        assert cells(word) <= seen, word
    assert prompts("eval") == [f'the word "{w}"' for w in HELD_OUT_WORDS]


def test_every_word_at_every_jitter_reads_back_exactly() -> None:
    """The reader finds the grid and every letter (cosine 1) wherever the renderer put the word."""
    shifts = [(dx, dy) for dx in range(-JITTER_X, JITTER_X + 1) for dy in range(-JITTER_Y, JITTER_Y + 1)]
    words = [w for i, w in enumerate(VOCABULARY) for _ in range(2)]
    coverage = np.stack([ink(w, *shifts[(7 * i) % len(shifts)]) for i, w in enumerate(words)])
    scores = check(_image(coverage), [prompt_of(w) for w in words])
    assert read(_image(coverage))[0] == words
    for column in ("ta", "correct", "letters", "length"):
        assert torch.all(scores[column] == 1), column
    for column in ("vq", "mq"):
        assert torch.allclose(scores[column], torch.ones(len(words)), atol=1e-4), column
    assert {shifts[(7 * i) % len(shifts)] for i in range(len(words))} == set(shifts)  # every jitter was drawn


def test_the_renderer_is_deterministic_and_draws_every_allowed_shift_and_no_other() -> None:
    texts = [prompt_of(w) for w in ("cat", "banana", "moon")]
    a, b = render(texts, seed=3), render(texts, seed=3)
    assert a.shape == (3, 1, 1, 32, WIDTH) and torch.equal(a, b) and not torch.equal(a, render(texts, seed=4))
    allowed = [(dx, dy) for dx in range(-JITTER_X, JITTER_X + 1) for dy in range(-JITTER_Y, JITTER_Y + 1)]
    options = torch.stack([torch.from_numpy(1 - 2 * ink("cat", dx, dy)) for dx, dy in allowed])
    drawn = render([prompt_of("cat")] * 200, seed=0)[:, 0, 0]
    distance = (drawn[:, None] - options[None]).abs().flatten(2).amax(dim=2)  # [200, shifts]
    assert torch.all(distance.min(dim=1).values < 1e-6)  # every image is one of the allowed shifts
    assert set(distance.argmin(dim=1).tolist()) == set(range(len(allowed)))  # and every shift is drawn


def test_the_reader_reads_what_is_there_not_what_was_asked() -> None:
    """Another word reads as that word (ta = the closed-form word score); a missing last letter reads as the
    prefix; a blank page reads as nothing; noise is unreadable; two glyphs mixed in one cell are rejected."""
    other = _image(np.stack([ink("bread"), ink("bread")]))
    scores = check(other, [prompt_of("dream"), prompt_of("bread")])
    assert scores["ta"].tolist() == pytest.approx([word_score("bread", "dream"), 1.0])  # 1 - 2/5
    assert scores["ta"][0] == pytest.approx(0.6)
    assert scores["letters"][0] == pytest.approx(3 / 5) and scores["length"][0] == 1

    cut = ink("candle")
    cut[:, start_x(6) + 5 * CELL:] = 0
    assert read(_image(cut[None]))[0] == ["candl"]
    blank = check(_image(np.zeros((1, 32, WIDTH), np.float32)), [prompt_of("cat")])
    assert blank["ta"].item() == 0 and blank["correct"].item() == 0

    noise = np.random.default_rng(0).uniform(0, 1, (2, 32, WIDTH)).astype(np.float32)
    words, quality = read(_image(noise))
    assert all(set(w) == {"?"} for w in words) and torch.all(quality["vq"] == 0)

    table = glyphs()
    mixed = np.zeros((1, 32, WIDTH), np.float32)
    mixed[0, :, 48:48 + CELL] = np.clip(table[LETTERS.index("o")] + table[LETTERS.index("x")], 0, 1)
    assert read(_image(mixed))[0] == ["?"]


def test_column_letters_follow_the_renderers_layout() -> None:
    cond = torch.tensor([letters("cat"), [NULL] * MAX_LETTERS])
    letter, offset = column_letters(cond)
    start = start_x(3)
    assert start == 40
    want = [PAD] * WIDTH
    for i, c in enumerate("cat"):
        want[start + CELL * i:start + CELL * (i + 1)] = [LETTERS.index(c)] * CELL
    assert letter[0].tolist() == want and torch.all(letter[1] == NULL)
    assert offset[0, start:start + CELL].tolist() == list(range(CELL))


@pytest.mark.parametrize("prompt, says", [
    ('the word "dragon"', r"the word 'dragon' is outside the vocabulary \(101 words of 3-6 letters: cat, dog"),
    ("the word cat", r"is not of the form 'the word \"<word>\"'"),
    ('the word "CAT"', "outside the vocabulary"),
])
def test_a_prompt_outside_the_vocabulary_is_one_line(prompt: str, says: str) -> None:
    with pytest.raises(UserError, match=says) as info:
        word_of(prompt)
    assert "\n" not in str(info.value) and repr(prompt) in str(info.value)
    with pytest.raises(UserError, match=says):
        render([prompt], seed=0)


def test_an_image_of_the_wrong_size_is_one_line() -> None:
    with pytest.raises(UserError, match=r"text checker: expected images Tensor\[B, 1 or 3, 1, 32, 128\].*"
                                        r"got shape \(2, 3, 1, 32, 32\)"):
        check(torch.zeros(2, 3, 1, 32, 32), [prompt_of("cat")] * 2)
    assert text_checker.COLUMNS == tuple(check(render([prompt_of("cat")], 0), [prompt_of("cat")]))


def test_the_ink_decoder_keeps_paper_and_ink_and_presses_last_step_noise_back() -> None:
    """image_world_text_ink decodes through tanh(3x)/tanh(3): odd, increasing, -1 and 1 fixed. A rendered word with
    per-pixel noise of std 0.2 (what FlowGRPO's kernel leaves at the last step) reads as nothing through the plain
    clamp and as the word through the ink decoder; a clean word reads the same through both."""
    from grpo_bench import models
    from grpo_bench.image_world.text_model import ink as ink_decoder

    x = torch.linspace(-1.5, 1.5, 61)
    y = ink_decoder(x)
    assert torch.allclose(ink_decoder(-x), -y) and bool((y.diff() >= 0).all())
    assert ink_decoder(torch.tensor([-1.0, 1.0])).tolist() == [-1.0, 1.0] and float(y.abs().max()) == 1.0
    plain, inked = models.load("image_world_text", frames=1), models.load("image_world_text_ink", frames=1)
    prompts = [prompt_of(w) for w in ("cat", "stone", "moon", "river")]
    clean = render(prompts, seed=0)
    noisy = clean + 0.2 * torch.randn(clean.shape, generator=torch.Generator().manual_seed(0))
    assert check(plain.decode(clean), prompts)["correct"].tolist() == [1.0] * 4
    assert check(inked.decode(clean), prompts)["correct"].tolist() == [1.0] * 4
    assert check(plain.decode(noisy), prompts)["correct"].tolist() == [0.0] * 4
    assert check(inked.decode(noisy), prompts)["correct"].tolist() == [1.0] * 4
    weights = plain.net.state_dict()
    assert all(torch.equal(t, weights[k]) for k, t in inked.net.state_dict().items())  # one base net, two decoders


def test_pretrain_net_rebuilds_a_plug_in_worlds_network_and_refuses_an_unknown_name(tmp_path) -> None:
    """`grpo-bench pretrain net NAME ARGS...` reaches the image world's own pretraining modules through the
    registry they fill (the core names no world): the weights it writes load as that model, with the card beside
    them recording the arguments given after NAME."""
    import json as _json

    from typer.testing import CliRunner

    from grpo_bench import models
    from grpo_bench.cli import app
    from grpo_bench.world.pretrainers import PRETRAINERS

    assert {"image_world", "image_world_text", "image_world_judge"} <= set(PRETRAINERS.names())
    out = tmp_path / "text.safetensors"
    res = CliRunner().invoke(app, ["pretrain", "net", "image_world_text", "--steps", "1", "--seed", "3",
                                   "--per-prompt", "1", "--out", str(out)])
    assert res.exit_code == 0, res.output
    card = _json.loads(out.with_suffix(".json").read_text())
    assert (card["steps"], card["seed"]) == (1, 3) and card["held_out"]["images"] == 7
    net = models.load("image_world_text", path=out, frames=1).net
    shipped = models.load("image_world_text", frames=1).net
    assert all(torch.isfinite(p).all() for p in net.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(net.parameters(), shipped.parameters()))
    res = CliRunner().invoke(app, ["pretrain", "net", "image_world_video"])
    assert isinstance(res.exception, UserError) and "allowed: image_world" in str(res.exception)
