"""A run (parent side): the steps one job needs (one, or one per stdio case) and the verdict from the replies.

Every field a worker or judge sends back is checked here (types, ranges); a malformed reply is an `error` verdict
with a detail, never an exception in the caller. What to run and the verdict (`Job`, `Verdict`, the limits) are in
`records`, which judge runs a task's tests and the job for a task (`judge_plan`, `task_job`) in `plan`; both stay
importable from here.
"""

from __future__ import annotations

import ast
import json
import math
import signal
import warnings

from . import compare, judge, plus
from . import replies as R
from .plan import (  # noqa: F401 - importable from here
    INSIDE_TASKS,
    REFERENCE_CACHE,
    TRUTHY_TASKS,
    judge_plan,
    reference_job,
    reference_key,
    task_job,
)
from .records import (  # noqa: F401 - importable from here
    DIGEST_OVER_BYTES,
    PARSE_FIRST_CHARS,
    PLUS_MEMORY_MB,
    PLUS_TIME_FACTOR,
    REFERENCE_TIMEOUT_S,
    REPORT_CAP_BYTES,
    STATUSES,
    TAMPER_CLASSES,
    VERDICT_STDOUT_CHARS,
    Job,
    Verdict,
    tamper_of,
)

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
            total = self._judge_total()
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

    def _judge_total(self) -> int:
        """The number of tests the judge counts for this job: the cases of a calls job, else the asserts of its tests
        as the judge compiles them (once per text, here as there)."""
        return self.cases if self.job.kind == "calls" else judge.compiled_tests(self.job.tests)[1]

    def _check_complete(self, r: dict) -> None:
        """A result that says the judge finished must carry what an honest judge writes: its counts, the test total
        the parent counts itself, and (on a plus job) every plus input the reference answered judged. Else the
        reply is Malformed: a bare {"done": true} is never a pass."""
        if r.get("done") is not True:
            return
        if "passed" not in r or "total" not in r or "calls" not in r:
            raise R.Malformed("the judge's result lacks its counts")
        try:
            want = self._judge_total()
        except BaseException:
            raise R.Malformed("the judge finished tests that do not compile") from None
        if r["total"] != want:
            raise R.Malformed(f"the judge counted {r['total']} tests where the task has {want}")
        if self.ref is not None and "plus" in r:
            answered = sum(not isinstance(x, plus.Raised) for x in self.ref[0])
            if r["plus"][1] != answered:
                raise R.Malformed(
                    f"the judge judged {r['plus'][1]} plus inputs where the reference answered {answered}"
                )

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
        self._check_complete(r)
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
