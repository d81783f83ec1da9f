"""Which judge runs a task's tests (`judge_plan`: outside whenever the tests only call the entry point with plain
data), the job that checks a completion on a task (`task_job`), and the reference job a plus job is compared with.
Parent side.
"""

from __future__ import annotations

import ast
import builtins
import collections
import functools
import json
import sys
from dataclasses import replace

from .records import PLUS_MEMORY_MB, Job

# ---------------------------------------------------------------------------------------------------------------
# which judge: outside whenever the tests only call the entry point with plain data


# tasks whose tests pass an object or function to the entry point, or inspect what it returns beyond plain data
INSIDE_TASKS: dict[str, str] = {}
# tasks whose canonical solution returns an object (a re.Match) and whose tests only ask whether it is truthy
# (MBPP+, EvalPlus's "not None" oracle): judged outside, a returned object that is not plain data crosses as its
# truth value (computed in the program's process: bool(), never the object)
TRUTHY_TASKS = frozenset(f"Mbpp/{n}" for n in (737, 787, 794))


@functools.lru_cache(maxsize=4096)
def judge_plan(prompt: str, tests: str, entry_point: str, task_id: str = "") -> tuple:
    """("outside", names, imports, prelude) when the task's tests can run in the judge, else ("inside", reason).

    The prelude is the prompt as the judge runs it (a prompt that ends in a bare `def f(x):` gets a `pass`)."""
    if task_id in INSIDE_TASKS:
        return ("inside", INSIDE_TASKS[task_id])
    prelude = prompt
    try:
        tests_tree = ast.parse(tests)
        try:
            prompt_tree = ast.parse(prelude)
        except SyntaxError:
            prelude = prompt.rstrip() + "\n    pass\n"
            prompt_tree = ast.parse(prelude)
    except SyntaxError:
        return ("inside", "the prompt or the tests do not parse on their own")
    if any(isinstance(n, ast.ClassDef) for n in ast.walk(prompt_tree)):
        return ("inside", "the prompt defines a class: its objects cannot cross to the judge")
    defined = _bound(prompt_tree)
    free = _free(tests_tree) - defined - {entry_point} - set(dir(builtins))
    modules = {n for n in free if n in sys.stdlib_module_names}
    if free - modules:
        return ("inside", f"the tests use names the solution defines: {', '.join(sorted(free - modules))}")
    callers = {entry_point, "candidate"}
    for node in ast.walk(tests_tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in callers:
            for arg in list(node.args) + [k.value for k in node.keywords]:
                if any(isinstance(n, (ast.Lambda, ast.GeneratorExp)) for n in ast.walk(arg)):
                    return ("inside", "the tests pass a function or generator to the entry point")
                if isinstance(arg, ast.Name) and callable(getattr(builtins, arg.id, None)):
                    return ("inside", "the tests pass a function to the entry point")
    return ("outside", (entry_point,), tuple(sorted(modules)), prelude)


def _bound(tree) -> set:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
    return names


def _free(tree) -> set:
    loaded = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return loaded - _bound(tree)


def task_job(task, completion: str, plus: bool = False, timeout_s: float | None = None, memory_mb: int | None = None):
    """The job that checks `completion` (the text appended to `task.prompt`; stdio: the program) on one task.

    plus=True adds the task's HumanEval+/MBPP+ extra inputs, judged against its canonical solution.
    """
    from codelib import tasks as T

    scale: tuple = ()
    if getattr(task, "time_limit_s", None) or getattr(task, "memory_limit_mb", None):
        # a task's own limits scale the given limits; a limit not given stays None and the pool that runs the job
        # scales its own (passed explicitly: no module state, so `configure` reaches every job the same way)
        unit_time, unit_memory = T.limits_for(task, 1.0, 1 << 20)
        scale = (unit_time, unit_memory / (1 << 20))
        if timeout_s is not None:
            timeout_s = T.limits_for(task, timeout_s, 1)[0]
        if memory_mb is not None:
            memory_mb = T.limits_for(task, 1.0, memory_mb)[1]
    if task.kind == "stdio":
        cases = tuple(json.loads(task.tests))
        name = (
            getattr(task, "compare", "") or ""
        )  # the benchmark's harness runs its import block first (task.PRELUDES)
        return Job(
            T.stdin_prelude(name) + completion,
            kind="stdio",
            cases=cases,
            task_id=task.task_id,
            timeout_s=timeout_s,
            memory_mb=memory_mb,
            limit_scale=scale,
            compare=name,
        )
    if task.kind == "calls":
        return Job(
            task.prompt + completion,
            kind="calls",
            tests=task.tests,
            entry_point=task.entry_point,
            task_id=task.task_id,
            compare=getattr(task, "compare", "") or "",
            timeout_s=timeout_s,
            memory_mb=memory_mb,
            limit_scale=scale,
        )
    call = f"\n\ncheck({task.entry_point})\n" if "def check(" in task.tests else ""
    plan = judge_plan(task.prompt, task.tests + call, task.entry_point, task.task_id)
    with_plus = plus and bool(task.plus_inputs)
    if plan[0] == "outside":
        job = Job(
            task.prompt + completion,
            kind="function",
            tests=task.tests + call,
            prelude=plan[3],
            names=plan[1],
            imports=plan[2],
            entry_point=task.entry_point,
            task_id=task.task_id,
            truthy=task.task_id in TRUTHY_TASKS,
        )
        reference = replace(job, program=task.prompt + task.canonical_solution, tests="")
    else:
        program = T.program_for(task, completion)
        at = program.rfind(task.tests) if task.tests else -1
        test_line = program.count("\n", 0, at) + 1 if at >= 0 else 1
        job = Job(program, test_line=test_line, entry_point=task.entry_point, task_id=task.task_id)
        reference = Job(task.prompt + task.canonical_solution, entry_point=task.entry_point, task_id=task.task_id)
    if with_plus:
        job = replace(job, plus_inputs=task.plus_inputs, reference=reference, atol=task.atol)
    return replace(job, timeout_s=timeout_s, memory_mb=memory_mb, limit_scale=scale)


def reference_key(job: Job) -> tuple:
    return (job.reference.kind, job.reference.program, job.plus_inputs)


def reference_job(job: Job, box) -> Job:
    """The reference (canonical solution) run on the job's plus inputs, with a reference's limits."""
    return replace(
        job.reference,
        plus_inputs=job.plus_inputs,
        atol=job.atol,
        timeout_s=box.reference_timeout_s,
        memory_mb=max(PLUS_MEMORY_MB, job.memory_mb or box.memory_mb),
    )


REFERENCE_CACHE: collections.OrderedDict = collections.OrderedDict()
