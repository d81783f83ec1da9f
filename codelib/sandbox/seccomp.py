"""seccomp: the system calls a program never needs and an attacker would use, as a BPF filter the worker installs
once. Standard library only (ctypes).
"""

from __future__ import annotations

import ctypes
import os

from .syscalls import CLONE_NEW_ANY, PR_SET_SECCOMP, call

# the system calls added since Linux 5.1 have one number on every architecture
_UNIFIED = dict(
    io_uring_setup=425,
    io_uring_enter=426,
    io_uring_register=427,
    open_tree=428,
    move_mount=429,
    fsopen=430,
    fsmount=432,
    fspick=433,
    pidfd_getfd=438,
    mount_setattr=442,
)
_DENY = {
    "x86_64": dict(
        **_UNIFIED,
        msgget=68,
        msgsnd=69,
        msgrcv=70,
        msgctl=71,
        semget=64,
        semop=65,
        semctl=66,
        semtimedop=220,
        shmget=29,
        shmat=30,
        shmctl=31,
        shmdt=67,
        mq_open=240,
        mq_unlink=241,
        mq_timedsend=242,
        mq_timedreceive=243,
        mq_notify=244,
        mq_getsetattr=245,
        add_key=248,
        request_key=249,
        keyctl=250,
        ptrace=101,
        process_vm_readv=310,
        process_vm_writev=311,
        unshare=272,
        setns=308,
        pivot_root=155,
        chroot=161,
        bpf=321,
        perf_event_open=298,
        userfaultfd=323,
        kexec_load=246,
        init_module=175,
        finit_module=313,
        delete_module=176,
        reboot=169,
        swapon=167,
        swapoff=168,
        open_by_handle_at=304,
        name_to_handle_at=303,
        kcmp=312,
        acct=163,
        syslog=103,
        quotactl=179,
    ),
    "aarch64": dict(
        **_UNIFIED,
        msgget=186,
        msgctl=187,
        msgrcv=188,
        msgsnd=189,
        semget=190,
        semctl=191,
        semtimedop=192,
        semop=193,
        shmget=194,
        shmctl=195,
        shmat=196,
        shmdt=197,
        mq_open=180,
        mq_unlink=181,
        mq_timedsend=182,
        mq_timedreceive=183,
        mq_notify=184,
        mq_getsetattr=185,
        add_key=217,
        request_key=218,
        keyctl=219,
        ptrace=117,
        process_vm_readv=270,
        process_vm_writev=271,
        unshare=97,
        setns=268,
        pivot_root=41,
        chroot=51,
        bpf=280,
        perf_event_open=241,
        userfaultfd=282,
        kexec_load=104,
        init_module=105,
        finit_module=273,
        delete_module=106,
        reboot=142,
        swapon=224,
        swapoff=225,
        open_by_handle_at=265,
        name_to_handle_at=264,
        kcmp=272,
        acct=89,
        syslog=116,
        quotactl=60,
    ),
}
_ARCH = {"x86_64": (0xC000003E, 56, 435), "aarch64": (0xC00000B7, 220, 435)}  # audit arch, clone, clone3
_ENOSYS = 38
_RET_ALLOW, _RET_ERRNO, _RET_KILL = 0x7FFF0000, 0x00050000, 0x80000000


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def seccomp_program():
    """The worker installs it once after its set-up; every program and judge inherits it. (mount and umount2 are
    not in it: they need CAP_SYS_ADMIN, which no program has, in a namespace it cannot create; the worker uses them
    to replace a dirty /tmp.) A BPF filter (as the ctypes struct prctl takes): a `_DENY` call, or clone with a
    CLONE_NEW* flag, kills the calling process with SIGSYS, so the parent sees the attempt (the verdict's `seccomp`
    tamper class; an error code would be invisible outside the program); clone3 fails with ENOSYS (libc then uses
    clone, whose flags a filter can read); a foreign architecture (x32, 32-bit compat calls) kills the process
    too. None on an architecture without a table."""
    machine = os.uname().machine
    if machine not in _DENY:
        return None
    arch, clone, clone3 = _ARCH[machine]
    body: list[tuple] = []  # (code, jt target or 0, jf, k); targets: "allow", "eperm", "enosys", "kill"
    body.append((0x20, 0, 0, 4))  # ld arch
    body.append((0x15, 0, "kill", arch))  # jeq arch, else kill
    body.append((0x20, 0, 0, 0))  # ld nr
    if machine == "x86_64":
        body.append((0x35, "kill", 0, 0x40000000))  # jge x32
    for nr in sorted(set(_DENY[machine].values())):
        body.append((0x15, "kill", 0, nr))
    body.append((0x15, "enosys", 0, clone3))
    body.append((0x15, 0, "allow", clone))  # not clone: allow
    body.append((0x20, 0, 0, 16))  # ld args[0] (low word)
    body.append((0x45, "kill", "allow", CLONE_NEW_ANY))  # jset
    ends = {"allow": _RET_ALLOW, "enosys": _RET_ERRNO | _ENOSYS, "kill": _RET_KILL}
    at = {name: len(body) + i for i, name in enumerate(ends)}
    insns = []
    for i, (code, jt, jf, k) in enumerate(body):
        jt = at[jt] - i - 1 if isinstance(jt, str) else jt
        jf = at[jf] - i - 1 if isinstance(jf, str) else jf
        insns.append((code, jt, jf, k))
    insns += [(0x06, 0, 0, v) for v in ends.values()]
    arr = (_SockFilter * len(insns))(*[_SockFilter(*x) for x in insns])
    prog = _SockFprog(len(insns), arr)
    prog._keep = arr
    return prog


def install_seccomp(prog) -> None:
    """Install `prog` in this process (needs no_new_privs); inherited by every child, irrevocable."""
    call("prctl", PR_SET_SECCOMP, ctypes.c_ulong(2), ctypes.byref(prog), ctypes.c_ulong(0), ctypes.c_ulong(0))
