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

from grpo_bench.cli import app
from grpo_bench.errors import UserError
from grpo_bench.study.export import ExportOptions, export_kit
from grpo_bench.study.kit import load_kit
from grpo_bench.study.server import layout
from grpo_bench.suite.results import read_table


def _decode(path):
    gen = imageio_ffmpeg.read_frames(str(path))
    meta = next(gen)
    w, h = meta["size"]
    frames = [np.frombuffer(f, np.uint8).reshape(h, w, 3) for f in gen]
    return meta, np.stack(frames)


def test_world_kit_pairs_rows_on_the_same_noise_and_hides_the_methods(tmp_path):
    root = build_suite(tmp_path)
    summary = export_kit(root, root / "kit", ExportOptions(pairs=3, checks=2, repeats=2, seed=1))
    # 2 baselines x 3 pairs = 6 target videos a rater; 2 blocks of raters; 2 repeats in each block
    assert (summary["main"], summary["repeat"], summary["identical"], summary["broken"]) == (12, 4, 2, 2)
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
        if info["kind"] == "identical":  # one video under two ids: the page shows two different names
            assert p["clips"][0] != p["clips"][1] and {**a, "cell": 0} == {**b, "cell": 0}
            assert (root / "kit" / "clips" / f"{p['clips'][0]}.mp4").read_bytes() == \
                (root / "kit" / "clips" / f"{p['clips'][1]}.mp4").read_bytes()
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
    assert "sage_grpo kl=dual against dance_grpo kl=none; 1 block(s) of raters, each rater sees 1 pair(s)" in res.output
    assert "power: 29 raters × 1 pairs = 29 votes" in res.output
    res = CliRunner().invoke(app, ["study", "export", str(root)])
    assert isinstance(res.exception, UserError) and "already holds a kit" in str(res.exception)
    res = CliRunner().invoke(app, ["study", "analyze", str(root / "study")])
    assert isinstance(res.exception, UserError) and "no votes yet" in str(res.exception)


def _sequences(kit_dir):
    """Every rater's possible sequence: one per design block, in a rater's own order (the server's layout)."""
    kit = load_kit(kit_dir)
    return [layout(kit, f"rater{g}", g) for g in range(len(kit.blocks))]


def test_no_rater_sees_a_clip_id_or_a_target_video_twice_and_the_baselines_rotate(tmp_path):
    root = build_suite(tmp_path)  # 2 seeds x 2 prompts x 2 samples = 8 shared videos, 2 baselines
    summary = export_kit(root, root / "kit", ExportOptions(pairs=4, checks=2, repeats=2, seed=4))
    key = json.loads((root / "kit" / "key.json").read_text())
    kinds = {pid: info["kind"] for pid, info in key["pairs"].items()}
    sequences = _sequences(root / "kit")
    assert len(sequences) == 2
    covered = []
    for seq in sequences:
        shown = [(s.pair.id, c) for s in seq for c in (s.left, s.right)]
        ids = [c for _, c in shown]
        assert len(ids) == len(set(ids)), "a clip id repeats inside one rater's sequence"
        main = [key["pairs"][s.pair.id] for s in seq if kinds[s.pair.id] == "main"]
        targets = [tuple(info["video"]) for info in main]
        assert len(targets) == len(set(targets)) == 8, "a rater sees a target video twice"
        per_base = {b: sum(info["baseline_row"] == b for info in main) for b in key["baselines"]}
        assert set(per_base.values()) == {4}
        # checks and repeats are told apart only in the key: the pairs file has the same fields for all
        assert {kinds[s.pair.id] for s in seq} == {"main", "repeat", "identical", "broken"}
        covered += [(tuple(info["video"]), info["baseline_row"]) for info in main]
    assert len(covered) == len(set(covered)) == 16  # the blocks together: every (video, baseline) once
    pairs = json.loads((root / "kit" / "pairs.json").read_text())
    assert {frozenset(p) for p in pairs["pairs"]} == {frozenset(("id", "prompt", "clips"))}
    assert pairs["design"]["raters_per_block"] == [15, 14] and len(pairs["design"]["blocks"]) == 2
    assert summary["design"]["shortfall"] is None


def test_export_says_why_it_made_fewer_pairs_than_asked(tmp_path):
    root = build_suite(tmp_path)
    res = CliRunner().invoke(app, ["study", "export", str(root), "--pairs", "32", "--checks", "0", "--repeats", "0"])
    assert res.exit_code == 0, res.output
    out = " ".join(res.output.split())
    assert "4 pair(s) per baseline, not 32: the rows share 8 eval videos" in out
    assert "a rater sees each target video once" in out


def test_a_null_score_in_final_json_reads_as_a_missing_score(tmp_path):
    """final.json is strict JSON: a missing score (no oracle on a real model) is null, as NaN was before."""

    from grpo_bench.report import data
    from grpo_bench.study.export import _load_row

    run = build_suite(tmp_path / "tiny", oracle=False)
    assert '"oracle_vq": null' in (run / "dance_grpo-0" / "final.json").read_text()
    (run / "dance_grpo-1" / "final.json").write_text(json.dumps(  # one cell as an older writer left it: NaN
        {"eval_videos": [{**v, "oracle_vq": float("nan")} for v in
                         json.loads((run / "dance_grpo-1" / "final.json").read_text())["eval_videos"]]}))
    cells = data.cells(read_table(run / "results.parquet"))
    videos = _load_row(run, cells, "dance_grpo kl=none")
    assert len(videos) == 8 and {v.cell for v in videos.values()} == {"dance_grpo-0", "dance_grpo-1"}
    for video in videos.values():
        assert video.scores["oracle_vq"] is None and video.scores["oracle_ta"] is None
        assert video.scores["judge_reward"] == pytest.approx(-0.6 + 0.1 * video.key[2] + 0.01 * video.key[0])
