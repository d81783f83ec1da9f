"""What a program tried that marks tampering: the tamper classes (`Verdict.tamper`) and the audit hook that reports
them to the parent (`watch_tamper`). Standard library only; runs in the untrusted child, installed by the harness.
"""

from __future__ import annotations

import os
import sys

TAMPER_FD = 1002  # both: what the program tried that marks tampering, one class per line, to the parent

# the tamper classes (Verdict.tamper): what a program tried that a correct solution never needs
TAMPER_CLASSES = ("signal", "frames", "gc", "memory", "proc", "write", "exit", "seccomp")
_RAW_SYMBOLS = frozenset(
    (
        "syscall",
        "kill",
        "tgkill",
        "tkill",
        "ptrace",
        "process_vm_readv",
        "process_vm_writev",
        "prctl",
        "unshare",
        "setns",
        "mount",
        "pidfd_open",
        "pidfd_send_signal",
        "pidfd_getfd",
        "seccomp",
        "personality",
        "memfd_create",
        "mprotect",
    )
)


def watch_tamper(ours: tuple) -> None:
    """An audit hook (it cannot be removed) that tells the parent, once per class, what the program tried: signals
    to processes that are not its own children or group, frames of the harness, the garbage collector's object
    lists, raw memory (ctypes reads at addresses, raw system calls), other processes' /proc files, writes outside
    its /tmp. Telemetry, not a guard: every one of these is refused or harmless by the sandbox's construction; a
    program that closes the channel first is recorded only up to then (the parent adds what it sees itself: exits
    before the tests)."""
    write, getpid, getpgrp, fspath = os.write, os.getpid, os.getpgrp, os.fspath
    seen: set = set()

    def note(kind: str) -> None:
        if kind not in seen:
            seen.add(kind)
            try:
                write(TAMPER_FD, kind.encode() + b"\n")
            except OSError:
                pass

    def ppid(pid: int) -> int:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                return int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return -1

    def outside(path) -> bool:
        try:
            p = fspath(path)
            p = p.decode("utf-8", "replace") if isinstance(p, bytes) else p
        except TypeError:
            return False
        return isinstance(p, str) and p.startswith("/") and not p.startswith(("/tmp/", "/dev/null", "/proc/self/fd"))

    def on_kill(args):
        pid = args[0] if args and type(args[0]) is int else 0
        if pid == -1 or pid == 1 or (pid < -1 and -pid != getpgrp()):
            note("signal")
        elif pid > 1 and pid != getpid() and ppid(pid) != getpid():
            note("signal")

    def on_killpg(args):
        if args and type(args[0]) is int and args[0] not in (0, getpgrp()):
            note("signal")

    def on_frame(args):
        frame = args[0] if args else None
        if getattr(getattr(frame, "f_code", None), "co_filename", "") in ours:
            note("frames")

    def on_open(args):
        path = args[0] if args else None
        mode, flags = (args[1] if len(args) > 1 else None), (args[2] if len(args) > 2 else 0)
        text = path if isinstance(path, str) else path.decode("utf-8", "replace") if isinstance(path, bytes) else ""
        if text.startswith("/proc/"):
            part = text.split("/")
            if len(part) > 2 and part[2] not in (
                "self",
                str(getpid()),
                "thread-self",
                "cpuinfo",
                "meminfo",
                "stat",
                "loadavg",
                "uptime",
                "version",
            ):
                note("proc")
            elif part[-1] in ("mem", "maps", "smaps", "pagemap", "environ"):
                note("memory")
        writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            type(flags) is int and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT)
        )
        if writing and outside(path):
            note("write")

    def on_change(args):
        if args and outside(args[0]):
            note("write")

    def on_dlsym(args):
        if len(args) > 1 and args[1] in _RAW_SYMBOLS:
            note("memory")

    handlers = {
        "os.kill": on_kill,
        "os.killpg": on_killpg,
        "sys._getframe": on_frame,
        "sys._current_frames": lambda a: note("frames"),
        "gc.get_objects": lambda a: note("gc"),
        "gc.get_referrers": lambda a: note("gc"),
        "gc.get_referents": lambda a: note("gc"),
        "ctypes.string_at": lambda a: note("memory"),
        "ctypes.wstring_at": lambda a: note("memory"),
        "ctypes.cdata": lambda a: note("memory"),
        "ctypes.dlsym": on_dlsym,
        "open": on_open,
        "os.remove": on_change,
        "os.rename": on_change,
        "os.mkdir": on_change,
        "os.rmdir": on_change,
        "os.chmod": on_change,
        "os.symlink": on_change,
        "os.link": on_change,
        "os.truncate": on_change,
    }
    get = handlers.get

    def hook(event, args):
        handler = get(event)
        if handler is not None:
            try:
                handler(args)
            except Exception:
                pass

    sys.addaudithook(hook)
