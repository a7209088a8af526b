"""Media of an image model, whose stills are one-frame clips: the final eval as a PNG grid, the report's
strips (one frame each), `grpo-bench sample --model`, and the human-study kit: PNG pairs of stills served
as images (image/png) on a rating page that shows <img> where a video kit shows <video>."""

from __future__ import annotations

import json
import re

from fastapi.testclient import TestClient
from study_support import build_suite

from grpo_bench.errors import UserError
from grpo_bench.study.export import ExportOptions, export_kit
from grpo_bench.study.server import create_app


def test_a_kit_of_stills_is_pairs_of_pngs(tmp_path):
    root = build_suite(tmp_path / "suite", frames=1, size=24)
    export_kit(root, root / "kit", ExportOptions(pairs=2, checks=1, repeats=0, seed=2))
    clips = sorted((root / "kit" / "clips").iterdir())
    assert clips and {p.suffix for p in clips} == {".png"}
    import imageio.v3 as iio

    assert iio.imread(clips[0]).shape[:2] == (264, 264)  # 24 px upscaled by 11 to reach 256 (clips.MIN_SIDE)
    pairs = json.loads((root / "kit" / "pairs.json").read_text())
    assert pairs
    with TestClient(create_app(root / "kit")) as client:
        page = client.get("/rate", params={"rater": "r1"}).text
        ids = re.findall(r'<img id="(?:left|right)" src="/clips/(\w+)\.png"', page)
        assert len(ids) == 2 and "<video" not in page
        res = client.get(f"/clips/{ids[0]}.png")
        assert res.status_code == 200 and res.headers["content-type"] == "image/png"
        assert client.get(f"/clips/{ids[0]}.mp4").status_code == 404  # only the file the kit holds


def test_final_eval_stills_are_a_png_grid_and_videos_stay_mp4(tmp_path):
    import imageio.v3 as iio
    import torch

    from grpo_bench.train.export import write_eval_videos

    stills = torch.rand(3, 3, 1, 16, 16) * 2 - 1
    written = write_eval_videos(stills, tmp_path / "img", gif=True)
    assert [p.name for p in written] == ["final_eval.png"]
    grid = iio.imread(written[0])
    assert grid.shape == (128, 3 * 128 + 2 * 2 * 8, 3)  # 3 stills side by side, upscaled 8x, gaps between
    videos = torch.rand(2, 3, 4, 16, 16) * 2 - 1
    assert [p.suffix for p in write_eval_videos(videos, tmp_path / "vid", gif=True)] == [".gif", ".mp4"]


def test_report_strips_of_stills_hold_one_frame(tmp_path):
    import io

    import torch

    from grpo_bench.atomic import atomic_write_bytes
    from grpo_bench.suite.strips import strip_pixels, strip_rows

    stills = torch.rand(2, 3, 1, 8, 8) * 2 - 1
    buf = io.BytesIO()
    torch.save(stills, buf)
    atomic_write_bytes(tmp_path / "samples" / "final_eval.pt", buf.getvalue())
    rows = strip_rows(tmp_path, [{"prompt": "a cat", "sample": 0}, {"prompt": "a dog", "sample": 0}])
    assert len(rows) == 2 and rows[0]["shape"] == [1, 1, 8, 8, 3]
    pixels = strip_pixels(rows[1]["text"], None, rows[1]["shape"])
    want = ((stills[1, :, 0].clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8).permute(1, 2, 0).numpy()
    assert (pixels[0, 0] == want).all()


def test_sample_an_image_model_writes_a_png_grid_scored_by_a_reward(tmp_path):
    from typer.testing import CliRunner

    from grpo_bench.cli import app

    out = tmp_path / "fox.png"
    res = CliRunner().invoke(app, ["sample", "--model", "tiny-sd3", "--prompt", "a red fox", "--n", "2", "--steps",
                                   "2", "--reward", "jpeg_incompressibility", "--out", str(out), "--json",
                                   str(tmp_path / "s.json")], terminal_width=200)
    assert res.exit_code == 0, res.output
    assert out.is_file() and (tmp_path / "fox_strip.png").is_file()
    scores = json.loads((tmp_path / "s.json").read_text())["scores"]["jpeg"]
    assert len(scores) == 2 and all(s > 0 for s in scores)
    for args, match in ((["--out", str(tmp_path / "x.gif")], "must name a .png file"),
                        (["--reward", "videoalign", "--out", str(out)], "scores videos only")):
        res = CliRunner().invoke(app, ["sample", "--model", "tiny-sd3", "--prompt", "a fox", *args],
                                 terminal_width=200)
        assert isinstance(res.exception, UserError) and match in str(res.exception), res.output  # exit 2 in main
