"""What became of a program: the five verdict classes of a sandbox Verdict, and their counts and shares.

One list for the whole project: rollouts log the share of each class per step (`verdicts/<class>`), the evaluator
counts them per checkpoint, the figures colour them in this order.
"""

from __future__ import annotations

VERDICT_CLASSES = ("passed", "wrong_answer", "runtime_error", "syntax_error", "timeout")
_SYNTAX = ("SyntaxError", "IndentationError", "TabError")


def verdict_class(verdict) -> str:
    """One of VERDICT_CLASSES for a sandbox Verdict or a row with `status` / `passed` / `detail` (eval samples).

    passed: the tests ran to their end. timeout: a wall- or CPU-time limit. syntax_error: the program does not
    compile. wrong_answer: an assert failed (or a stdio output differed). runtime_error: anything else (an exception
    in the candidate, a crash, an early exit, a limit on memory or output)."""
    get = verdict.get if isinstance(verdict, dict) else lambda k, d=None: getattr(verdict, k, d)
    status, detail = get("status", ""), str(get("detail", "") or "")
    if get("passed", False) or status == "passed":
        return "passed"
    if status == "timeout":
        return "timeout"
    if any(s in detail for s in _SYNTAX):
        return "syntax_error"
    assertion = detail.endswith("AssertionError") or ": AssertionError" in detail  # "...: AssertionError (got 3)"
    if status == "failed" and (assertion or "wrong answer" in detail or " asserts " in detail):
        return "wrong_answer"
    return "runtime_error"


def class_counts(verdicts) -> dict[str, int]:
    """{class: count} over VERDICT_CLASSES (every class present, zeros included); None entries are skipped."""
    counts = dict.fromkeys(VERDICT_CLASSES, 0)
    for v in verdicts:
        if v is not None:
            counts[v if isinstance(v, str) else verdict_class(v)] += 1
    return counts


def class_shares(verdicts, prefix: str = "verdicts/") -> dict[str, float]:
    """{prefix + class: share of the verdicts} (verdicts: Verdicts, rows, or class names); {} for none."""
    counts = class_counts(verdicts)
    n = sum(counts.values())
    return {f"{prefix}{k}": c / n for k, c in counts.items()} if n else {}
