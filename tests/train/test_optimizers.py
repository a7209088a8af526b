"""The run's optimizer (train/optimizers.py): SAGE-GRPO's Muon (post_train.py ``--use_muon`` default true,
``--weight_decay`` default 0.01) through torch.optim.Muon on the hidden 2-D weights, with AdamW on the
parameters Muon must not take (embeddings, norms, biases, the output layer); AdamW stays the default."""

from __future__ import annotations

import pytest
import torch
from support_paths import SUPPORT
from torch import nn

from grpo_bench import models
from grpo_bench.config.run import Optimisation, from_dict
from grpo_bench.errors import UserError
from grpo_bench.train import optimizers

pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.mark.parametrize("name", ["tiny-wan", "tiny-hunyuan15"])
def test_muon_takes_the_hidden_matrices_and_adamw_the_rest(name):
    model = models.from_section(models.ModelSection(model=name, frames=5, height=16, width=16, lora_rank=0,
                                                    device="cpu"))
    module = model.trainable_module()
    params = [p for p in module.parameters() if p.requires_grad]
    muon, adamw = optimizers.split(module, params)
    assert muon and adamw and len(muon) + len(adamw) == len(params)
    assert all(p.ndim == 2 for p in muon)  # torch.optim.Muon takes 2-D matrices only
    names = {id(p): n for n, p in module.named_parameters()}
    to_adamw = {names[id(p)] for p in adamw}
    assert all(p.ndim != 2 or any(k in names[id(p)].lower() for k in ("embed", "norm", "proj_out")) for p in adamw)
    assert any("bias" in n for n in to_adamw) and any("proj_out" in n for n in to_adamw)
    assert not any(k in names[id(p)].lower() for p in muon for k in ("embed", "norm", "proj_out"))
    assert any(".attn" in names[id(p)] or "attn" in names[id(p)] for p in muon)  # attention projections: Muon


def test_embeddings_and_norms_stay_with_adamw_by_type():
    net = nn.Sequential(nn.Embedding(10, 4), nn.Linear(4, 4), nn.LayerNorm(4))
    muon, adamw = optimizers.split(net, list(net.parameters()))
    assert muon == [net[1].weight]
    assert {id(p) for p in adamw} == {id(net[0].weight), id(net[1].bias), id(net[2].weight), id(net[2].bias)}


def test_muon_steps_both_parts_and_round_trips_its_state():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 2))
    options = Optimisation(optimizer="muon", lr=1e-2, weight_decay=0.01)
    opt = optimizers.build(net, list(net.parameters()), options)
    assert [type(p).__name__ for p in opt.parts] == ["Muon", "AdamW"]
    assert opt.param_groups[0]["weight_decay"] == 0.01 and len(opt.param_groups) == 2
    before = [p.detach().clone() for p in net.parameters()]
    net(torch.randn(4, 8)).sum().backward()
    opt.step()
    assert all(not torch.equal(a, p) for a, p in zip(before, net.parameters()))
    again = optimizers.build(net, list(net.parameters()), options)
    again.load_state_dict(opt.state_dict())
    assert again.state_dict()["parts"][0]["state"][0]["momentum_buffer"].shape == (8, 8)
    with pytest.raises(UserError, match="not a Muon \\+ AdamW state"):
        again.load_state_dict(torch.optim.AdamW(net.parameters()).state_dict())


def test_muon_on_a_model_without_hidden_matrices_is_one_line():
    net = nn.Sequential(nn.Embedding(10, 4), nn.LayerNorm(4))
    with pytest.raises(UserError, match="no trainable 2-D hidden weight for Muon.*use optimizer: adamw"):
        optimizers.build(net, list(net.parameters()), Optimisation(optimizer="muon"))


def test_adamw_is_the_default_and_the_choice_is_checked():
    net = nn.Linear(2, 2)
    opt = optimizers.build(net, list(net.parameters()), Optimisation(lr=3e-3, weight_decay=0.02))
    assert type(opt) is torch.optim.AdamW
    assert (opt.param_groups[0]["lr"], opt.param_groups[0]["weight_decay"]) == (3e-3, 0.02)
    with pytest.raises(UserError, match="optimizer"):
        from_dict(dict(optimizer="lion", device="cpu"))


@pytest.mark.parametrize("bad,match", [
    (dict(optimizer="lion"), r"optimisation section: unknown optimizer 'lion'.*allowed: adamw, muon"),
    (dict(lr=-1.0), r"optimisation section: config key 'lr' must be a finite number > 0, got -1"),
    (dict(weight_decay=float("nan")), r"optimisation section: config key 'weight_decay' must be a finite number"),
])
def test_the_builder_checks_its_own_section_before_building(bad, match):
    net = nn.Linear(2, 2)
    with pytest.raises(UserError, match=match):
        optimizers.build(net, list(net.parameters()), Optimisation(**bad))


@pytest.mark.slow  # two 2-process launches (~1 min on 2 cores)
@pytest.mark.xdist_group("launches")  # several processes each, one launch at a time (tests/conftest.py)
def test_muon_under_fsdp2_orthogonalises_whole_matrices(tmp_path):
    """torch.optim.Muon on FSDP2's DTensor shards computes the Newton-Schulz iteration on the whole matrix
    (DTensor matmuls and norms are global): the sharded update equals the data-parallel one up to bf16
    rounding, which Muon's bf16 iteration amplifies (a 1e-3 relative change of a gradient moves its
    orthogonalised entries by ~10%), far below what orthogonalising each shard alone would change."""
    import os
    import subprocess

    import yaml

    from grpo_bench.config import accelerate_configs

    script = SUPPORT / "muon_fsdp_script.py"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    from launch_support import accelerate_launch
    fsdp = yaml.safe_load(accelerate_configs.config_path("fsdp2").read_text())
    fsdp.update(num_processes=2)
    fsdp.pop("gpu_ids", None)
    (tmp_path / "fsdp2_cpu.yaml").write_text(yaml.safe_dump(fsdp))
    for mode, args in (("fsdp", ["--config_file", str(tmp_path / "fsdp2_cpu.yaml")]),
                       ("dp", ["--multi_gpu", "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
                               "--dynamo_backend", "no"])):
        res = subprocess.run([*accelerate_launch(), *args, str(script), str(tmp_path), mode], capture_output=True,
                             text=True, env=env, timeout=600)
        assert res.returncode == 0, res.stderr[-3000:]
    sharded, plain = torch.load(tmp_path / "fsdp.pt"), torch.load(tmp_path / "dp.pt")
    assert sharded["sharded"] and not plain["sharded"]
    delta = {k: torch.cat([(f - s).flatten() for f, s in zip(d["final"], d["start"])]) for k, d in
             (("fsdp", sharded), ("dp", plain))}
    assert delta["dp"].norm() > 0
    assert (delta["fsdp"] - delta["dp"]).norm() < 0.25 * delta["dp"].norm()
