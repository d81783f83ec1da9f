"""The package's import graph has no cycle, counting the imports inside functions (a cycle hidden in a function
still means two modules cannot be read, tested or moved apart), and its imports point one way along the data flow
(the boxes in `BOXES`); every module path from before the boxes still imports. The graph is read with `ast`."""

import ast
from pathlib import Path

from codelib.plumbing.paths import REPO_ROOT

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
            for a in node.names:  # `from codelib import passk` imports the module codelib.evaluation.passk
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
    assert (
        "codelib.evaluation.evaluator" in graph and "codelib.sandbox.pool" in graph
    )  # the walk reached the subpackages
    found = {tuple(sorted(set(c))): c for c in cycles(graph)}
    new = [" -> ".join(c) for members, c in found.items() if members not in KNOWN]
    assert not new, "import cycles (function-local imports count):\n" + "\n".join(new)
    gone = [members for members in KNOWN if members not in found]
    assert not gone, f"no longer a cycle, remove it from KNOWN: {gone}"


# ---------------------------------------------------------------------------------------------------------------
# the folders follow the data flow: a module imports its own box and the boxes before it, never a later one

BOXES = [  # in the order of the flow; a box's modules may import every box above it
    ("codelib.plumbing",),  # paths, params, stages, jsonl, progress: read by every box
    ("codelib.tasks",),
    ("codelib.policy",),
    ("codelib.sandbox",),
    ("codelib.engine", "codelib.algorithms"),  # rewards, rollouts, the algorithms' registries
    ("codelib.evaluation",),
    ("codelib.trainers",),  # a trainer evaluates held-out pass@1 while it trains (evaluation comes first)
    ("codelib.reports",),
    ("codelib.runner",),  # the pipeline and studies run everything
]
# an import against the flow, with why; the test fails once one is gone, so an entry cannot outlive its import
AGAINST_THE_FLOW = {
    ("codelib.evaluation.evaluator", "codelib.reports"): "the eval stage ends by writing the results table, whose one "
    "writer is reports.write_results",
    ("codelib.evaluation.repair_eval", "codelib.reports.repair"): "repair's evaluation ends by writing its report",
    ("codelib.trainers.repair", "codelib.reports.repair"): "write_report stays importable from the repair trainer, "
    "its home before the repair modules were split",
}


def box_of(module: str) -> int | None:
    """The index of a module's box in BOXES (None: the package's own __init__)."""
    for i, prefixes in enumerate(BOXES):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return i
    return None


def test_every_module_is_in_a_box():
    loose = sorted(m for m in import_graph() if m != "codelib" and box_of(m) is None)
    assert not loose, f"modules in no box of the flow (tests/test_imports.py BOXES): {loose}"


def test_imports_point_one_way_along_the_flow():
    graph = import_graph()
    against = {(a, b) for a, deps in graph.items() for b in deps if (box_of(b) or 0) > (box_of(a) or 0)}
    new = sorted(against - set(AGAINST_THE_FLOW))
    assert not new, "imports against the flow (a box imports a later one):\n" + "\n".join(
        f"{a} -> {b}" for a, b in new
    )
    gone = sorted(set(AGAINST_THE_FLOW) - against)
    assert not gone, f"no longer imported, remove from AGAINST_THE_FLOW: {gone}"


def test_old_module_paths_import_the_moved_modules():
    """Every path a module had before the package was grouped into boxes imports that very module."""
    import importlib

    import codelib

    for old, new in codelib.MOVED.items():
        assert importlib.import_module(old) is importlib.import_module(new), old
    from codelib.evaluator import EvalConfig, compare, evaluate_checkpoint, pass_at_k  # noqa: F401  (DESIGN.md)
    from codelib.params import load_config  # noqa: F401

    from codelib.sandbox import Sandbox, Verdict, check, configure, run  # noqa: F401
    from codelib.tasks import Task, load_tasks  # noqa: F401

    assert importlib.import_module("codelib.evaluation.evaluator").__spec__.name == "codelib.evaluation.evaluator"


def test_an_old_module_path_runs_as_a_command():
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "codelib.params", "--help"], capture_output=True, text=True, cwd=REPO_ROOT
    )
    assert out.returncode == 0 and "python -m codelib.params" in out.stdout, out.stderr


def test_an_old_module_path_run_as_a_command_has_its_new_file():
    """`python -m codelib.study` runs codelib/runner/study.py's code, whose `__file__` locates the sandbox package
    (its run keys hash that source): under the old path the code must see the new module's file, not None."""
    import subprocess
    import sys

    code = (  # a fresh interpreter: runpy finds the old path's spec through codelib's finder, as `python -m` does
        "import importlib.util, json, runpy, codelib\n"
        "out = {old: [importlib.util.find_spec(old).origin, importlib.util.find_spec(new).origin]\n"
        "       for old, new in codelib.MOVED.items()}\n"
        "g = runpy.run_module('codelib.study', run_name='x', alter_sys=True)\n"
        "out['study'] = [g['__file__'], importlib.util.find_spec('codelib.runner.study').origin]\n"
        "out['sources'] = sorted(g['stage_sources']('04_grpo'))\n"
        "print(json.dumps(out))\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT)
    assert run.returncode == 0, run.stderr[-2000:]
    got = __import__("json").loads(run.stdout.splitlines()[-1])
    assert "codelib.sandbox.judge" in got.pop("sources")
    assert len(got) >= 40 and all(file == path for file, path in got.values()), got


def test_codelib_imports_its_modules_by_their_new_paths():
    """An old path (codelib.MOVED) would hide its import from the walk above: codelib's own code uses the new ones."""
    moved = ast.literal_eval(
        next(
            n.value
            for n in ast.parse((PACKAGE / "__init__.py").read_text()).body
            if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "MOVED"
        )
    )
    old = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                found = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            else:
                continue
            old += [f"{name}:{node.lineno} imports {m}" for m in found if m in moved]
    assert not old, "old module paths inside codelib (use the new ones):\n" + "\n".join(old)
