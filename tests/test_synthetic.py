"""The synthetic suite: deterministic, split without leaks, and every canonical solution passes its tests."""

import hashlib
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter

import pytest

from codelib.tasks import program_for, synthetic

# The generator's own programs are trusted, so one plain subprocess runs them all at once (thousands per second);
# the sandbox is exercised on a sample below.
_BATCH = """
import json, sys
failed = []
for i, program in enumerate(json.load(sys.stdin)):
    try:
        exec(compile(program, "<task>", "exec"), {"__name__": "__main__"})
    except BaseException:
        failed.append(i)
print(json.dumps(failed))
"""


def failing(programs: list[str]) -> list[int]:
    """Indices of the programs that raise (run in one fresh interpreter)."""
    out = subprocess.run(
        [sys.executable, "-c", _BATCH],
        input=json.dumps(programs),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def suite():
    return synthetic.generate_specs()


def test_sizes_ids_and_format(suite):
    train, test = suite
    assert (len(train), len(test)) == (5000, 300)
    assert [s.task.task_id for s in test[:2]] == ["synthetic/test/0", "synthetic/test/1"]
    assert len({s.task.task_id for s in train + test}) == 5300
    for s in train[:50] + test:
        t = s.task
        assert t.kind == "function"
        assert re.fullmatch(r'def (\w+)\([\w, ]+\):\n    """[^"\n][^\n]*"""\n', t.prompt), t.prompt
        assert t.entry_point == re.match(r"def (\w+)", t.prompt).group(1)
        assert re.fullmatch(r"    return [^\n]+\n", t.canonical_solution)
        assert t.tests.startswith("def check(candidate):\n")
        assert t.tests.count("    assert candidate(") == 6


def test_deterministic_for_a_seed_even_across_hash_seeds():
    a = synthetic.generate(seed=3, n_train=300, n_test=72)
    assert a == synthetic.generate(seed=3, n_train=300, n_test=72)
    assert a != synthetic.generate(seed=4, n_train=300, n_test=72)
    # Sets of strings iterate in a per-process order (PYTHONHASHSEED); the suite must not depend on it.
    code = (
        "import hashlib; from codelib import synthetic; "
        "print(hashlib.sha1(str(synthetic.generate(seed=3, n_train=300, n_test=72)).encode()).hexdigest())"
    )
    digests = {
        subprocess.run(
            [sys.executable, "-c", code],
            env=dict(os.environ, PYTHONHASHSEED=h),
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for h in ("1", "2")
    }
    assert digests == {hashlib.sha1(str(a).encode()).hexdigest()}


def test_fast():
    start = time.perf_counter()
    synthetic.generate()
    assert time.perf_counter() - start < 3.0  # ~0.15 s here; generous for a loaded CI machine


def test_held_out_shares_no_task_and_no_rule(suite):
    train, test = suite
    assert not {s.task.prompt for s in train} & {s.task.prompt for s in test}
    assert not {s.task.tests for s in train} & {s.task.tests for s in test}
    assert len({s.task.prompt for s in test}) == len(test)
    seen_pairs = {(s.op, s.constant) for s in train if s.constant is not None}
    seen_combos = {(s.op, s.wording, s.args) for s in train if s.constant is None}
    for s in test:
        if s.constant is not None:
            assert (s.op, s.constant) not in seen_pairs, s
        else:
            assert (s.op, s.wording, s.args) not in seen_combos, s
    # Five integer constants appear in no training task at all, and the test split uses them.
    train_ints = {s.constant for s in train if isinstance(s.constant, int)}
    unseen = {s.constant for s in test if isinstance(s.constant, int) and s.constant not in train_ints}
    unseen &= set(synthetic.INT_POOL)
    assert len(unseen) == synthetic.N_UNSEEN
    for k in unseen:  # not even hiding in a docstring as another operation's constant
        assert not any(f" {k}." in s.task.prompt or f" {k} " in s.task.prompt for s in train)


def test_every_operation_and_family_present_and_test_balanced(suite):
    train, test = suite
    assert len(synthetic.OPS) == 36
    assert {s.family for s in test} == {s.family for s in train} == set(synthetic.FAMILIES)
    per_op = Counter(s.op for s in test)
    assert set(per_op) == {op.name for op in synthetic.OPS}
    assert max(per_op.values()) - min(per_op.values()) <= 1
    assert set(Counter(s.op for s in train)) == set(per_op)
    assert {s.wording for s in train} == {0, 1}


def test_boundary_inputs_around_the_constant(suite):
    _, test = suite
    checked = 0
    for s in test:
        if synthetic.OPS_BY_NAME[s.op].inputs == "boundary":
            k = s.constant
            for x in (k - 1, k, k + 1):
                assert f"candidate({x}) ==" in s.task.tests, s.task.tests
            checked += 1
        elif synthetic.OPS_BY_NAME[s.op].inputs == "boundary_lists":
            for x in (k - 1, k, k + 1) if (k := s.constant) else ():
                assert f"candidate([{x}]) ==" in s.task.tests
            checked += 1
    assert checked > 80


def test_every_canonical_solution_passes(suite):
    train, test = suite
    tasks = [s.task for s in train + test]
    assert failing([program_for(t, t.canonical_solution) for t in tasks]) == []


def test_wrong_solutions_fail(suite):
    _, test = suite
    tasks = [s.task for s in test]
    assert sorted(failing([program_for(t, "    return None\n") for t in tasks])) == list(range(len(tasks)))
    # The classic slip the boundary asserts exist for: the right operation with a constant off by one.
    off_by_one = [
        (s.task, s.task.canonical_solution.replace(str(s.constant), str(s.constant + 1)))
        for s in test
        if isinstance(s.constant, int)
    ]
    assert len(off_by_one) > 100
    assert sorted(failing([program_for(t, c) for t, c in off_by_one])) == list(range(len(off_by_one)))
    # Swapping the arguments of an asymmetric two-argument op is caught too (both orders are tested).
    swapped = [s.task for s in test if s.op in ("sub2",)]
    wrong = [t.canonical_solution.replace(" - ", " + ") for t in swapped]
    assert sorted(failing([program_for(t, c) for t, c in zip(swapped, wrong, strict=True)])) == list(
        range(len(swapped))
    )


def test_sandbox_agrees_on_one_task_per_operation(suite):
    from codelib import sandbox

    _, test = suite
    firsts = list({s.op: s.task for s in test}.values())
    verdicts = sandbox.check(firsts, [t.canonical_solution for t in firsts])
    assert [v.status for v in verdicts] == ["passed"] * len(firsts)
    wrong = sandbox.check(firsts, ["    return 0\n"] * len(firsts))
    assert not any(v.passed for v in wrong)


def test_rl_split_follows_training_rules_and_leaves_train_test_unchanged():
    from codelib.tasks import synthetic

    train, test = synthetic.generate()
    train2, test2, rl = synthetic.generate_specs(n_rl=500)
    assert [s.task for s in train2] == train and [s.task for s in test2] == test
    test_prompts = {t.prompt for t in test}
    assert not any(s.task.prompt in test_prompts for s in rl)
    held = {(s.op, s.constant) for s in test2 if s.constant is not None}
    assert not any((s.op, s.constant) in held for s in rl if s.constant is not None)


def test_fresh_split_is_held_out_rules_none_of_the_shipped_test_tasks(suite):
    """The second held-out set (split `fresh`): every task under a held-out rule of the test split, none of its
    prompts (nor a training prompt), balanced over the operations, deterministic, every canonical solution passes."""
    train, test = suite
    fresh = synthetic.fresh_specs()
    assert len(fresh) == 400 and len({s.task.prompt for s in fresh}) == 400
    assert not {s.task.prompt for s in fresh} & ({s.task.prompt for s in test} | {s.task.prompt for s in train})
    import random

    _, held = synthetic._held_out(random.Random(0))  # the rules generate(seed=0) holds out
    seen_pairs = {(s.op, s.constant) for s in train if s.constant is not None}
    seen_combos = {(s.op, s.wording, s.args) for s in train if s.constant is None}
    for s in fresh:
        if s.constant is not None:
            assert (s.op, s.constant) not in seen_pairs and s.constant in held[s.op], s
        else:
            assert (s.op, s.wording, s.args) not in seen_combos and (s.wording, s.args) in held[s.op], s
    counts = Counter(s.op for s in fresh)
    assert max(counts.values()) - min(counts.values()) <= 1
    assert [s.task for s in synthetic.fresh_specs()] == [s.task for s in fresh]
    assert failing([program_for(s.task, s.task.canonical_solution) for s in fresh]) == []
    from codelib.tasks import load_tasks

    assert [t.task_id for t in load_tasks("synthetic", "fresh")] == [f"synthetic/fresh/{i}" for i in range(400)]


def test_probe_tasks_hold_their_answer_only_in_the_tests():
    """The repair stage's probe: the value is written nowhere in the prompt, every assert holds it, the held-out
    split's values never occur on the training side, and the canonical solutions pass (a guess fails)."""
    from codelib.tasks import load_tasks, synthetic

    held, train = synthetic.probe_specs(n=200), synthetic.probe_specs(n=2000, held_out=False)
    assert {s.constant for s in held}.isdisjoint({s.constant for s in train})
    assert {type(s.constant) for s in held} == {int, str}
    for s in held + train[:300]:
        assert repr(s.constant) not in s.task.prompt and not any(c.isdigit() for c in s.task.prompt)
        assert s.task.tests.count(f") == {s.constant!r}\n") == 6
    assert synthetic.probe_specs(n=20) == synthetic.probe_specs(n=20) != synthetic.probe_specs(seed=1, n=20)
    assert [t.task_id for t in load_tasks("synthetic", "probe")[:2]] == ["synthetic/probe/0", "synthetic/probe/1"]
    tasks = [s.task for s in held[:40]]
    assert failing([program_for(t, t.canonical_solution) for t in tasks]) == []
    guess = [
        program_for(s.task, f"    return {s.constant + 1 if isinstance(s.constant, int) else 'zz'!r}\n")
        for s in held[:40]
    ]
    assert sorted(failing(guess)) == list(range(40))
