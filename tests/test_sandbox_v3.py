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
