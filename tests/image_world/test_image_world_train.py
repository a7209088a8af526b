"""Every method trains on the image world through the core's protocols (the model, its oracle reward and its prompt
set found through the registries), and its config is checked before any work (docs/image_world.md)."""

from __future__ import annotations

import json
import math

import pytest
import torch

from grpo_bench import models, rewards
from grpo_bench.config.identity import asset_digests, file_digest
from grpo_bench.config.run import from_dict
from grpo_bench.core.method import METHODS
from grpo_bench.errors import UserError
from grpo_bench.image_world.grammar import prompts
from grpo_bench.image_world.model import DEFAULT_WEIGHTS, ImageWorldModel, load_weights, save_weights
from grpo_bench.image_world.net import ImageUNetConfig
from grpo_bench.train.trainer import train

TINY_NET = ImageUNetConfig(channels=(8, 8, 8), emb_dim=16, mid_blocks=1, groups=4)
RUN = {"model": "image_world", "steps": 4, "prompts_per_update": 2, "group_size": 2, "updates": 2, "eval_every": 2,
       "minibatches": 2, "eval_samples": 2, "diag_every": 0, "checkpoint_every": 10, "device": "cpu", "lr": 1e-3,
       "save_videos": False, "kl_warmup": 1, "threads": 1}


def test_the_model_brings_its_own_defaults_and_registrations() -> None:
    cfg = from_dict({"model": "image_world"})
    assert (cfg.frames, cfg.video_size, cfg.prompts, cfg.reward, cfg.eval_oracle) == (
        1, 32, "image_world", "image_world_oracle", True)
    assert models.modality("image_world") == "image"
    assert rewards.declares_ground_truth("image_world") and rewards.is_ground_truth("image_world_oracle")
    assert asset_digests(cfg.model, cfg.reward) == {"model": file_digest(DEFAULT_WEIGHTS)}  # rebuilt: new ids


@pytest.mark.parametrize("override, says", [
    ({"video_size": 16}, "model 'image_world' makes 32x32 images: use video_size: 32"),
    ({"frames": 8}, r"makes still images \(one frame\)"),
    ({"reward": "world_judge"}, "'world_judge' scores videos only"),
])
def test_bad_image_world_config_is_one_line(override: dict, says: str) -> None:
    with pytest.raises(UserError, match=says) as info:
        from_dict({"model": "image_world", **override}, "cfg.yaml: ")
    assert str(info.value).startswith("cfg.yaml: ") and "\n" not in str(info.value)


@pytest.mark.parametrize("method", sorted(METHODS.names()))
def test_every_method_trains_on_the_image_world(method: str, tmp_path) -> None:
    """Two updates of each registered method on the shipped base model (whose images the oracle scores apart: a
    random net's all score 0, so every advantage would be 0), scored by the image world's oracle; the evaluation
    reports the oracle's columns on the held-out prompts."""
    cfg = from_dict({**RUN, "method": method, **({"kl": "none"} if method == "diffusion_nft" else {}),
                     **({"steps": 6} if method == "flow_dppo" else {})})  # its 3 sparse steps need 3 in [0, T/2)
    model = models.load("image_world")
    before = {k: v.clone() for k, v in model.net.state_dict().items()}
    final = train(cfg, tmp_path / "run", model=model, reward=rewards.load(cfg.reward))
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["update"] for r in rows] == [0, 1]
    assert all(math.isfinite(r["reward"]) and 0 <= r["reward"] <= 3 for r in rows)  # vq + mq + ta, each in [0, 1]
    moved = max(float((model.net.state_dict()[k] - v).abs().max()) for k, v in before.items())
    assert 0 < moved < 0.1
    ev = final["eval"]
    assert 0 <= ev["eval_oracle_ta"] <= 1 and 0 <= ev["eval_correct"] <= 1 and math.isfinite(ev["eval_manifold"])
    assert {v["prompt"] for v in final["eval_videos"]} == set(prompts("eval"))


def test_weights_round_trip_and_a_corrupt_file_is_one_line(tmp_path) -> None:
    model = models.build("image_world", config=TINY_NET)
    path = tmp_path / "w.safetensors"
    save_weights(model.net, path)
    again = load_weights(path)
    assert all(torch.equal(a, b) for a, b in zip(model.net.state_dict().values(), again.state_dict().values()))
    path.write_bytes(b"not safetensors")
    with pytest.raises(UserError, match=r"w.safetensors are corrupt or incompatible.*pretrain --out"):
        load_weights(path)


def test_shipped_base_model_samples_images_the_checker_reads() -> None:
    from grpo_bench.core.sampling import sample
    from grpo_bench.core.schedule import sigmas
    from grpo_bench.core.sde import make_kernel
    from grpo_bench.image_world.checker import check

    model = models.load("image_world")
    assert isinstance(model, ImageWorldModel)
    texts = ["a red circle", "a blue square", "a green triangle", "a yellow circle"]
    noise = torch.randn(4, *model.latent_shape, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        images = sample(model, texts, noise, sigmas(10, 3.0), make_kernel("ode"), decode=True)
    assert images.shape == (4, 3, 1, 32, 32)
    assert check(images, texts)["vq"].mean() > 0.5  # not noise: a clean background around its objects


def test_a_patched_net_folds_pixels_and_round_trips(tmp_path) -> None:
    """``patch`` 2 runs the U-Net on 2x2-folded pixels (16x16 with 12 channels) and unfolds its velocity; the file
    records it, so loading rebuilds the same function; a net without it (every file before it) is patch 1."""
    from torch.utils.flop_counter import FlopCounterMode

    from grpo_bench.image_world.net import ImageUNet

    torch.manual_seed(0)
    plain, patched = ImageUNet(TINY_NET), ImageUNet(ImageUNetConfig(**{**TINY_NET.to_dict(), "patch": 2}))
    assert plain.stem.in_channels == 3 and patched.stem.in_channels == 12 and patched.head[-1].out_channels == 12
    torch.nn.init.normal_(patched.head[-1].weight)  # the head starts at zero; make its output depend on the input
    x, sigma, cond = torch.randn(2, 3, 32, 32), torch.rand(2), torch.zeros(2, 6, dtype=torch.long)
    counts = []
    for net in (plain, patched):
        with FlopCounterMode(display=False) as flops:
            v = net(x, sigma, cond)
        assert v.shape == x.shape
        counts.append(flops.get_total_flops())
    assert counts[1] < 0.35 * counts[0]  # every level at half the side: about a quarter of the work
    # the same layers on the folded image, unfolded: pixel (2h+i, 2w+j) of colour c is channel 4c+2i+j of (h, w)
    v = patched(x, sigma, cond)
    patched.config.patch = 1
    folded = patched(torch.nn.functional.pixel_unshuffle(x, 2), sigma, cond)
    patched.config.patch = 2
    assert folded.shape == (2, 12, 16, 16)
    assert torch.equal(v[:, 1, 2 * 3 + 1, 2 * 5], folded[:, 1 * 4 + 1 * 2 + 0, 3, 5])
    path = tmp_path / "p.safetensors"
    save_weights(patched, path)
    again = load_weights(path)
    assert again.config.patch == 2 and torch.equal(again(x, sigma, cond), patched(x, sigma, cond))
    assert ImageUNetConfig.from_dict({k: v for k, v in TINY_NET.to_dict().items() if k != "patch"}).patch == 1


def test_pretrain_defaults_rebuild_the_shipped_architecture() -> None:
    """`python -m grpo_bench.image_world.pretrain --steps N` (no architecture flags) builds the shipped net, and the
    card's command names the same architecture."""
    from grpo_bench.image_world.pretrain import CONFIG, command_line

    shipped = models.load("image_world").net.config
    card = json.loads(DEFAULT_WEIGHTS.with_suffix(".json").read_text())
    assert CONFIG == shipped and card["architecture"] == shipped.to_dict()
    args = command_line("x", DEFAULT_WEIGHTS, card["command"].split()[3:], architecture=True)
    assert (args.channels, args.patch, args.steps) == (shipped.channels, shipped.patch, card["steps"])


@pytest.mark.parametrize("where", ["run", "checkpoint"])
def test_sample_draws_a_trained_image_world_policy_as_it_was_trained(where: str, tmp_path) -> None:
    """`grpo-bench sample --model image_world --checkpoint` loads the run's exported policy (or a checkpoint's
    trainable state) into the image world's net, samples at the run's own steps, and writes the PNG grid and strip,
    scored by the oracle; the images are the trained policy's, not the base's. A run of another model is one line."""
    from safetensors.torch import load_file
    from typer.testing import CliRunner

    from grpo_bench.cli import app
    from grpo_bench.cli.sample import load_policy

    run = tmp_path / "run"
    cfg = from_dict({**RUN, "method": "flow_grpo", "lr": 1e-2, "checkpoint_every": 1})
    train(cfg, run, model=models.load("image_world"), reward=rewards.load(cfg.reward))
    path = run if where == "run" else sorted((run / "checkpoints").iterdir())[-1]
    model, _ = load_policy(path, "image_world")
    trained = load_file(str(run / "policy" / "model.safetensors"))
    base = dict(models.load("image_world").net.named_parameters())
    assert any(not torch.equal(p.detach(), base[n].detach()) for n, p in model.net.named_parameters())
    for name, p in model.net.named_parameters():
        torch.testing.assert_close(p.detach(), trained[name])
    out = tmp_path / "s.png"
    res = CliRunner().invoke(app, ["sample", "--model", "image_world", "--prompt", "a red circle", "--n", "2",
                                   "--checkpoint", str(path), "--reward", "image_world_oracle", "--out", str(out),
                                   "--json", str(tmp_path / "s.json")], terminal_width=200)
    assert res.exit_code == 0, res.output
    assert out.is_file() and (tmp_path / "s_strip.png").is_file()
    written = json.loads((tmp_path / "s.json").read_text())
    assert (written["steps"], written["shift"]) == (4, 3.0)  # the run's, not the base's default 20
    assert written["checkpoint"].startswith(str(path)) and len(written["scores"]["ta"]) == 2
    res = CliRunner().invoke(app, ["sample", "--model", "image_world_text", "--prompt", 'the word "cat"',
                                   "--checkpoint", str(path), "--out", str(tmp_path / "t.png")])
    assert isinstance(res.exception, UserError) and "not 'image_world_text'" in str(res.exception)
    # --model left out: the run's own model (its config's), not the video world's
    res = CliRunner().invoke(app, ["sample", "--prompt", "a red circle", "--n", "2", "--checkpoint", str(path),
                                   "--out", str(tmp_path / "r.png"), "--json", str(tmp_path / "r.json")])
    assert res.exit_code == 0, res.output
    again = json.loads((tmp_path / "r.json").read_text())
    assert again["model"] == "image_world" and again["scores"] == written["scores"]
