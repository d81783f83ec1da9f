"""The worker's side of a run: watch the program (and the judge) until they finish; an inside run's verdict.

`run` waits for the program to exit and the judge to say it is done, kills the program at the deadline or when the
parent asks (an output passed its cap: the parent reads the outputs, this process never does), and sweeps every
process the run left. `inside_verdict` (called by the parent) turns an inside run's report (a per-run token, then
the harness's result) and the way the process ended into a verdict: no token, no pass. Standard library only.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import time

from . import harness

REPORT_CAP_BYTES = 64 << 20  # an inside report (verdict + plus outputs) beyond this is an error, not a verdict


def ended(wstatus: int | None) -> dict:
    if wstatus is None:
        return {}
    if os.WIFSIGNALED(wstatus):
        return {"signal": os.WTERMSIG(wstatus)}
    return {"exit": os.WEXITSTATUS(wstatus)}


def run(server, pid: int, judge, kill_fd: int | None, timeout: float) -> dict:
    """Wait for the program to exit (and the judge to say it is done); kill the program at the deadline or when the
    parent asks (a byte on the kill pipe: its output passed a cap). The outputs never pass through here."""
    start = time.monotonic()
    deadline = start + timeout
    status = None
    judge_done = judge is None
    timed_out = killed = False
    pidfd = os.pidfd_open(pid)
    with selectors.DefaultSelector() as sel:
        sel.register(pidfd, selectors.EVENT_READ, "pid")
        if judge is not None:
            sel.register(judge, selectors.EVENT_READ, "judge")
        if kill_fd is not None:
            sel.register(kill_fd, selectors.EVENT_READ, "kill")
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
                else:  # the parent: an output passed its cap (or the parent is gone: EOF)
                    killed = True
                    sel.unregister(kill_fd)
            if killed:
                break
    os.close(pidfd)
    if status is None:
        os.kill(pid, signal.SIGKILL)
        status = os.waitpid(pid, 0)[1]
    duration = time.monotonic() - start
    server._kill_leftovers()  # every writer of the outputs is dead now: the parent reads them to EOF
    return dict(status=status, judge_done=judge_done, timed_out=timed_out, killed=killed, duration=duration)


SIGNAMES = {getattr(signal, n): n for n in dir(signal) if n.startswith("SIG") and not n.startswith("SIG_")}


def inside_verdict(
    report: bytes, token: bytes, wstatus: int, timed_out: bool, overflow: bool, cap: int, err: str, stdio: bool
) -> dict:
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
        out.update(detail=f"killed by {SIGNAMES.get(signum, signum)}")
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
