"""What the parent hands the pool and gets back: a `Job` (what to run, under which limits) and its `Verdict`, with
the limits and caps they carry. Parent side; standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import replies as R

REFERENCE_TIMEOUT_S = 120.0  # canonical solutions on all plus inputs: HumanEval+/15 takes ~15 s, MBPP+/599 ~50 s
PLUS_TIME_FACTOR = 4.0  # a candidate on plus inputs may take timeout_s + 4x the canonical solution's time
# address space for a reference on plus inputs, and for a candidate judged on them: MBPP+/255's 112 inputs make
# 2M tuples (the reference needs ~2 GB to build them), and a correct candidate must build the same
PLUS_MEMORY_MB = 4096
# a plain output (ints, strings, lists, tuples) whose encoding is longer than this travels as its sha256: equal
# values have equal encodings, and neither the judge nor the trainer ever holds a huge output (MBPP+/255: 2M tuples)
DIGEST_OVER_BYTES = 1 << 20
REPORT_CAP_BYTES = 64 << 20  # a judge's or harness's report beyond this is an error, not a verdict
VERDICT_STDOUT_CHARS = 65536  # what a Verdict keeps of stdout
# a function job's program up to this length is parsed in the parent first: one that does not parse gets its verdict
# without a run (`parse_error`); longer ones go to the sandbox as they are (the parser's memory stays small)
PARSE_FIRST_CHARS = 20_000
STATUSES = R.STATUSES  # a Verdict's status: one of these
TAMPER_CLASSES = ("signal", "frames", "gc", "memory", "proc", "write", "exit", "seccomp")  # harness.TAMPER_CLASSES


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
    judge: str = "inside"  # "outside": tests ran in the judge / output compared in the parent; "inside": in-process
    # what the program tried that marks tampering (refused or harmless by construction), comma-separated classes of
    # `harness.TAMPER_CLASSES` ("signal", "frames", "gc", "memory", "proc", "write", "exit", "seccomp": killed by
    # the system-call filter); "" = none seen
    tamper: str = ""


@dataclass(frozen=True)
class Job:
    """One thing to judge.

    kind "program": run `program` in one process (the tests inside it); passed when it runs to its end. Asserts from
    line `test_line` on are counted one by one (0: the program is one test).
    kind "function": `program` (the prompt + the completion) serves calls; `tests` run in the judge with `names`
    bound to proxies, after `prelude` (the task's prompt: its helpers) and `imports` (stdlib modules the tests use).
    kind "stdio": the program runs once per case (stdin from a file); each output is compared in the parent.
    kind "calls": `program` serves calls; `tests` is a JSON list of {"input": one JSON value per line (the
    arguments), "output": JSON text}; the judge calls `entry_point` ("f" or "Solution.method", a fresh `Solution()`
    per call) once per case, each call with its own `timeout_s`, and compares with `compare`.
    plus_inputs (JSON list of argument lists) with `reference`: `entry_point` is called on each input and the
    outputs are compared, in the parent, with the reference program's outputs (EvalPlus-style).
    """

    program: str
    kind: str = "program"  # "program" | "function" | "stdio"
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
    tests: str = ""  # function: the test code (runs in the judge)
    prelude: str = ""  # function: the task's prompt, run in the judge before the tests
    names: tuple = ()  # function: the program's names the tests call (proxied)
    truthy: bool = False  # function: a returned object that is not plain data crosses as bool(it) (TRUTHY_TASKS)
    imports: tuple = ()  # function: stdlib modules the tests use without importing them
    compare: str = ""  # calls: the value comparator (`compare.value_equal`'s name; "" = the default)
    # a task's own limits as factors of the pool's limits, for a limit left None (`codelib.tasks.task.limits_for`)
    limit_scale: tuple = ()  # () or (time factor, memory factor)


def tamper_of(verdict) -> str:
    """What the sandbox saw a program try, as a verdict records it ("" = nothing; also for a verdict-like object
    without the field)."""
    return str(getattr(verdict, "tamper", "") or "")
