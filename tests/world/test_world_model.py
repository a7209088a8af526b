"""The world's base video model: protocol, shipped weights, pretraining, sampling and the sample CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import imageio.v3 as iio
import pytest
import torch
from typer.testing import CliRunner

from grpo_bench.cli import app
from grpo_bench.core.sampling import guided_velocity, sample
from grpo_bench.core.schedule import sigmas
from grpo_bench.core.sde import make_kernel
from grpo_bench.errors import UserError
from grpo_bench.models import build, load, names
from grpo_bench.models.base import VideoModel
from grpo_bench.models.world import DEFAULT_WEIGHTS, load_weights
from grpo_bench.pretrain.base import PretrainConfig, read_card, score_card, train
from grpo_bench.world import prompts
from grpo_bench.world.model import NULL_INDEX, WorldUNetConfig, param_count
from grpo_bench.world.oracle import oracle

TINY = WorldUNetConfig(channels=(8, 8, 16), emb_dim=16, mid_blocks=1)


@pytest.fixture(scope="module")
def shipped():
    return load("world")


def test_registry_and_param_budget():
    assert "world" in names()
    model = build("world", size=16)
    assert isinstance(model, VideoModel)
    assert param_count(model.trainable_module()) <= 2_000_000
    with pytest.raises(UserError, match="generator model"):
        load("no-such-model")


def test_protocol_shapes_and_conditioning():
    torch.manual_seed(0)
    model = build("world", size=16)
    assert model.latent_shape == (3, 8, 16, 16)
    cond = model.encode_prompts(["a red circle moving left", "a yellow triangle moving down"])
    assert cond.tolist() == [[0, 0, 0], [3, 2, 3]]
    assert model.null_cond(2).tolist() == [list(NULL_INDEX)] * 2
    x = torch.randn(2, *model.latent_shape)
    v = model.velocity(x, torch.tensor([0.3, 0.9]), cond)
    assert v.shape == x.shape
    # A scalar sigma broadcasts like a per-sample one.
    torch.testing.assert_close(
        model.velocity(x, torch.tensor(0.5), cond), model.velocity(x, torch.full((2,), 0.5), cond)
    )
    assert model.decode(3 * x).abs().max() <= 1.0
    with pytest.raises(UserError, match="colours red, green, blue, yellow"):
        model.encode_prompts(["a purple circle moving left"])


def test_guidance_is_one_doubled_batch_and_sample_is_euler():
    torch.manual_seed(0)
    model = build("world", size=16)
    for p in model.trainable_module().parameters():  # non-trivial outputs (the head starts at zero)
        p.data.add_(0.05 * torch.randn_like(p))
    texts = ["a red circle moving left", "a blue square moving up"]
    cond, null = model.encode_prompts(texts), model.null_cond(2)
    x, s = torch.randn(2, *model.latent_shape), torch.tensor([0.7, 0.7])
    v_c, v_n = model.velocity(x, s, cond), model.velocity(x, s, null)
    torch.testing.assert_close(
        guided_velocity(model.velocity, x, s, cond, null, 3.0), v_n + 3.0 * (v_c - v_n), rtol=1e-4, atol=1e-5
    )
    torch.testing.assert_close(guided_velocity(model.velocity, x, s, cond, null, 1.0), v_c)
    # Two ODE steps by hand: x' = x - (sigma - sigma') v.
    sig = sigmas(2, 3.0)
    with torch.no_grad():
        ref = x.clone()
        for i in range(2):
            ref = ref - (sig[i] - sig[i + 1]).float() * model.velocity(ref, torch.full((2,), float(sig[i])), cond)
    torch.testing.assert_close(sample(model, texts, x, sig, make_kernel("ode")), ref, rtol=1e-5, atol=1e-5)


def test_shipped_weights_sample_the_held_out_prompts(shipped):
    card = read_card(DEFAULT_WEIGHTS)
    assert DEFAULT_WEIGHTS.stat().st_size <= 10 * 2**20
    assert card["steps"] > 0 and "grpo-bench pretrain base" in card["command"]
    texts = prompts("eval")
    noise = torch.randn(len(texts), *shipped.latent_shape, generator=torch.Generator().manual_seed(0))
    videos = shipped.decode(sample(shipped, texts, noise, sigmas(20, 3.0), make_kernel("ode")))
    assert videos.shape == (8, 3, 8, 16, 16)
    scores = oracle(videos, texts)
    # Held-out combinations of seen words: colour is read off the prompt compositionally.
    assert float(scores["color_ok"].mean()) >= 0.75
    assert float(scores["direction_ok"].mean()) >= 0.5


def test_missing_and_corrupt_weights_name_the_file_and_the_command(tmp_path):
    missing = tmp_path / "nope.safetensors"
    with pytest.raises(UserError, match=r"nope\.safetensors.*grpo-bench pretrain base"):
        load("world", path=missing)
    corrupt = tmp_path / "bad.safetensors"
    corrupt.write_bytes(b"\x00\x01 this is not a safetensors file" * 10)
    with pytest.raises(UserError, match=r"bad\.safetensors.*corrupt.*grpo-bench pretrain base"):
        load_weights(corrupt)
    truncated = tmp_path / "cut.safetensors"
    truncated.write_bytes(DEFAULT_WEIGHTS.read_bytes()[:5000])
    with pytest.raises(UserError, match=r"cut\.safetensors.*grpo-bench pretrain base"):
        load("world", path=truncated)
    with pytest.raises(UserError, match="trained on 16x16"):
        load("world", size=24)


def test_pretrain_smoke_is_deterministic_and_writes_a_loadable_card(tmp_path):
    cfg = PretrainConfig(steps=3, seed=7, batch=4, warmup=2, model=TINY)
    card = train(cfg, tmp_path / "a.safetensors")
    train(cfg, tmp_path / "b.safetensors")
    assert card["steps"] == 3 and card["seed"] == 7 and "--steps 3 --seed 7" in card["command"]
    a, _ = load_weights(tmp_path / "a.safetensors")
    b, _ = load_weights(tmp_path / "b.safetensors")
    for (name, pa), pb in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(pa, pb), name
    model = load("world", path=tmp_path / "a.safetensors")
    assert param_count(model.trainable_module()) == card["params"]
    scored = score_card(tmp_path / "a.safetensors", per_prompt=1)
    assert set(scored["oracle"]) == {"eval", "train"}
    assert scored["oracle"]["eval"]["videos"] == 8 and 0 <= scored["oracle"]["eval"]["correct"] <= 1
    assert json.loads((tmp_path / "a.json").read_text())["oracle"] == scored["oracle"]
    # A second (fine-tuning) stage starts from the first one's weights and names it in its card.
    stage2 = train(
        PretrainConfig(steps=1, seed=1, batch=2, init=str(tmp_path / "a.safetensors")), tmp_path / "s2.safetensors"
    )
    assert stage2["init"]["file"] == "a.safetensors" and stage2["init"]["card"]["steps"] == 3
    assert "--init a.safetensors" in stage2["command"]
    with pytest.raises(UserError, match="--steps or --minutes"):
        train(PretrainConfig(model=TINY), tmp_path / "c.safetensors")


def test_sample_cli_writes_gif_strip_and_json(tmp_path):
    out, js = tmp_path / "s.gif", tmp_path / "s.json"
    result = CliRunner().invoke(
        app,
        [
            "sample",
            "--prompt",
            "a green square moving right",
            "--n",
            "2",
            "--steps",
            "4",
            "--out",
            str(out),
            "--json",
            str(js),
        ],
    )
    assert result.exit_code == 0, result.output
    gif = iio.imread(out, index=None)
    assert gif.shape[0] == 8 and gif.shape[-1] in (3, 4)  # one GIF frame per video frame
    assert out.with_suffix(".png").is_file()
    data = json.loads(js.read_text())
    assert len(data["videos"]) == 2 and 0 <= data["videos"][0]["oracle"]["vq"] <= 1


def test_unknown_prompt_word_exits_2_listing_the_vocabulary(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "grpo_bench.cli",
            "sample",
            "--prompt",
            "a purple circle moving left",
            "--out",
            str(tmp_path / "x.gif"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert (
        "purple" in proc.stderr
        and "red, green, blue, yellow" in proc.stderr
        and "circle, square, triangle" in proc.stderr
    )
    assert not (tmp_path / "x.gif").exists()
