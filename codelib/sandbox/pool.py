"""The pool (parent side): warm workers, the event loop that keeps them busy, and the shared pool.

Each worker is a fresh interpreter (`worker.py`) on one unix socket. A function job travels in three parts: the
program (prompt + completion) to the worker; the tests to the judge, through a pipe the parent writes and passes to
the worker as a file descriptor it never reads; the judge's result back through a second such pipe. A stdio job is
run case by case, each output compared here, and the worker never sees an expected output.
"""

from __future__ import annotations

import collections
import os
import selectors
import sys
import threading
import time
import warnings

from . import isolation
from . import jobs as J
from .client import SandboxError, Worker

DEFAULT_TIMEOUT_S = 5.0  # wall-time limit per program (per test case for stdio tasks)
DEFAULT_MEMORY_MB = 1024  # address-space limit per process


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
        packages: tuple | None = None,  # importable beyond the stdlib (their code files only); None: DEFAULT_PACKAGES
        site_packages: list | None = None,  # where to find them; None: this interpreter's site-packages
        parse_first: bool = True,  # a function job that does not parse gets its verdict without a run (False: runs)
    ):
        self.workers = int(workers or len(os.sched_getaffinity(0)))
        self.timeout_s, self.memory_mb = float(timeout_s), int(memory_mb)
        self.reference_timeout_s, self.grace_s = float(reference_timeout_s), float(grace_s)
        self.max_output_bytes = int(max_output_bytes)
        self.parse_first = bool(parse_first)  # tests compare the two ways on one pool
        if site_packages is None:
            site_packages = [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
        hidden = isolation.under_tmp(isolation.interpreter_paths(site_packages)) if namespaces else None
        if hidden:  # each run gets a fresh, empty /tmp: the programs' root could not show them this environment
            raise SandboxError(
                f"the sandbox gives every program a fresh, empty /tmp, which would hide this Python "
                f"environment ({hidden}) from it: install codelib's environment outside /tmp (clone "
                f"the repository elsewhere, e.g. under your home directory, and run `make setup` "
                f"there)"
            )
        self.packages = tuple(isolation.DEFAULT_PACKAGES if packages is None else packages)
        # code, never data: the programs' root shows the interpreter, the stdlib and the allowed packages' code
        # files; anything left in that view that looks like a benchmark's data stops the pool here
        view = isolation.program_view(list(site_packages), self.packages) if namespaces else {}
        data = isolation.benchmark_data(view) if namespaces else None
        if data:
            raise SandboxError(
                f"programs would see benchmark data: {data}. A program that reads a benchmark's "
                f"file passes its tasks without solving them; remove the file (or the package that "
                f"ships it) from the interpreter's directories"
            )
        self._config = dict(
            # -S keeps the worker small (no .pth hooks); programs still import what the caller's env installed
            site_packages=site_packages[:1] if namespaces else site_packages,
            view=view,
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
        self._pool: list[Worker] = []
        try:
            self._pool = [Worker(self._config) for _ in range(self.workers)]
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
                    expected[key] = J.REFERENCE_CACHE[key] = (outputs, run.duration, run.out["outputs_raw"])
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
                for w in list(self._pool):
                    if w.run is None and queue:
                        if w.retire or w.proc.poll() is not None:  # it said it cannot serve another run, or died
                            w = self._replace(w, sel, None)
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

    def _replace(self, w: Worker, sel, reply: dict | None) -> Worker:
        """Kill a dead or stuck worker (its job gets `reply`) and start a fresh one in its place."""
        if w.run is not None and reply is not None:
            w.run.fail(dict(reply, duration_s=time.monotonic() - w.started))
        w.release(sel)
        try:
            sel.unregister(w.sock)
        except (KeyError, ValueError):
            pass
        w.stop(force=True)
        fresh = Worker(self._config)
        self._pool[next(i for i, x in enumerate(self._pool) if x is w)] = fresh
        fresh.wait_ready()
        sel.register(fresh.sock, selectors.EVENT_READ, (fresh, "sock"))
        return fresh


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
