"""pyproject's explicit package list names every package of the source tree: a package left out is
missing from a normal (non-editable) install, which the editable installs of development never show."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _listed() -> set[str]:
    text = (ROOT / "pyproject.toml").read_text()
    block = text.split("[tool.setuptools]")[1].split("\npackages = [")[1].split("]")[0]
    return set(re.findall(r'"([A-Za-z0-9_.]+)"', block))


def _on_disk() -> set[str]:
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "grpo_bench").rglob("__init__.py")}
    if (ROOT / "methods" / "__init__.py").exists():  # installed as grpo_bench.methods (package-dir)
        found.add("grpo_bench.methods")
    return found


def test_every_package_is_installed():
    assert _on_disk() - _listed() == set(), "add these to [tool.setuptools] packages in pyproject.toml"
    assert _listed() - _on_disk() == set(), "pyproject lists packages that do not exist"


def _pyproject_field(name: str) -> str:
    return re.search(rf'^{name} = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M).group(1)


def test_version_flag_prints_the_packaged_version_and_citation_and_license_agree():
    from typer.testing import CliRunner

    from grpo_bench import __version__
    from grpo_bench.cli import app

    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output == f"grpo-bench {_pyproject_field('version')}\n"
    assert __version__ == _pyproject_field("version")
    import yaml

    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert citation["version"] == __version__ and citation["license"] == "Apache-2.0"
    assert 'license = { text = "Apache-2.0" }' in (ROOT / "pyproject.toml").read_text()
    assert "Apache License" in (ROOT / "LICENSE").read_text() and "Version 2.0" in (ROOT / "LICENSE").read_text()
