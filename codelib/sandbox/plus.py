"""Comparing outputs in the parent: EvalPlus's rules for plus inputs, and stdio outputs token by token."""

from __future__ import annotations

import json
import math

from .comparators import MBPP_SET_EQ as _MBPP_SET_EQ  # EvalPlus's rules, written once
from .comparators import _allclose, _digit_distance, _is_floats, _poly, _surface_area
from .wire import Digest, Raised, WireError, decode_args, safe_set  # noqa: F401 - Digest: compared by __eq__ below

# EvalPlus's special oracles: tasks whose reference output is one of several right answers (_MBPP_SET_EQ, and:)
_MBPP_NOT_NONE = {"check_str", "text_match_three", "text_starta_endb"}


def _set_equal(out, exp) -> bool:
    """set(out) == set(exp) in linear time (an output of many values sharing a hash is unequal, not a hang)."""
    try:
        return safe_set(out) == safe_set(exp)
    except (WireError, TypeError):
        return False


def _same_plus_output(job, args, out, exp, atol: float) -> bool:
    """EvalPlus's comparison: exact match, special oracles, then allclose with atol (1e-6 for floats)."""
    mbpp, entry = job.task_id.lower().startswith("mbpp"), job.entry_point
    exact = out == exp
    if mbpp and entry == "are_equivalent":
        exact = True
    elif mbpp and entry == "sum_div":
        exact = exact or out == 0
    elif mbpp and entry == "surface_Area":
        exact = exact or abs(out - _surface_area(*args)) <= atol
    elif mbpp and entry == "digit_distance_nums":
        exact = exact or out == _digit_distance(*args)
    elif mbpp and entry in _MBPP_SET_EQ:
        exact = _set_equal(out, exp)
    elif mbpp and entry in _MBPP_NOT_NONE:
        exact = out == (exp is not None) if isinstance(out, bool) else (out is not None) == (exp is not None)
    if not mbpp and entry == "find_zero":
        return abs(_poly(*args, out)) <= atol
    if atol == 0 and _is_floats(exp):
        atol = 1e-6
    if not exact and atol != 0:
        if type(out) is not type(exp):
            return False
        return _allclose(out, exp, atol)
    return bool(exact)


def compare(job, expected: list, outputs: list) -> tuple[int, int, int | None]:
    """(inputs matched, inputs judged, index of the first mismatch). Inputs the reference failed on are skipped."""
    args_list = None
    if job.entry_point in ("find_zero", "surface_Area", "digit_distance_nums"):
        args_list = decode_args(json.loads(job.plus_inputs))
    good = total = 0
    first_bad = None
    for i, exp in enumerate(expected):
        if isinstance(exp, Raised):
            continue
        total += 1
        out = outputs[i] if i < len(outputs) else Raised("missing")
        try:
            ok = not isinstance(out, Raised) and _same_plus_output(
                job, args_list[i] if args_list else None, out, exp, job.atol
            )
        except Exception:
            ok = False
        good += ok
        if not ok and first_bad is None:
            first_bad = i
    return good, total, first_bad


def same_stdout(out: str, expected: str) -> tuple[bool, str]:
    """Token-wise comparison (so trailing whitespace and line ends do not matter); numbers with a '.' or exponent
    may differ by 1e-6 (absolute or relative); integers and words must match exactly."""
    got, want = out.split(), expected.split()
    for k, (g, w) in enumerate(zip(got, want, strict=False)):
        if g == w:
            continue
        if not (_is_int(g) and _is_int(w)):
            try:
                a, b = float(g), float(w)
                if math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-6):
                    continue
            except ValueError:
                pass
        return False, f"token {k + 1}: expected {w[:40]!r}, got {g[:40]!r}"
    if len(got) != len(want):
        return False, f"expected {len(want)} tokens, got {len(got)}"
    return True, ""


def _is_int(s: str) -> bool:
    return s.lstrip("+-").isdigit()


_SPECIAL_ORACLES = (
    _MBPP_SET_EQ | _MBPP_NOT_NONE | {"are_equivalent", "sum_div", "surface_Area", "digit_distance_nums", "find_zero"}
)


def digest_ok(job) -> bool:
    """Whether large outputs may be compared by digest: exact comparison (EvalPlus's special oracles and float
    tolerances need the values)."""
    return job.atol == 0 and job.entry_point not in _SPECIAL_ORACLES
