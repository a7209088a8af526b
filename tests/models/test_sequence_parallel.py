"""Sequence parallelism (``sequence_parallel: sp``, models/sequence_parallel.py; DP x SP bookkeeping in
train/distributed.py): the field, its refusals, the HunyuanVideo 1.5 plan's bookkeeping and the rank
arithmetic (fast); and, opt-in (``-m slow``), the split models and runs on CPU processes (gloo) against the
unsplit ones: a tiny Wan and HunyuanVideo 1.5 forward + backward on 2 processes, two GRPO updates at sp 2
against one process, and 4 processes at dp 2 x sp 2 against 2 plain data-parallel ones."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from launch_support import accelerate_launch, torch_run
from support_paths import ROOT, SUPPORT

from grpo_bench.config import accelerate_configs
from grpo_bench.config.identity import cell_id
from grpo_bench.config.run import EXECUTION_FIELDS, RunConfig, from_dict, parse_overrides, resolve
from grpo_bench.errors import UserError
from grpo_bench.models import sequence_parallel as sp_mod
from grpo_bench.train import distributed

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "",
       "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


# --- the field ---------------------------------------------------------------------------------
def test_sequence_parallel_is_an_id_neutral_execution_field_defaulting_to_1():
    assert RunConfig().sequence_parallel == 1 and "sequence_parallel" in EXECUTION_FIELDS
    cfg = RunConfig(model="tiny-wan", frames=5, height=32, width=32, lora_rank=2)
    assert cell_id(resolve(cfg)) == cell_id(resolve(RunConfig(**{**cfg.to_dict(), "sequence_parallel": 2})))


@pytest.mark.parametrize("value, says", [("0", ">= 1"), ("65", "<= 64"), ("two", "expects int")])
def test_a_bad_sequence_parallel_value_is_one_line_naming_the_key(value, says):
    with pytest.raises(UserError, match=f"config key 'sequence_parallel' .*{says}"):
        parse_overrides([f"sequence_parallel={value}"])
    assert parse_overrides(["sequence_parallel=2"]) == {"sequence_parallel": 2}


# --- refusals, before any work ---------------------------------------------------------------------
@pytest.mark.parametrize("model, reward, kind", [("world", "world_judge", "embedded world model"),
                                                ("tiny-sd3", "jpeg_compressibility", "image model")])
def test_sp_is_refused_on_the_world_model_and_on_image_models(model, reward, kind):
    with pytest.raises(UserError, match=f"'sequence_parallel' \\(2\\).*{kind}"):
        from_dict({"model": model, "reward": reward, "sequence_parallel": 2})
    from_dict({"model": "tiny-wan", "sequence_parallel": 2})  # a video transformer: accepted


def test_sp_must_divide_the_processes():
    assert distributed.check_sequence_parallel(1, 3, "tiny-wan") == 3
    assert distributed.check_sequence_parallel(2, 4, "tiny-wan") == 2
    with pytest.raises(UserError, match=r"'sequence_parallel' \(2\) must divide the number of processes \(3\)"):
        distributed.check_sequence_parallel(2, 3, "tiny-wan")
    with pytest.raises(UserError, match=r"must divide the number of processes \(1\)"):
        distributed.check_sequence_parallel(2, 1, "tiny-wan")  # sp 2 without a launch


def test_sp_is_refused_under_deepspeed_and_accepted_under_fsdp2(monkeypatch):
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    assert distributed.check_sequence_parallel(2, 4, "tiny-wan") == 2  # FSDP2: gradients rescaled (steppers.py)
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    with pytest.raises(UserError, match="not supported with the deepspeed_zero2 accelerate config"):
        distributed.check_sequence_parallel(2, 2, "tiny-wan")
    assert distributed.check_sequence_parallel(1, 2, "tiny-wan") == 2  # sp 1: the launch as before


def test_heads_and_video_tokens_must_divide_by_sp():
    sp_mod.check_shapes("Wan", 12, 3600, 4)
    with pytest.raises(UserError, match="must divide the Wan transformer's 2 attention heads"):
        sp_mod.check_shapes("Wan", 2, 16, 4)
    with pytest.raises(UserError, match="must divide the 3 video tokens of Wan"):
        sp_mod.check_shapes("Wan", 2, 3, 2)


def test_tiny_wan_at_16x16_is_refused_before_any_process_group_is_needed():
    """tiny-wan at 5 x 16 x 16: latents 16 x 2 x 2 x 2, 2 x 1 x 1 = 2 tokens at patch 1 x 2 x 2; 9 frames: 3."""
    from grpo_bench.models.adapter_options import AdapterOptions
    from grpo_bench.models.wan import tiny_wan

    model = tiny_wan(AdapterOptions(frames=9, height=16, width=16, lora_rank=0, device="cpu"))
    assert model.video_tokens() == 3
    with pytest.raises(UserError, match="must divide the 3 video tokens"):
        model.enable_sequence_parallel(2, torch.device("cpu"))
    model.enable_sequence_parallel(1, torch.device("cpu"))  # sp 1: nothing happens
    assert model.sequence_parallel == 1 and model.sequence_parallel_group is None


# --- the HunyuanVideo 1.5 plan ---------------------------------------------------------------------
def test_the_hunyuan15_plan_names_real_modules_and_forward_arguments():
    from diffusers import HunyuanVideo15Transformer3DModel
    from diffusers.models._modeling_parallel import ContextParallelInput, ContextParallelOutput
    from diffusers.models.transformers.transformer_hunyuan_video15 import HunyuanVideo15TransformerBlock

    plan = sp_mod.hunyuan15_cp_plan()
    assert set(plan) == {"transformer_blocks.0", "proj_out"}
    block_args = list(inspect.signature(HunyuanVideo15TransformerBlock.forward).parameters)[1:]
    split = plan["transformer_blocks.0"]
    assert set(split) <= set(block_args) and "temb" not in split  # the timestep embedding is per video
    assert split["hidden_states"] == ContextParallelInput(split_dim=1, expected_dims=3)
    assert [c.split_dim for c in split["freqs_cis"]] == [0, 0]  # RoPE tables [L_video, D]
    assert isinstance(plan["proj_out"], ContextParallelOutput) and plan["proj_out"].gather_dim == 1
    model = HunyuanVideo15Transformer3DModel(
        in_channels=9, out_channels=4, num_attention_heads=2, attention_head_dim=8, num_layers=1,
        num_refiner_layers=1, patch_size=1, patch_size_t=1, text_embed_dim=16, text_embed_2_dim=32,
        image_embed_dim=12, rope_axes_dim=(2, 2, 4))
    assert model.transformer_blocks[0] is not None and model.proj_out is not None
    assert getattr(HunyuanVideo15Transformer3DModel, "_cp_plan", None) is None  # the plan is ours


@pytest.mark.parametrize("rows, sp, pad", [(28, 2, 0), (27, 2, 1), (1985, 2, 1), (1985, 4, 3), (1985, 8, 7), (5, 1, 0)])
def test_text_rows_padding(rows, sp, pad):
    """1985 = 1000 Qwen2.5-VL + 256 ByT5 + 729 image rows: HunyuanVideo 1.5's text at the checkpoint."""
    assert sp_mod.text_rows_padding(rows, sp) == pad and (rows + pad) % sp == 0


def test_padded_text_rows_leave_the_hunyuan15_velocity_unchanged():
    """The masked rows the split adds (one process: the padding alone): the same velocity."""
    from grpo_bench.models.adapter_options import AdapterOptions
    from grpo_bench.models.hunyuan15 import tiny_hunyuan15

    model = tiny_hunyuan15(AdapterOptions(frames=5, height=16, width=16, lora_rank=0, device="cpu"))
    cond = model.encode_prompts(["a red ball", "a fox"])
    x = torch.randn(2, *model.latent_shape, generator=torch.Generator().manual_seed(0))
    sigma = torch.tensor([0.6, 0.2])
    with torch.no_grad():
        plain = model.velocity(x, sigma, cond)
        model.net.text_padding = 3
        padded = model.velocity(x, sigma, cond)
    torch.testing.assert_close(padded, plain, rtol=1e-5, atol=1e-6)


# --- rank arithmetic -------------------------------------------------------------------------------
class _Acc:
    """An accelerator of ``world`` processes seen from ``rank``: gather stacks each rank's tensor (rank r's is
    ``t + 100 r``, so a block says which process it came from); reduce sums ``world`` copies."""

    def __init__(self, rank: int, world: int) -> None:
        self.process_index, self.num_processes, self.device, self.is_main_process = rank, world, "cpu", rank == 0

    def gather(self, t):
        return torch.cat([(t + 100 * r).reshape(-1, *t.shape[1:]) for r in range(self.num_processes)])  # as accelerate

    def reduce(self, t, reduction="sum"):
        return t * self.num_processes if reduction == "sum" else t


@pytest.mark.parametrize("world, sp", [(4, 2), (8, 4), (6, 3), (2, 2)])
def test_groups_of_sp_consecutive_ranks_are_one_data_parallel_rank_each(world, sp):
    views = [distributed.DataParallel(_Acc(r, world), sp) for r in range(world)]
    assert [v.process_index for v in views] == [r // sp for r in range(world)]
    assert {v.num_processes for v in views} == {world // sp} and {v.world_size for v in views} == {world}
    assert [v.is_main_process for v in views] == [r == 0 for r in range(world)]
    # the rows and the SDE seeds of a group are those of its data-parallel rank
    rows = [distributed.shard(8 * world, v.process_index, v.num_processes) for v in views]
    assert all(rows[r] == rows[r - r % sp] for r in range(world))
    assert len({distributed.rank_seed(7, v.process_index) for v in views}) == world // sp
    # gather: one copy per group (its first process's), in group order; sum: each group counted once
    got = views[1].gather(torch.tensor([1.0, 2.0]))
    assert got.tolist() == [x + 100 * g * sp for g in range(world // sp) for x in (1.0, 2.0)]
    assert views[0].gather(torch.tensor(5.0)).tolist() == [5.0 + 100 * g * sp for g in range(world // sp)]
    assert float(views[0].reduce(torch.tensor(3.0), "sum")) == 3.0 * world / sp
    assert float(views[0].reduce(torch.tensor(3.0), "mean")) == 3.0


def test_sp_1_is_the_accelerator_itself():
    acc = _Acc(0, 2)
    assert distributed.data_parallel(acc, 1) is acc


def test_a_trainer_at_sp_2_on_one_process_refuses_before_loading_anything(tmp_path):
    from grpo_bench.train.trainer import Trainer

    cfg = RunConfig(model="tiny-wan", sequence_parallel=2, device="cpu")
    with pytest.raises(UserError, match="must divide the number of processes"):
        Trainer(cfg, tmp_path / "run", model=SimpleNamespace(), reward=SimpleNamespace())


# --- grpo-bench plan --------------------------------------------------------------------------------
def test_the_plan_divides_activations_and_transformer_time_by_sp_and_counts_a_group_as_one_rank():
    from plan_configs import hy  # HunyuanVideo 1.5 480p x 81 frames, the paper's recipe (no weights: meta device)
    from section_support import plan_of

    split = plan_of(hy(sequence_parallel=2), processes=8)  # 4 data-parallel groups of 2
    dp4 = plan_of(hy(), processes=4)
    assert split.sequence_parallel == 2 and split.processes == 8
    assert split.gpu["activations"] == pytest.approx(dp4.gpu["activations"] / 2)
    assert split.gpu["rollout_store"] == pytest.approx(dp4.gpu["rollout_store"])  # the group's rows on each
    assert split.seconds["transformer"] == pytest.approx(dp4.seconds["transformer"] / 2)
    assert split.gpu_peak < dp4.gpu_peak
    assert plan_of(hy(), processes=8).sequence_parallel == 1
    with pytest.raises(UserError, match=r"must divide the number of processes \(3\)"):
        plan_of(hy(sequence_parallel=2), processes=3)
    fsdp = plan_of(hy(sequence_parallel=2, lora_rank=0), processes=8, sharding="fsdp2")
    assert fsdp.gpu["activations"] == pytest.approx(plan_of(hy(lora_rank=0), processes=4).gpu["activations"] / 2)
    with pytest.raises(UserError, match="not supported with sharding 'deepspeed_zero2'"):
        plan_of(hy(sequence_parallel=2), processes=8, sharding="deepspeed_zero2")


# --- opt-in: split on CPU processes (gloo) against the unsplit model --------------------------------
def _run(cmd: list[str]) -> None:
    res = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=900)
    assert res.returncode == 0, res.stderr[-4000:]


@pytest.mark.slow
@pytest.mark.xdist_group("launches")  # several processes each, one launch at a time (tests/conftest.py)
@pytest.mark.parametrize("model", ["tiny-wan", "tiny-hunyuan15"])
def test_two_process_ulysses_forward_and_backward_match_the_unsplit_model(tmp_path, model):
    """Velocity and the group's summed gradients against the unsplit model (full fine-tuning: every weight);
    tiny-hunyuan15 with 27 text rows, so one masked row is added."""
    _run([*torch_run(), "--nproc_per_node", "2",
          str(SUPPORT / "sp_model_script.py"), model, str(tmp_path)])
    rec = json.loads((tmp_path / f"{model}.json").read_text())
    assert rec["missing"] == [] and rec["n_grads"] > 50
    assert rec["velocity"] <= 1e-5 and rec["grad"] <= 1e-5 and rec["grad_tensor"] <= 1e-5, rec
    assert rec["text_padding"] == (1 if model == "tiny-hunyuan15" else 0)


def _train(tmp_path: Path, tag: str, processes: int, sp: int, config: Path | None = None
           ) -> tuple[dict, dict, list[dict]]:
    script = [str(SUPPORT / "sp_train_script.py"), str(tmp_path), tag, str(sp)]
    if processes == 1:
        _run([sys.executable, *script])
    elif config is not None:
        _run([*accelerate_launch(), "--config_file", str(config), *script])
    else:
        _run([*accelerate_launch(), "--multi_gpu", "--num_processes", str(processes),
              "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", *script])
    ranks = [json.loads((tmp_path / f"{tag}-rank{r}.json").read_text()) for r in range(processes)]
    return json.loads((tmp_path / f"{tag}.json").read_text()), torch.load(tmp_path / f"{tag}-params.pt"), ranks


def _same_run(a: tuple[dict, dict, list[dict]], b: tuple[dict, dict, list[dict]]) -> None:
    (ma, pa, _), (mb, pb, _) = a, b
    assert pa.keys() == pb.keys()
    diff = sum(float((pa[k] - pb[k]).pow(2).sum()) for k in pa) ** 0.5
    assert diff <= 1e-5 * sum(float(pa[k].pow(2).sum()) for k in pa) ** 0.5
    assert sum(float(v.abs().sum()) for k, v in pa.items() if "lora_B" in k) > 0  # the updates moved the adapters
    drop = ("compute_seconds",)
    assert {k: v for k, v in ma["compute"].items() if k not in drop} == \
        {k: v for k, v in mb["compute"].items() if k not in drop}  # counted once per group
    for la, lb in zip(ma["lines"], mb["lines"], strict=True):
        for k in ("reward", "grad_norm", "eval_reward", "kl"):
            if k in la:
                assert lb[k] == pytest.approx(la[k], rel=1e-4, abs=1e-9), k
        for a_, b_ in zip(la.get("grad_norm_per_step", []), lb.get("grad_norm_per_step", []), strict=True):
            assert (a_ is None and b_ is None) or b_ == pytest.approx(a_, rel=1e-4)


@pytest.mark.slow
@pytest.mark.xdist_group("launches")  # several processes each, one launch at a time (tests/conftest.py)
def test_two_updates_at_sp_2_match_one_process(tmp_path):
    one, split = _train(tmp_path, "one", 1, 1), _train(tmp_path, "sp2", 2, 2)
    _same_run(one, split)
    ranks = split[2]
    assert ranks[0]["digest"] == ranks[1]["digest"] and ranks[0]["split"] == 2
    assert ranks[0]["rows"] == ranks[1]["rows"] == [0, 4]  # one data-parallel rank: the whole batch


@pytest.mark.slow
@pytest.mark.xdist_group("launches")  # several processes each, one launch at a time (tests/conftest.py)
def test_dp_2_x_sp_2_on_4_processes_matches_2_plain_data_parallel_processes(tmp_path):
    dp, both = _train(tmp_path, "dp2", 2, 1), _train(tmp_path, "dp2sp2", 4, 2)
    _same_run(dp, both)
    ranks = both[2]
    assert len({r["digest"] for r in ranks}) == 1
    assert [r["rows"] for r in ranks] == [[0, 2], [0, 2], [2, 4], [2, 4]]  # groups of 2 consecutive ranks
    assert [r["rows"] for r in dp[2]] == [[0, 2], [2, 4]]


@pytest.mark.slow
@pytest.mark.xdist_group("launches")  # several processes each, one launch at a time (tests/conftest.py)
def test_sp_2_under_fsdp2_matches_one_process(tmp_path):
    """FSDP2 shards over both processes of the group and averages over them; the stepper rescales to the
    group's sum (steppers.py): the same run as one process."""
    import yaml

    cfg = yaml.safe_load(accelerate_configs.config_path("fsdp2").read_text())
    cfg.update(num_processes=2)
    cfg.pop("gpu_ids", None)
    (tmp_path / "fsdp2_cpu.yaml").write_text(yaml.safe_dump(cfg))
    one, split = _train(tmp_path, "one", 1, 1), _train(tmp_path, "fsdp", 2, 2, tmp_path / "fsdp2_cpu.yaml")
    _same_run(one, split)
    assert all(r["sharded"] for r in split[2]) and split[2][0]["digest"] == split[2][1]["digest"]
