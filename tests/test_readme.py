"""README.md and docs/ show the shipped reports' tables, not copies that drift (`tools/readme_tables.py`); the README
is a guide (at most 300 lines, no link to a file that does not exist, no number its report blocks do not hold, no
words about how the project was built)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("readme_tables", ROOT / "tools" / "readme_tables.py")
readme_tables = importlib.util.module_from_spec(spec)
spec.loader.exec_module(readme_tables)
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_blocks_are_the_shipped_reports():
    stale = readme_tables.sync(check=True)
    assert not stale, f"blocks {stale} differ from their reports: run python tools/readme_tables.py"


def test_a_changed_report_makes_its_block_stale_and_sync_rewrites_it(tmp_path):
    for rel, _ in readme_tables.BLOCKS.values():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text((ROOT / rel).read_text())
    readme = tmp_path / "README.md"
    readme.write_text((ROOT / "README.md").read_text())
    assert readme_tables.sync(readme, tmp_path, check=True) == []
    report = tmp_path / readme_tables.BLOCKS["comparison"][0]
    report.write_text(report.read_text().replace("| sft | ", "| sft2 | "))
    assert readme_tables.sync(readme, tmp_path, check=True) == ["comparison"]
    assert "| sft2 | " not in readme.read_text()  # --check writes nothing
    assert readme_tables.sync(readme, tmp_path) == ["comparison"]
    assert "| sft2 | " in readme.read_text() and readme_tables.sync(readme, tmp_path, check=True) == []
    readme.write_text(readme.read_text().replace("<!-- comparison:end -->", ""))
    with pytest.raises(ValueError, match="comparison:start"):
        readme_tables.sync(readme, tmp_path, check=True)


def test_a_rerun_in_another_wall_time_leaves_the_comparison_block_current(tmp_path):
    """`make compare` on a fresh clone reproduces every result but the training minutes (times as each run happened):
    the check reads past that column, and only that column; rewriting copies the report's times."""
    for rel, _ in readme_tables.BLOCKS.values():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text((ROOT / rel).read_text())
    readme = tmp_path / "README.md"
    readme.write_text((ROOT / "README.md").read_text())
    report = tmp_path / readme_tables.BLOCKS["comparison"][0]
    lines = report.read_text().splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("| checkpoint |"))
    col = [c.strip() for c in lines[head].split("|")].index("train min")
    row = next(i for i, ln in enumerate(lines) if ln.startswith("| grpo | "))
    cells = lines[row].split("|")
    assert cells[col].strip() != "99.9"
    retimed = [*lines[:row], "|".join([*cells[:col], " 99.9 ", *cells[col + 1 :]]), *lines[row + 1 :]]
    report.write_text("\n".join(retimed) + "\n")
    assert readme_tables.sync(readme, tmp_path, check=True) == []  # only a time moved: the block is current
    assert readme_tables.sync(readme, tmp_path) == ["comparison"] and "| 99.9 |" in readme.read_text()
    cells[col - 1] = " 11.8 " if cells[col - 1].strip() != "11.8" else " 11.9 "  # avg tokens: a result
    report.write_text("\n".join([*lines[:row], "|".join(cells), *lines[row + 1 :]]) + "\n")
    assert readme_tables.sync(readme, tmp_path, check=True) == ["comparison"]


def test_readme_is_a_guide_of_at_most_300_lines():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 300
    heads = [ln for ln in text.splitlines() if ln.startswith("## ")]
    assert len(heads) >= 6


def test_readme_prose_numbers_come_from_its_blocks():
    extra = readme_tables.prose_numbers_outside_blocks(ROOT / "README.md")
    assert not extra, f"README.md prose holds numbers no report block holds: {sorted(extra)}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_links_resolve(page):
    text = page.read_text()
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if "://" in target or target.startswith("mailto:"):
            continue
        assert (page.parent / target).exists(), f"{page.name} links {target}, which does not exist"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_no_words_about_how_the_project_was_built(page):
    text = page.read_text()
    for pattern in (
        r"\bsession \d+|\bthis session\b|\bround \d+\b",
        r"\bissue \d+\b|#\d{1,3}\b",
        r"\bEPYC VM\b|\breference VM\b",
        r"`[0-9a-f]{7}`|\b[0-9a-f]{7}\.\.\.",
    ):
        hit = re.search(pattern, text, flags=re.I)
        assert hit is None, f"{page.name}: {hit.group(0)!r} is about how the project was built"


def test_a_block_can_hold_its_report_from_a_given_line(tmp_path):
    report = tmp_path / "summary.md"
    report.write_text(
        "# Study\n\nabout it\n\n| arm |\n|---|\n| a |\n\nPaired over tasks.\n\n| a | b |\n|---|---|\n| x | y |\n"
    )
    body = readme_tables.block_text(report, "summary.md", "`cmd`", "Paired over")
    assert body.startswith("Paired over tasks.") and "| arm |" not in body and "| x | y |" in body
    assert "| arm |" in readme_tables.block_text(report, "summary.md", "`cmd`")  # without a start: the whole report
    with pytest.raises(ValueError, match="no line starting with 'Nowhere'"):
        readme_tables.block_text(report, "summary.md", "`cmd`", "Nowhere")
