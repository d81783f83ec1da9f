"""The worker: a fork server that confines itself once, then forks one program (and one judge) per run.

Started by the pool as `python -I -S -B worker.py --serve CONFIG` (a fresh interpreter, never a fork of the training
process) with a scrubbed environment and one unix socket to the parent. Standard library only.

Once, at start (`confinement.isolate`): new mount, network, IPC and pid namespaces (as root; otherwise inside a
user namespace of its own, where it is root over nothing but itself), an allow-list root (`isolation.build_root`,
then chroot), a memory and pids cgroup (v2 or v1) that the worker joins (so every process it forks starts there), an
init process for the pid namespace, and a seccomp filter that every child inherits.

Per run (`handle`): a program child (`spawn.program`: a new session, /tmp as its working directory, an empty tmpfs
replaced after any run that leaves something in it, limits, its own uid (root) or no capabilities (user namespace),
no new privileges; then the harness). A function task is judged by the judge server (`spawn.judge_server`: its own
uid, not dumpable, long-lived) that reads the tests from a pipe only the parent writes and reports on a pipe only
the parent reads: this process never holds a test, an expected value or a verdict, so neither does any program
forked from it. `watch.run` waits for the run; every process the program left is killed and reaped before the next
run starts.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import sys
import time

if __name__ == "__main__":  # started as a script by the pool: load this file again as a module of its package
    import types

    _pkg = types.ModuleType("_codelib_sandbox")
    _pkg.__path__ = [os.path.dirname(os.path.abspath(__file__))]
    sys.modules["_codelib_sandbox"] = _pkg
    from _codelib_sandbox import worker as _self

    _self.main(json.loads(sys.argv[2]))
    sys.exit(0)

from . import confinement, harness, isolation, spawn, watch  # noqa: E402
from .confinement import ROOT, UID_BASE  # noqa: E402, F401 - UID_BASE: importable from here
from .spawn import close as _close  # noqa: E402

# The stdlib modules that HumanEval, MBPP and CodeContests programs import most: imported once in the worker, free
# for every program (each forked program pays for the worker's size, so the list stays short).
# Not random (its state would repeat in every child unless reseeded) nor queue (it brings threading): each costs a
# program that imports it ~1 ms, and every run the worker's size.
PREIMPORT = "array bisect cmath collections copy functools heapq itertools math operator re string typing"


class Server:
    """The worker process: isolate itself once, then serve runs."""

    def __init__(self, config: dict):
        self.config = config
        self.sock = socket.socket(fileno=int(config["fd"]))
        self.missing: dict[str, str] = {}
        self.uid = self.judge_uid = None
        self.cgroups: list[str] = []
        self.chrooted = self.fresh_tmp = self.proc = False
        self.nproc = int(config["max_procs"])
        self.counter = 0
        self.judge = self.judge_pidfd = self.factory = None
        self.init_pid = self.factory_pid = None
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1):
            os.dup2(devnull, fd)
        os.close(devnull)
        for name in PREIMPORT.split():
            __import__(name)
        from . import plus  # noqa: F401 - the judge's EvalPlus rules, loaded before the chroot hides this directory

        try:  # the judge's value comparators (the same)
            from . import compare  # noqa: F401
        except ImportError:
            pass
        self.seccomp = isolation.seccomp_program()
        if self.seccomp is None:
            self.missing["seccomp"] = "no system-call filter for this architecture"
        confinement.isolate(self)
        import gc

        gc.freeze()  # children's collections then skip the worker's objects instead of touching (copying) their pages

    # -- protocol

    def serve(self) -> None:
        caps = dict(
            uid=self.uid,
            judge_uid=self.judge_uid,
            pid=os.getpid(),
            cgroups=self.cgroups,
            missing=self.missing,
            chroot=self.chrooted,
            fresh_tmp=self.fresh_tmp,
            proc=self.proc,
            init_pid=self.init_pid,
            factory_pid=self.factory_pid,
            root=ROOT if self.chrooted else self.private,
            seccomp=self.seccomp is not None and self.chrooted,
        )
        self._send(caps)
        while True:
            request, fds = self._recv()
            if request is None:
                break
            try:
                reply = self.handle(request, fds)
            except Exception as e:  # a sandbox bug must not look like a verdict on the program
                reply = dict(status="error", detail=f"sandbox internal error: {type(e).__name__}: {e}"[:300])
            if not self.healthy():
                reply["retire"] = True  # the pool replaces this worker before its next job
            self._send(reply)

    def _recv(self) -> tuple[dict | None, list[int]]:
        head, fds = b"", []
        while len(head) < 8:
            data, got, _, _ = socket.recv_fds(self.sock, 8 - len(head), 16)
            fds += got
            if not data:
                return None, fds
            head += data
        (n,) = harness.wire.FRAME.unpack(head)
        body = bytearray()
        while len(body) < n:
            chunk = self.sock.recv(min(n - len(body), 1 << 20))
            if not chunk:
                return None, fds
            body += chunk
        return json.loads(body), fds

    def _send(self, reply: dict) -> None:
        self.sock.sendall(harness.wire.frame(reply))

    # -- runs

    def handle(self, req: dict, fds: list[int]) -> dict:
        """One run. The program, its stdin and the judge's pipes come as file descriptors this process never reads."""
        self.counter += 1
        named = dict(zip(req.get("fds", []), fds, strict=False))
        if not self.healthy():  # something outside killed init or the factory since the last run: run nowhere
            for fd in fds:
                _close(fd)
            return dict(retire=True, unrun=True)
        try:
            if len(named) != len(fds) or "program" not in named:
                return dict(status="error", detail="sandbox internal error: a request without its files")
            if req["kind"] == "function":
                return self._function(req, named)
            return self._inside(req, named)
        except BaseException:
            self._kill_leftovers()  # a run that failed half-way: watch.run did not get to it
            raise
        finally:
            for fd in named.values():
                _close(fd)  # before the reply: the parent reads the judge's result pipe until every writer is gone
            if not self.chrooted:
                isolation.remove_tree(os.path.join(self.private, f"run{self.counter}"))
            elif confinement.tmp_dirty(self):  # every process of the run is dead: nothing holds the old tmpfs
                isolation.call("umount2", b"/tmp", 2)  # MNT_DETACH
                confinement.mount_tmp(self)

    def _function(self, req: dict, named: dict) -> dict:
        """The program serves calls; the judge runs the tests against it (spec and result: the parent's pipes)."""
        ours, theirs = socket.socketpair()
        try:
            for attempt in (0, 1):  # a judge that died since the last run is replaced before this one
                if not self._judge_alive():
                    self._stop_judge()
                    self._start_judge()
                try:
                    socket.send_fds(self.judge, [b"r"], [named["spec"], named["result"], theirs.fileno()])
                    break
                except OSError:
                    self._stop_judge()
                    if attempt:
                        raise
        finally:
            theirs.close()
            _close(named.pop("spec"))
            _close(named.pop("result"))  # the judge holds the only writer: EOF for the parent when it is done
        pid = os.fork()
        if pid == 0:
            spawn.program(self, req, named, {harness.CALL_FD: ours.fileno()}, "serve")
        ours.close()
        self._close_outputs(named)
        seen = watch.run(self, pid, self.judge, named.get("kill"), float(req["timeout_s"]))
        if not seen["judge_done"] and select.select([self.judge], [], [], 1.0)[0]:
            # the program is dead (killed at its deadline): the judge saw EOF and reports what passed until then
            seen["judge_done"] = self.judge.recv(16) == b"d"
        if not seen["judge_done"]:
            self._stop_judge()  # stuck, or killed: the next run gets a fresh one
        return dict(
            kind="function",
            duration_s=seen["duration"],
            wstatus=seen["status"],
            timed_out=seen["timed_out"],
            ended=watch.ended(seen["status"]),
            judge_ended={} if seen["judge_done"] else {"signal": signal.SIGKILL},
        )

    def _start_factory(self, root: str | None) -> None:
        """Fork the judge factory, before the pid namespace: it (chrooted to the programs' root) forks each judge
        server on request, so every judge lives in this process's pid namespace, out of the programs' reach."""
        ours, theirs = socket.socketpair()
        pid = os.fork()
        if pid == 0:
            ours.close()
            spawn.judge_factory(self, theirs.fileno(), root)
        theirs.close()
        self.factory, self.factory_pid = ours, pid

    def _start_judge(self) -> None:
        """A judge server from the factory: a process of its own uid (root) or of a pid namespace the programs
        cannot name, not dumpable, that never runs a program; it takes one run at a time. Its socket and a pidfd
        come back: the pidfd tells when it died and kills it, whatever pid it had."""
        self.factory.sendall(b"-" if self.judge_uid is None else str(self.judge_uid).encode())
        _, fds, _, _ = socket.recv_fds(self.factory, 16, 2)
        if len(fds) != 2:
            for fd in fds:
                _close(fd)
            raise OSError("the judge factory is gone")
        self.judge, self.judge_pidfd = socket.socket(fileno=fds[0]), fds[1]
        self.judge.recv(32)  # its pid: it started

    def _judge_alive(self) -> bool:
        """Whether the judge server is alive and idle: its pidfd not readable (it has not exited) and nothing on its
        socket (an idle judge sends nothing; EOF means it died)."""
        if self.judge is None:
            return False
        try:
            return not select.select([self.judge, self.judge_pidfd], [], [], 0)[0]
        except (OSError, ValueError):
            return False

    def _stop_judge(self) -> None:
        """Kill and forget the judge server, whatever state it is in (the next function run starts a fresh one)."""
        judge, pidfd = self.judge, self.judge_pidfd
        self.judge = self.judge_pidfd = None
        if pidfd is not None:
            try:
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            except OSError:
                pass
            _close(pidfd)
        if judge is not None:
            try:
                judge.close()
            except OSError:
                pass

    def healthy(self) -> bool:
        """Whether this worker can serve the next run: its pid namespace's init and the judge factory alive (a run
        could not end the namespace or the factory; this catches what else might)."""
        for pid in (self.init_pid, self.factory_pid):
            if pid is None:
                continue
            try:
                if os.waitpid(pid, os.WNOHANG)[0] != 0:
                    return False
            except ChildProcessError:
                return False
        return True

    def _inside(self, req: dict, named: dict) -> dict:
        """A whole program in one process; its report goes to the parent, which gives the verdict (token first)."""
        stdio = req["kind"] == "stdio"
        token = str(req.pop("token", "")).encode()
        pid = os.fork()
        if pid == 0:
            extra = {harness.REPORT_FD: named["report"]}
            spawn.program(self, dict(req, token=token), named, extra, "stdio" if stdio else "inside")
        self._close_outputs(named)
        seen = watch.run(self, pid, None, named.get("kill"), float(req["timeout_s"]))
        return dict(
            kind=req["kind"],
            duration_s=seen["duration"],
            wstatus=seen["status"],
            timed_out=seen["timed_out"],
            killed=seen["killed"],
        )

    @staticmethod
    def _close_outputs(named: dict) -> None:
        """This process's copies of the program's files, closed once it is forked: the parent sees EOF on the
        outputs when the program's last process is gone, and nothing of them passes through here."""
        for name in ("stdout", "stderr", "report", "tamper", "program", "stdin"):
            if name in named:
                _close(named.pop(name))

    def _kill_leftovers(self) -> None:
        """Kill every process the program left and wait until they are gone: the next run starts with none."""
        deadline = time.monotonic() + 5.0
        while True:
            left = self._leftovers()
            if not left:
                return
            self._kill_all()
            if time.monotonic() > deadline:
                return
            time.sleep(0.001)

    def _leftovers(self) -> bool:
        # no waitpid(-1): this process waits only for the pids it knows (a program, a killer); orphans go to init
        if self.chrooted and self.proc:  # the judges live above this pid namespace: only init may remain
            return any(p.isdigit() and p != "1" for p in os.listdir("/proc"))
        if self.chrooted:
            return True  # nothing to look at: one sweep (it is cheap) each run
        return bool(self._descendants())

    def _descendants(self) -> list[int]:
        """The fallback without namespaces: this process's descendants but the judge factory and its judges."""
        keep = {self.factory_pid, *isolation.descendants(self.factory_pid)} if self.factory_pid else set()
        return [p for p in isolation.descendants(os.getpid()) if p not in keep]

    def _kill_all(self) -> None:
        if self.chrooted and (self.uid is not None or not self.proc):
            # as the program's uid, in the pid namespace: kill(-1) reaches exactly the programs' processes, at once
            # (not init, not the judge: other uids). Without /proc to tell them apart, the judge goes too.
            pid = os.fork()
            if pid == 0:
                try:
                    if self.uid is not None:
                        os.setresgid(self.uid, self.uid, self.uid)
                        os.setresuid(self.uid, self.uid, self.uid)
                    os.kill(-1, signal.SIGKILL)
                finally:
                    os._exit(0)
            os.waitpid(pid, 0)
            return
        if self.chrooted:  # one uid for all (user namespace): every process of the namespace but init
            keep = ("1",)
            pid = os.fork()  # in the namespace, where /proc's numbers are the ones kill() takes
            if pid == 0:
                try:
                    me = str(os.getpid())
                    for p in os.listdir("/proc"):
                        if p.isdigit() and p not in keep and p != me:
                            try:
                                os.kill(int(p), signal.SIGKILL)
                            except OSError:
                                pass
                finally:
                    os._exit(0)
            os.waitpid(pid, 0)
            return
        for pid in self._descendants():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def main(config: dict) -> None:
    import site  # started with -S: add what site would, minus the .pth hooks (exit(), quit(), help(), site-packages)

    site.setquit()
    site.setcopyright()
    site.sethelper()
    sys.path += [p for p in config.get("site_packages", []) if p not in sys.path]
    server = Server(config)
    server.serve()
