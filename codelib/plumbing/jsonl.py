"""JSON Lines: the one reader and the one appender of every `.jsonl` (and `.jsonl.gz`) file the project touches.

Two kinds of file, one reader:
- run logs (metrics.jsonl, samples.jsonl, candidates): a run appends rows as it goes, so a stop mid-write can tear the
  last line, and a run that has not started has no file. `read_jsonl(path)` reads them forgivingly: no file, no
  rows; the rows end where a line stops parsing.
- data files (the bundled benchmarks): `read_jsonl(path, strict=True)`: a missing file or a line that does not parse
  is an error naming the file and the line, since a truncated benchmark would quietly score fewer tasks.
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path


class JsonlError(ValueError):
    """A data file (read strictly) with a line that is not JSON."""


def read_jsonl(path: str | os.PathLike, strict: bool = False) -> list[dict]:
    """The rows of a JSONL file (gzip-compressed when its name ends in .gz); see the module docstring for `strict`."""
    path = Path(path)
    if not path.exists() and not strict:
        return []
    opener = gzip.open if path.suffix == ".gz" else open
    rows = []
    with opener(path, "rt", encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                if strict:
                    raise JsonlError(f"{path}:{number}: not a JSON line ({e.msg})") from e
                break  # a torn write: what follows is not trusted either
    return rows


def append_jsonl(path: str | os.PathLike, row: dict) -> None:
    """Append one row and flush it to disk (metrics logs: a stop loses at most the row being written)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(row, default=float) + "\n")
        f.flush()
        os.fsync(f.fileno())
