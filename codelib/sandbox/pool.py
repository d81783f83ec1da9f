"""The pool (parent side): warm workers, the event loop that keeps them busy, and the shared pool.

Each worker is a fresh interpreter (`worker.py`) on one unix socket. A function job travels in three parts: the
program (prompt + completion) to the worker; the tests to the judge, through a pipe the parent writes and passes to
the worker as a file descriptor it never reads; the judge's result back through a second such pipe. A stdio job is
run case by case, each output compared here, and the worker never sees an expected output.
"""

from __future__ import annotations

import collections
import json
import os
import selectors
import signal
import socket
import sys
import threading
import time
import warnings

from . import jobs as J
from . import wire

DEFAULT_TIMEOUT_S = 5.0  # wall-time limit per program (per test case for stdio tasks)
DEFAULT_MEMORY_MB = 1024  # address-space limit per process
_WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "worker.py")


class SandboxError(RuntimeError):
    """The sandbox itself failed (a worker that cannot start), not the program under test."""


_WARNED = False


def _warn_once(caps: dict) -> None:
    global _WARNED
    if caps.get("missing") and not _WARNED:
        _WARNED = True
        why = "; ".join(f"{k}: {v}" for k, v in caps["missing"].items())
        warnings.warn(f"codelib.sandbox runs with weaker isolation here ({why})", RuntimeWarning, stacklevel=3)


class Sandbox:
    """A pool of warm fork-server workers; `map(jobs)` judges jobs in parallel, order kept.

    with Sandbox(workers=4, timeout_s=3) as box:
        verdicts = box.map(["assert 1 == 1", Job("print(input())", kind="stdio", cases=(...))])

    A worker that dies or stops answering is restarted; its job gets an `error` (or `timeout`) verdict and no
    other job is lost. `isolation` says what the workers enforce here ("missing": what they could not).
    """

    def __init__(
        self,
        workers: int | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        memory_mb: int = DEFAULT_MEMORY_MB,
        *,
        max_output_bytes: int = 1 << 20,  # stdout+stderr beyond this kills the program (stdio: 2x expected output)
        max_file_mb: int = 64,  # RLIMIT_FSIZE
        max_open_files: int = 128,  # RLIMIT_NOFILE
        max_procs: int = 64,  # processes + threads of one program's tree (RLIMIT_NPROC, and the pids cgroup)
        tmpfs_mb: int = 512,  # size of each run's fresh /tmp (its working directory)
        reference_timeout_s: float = J.REFERENCE_TIMEOUT_S,
        grace_s: float = 10.0,  # a worker silent this long past its job's limits is killed and replaced
        unprivileged: bool = False,  # behave as without root (user namespace, no uid switch): tests that path
        namespaces: bool = True,  # False: behave as a host without namespaces (tests the last fallback)
        hide: tuple = (),  # kept for compatibility: the program's root is an allow-list, nothing else is visible
    ):
        self.workers = int(workers or len(os.sched_getaffinity(0)))
        self.timeout_s, self.memory_mb = float(timeout_s), int(memory_mb)
        self.reference_timeout_s, self.grace_s = float(reference_timeout_s), float(grace_s)
        self.max_output_bytes = int(max_output_bytes)
        self._config = dict(
            # -S keeps the worker small (no .pth hooks); programs still import what the caller's env installed
            site_packages=[p for p in sys.path if p.endswith(("site-packages", "dist-packages"))],
            memory_mb=self.memory_mb,
            plus_memory_mb=J.PLUS_MEMORY_MB,
            max_file_mb=max_file_mb,
            max_open_files=max_open_files,
            max_procs=max_procs,
            tmpfs_mb=tmpfs_mb,
            unprivileged=bool(unprivileged),
            namespaces=bool(namespaces),
        )
        self._owner = os.getpid()
        self._lock = threading.Lock()
        self._closed = False
        self._pool: list[_Worker] = []
        try:
            self._pool = [_Worker(self._config) for _ in range(self.workers)]
            for w in self._pool:
                w.wait_ready()
        except BaseException:
            self.close()
            raise
        self.isolation = dict(self._pool[0].caps)
        _warn_once(self.isolation)

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        if not getattr(self, "_closed", True) and getattr(self, "_owner", None) == os.getpid():
            self.close()

    def close(self) -> None:
        """Stop the workers (and anything left of their programs)."""
        if self._closed:
            return
        self._closed = True
        for w in self._pool:
            w.stop()

    def worker_pids(self) -> list[int]:
        """Process ids of the worker servers (tests inspect them)."""
        return [w.proc.pid for w in self._pool]

    def map(self, jobs) -> list[J.Verdict]:
        """Judge jobs (str programs or `Job`s) in parallel; verdicts in the same order."""
        if self._closed:
            raise SandboxError("this Sandbox is closed; create a new one")
        jobs = [j if isinstance(j, J.Job) else J.Job(str(j)) for j in jobs]
        with self._lock:
            expected = self._references(jobs)
            runs = [J.Run(j, self, expected) for j in jobs]
            self._dispatch(runs)
        return [r.verdict() for r in runs]

    def _references(self, jobs: list) -> dict:
        """The reference outputs on plus inputs, computed once per (reference program, inputs)."""
        expected, todo = {}, {}
        for j in jobs:
            if j.reference is None or not j.plus_inputs:
                continue
            key = J.reference_key(j)
            if key in J.REFERENCE_CACHE:
                J.REFERENCE_CACHE.move_to_end(key)
                expected[key] = J.REFERENCE_CACHE[key]
            else:
                todo[key] = J.reference_job(j, self)
        if todo:
            runs = [J.Run(r, self, {}) for r in todo.values()]
            self._dispatch(runs)
            for key, run in zip(todo, runs, strict=True):
                outputs = run.outputs()
                if outputs is not None:
                    expected[key] = J.REFERENCE_CACHE[key] = (outputs, run.duration)
                else:
                    expected[key] = None  # not cached: a loaded machine may have timed it out
                while len(J.REFERENCE_CACHE) > 256:
                    J.REFERENCE_CACHE.popitem(last=False)
        return expected

    # -- the event loop: keep every worker busy, never wait on one that stopped answering

    def _dispatch(self, runs: list) -> None:
        queue = collections.deque(r for r in runs if not r.finished)
        sel = selectors.DefaultSelector()
        for w in self._pool:
            sel.register(w.sock, selectors.EVENT_READ, (w, "sock"))
        try:
            while queue or any(w.run is not None for w in self._pool):
                for w in self._pool:
                    if w.run is None and queue:
                        run = queue.popleft()
                        w.submit(run, run.next_step(), sel, self.grace_s)
                busy = [w for w in self._pool if w.run is not None]
                wait = max(0.0, min(w.deadline for w in busy) - time.monotonic()) if busy else 0.0
                for key, events in sel.select(wait):
                    w, what = key.data
                    if not any(w is x for x in self._pool) or w.run is None:
                        continue  # replaced earlier in this batch of events
                    try:
                        w.on_event(what, events, sel)
                    except (EOFError, OSError) as e:
                        self._replace(w, sel, dict(status="error", detail=f"sandbox worker died ({e})"))
                        continue
                    if w.complete():
                        run = w.finish(sel)
                        if not run.finished:
                            queue.appendleft(run)  # a stdio job's next case
                now = time.monotonic()
                for w in list(self._pool):
                    if w.run is not None and now > w.deadline:
                        self._replace(w, sel, dict(status="timeout", detail="worker stopped answering"))
        finally:
            sel.close()

    def _replace(self, w: _Worker, sel, reply: dict) -> None:
        """Kill a dead or stuck worker (its job gets `reply`) and start a fresh one in its place."""
        if w.run is not None:
            w.run.fail(dict(reply, duration_s=time.monotonic() - w.started))
        w.release(sel)
        try:
            sel.unregister(w.sock)
        except (KeyError, ValueError):
            pass
        w.stop(force=True)
        fresh = _Worker(self._config)
        self._pool[next(i for i, x in enumerate(self._pool) if x is w)] = fresh
        fresh.wait_ready()
        sel.register(fresh.sock, selectors.EVENT_READ, (fresh, "sock"))


class _Worker:
    """Parent-side handle of one fork-server process."""

    def __init__(self, config: dict):
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "USER": "sandbox",
            "LOGNAME": "sandbox",
            "HOME": "/nonexistent",
            # glibc and BLAS reserve address space per thread; keep them small under RLIMIT_AS
            "MALLOC_ARENA_MAX": "2",
            "OMP_NUM_THREADS": "1",
            "OPENBLAS_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
        }
        import subprocess  # here, not at the top: the pool is all that needs it

        ours, theirs = socket.socketpair()
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-B", _WORKER, "--serve", json.dumps(dict(config, fd=theirs.fileno()))],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            env=env,
            cwd="/",
            close_fds=True,
            pass_fds=(theirs.fileno(),),
            start_new_session=True,
        )
        theirs.close()
        self.sock = ours
        ours.setblocking(False)
        self.rbuf = bytearray()
        self.run = self.step = None
        self.deadline = self.started = 0.0
        self.caps: dict = {}

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as sel:
            sel.register(self.sock, selectors.EVENT_READ)
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    self.stop(force=True)
                    raise SandboxError("a sandbox worker did not start within 60 s")
                try:
                    reply = self._receive()
                except (EOFError, OSError) as e:
                    raise SandboxError(f"a sandbox worker died while starting ({e}); run it by hand to see why") from e
                if reply is not None:
                    self.caps = reply
                    return

    # -- one step of a run: the request (with the judge's pipe ends), the spec to the judge, the two answers

    def submit(self, run, step: dict, sel, grace: float) -> None:
        self.run, self.step = run, step
        self.reply = self.result = None
        request = dict(step["request"])
        # the program and its stdin go to the child in memory files the worker passes on unread: no program, input or
        # test ever sits in the worker's memory, where a later program forked from it could find it
        self.fds, names = [_memfile("program", request.pop("program"))], ["program"]
        stdin = request.pop("stdin", None)
        if stdin is not None:
            self.fds.append(_memfile("stdin", stdin))
            names.append("stdin")
        self.spec_w = self.result_r = None
        if step.get("spec") is not None:
            spec_r, self.spec_w = os.pipe()
            self.result_r, result_w = os.pipe()
            self.fds += [spec_r, result_w]
            names += ["spec", "result"]
            self.spec_buf = bytearray(step["spec"])
            self.result_buf = bytearray()
            os.set_blocking(self.spec_w, False)
            os.set_blocking(self.result_r, False)
        self.wbuf = bytearray(wire.frame(dict(request, fds=names)))
        self.started = time.monotonic()
        self.deadline = self.started + step["budget"] + grace
        self._flush()
        if self.wbuf:
            sel.modify(self.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, (self, "sock"))
        if self.spec_w is not None:
            sel.register(self.spec_w, selectors.EVENT_WRITE, (self, "spec"))
            sel.register(self.result_r, selectors.EVENT_READ, (self, "result"))

    def _flush(self) -> None:
        while self.wbuf:
            try:
                if self.fds:
                    n = socket.send_fds(self.sock, [bytes(self.wbuf[:65536])], self.fds)
                    for fd in self.fds:
                        os.close(fd)  # the worker has its own copies now; ours would keep the pipes open
                    self.fds = []
                else:
                    n = self.sock.send(self.wbuf)
            except BlockingIOError:
                return
            del self.wbuf[:n]

    def on_event(self, what: str, events: int, sel) -> None:
        if what == "sock":
            if events & selectors.EVENT_WRITE:
                self._flush()
                if not self.wbuf:
                    sel.modify(self.sock, selectors.EVENT_READ, (self, "sock"))
            if events & selectors.EVENT_READ:
                reply = self._receive()
                if reply is not None:
                    self.reply = reply
        elif what == "spec":
            try:
                n = os.write(self.spec_w, self.spec_buf[: 1 << 20])
                del self.spec_buf[:n]
            except BlockingIOError:
                pass
            except OSError:  # the judge died before reading it all: its result says so
                self.spec_buf.clear()
            if not self.spec_buf:
                sel.unregister(self.spec_w)
                os.close(self.spec_w)
                self.spec_w = None
        elif what == "result":
            chunk = os.read(self.result_r, 1 << 20)
            if chunk and len(self.result_buf) <= J.REPORT_CAP_BYTES:
                self.result_buf += chunk
            elif not chunk:
                sel.unregister(self.result_r)
                os.close(self.result_r)
                self.result_r = None
                self.result = bytes(self.result_buf)

    def complete(self) -> bool:
        return self.reply is not None and self.result_r is None

    def finish(self, sel):
        run = self.run
        self.release(sel)
        run.feed(self.reply, self.result)
        self.run = None
        return run

    def release(self, sel) -> None:
        """Close this step's pipes (a replaced worker's too)."""
        for attr in ("spec_w", "result_r"):
            fd = getattr(self, attr, None)
            if fd is not None:
                try:
                    sel.unregister(fd)
                except (KeyError, ValueError):
                    pass
                os.close(fd)
                setattr(self, attr, None)
        for fd in getattr(self, "fds", []):
            os.close(fd)
        self.fds = []
        try:
            sel.modify(self.sock, selectors.EVENT_READ, (self, "sock"))
        except (KeyError, ValueError, OSError):
            pass

    def _receive(self) -> dict | None:
        while True:
            try:
                chunk = self.sock.recv(1 << 20)
            except BlockingIOError:
                break
            if not chunk:
                raise EOFError(f"exit status {self.proc.poll()}")
            self.rbuf += chunk
        if len(self.rbuf) >= wire.FRAME.size:
            (n,) = wire.FRAME.unpack_from(self.rbuf)
            if n > J.REPORT_CAP_BYTES + (1 << 20):
                raise EOFError("the worker sent an oversized reply")
            if len(self.rbuf) >= wire.FRAME.size + n:
                body = bytes(self.rbuf[wire.FRAME.size : wire.FRAME.size + n])
                del self.rbuf[: wire.FRAME.size + n]
                try:
                    reply = wire.loads(body)
                except wire.WireError as e:
                    raise EOFError(f"the worker sent a malformed reply ({e})") from None
                return reply if type(reply) is dict else {"status": "error", "detail": "malformed worker reply"}
        return None

    def stop(self, force: bool = False) -> None:
        """End the worker; force: it may be stuck, so kill it (its namespaces and programs die with it)."""
        try:
            if not force and self.proc.poll() is None:
                self.sock.close()  # EOF: the worker cleans up and exits
                self.proc.wait(timeout=5)
        except Exception:  # subprocess.TimeoutExpired, OSError (no import here: this also runs at exit)
            pass
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for uid in (self.caps.get("uid"), self.caps.get("judge_uid")):
            if uid is not None:
                _kill_uid(uid)
        try:
            self.sock.close()
        except OSError:
            pass
        for cgroup in self.caps.get("cgroups", []):
            for _ in range(50):
                try:
                    os.rmdir(cgroup)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)  # the last process is still leaving


def _memfile(name: str, text: str) -> int:
    """A memory file holding `text`, at offset 0 (a regular file: `os.fstat(0).st_size` works on stdin)."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    data = text.encode("utf-8", "surrogatepass")
    while data:
        data = data[os.write(fd, data) :]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _kill_uid(uid: int) -> None:
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


# ---------------------------------------------------------------------------------------------------------------
# the shared pool


_DEFAULTS: dict = {"workers": None, "timeout_s": DEFAULT_TIMEOUT_S, "memory_mb": DEFAULT_MEMORY_MB}
_SHARED: Sandbox | None = None
_SHARED_LOCK = threading.Lock()
_ATEXIT: list = []


def configure(workers: int | None = None, timeout_s: float | None = None, memory_mb: int | None = None, **options):
    """Set the shared pool's size and default limits (used by `run`, `check` and the rewards).

    Cheap to call every step: the pool restarts only when a value changes.
    """
    global _SHARED
    new = dict(workers=workers, timeout_s=timeout_s, memory_mb=memory_mb, **options)
    new = {k: v for k, v in new.items() if v is not None and _DEFAULTS.get(k) != v}
    if not new:
        return
    _DEFAULTS.update(new)
    with _SHARED_LOCK:
        if _SHARED is not None:
            _SHARED.close()
            _SHARED = None


def _close_shared() -> None:
    global _SHARED
    if _SHARED is not None and _SHARED._owner == os.getpid():
        _SHARED.close()
    _SHARED = None


def shared_pool() -> Sandbox:
    """The lazily-created process-wide pool (recreated in a forked child, which must not share its sockets)."""
    global _SHARED
    with _SHARED_LOCK:
        if _SHARED is None or _SHARED._owner != os.getpid() or _SHARED._closed:
            if not _ATEXIT:
                import atexit

                atexit.register(_close_shared)  # before interpreter teardown, when stopping workers still works
                _ATEXIT.append(True)
            _SHARED = Sandbox(**_DEFAULTS)
        return _SHARED
