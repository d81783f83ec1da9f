"""Each benchmark's comparator (codelib/sandbox/compare.py) against its reference harness's verdicts, written beside
each case; the default rule's exact integers; and the linear-time guarantees (no set of untrusted values)."""

from __future__ import annotations

import math
import time

import pytest

from codelib.sandbox import compare
from codelib.sandbox.compare import stdout_equal, value_equal

# (got, want, the reference harness's verdict): lcb_runner's grade_stdio
LCB_STDOUT = [
    ("8\n16\n", "8\n16", True),  # stripped
    ("  8  \n16\n\n", "8\n16\n", True),  # each line stripped, trailing blank lines dropped
    ("-0", "0", True),  # Decimal('-0') == Decimal('0')
    ("007", "7", True),
    ("1.0 2", "1 2", True),  # Decimal equality
    ("1  2", "1 2", True),  # the line's tokens as Decimals
    ("1e3", "1000", True),
    ("1\n2", "1 2", False),  # one number per line where one line is expected: line counts differ
    ("0.3333333333333333", "0.3333333333", False),  # extra float digits: Decimals differ
    ("0.33333", "0.333333333", False),
    ("Yes", "YES", False),  # not a number: exact text only
    ("nan", "nan", True),  # equal as text
    ("nan 1", "nan 2", False),
    ("8\n\n16", "8\n16", False),  # an inner blank line counts
    ("Yes \nNo", "Yes\nNo", True),  # each line stripped before the text comparison, not only as Decimals
    ("0.10000000000000000001", "0.1", False),  # Decimal, not float: exact digits
    ("snan", "1", False),  # comparing a signalling NaN raises there: a failure, not a crash here
]

# TACO's compare_std_results
TACO_STDOUT = [
    ("6\n", "6\n", True),
    ("  6 ", "6", True),
    ("12", "1\n2\n", True),  # characters of the output read as numbers against the expected lines
    ("2\n1\n", "1\n2\n", True),  # sets of single-character tokens: order is not checked
    ("ab", "a b", True),  # a token taken as its set of characters
    ("1 1 2", "2\n1", True),
    ("3", "4", False),
    ("10\n20\n", "20\n10\n", False),  # multi-character tokens: the character sets differ ({1,0} vs {2,0})
    ("1.0001", "1.0", False),  # only a one-character-per-token output is rounded
    ("10\n", "10", True),  # step 1 strips both texts (no later step matches a multi-digit token)
    ("1", "1.0001", True),  # step 4: the expected line rounded to 3 places
    ("12", "1.00005\n2", False),  # step 2 is numpy.isclose, rtol 1e-5: 5e-5 off is not close
    ("01", "1.000010000100001e-08\n1", True),  # step 2 at isclose's bound exactly: |a - b| <= atol + rtol*|b|
    ("1", "inf", False),  # numpy.isclose(1, inf) is False
    ("12", "1", False),  # step 2: as many characters as expected lines
    ("\u00b2", "2", False),  # a superscript digit is no decimal digit: float() of it fails there
    ("YES", "yes", False),
]

# DeepMind's code_contests OutputsMatch (its own unit tests first)
CODECONTESTS_STDOUT = [
    ("abc def", "abc def", True),
    ("abc deg", "abc def", False),
    ("abc def", "abc def 123", False),
    ("abc DEF", "abc def", True),
    ("abc 123", "abc 123.000001", True),
    ("abc 123", "abc 123.1", False),
    ("Yes", "YES", True),  # lowercased
    ("0.33333", "0.333333333", True),  # |diff| 3.3e-6 < 1e-5
    ("0.3333", "0.333333333", False),  # 3.3e-5
    ("1000000000000000000001", "1000000000000000000000", True),  # integers compare as doubles
    ("inf 1", "inf 1", True),  # equal token lists
    ("inf 1", "inf 2", False),  # inf - inf is nan: never within 1e-5
    ("1\n2", "1 2", True),  # whitespace of any kind splits
    ("1_0", "10", False),  # absl's parser takes no underscores: text comparison
    ("1\u00a02", "1 2", False),  # only ASCII whitespace splits
    ("1\v2\r", "1 2", True),  # absl::ByAnyChar(" \n\t\r\v"): vertical tab and carriage return split
    ("1\f2", "1 2", False),  # ... form feed does not: "1\f2" is one text token
    ("\u00c9", "\u00e9", False),  # only ASCII letters are lowercased
    ("0", "0.00001", False),  # strictly below 1e-5
    ("1000000", "1000000.5", False),  # an absolute tolerance, not a relative one
    ("nan(x) 1.000001", "nan(x) 1", False),  # nan(chars) is a double, a nan: never a match when lists differ
    ("inf 1.000001", "inf 1", False),
]

# the default rule (bundled datasets and synthetic tasks)
DEFAULT_STDOUT = [
    ("9999999968", "9999999968", True),
    ("9999999967.0", "9999999968", False),  # an expected integer compares as an integer: exactly
    ("9999999968.0", "9999999968", True),  # the same integer written as a float (CodeContests 262_D prints 20.0)
    ("1.0000000000", "1", True),
    ("7.000001", "7", False),  # no tolerance for an expected integer
    ("1e999999999999999999999", "1", False),  # beyond Decimal's range: not that integer
    ("007", "7", True),
    ("-0", "0", True),
    ("+7", "7", True),
    ("1" * 5000, "1" * 5000, True),
    ("1" * 4999 + "2", "1" * 5000, False),
    ("inf", "1" + "0" * 400, False),  # inf never matches a number
    ("0.3333334", "0.3333333", True),  # floats within 1e-6
    ("0.334", "0.333", False),
    ("1", "1.0", True),  # an expected float: any number within the tolerance
    ("nan", "0.5", False),
    ("inf", "inf", True),  # the same text
    ("Yes", "YES", False),
    ("1 2", "1\n2\n", True),  # tokens: spacing and line ends do not matter
    ("1 2 3", "1 2", False),
    ("0.500005", "0.5", False),  # 5e-6 off: beyond 1e-6
    ("1000000.5", "1000000.0", True),  # relative 5e-7
    ("0.0000005", "0.0", True),  # absolute 5e-7
    ("2e999", "1e999", False),  # both overflow to inf: never a match
    ("9999999968.0000001", "9999999968", False),  # an expected integer: exact value (float() would round)
]


@pytest.mark.parametrize(
    ("name", "got", "want", "verdict"),
    [("lcb", *c) for c in LCB_STDOUT]
    + [("taco", *c) for c in TACO_STDOUT]
    + [("codecontests", *c) for c in CODECONTESTS_STDOUT]
    + [("default", *c) for c in DEFAULT_STDOUT],
)
def test_stdout_verdicts_are_the_reference_harness(name, got, want, verdict):
    same, detail = stdout_equal(name, got, want)
    assert same is verdict
    assert (detail == "") is verdict


# (got, want as parsed from the task's JSON, verdict): lcb_runner's grade_call_based and TACO's execute_cb_code
LCB_VALUES = [
    ((0, 1), [0, 1], True),  # a tuple is taken as a list
    ([0, 1], [0, 1], True),
    ([[0, 1]], [[0, 1]], True),
    ([(0, 1)], [[0, 1]], False),  # only the outer tuple
    (3, 3, True),
    (True, 1, True),  # Python ==
    ([1, 0], [0, 1], False),
    ("3", 3, False),
]
TACO_VALUES = [
    (2, [2], True),  # results stored wrapped in a list
    (2, 2, True),
    ([(0, 0), (1, 1)], [[[0, 0], [1, 1]]], True),  # a list of tuples against the first element
    ((0, 1), [0, 1], True),
    ({1: 1, 2: 2}, {"1": 1, "2": 2}, True),  # int dict keys (JSON made them strings)
    ({1: 1}, [{"1": 1}], True),
    ({"a": 1}, {"a": 1}, True),  # keys that are not integers: the dict is left as is
    ({"a": 1}, {"a": 2}, False),
    ({"a": 1}, [{"a": 1}], True),
    (3, [2], False),
    ([], [], True),
    ([{1: 1}], {"1": 1}, True),  # an expected dict becomes [dict with int keys]
    (2, [1, 2], False),  # only the first element of the expected list
]


@pytest.mark.parametrize(
    ("name", "got", "want", "verdict"), [("lcb", *c) for c in LCB_VALUES] + [("taco", *c) for c in TACO_VALUES]
)
def test_value_verdicts_are_the_reference_harness(name, got, want, verdict):
    assert value_equal(name, got, want) is verdict


def test_taco_arguments_get_int_keys_as_taco_passes_them():
    assert compare.prepare_args("taco", [{"1": "a", "2": "b"}, 5]) == [{1: "a", 2: "b"}]  # TACO drops the rest
    assert compare.prepare_args("taco", [{"x": 1}, 5]) == [{"x": 1}, 5]
    assert compare.prepare_args("lcb", [{"1": 2}]) == [{"1": 2}]


def test_evalplus_value_rules():
    assert compare.evalplus_value(0.1 + 0.2, 0.3)  # floats: atol 1e-6
    assert not compare.evalplus_value(1, 1.0000001)  # an int for a float: types differ, no tolerance
    assert compare.evalplus_value([3, 1, 2], [1, 2, 3], entry_point="similar_elements", dataset="mbpp")  # set oracle
    assert not compare.evalplus_value([3, 1], [1, 2, 3], entry_point="similar_elements", dataset="mbpp")
    assert compare.evalplus_value(None, False, entry_point="check_str", dataset="mbpp")
    assert compare.evalplus_value(
        1.0, 0.0, atol=1e-6, entry_point="find_zero", args=[[-1.0, 1.0]], dataset="humaneval"
    )
    assert not compare.evalplus_value(
        2.0, 0.0, atol=1e-6, entry_point="find_zero", args=[[-1.0, 1.0]], dataset="humaneval"
    )


def test_evalplus_float_tolerance_is_numpys_allclose():
    """evalplus's unsafe_execute: atol 1e-6 only when the task gives 0 and the expected value is a float or a
    non-empty list/tuple of floats only; numpy.allclose(out, exp, rtol=1e-7, atol): |out - exp| <= atol + rtol*|exp|,
    equal infinities close."""
    assert not compare.evalplus_value(0.500005, 0.5)  # 5e-6 > atol 1e-6
    assert compare.evalplus_value(1000000.05, 1000000.0)  # 0.05 <= 1e-6 + 1e-7 * 1e6
    assert not compare.evalplus_value(1.00000005e-6, 0.0)  # rtol scales |exp| (0 here), not |out|
    assert compare.evalplus_value(1.00005, 1.0, atol=1e-4)  # the task's own atol is kept
    assert not compare.evalplus_value([1.0000001, 2], [1.0, 2])  # not all floats: exact only
    assert compare.evalplus_value([math.inf, 1.0000001], [math.inf, 1.0])  # equal infinities are close
    assert not compare.evalplus_value(1.0, math.inf)


def test_evalplus_mbpp_and_humaneval_special_oracles():
    """evalplus's special oracles (_special_oracle.py and unsafe_execute)."""
    mbpp = {"dataset": "mbpp"}
    assert compare.evalplus_value(False, True, entry_point="are_equivalent", **mbpp)  # Mbpp/164: anything passes
    assert compare.evalplus_value(0, 5, entry_point="sum_div", **mbpp)  # Mbpp/295: 0 passes too
    assert not compare.evalplus_value(1, 5, entry_point="sum_div", **mbpp)
    # Mbpp/581: round(9 + 2 * 3 * sqrt(2.25 + 16)) == 35, within atol (0): <=
    assert compare.evalplus_value(35, 34, entry_point="surface_Area", args=[3, 4], **mbpp)
    # Mbpp/558: zero-padded digits, 123 vs 004: 1 + 2 + 1
    assert compare.evalplus_value(4, 5, entry_point="digit_distance_nums", args=[123, 4], **mbpp)
    assert not compare.evalplus_value(3, 5, entry_point="digit_distance_nums", args=[123, 4], **mbpp)
    assert not compare.evalplus_value(False, True, entry_point="check_str", **mbpp)  # a bool result: out == exp
    # HumanEval/32: |poly(x)| <= the task's atol
    assert compare.evalplus_value(
        1.00005, 0.0, atol=1e-4, entry_point="find_zero", args=[[-1.0, 1.0]], dataset="humaneval"
    )


def test_unknown_comparator_is_named():
    with pytest.raises(ValueError, match="unknown comparator 'lcbb'; known: default, lcb, taco"):
        stdout_equal("lcbb", "1", "1")
    assert stdout_equal("", "7", "007") == (True, "")  # "" is the default


def test_untrusted_values_never_fill_a_set():
    """400k distinct integers that all hash alike: `set(out)` is quadratic (minutes); the set oracle and TACO's
    set fallbacks look untrusted values up in a set of the trusted ones only, so they stay linear."""
    modulus = 2**61 - 1  # hash(k * modulus) == 0 for every int k
    got = [k * modulus for k in range(1, 400_001)]
    start = time.perf_counter()
    assert not compare.set_equal(got, [1, 2, 3])
    assert not compare.set_equal(list(reversed(got)), got[:1000])  # each lookup walks a 1000-entry chain at most
    assert compare.set_equal(got[:2000] * 2, got[:2000])
    tokens = " ".join(str(k) for k in range(200_000))
    assert not compare.taco_stdout(tokens, "1\n2\n")[0]
    assert not compare.lcb_stdout(tokens, tokens + " 1")[0]
    assert time.perf_counter() - start < 10


def test_comparators_are_linear_in_long_outputs():
    big = "1" * 1_000_000
    start = time.perf_counter()
    for name in compare.COMPARATORS:
        assert stdout_equal(name, big, big)[0]
        stdout_equal(name, big + "2", big)
        stdout_equal(name, ("7 " * 200_000), ("7 " * 199_999) + "8")
    assert time.perf_counter() - start < 10


def test_the_sandbox_judges_stdio_by_the_tasks_comparator():
    """End to end: a stdio task without a comparator gets the default rule (exact integers), one naming a benchmark
    gets that benchmark's rule."""
    import json

    from codelib import sandbox
    from codelib.tasks import Task

    def task(output: str, name: str = "") -> Task:
        return Task("t/1", "p", json.dumps([{"input": "", "output": output}]), "", "", "stdio", compare=name)

    tasks = [task("9999999968"), task("9999999968"), task("YES", "codecontests"), task("YES")]
    programs = ["print(9999999967.0)", "print('09999999968')", "print('Yes')", "print('Yes')"]
    verdicts = sandbox.check(tasks, programs, workers=2, timeout_s=10)
    assert [v.passed for v in verdicts] == [False, True, True, False], [v.detail for v in verdicts]
