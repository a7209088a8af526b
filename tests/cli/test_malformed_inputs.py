"""Every malformed input ends in one clean line (exit 2, "error: ...", no traceback) before any work.

Each case names what it feeds the CLI and a fragment of the expected message. The count of cases
here is the number reported in the README's reliability section."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml
from suite_support import SMALL_SUITE

from grpo_bench.cli import entry
from grpo_bench.suite.results import read_table


def cli(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["grpo-bench", *args])
    with pytest.raises(SystemExit) as exit_:
        entry.main()
    out, err = capsys.readouterr()
    return exit_.value.code, out, err


def _suite_file(tmp_path: Path, text: str | bytes, name: str = "s.yaml") -> str:
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return str(path)


def _suite(**changes) -> str:
    data = {**SMALL_SUITE, **changes}
    return yaml.safe_dump(data, sort_keys=False)


LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n" for p, c in zip("abcdefgh", "bcdefghi")) + "name: *i\n"


def _cases(tmp: Path) -> list[tuple[list[str], str]]:
    a_file = tmp / "a_file"
    a_file.write_text("x")
    folder_gif = tmp / "folder.gif"
    folder_gif.mkdir()
    binary = tmp / "prompts.txt"
    binary.write_bytes(b"\x00\x01\x02binary")
    latin = tmp / "latin.txt"
    latin.write_bytes("a red circle moving left\ncaf\xe9\n".encode("latin-1"))
    foreign = tmp / "foreign.yaml"
    foreign.write_text("train: [a cat on a sofa]\neval: [a dog]\n")
    single = tmp / "single.yaml"
    single.write_text("train: [a red circle moving left]\neval: [a red circle moving left]\n")
    out = str(tmp / "out")
    train = ["train", "--out", out]
    deep = "x: " + "[" * 10_000 + "]" * 10_000 + "\n"
    return [
        # --- train: config values -------------------------------------------------------------
        ([*train, "device=bogus"], "device must be auto, cpu, cuda or cuda:N"),
        ([*train, "--device", "cuda:0"], "device 'cuda:0'"),
        ([*train, "model=no-such-model"], "unknown model 'no-such-model'"),
        ([*train, "reward=no_such_reward"], "unknown reward 'no_such_reward'"),
        ([*train, "window=[8, 5]"], "'window' [8, 5] reaches step 12"),
        ([*train, "video_size=24"], "shipped world weights were trained on 16x16"),
        ([*train, "kl_beta_max=.inf"], "'kl_beta_max' must be a finite number"),
        ([*train, "lr=.nan"], "config key 'lr'"),
        ([*train, "updates=1e12"], "'updates' must be <= "),
        ([*train, "group_size=100000000"], "'group_size' must be <= "),
        ([*train, "seed=-1"], "'seed' must be in 0..2**63-1"),
        ([*train, "--updates", "5", "updates=2"], "updates is given both as --updates 5 and as updates=2"),
        ([*train, "lr=1e-4", "lr=2e-4"], "lr is given twice"),
        ([*train, "window=[1, 2"], "override window:1:"),
        ([*train, "lr: 1"], "is not of the form key=value"),
        ([*train, "method='[/x]'"], "unknown method '[/x]'"),  # printed literally, not as rich markup
        ([*train, "setting='[red]x'"], "unknown setting '[red]x'"),
        ([*train, f"prompts={binary}"], "a binary file"),
        ([*train, f"prompts={latin}"], "latin.txt:2: not UTF-8"),
        ([*train, f"prompts={foreign}", "eval_oracle=false"], "knows only the world's vocabulary"),
        ([*train, f"prompts={single}"], "'prompts_per_update' (2) exceeds the 1 training prompt(s)"),
        ([*train, "weight_decay=-0.1", "optimizer=muon"], "config key 'weight_decay' must be >= 0, got -0.1"),
        ([*train, "model=tiny-sd3", "reward=jpeg_compressibility", "height=0"],
         "config key 'height' must be >= 1, got 0"),
        ([*train, "method=diffusion_nft", "equalizer=true"], "equalizer=on with kernel 'ode', which noises no step"),
        (["train", "--out", str(a_file)], "is a file, not a folder"),
        (["train", "--out", str(a_file / "sub")], "is a file, so the folder cannot be created"),
        # --- run: suite files ---------------------------------------------------------------------
        (["run", _suite_file(tmp, LAUGHS, "laughs.yaml"), "--dry-run"], "expands to more than"),
        (["run", _suite_file(tmp, deep, "deep.yaml"), "--dry-run"], "nested more than 64 levels"),
        (["run", _suite_file(tmp, "name: a\nname: b\n", "dup.yaml"), "--dry-run"],
         "dup.yaml:2:1: invalid YAML: duplicate key 'name'"),
        (["run", _suite_file(tmp, "name: a\nbase: {lr: [\n", "broken.yaml"), "--dry-run"],
         "broken.yaml:3:1: invalid YAML"),
        (["run", _suite_file(tmp, "name: caf\xe9\n".encode("latin-1"), "latin.yaml"), "--dry-run"],
         "latin.yaml:1: not UTF-8"),
        (["run", _suite_file(tmp, b"\x89PNG\r\n\x1a\n\x00\x00", "img.yaml"), "--dry-run"], "a binary file"),
        (["run", _suite_file(tmp, _suite(name="."), "dot.yaml"), "--dry-run"], "name must be a folder-safe string"),
        (["run", _suite_file(tmp, _suite(name=".."), "dotdot.yaml"), "--dry-run"], "(not '.' or '..')"),
        (["run", _suite_file(tmp, _suite(name="n" * 300), "long.yaml"), "--dry-run"], "at most 120"),
        (["run", _suite_file(tmp, _suite(seeds=list(range(50_000))), "seeds.yaml"), "--dry-run"], "at most 1000"),
        (["run", _suite_file(tmp, _suite(seeds=[2**63]), "bigseed.yaml"), "--dry-run"], "integers in 0.."),
        (["run", _suite_file(tmp, _suite(base={"kl_beta_max": float("inf")}), "inf.yaml"), "--dry-run"],
         "must be a finite number"),
        (["run", _suite_file(tmp, _suite(base={"device": "bogus"}), "dev.yaml"), "--dry-run"], "device must be"),
        (["run", _suite_file(tmp, _suite(), "ok.yaml"), "--dry-run", "lr=1", "lr=2"], "lr is given twice"),
        (["run", _suite_file(tmp, _suite(seeds=[1000], tune={"grid": {"updates": [2, 4]}, "seeds": [100],
                                             "select": {"window": 2}}), "tu.yaml"),
          "--dry-run"], "tune: 'updates' cannot be tuned"),
        (["run", _suite_file(tmp, _suite(), "ok2.yaml"), "--jobs", "0", "--out", out], "--jobs must be >= 1"),
        (["run", _suite_file(tmp, _suite(), "ok4.yaml"), "--stop-at-look", "2", "--out", out],
         "--stop-at-look pauses the looks of --until-decided"),
        (["run", _suite_file(tmp, _suite(), "ok3.yaml"), "--out", str(a_file)], "is a file, not a folder"),
        (["run", str(tmp / "missing.yaml")], "does not exist"),
        (["run", str(tmp)], "is not a file"),
        # --- samplers, sample, report ---------------------------------------------------------------
        (["samplers", "--steps", "100000000", "--out", out], "--steps must be between 1 and 1000"),
        (["samplers", "--out", str(a_file)], "is a file, not a folder"),
        (["sample", "--prompt", "a red circle moving left", "--guidance", "nan", "--out", str(tmp / "x.gif")],
         "--guidance must be a finite number"),
        (["sample", "--prompt", "a red circle moving left", "--steps", "100000000"], "--steps must be between"),
        (["sample", "--prompt", "a red circle moving left", "--json", str(tmp), "--out", str(tmp / "x.gif")],
         "is a folder; give a file name"),
        (["sample", "--prompt", "a red circle moving left", "--out", str(folder_gif)], "is a folder"),
        (["sample", "--prompt", "x" * 10_000_000], "more characters)"),
        (["report", str(a_file)], "is not a folder"),
        (["report", str(_results(tmp, "torn", b"PAR1\x00\x01"))], "not a readable parquet file"),
        (["report", str(_results(tmp, "foreign", None))], "not a grpo-bench results table"),
        # --- restore: a stored table is untrusted input ----------------------------------------------
        (["restore", str(_results(tmp, "torn2", b"PAR1\x00\x01")), out], "not a readable parquet file"),
        (["restore", str(_results(tmp, "foreign2", None)), out], "not a grpo-bench results table"),
        (["restore", str(_stored(tmp, "typed", value="high")), out], "column 'value' is not float64"),
        (["restore", str(_stored(tmp, "json", text="{broken")), out], "its record is not JSON"),
        (["restore", str(_stored(tmp, "labels", text='{"status": "done", "labels": [1]}')), out],
         "'labels' in its record is not an object"),
        (["restore", str(_stored(tmp, "climb", cell="../../escaped")), out], "cell id: name must be a folder-safe"),
        (["restore", str(_damaged_layout(tmp, "runs", run_metrics='["reward", "nowhere"]')), out],
         "is not a list of distinct metrics with their value:<metric> columns; the table is damaged"),
        (["report", str(_damaged_layout(tmp, "layout", layout=b"runs/9")), "--out", out],
         "stored in layout 'runs/9', which this grpo-bench does not know"),
        # --- stored tuning choices -------------------------------------------------------------------
        (["report", str(_with_file(_stored(tmp, "tuned"), "tuned.json", '{"methods": {"sage_grpo": {"chosen": 3}}}')),
          "--out", out], "tuned.json: a damaged or edited tuning choice (method 'sage_grpo': 'chosen' must be"),
        (["report", str(_with_file(_stored(tmp, "chosen"), "chosen.json", '{"methods": [], "window": 0}')),
          "--out", out], "chosen.json: a damaged or edited tuning choice ('methods' must be an object"),
        # --- claims: the stored files beside the results tables ----------------------------------------
        (["claims", str(_reports(tmp, "prints", "fingerprints.json", '["197a046d74"]')), "--out", f"{out}/c.md"],
         "fingerprints.json: a list; expected a JSON object {commit: {cpu: sha256}}"),
        (["claims", str(_reports(tmp, "table1", "samplers/T10/table1.csv", "kernel,excess_final_var_err\nsage,x\n")),
          "--out", f"{out}/c.md"], "table1.csv: column 'excess_final_var_err' must hold finite numbers, got 'x'"),
        (["claims", str(_reports(tmp, "table3", "main_table/kit/analysis/table3.csv", "target,votes\nsage_grpo,3\n")),
          "--out", f"{out}/c.md"], "table3.csv: missing columns baseline, dimension, rate"),
        # --- plan -------------------------------------------------------------------------------------
        (["plan", "suites/main_table.yaml", "--tflops", "nan"], "--tflops must be a finite number > 0, got nan"),
        (["plan", "suites/main_table.yaml", "--tflops", "0"], "--tflops must be a finite number > 0"),
        (["plan", "suites/main_table.yaml", "--gpu-memory-gb", "0"], "--gpu-memory-gb must be a finite number > 0"),
    ]


def _results(tmp: Path, name: str, data: bytes | None) -> Path:
    """A run folder whose results.parquet is torn (data) or a foreign table (None)."""
    import pandas as pd

    folder = tmp / name
    folder.mkdir()
    if data is None:
        pd.DataFrame({"a": [1]}).to_parquet(folder / "results.parquet")
    else:
        (folder / "results.parquet").write_bytes(data)
    return folder


STORED = Path(__file__).resolve().parents[2] / "reports" / "main_table" / "results.parquet"


def _stored(tmp: Path, name: str, **second_cell: str) -> Path:
    """A stored results table of two finished cells (from the committed main table) whose second cell's rows get
    ``second_cell``'s values (a cell id that climbs out, broken JSON in its record, text where numbers belong)."""
    import pandas as pd

    frame = read_table(STORED)
    done = frame[(frame["kind"] == "cell") & frame["text"].str.contains('"status": "done"')]["cell"].unique()[:2]
    frame = frame[frame["cell"].isin(done)].reset_index(drop=True)
    rows = frame["cell"] == done[1]
    for column, value in second_cell.items():
        frame[column] = frame[column].astype(object)
        frame.loc[rows & ((frame["kind"] == "cell") | (column != "text")), column] = value
        frame[column] = frame[column].map(lambda v: v if v is None or v is pd.NA else str(v))  # one type per column
    folder = tmp / name
    folder.mkdir()
    frame.to_parquet(folder / "results.parquet")
    return folder


def _damaged_layout(tmp: Path, name: str, run_metrics: str | None = None, layout: bytes | None = None) -> Path:
    """A stored table in the compact layout (grpo_bench/suite/results_codec.py) whose runs name a metric without
    its column, or that names a layout this version does not know."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from grpo_bench.suite.results import write_table
    from grpo_bench.suite.results_codec import LAYOUT_KEY, RUN_METRICS

    folder = _stored(tmp, name)
    path = folder / "results.parquet"
    write_table(path, read_table(path))
    table = pq.read_table(path)
    if run_metrics is not None:
        column = [None if v is None else run_metrics for v in table[RUN_METRICS].to_pylist()]
        table = table.set_column(table.schema.get_field_index(RUN_METRICS), RUN_METRICS, pa.array(column, pa.string()))
    if layout is not None:
        table = table.replace_schema_metadata({**table.schema.metadata, LAYOUT_KEY: layout})
    pq.write_table(table, path)
    return folder


def _with_file(folder: Path, name: str, text: str) -> Path:
    (folder / name).write_text(text)
    return folder


def _reports(tmp: Path, name: str, file: str, text: str) -> Path:
    """A reports folder (for `claims`) holding one damaged file."""
    path = tmp / name / file
    path.parent.mkdir(parents=True)
    path.write_text(text)
    return tmp / name


N_CASES = 72


def test_every_malformed_input_ends_in_one_clean_line(tmp_path, monkeypatch, capsys):
    """One test over all cases (building them once keeps it fast); a failure lists every bad case."""
    cases = _cases(tmp_path)
    assert len(cases) == N_CASES
    failures = []
    for args, needle in cases:
        code, out, err = cli(monkeypatch, capsys, *args)
        lines = err.strip().splitlines()
        shown = " ".join(a if len(a) < 80 else a[:20] + "…" for a in args)
        if code != 2 or len(lines) != 1 or not lines[0].startswith("error: ") or needle not in lines[0] \
                or "Traceback" in out + err or len(lines[0]) > 800:
            failures.append(f"{shown}: exit {code}, stderr {err[:300]!r}")
    assert not (tmp_path / "out").exists()  # nothing was written by any of them
    assert not failures, f"{len(failures)} of {len(cases)} cases:\n" + "\n".join(failures)


def test_restore_checks_the_whole_table_before_writing_and_never_leaves_its_folder(tmp_path, monkeypatch, capsys):
    """The second cell's id climbs out of the target, or its place is a dangling link: restore refuses in one
    line and writes nothing at all (not the first, valid cell; nothing outside the target)."""
    climbing = _stored(tmp_path, "climb", cell="../../escaped")
    target = tmp_path / "deep" / "runs" / "grid"
    code, _, err = cli(monkeypatch, capsys, "restore", str(climbing), str(target))
    assert code == 2 and "'../../escaped'" in err
    assert not target.exists() and not (tmp_path / "deep" / "escaped").exists()

    plain = _stored(tmp_path, "plain")

    second = read_table(plain / "results.parquet")["cell"].unique()[1]
    target.mkdir(parents=True)
    (target / second).symlink_to(tmp_path / "nowhere")
    code, _, err = cli(monkeypatch, capsys, "restore", str(plain), str(target))
    assert code == 2 and "dangling symbolic link" in err and err.count("\n") == 1
    assert sorted(p.name for p in target.iterdir()) == [second]  # the first cell was not written either


def test_a_stored_choice_off_its_grid_or_not_finite_is_refused(tmp_path):
    """A hand-edited chosen.json whose point is not one of the grid's (lr=10 where the grid is 1e-4, 3e-4) or is
    not finite would run the table at a point no tuning cell saw: refused in one line naming the file."""
    from grpo_bench.errors import UserError
    from grpo_bench.suite.selection import check_chosen

    points = {"sage_grpo": [{"lr": 1e-4}, {"lr": 3e-4}]}
    path = tmp_path / "chosen.json"
    assert check_chosen({"methods": {"sage_grpo": {"chosen": {"lr": 3e-4}}}}, path, points)  # on the grid: kept
    for point, needle in (({"lr": 10.0}, "is not a point of its grid (allowed: lr=0.0001; lr=0.0003)"),
                          ({"lr": float("nan")}, "must be finite numbers"), ({"lr": [1]}, "numbers, strings")):
        with pytest.raises(UserError, match=r"chosen.json: a damaged or edited tuning choice") as err:
            check_chosen({"methods": {"sage_grpo": {"chosen": point}}}, path, points)
        assert needle in str(err.value) and "\n" not in str(err.value)


def test_sample_refuses_a_damaged_run_in_one_line_before_drawing(tmp_path, monkeypatch, capsys):
    """`sample --checkpoint` on a damaged copy of a finished run: a torn checkpoint, a garbage policy card or run
    config, a tensor of the wrong shape or not finite. One line naming the file, exit 2, no GIF written."""
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    from grpo_bench.config.run import RunConfig
    from grpo_bench.train.trainer import train

    run = tmp_path / "run"
    train(RunConfig(method="flow_grpo", updates=1, steps=4, prompts_per_update=1, group_size=2, eval_samples=1,
                    diag_every=0, device="cpu", checkpoint_every=1), run)
    weights = "checkpoints/update_000001/trainable.safetensors"

    def torn(folder: Path) -> None:
        (folder / weights).write_bytes((folder / weights).read_bytes()[:100])

    def retensor(change):
        def edit(folder: Path) -> None:
            state = load_file(folder / weights)
            first = next(iter(state))
            state[first] = change(state[first])
            save_file(state, folder / weights)
        return edit

    damages = {
        "torn": (torn, "trainable.safetensors is not a readable safetensors file"),
        "card": (lambda f: (f / "policy" / "card.json").write_text("garbage{"), "is not a readable policy card"),
        "config": (lambda f: (f / "config.yaml").write_text("- 1\n"), "a run config must be a mapping"),
        "steps": (lambda f: (f / "config.yaml").write_text("steps: 0\n"), "'steps' must be an integer in 1..1000"),
        "model": (lambda f: (f / "config.yaml").write_text("model: ../../etc/passwd\n"),
                  "names model '../../etc/passwd', not an embedded model"),
        "shape": (retensor(lambda t: torch.zeros(3, 3)), "has shape [3, 3], the model's is"),
        "nan": (retensor(lambda t: t * float("nan")), "holds values that are not finite"),
    }
    for name, (damage, needle) in damages.items():
        folder = tmp_path / name
        shutil.copytree(run, folder)
        if name != "card":  # the exported policy would be sampled instead of the checkpoint
            shutil.rmtree(folder / "policy")
        damage(folder)
        gif = tmp_path / f"{name}.gif"
        code, _, err = cli(monkeypatch, capsys, "sample", "--prompt", "a red circle moving left", "--n", "1",
                           "--checkpoint", str(folder), "--out", str(gif))
        assert (code, err.count("\n"), needle in err) == (2, 1, True), f"{name}: {err[-300:]}"
        assert not gif.exists()


def test_lora_targets_the_model_lacks_are_refused_naming_them():
    """peft adapts the targets that match and drops the rest silently (one missing of two), or fails with its
    own traceback (all missing): either is one line naming the missing target and what the model has."""
    from grpo_bench.errors import UserError
    from grpo_bench.models.adapter_options import AdapterOptions
    from grpo_bench.models.sd3 import tiny_sd3

    for targets in (["to_q", "to_qq"], ["to_qq"]):
        with pytest.raises(UserError, match=r"^config key 'lora_targets': 'to_qq' match no module of "
                                            r"SD3Transformer2DModel; allowed: .*to_q"):
            tiny_sd3(AdapterOptions(frames=1, height=16, width=16, lora_rank=2, lora_targets=targets))
    model = tiny_sd3(AdapterOptions(frames=1, height=16, width=16, lora_rank=2, lora_targets=["to_q", "to_out.0"]))
    assert any(p.requires_grad for p in model.net.transformer.parameters())  # targets it has: adapted as before


def test_a_failed_write_names_the_users_file_not_the_hidden_temp_file(tmp_path):
    """A library that fails while writing the temp file (an unknown format, a permission) names the path it was
    given, the hidden ``.<name>.*.tmp``: the error must name the file the user asked for."""
    from grpo_bench.atomic import atomic_write
    from grpo_bench.errors import UserError

    target = tmp_path / "red.gif"

    def fails(tmp):
        raise ValueError(f"Could not find a format to write {tmp}")

    with pytest.raises(UserError) as err:
        atomic_write(target, fails)
    assert str(target) in str(err.value) and ".tmp" not in str(err.value)
    assert not list(tmp_path.iterdir())  # the temp file is gone, nothing written


@pytest.mark.parametrize(("suite", "needle"), [
    ("suites/field.yaml", "is suite 'field', but these results were run by 'kl_weight'; give that suite's file"),
    ("suites/no_such.yaml", "no_such.yaml"),
])
def test_report_parts_from_another_suite_or_no_file_is_one_line(monkeypatch, capsys, tmp_path, suite, needle):
    root = Path(__file__).resolve().parents[2]
    code, out, err = cli(monkeypatch, capsys, "report", str(root / "reports" / "kl_weight" / "results.parquet"),
                         "--out", str(tmp_path / "r"), "--parts-from", str(root / suite))
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "r" / "report.md").exists()


def test_report_parts_from_a_table_not_yet_started_is_refused_not_its_tuning_grid(monkeypatch, capsys, tmp_path):
    """Mid-tuning, `report runs/S` renders the tuning grid; with --parts-from (a table's suite) it says the table
    is not there instead of rendering the grid with the flag ignored."""
    (tmp_path / "runs" / "kl_weight_tune").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    root = Path(__file__).resolve().parents[2]
    code, _, err = cli(monkeypatch, capsys, "report", "runs/kl_weight", "--parts-from",
                       str(root / "suites" / "kl_weight.yaml"))
    assert code == 2 and "runs/kl_weight: not found" in err and len(err.strip().splitlines()) == 1
