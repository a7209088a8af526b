"""The text task through the core's protocols: its model's defaults, every method training on it, its PP-OCRv4
reward and its exact reader as the evaluation oracle, and bad input in one line (docs/image_world.md)."""

from __future__ import annotations

import importlib
import json
import math
from importlib import metadata

import pytest
import torch

from grpo_bench import models, rewards
from grpo_bench.config.identity import asset_digests, file_digest
from grpo_bench.config.run import from_dict
from grpo_bench.core.method import METHODS
from grpo_bench.errors import UserError
from grpo_bench.image_world.text_model import DEFAULT_WEIGHTS, load_text_weights, save_text_weights
from grpo_bench.image_world.text_net import TextUNetConfig
from grpo_bench.image_world.text_render import ink, render
from grpo_bench.image_world.text_reward import letters_only
from grpo_bench.image_world.words import prompt_of, prompts
from grpo_bench.rewards import rapid_ocr
from grpo_bench.train.trainer import train

TINY_NET = TextUNetConfig(channels=(8, 8, 8), emb_dim=16, map_dim=4, mid_blocks=1, groups=4)
RUN = {"model": "image_world_text", "steps": 6, "prompts_per_update": 2, "group_size": 2, "updates": 2,
       "eval_every": 2, "minibatches": 2, "eval_samples": 1, "diag_every": 0, "checkpoint_every": 10,
       "device": "cpu", "lr": 1e-3, "save_videos": False, "kl_warmup": 1, "threads": 1}


def test_the_text_model_brings_its_own_defaults_and_registrations() -> None:
    cfg = from_dict({"model": "image_world_text"})
    assert (cfg.frames, cfg.video_size, cfg.prompts, cfg.reward, cfg.eval_oracle) == (
        1, 32, "image_world_text", "image_world_ocr", True)
    assert models.modality("image_world_text") == "image"
    assert rewards.declares_ground_truth("image_world_text") and rewards.is_ground_truth("image_world_text_oracle")
    assert not rewards.is_ground_truth("image_world_ocr")  # the OCR trains; the exact reader evaluates
    assert asset_digests(cfg.model, cfg.reward) == {"model": file_digest(DEFAULT_WEIGHTS)}


def test_bad_text_config_is_one_line() -> None:
    with pytest.raises(UserError, match="model 'image_world_text' makes 32x128 images: use video_size: 32") as info:
        from_dict({"model": "image_world_text", "video_size": 16}, "cfg.yaml: ")
    assert str(info.value).startswith("cfg.yaml: ") and "\n" not in str(info.value)


@pytest.mark.parametrize("method", sorted(METHODS.names()))
def test_every_method_trains_on_the_text_task(method: str, tmp_path) -> None:
    """Two updates of each method on a tiny text net, trained on the exact reader (fast; the OCR reward's own run
    is below); the evaluation reports the reader's columns on the held-out words."""
    cfg = from_dict({**RUN, "method": method, "reward": "image_world_text_oracle",
                     **({"kl": "none"} if method == "diffusion_nft" else {})})
    torch.manual_seed(0)
    model = models.build("image_world_text", config=TINY_NET)
    before = {k: v.clone() for k, v in model.net.state_dict().items()}
    final = train(cfg, tmp_path / "run", model=model, reward=rewards.load(cfg.reward))
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["update"] for r in rows] == [0, 1]
    assert all(math.isfinite(r["reward"]) and 0 <= r["reward"] <= 3 for r in rows)
    moved = max(float((model.net.state_dict()[k] - v).abs().max()) for k, v in before.items())
    assert 0 < moved < 0.1
    ev = final["eval"]
    assert 0 <= ev["eval_oracle_ta"] <= 1 and 0 <= ev["eval_correct"] <= 1 and math.isfinite(ev["eval_manifold"])
    assert {v["prompt"] for v in final["eval_videos"]} == set(prompts("eval"))


def test_a_run_trains_on_the_ocr_reward(tmp_path) -> None:
    cfg = from_dict({**RUN, "method": "flow_grpo", "updates": 1, "eval_every": 1})
    assert cfg.reward == "image_world_ocr"
    final = train(cfg, tmp_path / "run", model=models.build("image_world_text", config=TINY_NET),
                  reward=rewards.load(cfg.reward))
    row = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert 0 <= row["reward"] <= 1 and 0 <= final["eval"]["eval_reward"] <= 1


def test_the_ocr_reward_reads_rendered_words_and_not_a_blank_page() -> None:
    words = ["cat", "garden", "queen", "stone"]
    texts = [prompt_of(w) for w in words]
    reward = rewards.load("image_world_ocr")
    images = render(texts, seed=0).expand(-1, 3, -1, -1, -1)
    assert reward(images, texts)["ocr"].tolist() == [1.0] * 4
    assert reward(torch.ones(2, 3, 1, 32, 128), texts[:2])["ocr"].tolist() == [0.0, 0.0]
    swapped = torch.from_numpy(1 - 2 * ink("bread"))[None, None, None].expand(1, 3, -1, -1, -1)
    assert reward(swapped, [prompt_of("dream")])["ocr"].item() == pytest.approx(0.6)  # 1 - 2/5
    with pytest.raises(UserError, match=r"reward image_world_ocr: expected images .* got shape \(1, 3, 1, 32, 32\)"):
        reward(torch.zeros(1, 3, 1, 32, 32), texts[:1])


def test_the_exact_ocr_reward_scores_one_only_for_the_whole_word() -> None:
    """image_world_ocr_exact reads as image_world_ocr does and gives 1 for the word, 0 for any other reading: a
    rendered word 1, a blank page 0, a word three letters apart from the prompt's 0 (its word score: 0.6)."""
    exact = rewards.load("image_world_ocr_exact")
    assert exact.dimensions == ("ocr_exact",) and not rewards.is_ground_truth("image_world_ocr_exact")
    texts = [prompt_of(w) for w in ["cat", "garden", "queen"]]
    images = render(texts, seed=1).expand(-1, 3, -1, -1, -1)
    assert exact(images, texts)["ocr_exact"].tolist() == [1.0] * 3
    assert exact(torch.ones(1, 3, 1, 32, 128), texts[:1])["ocr_exact"].tolist() == [0.0]
    swapped = torch.from_numpy(1 - 2 * ink("bread"))[None, None, None].expand(1, 3, -1, -1, -1)
    assert exact(swapped, [prompt_of("dream")])["ocr_exact"].item() == 0.0
    cfg = from_dict({**RUN, "method": "flow_grpo", "reward": "image_world_ocr_exact"})
    assert cfg.reward == "image_world_ocr_exact"


def test_the_ocr_probability_is_the_chance_of_the_exact_reading_over_the_task_letters() -> None:
    """image_world_ocr_prob: PP-OCRv4's per-frame characters merged onto blank + a-z (every case and width form of a
    letter one class; what ``letters_only`` drops, and a character that reduces to two letters, the blank), then the
    CTC chance of the word: in [0, 1], highest under the word's own prompt, about 0 on a blank page."""
    from grpo_bench.image_world.text_reward import letter_classes

    classes = letter_classes(("blank", "a", "A", "\uff41", " ", "\u00e4", "1", "\ufb01", "z"))
    assert classes.argmax(1).tolist() == [0, 1, 1, 1, 0, 0, 0, 0, 26] and classes.sum(1).tolist() == [1.0] * 9
    prob = rewards.load("image_world_ocr_prob")
    assert prob.dimensions == ("ocr_prob",) and not rewards.is_ground_truth("image_world_ocr_prob")
    words = ["cat", "garden", "queen"]
    images = render([prompt_of(w) for w in words], seed=1).expand(-1, 3, -1, -1, -1)
    scores = torch.stack([prob(images, [prompt_of(w)] * 3)["ocr_prob"] for w in words])  # [asked, drawn]
    assert ((scores >= 0) & (scores <= 1)).all() and (scores.argmax(1) == torch.arange(3)).all()
    assert scores.diagonal().min() > 0.3 and (scores.sum(1) - scores.diagonal()).max() < 1e-3
    assert prob(torch.ones(1, 3, 1, 32, 128), [prompt_of("cat")])["ocr_prob"].item() < 1e-3


def test_the_reading_keeps_only_the_tasks_alphabet() -> None:
    assert letters_only("äcaｒ") == "car" and letters_only("äjam²") == "jam" and letters_only("B o X") == "box"


@pytest.mark.parametrize("version, says", [
    (None, r"OCR needs the rapidocr-onnxruntime package, which is not installed; pip install"),
    ("1.3.2", r"OCR supports rapidocr-onnxruntime >=1.3.5,<2, found 1.3.2"),
])
def test_a_missing_or_wrong_ocr_package_is_one_line(monkeypatch, version: str | None, says: str) -> None:
    def fake(name: str) -> str:
        if name != rapid_ocr.DISTRIBUTION:
            return real(name)
        if version is None:
            raise metadata.PackageNotFoundError(name)
        return version

    real = metadata.version
    rewards.load("image_world_ocr")  # the engine is now built and cached: the check must not rely on building it
    monkeypatch.setattr(metadata, "version", fake)
    with pytest.raises(UserError, match=says) as info:
        rewards.load("image_world_ocr")
    assert "\n" not in str(info.value)


def test_text_weights_round_trip_and_a_corrupt_file_is_one_line(tmp_path) -> None:
    model = models.build("image_world_text", config=TINY_NET)
    path = tmp_path / "w.safetensors"
    save_text_weights(model.net, path)
    again = load_text_weights(path)
    assert all(torch.equal(a, b) for a, b in zip(model.net.state_dict().values(), again.state_dict().values()))
    assert models.load("image_world_text", path=path).net.config == TINY_NET
    path.write_bytes(b"not safetensors")
    with pytest.raises(UserError, match=r"w.safetensors are corrupt or incompatible.*text_pretrain --out"):
        load_text_weights(path)


@pytest.mark.parametrize("model, prompt, reward, training", [
    ("image_world_text", 'the word "moon"', None, "ocr"),
    ("image_world", "three green circles", "image_world_oracle", None),
    ("image_world", "a red circle left of a blue square", "image_world_judge", None),
])
def test_sample_writes_png_strips_of_either_task(model: str, prompt: str, reward: str | None, training: str | None,
                                                 tmp_path) -> None:
    """``grpo-bench sample --model image_world[_text]``: a PNG grid and a labelled strip, each image scored as a run
    evaluates it: the task's oracle (the columns its prompt poses: those it scores on a rendered scene of the same
    prompt) and its training reward where that is not the oracle, then ``--reward``, whose colliding columns are
    prefixed with its label."""
    from PIL import Image

    from grpo_bench.cli.sample_generator import run_model_sample
    from grpo_bench.core.sde import make_kernel

    out = tmp_path / "s.png"
    result = run_model_sample(model, prompt, 2, 4, 3.0, make_kernel("ode"), 1.0, 0, out, reward=reward)
    grid, strip = Image.open(out), Image.open(tmp_path / "s_strip.png")
    height, width = models.load(model).latent_shape[-2:]
    factor = max(1, 128 // height)  # media.upscale_factor
    assert grid.size == ((2 * width + 2) * factor, height * factor) and strip.size[0] > grid.size[0] // 2
    defaults = models.MODELS.get(model).run_defaults
    render = importlib.import_module("grpo_bench.image_world.text_render" if model.endswith("text")
                                     else "grpo_bench.image_world.render").render
    posed = [k for k, v in rewards.ground_truth(defaults["prompts"]).ground_truth(render([prompt], 0), [prompt]).items()
             if not v.isnan().all()]
    extra = [training] if training else []
    extra += [f"judge.{k}" for k in ("vq", "mq", "ta")] if reward == "image_world_judge" else []
    assert list(result["scores"]) == posed + extra
    assert all(len(v) == 2 and all(math.isfinite(x) for x in v) for v in result["scores"].values())
    assert all(0 <= x <= 1 for k in ("ta", "correct", *([training] if training else [])) for x in result["scores"][k])


def test_an_image_model_asked_for_frames_is_one_line() -> None:
    with pytest.raises(UserError, match=r"model 'image_world_text' makes still images \(32x128, one frame\), not 8"):
        models.load("image_world_text", frames=8)
