"""Every stored report under reports/ re-renders from its own results.parquet to the bytes it holds (issue 45,
item 4): each table (tables/*.md, .tex, .csv) byte for byte, and report.md's text but for the line that says when
it was rendered. A .csv keeps every float's 17 digits, and a fit's last bits are the CPU's (numpy's BLAS takes
other kernels under AVX2 than under AVX512: reports/factors' factor_effects.csv re-rendered on an AMD EPYC with
AVX2 only differs from its stored render in the 15th-16th digit), so a .csv whose bytes differ passes where its
cells are the same strings and the same numbers to 1e-10 relative: a stale table differs far more.

Figures are compared loosely: the re-render here skips them (matplotlib's output is not the point, and they are
most of the time), so report.md's figure sections, which come after its table sections, are only checked to name
files that exist.

The folders are discovered (every results.parquet under reports/), not listed: a report added later is held too.
A stale stored report is re-rendered with ``grpo-bench report reports/NAME/results.parquet --out reports/NAME``
(plus ``--parts-from suites/NAME.yaml`` where its header says its report section came from that suite file).
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from grpo_bench.report.suite_parts import load_suite_checked

ROOT = Path(__file__).resolve().parents[2]
REPORTS = ROOT / "reports"
STORED = sorted(p.parent for p in REPORTS.rglob("results.parquet") if (p.parent / "report.md").is_file())
TABLE_SUFFIXES = (".md", ".tex", ".csv")
RENDERED_LINE = re.compile(r"^- rendered \d{4}-\d\d-\d\d \d\d:\d\d UTC from `results.parquet`$", re.M)
PARTS_FROM = re.compile(r"^- report section: `([^`]+)`'s, not the one stored with the results", re.M)


class _NoFigures:
    """The figure registry's stand-in: every figure part adds no section and writes no file."""

    def get(self, name: str, where: str = ""):
        return lambda ctx: []


def _same_table(name: str, fresh: bytes, stored: bytes) -> bool:
    """Byte for byte; a .csv also where only its floats' last bits differ (the module's docstring)."""
    if fresh == stored:
        return True
    if not name.endswith(".csv"):
        return False
    a, b = (pd.read_csv(io.BytesIO(x), dtype=str, keep_default_na=False) for x in (fresh, stored))
    if list(a.columns) != list(b.columns) or a.shape != b.shape:
        return False
    for col in a.columns:
        x, y = pd.to_numeric(a[col], errors="coerce"), pd.to_numeric(b[col], errors="coerce")
        words = x.isna() | y.isna()
        if not (a[col][words] == b[col][words]).all() or not np.allclose(x[~words], y[~words], rtol=1e-10, atol=0):
            return False
    return True


def test_a_csv_passes_only_where_its_floats_differ_in_their_last_bits():
    stored = b"factor,level,effect\nkernel,dance,-0.19125146690445624\nkernel,flow,nan\n"
    assert _same_table("t.csv", b"factor,level,effect\nkernel,dance,-0.1912514669044561\nkernel,flow,nan\n", stored)
    assert not _same_table("t.csv", b"factor,level,effect\nkernel,dance,-0.191251466\nkernel,flow,nan\n", stored)
    assert not _same_table("t.csv", b"factor,level,effect\nkernel,sage,-0.19125146690445624\nkernel,flow,nan\n",
                           stored)
    assert not _same_table("t.md", stored.replace(b"624", b"61"), stored)  # display tables: bytes only


def _split(report: str) -> tuple[str, list[str]]:
    """(the header with its rendered-at line blanked, the ``## `` sections in order, their trailing newlines off)."""
    head, *sections = report.split("\n## ")
    # the last section of a file ends with the file's final newline, one that has another after it does not
    return RENDERED_LINE.sub("- rendered <when>", head), [section.rstrip("\n") for section in sections]


def _tables(folder: Path) -> dict[str, bytes]:
    tables = folder / "tables"
    return {p.name: p.read_bytes() for p in sorted(tables.iterdir()) if p.suffix in TABLE_SUFFIXES} \
        if tables.is_dir() else {}


def test_stored_reports_are_discovered():
    names = {p.relative_to(REPORTS).as_posix() for p in STORED}
    assert {"main_table", "main_table_shared", "kl_weight"} <= names  # folders the README's findings cite


@pytest.mark.parametrize("folder", STORED, ids=[p.relative_to(REPORTS).as_posix() for p in STORED])
def test_a_stored_report_re_renders_byte_for_byte_from_its_results(folder, tmp_path, monkeypatch):
    from grpo_bench.report import render
    from grpo_bench.report.transfer import SIBLINGS

    monkeypatch.setattr(render, "FIGURES", _NoFigures())
    target = tmp_path / folder.name  # rendered under its own name, beside the sibling field reports it reads
    target.mkdir()
    if (folder / "chosen.json").is_file():  # a tuning grid's choice is read beside the report it renders
        (target / "chosen.json").write_bytes((folder / "chosen.json").read_bytes())
    for name in SIBLINGS:  # the transfer table reads the other worlds' stored field reports beside this one
        if name != folder.name and (REPORTS / name / "results.parquet").is_file():
            (tmp_path / name).mkdir()
            (tmp_path / name / "results.parquet").symlink_to(REPORTS / name / "results.parquet")
    source = PARTS_FROM.search((folder / "report.md").read_text())  # rendered with a suite file's report section
    spec = load_suite_checked(ROOT / source.group(1)).report if source else None
    out = render.render_report(folder / "results.parquet", spec=spec, out=target,
                               spec_source=source.group(1) if source else None)
    fresh, stored = _tables(out.parent), _tables(folder)
    assert sorted(fresh) == sorted(stored), f"{folder}: tables differ in name; re-render it"
    stale = [name for name in stored if not _same_table(name, fresh[name], stored[name])]
    assert not stale, f"{folder}: stale tables {stale}; re-render it"

    fresh_head, fresh_sections = _split(out.read_text())
    stored_head, stored_sections = _split((folder / "report.md").read_text())
    assert RENDERED_LINE.search((folder / "report.md").read_text())
    assert fresh_head == stored_head, f"{folder}/report.md: header differs from its re-render"
    assert stored_sections[:len(fresh_sections)] == fresh_sections, f"{folder}/report.md: stale table section"
    for section in stored_sections[len(fresh_sections):]:  # the figure sections: each names figures that exist
        images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", section)
        assert images, f"{folder}/report.md: a section after the tables shows no figure: {section[:80]!r}"
        for image in images:
            assert (folder / image).is_file(), f"{folder}/report.md names {image}, which is not stored"
