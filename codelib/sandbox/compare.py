"""Output comparators, one per benchmark, each judging as that benchmark's own harness does.

A pass@1 on LiveCodeBench, TACO or CodeContests means something only when it is the number the benchmark's harness
would give, so each benchmark's rule is written down here once (docs/datasets.md has the table and the references):

- "default": the sandbox's own rule for bundled datasets and synthetic tasks: whitespace-separated tokens; an
  expected integer compares as an integer (exactly: '20.0' is 20, '9999999967.0' is not 9999999968), an expected
  float within 1e-6 (absolute or relative), anything else as text; inf and nan never match a number.
- "lcb": lcb_runner's `grade_stdio` (stripped lines, same line count, each line equal as text or as a list of
  `Decimal`s) and `grade_call_based` (a returned tuple becomes a list, then `==`).
- "taco": TACO's `metrics/testing_util.py`: its chain of lenient stdout checks, and for calls its argument and
  result normalisations (int dict keys, a result wrapped in a list, a list of tuples).
- "codecontests": DeepMind's code_contests checker (`OutputsMatch`): lowercased tokens, numbers as doubles within
  an absolute 1e-5.
- "evalplus": EvalPlus's comparison of a result with the reference's (exact, else `allclose` for floats).

Every function is pure and runs in time linear in its inputs: untrusted values are never put into a set or dict
(an adversary can make many values hash alike); they are only looked up in sets built from the trusted side.

    >>> stdout_equal("codecontests", "YES\\n0.33333", "yes 0.333333333")
    (True, '')
    >>> stdout_equal("default", "9999999967.0", "9999999968")[0]
    False
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .comparators import (  # noqa: F401 - each benchmark's rules, importable from here
    CODECONTESTS_TOLERANCE,
    DEFAULT_TOLERANCE,
    DETAIL_CHARS,
    EVALPLUS_FLOAT_ATOL,
    EVALPLUS_RTOL,
    MBPP_NOT_NONE,
    MBPP_SET_EQ,
    codecontests_stdout,
    default_stdout,
    evalplus_stdout,
    evalplus_value,
    lcb_stdout,
    lcb_value,
    plain_value,
    set_equal,
    taco_args,
    taco_expected,
    taco_stdout,
    taco_value,
)

# ---------------------------------------------------------------------------------------------------------------
# the registry


@dataclass(frozen=True)
class Comparator:
    """One benchmark's rules: stdout (got, want) -> (same, detail); value (got, want) -> same; how its harness
    prepares a call's arguments; the reference it follows. (What the harness runs before a program is in
    `codelib.tasks.task.PRELUDES`: the prompt of a calls task starts with it, and a stdin program gets it
    prepended.)"""

    stdout: Callable[[str, str], tuple[bool, str]]
    value: Callable[[object, object], bool]
    args: Callable[[list], list] = list
    reference: str = ""


COMPARATORS: dict[str, Comparator] = {
    "default": Comparator(default_stdout, plain_value, reference="codelib (exact integers, floats within 1e-6)"),
    "lcb": Comparator(lcb_stdout, lcb_value, reference="LiveCodeBench lcb_runner/evaluation/testing_util.py"),
    "taco": Comparator(taco_stdout, taco_value, taco_args, reference="TACO metrics/testing_util.py"),
    "codecontests": Comparator(
        codecontests_stdout, plain_value, reference="deepmind/code_contests execution/tester_sandboxer.cc OutputsMatch"
    ),
    "evalplus": Comparator(evalplus_stdout, evalplus_value, reference="evalplus/eval/__init__.py unsafe_execute"),
}


def comparator(name: str) -> Comparator:
    """The comparator called `name` ("" is "default"); an unknown name is an error naming the known ones."""
    try:
        return COMPARATORS[name or "default"]
    except KeyError:
        raise ValueError(f"unknown comparator {name!r}; known: {', '.join(COMPARATORS)}") from None


def stdout_equal(name: str, got: str, want: str) -> tuple[bool, str]:
    """Whether a program's stdout `got` is right for the expected `want` under benchmark `name`'s rule, and a short
    reason when it is not."""
    return comparator(name).stdout(got, want)


def value_equal(name: str, got, want) -> bool:
    """Whether a call's result `got` is right for the expected value `want` (parsed from the task's JSON) under
    benchmark `name`'s rule."""
    return comparator(name).value(got, want)


def prepare_args(name: str, args: list) -> list:
    """A call's arguments (parsed from the task's JSON) as benchmark `name`'s harness passes them."""
    return comparator(name).args(args)
