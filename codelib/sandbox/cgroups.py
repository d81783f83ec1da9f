"""cgroups: a memory and pids bound per worker, v2 (unified) first, then v1. Standard library only."""

from __future__ import annotations

import os


def cgroup_v2(mountpoint: str, path: str, name: str, memory_bytes: int, max_pids: int) -> list[str]:
    """A child group `name` of the worker's cgroup `path` under a cgroup2 mount, with memory.max and pids.max.

    Needs the memory and pids controllers enabled for the children of `path` (they are, or we may enable them:
    root, or a delegated subtree). Returns [group dir]; raises OSError naming what is missing."""
    parent = os.path.join(mountpoint, path.lstrip("/"))
    with open(os.path.join(parent, "cgroup.controllers")) as f:
        available = set(f.read().split())
    if not {"memory", "pids"} <= available:
        raise OSError(f"cgroup v2 at {parent} lacks the memory/pids controllers ({' '.join(sorted(available))})")
    with open(os.path.join(parent, "cgroup.subtree_control")) as f:
        enabled = set(f.read().split())
    if not {"memory", "pids"} <= enabled:
        with open(os.path.join(parent, "cgroup.subtree_control"), "w") as f:
            f.write("+memory +pids")  # EBUSY when processes live in `parent` (the no-internal-process rule)
    group = os.path.join(parent, name)
    os.mkdir(group)
    try:
        for file, value in (("memory.max", memory_bytes), ("memory.swap.max", 0), ("pids.max", max_pids)):
            if file != "memory.swap.max" or os.path.exists(os.path.join(group, file)):
                with open(os.path.join(group, file), "w") as f:
                    f.write(str(value))
    except OSError:
        os.rmdir(group)
        raise
    return [group]


def cgroup_v1(root: str, lines: list[str], name: str, memory_bytes: int, max_pids: int) -> list[str]:
    """A group `name` in the v1 memory and pids hierarchies below the worker's own."""
    groups = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        for ctl in controllers.split(","):
            if ctl not in ("memory", "pids"):
                continue
            group = os.path.join(root, ctl, path.lstrip("/"), name)
            os.mkdir(group)
            try:
                file, value = ("memory.limit_in_bytes", memory_bytes) if ctl == "memory" else ("pids.max", max_pids)
                with open(os.path.join(group, file), "w") as f:
                    f.write(str(value))
            except OSError:
                os.rmdir(group)
                raise
            groups.append(group)
    if len(groups) < 2:
        for g in groups:
            os.rmdir(g)
        raise OSError("no writable v1 memory and pids hierarchies")
    return groups


def cgroups(name: str, memory_bytes: int, max_pids: int) -> tuple[list[str], str]:
    """Groups bounding a worker's programs: (dirs, "") or ([], why not)."""
    lines = open("/proc/self/cgroup").read().splitlines()
    why = []
    v2 = [line.split("::", 1)[1] for line in lines if line.startswith("0::")]
    for mnt in _cgroup2_mounts():
        if v2:
            try:
                return cgroup_v2(mnt, v2[0], name, memory_bytes, max_pids), ""
            except OSError as e:
                why.append(f"v2: {e.strerror or e}")
    try:
        return cgroup_v1(
            "/sys/fs/cgroup", [x for x in lines if not x.startswith("0::")], name, memory_bytes, max_pids
        ), ""
    except OSError as e:
        why.append(f"v1: {e.strerror or e}")
    return [], "; ".join(why)


def _cgroup2_mounts() -> list[str]:
    try:
        with open("/proc/self/mountinfo") as f:
            return [line.split()[4] for line in f if " - cgroup2 " in line]
    except OSError:
        return []
