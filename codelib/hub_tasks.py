"""Hub-only adapters: the full CodeContests, TACO-verified and LiveCodeBench, read in their own schemas, each task
judged by its benchmark's own rules (`Task.compare`, see codelib/sandbox/compare.py and docs/datasets.md).

A record that does not match its schema, or that this sandbox cannot judge (file input/output, no tests at all), is
skipped and counted; one warning per load says how many and why (`strict=True` raises TaskError at the first bad
record instead). `codelib.tasks.load_tasks` is the way in.
"""

from __future__ import annotations

import base64
import collections
import json
import math
import pickletools
import re
import warnings
import zlib
from datetime import datetime
from pathlib import Path

from codelib import task as base
from codelib.task import LCB_PRELUDE, STDIO_INSTRUCTION, TACO_PRELUDE, Task, TaskError, big_ints, make_task

# ---------------------------------------------------------------------------------------------------------------
# reading many records: one bad record costs that record, not the load


class Skip(Exception):
    """Raised by a record's builder: a well-formed record left out on purpose, for `reason`."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class Rows:
    """Tasks built record by record: a record whose builder raises is skipped and counted (or, strict, re-raised as
    a TaskError naming it); `done()` warns once with the counts and an example of each reason."""

    def __init__(self, dataset: str, strict: bool = False):
        self.dataset, self.strict = dataset, strict
        self.tasks: list[Task] = []
        self.seen = 0
        self.skipped: dict[str, list[str]] = collections.defaultdict(list)

    def add(self, record_id: str, build, *args, none_means: str | None = "have no tests") -> Task | None:
        """`build(*args)`'s Task, kept. None from the builder is a skip for the reason `none_means` (None: the
        record is not this load's at all, e.g. outside a date window: neither counted nor reported); `Skip(reason)`
        raised by the builder is a skip for that reason."""
        self.seen += 1
        try:
            task = build(*args)
        except Skip as e:
            self.skip(e.reason, record_id)
            return None
        except TaskError as e:
            return self._bad(str(e), e)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError, RecursionError) as e:
            return self._bad(f"{self.dataset} record {record_id}: {type(e).__name__}: {e}"[:300], e)
        if task is not None:
            self.tasks.append(task)
        elif none_means is None:
            self.seen -= 1
        else:
            self.skip(none_means, record_id)
        return task

    def skip(self, reason: str, record_id: str) -> None:
        """A well-formed record left out on purpose (no tests, files for input): counted, never an error."""
        self.skipped[reason].append(record_id)

    def _bad(self, message: str, error: Exception) -> None:
        if self.strict:
            raise TaskError(message) from error
        self.skipped["could not be read"].append(message)
        return None

    def done(self) -> list[Task]:
        parts = [f"{len(ids)} that {reason} (e.g. {ids[0]})" for reason, ids in self.skipped.items() if ids]
        if parts:
            n = sum(len(ids) for ids in self.skipped.values())
            hint = "; strict=True raises at the first unreadable one" if self.skipped.get("could not be read") else ""
            warnings.warn(
                f"{self.dataset}: skipped {n} of {self.seen} records: {'; '.join(parts)}{hint}", stacklevel=3
            )
        return self.tasks


def _need(dataset: str, record_id, record: dict, *keys: str) -> None:
    missing = [k for k in keys if k not in record]
    if missing:
        raise TaskError(f"{dataset} record {record_id}: it lacks the field(s) {', '.join(missing)}")


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


# What LiveCodeBench's and TACO's harnesses put before a call-based program (lcb_runner's `import_string`): starter
# code uses `List[int]` and solutions use `deque`, `gcd`, ... without importing them. Function-task prompts start
# with it, so the program the sandbox runs has it too.
CALL_PREAMBLE = LCB_PRELUDE


def _call_prompt(statement: str, starter_code: str, call: str, preamble: str = CALL_PREAMBLE) -> str:
    """A calls-task prompt: the harness's preamble, then the statement and starter code as a docstring (raw, so the
    statement's backslashes stay as written); the completion is the whole solution, as for MBPP."""
    text = statement.replace("\x00", "").replace('"""', "'''").strip()
    starter = starter_code.replace('"""', "'''").rstrip()
    text += f"\n\nComplete this starter code (the tests call {call}):\n\n{starter}\n" if starter else "\n"
    return preamble + '\nr"""\n' + text + '"""\n'


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
    "question_title",
    "question_content",
    "platform",
    "question_id",
    "contest_id",
    "contest_date",
    "starter_code",
    "difficulty",
    "public_test_cases",
    "private_test_cases",
    "metadata",
)
# The only pickle opcodes a pickled str uses: decoding checks every opcode and never runs the unpickler.
_PICKLE_STR_OPS = {
    "PROTO",
    "FRAME",
    "SHORT_BINUNICODE",
    "BINUNICODE",
    "BINUNICODE8",
    "UNICODE",
    "MEMOIZE",
    "PUT",
    "BINPUT",
    "LONG_BINPUT",
    "STOP",
}


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


def livecodebench_task(record: dict) -> Task:
    """One code_generation_lite record as a Task: stdio (JSON cases) or calls (`Solution.func`: each test's arguments
    one JSON value per line, parsed by the judge at run time, one test at a time, each with its own time budget).

    The verdict runs public + private tests, as lcb_runner grades; `public_tests` holds the public ones (feedback).
    Comparison: lcb_runner's (compare "lcb": stdout line by line with Decimal equality; results with a tuple taken as
    a list, then ==).
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
    kind = "calls" if func else "stdio"
    public = _lcb_cases(record_id, public, kind, "public_test_cases")
    private = _lcb_cases(record_id, private, kind, "private_test_cases")
    cases = [{"input": t["input"], "output": t["output"]} for t in public + private]
    if not all(isinstance(c["input"], str) and isinstance(c["output"], str) for c in cases):
        raise TaskError(f"livecodebench record {record_id}: a test's input and output must be strings")
    with big_ints():
        tests, public_tests = json.dumps(cases), json.dumps(cases[: len(public)])
    fields = dict(
        task_id=f"livecodebench/{record_id}",
        canonical_solution="",
        kind=kind,
        tests=tests,
        public_tests=public_tests,
        compare="lcb",
    )
    if kind == "stdio":
        return make_task(
            "livecodebench", prompt=record["question_content"].strip() + STDIO_INSTRUCTION, entry_point="", **fields
        )
    if not isinstance(func, str) or not func.isidentifier():
        raise TaskError(f"livecodebench record {record_id}: metadata's func_name {func!r} is not a Python name")
    starter = record["starter_code"] or ""
    # lcb_runner calls Solution().func when the program defines `class Solution` (every LeetCode starter does)
    entry = f"Solution.{func}" if "class Solution" in starter or not starter.strip() else func
    call = f"Solution().{func}" if entry.startswith("Solution.") else func
    return make_task(
        "livecodebench",
        prompt=_call_prompt(record["question_content"], starter, call + "(...)"),
        entry_point=entry,
        **fields,
    )


# LiveCodeBench's published errata (ERRATA.md in the LiveCodeBench repository): problems whose tests accept only one
# of several right answers, interactive problems, and problems with wrong tests. `exclude_errata=True` leaves them
# out; ids are question_ids (AtCoder) or LeetCode title slugs, matched against question_id and question_title.
LCB_ERRATA = {
    "multiple solutions accepted": (
        "abc311_c",
        "abc326_d",
        "abc327_b",
        "abc333_e",
        "abc343_e",
        "abc362_c",
        "find-words-containing-character",
        "find-the-peaks",
        "generate-binary-strings-without-adjacent-zeros",
        "arc185_c",
        "abc343_a",
    ),
    "interactive": ("abc337_e", "abc355_e"),
    "erroneous tests": ("abc350_c", "apply-operations-to-make-string-empty", "most-frequent-ids", "arc189_a"),
}
_LCB_ERRATA_IDS = frozenset(i for ids in LCB_ERRATA.values() for i in ids)


def _slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", str(title).lower()).strip("-")


def in_lcb_errata(record: dict) -> bool:
    """Whether a record is one of LiveCodeBench's published errata (by question_id or title slug)."""
    return (
        str(record.get("question_id")) in _LCB_ERRATA_IDS or _slug(record.get("question_title", "")) in _LCB_ERRATA_IDS
    )


def _day(value: str | None, option: str) -> datetime | None:
    if value in (None, ""):
        return None
    try:
        return datetime.strptime(str(value), "%Y-%m-%d")
    except ValueError:
        raise ValueError(f"livecodebench {option} must be a date YYYY-MM-DD, not {value!r}") from None


def _flag(value, option: str) -> bool:
    if isinstance(value, bool):
        return value
    if str(value).lower() in ("1", "true", "yes"):
        return True
    if str(value).lower() in ("0", "false", "no", ""):
        return False
    raise ValueError(f"livecodebench {option} must be true or false, not {value!r}")


def _contest_date(record: dict) -> datetime:
    try:
        return datetime.fromisoformat(str(record.get("contest_date")))
    except ValueError:
        raise TaskError(
            f"livecodebench record {record.get('question_id', '?')}: contest_date "
            f"{record.get('contest_date')!r} is not an ISO date"
        ) from None


def _lcb_task_in(record: dict, start, end, errata: bool) -> Task | None:
    """The record's Task when its date lies in the window (and it is not an erratum left out), else None; the date
    is read first, so records outside the window never have their tests decoded."""
    date = _contest_date(record)
    if (start and date < start) or (end and date > end):
        return None
    if errata and in_lcb_errata(record):
        raise Skip("are in LiveCodeBench's errata")
    return livecodebench_task(record)


def load_livecodebench(
    split: str,
    source: str,
    release_version: str = "release_v6",
    start_date: str | None = None,
    end_date: str | None = None,
    exclude_errata=False,
    strict: bool = False,
) -> list[Task]:
    """Problems of `release_version` whose contest_date lies in [start_date, end_date] (each optional, inclusive,
    compared as lcb_runner does: dates at midnight), without the published errata when `exclude_errata`. The window
    is applied as records are read, before a record's tests are decoded."""
    if split not in LCB_SPLITS:
        raise ValueError(f"livecodebench has splits {', '.join(LCB_SPLITS)} (the same problems); not {split!r}")
    if release_version not in LCB_RELEASES:
        raise ValueError(f"livecodebench release_version {release_version!r} is not one of {', '.join(LCB_RELEASES)}")
    start, end = _day(start_date, "start_date"), _day(end_date, "end_date")
    errata = _flag(exclude_errata, "exclude_errata")
    files = [f"{LCB_REPO}/{name}" for name in LCB_RELEASES[release_version]]
    rows = Rows("livecodebench", strict)
    for record in base.hub_records("json", data_files=files, split="train"):
        rid = str(record.get("question_id", "?")) if isinstance(record, dict) else "?"
        rows.add(rid, _lcb_task_in, record, start, end, errata, none_means=None)
    return rows.done()
