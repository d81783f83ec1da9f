"""Tests with every assert counted (`compile_tests`, used by the judge and by the harness for tasks judged inside),
and the short texts a verdict quotes (`describe`, `sanitize`). Standard library only.
"""

from __future__ import annotations


def compile_tests(head: str, tests: str, filename: str = "<program>", got: bool = False) -> tuple[list, int]:
    """Code objects for `head` (run as is) and `tests`, and the number of counted asserts in `tests`.

    Each top-level statement of `tests` holding an assert, and each such statement at the top of a `check`
    function, is wrapped so that a failing one is counted (`__codelib_fail__`) and the next still runs. `head` and
    `tests` compile separately, so a solution cannot swallow the tests (an unclosed string is a syntax error).
    got=True (the judge): in `assert <call> == <expected>` the call's value passes through `__codelib_got__`, so a
    failing assert can say what the function returned (the feedback of multi-turn repair, `codelib.engine.repair`).
    """
    # here, not at the top: only the judge and an inside run need it, and every fork pays for the worker's size
    import ast

    codes = [compile(head, filename, "exec")] if head else []
    tree = ast.parse(tests, filename)
    lines = tests.split("\n")
    total = 0

    def has_assert(stmt) -> bool:  # on the text: cheaper than walking the tree, and a false hit is harmless
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return False
        if isinstance(stmt, ast.Assert) and tautology(stmt.test):
            return False  # `assert True, "..."` (HumanEval/83's debugging lines) tests nothing: not counted
        return any("assert" in line for line in lines[stmt.lineno - 1 : stmt.end_lineno])

    def tautology(test) -> bool:  # an assert of constants only: true (or false) whatever the program does
        return not any(
            isinstance(n, (ast.Name, ast.Call, ast.Attribute, ast.Subscript, ast.NamedExpr, ast.Lambda, ast.Await))
            for n in ast.walk(test)
        )

    def at(node, stmt):
        node.lineno, node.col_offset = stmt.lineno, stmt.col_offset
        node.end_lineno, node.end_col_offset = stmt.end_lineno, stmt.end_col_offset
        return node

    def call(stmt, name, *args):
        return at(ast.Expr(at(ast.Call(at(ast.Name(name, ast.Load()), stmt), list(args), []), stmt)), stmt)

    def record(stmt):
        test = stmt.test if isinstance(stmt, ast.Assert) else None
        if got and isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq):
            if isinstance(test.left, ast.Call):
                test.left = at(ast.Call(at(ast.Name("__codelib_got__", ast.Load()), stmt), [test.left], []), stmt)
        return stmt

    def guard(stmt):
        nonlocal total
        total += 1
        stmt = record(stmt)
        where = at(ast.Constant(f"line {stmt.lineno}: " + lines[stmt.lineno - 1].strip()[:120]), stmt)
        handler = at(
            ast.ExceptHandler(
                type=at(ast.Name("__codelib_E__", ast.Load()), stmt),
                name="__codelib_e__",
                body=[call(stmt, "__codelib_fail__", at(ast.Name("__codelib_e__", ast.Load()), stmt), where)],
            ),
            stmt,
        )
        return at(ast.Try(body=[stmt], handlers=[handler], orelse=[call(stmt, "__codelib_ok__")], finalbody=[]), stmt)

    for i, node in enumerate(tree.body):
        if isinstance(node, ast.FunctionDef) and node.name == "check":
            node.body = [guard(s) if has_assert(s) else s for s in node.body]
        elif has_assert(node):
            tree.body[i] = guard(node)
    codes.append(compile(tree, filename, "exec"))
    return codes, total


def describe(e: BaseException, filename: str = "<program>") -> str:
    """'Type: message (line n)' for an exception raised in `filename`."""
    line = getattr(e, "lineno", None) if isinstance(e, SyntaxError) else None
    tb = e.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            line = tb.tb_lineno
        tb = tb.tb_next
    try:
        message = e.msg if isinstance(e, SyntaxError) else str(e)
        text = f"{type(e).__name__}: {message}" if message else type(e).__name__
    except BaseException:
        text = type(e).__name__
    if isinstance(e, MemoryError):
        text += " (memory limit)"
    return (text[:250] + (f" (line {line})" if line else "")).strip()


def sanitize(text, limit: int = 300) -> str:
    """Text the program chose (an exception message): printable, bounded."""
    if type(text) is not str:
        return ""
    return "".join(c if c.isprintable() else " " for c in text[:limit])
