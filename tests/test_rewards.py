"""Rewards: TRL's signature, extraction that keeps prompt + completion runnable, one sandbox map per batch."""

from __future__ import annotations

import dataclasses
import doctest
import pickle

import numpy as np
import pytest

from codelib import sandbox
from codelib.engine import judging, rewards
from codelib.engine.extraction import message_text
from codelib.engine.rewards import (
    REWARDS,
    compile_reward,
    extract_completion,
    format_reward,
    length_penalty,
    lint,
    make_reward,
    pass_reward,
    quality_reward,
    test_fraction_reward,
    weighted,
)
from codelib.tasks import Task, load_tasks, program_for, tasks_to_rows

PROMPT = 'def add(a, b):\n    """Add two numbers."""\n'
ADD = Task(
    "t/add",
    PROMPT,
    "assert add(1, 2) == 3\nassert add(0, 0) == 0\nassert add(-1, 1) == 0\n",
    "add",
    "    return a + b\n",
)


def columns(tasks: list[Task]) -> dict:
    """Dataset columns as TRL passes them: one list per field (the prompt column arrives as `prompts`)."""
    rows = tasks_to_rows(tasks)
    cols = {k: [r[k] for r in rows] for k in rows[0]}
    cols["prompts"] = cols.pop("prompt")
    return cols


def runs(task: Task, completion) -> bool:
    """prompt + extracted completion passes the task's tests."""
    return sandbox.run(program_for(task, extract_completion(completion, task))).passed


# ---------------------------------------------------------------------------------------------------------------
# extraction


@pytest.mark.parametrize(
    "completion",
    [
        "    return a + b\n",  # a base model's continuation
        "    return a + b\n\n\nprint(add(1, 2))\nif __name__ == '__main__':\n    assert add(1, 2) == 4\n",
        "```python\ndef add(a, b):\n    return a + b\n```\nThis adds the numbers.",  # chat: full def in a fence
        "Here you go:\n```\nreturn a + b\n```",  # an unindented body in a fence
        "```python\n    def add(a, b):\n        return a + b\n\n    print(add(2, 2))\n```",  # indented full def
        PROMPT + "    return a + b\n",  # the prompt repeated
        "```python\nimport math\n\ndef helper(x):\n    return x\n\ndef add(a, b):\n    return helper(a) + b\n```",
        [{"role": "assistant", "content": "```py\ndef add(a, b):\n    return a + b\n```"}],  # TRL conversational
        "  return a + b\n",  # a two-space body
        "```python\nprint(add(1, 2))\n```\n```python\ndef add(a, b):\n    return a + b\n```",  # usage first, then the def
        "```bash\n$ python add.py\n```\n```python\nreturn a + b\n```",  # a shell block before the code
        "```python\ndef add(a, b):\n    return a + b\n",  # the closing fence cut off by max_new_tokens
        "import math\n" + PROMPT + "    return math.floor(a) + b\n",  # the prompt repeated after an import it needs
        "```python\nOFFSET = 0\n\ndef add(a, b):\n    return a + b + OFFSET\n```",  # a module constant the def reads
        "```python\ndef add(a, b):\n    return a + b\n\nassert add(1, 2) == 4\n```",  # the model's own wrong assert
    ],
    ids=[
        "body",
        "body+junk",
        "fenced-def",
        "fenced-body",
        "indented-def",
        "repeat",
        "helpers",
        "conversational",
        "indent-2",
        "usage-first",
        "bash-first",
        "truncated-fence",
        "import-then-repeat",
        "constant",
        "own-assert",
    ],
)
def test_extracted_completions_run_after_the_prompt(completion):
    assert runs(ADD, completion)


def test_extraction_of_a_full_def_after_a_bodyless_prompt():
    # "def add(a, b):\n" alone cannot be redefined (no body): the body is taken from the model's def
    out = extract_completion("```python\ndef add(a, b):\n    return a + b\n```", "def add(a, b):\n")
    assert out == "    return a + b\n"


def test_a_full_def_that_cannot_follow_a_bodyless_prompt_gives_its_body():
    """A def spelled otherwise than the prompt (annotations, a wrapped signature) cannot be appended to a prompt with
    no body, nor cut back as a repeat: its body, from the first body line, is taken instead."""
    answer = "```python\ndef add(\n    a: int, b: int\n) -> int:\n    return a + b\n```"
    assert extract_completion(answer, "def add(a, b):\n") == "    return a + b\n"


def test_a_one_line_def_after_a_bodyless_prompt_gives_its_body():
    """A one-line def (`def f(...): return ...`) spelled otherwise than the prompt: its body is what follows the
    header's colon, not the whole def line nested in the prompt's function (which would return None); the header's
    offset is counted in bytes, so a non-ASCII default before the colon cuts at the right place. Judged, it passes."""
    task = Task("t/add", "def add(a, b):\n", "assert add(1, 2) == 3\n", "add", "    return a + b\n")
    one_line = "```python\ndef add(a: int, b: int) -> int: return a + b\n```"
    assert extract_completion(one_line, task) == "    return a + b\n"
    assert sandbox.run(program_for(task, extract_completion(one_line, task))).passed
    accented = '```python\ndef add(a: int, b: int, sep: str = "é") -> int: x = a; return x + b\n```'
    assert extract_completion(accented, task) == "    x = a; return x + b\n"


def test_the_entry_point_names_the_def_a_full_answer_redefines():
    """A full def is recognised by the task's entry point, else by the prompt's last def (async too), not any def."""
    helper_first = 'def helper(x):\n    return x\n\n\ndef add(a, b):\n    """Add two numbers."""\n'
    answer = "```python\ndef add(a, b):\n    return helper(a) + b\n```"
    assert extract_completion(answer, helper_first) == "\ndef add(a, b):\n    return helper(a) + b\n"
    async_prompt = 'async def add(a, b):\n    """Add two numbers."""\n'
    async_answer = "```python\nasync def add(a, b):\n    return a + b\n```"
    assert extract_completion(async_answer, async_prompt) == "\nasync def add(a, b):\n    return a + b\n"
    # the entry point is not the prompt's last def: the answer redefines `add`, not the helper after it
    prompt = PROMPT + '    return _impl(a, b)\n\n\ndef _impl(a, b):\n    """To complete."""\n'
    entry_first = Task("t/add-impl", prompt, ADD.tests, "add", "")
    assert runs(entry_first, "```python\ndef add(a, b):\n    return a + b\n```")


def test_a_body_after_a_prompt_without_its_last_newline():
    """A prompt that does not end in a newline gets one before the body, so that the two still compile together."""
    task = Task("t/add-nonl", PROMPT.rstrip("\n"), ADD.tests, "add", "")
    assert extract_completion("    return a + b\n", task) == "\n    return a + b\n"
    assert runs(task, "    return a + b\n")


def test_the_text_of_a_conversational_completion():
    """A message's content; of a message list, the last assistant message's (any message's when none has a role)."""
    assert message_text({"role": "assistant", "content": "x"}) == "x"
    turns = [
        {"role": "assistant", "content": "first"},
        {"role": "user", "content": "again"},
        {"role": "assistant", "content": "last"},
    ]
    assert message_text(turns) == "last"
    assert message_text([{"content": "bare"}]) == "bare"
    assert message_text([]) == ""
    assert extract_completion({"role": "assistant", "content": "    return a + b\n"}, ADD) == "    return a + b\n"


def test_stdio_programs_end_with_one_newline():
    """A stdio program loses its blank edges, so that one program is one string (one verdict, one distinct candidate)."""
    stdio = Task("s/1", "Print 1.", '[{"input": "", "output": "1\\n"}]', "", "print(1)\n", "stdio")
    assert extract_completion("```python\n\nprint(1)\n\n\n```", stdio) == "print(1)\n"
    assert extract_completion("print(1)", stdio) == "print(1)\n"


def test_extraction_for_mbpp_and_stdio():
    mbpp = load_tasks("mbpp", "test", limit=1)[0]
    fenced = f"Solution:\n```python\n{mbpp.canonical_solution}\nprint('debug')\n```"
    assert runs(mbpp, fenced)
    stdio = Task(
        "s/0",
        "Sum two numbers.",
        '[{"input": "1 2\\n", "output": "3\\n"}]',
        "",
        "print(sum(map(int, input().split())))",
        "stdio",
    )
    code = extract_completion("```python\nprint(sum(map(int, input().split())))\n```", stdio)
    assert code == "print(sum(map(int, input().split())))\n"
    assert pass_reward([code], **columns([stdio])) == [1.0]


# ---------------------------------------------------------------------------------------------------------------
# sandbox rewards


def test_pass_and_test_fraction_rewards_share_one_sandbox_map(monkeypatch):
    calls = []
    real = sandbox.check

    def counting(tasks, completions, **kw):
        calls.append(len(tasks))
        return real(tasks, completions, **kw)

    monkeypatch.setattr(sandbox, "check", counting)
    judging.CACHE.clear()
    completions = ["    return a + b\n", "    return a * b\n", "    return a - b + 2 * b\n", "    retur\n"]
    cols = columns([ADD] * 4)
    assert pass_reward(completions, **cols) == [1.0, 0.0, 1.0, 0.0]
    assert test_fraction_reward(completions, **cols) == [1.0, pytest.approx(1 / 3), 1.0, 0.0]
    assert calls == [4]  # one map for the batch; the second reward reads the cache


def test_rows_without_tests_get_none():
    cols = columns([ADD, ADD])
    cols["tests"][1] = ""
    assert pass_reward(["    return a + b\n"] * 2, **cols) == [1.0, None]


def test_stdio_and_plus_rewards():
    cc = load_tasks("codecontests", "all", limit=1)[0]
    assert pass_reward([cc.canonical_solution, "print(0)"], **columns([cc, cc])) == [1.0, 0.0]
    he = load_tasks("humaneval_plus", "all", limit=1)[0]
    plus = REWARDS["pass"](plus=True)
    assert plus.__name__ == "pass_plus_reward"
    assert plus([he.canonical_solution], **columns([he])) == [1.0]
    # with plus, each plus input counts as a test beside the asserts: 3 asserts + 4 inputs, the third input fails
    task = dataclasses.replace(ADD, plus_inputs="[[1, 2], [0, 0], [100, 1], [7, 8]]")
    fraction = REWARDS["test_fraction"](plus=True)
    assert fraction.__name__ == "test_fraction_plus_reward"
    small_only = ["    return a + b if a < 50 else 0\n"]
    assert fraction(small_only, **columns([task])) == [pytest.approx(6 / 7)]
    assert test_fraction_reward(small_only, **columns([task])) == [1.0]
    assert plus(small_only, **columns([task])) == [0.0] and pass_reward(small_only, **columns([task])) == [1.0]


def test_rewards_accept_trl_extras():
    cols = columns([ADD])
    extras = dict(completion_ids=[[1, 2, 3]], trainer_state=object())
    assert pass_reward(["    return a + b\n"], **cols, **extras) == [1.0]
    assert length_penalty(alpha=1.0)(["whatever text"], **cols, **extras) == [pytest.approx(-0.03)]


# ---------------------------------------------------------------------------------------------------------------
# rewards that run nothing


def test_length_penalty_counts_tokens():
    assert length_penalty(alpha=0.5)(["return a + b"]) == [pytest.approx(-0.5 * 4 / 100)]

    class Tokenizer:  # the tokenizer's count wins over the regex
        def __call__(self, text, add_special_tokens=False):
            return {"input_ids": list(range(10))}

    assert length_penalty(alpha=1.0, tokenizer=Tokenizer())(["x"]) == [pytest.approx(-0.1)]
    assert length_penalty(0.01)([[{"role": "assistant", "content": "a b c"}]]) == [pytest.approx(-0.0003)]
    # the `tokens` column (counts) wins over the policy's completion_ids, which win over any tokenizer or regex
    both = length_penalty(alpha=1.0, tokenizer=Tokenizer())(["x y"], tokens=[7], completion_ids=[[1, 2]])
    assert both == [pytest.approx(-0.07)]
    assert length_penalty(alpha=1.0, tokenizer=Tokenizer())(["x y"], completion_ids=[[1, 2]]) == [pytest.approx(-0.02)]

    class WithBos:  # adds a BOS unless told not to: the penalty counts the completion's own tokens only
        def __call__(self, text, add_special_tokens=True):
            return {"input_ids": [0] * add_special_tokens + text.split()}

    assert length_penalty(alpha=1.0, tokenizer=WithBos())(["x y z"]) == [pytest.approx(-0.03)]
    # the REINFORCE experiment's reward, the stage's default and its shipped params': pass - 0.01 x tokens / 100
    from codelib.plumbing.params import REPO_ROOT, load_config
    from codelib.trainers import reinforce

    shipped = load_config(reinforce.Config, REPO_ROOT / "params/tiny/02_reinforce.yaml").rewards
    for spec in (reinforce.Config().rewards, shipped):
        total, _ = rewards.make_rewards(spec).score(["    return a + b\n"], **columns([ADD]), tokens=[50])
        assert total == [pytest.approx(1 - 0.01 * 50 / 100)]


def test_compile_format_and_quality():
    cols = columns([ADD] * 4)
    completions = [
        "    return a + b\n",
        "```python\ndef add(a, b):\n    return a + b\n```",
        "```python\nx = 1\n```\n```python\ny = 2\n```",
        "    return a +\n",
    ]
    assert compile_reward(completions, **cols) == [1.0, 1.0, 1.0, 0.0]
    assert format_reward(completions, **cols) == [1.0, 1.0, 0.0, 0.0]
    bodies = ["    return a + b\n", "    import os\n    unused = 1\n    return a + b\n", "    return (\n"]
    quality = quality_reward(bodies, **columns([ADD] * 3))
    assert quality == [1.0, pytest.approx(0.6), 0.0]
    # stdio: the program alone compiles (its prompt is prose); an empty answer has no format, though it compiles
    assert compile_reward(["print(int(input()))\n"], prompt=["Read n and print it."], kind=["stdio"]) == [1.0]
    assert compile_reward(["    return a + b\n"], prompt=["Read n and print it."], kind=["function"]) == [0.0]
    assert format_reward(["", "  \n"], **columns([ADD] * 2)) == [0.0, 0.0]
    # only the completion's own lines are linted (the prompt's unused import is not its finding); the score floors at 0
    assert quality_reward(["    return a\n"], prompt=["import os\ndef f(a):\n"]) == [1.0]
    six = "".join(f"    import {m}\n" for m in ("sys", "re", "json", "math", "time", "abc")) + "    return a\n"
    assert quality_reward([six], prompt=["def f(a):\n"]) == [0.0]


def test_lint_findings():
    code = (
        "import os\n"
        "def f(x, acc=[]):\n"
        "    list = []\n"
        "    y = 2\n"
        "    try:\n"
        "        pass\n"
        "    except:\n"
        "        pass\n"
        "    if x == None:\n"
        "        return undefined_thing\n"
        "    return x\n"
    )
    found = " | ".join(lint(code))
    for what in (
        "unused import os",
        "mutable default",
        "shadows builtin list",
        "unused variable y",
        "bare except",
        "comparison to None",
        "undefined name undefined_thing",
    ):
        assert what in found, what
    assert lint("def f(x):\n    return x\n") == []
    assert lint(code, first_line=20) == []  # only the completion's own lines count


# ---------------------------------------------------------------------------------------------------------------
# weighted sum, factories, pickling


def test_weighted_sums_components_and_skips_none():
    fn = weighted(**{"pass": 1.0, "length": {"weight": 1.0, "alpha": 1.0}, "compile_reward": 0.5})
    assert fn.__name__ == "weighted"
    assert fn(["    return a + b\n"], **columns([ADD])) == [pytest.approx(1.0 - 0.04 + 0.5)]
    none = weighted(mine=(2.0, lambda completions, **_: [None] * len(completions)))
    assert none(["x"]) == [None]

    # a row where one term does not apply (None) still gets the others' weighted sum; None only where none applies
    def first(completions, **_):
        return [1.0, None, None]

    def second(completions, **_):
        return [None, 1.0, None]

    assert weighted(a=(0.5, first), b=(2.0, second))(["x", "y", "z"]) == [0.5, 2.0, None]
    with pytest.raises(ValueError, match="share the name '<lambda>'"):  # they would merge in the sum and the logs
        weighted(a=(1.0, lambda c, **_: [1.0]), b=(1.0, lambda c, **_: [0.0]))
    with pytest.raises(ValueError, match="unknown reward"):
        weighted(passs=1.0)
    # the sum is float32, term by term, as a trainer's tensors hold it (not 1 - 0.0003 in float64)
    total, terms = weighted(**{"pass": 1.0, "length": {"alpha": 0.01}}).score(
        ["    return a + b\n"], **columns([ADD]), tokens=[3]
    )
    assert total == [float(np.float32(1.0) + np.float32(terms["length_penalty"][0]))] and total != [1.0 - 0.0003]
    # a term under a name of its own (`reward:` names the factory), and a bare function, weight 1
    assert weighted(short={"reward": "length", "alpha": 1.0})(["a b"]) == [pytest.approx(-0.02)]

    def half(completions, **_):
        return [0.5] * len(completions)

    assert weighted(mine=half)(["x"]) == [0.5]
    with pytest.raises(ValueError, match="at least one component"):
        weighted()


def test_factories_return_picklable_named_callables():
    made = [make_reward(name) for name in ("pass", "test_fraction", "compile", "format", "quality")]
    made += [REWARDS["length"](alpha=0.02), REWARDS["pass"](plus=True), weighted(compile=1.0, quality=0.5)]
    for fn in made:
        copy = pickle.loads(pickle.dumps(fn))
        assert isinstance(copy.__name__, str) and copy.__name__
        assert copy(["    return a + b\n"], **columns([ADD])) == fn(["    return a + b\n"], **columns([ADD]))
    # a reward's own function name works too; an empty or wrong `rewards:` mapping is a clear error
    assert make_reward("length_penalty", alpha=1.0)(["a b"]) == [pytest.approx(-0.02)]
    assert make_reward("overlong_penalty", max_tokens=4, cache=2).__name__ == "overlong_penalty"
    with pytest.raises(ValueError, match="at least one reward"):
        rewards.make_rewards({})
    with pytest.raises(ValueError, match="rewards .*'beta'"):  # a factory argument it does not take, named
        rewards.make_rewards({"length": {"alpha": 0.01, "beta": 2}})


def test_docstring_examples():
    assert doctest.testmod(rewards).failed == 0


def test_verdict_cache_eviction_never_loses_a_batch_hit():
    """A batch mixing cached and new rows, with the cache full, still gets a verdict for every row."""
    cache = judging.VerdictCache(size=2)
    cols = {"prompt": ["def f(x):\n"] * 3, "tests": ["assert f(1) == 2"] * 3, "entry_point": ["f"] * 3}
    first = judging.verdicts(["    return x + 1\n", "    return 2\n", "    return x * 2\n"], cache=cache, **cols)
    assert [v.passed for v in first] == [True, True, True]
    again = judging.verdicts(["    return 2\n", "    return 0\n", "    return 1\n"], cache=cache, **cols)  # 1 hit
    assert [v.passed for v in again] == [True, False, False]


class _FakeSandbox:
    """Stands in for `sandbox.check`: records the tasks it is asked to judge; a verdict passes unless plus is asked
    (so a cache that ignores plus shows)."""

    def __init__(self):
        self.calls = []

    def __call__(self, tasks, codes, plus=False, **_):
        import types

        self.calls.append((list(tasks), list(codes), plus))
        return [types.SimpleNamespace(passed=not plus, code=c) for c in codes]


def test_reward_columns_rebuild_the_whole_task_the_sandbox_judges(monkeypatch):
    """What TRL hands a reward function (the dataset's columns) becomes the same Task the evaluator judges: the
    benchmark's own limits, tolerance, comparator, kind and extra inputs, and the untruncated prompt when the trainer
    cut the one the model saw."""
    fake = _FakeSandbox()
    monkeypatch.setattr(judging.sandbox, "check", fake)
    task = Task(
        task_id="taco/7",
        prompt="Read n and print n squared.\n",
        tests='[{"input": "3\\n", "output": "9\\n"}]',
        entry_point="",
        canonical_solution="print(int(input()) ** 2)\n",
        kind="stdio",
        plus_inputs="[[1], [2]]",
        atol=1e-6,
        time_limit_s=3.0,
        memory_limit_mb=512,
        compare="taco",
    )
    cols = {k: [v] for k, v in tasks_to_rows([task])[0].items()}
    cols["source_prompt"], cols["prompt"] = cols["prompt"], ["Read n and"]  # the prompt the trainer cut
    judging.verdicts(["print(int(input()) ** 2)\n"], cache=judging.VerdictCache(), **cols)
    ((judged,), _, _) = fake.calls[0]
    assert judged == task


def test_the_verdict_cache_keys_on_the_whole_task_and_plus_and_evicts_the_least_recently_used(monkeypatch):
    fake = _FakeSandbox()
    monkeypatch.setattr(judging.sandbox, "check", fake)
    cache = judging.VerdictCache(size=2)
    cols = {"task_id": ["t"], "prompt": ["def f(x):\n"], "tests": ["assert f(1) == 2"], "entry_point": ["f"]}
    other = dict(cols, tests=["assert f(1) == 3"])  # the same id, other tests: another task
    judging.verdicts(["    return 2\n"], cache=cache, **cols)
    judging.verdicts(["    return 2\n"], cache=cache, **other)
    assert len(fake.calls) == 2  # not served the first task's verdict
    plus = judging.verdicts(["    return 2\n"], cache=cache, plus=True, **cols)
    assert len(fake.calls) == 3 and plus[0].passed is False  # plus is part of the key
    assert len(cache.items) == 2  # the size holds: the oldest entry went
    judging.verdicts(["    return 2\n"], cache=cache, **other)  # a hit: now the most recently used
    judging.verdicts(["    return 3\n"], cache=cache, **cols)  # evicts the least recently used (the plus row)
    assert len(fake.calls) == 4
    judging.verdicts(["    return 2\n"], cache=cache, **other)
    assert len(fake.calls) == 4  # still held
    judging.verdicts(["    return 2\n"], cache=cache, plus=True, **cols)
    assert len(fake.calls) == 5  # evicted, judged again


def test_a_reward_terms_mean_leaves_out_the_rows_it_does_not_apply_to():
    """`rewards/<name>/mean` is the mean over the rows where the term applies, as TRL's GRPOTrainer logs it (a
    nanmean), so the two backends' curves mean one thing: a row without tests (None) is left out, not counted 0, and
    a term that applies to no row is None (not computed), never 0."""
    from types import SimpleNamespace

    from codelib.engine.rollout import term_means

    ro = SimpleNamespace(terms={"pass": [1.0, None, 0.0, 1.0], "format": [None, None, None, None], "len": [0.5] * 4})
    means = term_means(ro)
    assert means["rewards/pass/mean"] == pytest.approx(2 / 3)  # counting None as 0 gives 0.5
    assert means["rewards/format/mean"] is None
    assert means["rewards/len/mean"] == pytest.approx(0.5)
