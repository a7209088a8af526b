"""Portable CPU kernels (grpo_bench/cpu_kernels.py): a suite's ``budget.cpu_kernels: avx2`` caps torch, oneDNN and MKL
at AVX2 in the workers, the world runs fp32, the machine line names AVX2, and the one-machine guard takes AVX2 cells
of any CPU model as one behaviour (measured: an Intel Xeon under the caps gave an AMD EPYC with AVX2 only's held-out
scores exactly; the slow test below re-runs one stored cell to show it on the machine at hand)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_bench.cpu_kernels import CAPS
from grpo_bench.errors import UserError
from grpo_bench.suite.machine import hardware, same_hardware
from grpo_bench.suite.parse import parse_suite

ROOT = Path(__file__).resolve().parents[2]
AVX512 = "avx512f" in Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else False


def _python(code: str, env: dict[str, str] | None = None, args: list[str] | None = None) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in CAPS}
    return subprocess.run([sys.executable, "-c", code, *(args or [])], capture_output=True, text=True, timeout=300,
                          env={**clean, **(env or {})}, cwd=ROOT)


PROBE = """
import json, torch
from grpo_bench.suite.machine import kernels
from grpo_bench.train.precision import resolve
print(json.dumps([str(torch.backends.cpu.get_cpu_capability()), kernels(), resolve("auto", True, cpu=True)]))
"""


def test_the_caps_make_a_process_run_avx2_kernels_at_fp32_and_say_so():
    done = _python("from grpo_bench.cpu_kernels import use; use('avx2')\n" + PROBE)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == ["AVX2", "AVX2", "no"]
    spawned = _python(PROBE, dict(CAPS))  # what a spawned worker sees: the caps in its environment
    assert json.loads(spawned.stdout.splitlines()[-1]) == ["AVX2", "AVX2", "no"]


@pytest.mark.skipif(not AVX512, reason="the caps change nothing on a CPU without AVX512")
def test_natively_this_cpu_runs_wider_kernels():
    level, named, _ = json.loads(_python(PROBE).stdout.splitlines()[-1])
    assert level != "AVX2" and named != "AVX2"


@pytest.mark.skipif(not AVX512, reason="on an AVX2 CPU torch already runs AVX2: nothing to refuse")
def test_caps_asked_for_after_torch_chose_its_kernels_are_refused_in_one_line():
    done = _python("import torch; torch.backends.cpu.get_cpu_capability()\n"
                   "from grpo_bench.cpu_kernels import use\nfrom grpo_bench.errors import UserError\n"
                   "try:\n    use('avx2', 'x.yaml: budget.')\nexcept UserError as e:\n    print(e)")
    assert re.fullmatch(r"x\.yaml: budget\.cpu_kernels avx2: torch in this process already runs AVX512\w* kernels; "
                        r"start a new process with ATEN_CPU_CAPABILITY=avx2 .*", done.stdout.strip())


def test_a_suite_names_its_kernels_from_the_allowed_ones():
    base = {"name": "k", "base": {"model": "tiny"}, "grid": {"method": ["dance_grpo"]}, "seeds": [0]}
    assert parse_suite({**base, "budget": {"cpu_kernels": "avx2"}}, "k.yaml").resources == {"cpu_kernels": "avx2"}
    with pytest.raises(UserError, match=re.escape("k.yaml: budget.cpu_kernels must be one of native, avx2, got "
                                                  "'avx512'")):
        parse_suite({**base, "budget": {"cpu_kernels": "avx512"}}, "k.yaml")


def test_a_portable_suite_that_asks_for_bf16_is_one_line_before_any_work():
    from grpo_bench.cpu_kernels import for_suite

    base = {"name": "k", "base": {"model": "tiny", "mixed_precision": "bf16"}, "grid": {"method": ["dance_grpo"]},
            "seeds": [0], "budget": {"cpu_kernels": "avx2"}}
    with pytest.raises(UserError, match=re.escape("k.yaml: mixed_precision 'bf16' with budget.cpu_kernels avx2: the "
                                                  "portable kernels run fp32; allowed: auto, no")):
        for_suite(parse_suite(base, "k.yaml"))


def test_avx2_cells_of_any_cpu_model_are_one_behaviour_and_no_other_kernels_are():
    amd, intel = "AMD EPYC, 2 CPUs, no GPU, torch 2.13.0+cpu, Linux", "Intel(R) Xeon(R) Processor, 2 CPUs, no GPU, x, y"
    assert same_hardware(hardware(intel + ", AVX2 kernels"), hardware(amd + ", AVX2 kernels"))
    assert not same_hardware(hardware(intel + ", AVX512-BF16 kernels"), hardware(amd + ", AVX2 kernels"))
    assert not same_hardware(hardware(intel + ", AVX2 kernels"), hardware(amd + ", AVX512 kernels"))
    assert not same_hardware(hardware(intel + ", AVX2 kernels"), hardware(amd, "no"))  # an old line: its model


SUITE = """name: kernels
base: {model: image_world, video_size: 32}
grid: {method: [flow_grpo]}
seeds: [0]
budget: {updates: 1, prompts_per_update: 1, group_size: 2, eval_every: 1, eval_samples: 1, diag_every: 0,
         checkpoint_every: 1, steps: 4, cpu_kernels: avx2}
report: {tables: [], figures: []}
"""


def test_run_of_a_suite_that_names_avx2_trains_its_cells_on_avx2_kernels_at_fp32(tmp_path):
    """End to end through the command: the caps reach the spawned worker, which says so in the cell's record."""
    from grpo_bench.suite.results import load_results

    (tmp_path / "k.yaml").write_text(SUITE)
    done = _python("from grpo_bench.cli import main; main()", {}, ["run", str(tmp_path / "k.yaml"), "--out",
                                                                     str(tmp_path / "runs"), "--jobs", "1"])
    assert done.returncode == 0, done.stderr[-2000:]
    table = load_results(tmp_path / "runs" / "kernels")
    record = json.loads(table.loc[table["kind"] == "cell", "text"].iloc[0])
    assert record["machine"].endswith(", AVX2 kernels") and record["precision"] == "no"


def test_train_like_a_suite_that_names_avx2_runs_on_its_kernels():
    """``train --like SUITE`` reproduces a cell of the suite, so it takes the suite's kernels too."""
    done = _python("import sys, tempfile, pathlib\n"
                   "d = pathlib.Path(tempfile.mkdtemp()); (d / 'k.yaml').write_text(sys.argv[1])\n"
                   "from grpo_bench.cli.train import build_config\n"
                   "build_config({}, [], d / 'k.yaml')\n" + PROBE, {}, [SUITE])
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.splitlines()[-1]) == ["AVX2", "AVX2", "no"]


BLOCK = ROOT / "reports" / "field_image_blocks" / "epyc_avx2_redraw.parquet"
CELL = "9a6dd827d8a4"  # DanceGRPO, compositional task, oracle track, seed 2000: 120 updates of 8 x 8


@pytest.mark.slow
def test_a_stored_cell_of_the_avx2_epyc_reproduces_here_under_the_caps(tmp_path):
    """The AMD EPYC with AVX2 only ran this cell of suites/field_image.yaml at 96d84c7 (fp32, no caps: its CPU has
    nothing wider). Trained here under the caps from the same config, every held-out number (the oracle's and the
    reward's at each eval) is the same float; the diversity diagnostic (cdist) may differ in its 8th digit."""
    import pandas as pd

    block = pd.read_parquet(BLOCK)
    record = block.loc[(block["kind"] == "cell") & (block["cell"] == CELL), "text"].iloc[0]
    (tmp_path / "config.json").write_text(json.dumps(json.loads(record)["config"]))
    code = ("import json, sys; from grpo_bench.config.run import RunConfig; from grpo_bench.train.trainer import train;"
            "train(RunConfig(**json.load(open(sys.argv[1]))), sys.argv[2])")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "config.json"), str(tmp_path / "run")],
                          capture_output=True, text=True, timeout=1800, env={**os.environ, **CAPS}, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    here = {int(r["update"]): r for r in map(json.loads, lines) if "eval_oracle_ta" in r}
    stored = block[(block["cell"] == CELL) & (block["kind"] == "update")].dropna(subset=["value:eval_oracle_ta"])
    assert sorted(here) == sorted(stored["update"].astype(int)) and len(here) >= 4
    keys = ("eval_oracle_ta", "eval_oracle_vq", "eval_oracle_mq", "eval_correct", "eval_reward")
    for row in stored.to_dict("records"):
        assert [here[int(row["update"])][k] for k in keys] == [row[f"value:{k}"] for k in keys], row["update"]
