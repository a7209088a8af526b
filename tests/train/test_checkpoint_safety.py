"""Run folders are untrusted: resuming reads only safetensors and JSON, never a pickle; an unreadable
checkpoint falls back to the previous one with a message naming it."""

from __future__ import annotations

import json
import os
import pickle

import pytest
from tiny_run import lines, no_times, run, tiny
from tiny_world import TinyModel, TinyReward

from grpo_bench.errors import UserError
from grpo_bench.train import checkpoint
from grpo_bench.train.trainer import train


class Planted:
    """A pickle that runs code when it is loaded: it creates the marker file."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _cut_run(tmp_path, **kw):
    """A finished run made unfinished again: DONE and final.json removed (resume must load a checkpoint)."""
    run(tmp_path, **kw)
    for name in ("DONE", "final.json"):
        (tmp_path / "run" / name).unlink()
    return tmp_path / "run"


KW = dict(updates=4, checkpoint_every=2, eval_every=2, kl="dual", kl_adaptive=True, kl_beta_min=0.01,
          kl_beta_max=1.0, kl_warmup=2, kl_target=1e-6)


def test_a_checkpoint_holds_only_safetensors_and_json(tmp_path):
    out = _cut_run(tmp_path, **KW)
    folders = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert folders == ["update_000002", "update_000004"]  # the previous one is kept as the fallback
    names = {p.suffix for f in (out / "checkpoints").iterdir() for p in f.iterdir()}
    assert names == {".json", ".safetensors"}


@pytest.mark.parametrize("name", ["custom_checkpoint_0.pkl", "random_states_0.pkl", "optimizer.bin"])
def test_a_planted_pickle_never_runs_on_resume(tmp_path, name):
    out = _cut_run(tmp_path, **KW)
    marker = tmp_path / "pwned"
    for folder in (out / "checkpoints").iterdir():
        (folder / name).write_bytes(pickle.dumps(Planted(str(marker))))
    final = train(tiny(**KW), out, model=TinyModel(seed=0), reward=TinyReward())
    assert not marker.exists()
    assert final["updates"] == 4


def test_an_old_pickled_checkpoint_is_refused_cleanly_without_running_it(tmp_path, capsys):
    """A folder holding only accelerate's pickles (older grpo-bench, or a hostile one): one clean error."""
    out = _cut_run(tmp_path, **KW)
    marker = tmp_path / "pwned"
    for folder in (out / "checkpoints").iterdir():
        for f in folder.iterdir():
            f.unlink()
        (folder / "custom_checkpoint_0.pkl").write_bytes(pickle.dumps(Planted(str(marker))))
    with pytest.raises(UserError, match="no readable checkpoint.*--no-resume"):
        train(tiny(**KW), out, model=TinyModel(seed=0), reward=TinyReward())
    assert not marker.exists()
    assert "state.json is missing" in capsys.readouterr().err


@pytest.mark.parametrize("damage", ["truncate", "state_json", "delete"])
def test_a_corrupt_checkpoint_falls_back_to_the_previous_one(tmp_path, capsys, damage):
    whole = run(tmp_path, "whole", **KW)
    out = _cut_run(tmp_path, **KW)
    newest = out / "checkpoints" / "update_000004"
    if damage == "truncate":
        f = newest / "optimizer.safetensors"
        f.write_bytes(f.read_bytes()[:100])
    elif damage == "state_json":
        (newest / "state.json").write_text('{"format": "grpo-bench/checkpoint/2", "anchors": ')
    else:
        (newest / "trainable.safetensors").unlink()
    resumed = train(tiny(**KW), out, model=TinyModel(seed=0), reward=TinyReward())
    err = capsys.readouterr().err
    assert f"checkpoint {newest} is unreadable" in err and "previous" in err
    assert no_times(lines(out)) == no_times(lines(tmp_path / "whole"))  # updates 2, 3 redone exactly
    assert resumed["eval_videos"] == whole["eval_videos"]


def test_a_leftover_temp_folder_is_removed_on_resume(tmp_path):
    out = _cut_run(tmp_path, **KW)
    tmp = out / "checkpoints" / f"{checkpoint.TMP_PREFIX}000006"
    tmp.mkdir()
    (tmp / "state.json").write_text(json.dumps({"junk": 1}))
    train(tiny(**KW), out, model=TinyModel(seed=0), reward=TinyReward())
    assert not tmp.exists()


def test_nested_state_round_trips_through_json_and_tensors():
    import random

    import numpy as np
    import torch

    state = {"state": {0: {"step": torch.tensor(3.0), "exp_avg": torch.randn(2, 3)}},
             "param_groups": [{"betas": (0.9, 0.999), "lr": 1e-3, "foreach": None, "params": [0]}],
             "py": random.getstate(), "np": np.random.get_state()}
    tensors: dict = {}
    skel = json.loads(json.dumps(checkpoint.flatten(state, tensors)))
    back = checkpoint.unflatten(skel, tensors)
    assert back["param_groups"] == state["param_groups"] and back["py"] == state["py"]
    assert torch.equal(back["state"][0]["exp_avg"], state["state"][0]["exp_avg"])
    assert np.array_equal(back["np"][1], state["np"][1]) and back["np"][1].dtype == np.uint32
    with pytest.raises(TypeError, match="cannot store"):
        checkpoint.flatten({"x": object()}, {})


def test_engine_files_are_read_weights_only_even_when_a_library_asks_otherwise(tmp_path):
    """DeepSpeed's loader calls torch.load(weights_only=False); inside weights_only_loads it cannot run code."""
    import torch

    marker = tmp_path / "pwned"
    planted = tmp_path / "zero_pp_rank_0_mp_rank_00_optim_states.pt"
    torch.save({"x": Planted(str(marker))}, planted)
    with checkpoint.weights_only_loads(), pytest.raises(pickle.UnpicklingError):
        torch.load(planted, weights_only=False)
    assert not marker.exists()
    torch.save({"w": torch.ones(2)}, tmp_path / "plain.pt")  # tensors still load
    with checkpoint.weights_only_loads():
        assert torch.equal(torch.load(tmp_path / "plain.pt", weights_only=False)["w"], torch.ones(2))


def test_ctrl_c_in_train_saves_a_checkpoint_at_once_and_the_resumed_run_matches(tmp_path):
    """checkpoint_every is 10: without the stop request nothing would be saved before update 10."""
    from grpo_bench import interrupt

    kw = dict(KW, updates=4, checkpoint_every=10)
    whole = run(tmp_path, "whole", **kw)

    def ctrl_c_during_update_2(done, total, line):
        if done == 1:
            interrupt.request()  # what the first SIGINT does

    try:
        with pytest.raises(interrupt.Interrupted, match="stopped after update 2 of 4"):
            train(tiny(**kw), tmp_path / "cut", model=TinyModel(seed=0), reward=TinyReward(),
                  progress=ctrl_c_during_update_2)
    finally:
        interrupt.reset()
    assert [p.name for p in (tmp_path / "cut" / "checkpoints").iterdir()] == ["update_000002"]
    resumed = train(tiny(**kw), tmp_path / "cut", model=TinyModel(seed=0), reward=TinyReward())
    assert no_times(lines(tmp_path / "cut")) == no_times(lines(tmp_path / "whole"))
    assert resumed["eval_videos"] == whole["eval_videos"]
