"""README.md shows the shipped reports' tables, not copies that drift (`tools/readme_tables.py`)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("readme_tables", ROOT / "tools" / "readme_tables.py")
readme_tables = importlib.util.module_from_spec(spec)
spec.loader.exec_module(readme_tables)


def test_readme_tables_are_the_shipped_reports():
    stale = readme_tables.sync(check=True)
    assert not stale, f"README.md blocks {stale} differ from their reports: run python tools/readme_tables.py"


def test_a_changed_report_makes_its_block_stale_and_sync_rewrites_it(tmp_path):
    for rel, _ in readme_tables.BLOCKS.values():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text((ROOT / rel).read_text())
    readme = tmp_path / "README.md"
    readme.write_text((ROOT / "README.md").read_text())
    assert readme_tables.sync(readme, tmp_path, check=True) == []
    report = tmp_path / readme_tables.BLOCKS["results"][0]
    report.write_text(report.read_text().replace("| sft | ", "| sft2 | "))
    assert readme_tables.sync(readme, tmp_path, check=True) == ["results"]
    assert "| sft2 | " not in readme.read_text()  # --check writes nothing
    assert readme_tables.sync(readme, tmp_path) == ["results"]
    assert "| sft2 | " in readme.read_text() and readme_tables.sync(readme, tmp_path, check=True) == []
    readme.write_text(readme.read_text().replace("<!-- comparison:end -->", ""))
    with pytest.raises(ValueError, match="comparison:start"):
        readme_tables.sync(readme, tmp_path, check=True)
