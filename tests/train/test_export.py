"""A finished run's policy is usable: exported weights + card, GIF/MP4 of the eval videos, and
`grpo-bench sample` on a run folder, its policy or a checkpoint folder (never advice to overwrite it)."""

from __future__ import annotations

import json

import imageio.v3 as iio
import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from grpo_bench.cli import app
from grpo_bench.config.run import RunConfig
from grpo_bench.train.export import provenance

pytestmark = pytest.mark.filterwarnings("ignore")


def world_cfg(**kw) -> RunConfig:
    base = dict(method="flow_grpo", updates=1, steps=4, prompts_per_update=1, group_size=2, eval_samples=1,
                diag_every=0, device="cpu", lr=1e-2)
    base.update(kw)
    return RunConfig(**base)


@pytest.fixture(scope="module")
def world_run(tmp_path_factory):
    from grpo_bench.train.trainer import train

    out = tmp_path_factory.mktemp("world") / "run"
    train(world_cfg(), out)
    return out


def test_finished_world_run_exports_policy_card_and_videos(world_run):
    from grpo_bench.models import load

    policy = world_run / "policy"
    card = json.loads((policy / "card.json").read_text())
    assert card["method"] == "flow_grpo" and card["weights"]["format"] == "world-safetensors"
    assert card == {**card, **provenance()} and card["git_commit"] != ""
    # The exported weights are the trained ones: equal to the last checkpoint's trainable state, not the base.
    exported = load_file(str(policy / "model.safetensors"))
    ckpt = load_file(str(next((world_run / "checkpoints").iterdir()) / "trainable.safetensors"))
    for name, value in ckpt.items():
        torch.testing.assert_close(exported[name], value)
    base = dict(load("world").net.named_parameters())
    assert any(not torch.equal(base[n], v) for n, v in ckpt.items())
    assert "grpo-bench sample --checkpoint" in (policy / "README.md").read_text()
    final = json.loads((world_run / "final.json").read_text())
    assert final["provenance"] == provenance()
    # Eval videos to watch: one GIF frame per video frame, and an MP4 that decodes to the same count.
    videos = torch.load(world_run / "samples" / "final_eval.pt", weights_only=True)
    assert iio.imread(world_run / "samples" / "final_eval.gif").shape[0] == videos.shape[2]
    assert len(list(iio.imiter(world_run / "samples" / "final_eval.mp4", plugin="pyav" if _has_av() else None))) \
        == videos.shape[2]


def _has_av() -> bool:
    try:
        import av  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.parametrize("where", ["run", "policy", "checkpoint", "weights"])
def test_sample_takes_run_policy_and_checkpoint_folders_at_the_runs_own_steps(world_run, where, tmp_path):
    from grpo_bench.cli.sample import load_policy

    path = {"run": world_run, "policy": world_run / "policy", "weights": world_run / "policy" / "model.safetensors",
            "checkpoint": next((world_run / "checkpoints").iterdir())}[where]
    model, source = load_policy(path)
    trained = load_file(str(world_run / "policy" / "model.safetensors"))
    for name, p in model.net.named_parameters():
        torch.testing.assert_close(p.detach(), trained[name])
    out = tmp_path / "s.gif"
    res = CliRunner().invoke(app, ["sample", "--prompt", "a red circle moving left", "--n", "2",
                                   "--checkpoint", str(path), "--out", str(out)], terminal_width=200)
    assert res.exit_code == 0, res.output
    assert out.is_file() and out.with_suffix(".png").is_file()
    assert "pretrain" not in res.output
    # trained at 4 steps (world_cfg), so sampled at 4 without --steps (the shipped default is 20)
    assert "2 videos, 4 ode steps, shift 3 (the run's steps and shift)" in " ".join(res.output.split())


def test_sample_on_a_wrong_folder_never_suggests_overwriting_it(world_run):
    from grpo_bench.cli import main  # noqa: F401  (the one-line error path)
    from grpo_bench.cli.sample import load_policy
    from grpo_bench.errors import UserError

    bad_file = world_run.parent / "bad.safetensors"
    bad_file.write_bytes(b"not weights")
    for path in (world_run / "samples", bad_file):
        with pytest.raises(UserError) as err:
            load_policy(path)
        assert "--out" not in str(err.value) and "pretrain" not in str(err.value)
        assert "run folder" in str(err.value)


def test_lora_run_exports_peft_adapters(tmp_path):
    from dist_train_script import ToyReward
    from peft import LoraConfig
    from peft.utils import get_peft_model_state_dict
    from section_support import model_of

    from grpo_bench.train.trainer import train

    cfg = RunConfig(model="tiny-wan", method="flow_grpo", updates=1, steps=4, prompts_per_update=2, group_size=2,
                    frames=5, height=16, width=16, lora_rank=2, device="cpu", eval_samples=1, diag_every=0,
                    save_videos=True, lr=1e-2)
    model = model_of(cfg)
    train(cfg, tmp_path / "run", model=model, reward=ToyReward())
    policy = tmp_path / "run" / "policy"
    card = json.loads((policy / "card.json").read_text())
    assert card["weights"]["format"] == "peft-lora"
    config = LoraConfig.from_pretrained(str(policy))  # peft reads its own format back
    assert config.r == 2
    saved = load_file(str(policy / "adapter_model.safetensors"))
    live = get_peft_model_state_dict(model.trainable_module().transformer)
    assert set(saved) == set(live) and saved
    for k, v in live.items():
        torch.testing.assert_close(saved[k], v.detach().float().cpu())
    assert any(v.abs().sum() > 0 for k, v in saved.items() if "lora_B" in k)  # trained, not the zero init
    # Usable: peft puts the exported adapters on a fresh base transformer, which then equals the policy.
    from peft import inject_adapter_in_model, set_peft_model_state_dict

    fresh = model_of(RunConfig(**{**cfg.to_dict(), "lora_rank": 0}))
    inject_adapter_in_model(config, fresh.net.transformer)
    set_peft_model_state_dict(fresh.net.transformer, saved)
    x = torch.randn(2, *model.latent_shape, generator=torch.Generator().manual_seed(0))
    s, cond = torch.tensor([0.8, 0.3]), model.encode_prompts(["a red circle", "a cat"])
    with torch.no_grad():
        torch.testing.assert_close(fresh.velocity(x, s, fresh.encode_prompts(["a red circle", "a cat"])),
                                   model.velocity(x, s, cond), rtol=1e-4, atol=1e-5)
    assert (tmp_path / "run" / "samples" / "final_eval.mp4").is_file()
    assert not (tmp_path / "run" / "samples" / "final_eval.gif").exists()  # GIFs for the world only


def test_report_of_a_train_run_names_its_code_version(world_run, tmp_path):
    from grpo_bench.report.render import render_report

    path = render_report(world_run, out=tmp_path / "r")
    text = path.read_text()
    assert f"grpo-bench {provenance()['grpo_bench_version']} @ {provenance()['git_commit'][:12]}" in text
    assert "1 of 1 cells done" in text


def _strict(text: str):
    """json.loads that refuses NaN / Infinity, as most JSON parsers outside Python do."""
    def refuse(name: str):
        raise ValueError(f"non-standard JSON constant {name}")
    return json.loads(text, parse_constant=refuse)


def test_finished_run_writes_strict_json_with_null_for_missing_values(world_run):
    # every JSON file a user or another tool reads (checkpoint state is grpo-bench's own, read back as written)
    files = [p for p in world_run.rglob("*.json") if "checkpoints" not in p.parts]
    assert world_run / "final.json" in files and world_run / "policy" / "card.json" in files
    for path in files:
        _strict(path.read_text())
    # a missing value (one eval video: no diversity between videos) is NaN in the trainer's memory; metrics.jsonl
    # writes it as null, and final.json, which copies that eval line, now does too
    final = _strict((world_run / "final.json").read_text())
    lines = [_strict(x) for x in (world_run / "metrics.jsonl").read_text().splitlines()]
    last_eval = next(line for line in reversed(lines) if "eval_reward" in line)
    missing = sorted(k for k, v in last_eval.items() if k.startswith("eval_") and v is None)
    assert "eval_diversity" in missing
    assert all(final["eval"][k] is None for k in missing)


def test_strict_json_maps_every_non_finite_float_to_null():
    from grpo_bench.atomic import finite, strict_json

    value = {"a": float("nan"), "b": [1.5, float("inf"), (float("-inf"), 2)], "c": {"d": None, "e": "NaN"}}
    assert _strict(strict_json(value)) == {"a": None, "b": [1.5, None, [None, 2]], "c": {"d": None, "e": "NaN"}}
    assert finite(0.25) == 0.25 and finite(3) == 3
