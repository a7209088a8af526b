"""study export on a tiny finished suite: pairs share seed, prompt and sample; nothing a rater can
reach names a method; world clips are upscaled by pixel repetition, real-model clips keep their size;
checks and repeats are where the key says; user mistakes are one-line errors before any work."""

from __future__ import annotations

import json

import imageio_ffmpeg
import numpy as np
import pytest
from study_support import ROWS, build_suite
from typer.testing import CliRunner

from grpo_bench.cli.commands import app
from grpo_bench.errors import UserError
from grpo_bench.study.export import ExportOptions, export_kit


def _decode(path):
    gen = imageio_ffmpeg.read_frames(str(path))
    meta = next(gen)
    w, h = meta["size"]
    frames = [np.frombuffer(f, np.uint8).reshape(h, w, 3) for f in gen]
    return meta, np.stack(frames)


def test_world_kit_pairs_rows_on_the_same_noise_and_hides_the_methods(tmp_path):
    root = build_suite(tmp_path)
    summary = export_kit(root, root / "kit", ExportOptions(pairs=3, checks=2, repeats=2, seed=1))
    assert (summary["main"], summary["repeat"], summary["identical"], summary["broken"]) == (6, 2, 2, 2)
    pairs = json.loads((root / "kit" / "pairs.json").read_text())
    key = json.loads((root / "kit" / "key.json").read_text())
    assert key["world"] is True and key["target"] == "sage_grpo kl=dual"
    served = (root / "kit" / "pairs.json").read_text().lower()
    for word in ("sage", "dance", "flow", "grpo", "main", "repeat", "identical", "broken", "target"):
        assert word not in served
    clips = key["clips"]
    for p in pairs["pairs"]:
        info = key["pairs"][p["id"]]
        a, b = (clips[c] for c in p["clips"])
        assert a["prompt"] == b["prompt"] == p["prompt"]
        if info["kind"] in ("main", "repeat"):
            assert (a["seed"], a["sample"]) == (b["seed"], b["sample"])  # same initial noise
            assert {a["row"], b["row"]} == {key["target"], info["baseline_row"]}
            assert clips[info["target"]]["row"] == key["target"]
        if info["kind"] == "identical":
            assert p["clips"][0] == p["clips"][1]
    main = [v for v in key["pairs"].values() if v["kind"] == "main"]
    assert {v["baseline_row"] for v in main} == {"dance_grpo kl=none", "flow_grpo kl=none"}
    assert len({clips[v["target"]]["prompt"] for v in main if v["baseline_row"] == "flow_grpo kl=none"}) == 2
    assert sorted(p.stem for p in (root / "kit" / "clips").iterdir()) == sorted(clips)
    # a world clip: 16 px -> 256 px by pixel repetition; the row's flat colour survives the encoding
    cid = main[0]["target"]
    meta, frames = _decode(root / "kit" / "clips" / f"{cid}.mp4")
    assert meta["size"] == (256, 256) and frames.shape[0] == 4
    assert abs(frames.mean() - (0.6 + 1) * 127.5) < 3
    broken_pair = next(v for v in key["pairs"].values() if v["kind"] == "broken")
    _, intact = _decode(root / "kit" / "clips" / f"{broken_pair['intact']}.mp4")
    _, broken = _decode(root / "kit" / "clips" / f"{broken_pair['broken']}.mp4")
    assert np.abs(intact.astype(float) - broken.astype(float)).mean() > 30
    assert json.loads((root / "studies.json").read_text()) == [str((root / "kit").resolve())]


def test_real_model_kit_keeps_the_video_size_and_has_no_oracle(tmp_path):
    rows = {k: ROWS[k] for k in ("dance_grpo kl=none", "sage_grpo kl=dual")}
    root = build_suite(tmp_path, rows=rows, seeds=(0,), samples=1, oracle=False, frames=3, size=258)
    export_kit(root, root / "kit", ExportOptions(pairs=2, checks=0, repeats=0))
    key = json.loads((root / "kit" / "key.json").read_text())
    assert key["world"] is False and len(key["pairs"]) == 2
    meta, frames = _decode(next((root / "kit" / "clips").iterdir()))
    assert meta["size"] == (258, 258) and frames.shape[0] == 3


def test_user_mistakes_are_one_line_errors_before_any_clip_is_written(tmp_path):
    root = build_suite(tmp_path)
    with pytest.raises(UserError, match=r"--target: unknown row 'sage'.*allowed: dance_grpo kl=none"):
        export_kit(root, root / "kit", ExportOptions(target="sage"))
    with pytest.raises(UserError, match="--baselines: unknown row"):
        export_kit(root, root / "kit", ExportOptions(baselines=["sage_grpo kl=dual"]))
    with pytest.raises(UserError, match="--setting: unknown setting 'A'"):
        export_kit(root, root / "kit", ExportOptions(setting="A"))
    with pytest.raises(UserError, match="--pairs must be at least 1"):
        export_kit(root, root / "kit", ExportOptions(pairs=0))
    assert not (root / "kit").exists()
    (root / "dance_grpo-0" / "samples" / "final_eval.pt").unlink()
    with pytest.raises(UserError, match="save_videos"):
        export_kit(root, root / "kit2", ExportOptions(baselines=["dance_grpo kl=none"]))
    res = CliRunner().invoke(app, ["study", "export", str(tmp_path / "nowhere")])
    assert res.exit_code != 0 and "no results.parquet" in str(res.exception)


def test_cli_exports_refuses_to_overwrite_a_kit_and_analyze_needs_votes(tmp_path):
    root = build_suite(tmp_path)
    res = CliRunner().invoke(app, ["study", "export", str(root), "--pairs", "1", "--checks", "0", "--repeats", "0",
                                   "--baselines", "dance_grpo kl=none"])
    assert res.exit_code == 0, res.output
    assert "1 pairs of sage_grpo kl=dual against dance_grpo kl=none" in res.output
    res = CliRunner().invoke(app, ["study", "export", str(root)])
    assert isinstance(res.exception, UserError) and "already holds a kit" in str(res.exception)
    res = CliRunner().invoke(app, ["study", "analyze", str(root / "study")])
    assert isinstance(res.exception, UserError) and "no votes yet" in str(res.exception)
