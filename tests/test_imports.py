"""The package's import graph has no cycle, counting the imports inside functions (a cycle hidden in a function
still means two modules cannot be read, tested or moved apart). The graph is read with `ast`: nothing is imported."""

import ast
from pathlib import Path

from codelib.paths import REPO_ROOT

PACKAGE = REPO_ROOT / "codelib"


def modules() -> dict[str, Path]:
    """codelib's modules by dotted name (a package by its own name, for its __init__.py)."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(REPO_ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imports_of(name: str, path: Path, known: dict) -> set[str]:
    """The codelib modules `name` imports anywhere in its file (module level, functions, `if` blocks)."""

    def closest(dotted: str) -> str | None:
        while dotted and dotted not in known:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {closest(a.name) for a in node.names if a.name.split(".")[0] == "codelib"}
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # from . import x / from .x import y
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if module.split(".")[0] != "codelib":
                continue
            for a in node.names:  # `from codelib import passk` imports the module codelib.passk
                found.add(f"{module}.{a.name}" if f"{module}.{a.name}" in known else closest(module))
    return found - {None, name, "codelib"}  # every module imports the package's __init__ first: no edge


def import_graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports_of(name, path, known) for name, path in known.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each as one cycle through it."""
    index, low, stack, on_stack, comps = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [path_through(graph, comp) for comp in comps]


def path_through(graph: dict[str, set[str]], comp: list[str]) -> list[str]:
    """One cycle inside a strongly connected component, start -> ... -> start, for the failure message."""
    start, inside = comp[0], set(comp)
    paths, seen = [[start]], {start}
    while paths:  # breadth first: the shortest way back to start
        path = paths.pop(0)
        for w in sorted(graph[path[-1]] & inside):
            if w == start:
                return [*path, start]
            if w not in seen:
                seen.add(w)
                paths.append([*path, w])
    return comp


def test_the_walk_sees_function_local_and_relative_imports(tmp_path):
    known = {
        "codelib.a": tmp_path / "a.py",
        "codelib.b": tmp_path / "b.py",
        "codelib.sub": tmp_path / "__init__.py",
        "codelib.sub.c": tmp_path / "c.py",
    }
    (tmp_path / "a.py").write_text("def f():\n    from codelib import b\n    import codelib.sub.c\n")
    (tmp_path / "c.py").write_text("from . import d\nfrom .. import a\n")
    assert imports_of("codelib.a", known["codelib.a"], known) == {"codelib.b", "codelib.sub.c"}
    assert imports_of("codelib.sub.c", known["codelib.sub.c"], known) == {"codelib.sub", "codelib.a"}
    assert cycles({"x": {"y"}, "y": {"z"}, "z": {"x"}, "w": {"x"}}) == [["x", "y", "z", "x"]]


# A cycle being broken by its owner, with why; the test fails once it is gone, so the entry cannot outlive it.
KNOWN: dict[tuple, str] = {}


def test_codelib_has_no_import_cycle():
    graph = import_graph()
    assert "codelib.evaluator" in graph and "codelib.sandbox.pool" in graph  # the walk reached the subpackages
    found = {tuple(sorted(set(c))): c for c in cycles(graph)}
    new = [" -> ".join(c) for members, c in found.items() if members not in KNOWN]
    assert not new, "import cycles (function-local imports count):\n" + "\n".join(new)
    gone = [members for members in KNOWN if members not in found]
    assert not gone, f"no longer a cycle, remove it from KNOWN: {gone}"
