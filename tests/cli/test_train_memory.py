"""``grpo-bench train --model M`` holds plan's predicted GPU peak per process (plan/estimate.py ``estimate``, what
``grpo-bench plan`` prints) against the device's memory before any weight loads (cli/train_memory.py): refused in
one line (exit 2) naming the prediction, the memory and what shrinks it, unless ``--no-memory-check``; on a machine
without a GPU it says it skipped, unless ``--gpu-memory GB`` gives a size to check against."""

from __future__ import annotations

import io
import sys

import pytest
from rich.console import Console
from section_support import plan_of

import grpo_bench.cli.entry as entry
from grpo_bench.cli import train as train_cli
from grpo_bench.cli import train_memory
from grpo_bench.cli.train import build_config
from grpo_bench.cli.train_memory import check_train_memory, fitting_frames, launch_shape
from grpo_bench.errors import UserError
from grpo_bench.plan.estimate import GB

WAN14 = ["--model", "wan2.1-14b", "reward=clip_score"]
TINY = ["--model", "tiny-wan", "reward=world_judge"]


def _main(monkeypatch, capsys, *argv: str) -> tuple[int, str, str, list]:
    """Run ``grpo-bench train ARGV`` with the training itself replaced by a recorder: (exit code, stdout, stderr,
    the configs that reached it)."""
    reached: list = []
    monkeypatch.setattr(train_cli, "run_train", lambda cfg, *a: reached.append(cfg) or {"done": True})
    monkeypatch.setattr(sys, "argv", ["grpo-bench", "train", *argv])
    monkeypatch.delenv(train_memory.CHECKED_ENV, raising=False)
    try:
        entry.main()
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err, reached


def _predicted_gb(argv: list[str], **launch) -> float:
    overrides = [a for a in argv if "=" in a]
    model = argv[argv.index("--model") + 1]
    return plan_of(build_config({"model": model}, overrides), **launch).gpu_peak / GB


def test_the_wan14b_recipe_is_refused_on_a_24gb_gpu_in_one_line_before_any_work(monkeypatch, capsys, tmp_path):
    predicted = _predicted_gb(WAN14)
    assert predicted > 24  # 14B parameters in bf16 alone are 26 GB
    code, _, err, reached = _main(monkeypatch, capsys, *WAN14, "--gpu-memory", "24", "--out", str(tmp_path / "r"))
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert not reached and not (tmp_path / "r").exists()  # refused before the run (and its weights) started
    line = lines[0]
    assert f"predicted peak GPU memory {predicted:.1f} GB per process" in line
    assert "exceeds the device's 24.0 GB (--gpu-memory)" in line
    for option in ("frames=", "height=", "width=", "lora_rank=", "--accelerate-config fsdp2", "--no-memory-check"):
        assert option in line, option


def test_the_wan14b_generation_size_does_not_fit_even_an_h200(monkeypatch, capsys):
    size = ["frames=81", "height=720", "width=1280"]
    code, _, err, reached = _main(monkeypatch, capsys, *WAN14, *size, "--gpu-memory-gb", "141")
    assert code == 2 and not reached
    assert f"predicted peak GPU memory {_predicted_gb(WAN14 + size):.1f} GB" in err and "(now 81 x 720 x 1280)" in err


def test_a_tiny_model_passes_the_check_and_trains(monkeypatch, capsys):
    code, out, err, reached = _main(monkeypatch, capsys, *TINY, "--gpu-memory", "24", "--updates", "1")
    assert code == 0 and len(reached) == 1, err
    assert f"memory check: predicted peak {_predicted_gb(TINY):.1f} GB GPU per process (tiny-wan" in out
    assert "fits 24.0 GB (--gpu-memory)" in out


def test_no_memory_check_runs_what_the_check_refuses(monkeypatch, capsys):
    code, out, err, reached = _main(monkeypatch, capsys, *WAN14, "--gpu-memory", "24", "--no-memory-check")
    assert code == 0 and len(reached) == 1 and reached[0].model == "wan2.1-14b", err
    assert "memory check: off (--no-memory-check)" in out


def test_without_a_gpu_or_gpu_memory_the_check_says_it_skipped(monkeypatch, capsys):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    code, out, _, reached = _main(monkeypatch, capsys, *WAN14)
    assert code == 0 and len(reached) == 1
    assert [line for line in out.splitlines() if line.startswith("memory check")] == [
        "memory check: skipped (no GPU is visible; --gpu-memory GB checks the run against a GPU of that size)"]


def test_with_a_gpu_the_check_reads_its_free_memory(monkeypatch):
    """torch.cuda stood in for: the check holds the prediction against the free memory of the run's GPU."""
    import torch

    cfg = build_config({"model": "wan2.1-14b"}, ["reward=clip_score"])
    peak = plan_of(cfg).gpu_peak
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i: "Stand-in GPU")
    for free, fits in ((peak * 0.9, False), (peak * 1.1, True)):
        monkeypatch.setattr(torch.cuda, "mem_get_info", lambda i, free=free: (int(free), int(2 * peak)))
        console = Console(file=io.StringIO(), width=400)
        if fits:
            check_train_memory(cfg, None, None, True, console)
            assert "fits" in console.file.getvalue() and "free on cuda:0 (Stand-in GPU" in console.file.getvalue()
        else:
            with pytest.raises(UserError, match=rf"exceeds the device's {free / GB:.1f} GB \(free on cuda:0"):
                check_train_memory(cfg, None, None, True, console)


def test_an_fsdp2_launch_is_checked_at_its_sharded_prediction(monkeypatch):
    monkeypatch.delenv(train_memory.CHECKED_ENV, raising=False)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.delenv("ACCELERATE_PROCESS_ID", raising=False)
    assert launch_shape("fsdp2") == (8, "fsdp2") and launch_shape(None) == (1, "none")
    cfg = build_config({"model": "wan2.1-14b"}, ["reward=clip_score", "frames=81", "height=720", "width=1280"])
    sharded, single = plan_of(cfg, processes=8, sharding="fsdp2").gpu_peak, plan_of(cfg).gpu_peak
    assert sharded < single
    console = Console(file=io.StringIO(), width=400)
    check_train_memory(cfg, sharded / GB + 0.1, "fsdp2", True, console)  # one process alone would not fit
    assert "8 process(es), sharding fsdp2) fits" in console.file.getvalue()
    import os

    assert os.environ.pop(train_memory.CHECKED_ENV) == "1"  # the launched processes do not check again


def test_the_suggested_frames_are_the_most_that_fit():
    cfg = build_config({"model": "wan2.2-5b"}, ["reward=clip_score", "frames=121", "height=704", "width=1280"])
    memory = 80 * GB

    def peak(f: int) -> float:
        import dataclasses

        return plan_of(dataclasses.replace(cfg, frames=f)).gpu_peak

    frames = fitting_frames(cfg.frames, lambda f: peak(f) <= memory)
    assert frames is not None and (frames - 1) % 4 == 0 and 5 <= frames < 121

    assert peak(frames) <= memory < peak(frames + 4)
