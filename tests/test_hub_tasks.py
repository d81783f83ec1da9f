"""Hub adapters (CodeContests, TACO-verified, LiveCodeBench, the hub copies of HumanEval+ and MBPP+) on hand-written
fixtures in each dataset's own schema (tests/fixtures/hub/), loaded through `datasets.load_dataset` exactly as the hub
path calls it (TACO's one JSON file through the hub-file hook), then judged by the sandbox with each benchmark's own
comparator: every verdict is the one the benchmark's reference harness gives, written beside each case. No network:
`datasets.load_dataset` and the hub-file hook are redirected to the files."""

from __future__ import annotations

import base64
import json
import pickle
import warnings
import zlib
from pathlib import Path

import pytest

from codelib import sandbox
from codelib.tasks import (
    LCB_REPO,
    Task,
    TaskError,
    decode_lcb_tests,
    limits_for,
    load_tasks,
    parse_dataset,
)

HUB = Path(__file__).parent / "fixtures" / "hub"
FILES = {
    "deepmind/code_contests": "code_contests.jsonl",
    "evalplus/humanevalplus": "humanevalplus.jsonl",
    "evalplus/mbppplus": "mbppplus.jsonl",
}
TACO_FILE = HUB / "taco_verified.json"  # TACO-verified's real shape: one JSON array of records with an `id`
LCB_FILES = {"test.jsonl": "lcb_test.jsonl", "test2.jsonl": "lcb_test2.jsonl"}


@pytest.fixture
def hub(monkeypatch, tmp_path):
    """`datasets.load_dataset` answering from the fixtures; records every call as (path, kwargs)."""
    import datasets

    real, calls = datasets.load_dataset, []

    def load_dataset(path, *args, split=None, **kwargs):
        calls.append((path, dict(kwargs, split=split)))
        if path == "json":  # LiveCodeBench: hf://datasets/livecodebench/code_generation_lite/<file>
            files = [str(HUB / LCB_FILES[f.rsplit("/", 1)[1]]) for f in kwargs.pop("data_files")]
        else:  # the fixture holds one split; which split was asked is checked through `calls`
            files = [str(HUB / FILES[path])]
        return real("json", data_files=files, split="train", cache_dir=str(tmp_path / "cache"))

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    from codelib.tasks import task as task_module

    def hub_file(repo, resolve):
        calls.append((repo, {"file": True}))
        assert repo == "likaixin/TACO-verified"
        return TACO_FILE

    monkeypatch.setattr(task_module, "hub_file", hub_file)
    return calls


def _records(name: str) -> list[dict]:
    return [json.loads(line) for line in (HUB / name).read_text().splitlines()]


# ---------------------------------------------------------------------------------------------------------------
# CodeContests


def test_codecontests_hub_reads_all_test_kinds_limits_and_python3(hub):
    with pytest.warns(UserWarning, match="skipped 1 of 6 records: 1 that read or write files.*120_A"):
        tasks = load_tasks("codecontests", "validation", source="hub")
    assert hub == [("deepmind/code_contests", {"split": "valid"})]
    assert [t.task_id for t in tasks] == [
        "codecontests/1000_A. Two Numbers",
        "codecontests/1001_B. Mean Value",
        "codecontests/1002_A. Even",
        "codecontests/1003_B. Third",
        "codecontests/1000_A. Two Numbers#2",  # the same name from another source: ids stay unique
    ]
    two = tasks[0]
    assert two.kind == "stdio" and two.prompt.startswith("1000_A. Two Numbers\n\nYou are given")
    assert two.compare == "codecontests"
    assert len(json.loads(two.tests)) == 5  # 1 public + 2 private + 2 generated
    assert json.loads(two.public_tests) == [{"input": "1 2\n", "output": "3\n"}]
    assert two.canonical_solution == "a, b = map(int, input().split())\nprint(a + b)\n"  # PYTHON3, not Python 2
    assert (two.time_limit_s, two.memory_limit_mb) == (2.0, 256)
    assert (tasks[1].time_limit_s, tasks[1].memory_limit_mb) == (1.5, 512)


def test_codecontests_bundled_default_is_unchanged_and_offline(monkeypatch):
    import datasets

    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: pytest.fail("the bundled sample went to the hub"))
    assert len(load_tasks("codecontests", "all")) == 256
    test = load_tasks("codecontests", "test")[0]
    assert test.time_limit_s is None and test.compare == ""  # the bundled sample keeps the default rule


def test_a_malformed_record_is_skipped_counted_and_named_or_raises_when_strict(monkeypatch):
    from codelib.tasks import task as tasks_module

    good, bad = _records("code_contests.jsonl")[:2]
    del bad["private_tests"]
    monkeypatch.setattr(tasks_module, "hub_records", lambda *a, **k: [good, bad, "not a record"])
    with pytest.warns(UserWarning) as caught:
        tasks = load_tasks("codecontests", "train", source="hub")
    assert [t.task_id for t in tasks] == ["codecontests/1000_A. Two Numbers"]
    assert len(caught) == 1  # one warning per load, with the count and the first reason
    message = str(caught[0].message)
    assert "skipped 2 of 3 records: 2 that could not be read" in message
    assert "'1001_B. Mean Value': it lacks the field(s) private_tests" in message and "strict=True" in message
    with pytest.raises(TaskError, match="codecontests record '1001_B. Mean Value'.*private_tests"):
        load_tasks("codecontests", "train", source="hub", strict=True)
    record = _records("code_contests.jsonl")[0] | {"public_tests": {"input": ["1 2\n"], "output": []}}
    monkeypatch.setattr(tasks_module, "hub_records", lambda *a, **k: [record])
    with pytest.raises(TaskError, match="'1000_A. Two Numbers'.*public_tests.*equal length"):
        load_tasks("codecontests", "train", source="hub", strict=True)


# ---------------------------------------------------------------------------------------------------------------
# TACO-verified


def test_taco_reads_the_json_array_with_ids_and_skips_a_broken_record(hub):
    with pytest.warns(
        UserWarning, match="taco: skipped 1 of 9 records: 1 that could not be read .*taco/6: input_output"
    ):
        tasks = load_tasks("taco", "train")  # hub-only: no source needed
    assert hub == [("likaixin/TACO-verified", {"file": True})]
    assert [t.task_id for t in tasks] == [f"taco/{i}" for i in (0, 1, 2, 3, 4, 5, 7, 8)]  # the records' own ids
    stdio, codewars, leetcode = tasks[:3]
    assert {t.compare for t in tasks} == {"taco"}
    assert stdio.kind == "stdio" and len(json.loads(stdio.tests)) == 3
    assert (stdio.time_limit_s, stdio.memory_limit_mb) == (1.0, 256)
    # call-based: the arguments stay data (one JSON value per line), the results as TACO stores them
    assert codewars.kind == "calls" and codewars.entry_point == "count_vowels"
    assert json.loads(codewars.tests)[0] == {"input": '"hello"', "output": "[2]"}
    assert (codewars.time_limit_s, codewars.memory_limit_mb) == (None, None)
    assert leetcode.entry_point == "Solution.twoSum" and "class Solution:" in leetcode.prompt
    assert json.loads(leetcode.tests)[0] == {"input": "[2, 7, 11, 15]\n9", "output": "[0, 1]"}
    big = next(t for t in tasks if t.task_id == "taco/5")  # a 5071-digit result: past int-to-str's default limit
    assert len(json.loads(big.tests)[1]["output"]) == len("[]") + 5071
    with pytest.raises(ValueError, match="taco has splits train, all"):
        load_tasks("taco", "test")
    with pytest.raises(ValueError, match="no bundled copy"):
        load_tasks("taco", "train", source="bundled")


def test_taco_reads_a_local_copy_and_json_lines(tmp_path):
    records = json.loads(TACO_FILE.read_text())[:3]
    lines = tmp_path / "taco.jsonl"
    lines.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert [t.task_id for t in load_tasks("taco", "all", path=str(lines))] == ["taco/0", "taco/1", "taco/2"]
    with pytest.warns(UserWarning, match="skipped 1"):  # the fixture's broken record
        assert [t.task_id for t in load_tasks("taco:path=" + str(TACO_FILE), "all")][:2] == ["taco/0", "taco/1"]


def test_taco_file_is_read_record_by_record_within_twice_its_size(tmp_path):
    """TACO-verified is one 1.93 GB JSON array; `datasets` holds ~6.4x that. Here a generated file in the same
    shape (records of ~60 kB: statements, solutions and tests) must load with a Python-heap peak under 2x its size,
    records longer than the reader's buffer included."""
    import tracemalloc

    from codelib.tasks import hub as hub_tasks

    template = json.loads(TACO_FILE.read_text())[0]
    path = tmp_path / "taco.json"
    with open(path, "w") as f:
        f.write("[")
        for i in range(300):
            io = {
                "inputs": [f"{i} {k}\n" * 200 for k in range(10)],
                "outputs": [f"{i + k}\n" * 300 for k in range(10)],
            }
            record = template | {
                "id": i,
                "question": "q" * 20000 + str(i),
                "solutions": ["print(1)\n" * 500] * 3,
                "input_output": json.dumps(io),
            }
            f.write(("," if i else "") + json.dumps(record))
        f.write("]")
    size = path.stat().st_size
    tracemalloc.start()
    try:
        # read 16 kB at a time, less than a record: the reader must grow and retry
        tasks = hub_tasks.load_taco("all", "hub", path=str(path), read_chars=1 << 14)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(tasks) == 300 and tasks[-1].task_id == "taco/299"
    assert peak < 2 * size, f"peak {peak / 1e6:.1f} MB for a {size / 1e6:.1f} MB file"


# ---------------------------------------------------------------------------------------------------------------
# LiveCodeBench


def test_livecodebench_releases_and_date_window(hub):
    def ids(**options):
        return [t.task_id.split("/")[1] for t in load_tasks("livecodebench", "test", **options)]

    v2 = ["1872_A", "abc998_b", "abc998_c", "3001"]
    assert ids(release_version="release_v1") == ["abc999_a", "2917"]
    assert hub[-1] == ("json", {"data_files": [f"{LCB_REPO}/test.jsonl"], "split": "train"})
    assert ids(release_version="release_v2") == ["abc999_a", "2917", *v2]
    assert ids(release_version="v2") == v2
    assert ids(release_version="release_v2", start_date="2023-07-01") == ["2917", *v2]
    assert ids(release_version="release_v2", start_date="2023-07-01", end_date="2023-08-19") == ["2917"]
    # the same through a params-file spec
    spec = "livecodebench:release_version=release_v2,start_date=2023-09-01,end_date=2023-09-30"
    assert [t.task_id for t in load_tasks(spec, "test")] == ["livecodebench/1872_A"]
    with pytest.raises(ValueError, match="release_version 'release_v9'"):
        load_tasks("livecodebench", "test", release_version="release_v9")
    with pytest.raises(ValueError, match="start_date must be a date YYYY-MM-DD"):
        load_tasks("livecodebench", "test", release_version="v1", start_date="July")


def test_livecodebench_window_is_applied_before_a_record_is_decoded(monkeypatch):
    """Records outside the date window are passed over on their contest_date alone: their tests are never decoded,
    and one that could not be decoded costs nothing."""
    from codelib.tasks import task as tasks_module

    old, new = _records("lcb_test.jsonl")
    old["private_test_cases"] = "not base64, not JSON"  # outside the window: never read
    monkeypatch.setattr(tasks_module, "hub_records", lambda *a, **k: [old, new])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing skipped, nothing to report
        tasks = load_tasks("livecodebench", "test", release_version="v1", start_date="2023-07-01")
    assert [t.task_id for t in tasks] == ["livecodebench/2917"]


def test_livecodebench_errata_can_be_left_out(monkeypatch):
    from codelib.tasks import task as tasks_module
    from codelib.tasks.livecodebench import LCB_ERRATA

    atcoder, leetcode = _records("lcb_test.jsonl")
    erratum = atcoder | {"question_id": "abc350_c"}  # erroneous tests (LiveCodeBench's ERRATA.md)
    slug = leetcode | {"question_id": "3099", "question_title": "find-the-peaks"}  # LeetCode errata go by title slug
    monkeypatch.setattr(tasks_module, "hub_records", lambda *a, **k: [atcoder, erratum, leetcode, slug])
    assert len(load_tasks("livecodebench", "test", release_version="v1")) == 4  # kept by default, as lcb_runner does
    with pytest.warns(UserWarning, match="skipped 2 of 4 records: 2 that are in LiveCodeBench's errata"):
        kept = load_tasks("livecodebench:exclude_errata=true", "test", release_version="v1")
    assert [t.task_id for t in kept] == ["livecodebench/abc999_a", "livecodebench/2917"]
    assert "abc350_c" in LCB_ERRATA["erroneous tests"] and "abc337_e" in LCB_ERRATA["interactive"]


def test_livecodebench_hub_path_names_the_release_files(monkeypatch):
    from codelib.tasks import task as tasks_module

    seen = []
    monkeypatch.setattr(tasks_module, "hub_records", lambda *a, **k: seen.append((a, k)) or [])
    load_tasks("livecodebench", "test", release_version="release_v3")
    files = [f"{LCB_REPO}/{f}" for f in ("test.jsonl", "test2.jsonl", "test3.jsonl")]
    assert LCB_REPO == "hf://datasets/livecodebench/code_generation_lite"
    assert seen == [(("json",), {"data_files": files, "split": "train"})]


def test_livecodebench_stdio_and_functional_tasks(hub):
    sums, pairs, echo, *_ = load_tasks("livecodebench", "all", release_version="release_v2")
    assert {sums.compare, pairs.compare, echo.compare} == {"lcb"}
    assert sums.kind == "stdio" and sums.canonical_solution == ""  # LiveCodeBench publishes no solutions
    assert json.loads(sums.public_tests) == [{"input": "3 5\n", "output": "8\n16\n"}]
    assert len(json.loads(sums.tests)) == 3  # public + private (decoded from base64/zlib/pickle), as lcb_runner
    assert len(json.loads(echo.tests)) == 3  # private stored as plain JSON
    # functional: the tests stay data, LiveCodeBench's own format, called one at a time by the judge
    assert pairs.kind == "calls" and pairs.entry_point == "Solution.countPairs"
    assert json.loads(pairs.tests) == [
        {"input": "[-1, 1, 2, 3, 1]\n2", "output": "3"},
        {"input": "[-6, 2, 5, -2, -7, -1, 3]\n-2", "output": "10"},
        {"input": "[1]\n5", "output": "0"},
    ]
    assert json.loads(pairs.public_tests) == json.loads(pairs.tests)[:1]
    assert "class Solution:\n    def countPairs(self, nums: List[int], target: int) -> int:" in pairs.prompt
    assert pairs.prompt.startswith("from string import *\n")  # lcb_runner's import block
    assert (pairs.time_limit_s, pairs.memory_limit_mb) == (None, None)


def test_livecodebench_decoding_runs_nothing_from_the_data(tmp_path):
    cases = [{"input": "1\n", "output": "1\n", "testtype": "stdin"}]
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):  # whichever protocol the dataset was pickled with
        blob = base64.b64encode(zlib.compress(pickle.dumps(json.dumps(cases), protocol=protocol))).decode()
        assert decode_lcb_tests(blob) == cases
    assert decode_lcb_tests(json.dumps(cases)) == cases

    marker = tmp_path / "ran"

    class Payload:  # unpickling this would create the marker file
        def __reduce__(self):
            return (open, (str(marker), "w"))

    evil = base64.b64encode(zlib.compress(pickle.dumps(Payload()))).decode()
    with pytest.raises(TaskError, match="record q9: private_test_cases is a pickle with opcode .*GLOBAL"):
        decode_lcb_tests(evil, "q9")
    assert not marker.exists()
    with pytest.raises(TaskError, match="record q9: .*neither JSON nor base64"):
        decode_lcb_tests("not base64 at all!", "q9")
    two = base64.b64encode(zlib.compress(pickle.dumps(("a", "b")))).decode()
    with pytest.raises(TaskError, match="opcode TUPLE2"):
        decode_lcb_tests(two, "q9")


def test_livecodebench_malformed_record_is_named(monkeypatch):
    from codelib.tasks import task as tasks_module

    records = _records("lcb_test.jsonl")
    records[1]["metadata"] = "{func_name"
    monkeypatch.setattr(tasks_module, "hub_records", lambda *a, **k: records)
    with pytest.raises(TaskError, match="livecodebench record 2917: public_test_cases / metadata are not JSON"):
        load_tasks("livecodebench", "test", release_version="v1", strict=True)
    with pytest.warns(UserWarning, match="skipped 1 of 2 records.*record 2917"):
        assert len(load_tasks("livecodebench", "test", release_version="v1")) == 1
    records = _records("lcb_test.jsonl")
    records[0]["contest_date"] = "yesterday"
    monkeypatch.setattr(tasks_module, "hub_records", lambda *a, **k: records)
    with pytest.raises(TaskError, match="livecodebench record abc999_a: contest_date 'yesterday'"):
        load_tasks("livecodebench", "test", release_version="v1", strict=True)


# ---------------------------------------------------------------------------------------------------------------
# HumanEval+ and MBPP+ from the hub


def test_evalplus_hub_rows_are_mapped(hub):
    he = load_tasks("humaneval_plus", "all", source="hub")
    assert hub[-1] == ("evalplus/humanevalplus", {"split": "test"})
    assert [t.task_id for t in he] == ["HumanEval/0", "HumanEval/2"]
    assert "def check(candidate):" in he[0].tests and he[0].plus_inputs == ""  # inputs and results live in `test`
    assert [t.task_id for t in load_tasks("humaneval_plus", "test", source="hub")] == [
        "HumanEval/2"
    ]  # the 33-task split
    mb = load_tasks("mbpp_plus", "all", source="hub")
    assert hub[-1] == ("evalplus/mbppplus", {"split": "test"})
    assert [(t.task_id, t.entry_point) for t in mb] == [("Mbpp/2", "similar_elements"), ("Mbpp/3", "is_not_prime")]
    assert mb[0].prompt.startswith('"""\nWrite a function to find the similar elements')  # as the bundled MBPP+ reads
    assert load_tasks("mbpp_plus", "test", source="hub") == []  # Mbpp/2 and /3 are in MBPP's few-shot range


def test_evalplus_rows_of_another_schema_are_refused_naming_the_bundled_copy(monkeypatch):
    from codelib.tasks import task as tasks_module

    monkeypatch.setattr(tasks_module, "hub_records", lambda *a, **k: [{"task_id": 2, "text": "x", "code": "y"}])
    with pytest.raises(
        TaskError,
        match="mbpp_plus record 2: neither .* \\(missing prompt, test_list, test\\); load the "
        "bundled copy instead \\(source='bundled'",
    ):
        load_tasks("mbpp_plus", "all", source="hub", strict=True)
    monkeypatch.setattr(tasks_module, "hub_records", lambda *a, **k: [{"task_id": "HumanEval/0", "prompt": "p"}])
    with pytest.warns(UserWarning, match="humaneval_plus: skipped 1 of 1 .*source='bundled'"):
        assert load_tasks("humaneval_plus", "all", source="hub") == []


# ---------------------------------------------------------------------------------------------------------------
# the sandbox: reference solutions pass, wrong ones fail


LCB_RIGHT = {
    "abc999_a": "a, b = map(int, input().split())\nprint(a + b)\nprint(2 * (a + b))\n",
    "2917": (
        "class Solution:\n    def countPairs(self, nums: List[int], target: int) -> int:\n"
        "        return sum(nums[i] + nums[j] < target for j in range(len(nums)) for i in range(j))\n"
    ),
    "1872_A": "print(input()[::-1])\n",
}
LCB_WRONG = {
    "abc999_a": "a, b = map(int, input().split())\nprint(a + b)\n",
    "2917": (
        "class Solution:\n    def countPairs(self, nums: List[int], target: int) -> int:\n"
        "        return sum(nums[i] + nums[j] <= target for j in range(len(nums)) for i in range(j))\n"
    ),
    "1872_A": "print(input())\n",
}

# Every case: (task, program, the reference harness's verdict, why). The reference verdicts are what lcb_runner's
# testing_util.py, TACO's metrics/testing_util.py and DeepMind's OutputsMatch give on these programs and tests.
CC_SUM = "a, b = map(int, input().split())\n"
VERDICTS = [
    # CodeContests, DeepMind's checker
    ("codecontests/1000_A. Two Numbers", "canonical", True, "the first Python 3 solution"),
    ("codecontests/1000_A. Two Numbers", CC_SUM + "print(a - b)\n", False, "its incorrect solution"),
    ("codecontests/1001_B. Mean Value", "canonical", True, "'%.7f' against 6 digits: within 1e-5"),
    (
        "codecontests/1001_B. Mean Value",
        "n = int(input())\nxs = list(map(int, input().split()))\nprint(sum(xs) // n)\n",
        False,
        "integer division",
    ),
    ("codecontests/1002_A. Even", "canonical", True, "'Yes' for 'YES': tokens are lowercased"),
    ("codecontests/1002_A. Even", "print('YES')\n", False, "NO expected on the private test"),
    ("codecontests/1003_B. Third", "canonical", True, "'0.33333' for '0.333333333': |diff| < 1e-5"),
    ("codecontests/1003_B. Third", "print('%.4f' % (int(input()) / 3))\n", False, "|diff| 3.3e-5"),
    ("codecontests/1000_A. Two Numbers#2", "canonical", True, "the second problem of that name"),
    ("codecontests/1000_A. Two Numbers#2", "print(max(map(int, input().split())))\n", False, "its incorrect solution"),
    # TACO, metrics/testing_util.py
    ("taco/0", "canonical", True, "stdin"),
    ("taco/0", "n = int(input())\nprint(n * (n - 1) // 2)\n", False, "off by n"),
    ("taco/1", "canonical", True, "a result stored wrapped in a list"),
    ("taco/1", "def count_vowels(s):\n    return sum(c in 'aeio' for c in s)\n", False, "misses u"),
    ("taco/2", "canonical", True, "Solution().twoSum"),
    ("taco/2", "class Solution:\n    def twoSum(self, nums, target):\n        return [0, 1]\n", False, "constant"),
    ("taco/3", "canonical", True, "a list of tuples against the stored lists"),
    ("taco/3", "def squares(n):\n    return [(i, i + i) for i in range(n)]\n", False, "2i, not i*i"),
    ("taco/4", "canonical", True, "int dict keys against the stored string keys"),
    ("taco/4", "def lengths(xs):\n    return {str(len(str(x))): 1 for x in xs}\n", False, "string keys, counts 1"),
    ("taco/7", "canonical", True, "sorted"),
    (
        "taco/7",
        "a, b = input().split()\nprint(a)\nprint(b)\n",
        True,
        "unsorted, but TACO compares sets of one-character tokens",
    ),
    ("taco/7", "a, b = map(int, input().split())\nprint(a + b)\n", False, "the sum"),
    # LiveCodeBench, lcb_runner
    *[(f"livecodebench/{k}", v, True, "reference") for k, v in LCB_RIGHT.items()],
    *[(f"livecodebench/{k}", v, False, "wrong") for k, v in LCB_WRONG.items()],
    (
        "livecodebench/abc998_b",
        "a, b = map(int, input().split())\nprint(gcd(a, b))\nprint(a - b)\n",
        True,
        "gcd without an import: lcb_runner runs its import block first",
    ),
    (
        "livecodebench/abc998_b",
        "import math\na, b = map(int, input().split())\nprint(str(math.gcd(a, b)).zfill(3))\n"
        "print('-0' if a == b else a - b)\n",
        True,
        "'006' and '-0' are Decimal-equal to '6' and '0'",
    ),
    ("livecodebench/abc998_c", "n = int(input())\nprint(f'{n / 3:.10f} {n}')\n", True, "'1.0000000000 3' is '1 3'"),
    ("livecodebench/abc998_c", "n = int(input())\nprint(n / 3, n)\n", False, "extra float digits"),
    ("livecodebench/abc998_c", "n = int(input())\nprint(f'{n / 3:.10f}')\nprint(n)\n", False, "two lines for one"),
    (
        "livecodebench/3001",
        "class Solution:\n    def findPair(self, nums):\n        seen = {}\n"
        "        for j, x in enumerate(nums):\n            if x in seen:\n                return (seen[x], j)\n"
        "            seen[x] = j\n",
        True,
        "a tuple for a list: lcb_runner converts it",
    ),
    (
        "livecodebench/3001",
        "class Solution:\n    def findPair(self, nums):\n        seen = {}\n"
        "        for j, x in enumerate(nums):\n            if x in seen:\n                return [j, seen[x]]\n"
        "            seen[x] = j\n",
        False,
        "indices swapped",
    ),
]


def _hub_tasks() -> dict:
    with pytest.warns(UserWarning, match="skipped 1"):
        contests = load_tasks("codecontests", "train", source="hub")
    with pytest.warns(UserWarning, match="skipped 1"):
        taco = load_tasks("taco", "train")
    lcb = load_tasks("livecodebench", "test", release_version="release_v2")
    return {t.task_id: t for t in contests + taco + lcb}


def test_verdicts_are_the_reference_harnesses(hub):
    tasks = _hub_tasks()
    cases = [
        (tasks[tid], tasks[tid].canonical_solution if p == "canonical" else p, v, why) for tid, p, v, why in VERDICTS
    ]
    verdicts = sandbox.check([t for t, *_ in cases], [p for _, p, *_ in cases], workers=2, timeout_s=20)
    wrong = [
        (t.task_id, why, v.status, v.detail)
        for (t, _, ref, why), v in zip(cases, verdicts, strict=True)
        if v.passed is not ref
    ]
    assert wrong == [], "\n".join(map(str, wrong))
    assert all(v.status == "failed" for (*_, ref, _), v in zip(cases, verdicts, strict=True) if not ref)
    # each call of a calls task counts as one test, so test_fraction_reward has a gradient
    fn = next(v for (t, *_), v in zip(cases, verdicts, strict=True) if t.task_id == "livecodebench/2917")
    assert (fn.tests_passed, fn.tests_total) == (3, 3)


def test_integers_past_4300_digits_are_data(hub):
    """TACO records with a 5071-digit integer: read (int digit limit lifted for parsing), and judged right when the
    program returns or prints it (the reference harnesses run without Python's limit, or with 50000 digits)."""
    tasks = _hub_tasks()
    power, printed = tasks["taco/5"], tasks["taco/8"]
    verdicts = sandbox.check(
        [power, printed, printed],
        [power.canonical_solution, printed.canonical_solution, "print(7 ** int(input()) + 1)\n"],
        workers=2,
        timeout_s=20,
    )
    assert [(v.passed, v.status) for v in verdicts] == [(True, "passed"), (True, "passed"), (False, "failed")], [
        v.detail for v in verdicts
    ]


def test_livecodebench_functional_task_with_large_arguments_passes_in_its_budgets(tmp_path, monkeypatch):
    """12 tests whose arguments are 1e5-element lists (a LeetCode-sized task): judged one call at a time, each in
    its own budget, arguments parsed as data; compiled into one program of literal asserts this took 5.7 s and
    1.5 GB just to compile, and failed with MemoryError under the default limit."""
    import random

    from codelib.tasks import task as tasks_module

    rng = random.Random(0)
    cases = []
    for _ in range(12):
        nums = [rng.randint(-(10**9), 10**9) for _ in range(100_000)]
        cases.append(
            {
                "input": f"{json.dumps(nums)}\n{rng.randint(1, 10**5)}",
                "output": json.dumps(sum(nums)),
                "testtype": "functional",
            }
        )
    record = _records("lcb_test.jsonl")[1] | {
        "question_id": "9999",
        "public_test_cases": json.dumps(cases[:1]),
        "private_test_cases": base64.b64encode(zlib.compress(pickle.dumps(json.dumps(cases[1:])))).decode(),
        "metadata": json.dumps({"func_name": "total"}),
        "starter_code": "class Solution:\n    def total(self, nums: List[int], k: int) -> int:\n        ",
    }
    monkeypatch.setattr(tasks_module, "hub_records", lambda *a, **k: [record])
    (task,) = load_tasks("livecodebench", "test", release_version="v1")
    assert task.kind == "calls" and len(json.loads(task.tests)) == 12
    right = "class Solution:\n    def total(self, nums, k):\n        return sum(nums)\n"
    wrong = (
        "class Solution:\n    def total(self, nums, k):\n        return sum(nums) + (k == -1) + (len(nums) > 99999)\n"
    )
    good, bad = sandbox.check([task, task], [right, wrong], workers=2, timeout_s=6)
    assert good.passed and (good.tests_passed, good.tests_total) == (12, 12), good.detail
    assert bad.status == "failed" and bad.tests_passed == 0


# ---------------------------------------------------------------------------------------------------------------
# per-task limits and dataset specs


def _task(time_limit_s=None, memory_limit_mb=None) -> Task:
    return Task(
        "t",
        "p",
        '[{"input": "", "output": ""}]',
        "",
        "",
        "stdio",
        time_limit_s=time_limit_s,
        memory_limit_mb=memory_limit_mb,
    )


@pytest.mark.parametrize(
    ("time_limit_s", "memory_limit_mb", "expected"),
    [
        (None, None, (5.0, 1024)),  # no limits of its own: the sandbox's
        (1.0, 256, (5.0, 1024)),  # the reference problem: the sandbox's
        (2.0, 512, (10.0, 2048)),  # twice the reference: twice the sandbox's
        (0.5, 64, (5.0, 1024)),  # tighter than the reference: never below the sandbox's
        (60.0, 8192, (50.0, 10240)),  # at most 10x
        (0.0, 0, (5.0, 1024)),  # a zero limit means none
    ],
)
def test_limits_for_scales_the_sandbox_limits(time_limit_s, memory_limit_mb, expected):
    assert limits_for(_task(time_limit_s, memory_limit_mb), 5.0, 1024) == expected


def test_dataset_specs_are_strict():
    assert parse_dataset("mbpp") == ("mbpp", {})
    assert parse_dataset("codecontests:source=hub") == ("codecontests", {"source": "hub"})
    with pytest.raises(ValueError, match="'release=v6' is not an option of livecodebench"):
        parse_dataset("livecodebench:release=v6")
    with pytest.raises(ValueError, match="'start_date=2024-01-01' is not an option of mbpp"):
        parse_dataset("mbpp:start_date=2024-01-01")
    with pytest.raises(ValueError, match="unknown dataset 'tacoo'"):
        load_tasks("tacoo")
    with pytest.raises(ValueError, match="mbpp takes no option 'release_version'"):
        load_tasks("mbpp", "test", release_version="v1")


def test_a_chat_answer_with_the_whole_class_is_extracted_and_passes(hub):
    from codelib.engine.rewards import extract_completion

    task = load_tasks("livecodebench", "test", release_version="v1")[1]
    answer = f"Here it is:\n```python\n{LCB_RIGHT['2917']}\nprint(Solution().countPairs([1], 2))\n```\nDone."
    completion = extract_completion(answer, task)
    assert completion.lstrip().startswith("class Solution:") and "print(" not in completion
    assert sandbox.check([task], [completion], workers=1, timeout_s=20)[0].passed


def test_mbpp_taco_profile_and_its_variants_are_valid_params():
    from codelib.evaluation.evaluator import EvalConfig
    from codelib.plumbing.params import REPO_ROOT, load_config
    from codelib.runner import pipeline

    stages = pipeline.profile_stages("mbpp-taco")
    assert stages == ["00_tasks", "04_grpo", "06_eval", "07_plots"]
    assert pipeline.check_params("mbpp-taco", stages)["04_grpo"]["dataset"] == "taco"
    lcb = load_config(EvalConfig, REPO_ROOT / "params/mbpp-taco/variants/06_eval_livecodebench.yaml")
    assert parse_dataset(lcb.dataset) == (
        "livecodebench",
        {"release_version": "release_v5", "start_date": "2024-08-01", "end_date": "2025-01-31"},
    )
    cc = load_config(EvalConfig, REPO_ROOT / "params/mbpp-taco/variants/06_eval_codecontests.yaml")
    assert parse_dataset(cc.dataset) == ("codecontests", {"source": "hub"})


def test_task_limits_reach_the_sandbox_job():
    from codelib import sandbox
    from codelib.tasks import Task

    task = Task(
        "cc/1", "p", '[{"input": "", "output": "1"}]', "", "print(1)", "stdio", time_limit_s=2.0, memory_limit_mb=512
    )
    job = sandbox.task_job(task, "print(1)", timeout_s=5.0, memory_mb=1024)
    assert (job.timeout_s, job.memory_mb) == (10.0, 2048)
    plain = sandbox.task_job(Task("cc/2", "p", task.tests, "", "print(1)", "stdio"), "print(1)")
    assert (plain.timeout_s, plain.memory_mb) == (None, None)  # the pool's own limits


def test_evalplus_hub_tasks_judge_canonical_right_and_wrong_wrong(hub):
    """The hub copies run their rows' own test program (EvalPlus's `assertion` over every input): the canonical
    solutions pass and wrong ones fail, as running that program does."""
    tasks = {
        t.task_id: t
        for t in load_tasks("humaneval_plus", "all", source="hub") + load_tasks("mbpp_plus", "all", source="hub")
    }
    cases = [
        ("HumanEval/0", "canonical", True),
        ("HumanEval/0", "    return True\n", False),
        ("HumanEval/2", "canonical", True),  # floats: allclose within 1e-6
        ("HumanEval/2", "    return round(number % 1.0, 3)\n", False),
        ("Mbpp/2", "canonical", True),
        # the row's test compares in order; EvalPlus's own set oracle (the bundled copy, plus=True) accepts this one
        ("Mbpp/2", "def similar_elements(a, b):\n    return tuple(sorted(set(a) & set(b), reverse=True))\n", False),
        ("Mbpp/3", "canonical", True),
        ("Mbpp/3", "def is_not_prime(n):\n    return n % 2 == 0\n", False),
    ]
    programs = [tasks[tid].canonical_solution if p == "canonical" else p for tid, p, _ in cases]
    verdicts = sandbox.check([tasks[tid] for tid, *_ in cases], programs, workers=2, timeout_s=20)
    assert [(tid, v.passed) for (tid, _, _), v in zip(cases, verdicts, strict=True)] == [
        (tid, ref) for tid, _, ref in cases
    ], [v.detail for v in verdicts]


def test_rows_keep_the_comparator_through_the_reward_columns(hub):
    """TRL passes a task's columns to the reward functions, which rebuild the Task: its comparator must survive, or
    an RL run on TACO or LiveCodeBench would be rewarded by the default rule."""
    from codelib.engine.judging import _tasks
    from codelib.tasks import tasks_to_rows

    with pytest.warns(UserWarning, match="skipped 1"):
        tasks = load_tasks("taco", "train")[:3]
    rows = tasks_to_rows(tasks)
    columns = {k: [r[k] for r in rows] for k in rows[0]}
    back = _tasks(len(rows), columns)
    assert [(t.kind, t.compare, t.entry_point) for t in back] == [(t.kind, t.compare, t.entry_point) for t in tasks]


def test_taco_hub_file_is_the_repositorys_one_json_file(monkeypatch):
    import huggingface_hub

    from codelib.tasks import hub as hub_tasks

    asked = []
    monkeypatch.setattr(
        huggingface_hub.HfApi,
        "list_repo_files",
        lambda self, repo, repo_type=None: [".gitattributes", "README.md", "train.json"],
    )
    monkeypatch.setattr(
        huggingface_hub,
        "hf_hub_download",
        lambda repo, name, repo_type=None: asked.append((repo, name, repo_type)) or str(TACO_FILE),
    )
    assert hub_tasks.taco_file() == TACO_FILE
    assert asked == [("likaixin/TACO-verified", "train.json", "dataset")]
    monkeypatch.setattr(huggingface_hub.HfApi, "list_repo_files", lambda self, repo, repo_type=None: ["README.md"])
    with pytest.raises(TaskError, match="expected one JSON file in the repository, found \\[\\]"):
        hub_tasks.taco_file()
