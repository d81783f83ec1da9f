"""The judge: runs a task's tests in a trusted process that never executes the candidate's code. Standard library only.

The worker forks one judge per run (a fresh process as its own uid, not dumpable, under limits). The judge reads
the test spec from a pipe only the parent writes, executes the task's prompt (HumanEval's `poly`,
`encode_cyclic`, ... are the dataset's own), binds the entry point to a `Proxy`, runs the tests with every assert
counted, calls the entry point on the plus inputs, and writes its result to a pipe only the parent reads. The
program sits at the other end of a socket: it receives call arguments and answers plain data (`wire`), nothing
else. It never sees the tests, an expected value or the verdict, and nothing it sends can run code here.
"""

from __future__ import annotations

import builtins
import json
import os
import reprlib
import time

from . import wire
from .asserts import compile_tests, describe, sanitize
from .proxy import (  # noqa: F401 - the judge's exceptions stay importable from here
    REPLY_CAP_BYTES,
    CallTimeout,
    Channel,
    NotPlainData,
    ProgramDied,
    ProgramError,
    Proxy,
)

JUDGE_MEMORY_MB = 2048  # the judge's address space, at least (plus inputs: the pool's PLUS_MEMORY_MB)


_UNSET = object()  # no `assert <call> == ...` value recorded (None is a value a function returns)


def _short_repr(value, limit: int = 80) -> str:
    """repr of a returned value, bounded before it is built (a huge list costs nothing)."""
    r = reprlib.Repr()
    r.maxlevel, r.maxlist, r.maxtuple, r.maxset, r.maxdict = 3, 8, 8, 8, 6
    r.maxstring = r.maxother = r.maxlong = limit
    try:
        return r.repr(value)[:limit]
    except Exception:
        return "?"


# ---------------------------------------------------------------------------------------------------------------
# the judge process


_CODE: dict = {}  # the judge server lives across runs: tasks repeat (a group of samples, an eval's n samples)


def _compiled(filename: str, source: str):
    key = (filename, source)
    if key not in _CODE:
        if len(_CODE) > 1024:
            _CODE.clear()
        _CODE[key] = compile(source, filename, "exec")
    return _CODE[key]


def compiled_tests(tests: str) -> tuple[list, int]:
    """The tests' code objects and counted asserts, compiled once per text (the judge's, and the parent's count)."""
    key = ("<tests>", tests)
    if key not in _CODE:
        if len(_CODE) > 1024:
            _CODE.clear()
        _CODE[key] = compile_tests("", tests, "<tests>", got=True)
    return _CODE[key]


def run(spec: dict, channel: Channel) -> dict:
    """Run the tests of `spec` against the program behind `channel`; the result the parent turns into a verdict."""
    result: dict = {"done": False, "passed": 0, "total": 0, "first": None}
    state = {"passed": 0, "first": None, "got": _UNSET}

    def got(value):
        state["got"] = value  # the value an `assert <call> == ...` compares (plain data: it crossed the wire)
        return value

    def ok():
        state["passed"] += 1
        state["got"] = _UNSET

    def fail(exc: BaseException, where: str):
        if state["first"] is None:
            text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            if isinstance(exc, AssertionError) and state["got"] is not _UNSET:
                text += f" (got {_short_repr(state['got'])})"
            state["first"] = sanitize(f"{where}: {text}")
        state["got"] = _UNSET

    try:
        if "calls" not in spec:
            codes, result["total"] = compiled_tests(spec["tests"])  # known whatever the program does
        else:
            codes, result["total"] = [], len(json.loads(spec["calls"]))
        hello = channel.recv()  # the program's own code ran to its end, or it says why not
        if hello.get("ready") is not True:
            result["program_error"] = sanitize(hello.get("error")) or "the program did not start"
            result["program_error_type"] = sanitize(hello.get("type"), 60)
            return result
        if "calls" in spec:
            _run_calls(spec, channel, result, state)
            return result
        channel.truthy = spec.get("truthy") is True
        namespace = {"__name__": "__main__", "__builtins__": builtins}
        if spec.get("prelude"):
            exec(_compiled("<prompt>", spec["prelude"]), namespace)
        for module in spec.get("imports", []):
            namespace[module] = __import__(module)
        for name in spec["names"]:
            namespace[name] = Proxy(channel, name)
        namespace.update(__codelib_ok__=ok, __codelib_fail__=fail, __codelib_E__=Exception, __codelib_got__=got)
        for code in codes:
            exec(code, namespace)
        if spec.get("plus_inputs") and spec.get("expected") is not None:
            result["plus"] = _plus_compare(channel, spec)  # [matched, judged, first mismatch or -1]
        elif spec.get("plus_inputs"):
            result["outputs"] = _plus_outputs(channel, spec)  # a reference run: its outputs go to the parent
        result["done"] = True
    except ProgramDied as e:
        result["died"] = str(e)[:300]
    except BaseException as e:
        result["exc"], result["exc_type"] = sanitize(describe(e, "<tests>")), type(e).__name__
    finally:
        result["passed"], result["first"], result["calls"] = state["passed"], state["first"], channel.calls
    return result


def _default_equal(got, want) -> bool:
    """LiveCodeBench's rule when no comparator is named: a tuple stands for a list, then ==."""

    def norm(x):
        if type(x) in (list, tuple):
            return [norm(v) for v in x]
        return x

    try:
        return norm(got) == norm(want)
    except RecursionError:
        return False


def _comparator(name: str):
    """(value_equal, prepare_args) of the benchmark named `name` (`compare.py`; LCB's rule without it)."""
    try:
        from . import compare  # the benchmarks' comparators (imported by the worker before its chroot)
    except ImportError:
        return (lambda got, want: _default_equal(got, want)), (lambda args: args)
    return (lambda got, want: bool(compare.value_equal(name, got, want))), (
        lambda args: compare.prepare_args(name, args)
    )


def _run_calls(spec: dict, channel: Channel, result: dict, state: dict) -> None:
    """A "calls" job: each case's arguments parsed here as data, one proxied call per case with its own time
    budget, each value compared with the task's comparator. A timed-out call ends the run (the program is stuck)."""
    import sys

    sys.set_int_max_str_digits(0)  # the cases are data: LiveCodeBench and TACO hold ints of more than 4300 digits
    cases = json.loads(spec["calls"])
    result["total"] = len(cases)
    equal, prepare = _comparator(str(spec.get("compare") or ""))
    entry, budget = str(spec["entry_point"]), float(spec.get("per_call_s") or 0) or None
    for i, case in enumerate(cases):
        where = f"test {i + 1}/{len(cases)}"
        try:
            args = tuple(prepare([json.loads(line) for line in str(case["input"]).split("\n") if line.strip()]))
            want = json.loads(case["output"])
        except (ValueError, TypeError, KeyError) as e:
            raise ValueError(f"{where}: the task's case is not JSON ({e})") from None
        channel.deadline = time.monotonic() + budget if budget else None
        try:
            got = channel.call(entry, args, {}, mutations=False)
        except CallTimeout:
            result["call_timeout"] = f"{where}: time limit exceeded ({budget:g} s)"
            return
        except ProgramDied:
            raise
        except BaseException as e:
            if state["first"] is None:
                state["first"] = sanitize(f"{where}: {type(e).__name__}: {e}")
            continue
        finally:
            channel.deadline = None
        del args
        if equal(got, want):
            state["passed"] += 1
        elif state["first"] is None:
            state["first"] = sanitize(f"{where}: wrong answer (got {_short_repr(got)}, expected {_short_repr(want)})")
    result["done"] = True


def _plus_compare(channel: Channel, spec: dict) -> list:
    """The program's output on each plus input compared here, with EvalPlus's rules (`plus.compare`), against the
    reference's: one output at a time, each answer capped at 4x its expected output's size (+1 MB). The judge's
    deadline bounds the work; the parent receives three numbers."""
    import types

    from . import plus

    inputs = wire.decode_args(json.loads(spec["plus_inputs"]))
    expected = json.loads(spec["expected"])
    entry, over = spec["entry_point"], int(spec.get("digest_over") or 0)
    job = types.SimpleNamespace(
        task_id=spec.get("task_id", ""),
        entry_point=entry,
        atol=float(spec.get("atol") or 0),
        plus_inputs=spec["plus_inputs"],
    )
    good = total = 0
    first_bad = -1
    cap = channel.cap
    for i, args in enumerate(inputs):
        exp = wire.decode(expected[i], extra="he") if i < len(expected) else wire.Raised("missing")
        if isinstance(exp, wire.Raised):
            continue  # the reference raised: EvalPlus skips the input
        total += 1
        channel.cap = min(cap, 4 * len(json.dumps(expected[i])) + (1 << 20))
        try:
            out = wire.decode(channel.call(entry, tuple(args), {}, digest_over=over), extra="he")
        except (Exception, RecursionError) as e:
            out = wire.Raised(type(e).__name__)
        finally:
            channel.cap = cap
        try:
            ok = not isinstance(out, wire.Raised) and plus._same_plus_output(job, args, out, exp, job.atol)
        except Exception:
            ok = False
        good += bool(ok)
        if not ok and first_bad < 0:
            first_bad = i
    return [good, total, first_bad]


def _plus_outputs(channel: Channel, spec: dict) -> list:
    """The program's output on each plus input, as wire trees ({"e": type} for a call that raised)."""
    inputs = wire.decode_args(json.loads(spec["plus_inputs"]))
    entry, over = spec["entry_point"], int(spec.get("digest_over") or 0)
    out = []
    for args in inputs:
        try:
            out.append(channel.call(entry, tuple(args), {}, digest_over=over))
        except (Exception, RecursionError) as e:
            out.append({"e": type(e).__name__})
    return out


def main(spec_fd: int, result_fd: int, call_fd: int) -> None:
    """One run: read the spec, judge, write the result; every descriptor closed at the end."""
    try:
        chunks = []
        while chunk := os.read(spec_fd, 1 << 20):
            chunks.append(chunk)
        spec = json.loads(b"".join(chunks))
        result = run(spec, Channel(call_fd))
        os.close(call_fd)  # the program sees EOF and exits
        call_fd = -1
        data = json.dumps(result).encode()
        while data:
            data = data[os.write(result_fd, data) :]
    finally:
        for fd in (spec_fd, result_fd, call_fd):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass


def serve(sock_fd: int) -> None:
    """The judge server: one run per message from the worker (its three descriptors), b"d" back when done."""
    import socket

    sock = socket.socket(fileno=sock_fd)
    sock.sendall(str(os.getpid()).encode())  # its pid in the worker's pid namespace: not a leftover of a run
    while True:
        msg, fds, _, _ = socket.recv_fds(sock, 16, 3)
        if not msg:
            return
        if len(fds) == 3:
            try:
                main(*fds)
            except BaseException:  # a broken pipe, a spec that does not parse: the parent sees no result
                pass
        else:
            for fd in fds:
                os.close(fd)
        sock.sendall(b"d")
