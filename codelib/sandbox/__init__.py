"""Sandbox: run untrusted, model-written programs and return verdicts they cannot forge.

WARNING: this package executes code that a language model wrote. It is built to hold against reward hacks and a
program that reads this code and looks around its process (see the README's threat model), not against a kernel
exploit. Run training on machines you can afford to lose.

Processes, one module each:
- `pool` (the parent: the training or notebook process): warm workers, the event loop, stdio comparison;
- `worker` (a fresh interpreter per worker, confined once by `isolation`): forks one program per run, and for
  function tasks one judge;
- `judge` (trusted, its own uid): runs the task's tests, calling the program's entry point through a proxy;
- `harness` (the untrusted child): runs the program, answers the judge's calls with plain data only;
- `wire`: the plain-data codec every process speaks; `jobs`: what to run and the verdict; `replies`: the checks on
  what a worker sends back; `plus`: EvalPlus rules.

Public API: `run`, `check`, `task_job`, `Sandbox`, `Job`, `Verdict`, `configure` (and `shared_pool`, `tamper_of`).
"""

from __future__ import annotations

from .jobs import (
    DIGEST_OVER_BYTES,
    PLUS_MEMORY_MB,
    PLUS_TIME_FACTOR,
    REFERENCE_TIMEOUT_S,
    REPORT_CAP_BYTES,
    VERDICT_STDOUT_CHARS,
    Job,
    Verdict,
    judge_plan,
    tamper_of,
    task_job,
)
from .pool import DEFAULT_MEMORY_MB, DEFAULT_TIMEOUT_S, Sandbox, SandboxError, configure, shared_pool

__all__ = [
    "DEFAULT_MEMORY_MB",
    "DEFAULT_TIMEOUT_S",
    "DIGEST_OVER_BYTES",
    "PLUS_MEMORY_MB",
    "PLUS_TIME_FACTOR",
    "REFERENCE_TIMEOUT_S",
    "REPORT_CAP_BYTES",
    "VERDICT_STDOUT_CHARS",
    "Job",
    "Sandbox",
    "SandboxError",
    "Verdict",
    "check",
    "configure",
    "judge_plan",
    "run",
    "shared_pool",
    "tamper_of",
    "task_job",
]


def run(
    program: str, timeout_s: float | None = None, memory_mb: int | None = None, stdin: str | None = None
) -> Verdict:
    """Run one program in the shared pool: passed when it runs to its end.

    >>> run("assert 1 + 1 == 2").status
    'passed'
    """
    return shared_pool().map([Job(program, stdin=stdin, timeout_s=timeout_s, memory_mb=memory_mb)])[0]


def check(tasks, completions, workers: int | None = None, plus: bool = False, **limits) -> list[Verdict]:
    """Verdicts for the pairs (tasks[i], completions[i]) in one `Sandbox.map`.

    Identical jobs (the same program, tests and limits: a model often samples the same completion twice) run once
    and share that run's verdict. workers=None uses the shared pool; a number starts (and closes) a pool of that size.
    """
    if len(tasks) != len(completions):
        raise ValueError(f"check got {len(tasks)} tasks but {len(completions)} completions; pass one per task")
    distinct: dict = {}  # job (or, for a job with unhashable fields such as stdio cases, its position) -> index
    jobs, index = [], []
    for i, (t, c) in enumerate(zip(tasks, completions, strict=True)):
        job = task_job(t, c, plus=plus, **limits)
        key = job
        try:
            hash(job)
        except TypeError:
            key = ("row", i)
        if key not in distinct:
            distinct[key] = len(jobs)
            jobs.append(job)
        index.append(distinct[key])
    if workers is None:
        verdicts = shared_pool().map(jobs)
    else:
        with Sandbox(workers=workers, **{k: v for k, v in limits.items() if k in ("timeout_s", "memory_mb")}) as box:
            verdicts = box.map(jobs)
    return [verdicts[i] for i in index]
