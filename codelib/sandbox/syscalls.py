"""The libc calls the confinement makes, with their constants: unshare, mount, prctl, a user namespace's uid map,
capset. Standard library only (ctypes).

Linux only. Each function either does what it says or raises OSError.
"""

from __future__ import annotations

import ctypes
import os

CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x02000000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWTIME = 0x10000000, 0x20000000, 0x40000000, 0x00000080
CLONE_NEW_ANY = CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID
CLONE_NEW_ANY |= CLONE_NEWNET | CLONE_NEWTIME
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = (
    1,
    2,
    4,
    8,
    32,
    4096,
    0x4000,
    1 << 18,
)
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 1024, 2048, 1 << 21
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_SECCOMP, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 1, 4, 22, 36, 38

_libc = ctypes.CDLL(None, use_errno=True)


def call(fn: str, *args) -> None:
    if getattr(_libc, fn)(*args) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{fn}: {os.strerror(err)}")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = lambda s: s.encode() if s is not None else None  # noqa: E731
    call("mount", enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data))


def prctl(option: int, value: int) -> None:
    call("prctl", option, ctypes.c_ulong(value), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))


def unshare(flags: int) -> None:
    call("unshare", flags)


def map_user(uid: int, gid: int) -> None:
    """In a fresh user namespace: be root there, as `uid` outside (the only mapping an unprivileged user may write)."""
    with open("/proc/self/setgroups", "w") as f:
        f.write("deny")
    with open("/proc/self/uid_map", "w") as f:
        f.write(f"0 {uid} 1")
    with open("/proc/self/gid_map", "w") as f:
        f.write(f"0 {gid} 1")


# ---------------------------------------------------------------------------------------------------------------
# capabilities


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_capabilities() -> None:
    """capset(2) with empty sets: no capability left, in any namespace."""
    header, data = _CapHeader(0x20080522, 0), (_CapData * 2)()  # _LINUX_CAPABILITY_VERSION_3: two 32-bit words
    call("capset", ctypes.byref(header), data)
