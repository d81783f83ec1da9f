"""Each benchmark's output rules, as its own harness judges: the sandbox's default, LiveCodeBench, TACO, CodeContests
and EvalPlus; stdout rules `(got, want) -> (same, detail)` and value rules `(got, want) -> same`. `compare` names
them (the registry, with the references and the table). Pure functions, linear in their inputs: untrusted values
are never put into a set or dict, only looked up in sets built from the trusted side.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal

DETAIL_CHARS = 40  # how much of a token or line a mismatch detail quotes


def _quote(s: str) -> str:
    return repr(s[:DETAIL_CHARS])


# ---------------------------------------------------------------------------------------------------------------
# default: exact integers, tolerant floats, text as text

_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")  # no inf/nan, no underscores
DEFAULT_TOLERANCE = 1e-6


def _int_text(token: str) -> str:
    """An integer token's canonical text: no '+', no leading zeros, '-0' is '0' (compares ints without int())."""
    sign = token[0] == "-"
    digits = token.lstrip("+-").lstrip("0") or "0"
    return "-" + digits if sign and digits != "0" else digits


def _exact(token: str) -> Decimal | None:
    try:
        return Decimal(token)
    except ArithmeticError:  # an exponent beyond Decimal's range
        return None


def _default_token(got: str, want: str) -> bool:
    if got == want:
        return True
    if _INT.fullmatch(want):  # an expected integer: only a number of exactly that value ('20.0' is 20, no tolerance)
        if _INT.fullmatch(got):
            return _int_text(got) == _int_text(want)
        return _FLOAT.fullmatch(got) is not None and _exact(got) == _exact(want)
    if _FLOAT.fullmatch(want) and _FLOAT.fullmatch(got):
        a, b = float(got), float(want)
        if math.isfinite(a) and math.isfinite(b):
            return math.isclose(a, b, rel_tol=DEFAULT_TOLERANCE, abs_tol=DEFAULT_TOLERANCE)
    return False


def default_stdout(got: str, want: str) -> tuple[bool, str]:
    """The sandbox's default stdout rule: tokens (so spacing and line ends do not matter) compared one by one; an
    expected integer token must be a number of exactly that value ('007', '+7' and '7.0' are 7; '7.000001' and
    '9999999967.0' for 9999999968 are not), an expected float token any number within 1e-6 absolute or relative,
    any other token the same text; inf and nan never match a number."""
    g, w = got.split(), want.split()
    for k, (a, b) in enumerate(zip(g, w, strict=False)):
        if not _default_token(a, b):
            return False, f"token {k + 1}: expected {_quote(b)}, got {_quote(a)}"
    if len(g) != len(w):
        return False, f"expected {len(w)} tokens, got {len(g)}"
    return True, ""


def plain_value(got, want) -> bool:
    """`==`, nothing else (a crash in the comparison is a mismatch)."""
    try:
        return bool(got == want)
    except Exception:
        return False


# ---------------------------------------------------------------------------------------------------------------
# LiveCodeBench: lcb_runner/evaluation/testing_util.py


def _lcb_lines(text: str) -> list[str]:
    return [line.strip() for line in text.strip().split("\n")]


def _decimals(line: str) -> list[Decimal] | None:
    try:
        return [Decimal(token) for token in line.split()]
    except Exception:
        return None


def lcb_stdout(got: str, want: str) -> tuple[bool, str]:
    """lcb_runner's `grade_stdio`: both texts stripped and split into lines (each stripped); the line counts must
    be equal; each line equal as text, or else both lines parse as whitespace-separated `Decimal`s and the lists are
    equal (so '-0' is '0', '007' is '7', '1.0' is '1'; '0.33333' is not '0.333333333'; a word must match exactly)."""
    g, w = _lcb_lines(got), _lcb_lines(want)
    if len(g) != len(w):
        return False, f"expected {len(w)} lines, got {len(g)}"
    for k, (a, b) in enumerate(zip(g, w, strict=True)):
        if a == b:
            continue
        da, db = _decimals(a), _decimals(b)
        try:
            same = da is not None and db is not None and da == db
        except Exception:  # a signalling NaN: lcb_runner's comparison raises, a runtime error there
            same = False
        if not same:
            return False, f"line {k + 1}: expected {_quote(b)}, got {_quote(a)}"
    return True, ""


def lcb_value(got, want) -> bool:
    """lcb_runner's `grade_call_based`: a returned tuple becomes a list, then `prediction == expected`."""
    if isinstance(got, tuple):
        got = list(got)
    return plain_value(got, want)


# ---------------------------------------------------------------------------------------------------------------
# TACO: metrics/testing_util.py (modified from APPS's)


def _np_close(a: float, b: float, rtol: float = 1e-5, atol: float = 1e-8) -> bool:
    """numpy.isclose with its defaults (equal infinities are close; nan never is)."""
    if a == b:
        return True
    if not (math.isfinite(a) and math.isfinite(b)):
        return False
    return abs(a - b) <= atol + rtol * abs(b)


def _covers(keys, index: dict) -> bool:
    """Whether {keys} == set(index) for the trusted dict `index` (element -> slot), looking up untrusted keys only."""
    hit = bytearray(len(index))
    for key in keys:
        slot = index.get(key)
        if slot is None:
            return False
        hit[slot] = 1
    return all(hit)


def taco_stdout(got: str, want: str) -> tuple[bool, str]:
    """TACO's `compare_std_results` on a program's stdout and the expected text, every fallback it tries:

    1. both stripped, equal;
    2. the stdout's characters, each read as a number, `allclose` to the expected lines read as numbers (a quirk of
       iterating over a string: '12' matches '1\\n2');
    3. the set of the stdout's tokens, each taken as its set of characters, equals the set of the expected lines,
       each taken as its set of tokens (so single-character answers may come in any order or grouping);
    4. the same with every character and token read as a number rounded to 3 places.
    Everything else is a wrong answer (its list comparisons of a text with a list never hold, so they are left out).
    """
    if got.strip() == want.strip():
        return True, ""
    lines = [x.strip() for x in want.split("\n") if x]
    if got and got.isdecimal():  # float() of each character succeeds only for decimal digits
        try:
            expected = [float(e) for e in lines]
        except ValueError:
            expected = None
        if expected is not None and len(expected) == len(got):
            if all(_np_close(float(c), e) for c, e in zip(got, expected, strict=True)):
                return True, ""
    line_sets = [set(line.split()) for line in lines]
    tokens = got.split()
    index = {s: i for i, s in enumerate({frozenset(s) for s in line_sets})}
    if _covers((frozenset(t) for t in tokens), index):
        return True, ""
    try:
        rounded = {frozenset(round(float(t), 3) for t in s) for s in line_sets}
    except ValueError:
        rounded = None
    if rounded is not None and all(t.isdecimal() for t in tokens):
        index = {s: i for i, s in enumerate(rounded)}
        if _covers((frozenset(float(c) for c in t) for t in tokens), index):
            return True, ""
    return False, f"output differs from the expected {_quote(want.strip())}: got {_quote(got.strip())}"


def _int_keyed(d: dict) -> dict | None:
    try:
        return {int(k): v for k, v in d.items()}
    except (TypeError, ValueError):
        return None


def taco_args(args: list) -> list:
    """TACO's `process_input_output` on a call's arguments: JSON made int dict keys strings, so a first argument
    that is a dict with integer-like keys gets int keys back (and, as TACO does, becomes the only argument)."""
    if isinstance(args, list) and args and isinstance(args[0], dict):
        keyed = _int_keyed(args[0])
        if keyed is not None:
            return [keyed]
    return args


def taco_expected(want):
    """TACO's `process_input_output` on an expected result: a dict (or a list whose first element is a dict) with
    integer-like keys becomes a one-element list holding that dict with int keys."""
    if isinstance(want, dict):
        keyed = _int_keyed(want)
        if keyed is not None:
            want = [keyed]
    if isinstance(want, list) and want and isinstance(want[0], dict):
        keyed = _int_keyed(want[0])
        if keyed is not None:
            want = [keyed]
    return want


def taco_value(got, want) -> bool:
    """TACO's `execute_cb_code`: the expected result normalised (`taco_expected`); a returned tuple becomes a list;
    equal to the expected value, or to its first element when it is a non-empty list; or, when the result is a
    sequence of tuples, those tuples as lists equal to the first element."""
    want = taco_expected(want)
    if isinstance(got, tuple):
        got = list(got)
    if plain_value(got, want):
        return True
    if isinstance(want, list) and want and plain_value(got, want[0]):
        return True
    if isinstance(got, list) and got and isinstance(got[0], tuple) and isinstance(want, list) and want:
        # TACO turns every element into a list (list() of a non-iterable raises there: a mismatch)
        try:
            as_lists = [list(x) for x in got]
        except TypeError:
            return False
        return plain_value(as_lists, want[0])
    return False


# ---------------------------------------------------------------------------------------------------------------
# CodeContests: DeepMind's execution/tester_sandboxer.cc (OutputsMatch, ValuesMatch)

_CC_SPLIT = re.compile(r"[ \n\t\r\v]+")  # absl::ByAnyChar(" \n\t\r\v") in SplitAndLowercase: form feed not among them
_CC_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
# absl::SimpleAtod: an optional '+' or '-', then what std::from_chars reads in general format (decimal with an
# optional exponent, inf, infinity, nan, nan(chars)); the tokens are lowercased already
_CC_DOUBLE = re.compile(r"[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:e[+-]?[0-9]+)?|inf|infinity|nan(?:\([a-z0-9_]*\))?)")
CODECONTESTS_TOLERANCE = 1e-5


def _cc_tokens(text: str) -> list[str]:
    return [t for t in _CC_SPLIT.split(text.translate(_CC_LOWER)) if t]


def _cc_double(token: str) -> float | None:
    if not _CC_DOUBLE.fullmatch(token):
        return None
    return math.nan if token.lstrip("+-").startswith("nan") else float(token)


def codecontests_stdout(got: str, want: str) -> tuple[bool, str]:
    """DeepMind's checker: both texts split on space, newline, tab, carriage return and vertical tab (not form feed)
    and lowercased (ASCII letters only); equal token lists match; otherwise the counts must agree and each pair of
    tokens match: as text when either is not a number, else as doubles with |a - b| < 1e-5 (integers too: the
    checker's integer branch is never reached, so integers beyond 2^53 compare as doubles; inf and nan never match
    when the lists differ elsewhere)."""
    g, w = _cc_tokens(got), _cc_tokens(want)
    if g == w:
        return True, ""
    if len(g) != len(w):
        return False, f"expected {len(w)} tokens, got {len(g)}"
    for k, (a, b) in enumerate(zip(g, w, strict=True)):
        da, db = _cc_double(a), _cc_double(b)
        same = a == b if da is None or db is None else abs(da - db) < CODECONTESTS_TOLERANCE
        if not same:
            return False, f"token {k + 1}: expected {_quote(b)}, got {_quote(a)}"
    return True, ""


# ---------------------------------------------------------------------------------------------------------------
# EvalPlus: evalplus/eval/__init__.py (unsafe_execute) and _special_oracle.py

EVALPLUS_FLOAT_ATOL = 1e-6  # EvalPlus's atol for float results when the task gives none
EVALPLUS_RTOL = 1e-7
MBPP_SET_EQ = frozenset(
    (
        "similar_elements",
        "find_char_long",
        "common_in_nested_lists",
        "extract_singly",
        "larg_nnum",
        "intersection_array",
        "find_dissimilar",
        "Diff",
    )
)
MBPP_NOT_NONE = frozenset(("check_str", "text_match_three", "text_starta_endb"))


def _is_floats(x) -> bool:
    if isinstance(x, float):
        return True
    return isinstance(x, (list, tuple)) and bool(x) and all(isinstance(i, float) for i in x)


def _allclose(out, exp, atol: float, rtol: float = EVALPLUS_RTOL) -> bool:
    """numpy.allclose(out, exp, rtol, atol) for numbers and equally shaped (nested) lists/tuples of numbers."""
    if isinstance(exp, (list, tuple)):
        return (
            isinstance(out, (list, tuple))
            and len(out) == len(exp)
            and all(_allclose(o, e, atol, rtol) for o, e in zip(out, exp, strict=True))
        )
    if isinstance(out, (int, float)) and isinstance(exp, (int, float)):
        a, b = float(out), float(exp)
        if a == b:
            return True
        if not (math.isfinite(a) and math.isfinite(b)):
            return False
        return abs(a - b) <= atol + rtol * abs(b)
    return False


def set_equal(got, want) -> bool:
    """`set(got) == set(want)` without building a set of the untrusted `got` (linear: lookups in want's set only)."""
    try:
        index = {x: i for i, x in enumerate(set(want))}
        return _covers(iter(got), index)
    except TypeError:  # unhashable elements, or got not iterable: EvalPlus's set() raises, a failure there
        return False


def _poly(xs, x):
    return sum(c * math.pow(x, i) for i, c in enumerate(xs))


def _surface_area(base_edge, height):
    slant = math.sqrt((base_edge / 2) ** 2 + height**2)
    return round(base_edge**2 + 4 * (base_edge * slant) / 2)


def _digit_distance(a, b):
    a, b = str(a), str(b)
    n = max(len(a), len(b))
    return sum(abs(int(x) - int(y)) for x, y in zip(a.zfill(n), b.zfill(n), strict=True))


def evalplus_value(got, want, atol: float = 0.0, entry_point: str = "", args=None, dataset: str = "") -> bool:
    """EvalPlus's verdict on one input: exact match, the special oracles of its dataset ("humaneval" or "mbpp",
    picked by `entry_point`; `args` are the call's arguments, which three oracles need), else for float results
    `allclose` with `atol` (1e-6 when the task gives 0) and rtol 1e-7, same type and length required."""
    try:
        exact = got == want
        if dataset == "mbpp":
            if entry_point == "are_equivalent":
                exact = True
            elif entry_point == "sum_div":
                exact = exact or got == 0
            elif entry_point == "surface_Area":
                exact = exact or abs(got - _surface_area(*args)) <= atol
            elif entry_point == "digit_distance_nums":
                exact = exact or got == _digit_distance(*args)
            elif entry_point in MBPP_SET_EQ:
                exact = set_equal(got, want)
            elif entry_point in MBPP_NOT_NONE:
                exact = got == want if isinstance(got, bool) else want == (got is not None)
        if dataset == "humaneval" and entry_point == "find_zero":
            return abs(_poly(*args, got)) <= atol
        if atol == 0 and _is_floats(want):
            atol = EVALPLUS_FLOAT_ATOL
        if not exact and atol != 0:
            if type(got) is not type(want):
                return False
            return _allclose(got, want, atol)
        return bool(exact)
    except Exception:  # anything EvalPlus's comparison would raise on is a failed input there
        return False


def evalplus_stdout(got: str, want: str) -> tuple[bool, str]:
    return default_stdout(got, want)  # EvalPlus has no stdin/stdout tasks
