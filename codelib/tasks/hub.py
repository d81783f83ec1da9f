"""Hub-only adapters: the full CodeContests and TACO-verified (LiveCodeBench: `codelib.tasks.livecodebench`), read in
their own schemas, each task judged by its benchmark's own rules (`Task.compare`, see codelib/sandbox/compare.py and
docs/datasets.md).

A record that does not match its schema, or that this sandbox cannot judge (file input/output, no tests at all), is
skipped and counted; one warning per load says how many and why (`strict=True` raises TaskError at the first bad
record instead). `codelib.tasks.load_tasks` is the way in.
"""

from __future__ import annotations

import collections
import json
import math
from pathlib import Path

from codelib.tasks import task as base
from codelib.tasks.rows import Rows, _call_prompt, _cases, _megabytes, _need, _seconds
from codelib.tasks.task import STDIO_INSTRUCTION, TACO_PRELUDE, Task, TaskError, big_ints, make_task

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
        compare="codecontests",
    )


def load_codecontests(split: str, strict: bool = False) -> list[Task]:
    """The hub's CodeContests split. Problem names repeat across sources (the same title on two judges), so the n-th
    problem of a name that was already seen gets "#n" after it: ids are unique and stable for a given split."""
    if split not in CODECONTESTS_SPLITS:
        raise ValueError(f"codecontests (hub) has splits {', '.join(CODECONTESTS_SPLITS)}; not {split!r}")
    rows, seen = Rows("codecontests", strict), collections.Counter()
    for record in base.hub_records("deepmind/code_contests", split=CODECONTESTS_SPLITS[split]):
        name = record.get("name") if isinstance(record, dict) else None
        task = rows.add(repr(name), codecontests_task, record, none_means="read or write files, or have no tests")
        if task is not None:
            seen[task.task_id] += 1
            if seen[task.task_id] > 1:
                rows.tasks[-1] = _renamed(task, f"{task.task_id}#{seen[task.task_id]}")
    return rows.done()


def _renamed(task: Task, task_id: str) -> Task:
    from dataclasses import replace

    return replace(task, task_id=task_id)


# TACO-verified (likaixin/TACO-verified, MIT; derived from BAAI/TACO, Apache 2.0): TACO's train problems with only
# the solutions that pass their tests, one hub split ("train"), stored as ONE JSON array (1.93 GB) of records with an
# `id`. Schema (TACO's): id, question, solutions (here a list of Python programs), starter_code, input_output (a JSON
# string {inputs, outputs, fn_name?}), difficulty, source, url, time_limit / memory_limit (text: "2 seconds",
# "256 megabytes"), tags, skill_types, ... No fn_name: stdin/stdout, inputs/outputs are texts (or lists of lines).
# fn_name: call-based, inputs[i] is the argument list and outputs[i] the result, often wrapped in a one-element list
# (TACO's harness accepts either: codelib.sandbox.compare.taco_value). `datasets` reads that file through pandas at
# ~6.4x its size, so the loader downloads the file and reads it record by record (`json_records`).
TACO_REPO = "likaixin/TACO-verified"
TACO_SPLITS = ("train", "all")
_TACO_FIELDS = ("question", "solutions", "starter_code", "input_output")
READ_CHARS = 1 << 20  # json_records reads this much text at a time (more while one record is longer)


def json_records(path, read_chars: int = READ_CHARS):
    """The records of a file holding one JSON array of objects, or JSON lines, read a piece at a time (`read_chars`
    at least): memory holds the records not yet returned and about twice the longest record, never the whole file's
    text.

    >>> import tempfile, os; f = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    >>> _ = f.write('[{"id": 1}, {"id": 2}]'); f.close(); [r["id"] for r in json_records(f.name)]; os.unlink(f.name)
    [1, 2]
    """
    decoder = json.JSONDecoder()
    with open(path, encoding="utf-8-sig") as f, big_ints():
        buf, at, eof, want = "", 0, False, read_chars
        started = False
        while True:
            while at < len(buf) and buf[at] in " \t\r\n,":
                at += 1
            if not started and at < len(buf) and buf[at] == "[":
                at, started = at + 1, True
                continue
            if at < len(buf) and buf[at] == "]":
                return
            if at >= len(buf) or want > len(buf) - at:
                if eof:
                    if at >= len(buf):
                        return
                else:
                    more = f.read(max(read_chars, want))
                    eof = not more
                    buf, at = buf[at:] + more, 0
                    continue
            try:
                record, end = decoder.raw_decode(buf, at)
            except json.JSONDecodeError as e:
                if eof:
                    raise TaskError(f"{path}: not a JSON array or JSON lines of records ({e})") from None
                want = 2 * (len(buf) - at)  # the record is longer than what is read: read as much again, then retry
                continue
            started, want, at = True, read_chars, end
            yield record


def taco_task(record: dict, index: int) -> Task | None:
    """One TACO-verified record as a Task: stdio, or calls (fn_name: `fn` or `Solution.fn`) (None: no tests).
    Judged by TACO's rules (compare "taco"); the problem's time and memory limits are carried (see limits_for)."""
    if not isinstance(record, dict):
        raise TaskError(f"taco record {index}: a record must be a JSON object, not {type(record).__name__}")
    task_id = f"taco/{record.get('id', index)}"
    _need("taco", task_id, record, *_TACO_FIELDS)
    try:
        with big_ints():
            io = json.loads(record["input_output"]) if record["input_output"] else {}
    except (TypeError, ValueError) as e:
        raise TaskError(f"taco record {task_id}: input_output is not JSON ({str(e)[:200]})") from None
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
    common = dict(
        task_id=task_id,
        canonical_solution=solutions[0] if solutions else "",
        time_limit_s=_seconds(record.get("time_limit")),
        memory_limit_mb=_megabytes(record.get("memory_limit")),
        compare="taco",
    )
    fn_name = io.get("fn_name")
    if not fn_name:
        cases = _cases("taco", task_id, io.get("inputs"), io.get("outputs"), "input_output's inputs/outputs")
        with big_ints():
            tests = json.dumps(cases)
        return make_task(
            "taco", prompt=question.strip() + STDIO_INSTRUCTION, tests=tests, entry_point="", kind="stdio", **common
        )
    inputs, outputs = io.get("inputs"), io.get("outputs")
    if not isinstance(fn_name, str) or not fn_name.isidentifier():
        raise TaskError(f"taco record {task_id}: fn_name {fn_name!r} is not a Python name")
    if not isinstance(inputs, list) or not isinstance(outputs, list) or len(inputs) != len(outputs):
        raise TaskError(f"taco record {task_id}: input_output's inputs/outputs must be two lists of equal length")
    if not all(isinstance(args, list) for args in inputs):
        raise TaskError(f"taco record {task_id}: a call-based input must be the list of arguments")
    starter = record["starter_code"] or ""
    # TACO's harness calls Solution().fn when the program defines `class Solution` (LeetCode), else fn
    in_class = "class Solution" in starter or (not starter.strip() and any("class Solution" in c for c in solutions))
    entry = f"Solution.{fn_name}" if in_class else fn_name
    with big_ints():  # the arguments stay data: one JSON value per line, parsed by the judge at run time
        cases = [
            {"input": "\n".join(json.dumps(a) for a in args), "output": json.dumps(want)}
            for args, want in zip(inputs, outputs, strict=True)
        ]
        tests = json.dumps(cases)
    call = f"Solution().{fn_name}" if in_class else fn_name
    return make_task(
        "taco",
        prompt=_call_prompt(question, starter, call + "(...)", TACO_PRELUDE),
        tests=tests,
        entry_point=entry,
        kind="calls",
        **common,
    )


def taco_file() -> Path:
    """The TACO-verified JSON file from the hub (downloaded once into the hub cache); tests replace this."""
    from huggingface_hub import HfApi, hf_hub_download  # imported lazily: only the hub path needs it

    names = [n for n in HfApi().list_repo_files(TACO_REPO, repo_type="dataset") if n.endswith((".json", ".jsonl"))]
    if len(names) != 1:
        raise TaskError(f"{TACO_REPO}: expected one JSON file in the repository, found {names}")
    return Path(hf_hub_download(TACO_REPO, names[0], repo_type="dataset"))


def load_taco(
    split: str, source: str, strict: bool = False, path: str | None = None, read_chars: int = READ_CHARS
) -> list[Task]:
    """TACO-verified's problems, read record by record (`json_records`) from `path` (a JSON array or JSON lines file
    in TACO's schema), or from the hub's file when no path is given."""
    if split not in TACO_SPLITS:
        raise ValueError(f"taco has splits {', '.join(TACO_SPLITS)} (the hub's one split, all of it); not {split!r}")
    rows = Rows("taco", strict)
    for index, record in enumerate(json_records(path or base.hub_file(TACO_REPO, taco_file), read_chars)):
        rid = f"taco/{record.get('id', index)}" if isinstance(record, dict) else f"taco/{index}"
        rows.add(rid, taco_task, record, index)
    return rows.done()
