"""Copy the shipped report tables into README.md, between their markers, so the README never shows a number the
reports do not hold.

    python tools/readme_tables.py           # rewrite the blocks from reports/<profile>/
    python tools/readme_tables.py --check   # exit 1 naming each block that differs from its report

A block `<!-- NAME:start -->` ... `<!-- NAME:end -->` holds its report without the heading, then where it came from. `tests/test_readme.py` runs the check, so a regenerated report with a stale README fails.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BLOCKS = {  # marker name -> (report, what regenerates it)
    "results": ("reports/tiny/results.md", "`make demo`"),
    "study": ("reports/tiny/studies/algorithms/summary.md", "`make study`"),
    "comparison": (
        "reports/tiny/comparison.md",
        "`python -m codelib.comparison params/tiny/variants/06_eval_algorithms.yaml`",
    ),
}


def block_text(report: Path, rel: str, how: str) -> str:
    """The README block of a report: the report without its heading (its description and tables, verbatim), then
    where it came from."""
    lines = report.read_text().splitlines()
    if not any(ln.startswith("|") for ln in lines):
        raise ValueError(f"{report}: no Markdown table in it")
    body = "\n".join(lines[1:] if lines and lines[0].startswith("#") else lines).strip()
    return f"{body}\n\n(`{rel}`; regenerate with {how}.)\n"


def sync(readme: Path = ROOT / "README.md", root: Path = ROOT, check: bool = False) -> list[str]:
    """Rewrite (or with `check`, only compare) every block of `readme`; returns the names of the blocks that
    differed. A block whose markers are missing is an error."""
    text = new = readme.read_text()
    stale = []
    for name, (rel, how) in BLOCKS.items():
        pattern = re.compile(rf"(<!-- {name}:start -->\n)(.*?)(<!-- {name}:end -->)", re.S)
        m = pattern.search(new)
        if m is None:
            raise ValueError(f"{readme}: no <!-- {name}:start --> ... <!-- {name}:end --> block")
        body = block_text(root / rel, rel, how)
        if m.group(2) != body:
            stale.append(name)
            new = new[: m.start(2)] + body + new[m.end(2) :]
    if not check and new != text:
        readme.write_text(new)
    return stale


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only compare; exit 1 if a block differs from its report")
    args = ap.parse_args(argv)
    stale = sync(check=args.check)
    for name in stale:
        rel = BLOCKS[name][0]
        print(
            f"README.md: the {name} block differs from {rel}"
            + ("; run python tools/readme_tables.py" if args.check else "; rewritten")
        )
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
