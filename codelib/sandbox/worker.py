"""The worker: a fork server that confines itself once, then forks one program (and one judge) per run.

Started by the pool as `python -I -S -B worker.py --serve CONFIG` (a fresh interpreter, never a fork of the training
process) with a scrubbed environment and one unix socket to the parent. Standard library only.

Once, at start: new mount, network, IPC and pid namespaces (as root; otherwise inside a user namespace of its own,
where it is root over nothing but itself), an allow-list root (`isolation.build_root`, then chroot), a memory and
pids cgroup (v2 or v1), an init process for the pid namespace, and a seccomp filter prepared for the children.

Per run: a child for the program: a new session, a fresh mount namespace whose /tmp is an empty tmpfs (its working
directory, gone with it), limits, its own uid (root) or no capabilities (user namespace), no new privileges, the
seccomp filter; then the harness. For a function task also a judge child (its own uid, not dumpable) that reads
the tests from a pipe only the parent writes and reports on a pipe only the parent reads: this process never holds
a test, an expected value or a verdict, so neither does any program forked from it. After the run, every process
the program left is killed and reaped before the next run starts.
"""

from __future__ import annotations

import json
import math
import os
import resource
import selectors
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

from hashlib import sha256  # noqa: E402 - imported once by each worker, not by every program it forks

from . import harness, isolation, judge  # noqa: E402
from .isolation import PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS, PR_SET_PDEATHSIG, prctl  # noqa: E402

UID_BASE = 1_500_000_000  # program uid = base + 2 * worker pid, judge uid = that + 1: owned by no user
ROOT = "/tmp/codelib-root"  # where the allow-list root is built, in the worker's own mount namespace
REPORT_CAP_BYTES = 64 << 20  # an inside report (verdict + plus outputs) beyond this is an error, not a verdict
# The stdlib modules that HumanEval, MBPP and CodeContests programs import most: imported once in the worker, free
# for every program (each forked program pays for the worker's size, so the list stays short).
PREIMPORT = "array bisect cmath collections copy functools heapq itertools math operator queue random re string typing"


class Server:
    """The worker process: isolate itself once, then serve runs."""

    def __init__(self, config: dict):
        self.config = config
        self.sock = socket.socket(fileno=int(config["fd"]))
        self.missing: dict[str, str] = {}
        self.uid = self.judge_uid = None
        self.cgroups: list[str] = []
        self.cgroup_fds: list[int] = []
        self.chrooted = self.fresh_tmp = self.proc = False
        self.nproc = int(config["max_procs"])
        self.counter = 0
        self.judge = self.judge_pid = None
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1):
            os.dup2(devnull, fd)
        os.close(devnull)
        for name in PREIMPORT.split():
            __import__(name)
        self.seccomp = isolation.seccomp_program()
        if self.seccomp is None:
            self.missing["seccomp"] = "no system-call filter for this architecture"
        self._isolate()
        import gc

        gc.freeze()  # children's collections then skip the worker's objects instead of touching (copying) their pages

    # -- one-time isolation

    def _isolate(self) -> None:
        root = os.geteuid() == 0 and not self.config.get("unprivileged")
        ns = isolation.CLONE_NEWNS | isolation.CLONE_NEWNET | isolation.CLONE_NEWIPC | isolation.CLONE_NEWPID
        uid, gid = os.getuid(), os.getgid()
        try:
            if not self.config.get("namespaces", True):
                raise OSError(1, "turned off (Sandbox(namespaces=False))")
            isolation.unshare(ns if root else ns | isolation.CLONE_NEWUSER)
            if not root:
                isolation.map_user(uid, gid)
        except OSError as e:
            self.missing["namespaces"] = (f"no {'user ' if not root else ''}namespaces ({e.strerror}): programs see "
                                          "the host's files, processes and network")  # fmt: skip
            return self._fallback(root)
        if root:
            self.uid, self.judge_uid = UID_BASE + 2 * os.getpid(), UID_BASE + 2 * os.getpid() + 1
        else:
            self.missing["uid"] = ("not root: programs and the judge share the caller's uid (in a user namespace, "
                                   "without capabilities; the judge is not dumpable)")  # fmt: skip
        memory = max(2 * int(self.config["memory_mb"]) + 256, int(self.config["plus_memory_mb"]) + 512) << 20
        try:
            self.cgroups, why = isolation.cgroups(f"codelib-sandbox-{os.getpid()}", memory,
                                                  int(self.config["max_procs"]) + 8)  # fmt: skip
            if why:
                self.missing["cgroup"] = f"no memory/pids cgroup ({why}): only rlimits bound a program's tree"
            self.cgroup_fds = [os.open(os.path.join(g, "cgroup.procs"), os.O_WRONLY) for g in self.cgroups]
        except OSError as e:
            self.missing["cgroup"] = f"no memory/pids cgroup ({e}): only rlimits bound a program's tree"
        isolation.mount(None, "/", None, isolation.MS_REC | isolation.MS_PRIVATE)
        os.makedirs(ROOT, 0o755, exist_ok=True)
        isolation.mount("tmpfs", ROOT, "tmpfs", isolation.MS_NOSUID | isolation.MS_NODEV, "size=16m,mode=755")
        paths = [sys.base_prefix, sys.prefix, sys.exec_prefix, sys.base_exec_prefix]
        paths += [os.path.dirname(os.path.realpath(sys.executable))] + list(self.config.get("site_packages", []))
        paths += [p for p in sys.path if p.startswith("/") and "site-packages" not in p and "codelib" not in p]
        isolation.build_root(ROOT, paths)
        self._start_init()
        isolation.mount(None, ROOT, None, isolation.MS_REMOUNT | isolation.MS_RDONLY | isolation.MS_NOSUID
                        | isolation.MS_NODEV)  # fmt: skip
        os.chroot(ROOT)
        os.chdir("/")
        self.chrooted = self.fresh_tmp = True
        if self.uid is not None and not self._uid_runs_python():
            self.missing["uid"] = "the interpreter is not readable by another uid here: programs run as root"
            self.uid = self.judge_uid = None
        if self.uid is None:
            # RLIMIT_NPROC counts a uid's processes per user namespace (Linux >= 5.14): ours holds the worker, its
            # init and a judge at most, besides the program's tree
            self.nproc = int(self.config["max_procs"]) + 4
        self._fresh_tmp()
        if self.seccomp is not None:  # once, here: every child inherits it for free (none needs what it denies)
            prctl(PR_SET_NO_NEW_PRIVS, 1)
            isolation.install_seccomp(self.seccomp)

    def _fresh_tmp(self) -> None:
        """An empty tmpfs on /tmp, owned by the program's uid: each run's working directory. After a run that left
        anything there, it is unmounted whole (however deep a nest, whatever its modes) and a new one mounted."""
        owner = f",uid={self.uid},gid={self.uid}" if self.uid is not None else ""
        isolation.mount("tmpfs", "/tmp", "tmpfs", isolation.MS_NOSUID | isolation.MS_NODEV,
                        f"size={int(self.config['tmpfs_mb'])}m,mode=700{owner}")  # fmt: skip
        self.tmp_clean = self._tmp_state()

    @staticmethod
    def _tmp_state() -> tuple:
        # free inodes and blocks, and the root's change time: any file, link or directory a run made (even removed
        # again), and any chmod, utime or xattr on /tmp itself (bits a run could leave for the next), changes it
        fs, st = os.statvfs("/tmp"), os.stat("/tmp")
        return fs.f_ffree, fs.f_bfree, st.st_ctime_ns, st.st_mtime_ns

    def _tmp_dirty(self) -> bool:
        return self._tmp_state() != self.tmp_clean

    def _start_init(self) -> None:
        """Fork pid 1 of the new pid namespace: it mounts /proc for that namespace, then reaps orphans forever."""
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(r)
                prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
                try:
                    isolation.mount("proc", ROOT + "/proc", "proc", isolation.MS_NOSUID | isolation.MS_NODEV
                                    | isolation.MS_NOEXEC, "hidepid=2")  # fmt: skip
                    os.write(w, b"p")
                except OSError as e:
                    os.write(w, f"e{e.strerror}".encode())
                os.close(w)
                os.chroot(ROOT)
                os.chdir("/")
                _reap_forever()
            finally:
                os._exit(0)
        os.close(w)
        answer = os.read(r, 200).decode()
        os.close(r)
        self.init_pid = pid
        self.proc = answer == "p"
        if not self.proc:
            self.missing["proc"] = f"no /proc for the pid namespace ({answer[1:]}): programs see no /proc"

    def _uid_runs_python(self) -> bool:
        pid = os.fork()
        if pid == 0:
            try:
                os.setgroups([])
                os.setresgid(self.uid, self.uid, self.uid)
                os.setresuid(self.uid, self.uid, self.uid)
                os.listdir(os.path.dirname(os.__file__))
                os.listdir(os.path.dirname(json.__file__))
                os._exit(0)
            except BaseException:
                os._exit(1)
        return os.waitpid(pid, 0)[1] == 0

    def _fallback(self, root: bool) -> None:
        """No namespaces: programs run in a private directory as the caller (or a uid of their own, as root)."""
        import tempfile

        self.private = tempfile.mkdtemp(prefix="codelib-sandbox-")
        self.uid = self.judge_uid = None
        self.nproc = sum(1 for p in os.listdir("/proc") if p.isdigit()) + int(self.config["max_procs"]) + 256
        self.missing["filesystem"] = "no private root: programs can read the host's files and write to /tmp"

    # -- protocol

    def serve(self) -> None:
        caps = dict(uid=self.uid, judge_uid=self.judge_uid, pid=os.getpid(), cgroups=self.cgroups,
                    missing=self.missing, chroot=self.chrooted, fresh_tmp=self.fresh_tmp, proc=self.proc,
                    init_pid=getattr(self, "init_pid", None), root=ROOT if self.chrooted else self.private,
                    seccomp=self.seccomp is not None and self.chrooted)  # fmt: skip
        self._send(caps)
        while True:
            request, fds = self._recv()
            if request is None:
                break
            try:
                reply = self.handle(request, fds)
            except Exception as e:  # a sandbox bug must not look like a verdict on the program
                reply = dict(status="error", detail=f"sandbox internal error: {type(e).__name__}: {e}"[:300])
            self._send(reply)

    def _recv(self) -> tuple[dict | None, list[int]]:
        head, fds = b"", []
        while len(head) < 8:
            data, got, _, _ = socket.recv_fds(self.sock, 8 - len(head), 4)
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
        try:
            if len(named) != len(fds) or "program" not in named:
                return dict(status="error", detail="sandbox internal error: a request without its files")
            if req["kind"] == "function":
                return self._function(req, named)
            return self._inside(req, named)
        except BaseException:
            self._kill_leftovers()  # a run that failed half-way: _watch did not get to it
            raise
        finally:
            for fd in named.values():
                _close(fd)  # before the reply: the parent reads the judge's result pipe until every writer is gone
            if not self.chrooted:
                _remove_tree(os.path.join(self.private, f"run{self.counter}"))
            elif self._tmp_dirty():  # every process of the run is dead: nothing holds the old tmpfs
                isolation.call("umount2", b"/tmp", 2)  # MNT_DETACH
                self._fresh_tmp()

    def _function(self, req: dict, named: dict) -> dict:
        """The program serves calls; the judge runs the tests against it (spec and result: the parent's pipes)."""
        if self.judge is None:
            self._start_judge()
        ours, theirs = socket.socketpair()
        try:
            socket.send_fds(self.judge, [b"r"], [named["spec"], named["result"], theirs.fileno()])
        except OSError:
            self._stop_judge()
            return dict(status="error", detail="sandbox internal error: the judge is gone")
        finally:
            theirs.close()
            _close(named.pop("spec"))
            _close(named.pop("result"))  # the judge holds the only writer: EOF for the parent when it is done
        pipes = [os.pipe(), os.pipe()]
        pid = os.fork()
        if pid == 0:
            _child(self, req, named, pipes, {harness.CALL_FD: ours.fileno()}, "serve")
        ours.close()
        watch = _watch(self, pid, self.judge, pipes, float(req["timeout_s"]), int(req["cap"]))
        if not watch["judge_done"]:
            self._stop_judge()  # stuck, or killed: the next run gets a fresh one
        return dict(kind="function", duration_s=watch["duration"], stdout=watch["stdout"], stderr=watch["stderr"],
                    timed_out=watch["timed_out"], overflow=watch["overflow"], ended=_ended(watch["status"]),
                    judge_ended={} if watch["judge_done"] else {"signal": signal.SIGKILL})  # fmt: skip

    def _start_judge(self) -> None:
        """Fork the judge server: a process of its own uid, not dumpable, that never runs a program. It is forked
        from this process, which never holds a test, so it starts clean; it takes one run at a time."""
        ours, theirs = socket.socketpair()
        pid = os.fork()
        if pid == 0:
            ours.close()
            _judge_server(self, theirs.fileno())
        theirs.close()
        self.judge, self.judge_pid = ours, pid
        self.judge_inner = ours.recv(32).decode()

    def _stop_judge(self) -> None:
        if self.judge is None:
            return
        try:
            os.kill(self.judge_pid, signal.SIGKILL)
        except OSError:
            pass
        os.waitpid(self.judge_pid, 0)
        self.judge.close()
        self.judge = self.judge_pid = None

    def _inside(self, req: dict, named: dict) -> dict:
        token = os.urandom(16).hex().encode()
        pipes = [os.pipe(), os.pipe(), os.pipe()]  # stdout, stderr, report
        stdio = req["kind"] == "stdio"
        pid = os.fork()
        if pid == 0:
            extra = {harness.REPORT_FD: pipes[2][1]}
            _child(self, dict(req, token=token), named, pipes, extra, "stdio" if stdio else "inside")
        watch = _watch(self, pid, None, pipes, float(req["timeout_s"]), int(req["cap"]))
        report = watch["report"]
        cap = REPORT_CAP_BYTES if watch["report_overflow"] else int(req["cap"])
        result = _judge_report(report, token, watch["status"], watch["timed_out"], watch["overflow"], cap,
                               watch["stderr"], stdio)  # fmt: skip
        reply = dict(status=result["status"], detail=result["detail"], duration_s=watch["duration"],
                     stdout=watch["stdout"], tests_passed=result["passed"], tests_total=result["total"],
                     done=result["done"])  # fmt: skip
        if result.get("outputs") is not None:
            reply["outputs"] = result["outputs"]
        return reply

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
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:  # our own children (the program, the judge, a killer)
                pass
        except ChildProcessError:
            pass
        if self.chrooted and self.proc:
            keep = ("1", self.judge_inner if self.judge is not None else "1")  # init and the judge server
            return any(p.isdigit() and p not in keep for p in os.listdir("/proc"))
        if self.chrooted:
            return True  # nothing to look at: one sweep (it is cheap) each run
        return bool(_descendants(os.getpid()))

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
            if self.uid is None:
                self._stop_judge()
            return
        if self.chrooted:  # one uid for all (user namespace): every process of the namespace but init and the judge
            keep = ("1", self.judge_inner if self.judge is not None else "1")
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
        for pid in _descendants(os.getpid()):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def _remove_tree(top: str) -> None:
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


def _reap_forever() -> None:
    """pid 1 of the namespace: reap every orphan, forever (its death would end the namespace)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
    while True:
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            pass
        signal.sigwait({signal.SIGCHLD})


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def _ended(wstatus: int | None) -> dict:
    if wstatus is None:
        return {}
    if os.WIFSIGNALED(wstatus):
        return {"signal": os.WTERMSIG(wstatus)}
    return {"exit": os.WEXITSTATUS(wstatus)}


# ---------------------------------------------------------------------------------------------------------------
# watching a run


def _watch(server: Server, pid: int, judge, pipes: list, timeout: float, cap: int) -> dict:
    """Wait for the program to exit (and the judge to say it is done), collecting output; kill the program at the
    deadline or on an output overflow."""
    for _, w in pipes:
        os.close(w)
    reads = [r for r, _ in pipes]
    bufs = {fd: bytearray() for fd in reads}
    start = time.monotonic()
    deadline = start + timeout
    status = None
    judge_done = judge is None
    timed_out = overflow = report_overflow = False
    pidfd = os.pidfd_open(pid)
    with selectors.DefaultSelector() as sel:
        sel.register(pidfd, selectors.EVENT_READ, "pid")
        if judge is not None:
            sel.register(judge, selectors.EVENT_READ, "judge")
        for fd in reads:
            sel.register(fd, selectors.EVENT_READ, fd)
        while status is None or not judge_done:
            now = time.monotonic()
            if judge is not None and judge_done and status is None:
                deadline = min(deadline, now + 0.5)  # the judge is done: the program gets EOF and exits at once
            left = deadline - now
            if left <= 0:
                timed_out = (not judge_done) if judge is not None else status is None
                break
            for key, _ in sel.select(left):
                if key.data == "pid":
                    status = os.waitpid(pid, 0)[1]
                    sel.unregister(pidfd)
                elif key.data == "judge":
                    judge_done = True  # b"d" when it finished; EOF if it died (its result pipe says the rest)
                    judge.recv(16)
                    sel.unregister(judge)
                else:
                    chunk = os.read(key.data, 1 << 16)
                    if chunk:
                        bufs[key.data] += chunk
                    else:
                        sel.unregister(key.data)
            if len(bufs[reads[0]]) + len(bufs[reads[1]]) > cap:
                overflow = True
                break
            if len(reads) > 2 and len(bufs[reads[2]]) > REPORT_CAP_BYTES:
                overflow = report_overflow = True
                break
    os.close(pidfd)
    if status is None:
        os.kill(pid, signal.SIGKILL)
        status = os.waitpid(pid, 0)[1]
    duration = time.monotonic() - start
    server._kill_leftovers()  # every writer is dead now: read what is left, then EOF
    for fd in reads:
        os.set_blocking(fd, False)
        try:
            while len(bufs[fd]) <= cap + 65536 and (chunk := os.read(fd, 1 << 16)):
                bufs[fd] += chunk
        except BlockingIOError:
            pass
        os.close(fd)
    return dict(status=status, judge_done=judge_done, timed_out=timed_out, overflow=overflow,
                report_overflow=report_overflow, duration=duration,
                stdout=bytes(bufs[reads[0]][:cap]).decode("utf-8", "replace"),
                stderr=bytes(bufs[reads[1]][-4096:]).decode("utf-8", "replace"),
                report=bytes(bufs[reads[2]]) if len(reads) > 2 else b"")  # fmt: skip


def _descendants(pid: int) -> list[int]:
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


# ---------------------------------------------------------------------------------------------------------------
# the children


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


def _confine(server: Server, uid: int | None) -> None:
    """The last steps of every child: its uid (or no capabilities), no new privileges, the system-call filter."""
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    elif server.chrooted:
        isolation.drop_capabilities()  # in a user namespace the worker is root there: its children must not be
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    prctl(PR_SET_NO_NEW_PRIVS, 1)  # the seccomp filter is the worker's, inherited


def _child(server: Server, req: dict, named: dict, pipes, extra: dict, mode: str):
    """The forked program child: confine itself, then run the harness. Never returns."""
    try:
        os.setsid()
        for fd in server.cgroup_fds:
            os.write(fd, b"0")
        chunks = []
        while chunk := os.read(named["program"], 1 << 20):
            chunks.append(chunk)
        req["program"] = b"".join(chunks).decode("utf-8", "surrogatepass")
        os.dup2(named["stdin"] if "stdin" in named else os.open(os.devnull, os.O_RDONLY), 0)
        os.dup2(pipes[0][1], 1)
        os.dup2(pipes[1][1], 2)
        for target, source in extra.items():
            os.dup2(source, target, inheritable=False)
        os.closerange(3, harness.REPORT_FD)
        os.closerange(harness.CALL_FD + 1, 1 << 16)
        for target in (harness.REPORT_FD, harness.CALL_FD):
            if target not in extra:
                _close(target)
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


def _judge_server(server: Server, sock_fd: int):
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
        _confine(server, server.judge_uid)
        prctl(PR_SET_DUMPABLE, 0)  # after the uid change, which resets it: no ptrace, no /proc/<pid>/mem
        judge.serve(3)
    except BaseException:
        pass
    os._exit(70)


# ---------------------------------------------------------------------------------------------------------------
# the verdict of an inside run, from the harness's report (if it has the token) and how the process ended


_SIGNAMES = {getattr(signal, n): n for n in dir(signal) if n.startswith("SIG") and not n.startswith("SIG_")}


def _judge_report(report: bytes, token: bytes, wstatus: int, timed_out: bool, overflow: bool, cap: int, err: str,
                  stdio: bool) -> dict:  # fmt: skip
    at = report.find(token)
    progress = report[: at if at >= 0 else len(report)]
    passed, failed = progress.count(b"+"), progress.count(b"-")
    static_total = 0
    if progress.startswith(b"=") and b";" in progress:
        head = progress[1 : progress.index(b";")]
        static_total = int(head) if head.isdigit() and len(head) < 9 else 0
    res = None
    if at >= 0:
        try:
            res = json.loads(report[at + len(token) :].split(b"\n", 1)[0])
        except ValueError:
            res = None
        if type(res) is not dict:
            res = None
    out = dict(status="error", detail="", passed=passed, total=max(static_total, passed + failed, 1), done=False)
    if res is not None:
        total = res.get("total")
        out["total"] = total if type(total) is int and 0 < total < 1 << 30 else out["total"]
        if not res.get("counted"):
            out["passed"] = 1 if res.get("done") is True and not res.get("first") else 0
        if res.get("outputs") is not None:
            out["outputs"] = res["outputs"]
    signum = os.WTERMSIG(wstatus) if os.WIFSIGNALED(wstatus) else 0
    first = res.get("first") if res is not None and type(res.get("first")) is str else None
    if timed_out:
        out.update(status="timeout", detail="wall-time limit exceeded")
    elif overflow:
        out.update(status="error", detail=f"output limit exceeded ({cap} bytes)")
    elif res is not None and res.get("done") is True:
        out["done"] = True
        if first:
            out.update(status="failed", detail=first)
        elif res.get("counted") and passed < out["total"]:  # e.g. the harness's helpers were tampered with
            out.update(status="failed", detail=f"only {passed} of {out['total']} asserts reported passing")
        else:
            out.update(status="passed")
    elif res is not None and "exit" in res:
        code = res["exit"]
        if stdio and code in (None, 0):
            out.update(status="passed", done=True)
        elif stdio:
            out.update(detail=f"exit status {str(code)[:40]}")
        else:
            out.update(detail=f"exited before the tests finished: SystemExit({str(code)[:40]})")
    elif res is not None and "exc" in res:
        exc = str(res["exc"])[:300]
        if first:
            out.update(status="failed", detail=first)
        else:
            out.update(status="failed" if res.get("exc_type") == "AssertionError" else "error", detail=exc)
    elif signum == signal.SIGXCPU:
        out.update(status="timeout", detail="CPU-time limit exceeded")
    elif signum:
        out.update(detail=f"killed by {_SIGNAMES.get(signum, signum)}")
    elif stdio and os.WIFEXITED(wstatus) and os.WEXITSTATUS(wstatus) in (0, harness.EXIT_NO_CHANNEL):
        out.update(status="passed", done=True)  # a judge only asks for exit status 0 (os._exit(0) is common)
    elif os.WIFEXITED(wstatus) and os.WEXITSTATUS(wstatus) == harness.EXIT_NO_CHANNEL:
        out.update(detail="the program closed or broke the harness's report channel")
    elif os.WIFEXITED(wstatus):
        last = err.strip().splitlines()[-1][:200] if err.strip() else ""
        tail = f" ({last})" if last else ""
        out.update(detail=f"exited with status {os.WEXITSTATUS(wstatus)} before the harness reported{tail}")
    if out["status"] != "passed":
        out["passed"] = min(out["passed"], out["total"])
    return out


def main(config: dict) -> None:
    import site  # started with -S: add what site would, minus the .pth hooks (exit(), quit(), help(), site-packages)

    site.setquit()
    site.setcopyright()
    site.sethelper()
    sys.path += [p for p in config.get("site_packages", []) if p not in sys.path]
    server = Server(config)
    server.serve()
