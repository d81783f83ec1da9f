"""Sandbox v3: call-based tasks, code-not-data roots, a judge beyond the program's reach, programs forked from a
process that never held output, bounded parent work, tamper telemetry, sanitised replies.

Each attack runs as root here and, through the throwaway-uid launcher of `test_sandbox_attacks`, as an ordinary
user (`Sandbox(unprivileged=True)` too where the launcher cannot run).
"""

from __future__ import annotations

import json
import os
import time
import warnings

import pytest

from codelib import sandbox
from codelib.sandbox import Job, Sandbox

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def box():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with Sandbox(workers=1, timeout_s=5) as b:
            yield b


def calls(cases: list) -> str:
    return json.dumps([{"input": "\n".join(json.dumps(a) for a in args), "output": json.dumps(out)}
                       for args, out in cases])  # fmt: skip


SMALL = calls([([[1, 2], 3], 6), ([[1], 1], 2), ([[], 0], 0)])


# ---------------------------------------------------------------------------------------------------------------
# the "calls" kind: LiveCodeBench functional / TACO call-based tests, judged outside through the proxy


@pytest.mark.parametrize(
    "program, entry, status, passed",
    [
        ("class Solution:\n    def f(self, xs, k):\n        return sum(xs) + k\n", "Solution.f", "passed", 3),
        ("def f(xs, k):\n    return sum(xs) + k\n", "f", "passed", 3),
        ("def f(xs, k):\n    return (sum(xs) + k,)[0] if xs else 1\n", "f", "failed", 2),
        ("def f(xs, k):\n    raise ValueError('no')\n", "f", "failed", 0),
        ("def f(xs, k):\n    while True: pass\n", "f", "timeout", 0),
        ("def f(xs, k)\n    return 0\n", "f", "error", 0),
        ("import os\nos._exit(0)\n", "f", "error", 0),
        ("class Solution:\n    pass\n", "Solution.f", "failed", 0),
    ],
)
def test_calls_jobs_are_judged_outside_one_call_per_case(box, program, entry, status, passed):
    v = box.map([Job(program, kind="calls", tests=SMALL, entry_point=entry, timeout_s=1)])[0]
    assert (v.status, v.tests_passed, v.tests_total, v.judge) == (status, passed, 3, "outside"), v


def test_each_call_has_its_own_time_budget(box):
    slow = "import time\ndef f(xs, k):\n    time.sleep(0.6)\n    return sum(xs) + k\n"
    v = box.map([Job(slow, kind="calls", tests=SMALL, entry_point="f", timeout_s=1)])[0]
    assert v.passed, v  # 1.8 s in all, each call under its 1 s


def test_twelve_calls_on_1e5_element_arguments_pass_under_the_default_memory_limit():
    big = list(range(100_000))
    tests = calls([([big, i], sum(big) + i) for i in range(12)])
    prog = "class Solution:\n    def f(self, xs, k):\n        return sum(xs) + k\n"
    with Sandbox(workers=1) as b:  # the default limits
        v = b.map([Job(prog, kind="calls", tests=tests, entry_point="Solution.f", timeout_s=10)])[0]
    assert v.passed and v.tests_passed == 12, v


def test_calls_task_job_and_the_parse_first_path():
    from codelib.task import Task

    task = Task("lcb/x", "# prompt\n", SMALL, "Solution.f", "", kind="calls")
    job = sandbox.task_job(task, "class Solution:\n    def f(self, xs, k):\n        return sum(xs) + k\n")
    assert job.kind == "calls" and job.entry_point == "Solution.f"
    bad = sandbox.task_job(task, "class Solution\n")
    with Sandbox(workers=1) as b:
        good, broken = b.map([job, bad])
    assert good.passed and good.judge == "outside", good
    assert broken.status == "error" and broken.tests_total == 3, broken


# ---------------------------------------------------------------------------------------------------------------
# the judge beyond the program's reach: after a program kills everything it can reach, the next correct program of
# every kind passes on the same worker


KILL_EVERYTHING = r'''
import ctypes, os, signal
libc = ctypes.CDLL(None, use_errno=True)
me = os.getpid()
for sig in (signal.SIGSTOP, signal.SIGTERM, signal.SIGKILL):
    for pid in [int(p) for p in os.listdir("/proc") if p.isdigit()] + list(range(1, 4096)):
        if pid != me:
            for target in (pid, -pid):
                try:
                    os.kill(target, sig)
                except OSError:
                    pass
            try:
                fd = os.pidfd_open(pid)
                signal.pidfd_send_signal(fd, sig)
                os.close(fd)
            except OSError:
                pass
            libc.syscall(234, pid, pid, sig)  # tgkill on a thread id
    for d in os.listdir("/proc"):  # a /proc/<pid> directory is a pidfd too
        if d.isdigit() and int(d) != me:
            try:
                fd = os.open(f"/proc/{d}", os.O_RDONLY | os.O_DIRECTORY)
                signal.pidfd_send_signal(fd, sig)
                os.close(fd)
            except OSError:
                pass
os.kill(-1, signal.SIGSTOP)
os.kill(-1, signal.SIGKILL)
'''


def kinds_after_a_killer() -> list:
    """(name, job) pairs: the killer as a function job, a stdio job and a plain program, each followed by a correct
    program of every kind (function, stdio, plus, calls)."""
    from codelib.tasks import load_tasks

    he = load_tasks("humaneval", "test")[0]
    hplus = load_tasks("humaneval_plus", "test")[0]
    io = load_tasks("codecontests", "test")[0]
    killer_fn = "    pass\n" + KILL_EVERYTHING
    good = [
        ("function", sandbox.task_job(he, he.canonical_solution, timeout_s=15)),
        ("stdio", sandbox.task_job(io, io.canonical_solution, timeout_s=15)),
        ("plus", sandbox.task_job(hplus, hplus.canonical_solution, plus=True, timeout_s=15)),
        ("calls", Job("def f(xs, k):\n    return sum(xs) + k\n", kind="calls", tests=SMALL, entry_point="f")),
    ]
    steps = []
    for name, killer in (("function", sandbox.task_job(he, killer_fn, timeout_s=15)),
                         ("stdio", sandbox.task_job(io, KILL_EVERYTHING, timeout_s=15)),
                         ("program", Job(KILL_EVERYTHING, timeout_s=15))):  # fmt: skip
        steps.append((f"killer-{name}", killer))
        steps += [(f"after-{name}-{k}", j) for k, j in good]
    return steps


def assert_killers_harmless(results: dict) -> None:
    for name, r in results.items():
        if name.startswith("after-"):
            assert r["passed"], (name, r)
        elif name != "killer-program":  # a program that runs to its end passes (its tamper flag says the rest)
            assert not r["passed"], (name, r)
        assert r["same"], (name, "the worker was replaced")


def run_steps(b, steps) -> dict:
    pids = b.worker_pids()
    out = {}
    for name, job in steps:
        v = b.map([job])[0]
        out[name] = dict(passed=v.passed, status=v.status, detail=v.detail, same=b.worker_pids() == pids)
    return out


@pytest.mark.parametrize("unprivileged", [False, True])
def test_a_program_that_kills_everything_it_can_reach_breaks_no_later_verdict(unprivileged):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with Sandbox(workers=1, timeout_s=15, unprivileged=unprivileged) as b:
            assert_killers_harmless(run_steps(b, kinds_after_a_killer()))


KILLER_BATTERY = r'''
import pickle, warnings
from codelib import sandbox
from codelib.sandbox import Sandbox
steps = pickle.loads(bytes.fromhex(params["steps"]))
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    box = Sandbox(workers=1, timeout_s=15)
pids = box.worker_pids()
for name, job in steps:
    v = box.map([job])[0]
    emit(name=name, passed=v.passed, status=v.status, detail=v.detail[:300], same=box.worker_pids() == pids)
box.close()
'''


def test_a_program_that_kills_everything_it_can_reach_as_a_throwaway_user():
    import pickle

    from tests.test_sandbox_attacks import as_throwaway_user

    out = as_throwaway_user(KILLER_BATTERY, steps=pickle.dumps(kinds_after_a_killer()).hex())
    results = {x["name"]: x for x in out["lines"] if "name" in x}
    assert len(results) == 15, results
    assert_killers_harmless(results)


def _judge_processes(b) -> list[int]:
    uids = {w.caps["judge_uid"] for w in b._pool if w.caps.get("judge_uid") is not None}
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.stat(f"/proc/{name}").st_uid in uids:
                    found.append(int(name))
            except OSError:
                pass
    return found


def test_a_judge_or_init_that_dies_is_replaced_before_the_next_job():
    if os.geteuid() != 0:
        pytest.skip("finds the judge by its uid: root only")
    import signal

    steps = [s for s in kinds_after_a_killer() if s[0].startswith("after-function")]
    with Sandbox(workers=1, timeout_s=15) as b:
        assert b.map([steps[0][1]])[0].passed
        judges = _judge_processes(b)
        assert judges, "no judge server"
        for pid in judges:
            os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
        assert all(b.map([job])[0].passed for _, job in steps)  # a fresh judge, the same worker
        pids = b.worker_pids()
        os.kill(b._pool[0].caps["init_pid"], signal.SIGKILL)  # the pid namespace ends: the worker must go
        time.sleep(0.1)
        assert all(b.map([job])[0].passed for _, job in steps)
        assert b.worker_pids() != pids
