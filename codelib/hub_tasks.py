"""Hub-only adapters: the full CodeContests, TACO-verified and LiveCodeBench, read in their own schemas.

A record that does not match its schema raises TaskError naming it; a well-formed record this sandbox cannot judge
(file input/output, no tests at all) is skipped with one warning per load. `codelib.tasks.load_tasks` is the way in.
"""

from __future__ import annotations

import base64
import json
import math
import pickletools
import re
import warnings
import zlib
from datetime import datetime

from codelib import task as base
from codelib.task import STDIO_INSTRUCTION, Task, TaskError, make_task

# ---------------------------------------------------------------------------------------------------------------
# hub-only adapters: the full CodeContests, TACO-verified and LiveCodeBench, read in their own schemas. A record
# that does not match the schema raises TaskError naming it; a well-formed record this sandbox cannot judge (file
# input/output, no tests at all) is skipped with one warning per load.


def _need(dataset: str, record_id, record: dict, *keys: str) -> None:
    missing = [k for k in keys if k not in record]
    if missing:
        raise TaskError(f"{dataset} record {record_id}: it lacks the field(s) {', '.join(missing)}")


def _skipped(dataset: str, skipped: dict[str, list]) -> None:
    for reason, ids in skipped.items():
        if ids:
            warnings.warn(f"{dataset}: skipped {len(ids)} problem(s) that {reason} (e.g. {ids[0]})", stacklevel=3)


def _cases(dataset: str, record_id, inputs, outputs, what: str) -> list[dict]:
    """[{"input", "output"}] from parallel lists of strings (a list of lines counts as its lines joined)."""
    if not isinstance(inputs, list) or not isinstance(outputs, list) or len(inputs) != len(outputs):
        raise TaskError(f"{dataset} record {record_id}: {what} must be two lists of equal length")
    cases = []
    for i, o in zip(inputs, outputs, strict=True):
        i, o = ("\n".join(map(str, x)) if isinstance(x, list) else x for x in (i, o))
        if not isinstance(i, str) or not isinstance(o, str):
            raise TaskError(f"{dataset} record {record_id}: {what} holds a {type(i).__name__}, not a string")
        cases.append({"input": i, "output": o})
    return cases


def _py(value) -> str:
    """A Python literal for a JSON value (repr, except the floats JSON allows and repr cannot write back)."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"float({str(value)!r})"
    if isinstance(value, list):
        return "[" + ", ".join(_py(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_py(k)}: {_py(v)}" for k, v in value.items()) + "}"
    return repr(value)


# What LiveCodeBench's and TACO's harnesses put before a call-based program (lcb_runner's `import_string`): starter
# code uses `List[int]` and solutions use `deque`, `gcd`, ... without importing them. Function-task prompts start
# with it, so the program the sandbox runs has it too.
CALL_PREAMBLE = (
    "from string import *\nfrom re import *\nfrom datetime import *\nfrom collections import *\n"
    "from heapq import *\nfrom bisect import *\nfrom copy import *\nfrom math import *\nfrom random import *\n"
    "from statistics import *\nfrom itertools import *\nfrom functools import *\nfrom operator import *\n"
    "from io import *\nfrom sys import *\nfrom json import *\nfrom builtins import *\nfrom typing import *\n"
    "import string, re, datetime, collections, heapq, bisect, copy, math, random, statistics, itertools\n"
    "import functools, operator, io, sys, json\nsys.setrecursionlimit(50000)\n"
)


def _call_prompt(statement: str, starter_code: str, call: str) -> str:
    """A function-task prompt: the preamble, then the statement and starter code as a docstring (raw, so the
    statement's backslashes stay as written); the completion is the whole solution, as for MBPP."""
    text = statement.replace("\x00", "").replace('"""', "'''").strip()
    starter = starter_code.replace('"""', "'''").rstrip()
    text += f"\n\nComplete this starter code (the tests call {call}):\n\n{starter}\n" if starter else "\n"
    return CALL_PREAMBLE + '\nr"""\n' + text + '"""\n'


def _seconds(text) -> float | None:
    """TACO's time_limit ("2 seconds", "1.0 second", "None", None) in seconds."""
    m = re.search(r"(\d+(?:\.\d+)?)\s*(?:s\b|sec)", str(text or ""))
    return float(m.group(1)) if m else None


def _megabytes(text) -> int | None:
    """TACO's memory_limit ("256 megabytes", "512.0 MB", "None", None) in MB."""
    m = re.search(r"(\d+(?:\.\d+)?)\s*(?:megabytes|mb\b|mib\b)", str(text or ""), flags=re.I)
    return int(math.ceil(float(m.group(1)))) if m else None


# CodeContests (deepmind/code_contests, CC BY 4.0): 13,328 train / 117 valid / 165 test problems.
# Schema (contest_problem.proto): name, description, public_tests / private_tests / generated_tests as
# {input: [str], output: [str]}, solutions / incorrect_solutions as {language: [int], solution: [str]} with
# language 3 = PYTHON3 (1 is Python 2), time_limit {seconds, nanos} (may be null), memory_limit_bytes, input_file,
# output_file, source, difficulty, cf_* metadata.
CODECONTESTS_SPLITS = {"train": "train", "validation": "valid", "test": "test", "all": "train+valid+test"}
PYTHON3 = 3
_CC_FIELDS = ("name", "description", "public_tests", "private_tests", "generated_tests", "solutions")


def _cc_tests(record: dict, key: str) -> list[dict]:
    tests = record[key]
    if not isinstance(tests, dict) or "input" not in tests or "output" not in tests:
        raise TaskError(f"codecontests record {record.get('name')!r}: {key} must be {{input: [...], output: [...]}}")
    return _cases("codecontests", repr(record.get("name")), tests["input"], tests["output"], key)


def codecontests_task(record: dict) -> Task | None:
    """One deepmind/code_contests record as a stdio Task (None: it reads/writes files, or has no tests).

    The verdict runs public + private + generated tests (AlphaCode's "correct"); `public_tests` holds the public
    ones; the first Python 3 solution is the canonical one ("" when the problem has none); the problem's time and
    memory limits are carried (see limits_for)."""
    name = record.get("name")
    _need("codecontests", repr(name), record, *_CC_FIELDS)
    if not isinstance(name, str) or not name or not isinstance(record["description"], str):
        raise TaskError(f"codecontests record {name!r}: name and description must be non-empty strings")
    if record.get("input_file") or record.get("output_file"):
        return None
    public = _cc_tests(record, "public_tests")
    tests = public + _cc_tests(record, "private_tests") + _cc_tests(record, "generated_tests")
    if not tests:
        return None
    solutions = record["solutions"]
    if not isinstance(solutions, dict) or not isinstance(solutions.get("language"), list):
        raise TaskError(f"codecontests record {name!r}: solutions must be {{language: [...], solution: [...]}}")
    python3 = [
        c for lang, c in zip(solutions["language"], solutions.get("solution") or [], strict=False) if lang == PYTHON3
    ]
    limit = record.get("time_limit")
    time_limit_s = None
    if isinstance(limit, dict) and (limit.get("seconds") or limit.get("nanos")):
        time_limit_s = float(limit.get("seconds") or 0) + float(limit.get("nanos") or 0) / 1e9
    memory = record.get("memory_limit_bytes")
    return make_task(
        "codecontests",
        task_id=f"codecontests/{name}",
        prompt=name + "\n\n" + record["description"].strip() + STDIO_INSTRUCTION,
        tests=json.dumps(tests),
        entry_point="",
        canonical_solution=python3[0] if python3 else "",
        kind="stdio",
        time_limit_s=time_limit_s,
        memory_limit_mb=int(math.ceil(memory / 2**20)) if isinstance(memory, int) and memory > 0 else None,
        public_tests=json.dumps(public),
    )


def load_codecontests(split: str) -> list[Task]:
    if split not in CODECONTESTS_SPLITS:
        raise ValueError(f"codecontests (hub) has splits {', '.join(CODECONTESTS_SPLITS)}; not {split!r}")
    tasks, skipped = [], {"read or write files, or have no tests": []}
    for record in base.hub_records("deepmind/code_contests", split=CODECONTESTS_SPLITS[split]):
        task = codecontests_task(record)
        if task is None:
            skipped["read or write files, or have no tests"].append(record.get("name"))
        else:
            tasks.append(task)
    _skipped("codecontests", skipped)
    return tasks


# TACO-verified (likaixin/TACO-verified, MIT; derived from BAAI/TACO, Apache 2.0): TACO's train problems with only
# the solutions that pass their tests, one hub split ("train"). Schema (TACO's): question, solutions (here a list
# of Python programs), starter_code, input_output (a JSON string {inputs, outputs, fn_name?}), difficulty, source,
# url, time_limit / memory_limit (text: "2 seconds", "256 megabytes"), tags, skill_types, ...; `id` when present.
# No fn_name: stdin/stdout, inputs/outputs are texts. fn_name: call-based, inputs[i] is the argument list and
# outputs[i] the result, often wrapped in a one-element list (TACO's harness accepts either; so do the tests here).
TACO_SPLITS = ("train", "all")
_TACO_FIELDS = ("question", "solutions", "starter_code", "input_output")
_TACO_EQUAL = (
    "def _taco_equal(got, want):  # TACO's rule: a tuple is its list; the expected value may be wrapped in a list\n"
    "    got = list(got) if isinstance(got, tuple) else got\n"
    "    return got == want or (isinstance(want, list) and len(want) == 1 and got == want[0])\n\n"
)


def _int_keys(value):
    """TACO's process_input_output: JSON made int dict keys strings; a singleton list of one dict gets them back."""
    if isinstance(value, list) and value and isinstance(value[0], dict):
        try:
            return [{int(k): v for k, v in value[0].items()}] + value[1:]
        except ValueError:
            return value
    return value


def taco_task(record: dict, index: int) -> Task | None:
    """One TACO-verified record as a Task: stdio, or function (fn_name: asserts calling it) (None: no tests)."""
    task_id = f"taco/{record.get('id', index)}"
    _need("taco", task_id, record, *_TACO_FIELDS)
    try:
        io = json.loads(record["input_output"]) if record["input_output"] else {}
    except (TypeError, ValueError) as e:
        raise TaskError(f"taco record {task_id}: input_output is not JSON ({e})") from None
    if not isinstance(io, dict):
        raise TaskError(f"taco record {task_id}: input_output must be a JSON object {{inputs, outputs, fn_name}}")
    if not io.get("inputs"):
        return None
    solutions = record["solutions"]
    if isinstance(solutions, str):  # BAAI/TACO stores a JSON string; TACO-verified a list
        solutions = json.loads(solutions) if solutions.strip() else []
    if not isinstance(solutions, list) or not all(isinstance(c, str) for c in solutions):
        raise TaskError(f"taco record {task_id}: solutions must be a list of programs")
    question = record["question"]
    if not isinstance(question, str) or not question.strip():
        raise TaskError(f"taco record {task_id}: question must be a non-empty string")
    limits = dict(
        time_limit_s=_seconds(record.get("time_limit")), memory_limit_mb=_megabytes(record.get("memory_limit"))
    )
    fn_name = io.get("fn_name")
    if not fn_name:
        cases = _cases("taco", task_id, io.get("inputs"), io.get("outputs"), "input_output's inputs/outputs")
        return make_task(
            "taco",
            task_id=task_id,
            prompt=question.strip() + STDIO_INSTRUCTION,
            tests=json.dumps(cases),
            entry_point="",
            canonical_solution=solutions[0] if solutions else "",
            kind="stdio",
            **limits,
        )
    inputs, outputs = io.get("inputs"), io.get("outputs")
    if not isinstance(fn_name, str) or not fn_name.isidentifier():
        raise TaskError(f"taco record {task_id}: fn_name {fn_name!r} is not a Python name")
    if not isinstance(inputs, list) or not isinstance(outputs, list) or len(inputs) != len(outputs):
        raise TaskError(f"taco record {task_id}: input_output's inputs/outputs must be two lists of equal length")
    starter = record["starter_code"] or ""
    in_class = "class Solution" in starter or (not starter.strip() and any("class Solution" in c for c in solutions))
    call = f"Solution().{fn_name}" if in_class else fn_name
    asserts = []
    for args, want in zip(inputs, outputs, strict=True):
        args = _int_keys(args)
        if not isinstance(args, list):
            raise TaskError(f"taco record {task_id}: a call-based input must be the list of arguments")
        asserts.append(f"assert _taco_equal({call}({', '.join(_py(a) for a in args)}), {_py(_int_keys(want))})")
    return make_task(
        "taco",
        task_id=task_id,
        prompt=_call_prompt(question, starter, call + "(...)"),
        tests=_TACO_EQUAL + "\n".join(asserts) + "\n",
        entry_point=fn_name,
        canonical_solution=solutions[0] if solutions else "",
        **limits,
    )


def load_taco(split: str, source: str) -> list[Task]:
    if split not in TACO_SPLITS:
        raise ValueError(f"taco has splits {', '.join(TACO_SPLITS)} (the hub's one split, all of it); not {split!r}")
    tasks, skipped = [], {"have no tests": []}
    for index, record in enumerate(base.hub_records("likaixin/TACO-verified", split="train")):
        task = taco_task(record, index)
        if task is None:
            skipped["have no tests"].append(f"taco/{record.get('id', index)}")
        else:
            tasks.append(task)
    _skipped("taco", skipped)
    return tasks


# LiveCodeBench (livecodebench/code_generation_lite; problems from LeetCode, AtCoder, Codeforces, each with its
# contest date, so a model is tested on problems published after its training cut-off). The hub repository is a set
# of JSONL files, one per release (`datasets` no longer runs its loading script); `release_version` picks files as
# lcb_runner does. Schema (lcb_runner/benchmarks/code_generation.py): question_title, question_content, platform,
# question_id, contest_id, contest_date (ISO), starter_code, difficulty, public_test_cases (JSON), private_test_cases
# (JSON, or base64 of zlib of a pickle of that JSON text), metadata (JSON: func_name for functional problems).
# Each test is {input, output, testtype}: "stdin" (texts) or "functional" (input: one JSON value per line, the
# arguments; output: the JSON result; the tests call Solution().func_name). No solutions are published.
LCB_REPO = "hf://datasets/livecodebench/code_generation_lite"
_LCB_FILES = ["test.jsonl"] + [f"test{i}.jsonl" for i in range(2, 7)]
LCB_RELEASES = {f"release_v{i}": _LCB_FILES[:i] for i in range(1, 7)} | {"release_latest": _LCB_FILES}
LCB_RELEASES |= {f"v{i}": [_LCB_FILES[i - 1]] for i in range(1, 7)}  # one release's new problems only
LCB_RELEASES |= {f"v{i}_v{j}": _LCB_FILES[i - 1 : j] for i in range(1, 7) for j in range(i + 1, 7)}
LCB_SPLITS = ("test", "all")
LCB_MAX_DECODED_BYTES = 1 << 30  # a private_test_cases blob that inflates past this is refused (zip bomb)
_LCB_FIELDS = (
    "question_title", "question_content", "platform", "question_id", "contest_id", "contest_date", "starter_code",
    "difficulty", "public_test_cases", "private_test_cases", "metadata",
)  # fmt: skip
# The only pickle opcodes a pickled str uses: decoding checks every opcode and never runs the unpickler.
_PICKLE_STR_OPS = {"PROTO", "FRAME", "SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "MEMOIZE", "PUT",
                   "BINPUT", "LONG_BINPUT", "STOP"}  # fmt: skip


def decode_lcb_tests(text: str, record_id: str = "?") -> list[dict]:
    """LiveCodeBench's private_test_cases: JSON, or base64(zlib(pickle(JSON text))), decoded without unpickling.

    The pickle is walked opcode by opcode (`pickletools.genops` parses, it executes nothing) and must be a single
    string: any other opcode (a global, a call, a reduce) is refused, so nothing in the data can run.
    """
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        pass
    where = f"livecodebench record {record_id}: private_test_cases"
    try:
        inflater = zlib.decompressobj()
        blob = inflater.decompress(base64.b64decode(text.encode("ascii"), validate=True), LCB_MAX_DECODED_BYTES)
    except (AttributeError, ValueError, zlib.error) as e:
        raise TaskError(f"{where} is neither JSON nor base64 of zlib data ({e})") from None
    if inflater.unconsumed_tail:
        raise TaskError(f"{where} inflates past {LCB_MAX_DECODED_BYTES} bytes")
    try:
        ops = [(op.name, arg) for op, arg, _ in pickletools.genops(blob)]
    except ValueError as e:
        raise TaskError(f"{where} is not a valid pickle ({e})") from None
    refused = [name for name, _ in ops if name not in _PICKLE_STR_OPS]
    if refused:
        raise TaskError(
            f"{where} is a pickle with opcode {refused[0]}, not a plain string; refused (it could run code)"
        )
    strings = [arg for name, arg in ops if isinstance(arg, str) and name != "PROTO"]
    if len(strings) != 1:
        raise TaskError(f"livecodebench record {record_id}: private_test_cases must pickle exactly one string")
    try:
        return json.loads(strings[0])
    except ValueError as e:
        raise TaskError(f"livecodebench record {record_id}: its decoded private tests are not JSON ({e})") from None


def _lcb_cases(record_id: str, tests, kind: str, what: str) -> list:
    if not isinstance(tests, list) or not all(isinstance(t, dict) and {"input", "output"} <= set(t) for t in tests):
        raise TaskError(f"livecodebench record {record_id}: {what} must be a list of {{input, output, testtype}}")
    want = "stdin" if kind == "stdio" else "functional"
    if any(t.get("testtype", want) != want for t in tests):
        raise TaskError(f"livecodebench record {record_id}: {what} mixes testtypes; this problem's are {want!r}")
    return tests


def _lcb_asserts(record_id: str, tests: list, func: str) -> str:
    lines = []
    for t in tests:
        try:
            args = [json.loads(line) for line in str(t["input"]).split("\n")]
            want = json.loads(t["output"])
        except ValueError as e:
            raise TaskError(f"livecodebench record {record_id}: a functional test is not JSON ({e})") from None
        lines.append(f"assert Solution().{func}({', '.join(_py(a) for a in args)}) == {_py(want)}")
    return "\n".join(lines) + "\n"


def livecodebench_task(record: dict) -> Task:
    """One code_generation_lite record as a Task: stdio (JSON cases) or function (asserts on Solution().func).

    The verdict runs public + private tests, as lcb_runner grades; `public_tests` holds the public ones (feedback).
    Comparison: stdio outputs token by token as the sandbox compares every stdio task; functional results with ==.
    """
    record_id = str(record.get("question_id", "?"))
    _need("livecodebench", record_id, record, *_LCB_FIELDS)
    try:
        public = json.loads(record["public_test_cases"])
        metadata = json.loads(record["metadata"] or "{}")
    except (TypeError, ValueError) as e:
        raise TaskError(f"livecodebench record {record_id}: public_test_cases / metadata are not JSON ({e})") from None
    private = decode_lcb_tests(record["private_test_cases"], record_id)
    func = metadata.get("func_name") if isinstance(metadata, dict) else None
    kind = "function" if func else "stdio"
    public = _lcb_cases(record_id, public, kind, "public_test_cases")
    private = _lcb_cases(record_id, private, kind, "private_test_cases")
    fields = dict(task_id=f"livecodebench/{record_id}", canonical_solution="", kind=kind)
    if kind == "stdio":
        cases = [{"input": t["input"], "output": t["output"]} for t in public + private]
        return make_task(
            "livecodebench",
            prompt=record["question_content"].strip() + STDIO_INSTRUCTION,
            tests=json.dumps(cases),
            entry_point="",
            public_tests=json.dumps(cases[: len(public)]),
            **fields,
        )
    if not isinstance(func, str) or not func.isidentifier():
        raise TaskError(f"livecodebench record {record_id}: metadata's func_name {func!r} is not a Python name")
    return make_task(
        "livecodebench",
        prompt=_call_prompt(record["question_content"], record["starter_code"] or "", f"Solution().{func}(...)"),
        tests=_lcb_asserts(record_id, public + private, func),
        entry_point=func,
        public_tests=_lcb_asserts(record_id, public, func),
        **fields,
    )


def _day(value: str | None, option: str) -> datetime | None:
    if value in (None, ""):
        return None
    try:
        return datetime.strptime(str(value), "%Y-%m-%d")
    except ValueError:
        raise ValueError(f"livecodebench {option} must be a date YYYY-MM-DD, not {value!r}") from None


def load_livecodebench(
    split: str,
    source: str,
    release_version: str = "release_v6",
    start_date: str | None = None,
    end_date: str | None = None,
) -> list[Task]:
    """Problems of `release_version` whose contest_date lies in [start_date, end_date] (each optional, inclusive,
    compared as lcb_runner does: dates at midnight)."""
    if split not in LCB_SPLITS:
        raise ValueError(f"livecodebench has splits {', '.join(LCB_SPLITS)} (the same problems); not {split!r}")
    if release_version not in LCB_RELEASES:
        raise ValueError(f"livecodebench release_version {release_version!r} is not one of {', '.join(LCB_RELEASES)}")
    start, end = _day(start_date, "start_date"), _day(end_date, "end_date")
    files = [f"{LCB_REPO}/{name}" for name in LCB_RELEASES[release_version]]
    tasks = []
    for record in base.hub_records("json", data_files=files, split="train"):
        try:
            date = datetime.fromisoformat(str(record.get("contest_date")))
        except ValueError:
            raise TaskError(
                f"livecodebench record {record.get('question_id', '?')}: contest_date "
                f"{record.get('contest_date')!r} is not an ISO date"
            ) from None
        if (start and date < start) or (end and date > end):
            continue
        tasks.append(livecodebench_task(record))
    return tasks
