"""The harness: what runs in the untrusted child, around the program. Standard library only.

Two modes, both after the worker has confined the child (`worker._child`):

- `serve` (function tasks judged outside): run the program (the task's prompt + the completion, no tests), say
  "ready" (or why not) on the call socket, then answer the judge's calls: plain-data arguments in, plain-data
  results out (`wire`). Nothing here knows the tests, the expected values or the verdict.
- `inside` (stdio programs, plain programs, and tasks whose tests cannot run outside): run the whole program
  in-process; the epilogue reports, on a hidden fd, a per-run token followed by the result. No token, no pass. The
  program can read that token from its own memory: a verdict given inside holds against accidents and simple
  reward hacks, not against a program that looks around (`Verdict.judge` says which judge gave it).
"""

from __future__ import annotations

import builtins
import json
import os
import sys
import types

from . import judge, wire
from .tamper import TAMPER_CLASSES, TAMPER_FD, watch_tamper  # noqa: F401 - TAMPER_CLASSES: importable from here

EXIT_NO_CHANNEL = 71  # the harness finished but could not report: the program closed or broke its channel
REPORT_FD = 1000  # inside: the report channel, above RLIMIT_NOFILE so the program can never open a file onto it
CALL_FD = 1001  # serve: the judge's socket


def _our_files() -> tuple:
    here = os.path.dirname(os.path.abspath(__file__))
    # the modules split off these (tamper, asserts, proxy, confinement) are ours too
    ours = ("harness.py", "judge.py", "spawn.py", "wire.py", "worker.py")
    return tuple(os.path.join(here, f) for f in (*ours, "tamper.py", "asserts.py", "proxy.py", "confinement.py"))


_OURS = _our_files()


def _streams():
    # the benchmarks' own harnesses lift Python's int-to-text digit limit (lcb_runner sets 50000; TACO predates it):
    # a solution may print 7**6000. The program's time limit bounds what a huge conversion costs.
    sys.set_int_max_str_digits(0)
    sys.stdin = sys.__stdin__ = open(0, encoding="utf-8", errors="replace", closefd=False)
    sys.stdout = sys.__stdout__ = open(1, "w", encoding="utf-8", errors="replace", closefd=False)
    sys.stderr = sys.__stderr__ = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False)
    sys.argv = ["main.py"]
    return sys.stdout, sys.stderr


def _flush(streams) -> None:
    for s in streams + (sys.stdout, sys.stderr):
        try:
            s.flush()
        except BaseException:
            pass


def _main_module():
    module = types.ModuleType("__main__")
    module.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = module
    return module.__dict__


# ---------------------------------------------------------------------------------------------------------------
# serve: answer the judge's calls


def serve(program: str, sha256) -> None:
    """Run `program`, then answer calls on CALL_FD until the judge closes it. Never returns."""
    streams = _streams()
    watch_tamper(_OURS)
    write, read, fd = os.write, os.read, CALL_FD

    def send(obj) -> None:
        try:
            data = wire.frame(obj)
        except (TypeError, ValueError):
            data = wire.frame({"n": "returned something that is not plain data"})
        while data:
            data = data[write(fd, data) :]

    def recv():
        head = _read(read, fd, wire.FRAME.size)
        if head is None:
            return None
        body = _read(read, fd, wire.FRAME.unpack(head)[0])
        return None if body is None else json.loads(body)

    namespace = _main_module()
    try:
        exec(compile(program, "<program>", "exec"), namespace)
    except SystemExit as e:
        code = e.code if isinstance(e.code, (int, type(None))) else str(e.code)[:100]
        _flush(streams)
        send({"error": f"exited before the tests ran: SystemExit({code!r})", "type": "SystemExit"})
        os._exit(0)
    except BaseException as e:
        _flush(streams)
        send({"error": judge.describe(e), "type": type(e).__name__})
        os._exit(0)
    send({"ready": True})
    while (request := recv()) is not None:
        _flush(streams)
        send(_answer(namespace, request, sha256))
    _flush(streams)
    os._exit(0)


def _read(read, fd: int, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = read(fd, n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def _answer(namespace: dict, request: dict, sha256) -> dict:
    name = request["f"]
    args = wire.decode(request["a"])
    kwargs = wire.decode(request["k"]) if "k" in request else {}
    try:
        if "." in name:  # "Solution.method": LeetCode's convention, a fresh instance per call
            owner, method = name.split(".", 1)
            cls = namespace.get(owner)
            fn = getattr(cls(), method) if callable(cls) else None
        else:
            fn = namespace.get(name)
        if not callable(fn):
            return {"x": "NameError", "msg": f"name {name!r} is not defined by the program"}
        value = fn(*args, **kwargs)
    except BaseException as e:  # SystemExit too: the call did not return
        try:
            message = str(e)[:500]
        except BaseException:
            message = ""
        return {"x": type(e).__name__, "msg": message}
    try:
        if "o" in request:
            return {"r": wire.output(value, int(request["o"] or 0), sha256)}
        reply = {"r": wire.encode(value)}
        if "n" not in request and any(type(a) in (list, dict, set) for a in args):
            reply["m"] = [wire.encode(a) for a in args]
        return reply
    except wire.WireError as e:
        if "t" in request:  # a task whose tests ask only whether the result is truthy (re.Match)
            try:
                return {"r": bool(value)}
            except BaseException as b:
                return {"x": type(b).__name__, "msg": ""}
        return {"n": f"returned something that is not plain data: {e}"}
    except RecursionError:
        return {"n": "returned something nested too deeply"}


# ---------------------------------------------------------------------------------------------------------------
# inside: the whole program in this process, reported with a token


def inside(req: dict, token: bytes, stdio: bool, sha256) -> None:
    """Run the program in this process; the epilogue reports the token only if it got there. Never returns."""
    write, report_fd, dumps = os.write, REPORT_FD, json.dumps  # bound now: the program may monkeypatch os or json
    streams = _streams()
    watch_tamper(_OURS)
    state = {"first": None}

    def ok():
        write(report_fd, b"+")

    def fail(exc: BaseException, where: str):
        write(report_fd, b"-")
        if state["first"] is None:
            text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            state["first"] = f"{where}: {text}"[:300]

    namespace = _main_module()
    namespace.update(__codelib_ok__=ok, __codelib_fail__=fail, __codelib_E__=Exception)
    result: dict = {"done": False}
    try:
        codes, total = _compile(req["program"], int(req.get("test_line") or 0))
        result.update(total=total, counted=total > 0)
        write(report_fd, b"=%d;" % total)  # so a run that times out still reports how many asserts passed
        for code in codes:
            exec(code, namespace)
        if req.get("plus_inputs"):
            result["outputs"] = _outputs(
                namespace.get(req["entry_point"]), req["plus_inputs"], int(req.get("digest_over") or 0), sha256
            )
        result["done"] = True
    except SystemExit as e:
        result["exit"] = e.code if isinstance(e.code, (int, type(None))) else str(e.code)[:100]
    except BaseException as e:
        result["exc"], result["exc_type"] = judge.describe(e), type(e).__name__
    if stdio:
        del namespace
        _exit_like_python(streams)
    _flush(streams)
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
        os._exit(EXIT_NO_CHANNEL)
    os._exit(0)


def _compile(source: str, test_line: int) -> tuple[list, int]:
    """The program split at `test_line`: the solution as is, the tests with every assert counted."""
    if test_line <= 1:
        return [compile(source, "<program>", "exec")], 0
    at = -1
    for _ in range(test_line - 1):
        at = source.find("\n", at + 1)
        if at < 0:
            return [compile(source, "<program>", "exec")], 0
    head, tail = source[: at + 1], "\n" * (test_line - 1) + source[at + 1 :]  # padding keeps line numbers
    return judge.compile_tests(head, tail)


def _outputs(fn, plus_inputs: str, digest_over: int = 0, sha256=None) -> list:
    """The entry point's output on each plus input, as wire trees; a raising call gives {"e": type}."""
    inputs = wire.decode_args(json.loads(plus_inputs))
    if not callable(fn):
        return [{"e": "the entry point is not defined"}] * len(inputs)
    out = []
    for args in inputs:
        try:
            out.append(wire.output(fn(*args), digest_over, sha256))
        except wire.WireError:
            out.append({"e": "NotPlainData"})
        except Exception as e:
            out.append({"e": type(e).__name__})
    return out


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

    threading = sys.modules.get("threading")  # imported by the program, if it started threads
    shutdown = getattr(threading, "_shutdown", None) or (lambda: None)
    for step in (shutdown, atexit._run_exitfuncs, restore, lambda: sys.modules.pop("__main__"), gc.collect):
        try:
            step()
        except BaseException:
            pass
