"""Rewards of still images: PickScore and CLIPScore on one-frame clips (closed form on a tiny random CLIP),
the optional HPSv2 / ImageReward / OCR scorers (their glue on stand-in models: the packages do not install
beside this project's test stack), strict loading and one-line failures, and what each reward scores."""

from __future__ import annotations

import sys
import types

import pytest
import torch
import torch.nn.functional as F

from grpo_bench.errors import UserError
from grpo_bench.rewards import load, names
from grpo_bench.rewards.clip_common import OPENAI_CLIP_MEAN, OPENAI_CLIP_STD, clip_preprocess

pytestmark = pytest.mark.filterwarnings("ignore")


def stills(b=3, h=24, w=20, seed=0):
    return torch.rand(b, 3, 1, h, w, generator=torch.Generator().manual_seed(seed)) * 2 - 1


def test_pickscore_and_clipscore_of_a_still_are_its_one_frame_cosine(clip_parts):
    from grpo_bench.rewards.clip_score import ClipScore
    from grpo_bench.rewards.pickscore import PickScore

    model, tok = clip_parts
    images, prompts = stills(), ["a red circle", "a cat", "a blue square"]
    clip = ClipScore(model, tok, size=30, crop=30)
    pick = PickScore(model, tok, size=30, crop=30)
    with torch.no_grad():
        text = tok(prompts, padding=True, return_tensors="pt")
        t = model.get_text_features(**text)
        t = F.normalize(getattr(t, "pooler_output", t).float(), dim=-1)
        pix = clip_preprocess(images[:, :, 0], 30, 30, OPENAI_CLIP_MEAN, OPENAI_CLIP_STD)
        img = model.get_image_features(pixel_values=pix)
        img = F.normalize(getattr(img, "pooler_output", img).float(), dim=-1)
    cos = (img * t).sum(-1)
    torch.testing.assert_close(clip(images, prompts)["clip"], cos)
    torch.testing.assert_close(pick(images, prompts)["pickscore"], model.logit_scale.exp() * cos)


def test_each_reward_declares_what_it_scores():
    from grpo_bench.config.weights import reward_modality
    from grpo_bench.rewards import REWARDS

    kinds = {n: reward_modality(REWARDS.get(n)) for n in names()}
    assert {kinds[n] for n in ("hpsv2", "imagereward", "ocr", "jpeg_compressibility", "jpeg_incompressibility")} == {
        "image"}
    assert {kinds[n] for n in ("videoalign", "videoalign_16fps", "world_judge", "world_oracle")} == {"video"}
    assert kinds["pickscore"] == kinds["clip_score"] == "any"


# --- HPSv2 ---------------------------------------------------------------------------------------
class StubOpenClip(torch.nn.Module):
    """Stands in for hpsv2's OpenCLIP ViT-H-14: encode_image / encode_text of fixed linear maps."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.visual = torch.nn.Linear(3 * 224 * 224, 8)
        self.text = torch.nn.Embedding(100, 8)

    def encode_image(self, pixels):
        return self.visual(pixels.flatten(1))

    def encode_text(self, ids):
        return self.text(ids).mean(1)


def fake_hpsv2(monkeypatch, model):
    module = types.ModuleType("hpsv2.src.open_clip")
    module.create_model_and_transforms = lambda *a, **k: (model, None, None)
    module.get_tokenizer = lambda name: (lambda prompts: torch.tensor([[len(p) % 100, 1, 2] for p in prompts]))
    for name in ("hpsv2", "hpsv2.src"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "hpsv2.src.open_clip", module)


def test_hpsv2_is_the_cosine_of_the_loaded_checkpoint(monkeypatch, tmp_path):
    """hpsv2/img_score.py: diag(normalize(img) @ normalize(txt).T), the checkpoint's state_dict loaded."""
    trained = StubOpenClip()
    with torch.no_grad():
        trained.visual.weight.mul_(-1)
    torch.save({"state_dict": trained.state_dict()}, tmp_path / "HPS_v2.1_compressed.pt")
    fake_hpsv2(monkeypatch, StubOpenClip())
    reward = load("hpsv2", checkpoint=str(tmp_path / "HPS_v2.1_compressed.pt"), device="cpu")
    images, prompts = stills(2, 32, 32), ["a cat", "a red fox"]
    got = reward(images, prompts)["hps"]
    pixels = clip_preprocess(images[:, :, 0], 224, 224, OPENAI_CLIP_MEAN, OPENAI_CLIP_STD)
    ids = torch.tensor([[len(p) % 100, 1, 2] for p in prompts])
    with torch.no_grad():
        img, txt = trained.encode_image(pixels), trained.encode_text(ids)
        want = (F.normalize(img, dim=-1) * F.normalize(txt, dim=-1)).sum(-1)
    torch.testing.assert_close(got, want)


def test_hpsv2_refuses_a_checkpoint_that_does_not_match(monkeypatch, tmp_path):
    state = StubOpenClip().state_dict()
    torch.save({"state_dict": {"visual.weight": torch.zeros(8, 3)}}, tmp_path / "bad.pt")
    torch.save({"state_dict": {k: v for k, v in state.items() if k != "text.weight"}}, tmp_path / "partial.pt")
    fake_hpsv2(monkeypatch, StubOpenClip())
    for bad in ("bad.pt", "partial.pt"):
        with pytest.raises(UserError, match="does not match the model") as err:
            load("hpsv2", checkpoint=str(tmp_path / bad))
        assert "\n" not in str(err.value)


# --- ImageReward -------------------------------------------------------------------------------
def test_imagereward_scores_each_prompt_and_image(monkeypatch, tmp_path):
    calls = {}

    class Model:
        def eval(self):
            return self

        def score(self, prompt, images):
            return [float(len(prompt)) + images[0].size[0] / 100]

    module = types.ModuleType("ImageReward")
    module.load = lambda path, device, med_config: calls.update(path=path, med_config=med_config) or Model()
    monkeypatch.setitem(sys.modules, "ImageReward", module)
    (tmp_path / "ImageReward.pt").write_bytes(b"x")
    (tmp_path / "med_config.json").write_text("{}")
    reward = load("imagereward", checkpoint=str(tmp_path / "ImageReward.pt"), device="cpu")
    assert calls["med_config"] == str(tmp_path / "med_config.json")  # never fetched from the hub
    got = reward(stills(2, 16, 40), ["a cat", "a red fox"])["imagereward"]
    torch.testing.assert_close(got, torch.tensor([5.4, 9.4]))


# --- OCR (the real engine: tests/rewards/test_rapid_ocr.py) --------------------------------------------------
def test_ocr_reward_follows_flow_grpo():
    """flow_grpo/ocr.py: 1 - min(d, len)/len on lower-cased, space-free text; contained = 0 distance."""
    from grpo_bench.rewards.ocr import OcrReward, ocr_reward, quoted
    from grpo_bench.rewards.rapid_ocr import edit_distance

    assert edit_distance("kitten", "sitting") == 3 and edit_distance("", "abc") == 3
    assert quoted('a sign saying "Hello World" in neon') == "Hello World"
    assert ocr_reward("the sign says helloworld!", "Hello World") == 1.0
    assert ocr_reward("helo world", "Hello World") == pytest.approx(1 - 1 / 10)
    assert ocr_reward("zzzzzzzzzzzzzzzzzzzzzzzz", "abc") == 0.0  # capped at the target's length

    seen = []

    def read(images):
        seen.extend(images)
        return ["HELLO wor1d", ""]

    got = OcrReward(read)(stills(2, 8, 12), ['a sign "hello world"', 'a sign "abc"'])["ocr"]
    torch.testing.assert_close(got, torch.tensor([1 - 1 / 10, 0.0]))
    assert [(im.dtype.name, im.shape) for im in seen] == [("uint8", (8, 12, 3))] * 2  # RGB uint8 per still


def test_ocr_reward_never_scores_zero_silently():
    """An engine failure is an error, not the reference's 0; a prompt with no quoted text is one line."""
    from grpo_bench.rewards.ocr import OcrReward

    def broken(images):
        raise RuntimeError("engine crashed")

    with pytest.raises(RuntimeError, match="engine crashed"):
        OcrReward(broken)(stills(1), ['a sign "abc"'])
    with pytest.raises(UserError, match="prompt 'a plain sign' has no double-quoted text"):
        OcrReward(lambda images: ["abc"] * len(images))(stills(2), ['a sign "abc"', "a plain sign"])
    with pytest.raises(RuntimeError, match="read 1 texts for 2 images"):
        OcrReward(lambda images: ["abc"])(stills(2), ['a sign "abc"', 'a sign "abc"'])


# --- strict loading and one-line failures ------------------------------------------------------------
@pytest.mark.parametrize(("name", "kwargs", "match"), [
    ("hpsv2", {"checkpoint": "/nonexistent/HPS_v2.1_compressed.pt"}, "never downloads weights"),
    ("imagereward", {"checkpoint": "/nonexistent/ImageReward.pt"}, "hf download THUDM/ImageReward"),
])
def test_a_missing_checkpoint_is_one_line(name, kwargs, match):
    with pytest.raises(UserError, match=match) as err:
        load(name, **kwargs)
    assert "\n" not in str(err.value)


def test_a_missing_package_is_one_line_naming_the_install(monkeypatch, tmp_path):
    (tmp_path / "HPS.pt").write_bytes(b"x")
    (tmp_path / "ImageReward.pt").write_bytes(b"x")
    (tmp_path / "med_config.json").write_text("{}")
    for module in ("hpsv2", "hpsv2.src", "hpsv2.src.open_clip", "ImageReward"):
        monkeypatch.setitem(sys.modules, module, None)  # an import of it fails
    for name, kwargs, install in (
        ("hpsv2", {"checkpoint": str(tmp_path / "HPS.pt")}, "'hpsv2' package, which is not installed; "
                                                             "pip install --no-deps hpsv2==1.2.0"),
        ("imagereward", {"checkpoint": str(tmp_path / "ImageReward.pt")},
         "not installed; .*pip install .*image-reward"),
    ):
        with pytest.raises(UserError, match=install) as err:
            load(name, **kwargs)
        assert "\n" not in str(err.value)


def test_a_package_that_is_installed_but_fails_to_import_says_so(monkeypatch, tmp_path):
    """Not "not installed": the failing import is named (image-reward 1.5 imports an undeclared ``clip``)."""
    from grpo_bench.rewards.still_images import optional_module

    package = tmp_path / "brokenpkg"
    package.mkdir()
    (package / "__init__.py").write_text("import clip_that_is_not_there\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(UserError, match="'brokenpkg' package is installed but does not import "
                                        "\\(No module named 'clip_that_is_not_there'\\); pip install X"):
        optional_module("brokenpkg", "pip install X", "reward x")
    with pytest.raises(UserError, match="'absentpkg' package, which is not installed; pip install X"):
        optional_module("absentpkg.sub", "pip install X", "reward x")


def test_imagereward_under_transformers_5_is_refused_naming_the_conflict(monkeypatch, tmp_path):
    from importlib import metadata

    versions = {"image-reward": "1.5", "transformers": "5.25.0"}

    def version(name):
        if name not in versions:
            raise metadata.PackageNotFoundError(name)
        return versions[name]

    monkeypatch.setattr(metadata, "version", version)
    monkeypatch.setitem(sys.modules, "ImageReward", None)  # never reached: the conflict is told first
    conflict = ("image-reward 1.5 does not work with transformers 5.25.0: it imports apply_chunking_to_forward, "
                ".* removed in transformers 5; .*'transformers>=4.46,<5'")
    with pytest.raises(UserError, match=conflict):
        load("imagereward", checkpoint=str(tmp_path / "absent.pt"))
    versions["transformers"] = "4.57.1"  # no conflict: the load goes on to the checkpoint
    with pytest.raises(UserError, match="checkpoint .* is not a local file"):
        load("imagereward", checkpoint=str(tmp_path / "absent.pt"))


def test_a_still_reward_refuses_a_video():
    with pytest.raises(ValueError, match="one frame"):
        load("jpeg_compressibility")(torch.zeros(1, 3, 4, 8, 8), ["a"])
