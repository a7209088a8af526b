"""The GRPO trainer on the tiny random image models (CPU, no download): a still image is a one-frame clip
to the kernels, the rollout, the trainer and the statistics, so every method trains SD3 / FLUX.1 /
Qwen-Image through the same core; the exported policy and the final eval images are written."""

from __future__ import annotations

import json

import pytest
import torch
from image_train_support import run_config
from section_support import model_of

pytestmark = pytest.mark.filterwarnings("ignore")

@pytest.mark.parametrize("method", [
    "flow_grpo", "sage_grpo",
    pytest.param("dance_grpo", marks=pytest.mark.slow), pytest.param("cps", marks=pytest.mark.slow)])
def test_one_update_of_a_method_trains_the_mmdit_lora(method, tmp_path):
    from grpo_bench.train.trainer import train

    cfg = run_config("tiny-sd3", method, guidance=4.5 if method == "flow_grpo" else 1.0)  # flow_grpo: CFG 4.5
    model = model_of(cfg)
    module = model.trainable_module()
    before = {n: p.detach().clone() for n, p in module.named_parameters()}
    final = train(cfg, tmp_path / method, model=model)
    assert final["updates"] == 1 and final["optimizer_steps"] >= 1, method
    changed = {n for n, p in module.named_parameters() if not torch.equal(p, before[n])}
    assert changed and all(".lora_A." in n or ".lora_B." in n for n in changed), method
    assert torch.isfinite(torch.tensor(final["metrics"]["reward"])), method


@pytest.mark.parametrize("name", ["tiny-flux", "tiny-qwen-image"])
def test_full_fine_tuning_of_flux_and_qwen_image_updates_float32_weights(name, tmp_path):
    from grpo_bench.train.trainer import train

    cfg = run_config(name, "flow_grpo", lora_rank=0, height=32 if name == "tiny-qwen-image" else 16,
                     width=32 if name == "tiny-qwen-image" else 16)
    model = model_of(cfg)
    module = model.trainable_module()
    before = {n: p.detach().clone() for n, p in module.named_parameters()}
    final = train(cfg, tmp_path / "run", model=model)
    assert final["updates"] == 1
    assert all(p.dtype == torch.float32 for p in module.parameters())
    assert any(not torch.equal(p, before[n]) for n, p in module.named_parameters())
    card = json.loads((tmp_path / "run" / "policy" / "card.json").read_text())
    assert card["weights"]["format"] == "diffusers-transformer"
    assert (tmp_path / "run" / "samples" / "final_eval.png").is_file()


def image_commands() -> list[str]:
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "real_models.md").read_text()
    block = text.split("## Images", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    return [line.strip() for line in block.splitlines() if line.startswith("grpo-bench train --model tiny-")]


def test_docs_image_commands_run_as_written(tmp_path, monkeypatch):
    """docs/real_models.md's image commands: one per model, each up to the work (its whole config checked;
    they run to the end under `pytest -m slow` below, and one update of each family runs above)."""
    import shlex

    from typer.testing import CliRunner

    from grpo_bench.cli import app
    from grpo_bench.cli import train as train_cli

    commands = image_commands()
    assert {shlex.split(c)[3] for c in commands} == {"tiny-sd3", "tiny-flux", "tiny-qwen-image"}
    started = []
    monkeypatch.setattr(train_cli, "run_train", lambda cfg, *a, **k: started.append(cfg) or {})
    for command in commands:
        res = CliRunner().invoke(app, [*shlex.split(command)[1:], "--out", str(tmp_path / "x")], terminal_width=200)
        assert res.exit_code == 0, (command, res.output)
    assert [c.frames for c in started] == [1, 1, 1]
    assert {c.reward for c in started} == {"jpeg_compressibility"}


@pytest.mark.slow
def test_docs_image_commands_run_to_the_end(tmp_path):
    import shlex

    from typer.testing import CliRunner

    from grpo_bench.cli import app

    for i, command in enumerate(image_commands()):
        res = CliRunner().invoke(app, [*shlex.split(command)[1:], "--out", str(tmp_path / str(i))])
        assert res.exit_code == 0, res.output
        assert (tmp_path / str(i) / "samples" / "final_eval.png").is_file()
