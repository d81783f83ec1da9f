"""Copy the shipped report tables into README.md and docs/*.md, between their markers, so no page shows a number the
reports do not hold.

    python tools/readme_tables.py           # rewrite every block from its report
    python tools/readme_tables.py --check   # exit 1 naming each block that differs from its report

A block `<!-- NAME:start -->` ... `<!-- NAME:end -->` holds its report without the heading, then where it came from
and the command that regenerates it. `tests/test_readme.py` runs the check, so a regenerated report with a stale page
fails, and checks that every number in README.md's prose outside the blocks is one a block holds. The check reads past
a table's timing columns (`TIMES`: the comparison's training minutes, as each run happened): a rerun that reproduces
every result in another wall time leaves its page current; rewriting copies the report's times too.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def study(name: str, split: str = "") -> tuple[str, str]:
    """A tiny study's summary (of `split`, "" = its test split) and the command that regenerates it."""
    sub = f"{split}/" if split else ""
    flag = f" --split {split}" if split else ""
    return (
        f"reports/tiny/studies/{name}/{sub}summary.md",
        f"`python -m codelib.study params/tiny/studies/{name}.yaml{flag}`",
    )


BLOCKS = {  # marker name -> (report, what regenerates it)
    "study": ("reports/tiny/studies/algorithms/summary.md", "`make study`"),
    "comparison": ("reports/tiny/comparison.md", "`make compare`"),
    "study_fresh": study("algorithms", "fresh"),
    "passk": (
        "reports/tiny/passk/pass_at_k.md",
        "`python -m codelib.passk params/tiny/variants/06_eval_passk.yaml`",
    ),
    "repair": ("reports/tiny/repair/summary.md", "`python -m codelib.pipeline --only 09_repair`"),
    "grpo_samples": study("grpo_samples"),
    "grpo_budget": study("grpo_budget"),
    "reinforce_shape": study("reinforce_shape"),
    "ppo_shape": study("ppo_shape"),
    "dapo_parts": study("dapo_parts"),
    "four_updates_lr": study("four_updates_lr"),
    "grpo_options": study("grpo_options"),
    "grpo_options_fresh": study("grpo_options", "fresh"),
    "backends": study("backends"),
    "backends_pairs": study("backends"),
    "backends_fresh": study("backends", "fresh"),
}
# a block that holds its report from the line starting so (one table of it)
FROM = {"backends_pairs": "Paired over", "grpo_options_fresh": "Paired over"}
TIMES = {"comparison": ("train min",)}  # a block's columns of wall time: they differ on every rerun, results do not
PAGES = {  # page -> the blocks it holds (each block lives on one page)
    "README.md": ["study", "comparison", "backends_pairs"],
    "docs/studies.md": [
        "study_fresh",
        "passk",
        "grpo_samples",
        "dapo_parts",
        "four_updates_lr",
        "grpo_budget",
        "reinforce_shape",
        "ppo_shape",
    ],
    "docs/repair.md": ["repair"],
    "docs/speed.md": ["grpo_options", "grpo_options_fresh"],
    "docs/algorithms.md": ["backends", "backends_fresh"],
}


def block_text(report: Path, rel: str, how: str, start: str | None = None) -> str:
    """The block of a report: the report without its first heading (its description and tables, verbatim), or from
    its line starting with `start`, then where it came from."""
    lines = report.read_text().splitlines()
    if start is not None:
        at = next((i for i, ln in enumerate(lines) if ln.startswith(start)), None)
        if at is None:
            raise ValueError(f"{report}: no line starting with {start!r}")
        lines = lines[at:]
    if not any(ln.startswith("|") for ln in lines):
        raise ValueError(f"{report}: no Markdown table in it")
    body = "\n".join(lines[1:] if lines and lines[0].startswith("#") else lines).strip()
    return f"{body}\n\n(`{rel}`; regenerate with {how}.)\n"


def without_columns(text: str, columns: tuple[str, ...]) -> str:
    """A block's text with the cells of the named columns blanked in each Markdown table (by the header row's names)."""
    out, drop = [], None
    for line in text.splitlines():
        if not line.startswith("|"):
            drop = None  # between tables
        else:
            cells = line.split("|")
            if drop is None:  # a table's first row is its header
                drop = {i for i, cell in enumerate(cells) if cell.strip() in columns}
            line = "|".join("" if i in drop else cell for i, cell in enumerate(cells))
        out.append(line)
    return "\n".join(out)


def sync_page(page: Path, names: list[str], root: Path = ROOT, check: bool = False) -> list[str]:
    """Rewrite (or with `check`, only compare) the named blocks of one page; returns the names that differed (with
    `check`, in more than their `TIMES` columns). A block whose markers are missing is an error."""
    text = new = page.read_text()
    stale = []
    for name in names:
        rel, how = BLOCKS[name]
        pattern = re.compile(rf"(<!-- {name}:start -->\n)(.*?)(<!-- {name}:end -->)", re.S)
        m = pattern.search(new)
        if m is None:
            raise ValueError(f"{page}: no <!-- {name}:start --> ... <!-- {name}:end --> block")
        body = block_text(root / rel, rel, how, FROM.get(name))
        times = TIMES.get(name, ())
        if check and times and without_columns(m.group(2), times) == without_columns(body, times):
            continue
        if m.group(2) != body:
            stale.append(name)
            new = new[: m.start(2)] + body + new[m.end(2) :]
    if not check and new != text:
        page.write_text(new)
    return stale


def sync(readme: Path | None = None, root: Path = ROOT, check: bool = False) -> list[str]:
    """Every page's blocks (README.md at `readme` if given, the docs under `root`); the stale block names."""
    stale = []
    for rel, names in PAGES.items():
        page = readme if (rel == "README.md" and readme is not None) else root / rel
        if page.exists() or rel == "README.md":
            stale += sync_page(page, names, root, check)
    return stale


def numbers(text: str) -> set[str]:
    """The decimal numbers of a text (`58.1`, `+7.2`, `-0.3`): the figures a results page must not invent."""
    return {m.lstrip("+-") for m in re.findall(r"[+-]?\d+\.\d+", text)}


def prose_numbers_outside_blocks(page: Path) -> set[str]:
    """Decimal numbers in a page's prose (outside its blocks and code) that none of its blocks holds."""
    text = page.read_text()
    inside = "".join(m.group(0) for m in re.finditer(r"<!-- (\w+):start -->.*?<!-- \1:end -->", text, re.S))
    outside = re.sub(r"<!-- (\w+):start -->.*?<!-- \1:end -->", "", text, flags=re.S)
    outside = re.sub(r"```.*?```", "", outside, flags=re.S)  # commands, not results
    outside = re.sub(r"`[^`]*`", "", outside)  # file names, versions, settings
    outside = re.sub(r"\([^()]*\.(png|md|csv|json)\)", "", outside)  # image and link targets
    return numbers(outside) - numbers(inside)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only compare; exit 1 if a block differs from its report")
    args = ap.parse_args(argv)
    stale = sync(check=args.check)
    for name in stale:
        page = next(p for p, names in PAGES.items() if name in names)
        print(
            f"{page}: the {name} block differs from {BLOCKS[name][0]}"
            + ("; run python tools/readme_tables.py" if args.check else "; rewritten")
        )
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
