"""What a run leaves behind, found and removed by walking it: a program's directory, its processes (the fallback
without namespaces), every process of a sandbox uid. Standard library only.
"""

from __future__ import annotations

import os
import signal
import time


def remove_tree(top: str) -> None:
    """Remove a program's directory however deep it nested it or whatever modes it set (no recursion: an explicit
    stack, so a 100,000-level nest goes too)."""
    stack, stuck = [top], set()
    while stack:
        path = stack[-1]
        try:
            os.chmod(path, 0o700, follow_symlinks=False)
            entries = list(os.scandir(path))
        except FileNotFoundError:
            stack.pop()
            continue
        except OSError:
            entries = []
        dirs = [e.path for e in entries if e.is_dir(follow_symlinks=False) and e.path not in stuck]
        for e in entries:
            if not e.is_dir(follow_symlinks=False):
                try:
                    os.unlink(e.path)
                except OSError:
                    pass
        if dirs:
            stack += dirs
            continue
        try:
            os.rmdir(path)
        except OSError:
            stuck.add(path)
        stack.pop()


def descendants(pid: int) -> list[int]:
    """Process ids below `pid` (the fallback without namespaces)."""
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                kids = [int(c) for c in open(f"/proc/{p}/task/{tid}/children").read().split()]
            except OSError:
                continue
            found += kids
            todo += kids
    return found


def kill_uid(uid: int) -> None:
    """SIGKILL every process owned by `uid` (a sandbox uid), until none is left."""
    for _ in range(50):
        pids = []
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    if os.stat(f"/proc/{name}").st_uid == uid:
                        pids.append(int(name))
                except OSError:
                    pass
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.01)
