"""Jobs and verdicts (parent side): what to run, which judge runs a task's tests, and the verdict from the replies.

Every field a worker or judge sends back is checked here (types, ranges); a malformed reply is an `error` verdict
with a detail, never an exception in the caller.
"""

from __future__ import annotations

import ast
import builtins
import collections
import functools
import json
import math
import signal
import sys
import warnings
from dataclasses import dataclass, replace

from . import compare, judge, plus
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


# ---------------------------------------------------------------------------------------------------------------
# a run: the steps one job needs (one, or one per stdio case) and its verdict


def _cap_for(output: str, floor: int) -> int:
    """An output cap that does not tell the program the expected output's length: a power of two above twice it."""
    need = 2 * len(output.encode()) + 4096
    return max(floor, 1 << (need - 1).bit_length())


def parse_error(program: str) -> tuple[str, str] | None:
    """(description, exception type) of the SyntaxError the harness's `compile(program)` raises, found by parsing
    `program` here, without running any of it; None when it parses (or fails some other way: then it runs).

    Parsing is the first stage of that compile, with the same interpreter on the same text (the program reaches the
    child byte for byte), and its errors depend on nothing else: no recursion limit (the parser's own limits are
    constants), no warnings filter (warnings are silenced here; the child's default filters never turn one into an
    error). Errors of the later stages (a `return` outside a function) run as before."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(program, "<program>", "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
    except SyntaxError as e:  # IndentationError, TabError too
        return judge.describe(e), type(e).__name__
    except BaseException:
        return None
    return None


def clean_text(text, limit: int) -> str:
    """Text from a worker as a Verdict holds it: a str of at most `limit` characters that encodes to UTF-8 (a JSON
    reply may carry lone surrogates, which break `.encode()` in every consumer downstream)."""
    text = str(text)[:limit]
    return text.encode("utf-8", "replace").decode("utf-8") if not text.isascii() else text


def _calls_cases(tests: str) -> list:
    cases = json.loads(tests)
    if type(cases) is not list or not all(type(c) is dict and "input" in c and "output" in c for c in cases):
        raise ValueError("each case needs an input and an output")
    return cases


class Run:
    def __init__(self, job: Job, box, expected: dict):
        self.job, self.box = job, box
        time_scale, memory_scale = job.limit_scale or (1.0, 1.0)
        self.timeout = float(job.timeout_s if job.timeout_s is not None else box.timeout_s * time_scale)
        self.memory = int(job.memory_mb if job.memory_mb is not None else math.ceil(box.memory_mb * memory_scale))
        self.finished, self.case, self.duration, self.cases, self.requeued = False, 0, 0.0, 0, 0
        self.tamper: set = set()
        self.out: dict = {}
        self.ref = None
        self.digest_over = DIGEST_OVER_BYTES if job.plus_inputs and plus.digest_ok(job) else 0
        if job.reference is not None and job.plus_inputs:
            self.ref = expected.get(reference_key(job))
            if self.ref is None:
                self._finish(status="error", detail="reference solution failed on the plus inputs")
                return
            self.timeout += PLUS_TIME_FACTOR * self.ref[1]
            self.memory = max(self.memory, PLUS_MEMORY_MB)
        if job.kind == "stdio" and not job.cases:
            self._finish(status="error", detail="a stdio job without cases")
        if job.kind == "calls" and not self.finished:
            try:
                self.cases = len(_calls_cases(job.tests))
            except (ValueError, TypeError) as e:
                self._finish(status="error", detail=f"the task's call tests are not a JSON list of cases: {e}"[:300])
        if (
            job.kind in ("function", "calls")
            and not self.finished
            and box.parse_first
            and len(job.program) <= PARSE_FIRST_CHARS
        ):
            self._parse_first()

    def _parse_first(self) -> None:
        """A function job whose program does not parse: the verdict its run would get, without the run. The judge
        would compile the tests, hear from the harness that the program raised SyntaxError, and report that as
        `program_error`; the same result goes through the same `_feed_function` here (duration 0, no output). A
        quarter of the tiny model's distinct programs early in RL are such (~2 ms of two busy cores each)."""
        error = parse_error(self.job.program)
        if error is None:
            return
        try:  # the judge's own count, compiled once per text
            total = self.cases if self.job.kind == "calls" else judge.compiled_tests(self.job.tests)[1]
        except BaseException:
            return  # tests that do not compile: the judge says so itself
        result = {
            "done": False,
            "passed": 0,
            "total": total,
            "first": None,
            "calls": 0,
            "program_error": judge.sanitize(error[0]),
            "program_error_type": judge.sanitize(error[1], 60),
        }
        self._feed_function({"kind": "function"}, json.dumps(result).encode(), "")

    def next_step(self) -> dict:
        j = self.job
        req = dict(
            kind=j.kind,
            program=j.program,
            stdin=j.stdin,
            timeout_s=self.timeout,
            memory_mb=self.memory,
            cap=self.box.max_output_bytes,
        )
        step = dict(request=req, budget=self.timeout + 1.0)
        if j.kind == "stdio":
            case = j.cases[self.case]
            req.update(stdin=str(case["input"]), cap=_cap_for(str(case["output"]), self.box.max_output_bytes))
        elif j.kind == "function":
            spec = dict(
                prelude=j.prelude,
                tests=j.tests,
                names=list(j.names),
                imports=list(j.imports),
                entry_point=j.entry_point,
                plus_inputs=j.plus_inputs,
                digest_over=self.digest_over,
                truthy=j.truthy,
            )
            if self.ref is not None:  # the judge compares each plus output itself (its deadline bounds the work)
                spec.update(expected=json.dumps(self.ref[2]), atol=j.atol, task_id=j.task_id)
                step["result_cap"] = 1 << 20  # three numbers and a few lines of text come back, never outputs
            step["spec"] = json.dumps(spec).encode()
            step["budget"] += 2.0
        elif j.kind == "calls":  # each call gets the job's time limit; the run, all of them (the judge times each)
            req.update(kind="function", timeout_s=self.timeout * max(1, self.cases) + 1.0)
            spec = dict(calls=j.tests, entry_point=j.entry_point, names=[], compare=j.compare, per_call_s=self.timeout)
            step["spec"] = json.dumps(spec).encode()
            step["budget"] = req["timeout_s"] + 3.0
        else:
            req.update(
                test_line=j.test_line,
                entry_point=j.entry_point,
                plus_inputs=j.plus_inputs,
                digest_over=self.digest_over,
            )
            if self.ref is not None:  # the outputs are decoded here: at most 4x the reference's (+ stdout)
                step["reply_cap"] = 4 * len(json.dumps(self.ref[2])) + 2 * self.box.max_output_bytes + (1 << 20)
        return step

    def fail(self, reply: dict) -> None:
        self.duration += float(reply.get("duration_s", 0.0))
        self._finish(status=reply["status"], detail=reply["detail"])

    def _finish(self, **fields) -> None:
        self.out.update(fields)
        self.finished = True

    def feed(self, reply: dict, result: bytes | None) -> None:
        """Take one step's replies (the worker's, and the judge's for a function job): checked, never trusted."""
        tamper = reply.get("tamper")
        if type(tamper) is str:
            self.tamper |= {t for t in tamper.split() if t in TAMPER_CLASSES}
        try:
            if isinstance(reply.get("status"), str) and reply.get("kind") != "function" and "tests_total" not in reply:
                raise R.Malformed(reply.get("detail") or "the worker failed")  # an internal error of the worker
            self.duration += R.number(reply, "duration_s")
            stdout = R.text(reply, "stdout")
            if self.job.kind == "stdio":
                return self._feed_case(reply, stdout)
            if self.job.kind in ("function", "calls"):
                return self._feed_function(reply, result, stdout)
            return self._feed_program(reply, stdout)
        except R.Malformed as e:
            self._finish(status="error", detail=f"malformed reply: {e}"[:300], tests_passed=0, tests_total=1)

    def _feed_case(self, reply: dict, stdout: str) -> None:
        n = len(self.job.cases)
        where = f"case {self.case + 1}/{n}"
        status = R.status(reply)
        self.out.update(stdout=stdout, tests_passed=self.case, tests_total=n)
        if status != "passed":
            return self._finish(
                status=status if status != "failed" else "error", detail=f"{where}: {R.text(reply, 'detail')}"
            )
        same, why = compare.stdout_equal(self.job.compare, stdout, str(self.job.cases[self.case]["output"]))
        if not same:
            return self._finish(status="failed", detail=f"{where}: wrong answer: {why}")
        self.case += 1
        if self.case == n:
            self._finish(status="passed", detail="", tests_passed=n)

    def _feed_program(self, reply: dict, stdout: str) -> None:
        total = R.count(reply, "tests_total")
        passed = min(R.count(reply, "tests_passed"), total)
        self.out.update(stdout=stdout, tests_passed=passed, tests_total=total)
        status, detail = R.status(reply), R.text(reply, "detail")
        outputs = reply.get("outputs")
        if self.ref is not None and outputs is not None and status == "passed":
            status, detail = self._compare_plus(outputs, status, detail)
        elif self.ref is not None and status == "passed":  # a plus job never skips its plus comparison
            status, detail = "error", "the program reported no outputs for the plus inputs"
        elif self.ref is None and outputs is not None and reply.get("done") is True:
            self.out["outputs"] = R.decode_outputs(outputs)
            self.out["outputs_raw"] = outputs
        self._finish(status=status, detail=detail)

    def _feed_function(self, reply: dict, result: bytes | None, stdout: str) -> None:
        self.out["stdout"] = stdout
        r = R.judge_result(result)
        total = r.get("total", 0)
        passed = min(r.get("passed", 0), total)
        self.out.update(tests_passed=passed, tests_total=total)
        ended = reply.get("ended") if type(reply.get("ended")) is dict else {}
        if ended.get("signal") == signal.SIGSYS:
            self.tamper.add("seccomp")  # the system-call filter killed it: it made a call no solution needs
        if reply.get("timed_out") is True:
            status, detail = "timeout", "wall-time limit exceeded"
        elif reply.get("overflow") is True:
            status, detail = "error", f"output limit exceeded ({self.box.max_output_bytes} bytes)"
        elif not r:
            judge_end = reply.get("judge_ended") if type(reply.get("judge_ended")) is dict else {}
            status, detail = "error", f"the judge gave no result ({R.how(judge_end, '')})"
        elif "program_error" in r:
            kind = r.get("program_error_type", "")
            if kind == "SystemExit":
                self.tamper.add("exit")
            status, detail = ("failed" if kind == "AssertionError" else "error"), r["program_error"]
        elif "call_timeout" in r:
            status, detail = "timeout", r["call_timeout"]
        elif "died" in r:
            status, detail = R.died(ended, R.text(reply, "stderr"), r["died"])
            if status != "timeout" and not r["died"].startswith("the program answered"):
                self.tamper.add("exit")  # it left while the tests were calling it (not: an oversized answer)
        elif "exc" in r:
            status = "failed" if r.get("first") or r.get("exc_type") == "AssertionError" else "error"
            detail = r.get("first") or r["exc"]
        elif r.get("done") is not True:
            status, detail = "error", "the judge did not finish"
        elif r.get("first"):
            status, detail = "failed", r["first"]
        elif passed < total:
            status, detail = "failed", f"only {passed} of {total} asserts passed"
        else:
            status, detail = "passed", ""
        if total == 0:  # a program that is one test (a reference run, tests without asserts)
            self.out.update(tests_passed=int(status == "passed"), tests_total=1)
        outputs = r.get("outputs")
        if self.ref is not None and "plus" in r:
            good, judged, first_bad = r["plus"]
            self.out.update(
                tests_passed=self.out.get("tests_passed", 0) + good,
                tests_total=self.out.get("tests_total", 0) + judged,
            )
            if status == "passed" and good < judged:
                status, detail = (
                    "failed",
                    f"plus input {max(first_bad, 0)}: output differs from the canonical solution's",
                )
        elif self.ref is not None and status == "passed":  # a plus job never skips its plus comparison
            status, detail = "error", "the judge did not compare the plus outputs"
        elif outputs is not None and r.get("done") is True and reply.get("timed_out") is not True:
            self.out["outputs"] = R.decode_outputs(outputs)
            self.out["outputs_raw"] = outputs
        self._finish(status=status, detail=detail)

    def _compare_plus(self, outputs, status: str, detail: str) -> tuple[str, str]:
        good, total, first_bad = plus.compare(self.job, self.ref[0], R.decode_outputs(outputs))
        self.out.update(
            tests_passed=self.out.get("tests_passed", 0) + good, tests_total=self.out.get("tests_total", 0) + total
        )
        if status == "passed" and first_bad is not None:
            return "failed", f"plus input {first_bad}: output differs from the canonical solution's"
        return status, detail

    def outputs(self):
        return self.out.get("outputs")

    def verdict(self) -> Verdict:
        status = self.out.get("status", "error")
        outside = self.job.kind in ("function", "stdio", "calls")
        return Verdict(
            status=status,
            passed=status == "passed",
            detail=clean_text(self.out.get("detail", ""), 1000),
            duration_s=round(self.duration, 4),
            stdout=clean_text(self.out.get("stdout", ""), VERDICT_STDOUT_CHARS),
            tests_passed=int(self.out.get("tests_passed", 0)),
            tests_total=int(self.out.get("tests_total", 0)),
            judge="outside" if outside else "inside",
            tamper=",".join(sorted(self.tamper)),
        )
