"""Hub-only adapters (CodeContests, TACO-verified, LiveCodeBench) on hand-written fixtures in each dataset's own schema
(tests/fixtures/hub/), loaded through `datasets.load_dataset` exactly as the hub path calls it, then judged by the
sandbox: reference solutions pass, wrong ones fail. No network: `datasets.load_dataset` is redirected to the files."""

from __future__ import annotations

import base64
import json
import pickle
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
    program_for,
)

HUB = Path(__file__).parent / "fixtures" / "hub"
FILES = {"deepmind/code_contests": "code_contests.jsonl", "likaixin/TACO-verified": "taco_verified.jsonl"}
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
    return calls


def _records(name: str) -> list[dict]:
    return [json.loads(line) for line in (HUB / name).read_text().splitlines()]


# ---------------------------------------------------------------------------------------------------------------
# CodeContests


def test_codecontests_hub_reads_all_test_kinds_limits_and_python3(hub):
    with pytest.warns(UserWarning, match="skipped 1 .*read or write files.*120_A"):
        tasks = load_tasks("codecontests", "validation", source="hub")
    assert hub == [("deepmind/code_contests", {"split": "valid"})]
    assert [t.task_id for t in tasks] == ["codecontests/1000_A. Two Numbers", "codecontests/1001_B. Mean Value"]
    two = tasks[0]
    assert two.kind == "stdio" and two.prompt.startswith("1000_A. Two Numbers\n\nYou are given")
    assert len(json.loads(two.tests)) == 5  # 1 public + 2 private + 2 generated
    assert json.loads(two.public_tests) == [{"input": "1 2\n", "output": "3\n"}]
    assert two.canonical_solution == "a, b = map(int, input().split())\nprint(a + b)\n"  # PYTHON3, not Python 2
    assert (two.time_limit_s, two.memory_limit_mb) == (2.0, 256)
    assert (tasks[1].time_limit_s, tasks[1].memory_limit_mb) == (1.5, 512)


def test_codecontests_bundled_default_is_unchanged_and_offline(monkeypatch):
    import datasets

    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: pytest.fail("the bundled sample went to the hub"))
    assert len(load_tasks("codecontests", "all")) == 256
    assert load_tasks("codecontests", "test")[0].time_limit_s is None


def test_codecontests_malformed_record_is_named(hub, monkeypatch):
    from codelib import task as tasks_module

    record = _records("code_contests.jsonl")[0]
    del record["private_tests"]
    monkeypatch.setattr(tasks_module, "hub_records", lambda *a, **k: [record])
    with pytest.raises(TaskError, match="codecontests record '1000_A. Two Numbers'.*private_tests"):
        load_tasks("codecontests", "train", source="hub")
    record = _records("code_contests.jsonl")[0] | {"public_tests": {"input": ["1 2\n"], "output": []}}
    monkeypatch.setattr(tasks_module, "hub_records", lambda *a, **k: [record])
    with pytest.raises(TaskError, match="'1000_A. Two Numbers'.*public_tests.*equal length"):
        load_tasks("codecontests", "train", source="hub")


# ---------------------------------------------------------------------------------------------------------------
# TACO-verified


def test_taco_stdio_and_call_based_tasks(hub):
    tasks = load_tasks("taco", "train")  # hub-only: no source needed
    assert hub == [("likaixin/TACO-verified", {"split": "train"})]
    stdio, codewars, leetcode = tasks
    assert [t.task_id for t in tasks] == ["taco/0", "taco/1", "taco/2"]
    assert stdio.kind == "stdio" and len(json.loads(stdio.tests)) == 3
    assert (stdio.time_limit_s, stdio.memory_limit_mb) == (1.0, 256)
    assert codewars.kind == "function" and codewars.entry_point == "count_vowels"
    assert "assert _taco_equal(count_vowels('hello'), [2])" in codewars.tests  # TACO wraps results in a list
    assert (codewars.time_limit_s, codewars.memory_limit_mb) == (None, None)
    assert "assert _taco_equal(Solution().twoSum([2, 7, 11, 15], 9), [0, 1])" in leetcode.tests
    assert leetcode.entry_point == "twoSum" and "class Solution:" in leetcode.prompt
    for t in tasks[1:]:  # prompt + solution + tests is one program that compiles
        compile(program_for(t, t.canonical_solution), t.task_id, "exec")
    with pytest.raises(ValueError, match="taco has splits train, all"):
        load_tasks("taco", "test")
    with pytest.raises(ValueError, match="no bundled copy"):
        load_tasks("taco", "train", source="bundled")


def test_taco_malformed_record_is_named(monkeypatch):
    from codelib import task as tasks_module

    records = _records("taco_verified.jsonl")
    records[1]["input_output"] = "{not json"
    monkeypatch.setattr(tasks_module, "hub_records", lambda *a, **k: records)
    with pytest.raises(TaskError, match="taco record taco/1: input_output is not JSON"):
        load_tasks("taco", "train")
    records = _records("taco_verified.jsonl")
    del records[2]["question"]
    monkeypatch.setattr(tasks_module, "hub_records", lambda *a, **k: records)
    with pytest.raises(TaskError, match="taco record taco/2: it lacks the field.*question"):
        load_tasks("taco", "train")


# ---------------------------------------------------------------------------------------------------------------
# LiveCodeBench


def test_livecodebench_releases_and_date_window(hub):
    def ids(**options):
        return [t.task_id.split("/")[1] for t in load_tasks("livecodebench", "test", **options)]

    assert ids(release_version="release_v1") == ["abc999_a", "2917"]
    assert hub[-1] == ("json", {"data_files": [f"{LCB_REPO}/test.jsonl"], "split": "train"})
    assert ids(release_version="release_v2") == ["abc999_a", "2917", "1872_A"]
    assert ids(release_version="v2") == ["1872_A"]
    assert ids(release_version="release_v2", start_date="2023-07-01") == ["2917", "1872_A"]
    assert ids(release_version="release_v2", start_date="2023-07-01", end_date="2023-08-19") == ["2917"]
    # the same through a params-file spec
    spec = "livecodebench:release_version=release_v2,start_date=2023-09-01"
    assert [t.task_id for t in load_tasks(spec, "test")] == ["livecodebench/1872_A"]
    with pytest.raises(ValueError, match="release_version 'release_v9'"):
        load_tasks("livecodebench", "test", release_version="release_v9")
    with pytest.raises(ValueError, match="start_date must be a date YYYY-MM-DD"):
        load_tasks("livecodebench", "test", release_version="v1", start_date="July")


def test_livecodebench_hub_path_names_the_release_files(monkeypatch):
    from codelib import task as tasks_module

    seen = []
    monkeypatch.setattr(tasks_module, "hub_records", lambda *a, **k: seen.append((a, k)) or [])
    load_tasks("livecodebench", "test", release_version="release_v3")
    files = [f"{LCB_REPO}/{f}" for f in ("test.jsonl", "test2.jsonl", "test3.jsonl")]
    assert LCB_REPO == "hf://datasets/livecodebench/code_generation_lite"
    assert seen == [(("json",), {"data_files": files, "split": "train"})]


def test_livecodebench_stdio_and_functional_tasks(hub):
    sums, pairs, echo = load_tasks("livecodebench", "all", release_version="release_v2")
    assert sums.kind == "stdio" and sums.canonical_solution == ""  # LiveCodeBench publishes no solutions
    assert json.loads(sums.public_tests) == [{"input": "3 5\n", "output": "8\n16\n"}]
    assert len(json.loads(sums.tests)) == 3  # public + private (decoded from base64/zlib/pickle), as lcb_runner
    assert len(json.loads(echo.tests)) == 3  # private stored as plain JSON
    assert pairs.kind == "function" and pairs.entry_point == "countPairs"
    assert pairs.tests.splitlines() == [
        "assert Solution().countPairs([-1, 1, 2, 3, 1], 2) == 3",
        "assert Solution().countPairs([-6, 2, 5, -2, -7, -1, 3], -2) == 10",
        "assert Solution().countPairs([1], 5) == 0",
    ]
    assert pairs.public_tests == "assert Solution().countPairs([-1, 1, 2, 3, 1], 2) == 3\n"
    assert "class Solution:\n    def countPairs(self, nums: List[int], target: int) -> int:" in pairs.prompt
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
    from codelib import task as tasks_module

    records = _records("lcb_test.jsonl")
    records[1]["metadata"] = "{func_name"
    monkeypatch.setattr(tasks_module, "hub_records", lambda *a, **k: records)
    with pytest.raises(TaskError, match="livecodebench record 2917: public_test_cases / metadata are not JSON"):
        load_tasks("livecodebench", "test", release_version="v1")
    records = _records("lcb_test.jsonl")
    records[0]["contest_date"] = "yesterday"
    monkeypatch.setattr(tasks_module, "hub_records", lambda *a, **k: records)
    with pytest.raises(TaskError, match="livecodebench record abc999_a: contest_date 'yesterday'"):
        load_tasks("livecodebench", "test", release_version="v1")


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
TACO_WRONG = [
    "n = int(input())\nprint(n * (n - 1) // 2)\n",
    "def count_vowels(s):\n    return sum(c in 'aeio' for c in s)\n",
    "class Solution:\n    def twoSum(self, nums, target):\n        return [0, 1]\n",
]


def test_reference_solutions_pass_and_wrong_ones_fail(hub):
    with pytest.warns(UserWarning, match="skipped 1"):
        contests = load_tasks("codecontests", "train", source="hub")
    taco = load_tasks("taco", "train")
    lcb = load_tasks("livecodebench", "test", release_version="release_v2")
    right = [(t, t.canonical_solution) for t in contests + taco]
    right += [(t, LCB_RIGHT[t.task_id.split("/")[1]]) for t in lcb]
    wrong = [(t, c) for t, r in zip(contests, _records("code_contests.jsonl"), strict=False)
             for lang, c in zip(r["incorrect_solutions"]["language"], r["incorrect_solutions"]["solution"],
                                strict=True) if lang == 3]  # fmt: skip
    wrong += list(zip(taco, TACO_WRONG, strict=True)) + [(t, LCB_WRONG[t.task_id.split("/")[1]]) for t in lcb]
    assert len(right) == 8 and len(wrong) == 9
    pairs = right + wrong
    verdicts = sandbox.check([t for t, _ in pairs], [c for _, c in pairs], workers=2, timeout_s=20)
    got = [(t.task_id, v.status, v.detail) for (t, _), v in zip(pairs, verdicts, strict=True)]
    assert [g for g, v in zip(got[: len(right)], verdicts, strict=False) if not v.passed] == []
    assert [g for g, v in zip(got[len(right) :], verdicts[len(right) :], strict=True) if v.passed] == []
    assert all(v.status == "failed" for v in verdicts[len(right) :]), got[len(right) :]
    # each assert of a function task counts as one test, so test_fraction_reward has a gradient
    fn = next(v for (t, _), v in zip(pairs, verdicts, strict=True) if t.task_id == "livecodebench/2917")
    assert (fn.tests_passed, fn.tests_total) == (3, 3)


# ---------------------------------------------------------------------------------------------------------------
# per-task limits and dataset specs


def _task(time_limit_s=None, memory_limit_mb=None) -> Task:
    return Task("t", "p", '[{"input": "", "output": ""}]', "", "", "stdio", time_limit_s=time_limit_s,
                memory_limit_mb=memory_limit_mb)  # fmt: skip


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
    from codelib.rewards import extract_completion

    task = load_tasks("livecodebench", "test", release_version="v1")[1]
    answer = f"Here it is:\n```python\n{LCB_RIGHT['2917']}\nprint(Solution().countPairs([1], 2))\n```\nDone."
    completion = extract_completion(answer, task)
    assert completion.lstrip().startswith("class Solution:") and "print(" not in completion
    assert sandbox.check([task], [completion], workers=1, timeout_s=20)[0].passed


def test_mbpp_taco_profile_and_its_variants_are_valid_params():
    from codelib import pipeline
    from codelib.evaluator import EvalConfig
    from codelib.params import REPO_ROOT, load_config

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

    task = Task("cc/1", "p", '[{"input": "", "output": "1"}]', "", "print(1)", "stdio", time_limit_s=2.0,
                memory_limit_mb=512)  # fmt: skip
    job = sandbox.task_job(task, "print(1)", timeout_s=5.0, memory_mb=1024)
    assert (job.timeout_s, job.memory_mb) == (10.0, 2048)
    plain = sandbox.task_job(Task("cc/2", "p", task.tests, "", "print(1)", "stdio"), "print(1)")
    assert (plain.timeout_s, plain.memory_mb) == (None, None)  # the pool's own limits
