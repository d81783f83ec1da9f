"""The first steps of a run's processes, in the child right after the worker forks it. Standard library only.

`program`: the untrusted child: a session of its own, its OOM score raised, the program and its stdin read from
memfds, stdio onto the run's pipes, every other descriptor closed, an empty working directory, rlimits, its own uid
(or no capabilities), no new privileges; then the harness. `judge_server`: the trusted judge, its own uid, not
dumpable. `reap_forever`: pid 1 of the worker's pid namespace. None of them returns.
"""

from __future__ import annotations

import math
import os
import resource
import signal

from . import harness, isolation, judge
from .isolation import PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS, PR_SET_PDEATHSIG, prctl

_sha256 = None


def sha256(data: bytes):
    """hashlib's sha256, imported in the child at its first use (a plus input's large output), then kept: hashlib and
    OpenSSL would add 0.65 MB to the worker, which every fork copies the page tables of and every exit unmaps. What
    the program did to hashlib changes only its own digests, which it cannot match to outputs it never saw."""
    global _sha256
    if _sha256 is None:
        from hashlib import sha256 as _sha256
    return _sha256(data)


def _limits(req: dict, config: dict, memory_mb: int, nproc: int) -> None:
    cpu = math.ceil(float(req["timeout_s"])) + 1
    rl = resource
    for what, value in (
        (rl.RLIMIT_CPU, (cpu, cpu + 1)),
        (rl.RLIMIT_AS, (int(memory_mb) << 20,) * 2),
        (rl.RLIMIT_FSIZE, (int(config["max_file_mb"]) << 20,) * 2),
        (rl.RLIMIT_NOFILE, (int(config["max_open_files"]),) * 2),
        (rl.RLIMIT_CORE, (0, 0)),
    ):
        rl.setrlimit(what, value)
    if nproc:
        rl.setrlimit(rl.RLIMIT_NPROC, (nproc, nproc))


def _confine(server, uid: int | None) -> None:
    """The last steps of every child: its uid (or no capabilities), no new privileges, the system-call filter."""
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    elif server.chrooted:
        isolation.drop_capabilities()  # in a user namespace the worker is root there: its children must not be
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    prctl(PR_SET_NO_NEW_PRIVS, 1)  # the seccomp filter is the worker's, inherited


def program(server, req: dict, named: dict, extra: dict, mode: str):
    """The forked program child: confine itself, then run the harness. Never returns."""
    try:
        os.setsid()
        if server.proc:  # the OOM killer of the worker's cgroup takes the program's processes first
            _write("/proc/self/oom_score_adj", b"1000")
        chunks = []
        while chunk := os.read(named["program"], 1 << 20):
            chunks.append(chunk)
        program = b"".join(chunks)
        if len(program) != req.get("program_bytes", len(program)):  # never run a part of it
            raise RuntimeError("the program did not arrive whole")
        req["program"] = program.decode("utf-8", "surrogatepass")
        os.dup2(named["stdin"] if "stdin" in named else os.open(os.devnull, os.O_RDONLY), 0)
        os.dup2(named["stdout"], 1)  # the parent's pipes: the worker never reads them
        os.dup2(named["stderr"], 2)
        for target, source in extra.items():
            os.dup2(source, target, inheritable=False)
        if "tamper" in named:
            os.dup2(named["tamper"], harness.TAMPER_FD, inheritable=False)
        os.closerange(3, harness.REPORT_FD)
        os.closerange(harness.TAMPER_FD + 1, 1 << 16)
        for target in (harness.REPORT_FD, harness.CALL_FD, harness.TAMPER_FD):
            if target not in extra and not (target == harness.TAMPER_FD and "tamper" in named):
                close(target)
        if server.fresh_tmp:
            workdir = "/tmp"  # a tmpfs of its own, replaced after a run that leaves anything in it
        else:
            workdir = os.path.join(server.private, f"run{server.counter}")
            os.mkdir(workdir, 0o700)
        os.chdir(workdir)
        _limits(req, server.config, int(req["memory_mb"]), server.nproc)
        _confine(server, server.uid)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGALRM, signal.SIGCHLD, signal.SIGUSR1, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # an oversized write fails with EFBIG instead of killing
        os.environ.update(HOME=workdir, TMPDIR=workdir, PWD=workdir)
        import atexit

        atexit._clear()  # callbacks the worker registered are not the program's
        if mode == "serve":
            harness.serve(req["program"], sha256)
        else:
            harness.inside(req, req.pop("token"), mode == "stdio", sha256)
    except BaseException:
        pass
    os._exit(70)


def judge_factory(server, sock_fd: int, root: str | None):
    """The judge factory, forked by the worker before its pid namespace (so in the worker's own, which no program
    can name): chrooted to the programs' root, it forks a judge server per request (the uid to take, or "-") and
    sends back the judge's socket and a pidfd. It never runs a program and never holds a test. Never returns."""
    import socket

    try:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # judges are reaped by the kernel: no zombies, no waitpid
        os.dup2(sock_fd, 3)
        os.closerange(4, 1 << 16)
        if root is not None:
            os.chroot(root)
        os.chdir("/")
        if server.seccomp is not None:
            prctl(PR_SET_NO_NEW_PRIVS, 1)
            isolation.install_seccomp(server.seccomp)
        sock = socket.socket(fileno=3)
        while msg := sock.recv(64):
            uid = None if msg == b"-" else int(msg)
            ours, theirs = socket.socketpair()
            pid = os.fork()
            if pid == 0:
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                ours.close()
                judge_server(server, theirs.fileno(), uid, namespaces=root is not None)
            theirs.close()
            pidfd = os.pidfd_open(pid)
            socket.send_fds(sock, [b"j"], [ours.fileno(), pidfd])
            ours.close()
            os.close(pidfd)
    except BaseException:
        pass
    os._exit(70)


def judge_server(server, sock_fd: int, uid: int | None = None, namespaces: bool = False):
    """The forked judge server: its own uid, not dumpable, limited; serves runs (`judge.serve`). Never returns."""
    try:
        os.setsid()
        os.dup2(sock_fd, 3)
        os.closerange(4, 1 << 16)
        os.chdir("/")
        memory = max(judge.JUDGE_MEMORY_MB, int(server.config["plus_memory_mb"]))
        resource.setrlimit(resource.RLIMIT_AS, (memory << 20,) * 2)
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if uid is not None:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
        elif namespaces:
            isolation.drop_capabilities()
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        prctl(PR_SET_NO_NEW_PRIVS, 1)
        prctl(PR_SET_DUMPABLE, 0)  # after the uid change, which resets it: no ptrace, no /proc/<pid>/mem
        judge.serve(3)
    except BaseException:
        pass
    os._exit(70)


def reap_forever() -> None:
    """pid 1 of the namespace: reap every orphan, forever (its death would end the namespace)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
    while True:
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            pass
        signal.sigwait({signal.SIGCHLD})


def _write(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass
