"""`grpo-bench score --reward NAME --prompt TEXT FILE...` end to end: real rewards (the shipped OCR models, JPEG
size) on files written here, and every bad input as one line and exit code 2 naming the file or package."""

from __future__ import annotations

import io
import json
import sys
from importlib import metadata

import numpy as np
import pytest
import torch
from PIL import Image
from rendered_text import rendered

from grpo_bench import media
from grpo_bench.cli import entry
from grpo_bench.cli.score_files import read_file


def cli(monkeypatch, capsys, *args: str) -> tuple[int, list[str], str]:
    """(exit code, stdout lines, stderr) of ``grpo-bench score ARGS`` through the real entry point."""
    monkeypatch.setattr(sys, "argv", ["grpo-bench", "score", *args])
    code = 0
    try:
        entry.main()
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out.splitlines(), out.err.strip()


@pytest.fixture
def files(tmp_path):
    paths = {"hello": tmp_path / "hello.png", "cat": tmp_path / "cat.jpg", "clip": tmp_path / "clip.mp4",
             "gif": tmp_path / "clip.gif"}
    Image.fromarray(rendered("hello world")).save(paths["hello"])
    Image.fromarray(rendered("cat")).save(paths["cat"], quality=100)
    video = torch.rand(1, 3, 6, 16, 24, generator=torch.Generator().manual_seed(0)) * 2 - 1
    media.write_mp4(video, paths["clip"], columns=1)
    media.write_gif(video, paths["gif"], columns=1)
    return paths


def test_ocr_scores_each_file_on_its_own_line(monkeypatch, capsys, files):
    code, lines, err = cli(monkeypatch, capsys, "--reward", "ocr", "--prompt", 'a sign that says "Hello World"',
                           str(files["hello"]), str(files["cat"]))
    assert code == 0, err
    assert len(lines) == 2
    name, key, value = lines[0].split()
    assert (name, key, float(value)) == (str(files["hello"]), "ocr", 1.0)
    assert lines[1].split()[0] == str(files["cat"]) and float(lines[1].split()[2]) < 0.4


def test_json_is_one_object_per_file_and_line(monkeypatch, capsys, files):
    code, lines, err = cli(monkeypatch, capsys, "--reward", "ocr", "--prompt", 'the word "cat"', "--json",
                           str(files["cat"]), str(files["hello"]))
    assert code == 0, err
    records = [json.loads(line) for line in lines]
    assert [r["file"] for r in records] == [str(files["cat"]), str(files["hello"])]
    assert records[0] == {"file": str(files["cat"]), "reward": "ocr", "prompt": 'the word "cat"', "frames": 1,
                          "scores": {"ocr": 1.0}}
    assert records[1]["scores"]["ocr"] < 0.4


def test_jpeg_size_of_a_users_image_is_recomputed_independently(monkeypatch, capsys, files):
    code, lines, err = cli(monkeypatch, capsys, "--reward", "jpeg_incompressibility", "--prompt", "anything",
                           "--json", str(files["hello"]))
    assert code == 0, err
    buffer = io.BytesIO()
    Image.open(files["hello"]).convert("RGB").save(buffer, format="JPEG", quality=95)
    assert json.loads(lines[0])["scores"]["jpeg"] == pytest.approx(buffer.tell() / 1000, abs=1e-6)


def test_videos_are_read_as_clips_of_their_frames(files):
    for path in (files["clip"], files["gif"]):
        item = read_file(path)
        assert (item.kind, item.frames, item.clip.shape[:2]) == ("video", 6, (1, 3)), path
        assert -1 <= float(item.clip.min()) and float(item.clip.max()) <= 1
    still = read_file(files["hello"])
    expected = torch.from_numpy(rendered("hello world").copy()).permute(2, 0, 1).float() / 127.5 - 1
    assert still.kind == "image"
    torch.testing.assert_close(still.clip[0, :, 0], expected)  # PNG is lossless: the pixels, in [-1, 1]


@pytest.mark.parametrize("args, needle", [
    (["--reward", "orc", "--prompt", "x", "{hello}"], "unknown reward 'orc' (did you mean 'ocr'?); allowed: "),
    (["--reward", "ocr", "--prompt", 'x "a"', "{notes}"], "notes.txt is not an image or a video by its suffix '.txt'"),
    (["--reward", "ocr", "--prompt", 'x "a"', "{missing}"], "missing.png does not exist"),
    (["--reward", "ocr", "--prompt", 'x "a"', "{corrupt}"], "corrupt.png cannot be read as an image"),
    (["--reward", "ocr", "--prompt", 'x "a"', "{hello}", "{clip}"],
     "clip.mp4 is a 6-frame video but reward 'ocr' scores still images (one frame) only"),
    (["--reward", "ocr", "--prompt", 'x "a"', "--reward-path", "{hello}", "{hello}"],
     "--reward-path: reward 'ocr' takes no weight path"),
    (["--reward", "hpsv2", "--prompt", "x", "--reward-path", "{missing}", "{hello}"], "missing.png' does not exist"),
    (["--reward", "ocr", "--prompt", " ", "{hello}"], "--prompt is empty"),
    (["--reward", "ocr", "--prompt", "no quotes", "{hello}"], "prompt 'no quotes' has no double-quoted text"),
])
def test_bad_input_is_one_line_and_exit_2(monkeypatch, capsys, files, tmp_path, args, needle):
    (tmp_path / "notes.txt").write_text("not a picture")
    (tmp_path / "corrupt.png").write_bytes(b"\x89PNG but not really")
    names = {**{k: str(v) for k, v in files.items()}, "notes": str(tmp_path / "notes.txt"),
             "missing": str(tmp_path / "missing.png"), "corrupt": str(tmp_path / "corrupt.png")}
    code, lines, err = cli(monkeypatch, capsys, *(a.format(**names) for a in args))
    assert code == 2 and lines == []
    assert err.startswith("error: ") and "\n" not in err and needle in err, err


def test_a_missing_reward_package_names_the_pip_command(monkeypatch, capsys, files):
    from grpo_bench.rewards import rapid_ocr

    def absent(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", absent)
    rapid_ocr.engine.cache_clear()
    try:
        code, lines, err = cli(monkeypatch, capsys, "--reward", "ocr", "--prompt", 'x "a"', str(files["hello"]))
    finally:
        rapid_ocr.engine.cache_clear()
    assert code == 2 and "\n" not in err
    assert "rapidocr-onnxruntime package, which is not installed; pip install 'grpo-bench[ocr]'" in err


@pytest.mark.parametrize("behaviour, needle", [
    ("raise", "cat.jpg: reward 'jpeg_compressibility' cannot score it (ValueError: no pixels I can use)"),
    ("nan", "cat.jpg: reward 'jpeg_compressibility' gave jpeg=nan, not a number"),
])
def test_a_file_the_reward_cannot_score_is_one_line_naming_it(monkeypatch, capsys, files, behaviour, needle):
    from grpo_bench import rewards
    from grpo_bench.rewards.base import Reward

    calls = []

    class Scorer(Reward):  # scores the first file (hello.png), fails on the second (cat.jpg)
        dimensions = ("jpeg",)

        def __call__(self, videos, prompts):
            calls.append(videos.shape)
            if len(calls) == 1:
                return {"jpeg": torch.tensor([1.5])}
            if behaviour == "raise":
                raise ValueError("no pixels I can use")
            return {"jpeg": torch.tensor([float("nan")])}

    monkeypatch.setattr(rewards, "load", lambda name, **kw: Scorer())
    code, lines, err = cli(monkeypatch, capsys, "--reward", "jpeg_compressibility", "--prompt", "x",
                           str(files["hello"]), str(files["cat"]))
    assert code == 2 and needle in err and "\n" not in err, err
    assert lines == []  # nothing printed for the files before it: all are scored, then printed


def test_the_reward_is_not_loaded_when_a_file_is_wrong(monkeypatch, capsys, files, tmp_path):
    from grpo_bench import rewards

    loaded = []
    monkeypatch.setattr(rewards, "load", lambda name, **kw: loaded.append(name))
    code, _, err = cli(monkeypatch, capsys, "--reward", "ocr", "--prompt", 'x "a"', str(files["hello"]),
                       str(tmp_path / "absent.webp"))
    assert code == 2 and "absent.webp does not exist" in err and loaded == []


def test_an_over_large_frame_is_refused_before_it_is_decoded(monkeypatch, files):
    from grpo_bench.cli import score_files
    from grpo_bench.errors import UserError

    monkeypatch.setattr(score_files, "MAX_PIXELS", 128 * 32 - 1)
    with pytest.raises(UserError, match=r"hello.png: 128x32 pixels is more than 4095 per frame"):
        read_file(files["hello"])
    assert np.prod(rendered("x").shape[:2]) == 128 * 32


def moving_square(frames: int = 8, size: int = 16) -> torch.Tensor:
    """A red 4 x 4 square moving left on black: two colours, so a GIF holds it exactly. [1, 3, F, H, W]."""
    clip = -torch.ones(1, 3, frames, size, size)
    for f in range(frames):
        left = size - 4 - f
        clip[0, 0, f, 6:10, left:left + 4] = 1
    return clip


def test_a_video_file_scores_as_its_frames_in_memory(monkeypatch, capsys, tmp_path):
    """The world's oracle and judge of a GIF on disk = of the same clip in memory (frame order, channels, scale)."""
    import imageio.v3 as iio

    from grpo_bench.rewards import load

    clip, prompt = moving_square(), "a red square moving left"
    path = tmp_path / "square.gif"
    iio.imwrite(path, ((clip[0].permute(1, 2, 3, 0) + 1) * 127.5).round().to(torch.uint8).numpy(), loop=0)
    torch.testing.assert_close(read_file(path).clip, clip)  # lossless here: the comparison below is exact
    for name in ("world_oracle", "world_judge"):
        code, lines, err = cli(monkeypatch, capsys, "--reward", name, "--prompt", prompt, "--json", str(path))
        assert code == 0, err
        expected = {k: round(float(v[0]), 6) for k, v in load(name)(clip, [prompt]).items()}
        assert json.loads(lines[0])["scores"] == expected
        assert json.loads(lines[0])["frames"] == 8


def test_a_video_of_another_size_than_the_reward_scores_names_both(monkeypatch, capsys, tmp_path):
    import imageio.v3 as iio

    path = tmp_path / "big.gif"
    iio.imwrite(path, ((moving_square(size=32)[0].permute(1, 2, 3, 0) + 1) * 127.5).round().to(torch.uint8).numpy())
    code, lines, err = cli(monkeypatch, capsys, "--reward", "world_judge", "--prompt", "a red square", str(path))
    assert code == 2 and lines == []
    assert "big.gif is frames x height x width 8x32x32 but reward 'world_judge' scores 8x16x16 only" in err


def test_an_over_long_video_is_refused_before_it_is_decoded(monkeypatch, files):
    import imageio.v3 as iio

    from grpo_bench.cli import score_files
    from grpo_bench.errors import UserError

    decoded = []
    monkeypatch.setattr(score_files, "MAX_FRAMES", 5)
    monkeypatch.setattr(iio, "imiter", lambda *a, **k: decoded.append(a) or iter(()))
    with pytest.raises(UserError, match=r"clip.gif: 6 frames of \d+x\d+ is more than 5 frames"):
        read_file(files["gif"])
    assert decoded == []


def test_a_stream_of_unknown_length_stops_at_the_frame_limit(monkeypatch, files):
    """An MP4's frame count is not in its header (imageio says inf): decoding stops one frame past the limit."""
    from grpo_bench.cli import score_files
    from grpo_bench.errors import UserError

    monkeypatch.setattr(score_files, "MAX_FRAMES", 4)
    with pytest.raises(UserError, match=r"clip.mp4 has more than 4 frames; cut it first"):
        read_file(files["clip"])
    monkeypatch.setattr(score_files, "MAX_FRAMES", 6)
    assert read_file(files["clip"]).frames == 6
