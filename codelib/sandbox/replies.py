"""What comes back from a worker, checked field by field: a reply is data from processes a program may have
tampered with, so every field is type- and range-checked and a malformed one raises `Malformed` (the run's verdict
is then an `error` naming it), never an exception in `check()`, the rewards or the evaluator. Standard library only.
"""

from __future__ import annotations

import math

from . import wire

STATUSES = ("passed", "failed", "timeout", "error")


class Malformed(Exception):
    pass


def number(d: dict, key: str) -> float:
    v = d.get(key, 0.0)
    if type(v) not in (int, float) or not math.isfinite(v) or v < 0:
        raise Malformed(f"{key} is not a non-negative number")
    return float(v)


def count(d: dict, key: str) -> int:
    v = d.get(key, 0)
    if type(v) is not int or not 0 <= v < 1 << 31:
        raise Malformed(f"{key} is not a count")
    return v


def text(d: dict, key: str) -> str:
    v = d.get(key, "")
    if type(v) is not str:
        raise Malformed(f"{key} is not text")
    return v


def status(d: dict) -> str:
    v = d.get("status")
    if v not in STATUSES:
        raise Malformed(f"status {str(v)[:40]!r} is not one of {', '.join(STATUSES)}")
    return v


def decode_outputs(outputs) -> list:
    if type(outputs) is not list:
        raise Malformed("outputs is not a list")
    try:
        return [wire.decode(o, extra="he") for o in outputs]
    except wire.WireError as e:
        raise Malformed(f"outputs: {e}") from None


def judge_result(data: bytes | None) -> dict:
    """The judge's result, its fields checked; {} when there is none."""
    if not data:
        return {}
    try:
        r = wire.loads(data)
    except wire.WireError:
        return {}
    if type(r) is not dict:
        return {}
    out = {}
    for key in ("passed", "total", "calls"):
        if type(r.get(key)) is int and 0 <= r[key] < 1 << 31:
            out[key] = r[key]
    for key in ("first", "exc", "exc_type", "died", "program_error", "program_error_type", "call_timeout"):
        if type(r.get(key)) is str:
            out[key] = r[key][:300]
    if r.get("done") is True:
        out["done"] = True
    if type(r.get("outputs")) is list:
        out["outputs"] = r["outputs"]
    p = r.get("plus")
    if type(p) is list and len(p) == 3 and all(type(x) is int and -1 <= x < 1 << 31 for x in p) and p[0] <= p[1]:
        out["plus"] = p
    return out


def how(ended: dict, stderr: str) -> str:
    sig = ended.get("signal")
    if type(sig) is int:
        try:
            import signal

            return f"killed by {signal.Signals(sig).name}"
        except ValueError:
            return f"killed by signal {sig}"
    code = ended.get("exit")
    last = stderr.strip().splitlines()[-1][:200] if stderr.strip() else ""
    return f"exit status {code}" + (f"; {last}" if last else "") if type(code) is int else "no exit status"


def died(ended: dict, stderr: str, why: str) -> tuple[str, str]:
    """The verdict when the program stopped answering the judge."""
    if ended.get("signal") == 24:  # SIGXCPU
        return "timeout", "CPU-time limit exceeded"
    return "error", f"the program stopped before the tests finished ({how(ended, stderr)}): {why}"[:300]
