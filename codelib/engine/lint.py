"""Lint: a few pyflakes-like checks with `ast` (no dependency, microseconds per completion); `quality_reward`'s
findings."""

from __future__ import annotations

import ast
import builtins

from codelib.engine.extraction import parse

_BUILTINS = set(dir(builtins)) | {"__file__", "__name__", "__doc__", "__builtins__", "__spec__"}
_SHADOWED = {"list", "dict", "str", "int", "set", "tuple", "sum", "max", "min", "len", "id", "input", "type", "map"}


def lint(code: str, first_line: int = 1) -> list[str]:
    """Findings in lines >= first_line: syntax error, unused import, unused local variable, undefined name,
    bare `except:`, `== None`/`== True`-style comparisons, mutable default arguments, shadowed builtins, lines over
    119 characters."""
    try:
        tree = parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        return [f"syntax error: {e}"]
    found: list[tuple[int, str]] = []
    loaded = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    loaded |= {_root(n) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    bound = set(_BUILTINS)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            bound.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                name = (alias.asname or alias.name).split(".")[0]
                bound.add(name)
                if (
                    name not in loaded
                    and name != "*"
                    and not (isinstance(node, ast.ImportFrom) and node.module == "__future__")
                ):
                    found.append((node.lineno, f"unused import {name}"))
        elif isinstance(node, ast.ExceptHandler):
            if node.name:
                bound.add(node.name)
            if node.type is None:
                found.append((node.lineno, "bare except"))
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            bound.update(node.names)
        elif isinstance(node, ast.MatchAs | ast.MatchStar) and node.name:
            bound.add(node.name)
        elif isinstance(node, ast.Compare):
            for op, right in zip(node.ops, node.comparators, strict=True):
                if (
                    isinstance(op, (ast.Eq, ast.NotEq))
                    and isinstance(right, ast.Constant)
                    and right.value in (None, True, False)
                    and type(right.value) is not int
                ):
                    found.append(
                        (node.lineno, f"comparison to {right.value} with {'==' if isinstance(op, ast.Eq) else '!='}")
                    )
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in bound:
            found.append((node.lineno, f"undefined name {node.id}"))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for default in node.args.defaults + [d for d in node.args.kw_defaults if d is not None]:
                if isinstance(default, (ast.List, ast.Dict, ast.Set)):
                    found.append((default.lineno, "mutable default argument"))
            found += _unused_locals(node)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node.id in _SHADOWED:
            found.append((node.lineno, f"assignment shadows builtin {node.id}"))
    for i, line in enumerate(code.split("\n"), start=1):
        if len(line) > 119:
            found.append((i, "line too long"))
    return [f"line {n}: {msg}" for n, msg in sorted(set(found)) if n >= first_line]


def _root(node: ast.Attribute) -> str:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else ""


def _unused_locals(fn) -> list[tuple[int, str]]:
    """Plain names assigned in a function and never read anywhere in it (nested functions included)."""
    stored: dict[str, int] = {}
    read, declared = set(), set()
    for node in ast.walk(fn):
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            declared.update(node.names)
        elif isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Load):
                read.add(node.id)
            elif isinstance(node.ctx, ast.Store):
                stored.setdefault(node.id, node.lineno)
    return [
        (line, f"unused variable {name}")
        for name, line in stored.items()
        if name not in read and name not in declared and not name.startswith("_")
    ]
