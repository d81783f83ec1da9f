"""LiveCodeBench (livecodebench/code_generation_lite): problems with their contest dates, read from the hub's JSONL
release files; private tests decoded without running the unpickler; the published errata. `codelib.tasks.load_tasks`
is the way in.
"""

from __future__ import annotations

import base64
import json
import pickletools
import re
import zlib
from datetime import datetime

from codelib.tasks import task as base
from codelib.tasks.rows import Rows, Skip, _call_prompt, _need
from codelib.tasks.task import STDIO_INSTRUCTION, Task, TaskError, big_ints, make_task

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
