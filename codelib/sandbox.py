"""Sandbox: run untrusted, model-written programs and return honest verdicts.

WARNING: this module executes code that a language model wrote. It is built to contain accidents and reward
hacks (infinite loops, memory and fork bombs, early `sys.exit(0)`, writes outside the working directory, network
access), not a determined attacker with a kernel exploit. Run training on machines you can afford to lose.

How a program runs. `Sandbox(workers=N)` starts N warm worker processes with `subprocess` (a fresh interpreter,
never a fork of the training process, so no model, CUDA context or secret is inherited) and a scrubbed
environment. Each worker is a fork server: it imports the harness and common stdlib modules once, enters its own
mount, network and IPC namespaces (as root; otherwise a user namespace when the kernel allows it), and then forks
one child per program. The child:

- starts a new session, moves to a private temporary directory (removed afterwards),
- sets limits: CPU time, address space, file size, open files, processes; output is capped by the worker,
- drops to a uid of its own (one per worker, so RLIMIT_NPROC really caps a fork bomb and `kill -1` from that uid
  kills every process the program started), with no new privileges, no network (an empty network namespace) and
  read-only access to the rest of the file system (world-writable directories are covered by root-owned tmpfs;
  the bundled benchmark data, which holds the reference solutions, is hidden),
- runs the program in-process (`compile` + `exec`) inside a harness whose epilogue reports, on a hidden pipe fd,
  a per-run secret token followed by the result. No token, no pass: a program that exits early, kills itself,
  closes its fds or dies from a limit is never `passed`.

After the child exits (or its wall-time limit hits) the worker kills everything the program left behind, removes
its directory and answers. Where a guard is unavailable (no root, no namespaces) the first pool warns once and
falls back to what the OS allows: see `Sandbox.isolation`.

Public API: `run`, `Sandbox(...).map`, `Job`, `Verdict`, `task_job`, `check`, `configure`.
"""

from __future__ import annotations

import ast
import collections
import ctypes
import json
import math
import os
import resource
import selectors
import signal
import struct
import sys
import threading
import time
import warnings
from dataclasses import dataclass, replace
from hashlib import sha256 as _sha256  # imported once by each worker, not by every program it forks

DEFAULT_TIMEOUT_S = 5.0  # wall-time limit per program (per test case for stdio tasks)
DEFAULT_MEMORY_MB = 1024  # address-space limit per process
REFERENCE_TIMEOUT_S = 120.0  # canonical solutions on all plus inputs: HumanEval+/15 takes ~15 s, MBPP+/599 ~50 s
PLUS_TIME_FACTOR = 4.0  # a candidate on plus inputs may take timeout_s + 4x the canonical solution's time
# address space for a reference on plus inputs, and for a candidate judged on them: MBPP+/255's 112 inputs make
# 2M tuples (the reference needs ~2 GB to build and send them), and a correct candidate must build the same
PLUS_MEMORY_MB = 4096
# a plain output (ints, strings, lists, tuples) whose encoding is longer than this travels as its sha256: equal
# values have equal encodings, and neither the worker nor the trainer ever holds a huge output (MBPP+/255: 2M tuples)
DIGEST_OVER_BYTES = 1 << 20
REPORT_CAP_BYTES = 64 << 20  # the harness's report (verdict + plus outputs) beyond this is an error, not a verdict
VERDICT_STDOUT_CHARS = 65536  # what a Verdict keeps of stdout

_EXIT_NO_CHANNEL = 71  # the harness finished but could not report: the program closed or broke its channel
_REPORT_FD = 1000  # the harness channel: above RLIMIT_NOFILE, so the program can never open a file onto it
_UID_BASE = 1_500_000_000  # worker uid = base + worker pid: unique while the worker lives, owned by no user
_FRAME = struct.Struct(">Q")
_HERE = os.path.dirname(os.path.abspath(__file__))
_DATA_DIR = os.path.join(_HERE, "data")


# ---------------------------------------------------------------------------------------------------------------
# records


@dataclass(frozen=True)
class Verdict:
    """The sandbox's judgement of one job."""

    status: str  # "passed" | "failed" | "timeout" | "error"
    passed: bool
    detail: str = ""  # short reason: failing assert, exception line, signal, limit hit
    duration_s: float = 0.0
    stdout: str = ""  # capped at VERDICT_STDOUT_CHARS
    tests_passed: int = 0  # asserts (or stdio cases, or plus inputs) that passed
    tests_total: int = 0


@dataclass(frozen=True)
class Job:
    """One thing to judge: a program, optionally with stdin, stdio cases or plus inputs.

    kind "program": passed when the program runs to its end. Asserts from line `test_line` on (top level, or top
    level of a `check` function's body) are counted one by one; 0 means no counting (the program is one test).
    kind "stdio": the program is run once per case (stdin from a file); its output must match the case's output.
    plus_inputs (JSON list of argument lists) with `reference`: after the program, `entry_point` is called on each
    input and the outputs are compared, in the parent, with the reference program's outputs (EvalPlus-style).
    """

    program: str
    kind: str = "program"  # "program" | "stdio"
    stdin: str | None = None
    cases: tuple = ()  # stdio: ({"input": str, "output": str}, ...)
    test_line: int = 0
    entry_point: str = ""
    plus_inputs: str = ""
    reference: Job | None = None
    atol: float = 0.0
    task_id: str = ""
    timeout_s: float | None = None  # None: the pool's default
    memory_mb: int | None = None


# ---------------------------------------------------------------------------------------------------------------
# public functions


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
    """The lazily-created process-wide pool (recreated in a forked child, which must not share its pipes)."""
    global _SHARED
    with _SHARED_LOCK:
        if _SHARED is None or _SHARED._owner != os.getpid() or _SHARED._closed:
            if not _ATEXIT:
                import atexit

                atexit.register(_close_shared)  # before interpreter teardown, when stopping workers still works
                _ATEXIT.append(True)
            _SHARED = Sandbox(**_DEFAULTS)
        return _SHARED


def run(
    program: str, timeout_s: float | None = None, memory_mb: int | None = None, stdin: str | None = None
) -> Verdict:
    """Run one program in the shared pool: passed when it runs to its end.

    >>> run("assert 1 + 1 == 2").status
    'passed'
    """
    return shared_pool().map([Job(program, stdin=stdin, timeout_s=timeout_s, memory_mb=memory_mb)])[0]


def task_job(task, completion: str, plus: bool = False, timeout_s: float | None = None, memory_mb: int | None = None):
    """The job that checks `completion` (the text appended to `task.prompt`; stdio: the program) on one task.

    plus=True adds the task's HumanEval+/MBPP+ extra inputs, judged against its canonical solution.
    """
    from codelib.tasks import program_for

    if task.kind == "stdio":
        cases = tuple(json.loads(task.tests))
        return Job(
            completion, kind="stdio", cases=cases, task_id=task.task_id, timeout_s=timeout_s, memory_mb=memory_mb
        )
    program = program_for(task, completion)
    at = program.rfind(task.tests) if task.tests else -1
    test_line = program.count("\n", 0, at) + 1 if at >= 0 else 1
    job = Job(program, test_line=test_line, entry_point=task.entry_point, task_id=task.task_id)
    if plus and task.plus_inputs:
        reference = Job(task.prompt + task.canonical_solution, entry_point=task.entry_point, task_id=task.task_id)
        job = replace(job, plus_inputs=task.plus_inputs, reference=reference, atol=task.atol)
    return replace(job, timeout_s=timeout_s, memory_mb=memory_mb)


def check(tasks, completions, workers: int | None = None, plus: bool = False, **limits) -> list[Verdict]:
    """Verdicts for the pairs (tasks[i], completions[i]) in one `Sandbox.map`.

    workers=None uses the shared pool; a number starts (and closes) a pool of that size.
    """
    if len(tasks) != len(completions):
        raise ValueError(f"check got {len(tasks)} tasks but {len(completions)} completions; pass one per task")
    jobs = [task_job(t, c, plus=plus, **limits) for t, c in zip(tasks, completions, strict=True)]
    if workers is None:
        return shared_pool().map(jobs)
    with Sandbox(workers=workers, **{k: v for k, v in limits.items() if k in ("timeout_s", "memory_mb")}) as box:
        return box.map(jobs)


# ---------------------------------------------------------------------------------------------------------------
# the pool (parent side)


class SandboxError(RuntimeError):
    """The sandbox itself failed (a worker that cannot start), not the program under test."""


_WARNED = False


class Sandbox:
    """A pool of warm fork-server workers; `map(jobs)` judges jobs in parallel, order kept.

    with Sandbox(workers=4, timeout_s=3) as box:
        verdicts = box.map(["assert 1 == 1", Job("print(input())", kind="stdio", cases=(...))])

    A worker that dies or stops answering is restarted; its job gets an `error` (or `timeout`) verdict and no
    other job is lost.
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
        max_procs: int = 64,  # RLIMIT_NPROC for the worker's uid: processes + threads
        tmpfs_mb: int = 512,  # size of the worker's private /tmp, which holds the programs' directories
        hide: tuple = (_DATA_DIR,),  # paths made empty for programs (the reference solutions live here)
        reference_timeout_s: float = REFERENCE_TIMEOUT_S,
        grace_s: float = 10.0,  # a worker silent this long past its job's limits is killed and replaced
        unprivileged: bool = False,  # behave as without root (user namespace, no uid switch): tests the fallback
    ):
        self.workers = int(workers or len(os.sched_getaffinity(0)))
        self.timeout_s, self.memory_mb = float(timeout_s), int(memory_mb)
        self.reference_timeout_s, self.grace_s = float(reference_timeout_s), float(grace_s)
        self._config = dict(
            # -S keeps the worker small (no .pth hooks); programs still import what the caller's env installed
            site_packages=[p for p in sys.path if p.endswith(("site-packages", "dist-packages"))],
            memory_mb=self.memory_mb,
            max_output_bytes=max_output_bytes,
            max_file_mb=max_file_mb,
            max_open_files=max_open_files,
            max_procs=max_procs,
            tmpfs_mb=tmpfs_mb,
            hide=[os.path.abspath(p) for p in hide],
            unprivileged=bool(unprivileged),
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

    def map(self, jobs) -> list[Verdict]:
        """Judge jobs (str programs or `Job`s) in parallel; verdicts in the same order."""
        if self._closed:
            raise SandboxError("this Sandbox is closed; create a new one")
        jobs = [j if isinstance(j, Job) else Job(str(j)) for j in jobs]
        with self._lock:
            expected = self._references(jobs)
            replies = self._dispatch([self._request(j, expected) for j in jobs])
        return [_verdict(j, r, expected) for j, r in zip(jobs, replies, strict=True)]

    # -- plus inputs: the reference outputs, computed once per (reference program, inputs)

    def _references(self, jobs: list[Job]) -> dict:
        expected, todo = {}, {}
        for j in jobs:
            if j.reference is None or not j.plus_inputs:
                continue
            key = _reference_key(j)
            if key in _REFERENCE_CACHE:
                _REFERENCE_CACHE.move_to_end(key)
                expected[key] = _REFERENCE_CACHE[key]
            else:
                # the candidate's atol too: both sides then agree on which outputs travel as digests
                todo[key] = replace(j.reference, plus_inputs=j.plus_inputs, timeout_s=self.reference_timeout_s,
                                    memory_mb=max(PLUS_MEMORY_MB, j.memory_mb or self.memory_mb), atol=j.atol)  # fmt: skip
        if todo:
            replies = self._dispatch([self._request(r, {}) for r in todo.values()])
            for key, reply in zip(todo, replies, strict=True):
                if reply.get("outputs") is not None and reply.get("done"):
                    expected[key] = _REFERENCE_CACHE[key] = (_decode(reply["outputs"]), reply["duration_s"])
                else:
                    expected[key] = None  # not cached: a loaded machine may have timed it out
                while len(_REFERENCE_CACHE) > 256:
                    _REFERENCE_CACHE.popitem(last=False)
        return expected

    def _request(self, job: Job, expected: dict) -> dict:
        timeout = float(job.timeout_s if job.timeout_s is not None else self.timeout_s)
        request = dict(
            kind=job.kind,
            program=job.program,
            stdin=job.stdin,
            cases=list(job.cases),
            test_line=job.test_line,
            entry_point=job.entry_point,
            plus_inputs=job.plus_inputs,
            timeout_s=timeout,
            memory_mb=int(job.memory_mb if job.memory_mb is not None else self.memory_mb),
        )
        if job.plus_inputs:
            request["digest_over"] = DIGEST_OVER_BYTES if _digest_ok(job) else 0
        if job.reference is not None and job.plus_inputs:
            ref = expected.get(_reference_key(job))
            if ref is None:
                return dict(request, skip="reference solution failed on the plus inputs")
            request["timeout_s"] = timeout + PLUS_TIME_FACTOR * ref[1]
            request["memory_mb"] = max(request["memory_mb"], PLUS_MEMORY_MB)
        elif job.reference is not None:
            request["plus_inputs"] = ""
        return request

    # -- the event loop: keep every worker busy, never wait on one that stopped answering

    def _dispatch(self, requests: list[dict]) -> list[dict]:
        results: list = [None] * len(requests)
        queue = collections.deque(i for i, r in enumerate(requests) if "skip" not in r)
        for i, r in enumerate(requests):
            if "skip" in r:
                results[i] = dict(status="error", detail=r["skip"], duration_s=0.0)
        sel = selectors.DefaultSelector()
        for w in self._pool:
            sel.register(w.rfd, selectors.EVENT_READ, w)
        try:
            while queue or any(w.job is not None for w in self._pool):
                for w in self._pool:
                    if w.job is None and queue:
                        i = queue.popleft()
                        req = requests[i]
                        runs = max(1, len(req["cases"])) if req["kind"] == "stdio" else 1
                        w.submit(i, req, budget=runs * (req["timeout_s"] + 1.0) + self.grace_s)
                        if w.wbuf:  # a large request (stdin, cases, plus inputs): send the rest as the pipe drains
                            sel.register(w.wfd, selectors.EVENT_WRITE, w)
                busy = [w for w in self._pool if w.job is not None]
                wait = max(0.0, min(w.deadline for w in busy) - time.monotonic()) if busy else 0.0
                for key, _ in sel.select(wait):
                    w = key.data
                    if not any(w is x for x in self._pool):
                        continue  # replaced earlier in this batch of events
                    try:
                        if key.fd == w.wfd:
                            w.flush()
                            if not w.wbuf:
                                sel.unregister(w.wfd)
                        else:
                            reply = w.receive()
                            if reply is not None and w.job is not None:
                                results[w.job] = reply
                                w.job = None
                    except (EOFError, OSError) as e:
                        self._replace(w, sel, results, dict(status="error", detail=f"sandbox worker died ({e})"))
                now = time.monotonic()
                for w in list(self._pool):
                    if w.job is not None and now > w.deadline:
                        self._replace(w, sel, results, dict(status="timeout", detail="worker stopped answering"))
        finally:
            sel.close()
        return results

    def _replace(self, w: _Worker, sel, results: list, reply: dict) -> None:
        """Kill a dead or stuck worker (its job gets `reply`) and start a fresh one in its place."""
        if w.job is not None:
            results[w.job] = dict(reply, duration_s=time.monotonic() - w.started)
        for fd in (w.rfd, w.wfd):
            if fd in sel.get_map():
                sel.unregister(fd)
        w.stop(force=True)
        fresh = _Worker(self._config)
        self._pool[next(i for i, x in enumerate(self._pool) if x is w)] = fresh
        fresh.wait_ready()
        sel.register(fresh.rfd, selectors.EVENT_READ, fresh)


def _warn_once(caps: dict) -> None:
    global _WARNED
    if caps.get("missing") and not _WARNED:
        _WARNED = True
        why = "; ".join(f"{k}: {v}" for k, v in caps["missing"].items())
        warnings.warn(f"codelib.sandbox runs with weaker isolation here ({why})", RuntimeWarning, stacklevel=3)


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
        import subprocess  # here: the worker process, which imports this module too, never needs it

        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-B", os.path.abspath(__file__), "--serve", json.dumps(config)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            cwd="/",
            close_fds=True,
            start_new_session=True,
        )
        self.wfd, self.rfd = self.proc.stdin.fileno(), self.proc.stdout.fileno()
        os.set_blocking(self.wfd, False)
        os.set_blocking(self.rfd, False)
        self.rbuf, self.wbuf = bytearray(), bytearray()
        self.job: int | None = None
        self.deadline = self.started = 0.0
        self.caps: dict = {}

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as sel:
            sel.register(self.rfd, selectors.EVENT_READ)
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    self.stop(force=True)
                    raise SandboxError("a sandbox worker did not start within 60 s")
                try:
                    reply = self.receive()
                except (EOFError, OSError) as e:
                    raise SandboxError(f"a sandbox worker died while starting ({e}); run it by hand to see why") from e
                if reply is not None:
                    self.caps = reply
                    return

    def submit(self, index: int, request: dict, budget: float) -> None:
        payload = json.dumps(request).encode()
        self.wbuf += _FRAME.pack(len(payload)) + payload
        self.job, self.started = index, time.monotonic()
        self.deadline = self.started + budget
        self.flush()

    def flush(self) -> None:
        while self.wbuf:
            try:
                n = os.write(self.wfd, self.wbuf)
            except BlockingIOError:
                return
            del self.wbuf[:n]

    def receive(self) -> dict | None:
        while True:
            try:
                chunk = os.read(self.rfd, 1 << 20)
            except BlockingIOError:
                break
            if not chunk:
                raise EOFError(f"exit status {self.proc.poll()}")
            self.rbuf += chunk
        if len(self.rbuf) >= _FRAME.size:
            (n,) = _FRAME.unpack_from(self.rbuf)
            if len(self.rbuf) >= _FRAME.size + n:
                reply = json.loads(bytes(self.rbuf[_FRAME.size : _FRAME.size + n]))
                del self.rbuf[: _FRAME.size + n]
                return reply
        return None

    def stop(self, force: bool = False) -> None:
        """End the worker; force: it may be stuck, so kill it and every process of its uid."""
        uid = self.caps.get("uid")
        try:
            if not force and self.proc.poll() is None:
                self.proc.stdin.close()  # EOF: the worker cleans up and exits
                self.proc.wait(timeout=5)
        except Exception:  # subprocess.TimeoutExpired, OSError (no import here: this also runs at exit)
            pass
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if uid is not None:
            _kill_uid(uid)
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass
        for cgroup in self.caps.get("cgroups", []):
            try:
                os.rmdir(cgroup)
            except OSError:
                pass


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
# verdicts (parent side): the worker's reply, plus-output comparison


_REFERENCE_CACHE: collections.OrderedDict = collections.OrderedDict()


def _reference_key(job: Job) -> tuple:
    return (job.reference.program, job.plus_inputs)


def _verdict(job: Job, reply: dict, expected: dict) -> Verdict:
    status, detail = reply.get("status", "error"), reply.get("detail", "")
    passed_n, total_n = reply.get("tests_passed", 0), reply.get("tests_total", 0)
    if job.reference is not None and job.plus_inputs and reply.get("outputs") is not None:
        ref = expected.get(_reference_key(job))
        good, total, first_bad = _compare_plus(job, ref[0], _decode(reply["outputs"]))
        passed_n, total_n = passed_n + good, total_n + total
        if status == "passed" and first_bad is not None:
            status, detail = "failed", f"plus input {first_bad}: output differs from the canonical solution's"
    stdout = reply.get("stdout", "")
    return Verdict(
        status=status,
        passed=status == "passed",
        detail=detail,
        duration_s=round(float(reply.get("duration_s", 0.0)), 4),
        stdout=stdout[:VERDICT_STDOUT_CHARS],
        tests_passed=int(passed_n),
        tests_total=int(total_n),
    )


# EvalPlus's special oracles: tasks whose reference output is one of several right answers.
_MBPP_SET_EQ = {
    "similar_elements",
    "find_char_long",
    "common_in_nested_lists",
    "extract_singly",
    "larg_nnum",
    "intersection_array",
    "find_dissimilar",
    "Diff",
}
_MBPP_NOT_NONE = {"check_str", "text_match_three", "text_starta_endb"}


def _poly(xs, x):
    return sum(c * math.pow(x, i) for i, c in enumerate(xs))


def _surface_area(base_edge, height):
    slant = math.sqrt((base_edge / 2) ** 2 + height**2)
    return round(base_edge**2 + 4 * (base_edge * slant) / 2)


def _digit_distance(a, b):
    a, b = str(a), str(b)
    n = max(len(a), len(b))
    return sum(abs(int(x) - int(y)) for x, y in zip(a.zfill(n), b.zfill(n), strict=True))


def _is_floats(x) -> bool:
    return isinstance(x, float) or (isinstance(x, (list, tuple)) and all(isinstance(i, float) for i in x))


def _allclose(out, exp, atol: float, rtol: float = 1e-7) -> bool:
    """numpy.allclose for numbers and (nested) lists/tuples of numbers."""
    if isinstance(exp, (list, tuple)):
        return (
            isinstance(out, (list, tuple))
            and len(out) == len(exp)
            and all(_allclose(o, e, atol, rtol) for o, e in zip(out, exp, strict=True))
        )
    if isinstance(out, (int, float)) and isinstance(exp, (int, float)):
        return abs(out - exp) <= atol + rtol * abs(exp)
    return False


def _same_plus_output(job: Job, args, out, exp, atol: float) -> bool:
    """EvalPlus's comparison: exact match, special oracles, then allclose with atol (1e-6 for floats)."""
    mbpp, entry = job.task_id.lower().startswith("mbpp"), job.entry_point
    exact = out == exp
    if mbpp and entry == "are_equivalent":
        exact = True
    elif mbpp and entry == "sum_div":
        exact = exact or out == 0
    elif mbpp and entry == "surface_Area":
        exact = exact or abs(out - _surface_area(*args)) <= atol
    elif mbpp and entry == "digit_distance_nums":
        exact = exact or out == _digit_distance(*args)
    elif mbpp and entry in _MBPP_SET_EQ:
        exact = set(out) == set(exp)
    elif mbpp and entry in _MBPP_NOT_NONE:
        exact = out == (exp is not None) if isinstance(out, bool) else (out is not None) == (exp is not None)
    if not mbpp and entry == "find_zero":
        return abs(_poly(*args, out)) <= atol
    if atol == 0 and _is_floats(exp):
        atol = 1e-6
    if not exact and atol != 0:
        if type(out) is not type(exp):
            return False
        return _allclose(out, exp, atol)
    return bool(exact)


def _compare_plus(job: Job, expected: list, outputs: list) -> tuple[int, int, int | None]:
    """(inputs matched, inputs judged, index of the first mismatch). Inputs the reference failed on are skipped."""
    args_list = None
    if job.entry_point in ("find_zero", "surface_Area", "digit_distance_nums"):
        args_list = _decode_args(json.loads(job.plus_inputs))
    good = total = 0
    first_bad = None
    for i, exp in enumerate(expected):
        if _is_error(exp):
            continue
        total += 1
        out = outputs[i] if i < len(outputs) else _Error("missing")
        try:
            ok = not _is_error(out) and _same_plus_output(job, args_list[i] if args_list else None, out, exp, job.atol)
        except Exception:
            ok = False
        good += ok
        if not ok and first_bad is None:
            first_bad = i
    return good, total, first_bad


# ---------------------------------------------------------------------------------------------------------------
# values across the process boundary: JSON with tags, never pickle (the parent must not run the program's code)


class _Error(str):
    """A call that raised: compares unequal to every output."""


class _Digest(str):
    """The sha256 of a large plain output's encoding: equal to another digest of the same value only."""

    def __eq__(self, other):
        return type(other) is _Digest and str.__eq__(self, other)

    def __ne__(self, other):
        return not self.__eq__(other)

    __hash__ = str.__hash__


def _is_error(x) -> bool:
    return isinstance(x, _Error)


def _encode(x, depth: int = 0):
    """A JSON-able tagged tree for a program's output (runs in the child)."""
    if depth > 100:
        return {"o": "deep", "r": ""}
    t = type(x)
    if x is None or t is bool or t is str:
        return x
    if t is int:
        return x if -(1 << 63) <= x < (1 << 63) else {"i": hex(x)}
    if t is float:
        return x if math.isfinite(x) else {"f": repr(x)}
    if t is list:
        return [_encode(v, depth + 1) for v in x]
    if t is tuple:
        return {"t": [_encode(v, depth + 1) for v in x]}
    if t is set or t is frozenset:
        return {"s": [_encode(v, depth + 1) for v in x]}
    if t is dict:
        return {"d": [[_encode(k, depth + 1), _encode(v, depth + 1)] for k, v in x.items()]}
    if t is complex:
        return {"c": [x.real, x.imag] if math.isfinite(abs(x)) else [repr(x.real), repr(x.imag)]}
    if t is bytes:
        return {"b": x.hex()}
    if type(x).__module__ == "numpy" and hasattr(x, "tolist"):
        return _encode(x.tolist(), depth + 1)
    for base in (bool, int, float, str, list, tuple, dict):  # subclasses (IntEnum, namedtuple, ...) as their base
        if isinstance(x, base):
            return _encode(base(x), depth + 1)
    try:
        text = repr(x)[:200]
    except Exception:
        text = ""
    return {"o": t.__name__, "r": text}


def _decode(x):
    """The Python value of an `_encode` tree (runs in the parent; builds only plain data)."""
    if isinstance(x, list):
        return [_decode(v) for v in x]
    if not isinstance(x, dict):
        return x
    if "o" in x:
        return ("<object>", x["o"], x.get("r", ""))
    ((tag, v),) = x.items()
    if tag == "t":
        return tuple(_decode(i) for i in v)
    if tag == "s":
        items = [_decode(i) for i in v]
        try:
            return frozenset(items)
        except TypeError:
            return ("<set>", items)
    if tag == "d":
        pairs = [(_decode(k), _decode(val)) for k, val in v]
        try:
            return dict(pairs)
        except TypeError:
            return ("<dict>", pairs)
    if tag == "i":
        return int(v, 16)
    if tag == "f":
        return float(v)
    if tag == "c":
        return complex(float(v[0]), float(v[1]))
    if tag == "b":
        return bytes.fromhex(v)
    if tag == "e":
        return _Error(v)
    if tag == "h":
        return _Digest(v)
    return None


def _decode_args(x):
    """Plus inputs as stored by codelib.tasks: JSON, with {"__tuple__": [...]} and {"__complex__": "1+2j"}."""
    if isinstance(x, list):
        return [_decode_args(v) for v in x]
    if isinstance(x, dict):
        if len(x) == 1 and "__tuple__" in x:
            return tuple(_decode_args(x["__tuple__"]))
        if len(x) == 1 and "__complex__" in x:
            return complex(str(x["__complex__"]).replace(" ", ""))
        return {k: _decode_args(v) for k, v in x.items()}
    return x


# ---------------------------------------------------------------------------------------------------------------
# stdio output comparison (runs in the worker)


def _same_stdout(out: str, expected: str) -> tuple[bool, str]:
    """Token-wise comparison (so trailing whitespace and line ends do not matter); numbers with a '.' or exponent
    may differ by 1e-6 (absolute or relative); integers and words must match exactly."""
    got, want = out.split(), expected.split()
    for k, (g, w) in enumerate(zip(got, want, strict=False)):
        if g == w:
            continue
        if not (_is_int(g) and _is_int(w)):
            try:
                a, b = float(g), float(w)
                if math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-6):
                    continue
            except ValueError:
                pass
        return False, f"token {k + 1}: expected {w[:40]!r}, got {g[:40]!r}"
    if len(got) != len(want):
        return False, f"expected {len(want)} tokens, got {len(got)}"
    return True, ""


def _is_int(s: str) -> bool:
    return s.lstrip("+-").isdigit()


# ---------------------------------------------------------------------------------------------------------------
# the worker: a fork server (runs as `python -I sandbox.py --serve CONFIG` in a clean interpreter)


_libc = None
CLONE_NEWNS, CLONE_NEWNET, CLONE_NEWIPC, CLONE_NEWUSER = 0x00020000, 0x40000000, 0x08000000, 0x10000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 8, 4096, 0x4000, 1 << 18
PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 1, 36, 38

# The stdlib modules that HumanEval, MBPP and CodeContests programs import most: imported once in the worker, free
# for every program. Kept short on purpose: each forked program pays for the worker's size (fork + exit cost
# ~0.5 ms bare, ~0.75 ms with these, ~1.25 ms with decimal, hashlib, statistics, datetime, unicodedata too).
_PREIMPORT = (
    "array bisect cmath collections copy functools heapq itertools math operator queue random re string typing"
)
_PREIMPORT = _PREIMPORT.split()


def _call(fn, *args) -> None:
    if getattr(_libc, fn)(*args) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{fn}: {os.strerror(err)}")


def _mount(source: str, target: str, fstype: str | None, flags: int, data: str | None) -> None:
    enc = lambda s: s.encode() if s is not None else None  # noqa: E731
    _call("mount", enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data))


class _Server:
    """The worker process: isolate itself once, then fork one child per program."""

    def __init__(self, config: dict):
        global _libc
        _libc = ctypes.CDLL(None, use_errno=True)
        self.config = config
        self.missing: dict[str, str] = {}
        self.uid = None
        self.nproc = 0
        self.cgroups: list[str] = []
        self.counter = 0
        self.proto_in, self.proto_out = os.dup(0), os.dup(1)
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 0)
        os.dup2(devnull, 1)
        os.close(devnull)
        os.set_inheritable(self.proto_in, False)
        os.set_inheritable(self.proto_out, False)
        self._isolate()
        try:
            _call("prctl", PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)  # orphans of a program come back to us, to be killed
        except OSError as e:
            self.missing["subreaper"] = str(e)
        for name in _PREIMPORT:
            __import__(name)
        os.chdir(self.root)
        import gc

        gc.freeze()  # children's collections then skip the worker's objects instead of touching (copying) their pages

    # -- one-time isolation of the worker itself

    def _isolate(self) -> None:
        root = os.geteuid() == 0 and not self.config.get("unprivileged")
        mountns = False
        if root:
            try:
                _call("unshare", CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC)
                mountns = True
            except OSError:
                try:
                    _call("unshare", CLONE_NEWNET)
                except OSError as e:
                    self.missing["network"] = f"no network namespace ({e.strerror}): programs can reach the network"
                self.missing["filesystem"] = "no mount namespace: programs can write to world-writable directories"
            self.uid = _UID_BASE + os.getpid()
        else:
            self.missing["uid"] = "not root: programs run as the caller's user; fork bombs are capped per user"
            uid, gid = os.getuid(), os.getgid()
            try:
                _call("unshare", CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC)
                with open("/proc/self/setgroups", "w") as f:
                    f.write("deny")
                with open("/proc/self/uid_map", "w") as f:
                    f.write(f"0 {uid} 1")
                with open("/proc/self/gid_map", "w") as f:
                    f.write(f"0 {gid} 1")
                mountns = True
            except OSError as e:
                self.missing["network"] = f"no user/network namespace ({e.strerror}): programs can reach the network"
                self.missing["filesystem"] = "no mount namespace: programs can write outside their directory"
        if mountns:
            try:
                self._private_mounts()
            except OSError as e:
                self.missing["filesystem"] = (
                    f"mounts failed ({e.strerror}): programs can write outside their directory"
                )
                mountns = False
        if not mountns:
            import tempfile

            self.root = tempfile.mkdtemp(prefix="codelib-sandbox-")
            os.chmod(self.root, 0o711)
        self.private = os.path.join(self.root, "private")
        os.mkdir(self.private, 0o700)
        if self.uid is not None and not self._uid_runs_python():
            self.uid = None
            self.missing["uid"] = "Python is not reachable for another uid here: programs run as the caller's user"
        if self.uid is not None:
            self._cgroups()
        else:
            # RLIMIT_NPROC counts all of the user's processes: allow what it has now plus the program's share
            mine = sum(1 for p in os.listdir("/proc") if p.isdigit() and _owner(p) == os.getuid())
            self.nproc = mine + int(self.config["max_procs"]) + 256

    def _uid_runs_python(self) -> bool:
        """Whether a process with the program uid can read the interpreter's stdlib (it imports from there)."""
        pid = os.fork()
        if pid == 0:
            try:
                os.setgroups([])
                os.setresgid(self.uid, self.uid, self.uid)
                os.setresuid(self.uid, self.uid, self.uid)
                os.listdir(os.path.dirname(os.__file__))
                os.listdir(os.path.dirname(ctypes.__file__))
                os._exit(0)
            except BaseException:
                os._exit(1)
        return os.waitpid(pid, 0)[1] == 0

    def _private_mounts(self) -> None:
        """Root-owned tmpfs over every world-writable directory; the program directories live in /tmp's."""
        _mount(None, "/", None, MS_REC | MS_PRIVATE, None)
        size = int(self.config["tmpfs_mb"])
        _mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, f"size={size}m,mode=755")
        for path in ("/var/tmp", "/dev/shm", "/run/lock", "/var/lock", "/dev/mqueue"):
            if os.path.isdir(path) and not os.path.islink(path) and os.stat(path).st_mode & 0o002:
                _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY, "size=4k,mode=755")
        for path in self.config.get("hide", []):
            if os.path.isdir(path):
                _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY, "size=4k,mode=755")
        if self.uid is not None:
            self._expose_python()
        self.root = "/tmp/codelib-sandbox"
        os.mkdir(self.root, 0o711)

    def _expose_python(self) -> None:
        """Make the interpreter's own directories reachable for the program's uid.

        Python may live under a directory others cannot enter (pyenv in /root, mode 0700): the program could
        then import only what the worker pre-imported. Cover each such directory with an empty tmpfs and
        bind-mount back just the Python prefixes and sys.path entries below it; the rest stays hidden.
        """
        paths = {sys.base_prefix, sys.prefix, sys.exec_prefix, sys.base_exec_prefix}
        paths |= {p for p in sys.path if p.startswith("/")}
        needed = {os.path.realpath(p) for p in paths if os.path.isdir(p)}
        blocked: dict[str, set] = {}
        for path in needed:
            parts = path.strip("/").split("/")
            for i in range(1, len(parts)):  # the topmost ancestor that others cannot traverse
                ancestor = "/" + "/".join(parts[:i])
                if not os.stat(ancestor).st_mode & 0o001:
                    blocked.setdefault(ancestor, set()).add(path)
                    break
        for ancestor, below in sorted(blocked.items()):
            keep = [p for p in below if not any(p != q and p.startswith(q + "/") for q in below)]
            fds = {p: os.open(p, os.O_PATH) for p in keep}  # handles that survive covering the ancestor
            _mount("tmpfs", ancestor, "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,mode=755")
            for path, fd in fds.items():
                os.makedirs(path, 0o755, exist_ok=True)
                _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC, None)
                os.close(fd)

    def _cgroups(self) -> None:
        """A memory and a pids cgroup per worker when the hierarchy is writable: a bound on a program's whole tree."""
        try:
            lines = open("/proc/self/cgroup").read().splitlines()
        except OSError:
            return
        for line in lines:
            _, controllers, path = line.split(":", 2)
            for ctl in controllers.split(","):
                if ctl not in ("memory", "pids"):
                    continue
                group = os.path.join("/sys/fs/cgroup", ctl, path.lstrip("/"), f"codelib-sandbox-{os.getpid()}")
                try:
                    os.mkdir(group)
                except OSError:
                    continue
                try:
                    if ctl == "memory":
                        # room for one program at its own limit, or one judged on plus inputs (PLUS_MEMORY_MB)
                        limit = max(2 * int(self.config["memory_mb"]) + 256, PLUS_MEMORY_MB + 512) << 20
                        with open(os.path.join(group, "memory.limit_in_bytes"), "w") as f:
                            f.write(str(limit))
                    else:
                        with open(os.path.join(group, "pids.max"), "w") as f:
                            f.write(str(int(self.config["max_procs"]) + 8))
                    self.cgroups.append(group)
                except OSError:
                    os.rmdir(group)

    # -- protocol

    def serve(self) -> None:
        caps = dict(uid=self.uid, pid=os.getpid(), root=self.root, cgroups=self.cgroups, missing=self.missing)
        self._send(caps)
        while True:
            request = self._recv()
            if request is None:
                break
            try:
                reply = self.handle(request)
            except Exception as e:  # a harness bug must not look like a verdict on the program
                reply = dict(status="error", detail=f"sandbox internal error: {type(e).__name__}: {e}"[:300])
            self._send(reply)
        for group in self.cgroups:
            try:
                os.rmdir(group)
            except OSError:
                pass

    def _recv(self) -> dict | None:
        head = self._read_exact(_FRAME.size)
        if head is None:
            return None
        body = self._read_exact(_FRAME.unpack(head)[0])
        return None if body is None else json.loads(body)

    def _read_exact(self, n: int) -> bytes | None:
        buf = bytearray()
        while len(buf) < n:
            chunk = os.read(self.proto_in, n - len(buf))
            if not chunk:
                return None
            buf += chunk
        return bytes(buf)

    def _send(self, reply: dict) -> None:
        data = json.dumps(reply).encode()
        data = _FRAME.pack(len(data)) + data
        while data:
            data = data[os.write(self.proto_out, data) :]

    # -- jobs

    def handle(self, req: dict) -> dict:
        if req["kind"] == "stdio":
            return self._stdio(req)
        r = self.execute(req, req.get("stdin"))
        reply = dict(status=r["status"], detail=r["detail"], duration_s=r["duration"], stdout=r["stdout"])
        reply.update(tests_passed=r["passed"], tests_total=r["total"], done=r["done"])
        if r.get("outputs") is not None:
            reply["outputs"] = r["outputs"]
        return reply

    def _stdio(self, req: dict) -> dict:
        cases, duration, stdout = req["cases"], 0.0, ""
        for k, case in enumerate(cases):
            expected = case["output"]
            cap = max(int(self.config["max_output_bytes"]), 2 * len(expected.encode()) + 4096)
            r = self.execute(dict(req, test_line=0, plus_inputs=""), case["input"], cap=cap, stdio=True)
            duration += r["duration"]
            stdout = r["stdout"]
            where = f"case {k + 1}/{len(cases)}"
            if r["status"] != "passed":
                status = r["status"] if r["status"] != "failed" else "error"
                return dict(status=status, detail=f"{where}: {r['detail']}", duration_s=duration, stdout=stdout[:VERDICT_STDOUT_CHARS],
                            tests_passed=k, tests_total=len(cases))  # fmt: skip
            same, why = _same_stdout(stdout, expected)
            if not same:
                return dict(status="failed", detail=f"{where}: wrong answer: {why}", duration_s=duration,
                            stdout=stdout[:VERDICT_STDOUT_CHARS], tests_passed=k, tests_total=len(cases))  # fmt: skip
        return dict(status="passed", detail="", duration_s=duration, stdout=stdout[:VERDICT_STDOUT_CHARS],
                    tests_passed=len(cases), tests_total=len(cases))  # fmt: skip

    def execute(self, req: dict, stdin: str | None, cap: int | None = None, stdio: bool = False) -> dict:
        """Fork one child for the program, watch it, kill what is left, and read the harness's report."""
        self.counter += 1
        workdir = os.path.join(self.root, f"run{self.counter}")
        os.mkdir(workdir, 0o700)
        if self.uid is not None:
            os.chown(workdir, self.uid, self.uid)
        stdin_path = os.devnull
        if stdin is not None:
            stdin_path = os.path.join(self.private, "stdin")
            with open(stdin_path, "w", encoding="utf-8") as f:
                f.write(stdin)
        token = os.urandom(16).hex().encode()
        pipes = [os.pipe() for _ in range(3)]  # stdout, stderr, report
        cap = cap or int(self.config["max_output_bytes"])
        timeout = float(req["timeout_s"])
        start = time.monotonic()
        pid = os.fork()
        if pid == 0:
            _child(self, req, workdir, stdin_path, pipes, token, stdio)  # never returns
        for _, w in pipes:
            os.close(w)
        reads = [r for r, _ in pipes]
        bufs = {fd: bytearray() for fd in reads}
        timed_out = overflow = False
        wstatus = None
        try:
            pidfd = os.pidfd_open(pid)  # readable when the child exits: one wait for output and exit together
        except (AttributeError, OSError):
            pidfd = None  # Linux < 5.3: poll waitpid every few milliseconds instead
        with selectors.DefaultSelector() as sel:
            if pidfd is not None:
                sel.register(pidfd, selectors.EVENT_READ, None)
            for fd in reads:
                sel.register(fd, selectors.EVENT_READ, fd)
            while wstatus is None:
                left = start + timeout - time.monotonic()
                if left <= 0:
                    timed_out = True
                    break
                for key, _ in sel.select(left if pidfd is not None else min(left, 0.005)):
                    if key.data is None:
                        wstatus = os.waitpid(pid, 0)[1]
                    else:
                        _drain(key.data, bufs[key.data], sel)
                if pidfd is None and wstatus is None:
                    got, status = os.waitpid(pid, os.WNOHANG)
                    wstatus = status if got else None
                if len(bufs[reads[0]]) + len(bufs[reads[1]]) > cap:
                    overflow = True
                    break
                if len(bufs[reads[2]]) > REPORT_CAP_BYTES:
                    overflow, cap = True, REPORT_CAP_BYTES
                    break
        if pidfd is not None:
            os.close(pidfd)
        if wstatus is None:
            os.kill(pid, signal.SIGKILL)
            wstatus = os.waitpid(pid, 0)[1]
        duration = time.monotonic() - start
        self._kill_leftovers()
        for fd in reads:  # every writer is dead now: read what is left, then EOF
            os.set_blocking(fd, False)
            try:
                while len(bufs[fd]) <= cap + 65536 and (chunk := os.read(fd, 1 << 16)):
                    bufs[fd] += chunk
            except BlockingIOError:
                pass
            os.close(fd)
        _rmtree(workdir)
        if self.uid is None and self.root == "/tmp/codelib-sandbox":
            for name in os.listdir("/tmp"):  # same user as the worker: it could write to the private /tmp itself
                if name != "codelib-sandbox":
                    _rmtree(os.path.join("/tmp", name))
        out = bytes(bufs[reads[0]][:cap]).decode("utf-8", "replace")
        err = bytes(bufs[reads[1]][-4096:]).decode("utf-8", "replace")
        result = _judge(bytes(bufs[reads[2]]), token, wstatus, timed_out, overflow, cap, err, stdio)
        result.update(duration=duration, stdout=out if stdio else out[:VERDICT_STDOUT_CHARS])
        return result

    def _kill_leftovers(self) -> None:
        """Kill every process the program left (they are our descendants: we are their subreaper) and reap them."""
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                pass  # a live descendant: kill below
        except ChildProcessError:
            return  # nothing left: the common case costs one syscall
        deadline = time.monotonic() + 5.0
        while True:
            self._kill_all()
            try:
                while os.waitpid(-1, os.WNOHANG)[0] != 0:
                    pass
            except ChildProcessError:
                return
            if time.monotonic() > deadline:
                return
            time.sleep(0.002)

    def _kill_all(self) -> None:
        if self.uid is not None:
            # kill(-1) from the program's own uid reaches exactly its processes, atomically (no fork slips past)
            pid = os.fork()
            if pid == 0:
                try:
                    os.setresgid(self.uid, self.uid, self.uid)
                    os.setresuid(self.uid, self.uid, self.uid)
                    os.kill(-1, signal.SIGKILL)
                finally:
                    os._exit(0)
            os.waitpid(pid, 0)
            return
        for pid in _descendants(os.getpid()):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def _drain(fd: int, buf: bytearray, sel) -> None:
    chunk = os.read(fd, 1 << 16)
    if chunk:
        buf += chunk
    else:
        sel.unregister(fd)


def _descendants(pid: int) -> list[int]:
    """Process ids below `pid`, from /proc/<pid>/task/*/children (the fallback without a uid of our own)."""
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


def _rmtree(path: str) -> None:
    """Remove a program's directory, whatever it did to it (shutil stays out of the worker: forks get cheaper)."""
    try:
        os.rmdir(path)
        return
    except FileNotFoundError:
        return
    except OSError:
        pass
    try:
        os.chmod(path, 0o700)  # a program may chmod its directories to 0; root ignores that, other users do not
        with os.scandir(path) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    _rmtree(entry.path)
                else:
                    os.unlink(entry.path)
        os.rmdir(path)
    except OSError:
        pass


_SIGNAMES = {getattr(signal, n): n for n in dir(signal) if n.startswith("SIG") and not n.startswith("SIG_")}


def _judge(report: bytes, token: bytes, wstatus: int, timed_out: bool, overflow: bool, cap: int, err: str,
           stdio: bool) -> dict:  # fmt: skip
    """The verdict of one run, from the harness's report (if it has the token) and how the process ended."""
    at = report.find(token)
    progress = report[: at if at >= 0 else len(report)]
    passed, failed = progress.count(b"+"), progress.count(b"-")
    static_total = 0
    if progress.startswith(b"=") and b";" in progress:
        static_total = int(progress[1 : progress.index(b";")] or 0)
    res = None
    if at >= 0:
        try:
            res = json.loads(report[at + len(token) :].split(b"\n", 1)[0])
        except ValueError:
            res = None
    out = dict(status="error", detail="", passed=passed, total=max(static_total, passed + failed, 1), done=False)
    if res is not None:
        out["total"] = res.get("total") or 1
        if not res.get("counted"):
            out["passed"] = 1 if res.get("done") and not res.get("first") else 0
        if res.get("outputs") is not None:
            out["outputs"] = res["outputs"]
    signum = os.WTERMSIG(wstatus) if os.WIFSIGNALED(wstatus) else 0
    if timed_out:
        out.update(status="timeout", detail="wall-time limit exceeded")
    elif overflow:
        out.update(status="error", detail=f"output limit exceeded ({cap} bytes)")
    elif res is not None and res.get("done"):
        out["done"] = True
        if res.get("first"):
            out.update(status="failed", detail=res["first"])
        elif res.get("counted") and passed < out["total"]:  # e.g. the harness's helpers were tampered with
            out.update(status="failed", detail=f"only {passed} of {out['total']} asserts reported passing")
        else:
            out.update(status="passed")
    elif res is not None and "exit" in res:
        code = res["exit"]
        if stdio and code in (None, 0):
            out.update(status="passed", done=True)
        elif stdio:
            out.update(detail=f"exit status {code}")
        else:
            out.update(detail=f"exited before the tests finished: SystemExit({code!r})")
    elif res is not None and "exc" in res:
        kind = res.get("exc_type", "")
        failed_first = res.get("first")
        if failed_first:
            out.update(status="failed", detail=failed_first)
        else:
            out.update(status="failed" if kind == "AssertionError" else "error", detail=res["exc"])
    elif signum == signal.SIGXCPU:
        out.update(status="timeout", detail="CPU-time limit exceeded")
    elif signum:
        out.update(detail=f"killed by {_SIGNAMES.get(signum, signum)}")
    elif stdio and os.WIFEXITED(wstatus) and os.WEXITSTATUS(wstatus) in (0, _EXIT_NO_CHANNEL):
        out.update(status="passed", done=True)  # a judge only asks for exit status 0 (os._exit(0) is common)
    elif os.WIFEXITED(wstatus) and os.WEXITSTATUS(wstatus) == _EXIT_NO_CHANNEL:
        out.update(detail="the program closed or broke the harness's report channel")
    elif os.WIFEXITED(wstatus):
        last = err.strip().splitlines()[-1][:200] if err.strip() else ""
        tail = f" ({last})" if last else ""
        out.update(detail=f"exited with status {os.WEXITSTATUS(wstatus)} before the harness reported{tail}")
    if out["status"] != "passed":
        out["passed"] = min(out["passed"], out["total"])
    return out


def _limits(req: dict, config: dict) -> None:
    cpu = math.ceil(float(req["timeout_s"])) + 1
    rl = resource
    for what, value in (
        (rl.RLIMIT_CPU, (cpu, cpu + 1)),
        (rl.RLIMIT_AS, (int(req["memory_mb"]) << 20,) * 2),
        (rl.RLIMIT_FSIZE, (int(config["max_file_mb"]) << 20,) * 2),
        (rl.RLIMIT_NOFILE, (int(config["max_open_files"]),) * 2),
        (rl.RLIMIT_CORE, (0, 0)),
    ):
        rl.setrlimit(what, value)


def _child(server: _Server, req: dict, workdir: str, stdin_path: str, pipes, token: bytes, stdio: bool):
    """The forked child: confine itself, then run the harness. Never returns."""
    try:
        os.setsid()
        for group in server.cgroups:
            with open(os.path.join(group, "cgroup.procs"), "w") as f:
                f.write("0")
        fd = os.open(stdin_path, os.O_RDONLY)
        os.dup2(fd, 0)
        os.dup2(pipes[0][1], 1)
        os.dup2(pipes[1][1], 2)
        os.dup2(pipes[2][1], _REPORT_FD, inheritable=False)
        os.closerange(3, _REPORT_FD)
        os.closerange(_REPORT_FD + 1, 1 << 16)
        os.chdir(workdir)
        _limits(req, server.config)
        if server.uid is not None:
            uid = server.uid
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            resource.setrlimit(resource.RLIMIT_NPROC, (int(server.config["max_procs"]),) * 2)
        else:
            resource.setrlimit(resource.RLIMIT_NPROC, (server.nproc, server.nproc))
            _drop_capabilities()  # in a user namespace the worker is root there: the program must not be
        _call("prctl", PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        _call("prctl", PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        if os.getppid() != server.config.get("_pid", os.getppid()):
            os._exit(70)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGALRM, signal.SIGCHLD, signal.SIGUSR1, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # an oversized write fails with EFBIG instead of killing
        os.environ.update(HOME=workdir, TMPDIR=workdir, PWD=workdir)
        import atexit

        atexit._clear()  # callbacks the worker registered are not the program's
        _harness(req, token, stdio)
    except BaseException:
        pass
    os._exit(70)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _drop_capabilities() -> None:
    """capset(2) with empty sets: no capability left, in any namespace."""
    header, data = _CapHeader(0x20080522, 0), (_CapData * 2)()  # _LINUX_CAPABILITY_VERSION_3: two 32-bit words
    _call("capset", ctypes.byref(header), data)


def _owner(pid: str) -> int:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return -1


def _harness(req: dict, token: bytes, stdio: bool):
    """Run the program in this (child) process; the epilogue reports the token only if it got there."""
    import builtins
    import random
    import types

    # bound now: the program may monkeypatch os, json or hashlib
    write, report_fd, dumps, sha256 = os.write, _REPORT_FD, json.dumps, _sha256
    sys.stdin = sys.__stdin__ = open(0, encoding="utf-8", errors="replace", closefd=False)
    sys.stdout = sys.__stdout__ = open(1, "w", encoding="utf-8", errors="replace", closefd=False)
    sys.stderr = sys.__stderr__ = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False)
    streams = (sys.stdout, sys.stderr)
    sys.argv = ["main.py"]
    random.seed()  # the worker's generator state would otherwise repeat in every child
    state = {"first": None}

    def ok():
        write(report_fd, b"+")

    def fail(exc: BaseException, where: str):
        write(report_fd, b"-")
        if state["first"] is None:
            text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            state["first"] = f"{where}: {text}"[:300]

    module = types.ModuleType("__main__")
    namespace = module.__dict__
    namespace.update(__builtins__=builtins, __codelib_ok__=ok, __codelib_fail__=fail, __codelib_E__=Exception)
    sys.modules["__main__"] = module
    del module  # sys.modules holds it, so that interpreter-exit emulation can drop it
    result: dict = {"done": False}
    source = req["program"]
    try:
        codes, total = _compile(source, int(req.get("test_line") or 0))
        result.update(total=total, counted=total > 0)
        write(report_fd, b"=%d;" % total)  # so a run that times out still reports how many asserts passed
        for code in codes:
            exec(code, namespace)
        if req.get("plus_inputs"):
            result["outputs"] = _outputs(namespace.get(req["entry_point"]), req["plus_inputs"],
                                         int(req.get("digest_over") or 0), sha256)  # fmt: skip
        result["done"] = True
    except SystemExit as e:
        result["exit"] = e.code if isinstance(e.code, (int, type(None))) else str(e.code)[:100]
    except BaseException as e:
        result["exc"], result["exc_type"] = _describe(e), type(e).__name__
    if stdio:
        del namespace
        _exit_like_python(streams)
    for s in streams + (sys.stdout, sys.stderr):
        try:
            s.flush()
        except BaseException:
            pass
    result["first"] = state["first"]
    try:
        data = dumps(result)
    except BaseException:
        data = dumps({"exc": "the harness could not encode the result"})
    data = token + data.encode() + b"\n"
    try:
        while data:
            data = data[write(report_fd, data) :]
    except BaseException:
        os._exit(_EXIT_NO_CHANNEL)
    os._exit(0)


def _exit_like_python(streams: tuple) -> None:
    """What the interpreter does at exit, in its order: wait for non-daemon threads, run atexit callbacks, flush and
    restore the standard streams, then drop the main module so that its objects' finalizers run with their globals
    intact (a collection of the now-unreachable namespace). Stdio solutions rely on each of these:
    `threading.Thread(target=main).start()`, `atexit.register(flush)`, a buffered writer flushed in `__del__`."""
    import atexit
    import gc

    def restore():
        for s in (sys.stdout, sys.stderr):
            s.flush()
        sys.stdin, sys.stdout, sys.stderr = sys.__stdin__, streams[0], streams[1]

    for step in (threading._shutdown, atexit._run_exitfuncs, restore, lambda: sys.modules.pop("__main__"), gc.collect):
        try:
            step()
        except BaseException:
            pass


def _describe(e: BaseException) -> str:
    """'Type: message (line n)' for an exception raised by the program."""
    line = getattr(e, "lineno", None) if isinstance(e, SyntaxError) else None
    tb = e.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<program>":
            line = tb.tb_lineno
        tb = tb.tb_next
    try:
        message = e.msg if isinstance(e, SyntaxError) else str(e)
        text = f"{type(e).__name__}: {message}" if message else type(e).__name__
    except BaseException:
        text = type(e).__name__
    if isinstance(e, MemoryError):
        text += " (memory limit)"
    return (text[:250] + (f" (line {line})" if line else "")).strip()


def _compile(source: str, test_line: int) -> tuple[list, int]:
    """Code objects for the program and the number of counted tests.

    The part before `test_line` (the solution) and the rest (the tests) compile separately, so a solution cannot
    swallow the tests (an unclosed string or bracket is a syntax error, not a program without tests). In the
    tests, each top-level statement holding an assert, and each such statement at the top of a `check`
    function, is wrapped so that a failing one is counted and the next still runs.
    """
    if test_line <= 1:
        return [compile(source, "<program>", "exec")], 0
    at = -1
    for _ in range(test_line - 1):
        at = source.find("\n", at + 1)
        if at < 0:
            return [compile(source, "<program>", "exec")], 0
    head, tail = source[: at + 1], "\n" * (test_line - 1) + source[at + 1 :]  # padding keeps line numbers
    codes = [compile(head, "<program>", "exec")]
    tree = ast.parse(tail, "<program>")
    lines = tail.split("\n")
    total = 0

    def has_assert(stmt) -> bool:  # on the text: cheaper than walking the tree, and a false hit is harmless
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return False
        return any("assert" in line for line in lines[stmt.lineno - 1 : stmt.end_lineno])

    def at_stmt(node, stmt):
        node.lineno, node.col_offset = stmt.lineno, stmt.col_offset
        node.end_lineno, node.end_col_offset = stmt.end_lineno, stmt.end_col_offset
        return node

    def call(stmt, name, *args):
        func = at_stmt(ast.Name(name, ast.Load()), stmt)
        return at_stmt(ast.Expr(at_stmt(ast.Call(func, list(args), []), stmt)), stmt)

    def guard(stmt):
        nonlocal total
        total += 1
        where = at_stmt(ast.Constant(f"line {stmt.lineno}: " + lines[stmt.lineno - 1].strip()[:120]), stmt)
        error = at_stmt(ast.Name("__codelib_e__", ast.Load()), stmt)
        handler = at_stmt(
            ast.ExceptHandler(
                type=at_stmt(ast.Name("__codelib_E__", ast.Load()), stmt),
                name="__codelib_e__",
                body=[call(stmt, "__codelib_fail__", error, where)],
            ),
            stmt,
        )
        return at_stmt(
            ast.Try(body=[stmt], handlers=[handler], orelse=[call(stmt, "__codelib_ok__")], finalbody=[]), stmt
        )

    for i, node in enumerate(tree.body):
        if isinstance(node, ast.FunctionDef) and node.name == "check":
            node.body = [guard(s) if has_assert(s) else s for s in node.body]
        elif has_assert(node):
            tree.body[i] = guard(node)
    codes.append(compile(tree, "<program>", "exec"))
    return codes, total


def _outputs(fn, plus_inputs: str, digest_over: int = 0, sha256=None) -> list:
    """The entry point's output on each plus input, encoded; a raising call gives an error tag. With digest_over,
    a plain output whose encoding is longer than that is replaced by {"h": its sha256}."""
    inputs = _decode_args(json.loads(plus_inputs))
    if not callable(fn):
        return [{"e": "the entry point is not defined"}] * len(inputs)
    out = []
    for args in inputs:
        try:
            enc = _encode(fn(*args))
        except Exception as e:
            out.append({"e": type(e).__name__})
            continue
        digest = _digest(enc, sha256, digest_over) if digest_over and not _toleranced(enc) else None
        if digest is not None:
            enc = {"h": digest[1]}
        out.append(enc)
    return out


class _NotPlain(Exception):
    """A node `_same_plus_output` does not compare exactly: the output travels as its value."""


def _digest(enc, sha256, over: int = 0) -> tuple[int, str] | None:
    """(length, sha256 hex) of an `_encode` tree's canonical text when that text is longer than `over` bytes; None
    when it is shorter or the tree holds a set, dict or object (compared otherwise). One walk; a short text is never
    hashed, and the text is never held whole (chunks are held only until they pass `over`).

    Numbers are written as `==` sees them (True as 1, 2.0 as 2, ints beyond 64 bits in hex), so outputs Python
    calls equal (`[1, 2] == [1.0, 2.0]`) get equal digests; strings are length-prefixed, so no two trees share a text.
    """
    h, buf, held, size = None, [], [], 0

    def flush():
        nonlocal h, size
        chunk = "".join(buf).encode("utf-8", "surrogatepass")
        buf.clear()
        size += len(chunk)
        if h is not None:
            h.update(chunk)
            return
        held.append(chunk)
        if size > over:
            h = sha256()
            for c in held:
                h.update(c)
            held.clear()

    def feed(x):
        if isinstance(x, list):
            buf.append("[")
            for v in x:
                feed(v)
            buf.append("]")
        elif isinstance(x, dict):
            if len(x) != 1 or not ("t" in x or "i" in x or "f" in x):
                raise _NotPlain
            ((tag, v),) = x.items()
            if tag == "t":
                buf.append("(")
                for i in v:
                    feed(i)
                buf.append(")")
            else:
                buf.append(f"{v};" if tag == "i" else f"f{v};")  # "i": an int beyond 64 bits, in hex
        elif x is None:
            buf.append("N;")
        elif isinstance(x, str):
            buf.append(f"s{len(x)}:")
            buf.append(x)
        elif isinstance(x, float) and x.is_integer():
            n = int(x)  # as `_encode` writes an int: decimal within 64 bits, hex beyond
            buf.append(f"{n};" if -(1 << 63) <= n < (1 << 63) else f"{hex(n)};")
        else:  # int (within 64 bits: `_encode` tags bigger ones), bool (as 0/1) or a non-integral float
            buf.append(f"{int(x)};" if isinstance(x, bool) else f"{x!r};")
        if len(buf) > 4096:
            flush()

    try:
        feed(enc)
    except _NotPlain:
        return None
    flush()
    return (size, h.hexdigest()) if h is not None else None


def _toleranced(enc) -> bool:
    """A float or a flat sequence of floats: `_same_plus_output` compares it with a tolerance, so it needs values."""

    def is_float(v):
        return isinstance(v, float) or (isinstance(v, dict) and "f" in v)

    seq = enc if isinstance(enc, list) else enc.get("t") if isinstance(enc, dict) else None
    return is_float(enc) or (seq is not None and all(is_float(v) for v in seq))


def _plain(enc) -> bool:
    """Whether an `_encode` tree is compared exactly, so it may travel as a digest: None, bools, ints, strings,
    lists, tuples and floats inside them, but not a float or a flat sequence of floats, nor sets, dicts or objects."""
    return not _toleranced(enc) and _digest(enc, _sha256) is not None


_SPECIAL_ORACLES = _MBPP_SET_EQ | _MBPP_NOT_NONE | {"are_equivalent", "sum_div", "surface_Area",
                                                     "digit_distance_nums", "find_zero"}  # fmt: skip


def _digest_ok(job: Job) -> bool:
    """Whether large outputs may be compared by digest: exact comparison (EvalPlus's special oracles and float
    tolerances need the values)."""
    return job.atol == 0 and job.entry_point not in _SPECIAL_ORACLES


def _serve(config: dict) -> None:
    import site  # started with -S: add what site would, minus the .pth hooks (exit(), quit(), help(), site-packages)

    site.setquit()
    site.setcopyright()
    site.sethelper()
    sys.path += [p for p in config.get("site_packages", []) if p not in sys.path]
    server = _Server(config)
    config["_pid"] = os.getpid()
    server.serve()


if __name__ == "__main__" and sys.argv[1:2] == ["--serve"]:
    _serve(json.loads(sys.argv[2]))
