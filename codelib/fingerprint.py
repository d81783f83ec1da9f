"""Hashes of the code that decides a score, so that a changed rule re-runs what it decided.

Cached evaluation summaries (`evaluator.settings_for`) and the pipeline's stage stamps include these hashes beside
their parameters: after a change to completion extraction, the sandbox's judging or the reward and scoring code,
old pass@1 numbers are not reused. The sandbox is hashed by pattern (`sandbox*.py` and every `.py` under a
`sandbox*/` package), so it does not matter whether it is one module or a package.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent

# what turns a completion into a verdict and a reward: extraction, the sandbox, the rewards (and their lint)
JUDGE = ("extraction.py", "lint.py", "rewards.py", "sandbox*.py", "sandbox*/**/*.py")
# what turns verdicts into pass@k and its intervals
SCORE = (*JUDGE, "evaluator.py", "stats.py")


def files(patterns: tuple[str, ...], root: Path = PACKAGE) -> list[Path]:
    """The files under `root` that match any pattern, sorted, each once."""
    return sorted({p for pat in patterns for p in root.glob(pat) if p.is_file() and "__pycache__" not in p.parts})


def code_hash(patterns: tuple[str, ...] = JUDGE, root: Path = PACKAGE) -> str:
    """sha256 over the names and sources of the matching files (16 hex digits)."""
    h = hashlib.sha256()
    for p in files(patterns, root):
        h.update(p.relative_to(root).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:16]
