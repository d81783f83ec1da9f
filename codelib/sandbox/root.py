"""The root a program sees: an allow-list of read-only binds on an empty tmpfs (`build_root`), and the checks on
where the interpreter lives (`interpreter_paths`, `under_tmp`). Standard library only.
"""

from __future__ import annotations

import os
import sys

from .syscalls import (
    MS_BIND,
    MS_NOATIME,
    MS_NODEV,
    MS_NODIRATIME,
    MS_NOEXEC,
    MS_NOSUID,
    MS_RDONLY,
    MS_REC,
    MS_RELATIME,
    MS_REMOUNT,
    mount,
)

SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32")
ETC_FILES = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "nsswitch.conf",
    "passwd",
    "group",
    "hosts",
    "alternatives",
    "os-release",
    "mime.types",
)
DEV_FILES = ("null", "zero", "full", "random", "urandom")
_ST_TO_MS = (
    (os.ST_RDONLY, MS_RDONLY),
    (os.ST_NOSUID, MS_NOSUID),
    (os.ST_NODEV, MS_NODEV),
    (os.ST_NOEXEC, MS_NOEXEC),
    (os.ST_NOATIME, MS_NOATIME),
    (os.ST_NODIRATIME, MS_NODIRATIME),
    (os.ST_RELATIME, MS_RELATIME),
)


def _bind_readonly(source: str, target: str) -> None:
    if os.path.isdir(source):
        os.makedirs(target, 0o755, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), 0o755, exist_ok=True)
        if not os.path.exists(target):
            open(target, "w").close()
    mount(source, target, None, MS_BIND | MS_REC)
    # a remount keeps the flags the source was mounted with (a user namespace may not clear them): add read-only
    locked = os.statvfs(target).f_flag
    flags = MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV
    flags |= sum(ms for st, ms in _ST_TO_MS if locked & st)
    mount(None, target, None, flags)


def interpreter_paths(site_packages: list[str]) -> list[str]:
    """The directories the interpreter and the caller's environment live in (the /tmp refusal checks them)."""
    return [
        sys.base_prefix,
        sys.prefix,
        sys.exec_prefix,
        sys.base_exec_prefix,
        os.path.dirname(os.path.realpath(sys.executable)),
        *site_packages,
    ]


def under_tmp(paths: list[str]) -> str | None:
    """The first of these paths that lies under /tmp (resolved), where every run's fresh tmpfs would hide it."""
    for p in paths:
        real = os.path.realpath(p)
        if real == "/tmp" or real.startswith("/tmp/"):
            return real
    return None


def build_root(new: str, python_paths: list[str]) -> None:
    """Populate `new` (an empty directory on a tmpfs) with what a program may see, read-only: the system's
    binaries and libraries, a few files of /etc, the interpreter, its stdlib and site-packages, five devices. Then
    an empty /proc (mounted by the pid namespace's init) and /tmp (the worker mounts the runs' tmpfs there).
    Nothing else: no home, no repository, no checkout, no cache."""
    for path in SYSTEM_DIRS:
        if os.path.islink(path):
            os.symlink(os.readlink(path), new + path)
        elif os.path.isdir(path):
            _bind_readonly(path, new + path)
    for name in ETC_FILES:
        path = "/etc/" + name
        if os.path.exists(path):
            _bind_readonly(os.path.realpath(path) if not os.path.isdir(path) else path, new + path)
    view = python_paths if isinstance(python_paths, dict) else dict(binds=list(python_paths))
    keep = sorted({os.path.realpath(p) for p in view["binds"] if os.path.exists(p)})
    for path in keep:  # the outermost of nested paths: a recursive bind brings the rest
        if not any(path != q and path.startswith(q + "/") for q in keep) and not _covered(new, path):
            _bind_readonly(path, new + path)
    for mask in view.get("masks", []):  # other site-packages (the base interpreter's, the system's): empty
        if os.path.isdir(new + mask):
            mount("tmpfs", new + mask, "tmpfs", MS_NOSUID | MS_NODEV | MS_RDONLY, "size=4k,mode=755")
    if view.get("site"):  # the allowed packages' code, at the environment's site-packages path
        source, target = view["site"]
        _bind_readonly(source, new + target)
    os.makedirs(new + "/dev", 0o755)
    for name in DEV_FILES:
        if os.path.exists("/dev/" + name):
            open(new + "/dev/" + name, "w").close()
            mount("/dev/" + name, new + "/dev/" + name, None, MS_BIND)
    for name, target in (
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ):
        os.symlink(target, new + "/dev/" + name)
    os.makedirs(new + "/proc", 0o555)
    os.makedirs(new + "/tmp", 0o755)


def _covered(new: str, path: str) -> bool:
    """Whether `path` is already visible in `new` through a system bind (e.g. /usr/lib/python3.11)."""
    return any(path == d or path.startswith(d + "/") for d in SYSTEM_DIRS if os.path.isdir(new + d))
