"""Every command in README.md's Commands block runs as written, in its cheapest form: `run` and `ablate`
with --dry-run, `train` and `sample` up to the point where work would start (their config and flags
fully checked), `methods` as is, the others with --help. A command renamed, a flag dropped or a
suite file moved fails here."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from grpo_bench.cli import app

ROOT = Path(__file__).resolve().parents[2]


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = text.split("## Commands", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    return [re.split(r"\s{2,}#", line)[0].strip() for line in block.splitlines() if line.startswith("grpo-bench ")]


def _args(command: str, tmp: Path) -> list[str]:
    args = shlex.split(command)[1:]
    args = [a.split("|")[0] for a in args]  # `pretrain base|judge`: the first choice
    if args[0] in ("run", "ablate"):
        return [*args, "--dry-run", "--out", str(tmp / "runs")]
    if args[0] in ("train", "sample", "methods"):
        return args
    return [*args, "--help"]


@pytest.mark.parametrize("command", readme_commands())
def test_each_readme_command_runs_as_written(command, tmp_path, monkeypatch):
    from grpo_bench.cli import sample, sample_generator, train

    monkeypatch.chdir(ROOT)
    started = []
    monkeypatch.setattr(train, "run_train", lambda cfg, *a, **k: started.append(cfg) or {})
    monkeypatch.setattr(sample, "run_sample", lambda **kw: started.append(kw) or {})
    monkeypatch.setattr(sample_generator, "run_model_sample", lambda *a, **kw: started.append(kw) or {})
    args = _args(command, tmp_path)
    res = CliRunner().invoke(app, args, terminal_width=200)
    assert res.exit_code == 0, (command, res.output, res.exception)
    if args[0] in ("train", "sample"):
        assert started, command  # got as far as the work, every flag and key=value accepted
    assert not (tmp_path / "runs").exists()


def test_the_block_holds_every_command_of_the_cli():
    listed = {shlex.split(c)[1] for c in readme_commands()}
    registered = {c.name or c.callback.__name__ for c in app.registered_commands} | {
        g.name for g in app.registered_groups}
    assert registered <= listed, f"not in README's Commands block: {sorted(registered - listed)}"
