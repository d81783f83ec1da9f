"""The record every benchmark becomes (`Task`), the rules that hold for any task, and the readers of its sources.

`codelib.tasks` builds Tasks from the bundled benchmarks and `codelib.tasks.hub` from hub-only ones; both, and
`codelib.tasks.synthetic`, import this module, which imports none of them.
"""

from __future__ import annotations

import contextlib
import math
import sys
from dataclasses import dataclass, fields
from pathlib import Path

from codelib.plumbing import jsonl

DATA_DIR = Path(__file__).resolve().parents[1] / "data"
STDIO_INSTRUCTION = "\n\nWrite a Python 3 program that reads the input from standard input and prints the answer.\n"


# What lcb_runner runs before every program, call-based and stdin alike (its `import_string`).
LCB_PRELUDE = (
    "from string import *\nfrom re import *\nfrom datetime import *\nfrom collections import *\n"
    "from heapq import *\nfrom bisect import *\nfrom copy import *\nfrom math import *\nfrom random import *\n"
    "from statistics import *\nfrom itertools import *\nfrom functools import *\nfrom operator import *\n"
    "from io import *\nfrom sys import *\nfrom json import *\nfrom builtins import *\nfrom typing import *\n"
    "import string, re, datetime, collections, heapq, bisect, copy, math, random, statistics, itertools\n"
    "import functools, operator, io, sys, json\nsys.setrecursionlimit(50000)\n"
)


# What TACO's harness puts before a stdin program (`synthesize_std_code`) and a call-based one
# (`synthesize_cb_code`). numpy is imported when the program's environment has it (TACO's always does).
TACO_PRELUDE = (
    "import sys\nimport time\nimport itertools\n"
    "from itertools import accumulate, product, permutations, combinations\n"
    "import collections\nfrom collections import Counter, OrderedDict, deque, defaultdict, ChainMap\n"
    "from functools import lru_cache\nimport math\n"
    "from math import sqrt, sin, cos, tan, ceil, fabs, floor, gcd, exp, log, log2\nimport fractions\n"
    "from typing import List, Tuple\ntry:\n    import numpy as np\nexcept ImportError:\n    pass\nimport random\n"
    "import heapq\nfrom heapq import *\n"
)

# What a benchmark's harness runs before a stdin program, by comparator name (`Task.compare`): the sandbox prepends it
# to the program of a stdio task (lcb_runner's `make_function` puts its imports first; TACO's `synthesize_std_code`
# its imports and two names). A calls task's prompt starts with its harness's block instead.
PRELUDES = {"lcb": LCB_PRELUDE, "taco": TACO_PRELUDE + "stdin = sys.stdin\nstdout = sys.stdout\n"}


def stdin_prelude(compare: str) -> str:
    """What the harness of comparator `compare` runs before a stdin program ("" for the default)."""
    return PRELUDES.get(compare, "")


@dataclass(frozen=True)
class Task:
    """One problem: the prompt to continue, the tests that judge it, and a solution that passes them."""

    task_id: str
    prompt: str  # function tasks: a code prefix the completion continues; stdio: the statement
    # function: code defining check(candidate) or bare asserts; stdio: JSON [{"input", "output"}] (texts);
    # calls: JSON [{"input": one JSON value per line (the arguments), "output": the JSON result}]
    tests: str
    entry_point: str  # the function under test ("" for stdio; calls: "func" or "Solution.method")
    canonical_solution: str  # a continuation of `prompt` that passes `tests` ("" when the dataset has none)
    kind: str = "function"  # "function" | "stdio" | "calls"
    plus_inputs: str = ""  # JSON list of argument lists (HumanEval+/MBPP+ extra inputs), "" if none
    atol: float = 0.0  # float tolerance when comparing outputs on plus_inputs
    time_limit_s: float | None = None  # the problem's own time limit (TACO, CodeContests); see limits_for
    memory_limit_mb: int | None = None  # the problem's own memory limit (TACO, CodeContests); see limits_for
    public_tests: str = ""  # tests shown with the problem, same format as `tests` (feedback); "" if none
    compare: str = ""  # how outputs are judged: a name in codelib.sandbox.compare.COMPARATORS ("" = the default)

    def to_dict(self) -> dict:
        """The fields as a dict (every field is an immutable scalar, so no deep copy is needed: `asdict` was ~35 us
        a task, and a rollout turns its 128 completions' tasks into rows every step)."""
        return {name: getattr(self, name) for name in _FIELDS}


_FIELDS = tuple(f.name for f in fields(Task))


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
    if task.kind == "calls":  # the tests are data, called one at a time by the judge
        return task.prompt + completion
    program = task.prompt + completion + "\n\n" + task.tests
    if "def check(" in task.tests:
        program += f"\n\ncheck({task.entry_point})\n"
    return program


KINDS = ("function", "stdio", "calls")


def make_task(dataset: str, **fields) -> Task:
    """Build a Task, rejecting records without tests or without an entry point."""
    task_id = fields.get("task_id", "?")
    kind = fields.get("kind", "function")
    if kind not in KINDS:
        raise TaskError(f"{dataset} record {task_id}: kind must be one of {', '.join(KINDS)}, not {kind!r}")
    if not str(fields.get("tests", "")).strip() or fields.get("tests") == "[]":
        raise TaskError(f"{dataset} record {task_id}: it has no tests; every task needs tests to be judged")
    if kind != "stdio" and not fields.get("entry_point"):
        raise TaskError(f"{dataset} record {task_id}: it has no entry_point (the function the tests call)")
    if not fields.get("prompt"):
        raise TaskError(f"{dataset} record {task_id}: it has an empty prompt")
    return Task(**fields)


# ---------------------------------------------------------------------------------------------------------------
# readers: bundled files or the hub


@contextlib.contextmanager
def big_ints():
    """Lift Python's int <-> str digit limit (4300 digits) while parsing or writing dataset records: a test with an
    integer of 5000 digits is data (the limit guards against hostile text; a dataset file is not that)."""
    old = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        yield
    finally:
        sys.set_int_max_str_digits(old)


def read_jsonl(path: Path) -> list[dict]:
    """A bundled data file's records (codelib.plumbing.jsonl's reader, strict: a missing file or a bad line is an
    error)."""
    return jsonl.read_jsonl(path, strict=True)


def read_ids(path: Path) -> list[str]:
    return path.read_text().split()


def hub_records(name: str, *args, split: str, **kwargs):
    """The records of a hub dataset's split (`datasets.load_dataset`), an iterable of dicts read one at a time from
    the memory-mapped cache (not a list: a loader that filters keeps only what it keeps); tests replace this."""
    import datasets  # imported lazily: only the hub path needs it

    return datasets.load_dataset(name, *args, split=split, **kwargs)


def hub_file(repo: str, resolve) -> Path:
    """A file of a hub dataset repository, as `resolve()` downloads it; tests replace this to answer offline."""
    return resolve()
