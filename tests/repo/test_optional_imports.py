"""Every optional part that is not installed ends in one line naming the pip extra (or dependency)
that brings it back, with no traceback: each module is hidden (``sys.modules[name] = None`` makes
``import name`` fail as if it were not installed) and the real command line is run."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from grpo_bench.cli import entry
from grpo_bench.extras import DISTRIBUTION_OF, EXTRA_OF

ROOT = Path(__file__).resolve().parents[2]
# modules that import an optional part at their top: dropped so that the command imports them afresh
IMPORTERS = ("grpo_bench.study.server", "grpo_bench.study.analysis", "grpo_bench.models._tiny_text",
             "grpo_bench.models.wan", "grpo_bench.models.hunyuan15", "grpo_bench.models.diffusers_video")


def _run_hidden(monkeypatch, capsys, hidden: tuple[str, ...], *args: str) -> tuple[int, str]:
    for name in hidden:
        monkeypatch.setitem(sys.modules, name, None)
    for name in IMPORTERS:
        if name in sys.modules:
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "argv", ["grpo-bench", *args])
    with pytest.raises(SystemExit) as exit_:
        entry.main()
    out, err = capsys.readouterr()
    return exit_.value.code, out + err


CASES = [
    (("fastapi",), ("study", "serve", "{tmp}/kit"), "pip install 'grpo-bench[study]'"),
    (("krippendorff",), ("study", "analyze", "{tmp}/kit"), "pip install 'grpo-bench[study]'"),
    (("tensorboard", "tensorboardX"), ("train", "--updates", "1", "--out", "{tmp}/t", "trackers=[tensorboard]"),
     "pip install 'grpo-bench[tensorboard]'"),
    (("wandb",), ("train", "--updates", "1", "--out", "{tmp}/t", "trackers=[wandb]"),
     "pip install 'grpo-bench[wandb]'"),
    (("submitit",), ("run", "suites/smoke.yaml", "--backend", "submitit", "--out", "{tmp}/runs"),
     "pip install 'grpo-bench[cluster]'"),
    (("deepspeed",), ("train", "--updates", "1", "--out", "{tmp}/t", "--accelerate-config", "deepspeed_zero2"),
     "grpo-bench[deepspeed]"),
    (("diffusers",), ("train", "--model", "tiny-wan", "--method", "flow_grpo", "--updates", "1", "--out", "{tmp}/t",
                      "reward=world_oracle"), "pip install diffusers"),
    (("transformers",), ("train", "--model", "tiny-wan", "--method", "flow_grpo", "--updates", "1", "--out",
                         "{tmp}/t", "reward=world_oracle"), "pip install transformers"),
]


@pytest.mark.parametrize(("hidden", "args", "fix"), CASES, ids=[c[0][0] for c in CASES])
def test_a_missing_optional_part_is_one_line_naming_its_install(monkeypatch, capsys, tmp_path, hidden, args, fix):
    monkeypatch.chdir(ROOT)
    code, text = _run_hidden(monkeypatch, capsys, hidden, *(a.format(tmp=tmp_path) for a in args))
    assert code == 2, text
    assert "Traceback" not in text and len(text.strip().splitlines()) == 1, text
    assert text.startswith("error: ") and fix in text, text
    assert not (tmp_path / "t" / "metrics.jsonl").exists() and not (tmp_path / "runs").exists()


def test_peft_missing_for_lora_names_its_install(monkeypatch):
    from grpo_bench.extras import missing_line

    monkeypatch.setitem(sys.modules, "peft", None)
    with pytest.raises(ModuleNotFoundError) as exc:
        from peft import LoraConfig  # noqa: F401  (what models/lora.py does to add LoRA adapters)
    assert missing_line(exc.value) == ("peft is not installed (part of grpo-bench): pip install peft "
                                       "(a dependency of grpo-bench; `pip install -e .` installs them all)")


def test_a_missing_module_of_no_extra_keeps_its_traceback(monkeypatch, capsys):
    """A module we cannot name an install for is a bug, not a missing extra: it is not hidden behind a line."""
    monkeypatch.setattr(entry, "app", lambda: __import__("no_such_module_of_grpo_bench"))
    monkeypatch.setattr(sys, "argv", ["grpo-bench"])
    with pytest.raises(ModuleNotFoundError):
        entry.main()


def _requirements() -> tuple[set[str], dict[str, set[str]]]:
    """pyproject's dependencies and extras as distribution names (tomllib is 3.11+; the project supports 3.10)."""
    import re

    text = (ROOT / "pyproject.toml").read_text()
    name = re.compile(r'"([A-Za-z0-9_.-]+)')
    deps = set(name.findall(text.split("\ndependencies = [")[1].split("\n]")[0]))
    extras: dict[str, set[str]] = {}
    block = text.split("[project.optional-dependencies]")[1].split("\n[")[0]
    for extra, body in re.findall(r"^(\w+) = \[(.*?)\]", block, flags=re.M | re.S):
        extras[extra] = set(name.findall(body))
    return deps, extras


def test_the_install_tables_agree_with_pyproject():
    deps, extras = _requirements()
    for module, extra in EXTRA_OF.items():
        assert DISTRIBUTION_OF[module] in extras[extra], (module, extra)
    for module, dist in DISTRIBUTION_OF.items():
        if module not in EXTRA_OF:
            assert dist in deps, (module, dist)
