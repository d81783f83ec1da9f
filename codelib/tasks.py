"""Tasks: one record type for every benchmark, and the adapters that build it.

A `Task` is what the policy sees (`prompt`), what the sandbox checks (`tests`) and what proves the
tests are satisfiable (`canonical_solution`). Function tasks (HumanEval, MBPP, synthetic) are checked
by running `prompt + completion + tests`; stdin/stdout tasks (CodeContests) by running the completion
as a program on each input file and comparing its output.

The benchmark files ship inside the package (`codelib/data/`, with their licences in its README);
`source="hub"` loads the same datasets through `datasets.load_dataset` instead. TACO-verified, the full
CodeContests and LiveCodeBench exist only on the hub (their adapters are at the end of this file).
"""

from __future__ import annotations

import base64
import gzip
import json
import math
import pickletools
import random
import re
import warnings
import zlib
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent / "data"
NAMES = ("humaneval", "mbpp", "humaneval_plus", "mbpp_plus", "codecontests", "synthetic", "taco", "livecodebench")
SPLITS = ("train", "test", "validation", "fewshot", "rl", "all")
HUB_ONLY = ("taco", "livecodebench")  # no bundled copy: source=None loads these from the hub


@dataclass(frozen=True)
class Task:
    """One problem: the prompt to continue, the tests that judge it, and a solution that passes them."""

    task_id: str
    prompt: str  # function tasks: a code prefix the completion continues; stdio: the statement
    tests: str  # function: code defining check(candidate) or bare asserts; stdio: JSON [{"input", "output"}]
    entry_point: str  # the function under test ("" for stdio)
    canonical_solution: str  # a continuation of `prompt` that passes `tests`
    kind: str = "function"  # "function" | "stdio"
    plus_inputs: str = ""  # JSON list of argument lists (HumanEval+/MBPP+ extra inputs), "" if none
    atol: float = 0.0  # float tolerance when comparing outputs on plus_inputs
    time_limit_s: float | None = None  # the problem's own time limit (TACO, CodeContests); see limits_for
    memory_limit_mb: int | None = None  # the problem's own memory limit (TACO, CodeContests); see limits_for
    public_tests: str = ""  # tests shown with the problem, same format as `tests` (feedback); "" if none

    def to_dict(self) -> dict:
        return asdict(self)


class TaskError(ValueError):
    """A dataset record that cannot become a Task; the message names the record and what is missing."""


# A task with its own limits gets the sandbox's limits scaled by them; the sandbox's limits are what a task with a
# 1-second, 256 MB limit (and any task without limits) gets.
REFERENCE_TIME_LIMIT_S = 1.0
REFERENCE_MEMORY_LIMIT_MB = 256
MAX_LIMIT_FACTOR = 10.0  # a 30 s problem does not hold a worker for 30x the default per test case


def limits_for(task: Task, timeout_s: float, memory_mb: int) -> tuple[float, int]:
    """The sandbox limits (wall seconds per program or stdio case, address-space MB) for one task.

    `timeout_s` and `memory_mb` are the sandbox's (the evaluator's / trainer's `timeout_s`): they are what a task
    without limits of its own gets, and what a task whose own limits are 1 s and 256 MB gets. A task with its own
    limits (TACO, CodeContests) scales them up by its own over that reference, never down, and by at most
    MAX_LIMIT_FACTOR: `timeout_s * clip(time_limit_s / 1 s, 1, 10)` and
    `memory_mb * clip(memory_limit_mb / 256 MB, 1, 10)`. Never down, because contest limits are set for C++ and
    measure resident memory, while a Python program is slower and the sandbox caps address space.

    >>> limits_for(Task("t", "p", "[1]", "", "", "stdio", time_limit_s=2.0, memory_limit_mb=512), 5.0, 1024)
    (10.0, 2048)
    """

    def factor(own, reference):
        if own is None or not own > 0:
            return 1.0
        return min(max(float(own) / reference, 1.0), MAX_LIMIT_FACTOR)

    time_factor = factor(getattr(task, "time_limit_s", None), REFERENCE_TIME_LIMIT_S)
    memory_factor = factor(getattr(task, "memory_limit_mb", None), REFERENCE_MEMORY_LIMIT_MB)
    return float(timeout_s) * time_factor, int(math.ceil(int(memory_mb) * memory_factor))


def program_for(task: Task, completion: str) -> str:
    """The program the sandbox runs to check `completion` on a function task (stdio: the completion)."""
    if task.kind == "stdio":
        return completion
    program = task.prompt + completion + "\n\n" + task.tests
    if "def check(" in task.tests:
        program += f"\n\ncheck({task.entry_point})\n"
    return program


def make_task(dataset: str, **fields) -> Task:
    """Build a Task, rejecting records without tests or without an entry point."""
    task_id = fields.get("task_id", "?")
    kind = fields.get("kind", "function")
    if kind not in ("function", "stdio"):
        raise TaskError(f"{dataset} record {task_id}: kind must be 'function' or 'stdio', not {kind!r}")
    if not str(fields.get("tests", "")).strip() or fields.get("tests") == "[]":
        raise TaskError(f"{dataset} record {task_id}: it has no tests; every task needs tests to be judged")
    if kind == "function" and not fields.get("entry_point"):
        raise TaskError(f"{dataset} record {task_id}: it has no entry_point (the function the tests call)")
    if not fields.get("prompt"):
        raise TaskError(f"{dataset} record {task_id}: it has an empty prompt")
    return Task(**fields)


# ---------------------------------------------------------------------------------------------------------------
# readers: bundled files or the hub


def _read_jsonl(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _ids(path: Path) -> list[str]:
    return path.read_text().split()


def _hub(name: str, *args, split: str, **kwargs) -> list[dict]:
    import datasets  # imported lazily: only the hub path needs it

    return list(datasets.load_dataset(name, *args, split=split, **kwargs))


# ---------------------------------------------------------------------------------------------------------------
# HumanEval (131 train / 33 test by the fixed id lists) and HumanEval+


def _humaneval_split(records: list[dict], split: str) -> list[dict]:
    if split == "all":
        return records
    if split not in ("train", "test"):
        raise ValueError(f"humaneval has splits train, test, all; not {split!r}")
    keep = set(_ids(DATA_DIR / "humaneval" / f"{split}_ids.txt"))
    return [r for r in records if r["task_id"] in keep]


def _humaneval(split: str, source: str) -> list[Task]:
    if source == "hub":
        records = _hub("openai/openai_humaneval", split="test")
    else:
        records = _read_jsonl(DATA_DIR / "humaneval" / "HumanEval.jsonl.gz")
    return [
        make_task(
            "humaneval",
            task_id=r["task_id"],
            prompt=r["prompt"],
            tests=r["test"],
            entry_point=r["entry_point"],
            canonical_solution=r["canonical_solution"],
        )
        for r in _humaneval_split(records, split)
    ]


def _humaneval_plus(split: str, source: str) -> list[Task]:
    if source == "hub":
        records = _hub("evalplus/humanevalplus", split="test")
    else:
        records = _read_jsonl(DATA_DIR / "evalplus" / "HumanEvalPlus-v0.1.10.jsonl.gz")
    return [
        make_task(
            "humaneval_plus",
            task_id=r["task_id"],
            prompt=r["prompt"],
            tests=r["test"],
            entry_point=r["entry_point"],
            canonical_solution=r["canonical_solution"],
            plus_inputs=json.dumps(list(r["base_input"]) + list(r["plus_input"])),
            atol=float(r.get("atol") or 0.0),
        )
        for r in _humaneval_split(records, split)
    ]


# ---------------------------------------------------------------------------------------------------------------
# MBPP (standard split by id) and MBPP+

MBPP_RANGES = {"fewshot": (1, 10), "test": (11, 510), "validation": (511, 600), "train": (601, 974)}


def _mbpp_in_split(task_id: int, split: str) -> bool:
    if split == "all":
        return True
    if split not in MBPP_RANGES:
        raise ValueError(f"mbpp has splits {', '.join(MBPP_RANGES)}, all; not {split!r}")
    lo, hi = MBPP_RANGES[split]
    return lo <= task_id <= hi


def _mbpp_prompt(text: str, first_assert: str) -> str:
    # The same docstring-prefix format as MBPP+ so both read alike; the model writes the whole function.
    return f'"""\n{text.strip()}\n{first_assert.strip()}\n"""\n'


def _entry_point(code: str, first_assert: str) -> str:
    """The function the asserts call: the first `def` name that the first assert mentions."""
    import re

    names = re.findall(r"^def\s+(\w+)", code, flags=re.M)
    for name in names:
        if re.search(rf"\b{name}\s*\(", first_assert):
            return name
    return names[-1] if names else ""


def _mbpp(split: str, source: str) -> list[Task]:
    records = (
        _hub("google-research-datasets/mbpp", "full", split="train+test+validation+prompt")
        if source == "hub"
        else (_read_jsonl(DATA_DIR / "mbpp" / "mbpp.jsonl"))
    )
    records = sorted(records, key=lambda r: int(r["task_id"]))
    tasks = []
    for r in records:
        if not _mbpp_in_split(int(r["task_id"]), split):
            continue
        code = r["code"].replace("\r\n", "\n")
        if not r.get("test_list"):
            raise TaskError(f"mbpp record {r['task_id']}: it has no test_list; every task needs tests")
        # test_setup_code must run *after* the solution (tasks 367 and 927 use its classes).
        tests = (r.get("test_setup_code") or "") + "\n" + "\n".join(r["test_list"]) + "\n"
        tasks.append(
            make_task(
                "mbpp",
                task_id=f"mbpp/{r['task_id']}",
                prompt=_mbpp_prompt(r["text"], r["test_list"][0]),
                tests=tests,
                entry_point=_entry_point(code, r["test_list"][0]),
                canonical_solution=code + "\n",
            )
        )
    return tasks


# MBPP+ stores tuples as lists and complex numbers as strings (JSON has neither); these tasks convert back,
# as the EvalPlus harness does.
_MBPP_PLUS_TUPLE_ARGS = {"Mbpp/106": (1,), "Mbpp/720": (0,), "Mbpp/580": (0,)}
_MBPP_PLUS_COMPLEX_ARGS = {"Mbpp/124": (1,), "Mbpp/252": (0,)}


def _mbpp_plus_inputs(task_id: str, inputs: list) -> list:
    tuples, complexes = _MBPP_PLUS_TUPLE_ARGS.get(task_id, ()), _MBPP_PLUS_COMPLEX_ARGS.get(task_id, ())
    if not tuples and not complexes:
        return inputs
    out = []
    for args in inputs:
        args = list(args)
        for i in tuples:
            args[i] = {"__tuple__": args[i]}
        for i in complexes:
            args[i] = {"__complex__": str(args[i])}
        out.append(args)
    return out


def _mbpp_plus(split: str, source: str) -> list[Task]:
    if source == "hub":
        records = _hub("evalplus/mbppplus", split="test")
    else:
        records = _read_jsonl(DATA_DIR / "evalplus" / "MbppPlus-v0.2.0.jsonl.gz")
    tasks = []
    for r in records:
        if not _mbpp_in_split(int(r["task_id"].split("/")[1]), split):
            continue
        plus = r["plus_input"] if isinstance(r["plus_input"], list) else []
        tasks.append(
            make_task(
                "mbpp_plus",
                task_id=r["task_id"],
                prompt=r["prompt"],
                # Mbpp/120's assertion uses math.isclose without importing math.
                tests="import math\n" + r["assertion"],
                entry_point=r["entry_point"],
                canonical_solution=r["canonical_solution"].lstrip("\n"),
                plus_inputs=json.dumps(_mbpp_plus_inputs(r["task_id"], list(r["base_input"]) + plus)),
                atol=float(r.get("atol") or 0.0),
            )
        )
    return tasks


# ---------------------------------------------------------------------------------------------------------------
# CodeContests sample: stdin/stdout, the 256 verified problems, 205 train / 51 test

STDIO_INSTRUCTION = "\n\nWrite a Python 3 program that reads the input from standard input and prints the answer.\n"


def _codecontests(split: str, source: str) -> list[Task]:
    if source == "hub":
        return _codecontests_hub(split)
    records = _read_jsonl(DATA_DIR / "codecontests" / "codecontests_sample300.jsonl.gz")
    keep = set(_ids(DATA_DIR / "codecontests" / "verified_ids.txt"))
    if split in ("train", "test"):
        keep &= set(_ids(DATA_DIR / "codecontests" / f"{split}_ids.txt"))
    elif split != "all":
        raise ValueError(f"codecontests has splits train, test, all; not {split!r}")
    return [
        make_task(
            "codecontests",
            task_id=f"codecontests/{r['problem_id']}",
            prompt=r["title"] + "\n\n" + r["description"].strip() + STDIO_INSTRUCTION,
            tests=json.dumps([{"input": t["input"], "output": t["output"]} for t in r["tests"]]),
            entry_point="",
            canonical_solution=r["solution"],
            kind="stdio",
        )
        for r in records
        if r["problem_id"] in keep
    ]


def _synthetic(split: str, source: str) -> list[Task]:
    from codelib import synthetic

    if split == "rl":  # prompts for RL that the supervised stage never saw (training rules, fresh draws)
        return synthetic.generate_rl()
    train, test = synthetic.generate()
    if split == "all":
        return train + test
    if split not in ("train", "test"):
        raise ValueError(f"synthetic has splits train, test, rl, all; not {split!r}")
    return train if split == "train" else test


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


def _codecontests_hub(split: str) -> list[Task]:
    if split not in CODECONTESTS_SPLITS:
        raise ValueError(f"codecontests (hub) has splits {', '.join(CODECONTESTS_SPLITS)}; not {split!r}")
    tasks, skipped = [], {"read or write files, or have no tests": []}
    for record in _hub("deepmind/code_contests", split=CODECONTESTS_SPLITS[split]):
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


def _taco(split: str, source: str) -> list[Task]:
    if split not in TACO_SPLITS:
        raise ValueError(f"taco has splits {', '.join(TACO_SPLITS)} (the hub's one split, all of it); not {split!r}")
    tasks, skipped = [], {"have no tests": []}
    for index, record in enumerate(_hub("likaixin/TACO-verified", split="train")):
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


def _livecodebench(
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
    for record in _hub("json", data_files=files, split="train"):
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


_LOADERS = {
    "humaneval": _humaneval,
    "humaneval_plus": _humaneval_plus,
    "mbpp": _mbpp,
    "mbpp_plus": _mbpp_plus,
    "codecontests": _codecontests,
    "synthetic": _synthetic,
    "taco": _taco,
    "livecodebench": _livecodebench,
}
_OPTIONS = {"livecodebench": ("release_version", "start_date", "end_date")}  # dataset parameters beyond the split


def parse_dataset(spec: str) -> tuple[str, dict]:
    """A dataset spec as params files write it: a name, optionally followed by ":key=value,key=value" options
    (`source`, and the dataset's own parameters), e.g. "codecontests:source=hub" or
    "livecodebench:release_version=release_v6,start_date=2025-02-01,end_date=2025-05-01".

    >>> parse_dataset("livecodebench:release_version=release_v5,start_date=2024-08-01")
    ('livecodebench', {'release_version': 'release_v5', 'start_date': '2024-08-01'})
    """
    name, _, rest = str(spec).partition(":")
    name = name.strip()
    if name not in _LOADERS:
        raise ValueError(f"unknown dataset {name!r}; choose one of {', '.join(NAMES)}")
    options = {}
    for item in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or key not in ("source", *_OPTIONS.get(name, ())):
            allowed = ", ".join(("source", *_OPTIONS.get(name, ())))
            raise ValueError(f"dataset spec {spec!r}: {item!r} is not an option of {name} (options: {allowed})")
        options[key] = value.strip()
    return name, options


def load_tasks(
    name: str, split: str = "test", source: str | None = None, limit: int | None = None, **options
) -> list[Task]:
    """Load a dataset's split as Tasks.

    name: humaneval | mbpp | humaneval_plus | mbpp_plus | codecontests | synthetic | taco | livecodebench, or a
        spec with options, "livecodebench:release_version=release_v6,start_date=2025-02-01" (see parse_dataset)
    split: train | test | all (mbpp also validation, fewshot; codecontests from the hub also validation;
        taco: train | all; livecodebench: test | all)
    source: "bundled" (files in codelib/data, offline), "hub" (`datasets.load_dataset`), or None: bundled where
        there is a bundled copy (the CodeContests default is the verified 256-problem sample), else the hub
    limit: keep the first `limit` tasks (a quick look; order is the dataset's)
    options: livecodebench's release_version (default "release_v6"), start_date and end_date ("YYYY-MM-DD",
        inclusive) on contest_date
    """
    name, spec_options = parse_dataset(name)
    options = {**spec_options, **options}
    source = options.pop("source", None) if source is None else source
    if source is None:
        source = "hub" if name in HUB_ONLY else "bundled"
    if source not in ("bundled", "hub"):
        raise ValueError(f"source must be 'bundled' or 'hub', not {source!r}")
    if source == "bundled" and name in HUB_ONLY:
        raise ValueError(f"{name} has no bundled copy; load it with source='hub'")
    unknown = set(options) - set(_OPTIONS.get(name, ()))
    if unknown:
        raise ValueError(
            f"{name} takes no option {sorted(unknown)[0]!r} (options: {', '.join(_OPTIONS.get(name, ())) or 'none'})"
        )
    tasks = _LOADERS[name](split, source, **options)
    return tasks[:limit] if limit else tasks


def sample_tasks(tasks: list[Task], n: int, seed: int = 0) -> list[Task]:
    """A seeded subset of n tasks, in their original order (all of them if n >= len)."""
    if n >= len(tasks):
        return list(tasks)
    keep = set(random.Random(seed).sample(range(len(tasks)), n))
    return [t for i, t in enumerate(tasks) if i in keep]


def tasks_to_rows(tasks: list[Task]) -> list[dict]:
    """Tasks as plain dicts: the columns a `datasets.Dataset` (and so TRL's reward kwargs) carries."""
    return [t.to_dict() for t in tasks]


def task_counts() -> dict[str, dict[str, int]]:
    """Number of tasks per dataset and split (bundled files)."""
    splits = {
        "humaneval": ("train", "test"),
        "humaneval_plus": ("train", "test"),
        "mbpp": ("fewshot", "train", "validation", "test"),
        "mbpp_plus": ("fewshot", "train", "validation", "test"),
        "codecontests": ("train", "test"),
        "synthetic": ("train", "test"),
    }
    return {name: {s: len(load_tasks(name, s)) for s in ss} for name, ss in splits.items()}
