"""Dataset adapters: split sizes, record shapes, and rejection of malformed records."""

import json

import pytest

from codelib.tasks import Task, TaskError, load_tasks, make_task, program_for, sample_tasks


@pytest.mark.parametrize(
    ("name", "split", "n"),
    [
        ("humaneval", "train", 131),
        ("humaneval", "test", 33),
        ("humaneval", "all", 164),
        ("humaneval_plus", "test", 33),
        ("mbpp", "train", 374),
        ("mbpp", "test", 500),
        ("mbpp", "validation", 90),
        ("mbpp", "fewshot", 10),
        ("mbpp_plus", "all", 378),
        ("mbpp_plus", "test", 224),
        ("codecontests", "train", 205),
        ("codecontests", "test", 51),
        ("codecontests", "all", 256),
    ],
)
def test_split_sizes(name, split, n):
    assert len(load_tasks(name, split)) == n


def test_humaneval_split_matches_id_lists_and_is_disjoint():
    train = {t.task_id for t in load_tasks("humaneval", "train")}
    test = {t.task_id for t in load_tasks("humaneval", "test")}
    assert not train & test
    assert "HumanEval/1" in test and "HumanEval/0" in train


def test_mbpp_setup_code_runs_after_solution():
    task = next(t for t in load_tasks("mbpp", "all") if t.task_id == "mbpp/367")
    program = program_for(task, task.canonical_solution)
    # the Node class is defined by the solution and used by the setup code: solution must come first
    assert program.index("class Node") < program.index("root = Node")
    assert task.entry_point == "is_tree_balanced"


def test_humaneval_program_calls_check():
    task = load_tasks("humaneval", "test")[0]
    assert program_for(task, task.canonical_solution).rstrip().endswith(f"check({task.entry_point})")


def test_stdio_tasks_carry_cases_and_program_is_the_completion():
    task = load_tasks("codecontests", "test")[0]
    cases = json.loads(task.tests)
    assert task.kind == "stdio" and cases and {"input", "output"} <= set(cases[0])
    assert program_for(task, "print(1)") == "print(1)"


def test_plus_inputs_present_and_mbpp_plus_conversions():
    he = load_tasks("humaneval_plus", "test")[0]
    assert len(json.loads(he.plus_inputs)) > 10
    m = {t.task_id: t for t in load_tasks("mbpp_plus", "all")}
    args = json.loads(m["Mbpp/106"].plus_inputs)[0]
    assert "__tuple__" in args[1]
    assert m["Mbpp/120"].tests.startswith("import math")


def test_malformed_records_are_rejected_by_name():
    with pytest.raises(TaskError, match="rec-7.*no tests"):
        make_task("mine", task_id="rec-7", prompt="def f():\n", tests="", entry_point="f", canonical_solution="")
    with pytest.raises(TaskError, match="rec-8.*entry_point"):
        make_task(
            "mine", task_id="rec-8", prompt="def f():\n", tests="assert 1", entry_point="", canonical_solution=""
        )
    with pytest.raises(TaskError, match="rec-9.*no tests"):
        make_task("mine", task_id="rec-9", prompt="x", tests="[]", entry_point="", canonical_solution="", kind="stdio")


def test_unknown_dataset_and_split_errors():
    with pytest.raises(ValueError, match="unknown dataset 'humaneva'"):
        load_tasks("humaneva")
    with pytest.raises(ValueError, match="splits"):
        load_tasks("humaneval", "validation")


def test_sample_tasks_is_seeded_and_ordered():
    tasks = load_tasks("mbpp", "test")
    a, b = sample_tasks(tasks, 20, seed=3), sample_tasks(tasks, 20, seed=3)
    assert a == b and len(a) == 20
    ids = [int(t.task_id.split("/")[1]) for t in a]
    assert ids == sorted(ids)


def test_task_is_frozen():
    t = load_tasks("humaneval", "test")[0]
    assert isinstance(t, Task)
    with pytest.raises(AttributeError):
        t.prompt = "x"


def test_calls_tasks_keep_their_tests_as_data_and_name_their_comparator():
    tests = json.dumps([{"input": "[1, 2]\n3", "output": "[4, 5]"}])
    task = make_task(
        "lcb",
        task_id="x/1",
        prompt="p\n",
        tests=tests,
        entry_point="Solution.f",
        canonical_solution="",
        kind="calls",
        compare="lcb",
    )
    assert program_for(task, "class Solution:\n    pass\n") == "p\nclass Solution:\n    pass\n"  # tests not inlined
    assert task.to_dict()["compare"] == "lcb" and task.to_dict()["kind"] == "calls"
    with pytest.raises(TaskError, match="x/2: it has no entry_point"):
        make_task("lcb", task_id="x/2", prompt="p", tests=tests, entry_point="", canonical_solution="", kind="calls")
    with pytest.raises(TaskError, match="kind must be one of function, stdio, calls, not 'rpc'"):
        make_task("lcb", task_id="x/3", prompt="p", tests=tests, entry_point="f", canonical_solution="", kind="rpc")
    assert load_tasks("humaneval", "test")[0].compare == ""  # bundled datasets keep the default rule


def test_big_ints_lift_the_digit_limit_only_inside():
    import sys

    from codelib.tasks.task import big_ints, stdin_prelude

    text = "7" * 5000
    with big_ints():
        assert json.loads(text) == int(text)
    with pytest.raises(ValueError, match="4300"):
        json.loads(text)
    assert sys.get_int_max_str_digits() == 4300
    assert "from math import *" in stdin_prelude("lcb") and "gcd" in stdin_prelude("taco") and stdin_prelude("") == ""
