"""Where things live: the repo root, the params profiles, every run and report directory; and how files are written.

Every path a params file names is relative to the repo root (not the cwd), so a notebook behaves the same in
JupyterLab (cwd `notebooks/`) and under papermill. Runs write under `checkpoints/`, reports under `reports/`; tests
(and anyone) move both with $CODELIB_CHECKPOINTS / $CODELIB_REPORTS.

    checkpoints/<profile>/<stage>/          run_dir(profile, stage): adapter, config.json, metrics.jsonl, samples
    checkpoints/<profile>/eval/<name>/      eval_dir(profile, name): one checkpoint's samples and summary
    reports/<profile>/                      report_dir(profile): results table, figures, executed notebooks

Files are written atomically (`atomic_write_text`): a reader never sees half a file, a crash never leaves one.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
TINY_DIR = REPO_ROOT / "checkpoints" / "tiny" / "base"  # the tiny profile's pretrained base model ("tiny")
NOT_PROFILES = ("accelerate", "base")  # params/ folders that are no profile: launcher configs, shared defaults


def profiles(root: Path = REPO_ROOT) -> list[str]:
    """The profiles: the folders of <root>/params/ a pipeline can run (not accelerate/ nor base/)."""
    return sorted(p.name for p in (root / "params").iterdir() if p.is_dir() and p.name not in NOT_PROFILES)


def checkpoints_root() -> Path:
    """checkpoints/ under the repo root, or $CODELIB_CHECKPOINTS (tests point it at a temporary directory)."""
    return Path(os.environ.get("CODELIB_CHECKPOINTS") or REPO_ROOT / "checkpoints")


def reports_root() -> Path:
    """reports/ under the repo root, or $CODELIB_REPORTS."""
    return Path(os.environ.get("CODELIB_REPORTS") or REPO_ROOT / "reports")


def resolve(path: str | os.PathLike) -> Path:
    """A path as written in a params file: absolute, or relative to the repo root (not the cwd).

    `checkpoints/...` and `reports/...` follow $CODELIB_CHECKPOINTS / $CODELIB_REPORTS when those are set.
    """
    p = Path(path).expanduser()
    if p.is_absolute():
        return p
    if p.parts and p.parts[0] == "checkpoints":
        return checkpoints_root().joinpath(*p.parts[1:])
    if p.parts and p.parts[0] == "reports":
        return reports_root().joinpath(*p.parts[1:])
    return REPO_ROOT / p


def profile_dir(profile: str) -> Path:
    """checkpoints/<profile>/: every run of a profile."""
    return checkpoints_root() / profile


def run_dir(profile: str, stage: str) -> Path:
    """Where a stage of a profile writes: checkpoints/<profile>/<stage>/."""
    return profile_dir(profile) / stage


def eval_dir(profile: str, name: str, out: str = "eval") -> Path:
    """checkpoints/<profile>/<out>/<name>/: where one checkpoint's evaluation samples and summary live."""
    return run_dir(profile, out) / name


def report_dir(profile: str) -> Path:
    """reports/<profile>/: a profile's results table, figures and executed notebooks."""
    return reports_root() / profile


# ---------------------------------------------------------------------------------------------------------------
# atomic writes: a reader never sees half a file, a crash never leaves one


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_json(path: str | os.PathLike, obj: Any) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")
