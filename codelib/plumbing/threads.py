"""torch's CPU threads for a run: the params' `threads`, or CODELIB_THREADS on a machine shared with other jobs.

The thread count is part of a run's floats: the same run at 1 and at 2 threads agrees only to ~1e-7 after its first
step (reductions split differently). So a checkpoint records the count it was written at, and a run resumed at
another count says so (`note_resume`): it goes on, but it no longer reproduces an uninterrupted run bit for bit.
"""

from __future__ import annotations

import os

import torch


def set_threads(threads: int = 0) -> None:
    """torch's CPU threads from CODELIB_THREADS when set, else `threads` (0: leave torch's default)."""
    threads = int(os.environ.get("CODELIB_THREADS") or threads or 0)
    if threads:
        torch.set_num_threads(threads)


def note_resume(where, saved: int | None) -> None:
    """Print a line when a run resumes at another thread count than its checkpoint was written at (`saved`; None: a
    checkpoint that recorded none)."""
    now = torch.get_num_threads()
    if saved is None or int(saved) == now:
        return
    print(
        f"{where}: resuming at {now} torch threads, but the checkpoint was written at {saved}: training goes on, but "
        f"its floats differ from an uninterrupted run's. To reproduce that run, resume with threads: {saved} in the "
        f"params (or CODELIB_THREADS={saved})."
    )
