"""The worker's confinement primitives: namespaces, the allow-list root, cgroups v1/v2, seccomp. Standard library only.

Linux only. Each function either does what it says or raises OSError; the worker records what it could not do in
`missing`, which the pool reports (`Sandbox.isolation`) and warns about once. One module each, all importable from
here:

- `syscalls`: the libc calls (unshare, mount, prctl, capset) and their constants, a user namespace's uid map;
- `root`: the root a program sees, an allow-list of read-only binds on an empty tmpfs;
- `program_view`: code, never data: what of the Python environment a program sees, and the benchmark-data scan;
- `cgroups`: a memory and pids bound per worker; `seccomp`: the system-call filter;
- `cleanup`: a program's directory and processes, found and removed by walking them.
"""

from __future__ import annotations

from .cgroups import cgroup_v1, cgroup_v2, cgroups
from .cleanup import descendants, remove_tree
from .program_view import DEFAULT_PACKAGES, benchmark_data, program_view, site_view
from .root import DEV_FILES, ETC_FILES, SYSTEM_DIRS, build_root, interpreter_paths, under_tmp
from .seccomp import install_seccomp, seccomp_program
from .syscalls import (
    CLONE_NEW_ANY,
    CLONE_NEWCGROUP,
    CLONE_NEWIPC,
    CLONE_NEWNET,
    CLONE_NEWNS,
    CLONE_NEWPID,
    CLONE_NEWTIME,
    CLONE_NEWUSER,
    CLONE_NEWUTS,
    MS_BIND,
    MS_NOATIME,
    MS_NODEV,
    MS_NODIRATIME,
    MS_NOEXEC,
    MS_NOSUID,
    MS_PRIVATE,
    MS_RDONLY,
    MS_REC,
    MS_RELATIME,
    MS_REMOUNT,
    PR_SET_CHILD_SUBREAPER,
    PR_SET_DUMPABLE,
    PR_SET_NO_NEW_PRIVS,
    PR_SET_PDEATHSIG,
    PR_SET_SECCOMP,
    call,
    drop_capabilities,
    map_user,
    mount,
    prctl,
    unshare,
)

__all__ = [
    "CLONE_NEWCGROUP",
    "CLONE_NEWIPC",
    "CLONE_NEWNET",
    "CLONE_NEWNS",
    "CLONE_NEWPID",
    "CLONE_NEWTIME",
    "CLONE_NEWUSER",
    "CLONE_NEWUTS",
    "CLONE_NEW_ANY",
    "DEFAULT_PACKAGES",
    "DEV_FILES",
    "ETC_FILES",
    "MS_BIND",
    "MS_NOATIME",
    "MS_NODEV",
    "MS_NODIRATIME",
    "MS_NOEXEC",
    "MS_NOSUID",
    "MS_PRIVATE",
    "MS_RDONLY",
    "MS_REC",
    "MS_RELATIME",
    "MS_REMOUNT",
    "PR_SET_CHILD_SUBREAPER",
    "PR_SET_DUMPABLE",
    "PR_SET_NO_NEW_PRIVS",
    "PR_SET_PDEATHSIG",
    "PR_SET_SECCOMP",
    "SYSTEM_DIRS",
    "benchmark_data",
    "build_root",
    "call",
    "cgroup_v1",
    "cgroup_v2",
    "cgroups",
    "descendants",
    "drop_capabilities",
    "install_seccomp",
    "interpreter_paths",
    "map_user",
    "mount",
    "prctl",
    "program_view",
    "remove_tree",
    "seccomp_program",
    "site_view",
    "under_tmp",
    "unshare",
]
