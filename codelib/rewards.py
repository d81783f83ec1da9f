"""Rewards: TRL-signature reward functions, judged by the sandbox.

Every reward is `fn(completions, **columns) -> list[float | None]`, the contract of TRL's `GRPOTrainer`, so
the same functions serve TRL and our own REINFORCE/PPO loops. `columns` are the Task fields as lists, one entry
per completion (`task_id, prompt, tests, entry_point, canonical_solution, kind, plus_inputs, atol`); TRL passes
the prompt column as `prompts` and adds `completion_ids`, `trainer_state`, which are used or ignored. A
completion is a string or TRL's conversational form (`[{"role": "assistant", "content": ...}]`). `None` means
"not applicable" (a row without tests).

All sandbox rewards of a batch go through one `Sandbox.map` of the shared pool (`codelib.sandbox.shared_pool`),
and verdicts are cached, so `pass_reward` and `test_fraction_reward` on the same batch run each program once.
Size the pool and its limits with `configure_sandbox(workers=..., timeout_s=..., memory_mb=...)`.

`REWARDS` maps the names a params YAML uses to factories: `REWARDS["length"](alpha=0.01)`,
`REWARDS["weighted"](compile=0.2, test_fraction=1.0, quality=0.1)`.
"""

from __future__ import annotations

import ast
import builtins
import collections
import re
import textwrap

from codelib import sandbox
from codelib.tasks import Task

configure_sandbox = sandbox.configure

_FENCE = re.compile(r"^[ \t]*```[ \t]*([\w+#.-]*)[^\n]*\n(.*?)(?:^[ \t]*```[^\n]*$|\Z)", re.S | re.M)
_CODE_LANGS = {"", "python", "py", "python3", "py3"}
_TOKEN = re.compile(r"\w+|[^\w\s]")
_KEEP = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom, ast.Assign, ast.AnnAssign)


# ---------------------------------------------------------------------------------------------------------------
# completion extraction (shared with the evaluator and the candidates)


def message_text(completion) -> str:
    """The text of a completion: a string, or the last assistant message of TRL's conversational form."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return str(completion.get("content", ""))
    if isinstance(completion, (list, tuple)):
        messages = [m for m in completion if isinstance(m, dict)]
        answers = [m for m in messages if m.get("role") == "assistant"] or messages
        return str(answers[-1].get("content", "")) if answers else ""
    return str(completion)


def extract_completion(text, task_or_prompt="") -> str:
    """The code to append to the task's prompt: from a fenced block if there is one, else the raw text.

    Function tasks: a body continuing the prompt is re-indented to the prompt's body indentation; a completion that
    repeats the prompt or the whole `def` is cut back so that `prompt + extracted` still compiles (a full `def`
    after the prompt redefines the function, keeping the prompt's imports and helpers); statements that would run
    at import time (`print(...)`, `if __name__ == "__main__":`, the model's own asserts) are dropped.
    Stdio tasks: the program, unchanged.

    >>> extract_completion("Sure:\\n```python\\ndef add(a, b):\\n    return a + b\\n```", "def add(a, b):\\n")
    '    return a + b\\n'
    """
    text = message_text(text)
    if isinstance(task_or_prompt, str):
        prompt, kind, entry = task_or_prompt, "function", _last_def(task_or_prompt)
    else:
        prompt, kind = task_or_prompt.prompt, task_or_prompt.kind
        entry = task_or_prompt.entry_point or _last_def(prompt)
    code = _fenced_code(text, entry)
    if code is None:
        code = text
    if kind == "stdio":
        return code.strip("\n") + "\n"
    return _fit_function(code, prompt, entry)


def _fenced_code(text: str, entry: str) -> str | None:
    blocks = [(lang.lower(), body) for lang, body in _FENCE.findall(text)]
    code = [b for lang, b in blocks if lang in _CODE_LANGS] or [b for _, b in blocks]
    if not code:
        return None
    with_entry = [b for b in code if entry and re.search(rf"\bdef\s+{re.escape(entry)}\s*\(", b)]
    return (with_entry or code)[0]


def _last_def(prompt: str) -> str:
    names = re.findall(r"^\s*(?:async\s+)?def\s+(\w+)\s*\(", prompt, flags=re.M)
    return names[-1] if names else ""


def _compiles(source: str) -> bool:
    try:
        compile(source, "<completion>", "exec", dont_inherit=True)
        return True
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return False


def _fit_function(code: str, prompt: str, entry: str) -> str:
    stripped = prompt.strip()
    if stripped and stripped in code and not code[: code.find(stripped)].strip():
        code = code[code.find(stripped) + len(stripped) :]  # the model repeated the prompt: keep what follows
        if code.lstrip(" \t").startswith("\n"):
            code = code.lstrip(" \t")[1:]
    sep = "" if not prompt or prompt.endswith("\n") else "\n"
    flat = textwrap.dedent(code)
    if entry and re.search(rf"^(?:async\s+)?def\s+{re.escape(entry)}\s*\(", flat, flags=re.M):
        full = "\n" + _definitions_only(flat).strip("\n") + "\n"
        if _compiles(prompt + sep + full):
            return sep + full
        body = _body_of(flat, entry)
        if body is not None:
            code = body
    body = _reindent(code, _body_indent(prompt))
    return _drop_top_level_statements(prompt + sep, body, sep)


def _definitions_only(code: str) -> str:
    """Keep definitions, imports and assignments; drop statements that would run (prints, asserts, __main__)."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return code
    lines = code.split("\n")
    drop = set()
    for node in tree.body:
        if not isinstance(node, _KEEP):
            first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
            drop.update(range(first - 1, node.end_lineno))
    return "\n".join(line for i, line in enumerate(lines) if i not in drop)


def _body_of(code: str, entry: str) -> str | None:
    """The body of `def entry` in `code` (used when the prompt's function cannot simply be redefined)."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == entry:
            lines = code.split("\n")
            return "\n".join(lines[node.body[0].lineno - 1 : node.end_lineno]) + "\n"
    return None


def _body_indent(prompt: str) -> str:
    """The indentation a continuation of `prompt` must have: that of the open function's body, else none."""
    lines = [line for line in prompt.split("\n") if line.strip()]
    if not lines:
        return ""
    last = lines[-1]
    indent = last[: len(last) - len(last.lstrip())]
    if last.rstrip().endswith(":"):
        return indent + "    "
    return indent


def _reindent(code: str, indent: str) -> str:
    """Shift the code so that its first line sits at `indent`; lines keep their relative indentation."""
    lines = code.split("\n")
    first = next((line for line in lines if line.strip()), None)
    if first is None:
        return code
    have = first[: len(first) - len(first.lstrip())].expandtabs(4)
    want = indent.expandtabs(4)
    if have == want:
        return code
    out = []
    for line in lines:
        if not line.strip():
            out.append(line)
            continue
        cur = len(line.expandtabs(4)) - len(line.expandtabs(4).lstrip())
        body = line.expandtabs(4).lstrip()
        out.append(" " * max(0, cur - len(have) + len(want)) + body)
    return "\n".join(out)


def _drop_top_level_statements(head: str, body: str, sep: str) -> str:
    """Remove top-level statements after the prompt's function that would run at import time (a base model often
    goes on with `print(f(3))` or a `__main__` block)."""
    source = head + body
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return sep + body
    head_lines = head.count("\n")
    lines = source.split("\n")
    drop = set()
    for node in tree.body:
        if node.lineno > head_lines and not isinstance(node, _KEEP):
            first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
            drop.update(range(first - 1, node.end_lineno))
    if not drop:
        return sep + body
    kept = [line for i, line in enumerate(lines) if i >= head_lines and i not in drop]
    return sep + "\n".join(kept).rstrip("\n") + "\n"


# ---------------------------------------------------------------------------------------------------------------
# rows: Task records from TRL's columns


_FIELDS = ("task_id", "prompt", "tests", "entry_point", "canonical_solution", "kind", "plus_inputs", "atol")


def _tasks(n: int, columns: dict) -> list[Task | None]:
    """One Task per completion from the column lists (None where the row has no tests)."""
    cols = dict(columns)
    if "source_prompt" in cols:  # the untruncated prompt, when the trainer cut the one the model saw
        cols["prompt"] = cols["source_prompt"]
    if "prompt" not in cols and "prompts" in cols:
        cols["prompt"] = cols["prompts"]
    tasks = []
    for i in range(n):
        row = {k: (cols[k][i] if isinstance(cols.get(k), (list, tuple)) else cols.get(k)) for k in _FIELDS}
        if not row["tests"]:
            tasks.append(None)
            continue
        prompt = row["prompt"] if isinstance(row["prompt"], str) else ""  # conversational prompts: not code
        tasks.append(
            Task(
                task_id=str(row["task_id"] or f"row{i}"),
                prompt=prompt,
                tests=row["tests"],
                entry_point=row["entry_point"] or "",
                canonical_solution=row["canonical_solution"] or "",
                kind=row["kind"] or "function",
                plus_inputs=row["plus_inputs"] or "",
                atol=float(row["atol"] or 0.0),
            )
        )
    return tasks


_VERDICTS: collections.OrderedDict = collections.OrderedDict()
_CACHE_SIZE = 8192


def verdicts(completions, plus: bool = False, **columns) -> list[sandbox.Verdict | None]:
    """Sandbox verdicts for a batch (one `Sandbox.map` for the rows not in the cache)."""
    tasks = _tasks(len(completions), columns)
    keys, todo, found = [], {}, {}
    for task, completion in zip(tasks, completions, strict=True):
        if task is None:
            keys.append(None)
            continue
        key = (task, extract_completion(completion, task), plus)
        keys.append(key)
        if key in _VERDICTS:
            found[key] = _VERDICTS[key]  # held here: evictions below must not lose this batch's hits
            _VERDICTS.move_to_end(key)
        elif key not in todo:
            todo[key] = task
    if todo:
        results = sandbox.check(list(todo.values()), [k[1] for k in todo], plus=plus)
        for key, verdict in zip(todo, results, strict=True):
            _VERDICTS[key] = found[key] = verdict
        while len(_VERDICTS) > _CACHE_SIZE:
            _VERDICTS.popitem(last=False)
    return [found[k] if k is not None else None for k in keys]


# ---------------------------------------------------------------------------------------------------------------
# built-in rewards


class _PassReward:
    """1.0 when all tests pass, else 0.0 (plus=True: also HumanEval+/MBPP+ extra inputs)."""

    def __init__(self, plus: bool = False):
        self.plus = plus
        self.__name__ = "pass_plus_reward" if plus else "pass_reward"

    def __call__(self, completions, **columns) -> list[float | None]:
        return [None if v is None else float(v.passed) for v in verdicts(completions, plus=self.plus, **columns)]


class _TestFractionReward:
    """The share of asserts (stdio: test cases) that pass."""

    def __init__(self, plus: bool = False):
        self.plus = plus
        self.__name__ = "test_fraction_plus_reward" if plus else "test_fraction_reward"

    def __call__(self, completions, **columns) -> list[float | None]:
        out = []
        for v in verdicts(completions, plus=self.plus, **columns):
            if v is None:
                out.append(None)
            elif v.passed:
                out.append(1.0)
            else:
                out.append(v.tests_passed / v.tests_total if v.tests_total else 0.0)
        return out


def pass_reward(completions, **columns) -> list[float | None]:
    """1.0 when the completion passes all the task's tests in the sandbox, else 0.0.

    >>> pass_reward(["    return a + b\\n"], prompt=["def add(a, b):\\n"], tests=["assert add(1, 2) == 3"], entry_point=["add"])
    [1.0]
    """
    return _PassReward()(completions, **columns)


def test_fraction_reward(completions, **columns) -> list[float | None]:
    """The share of the task's asserts (stdio: test cases, in order, up to the first failure) that pass.

    >>> test_fraction_reward(["    return 3\\n"], prompt=["def f():\\n"], tests=["assert f() == 3\\nassert f() == 4"], entry_point=["f"])
    [0.5]
    """
    return _TestFractionReward()(completions, **columns)


test_fraction_reward.__test__ = False  # not a pytest test, though its name starts with "test_"


class _LengthPenalty:
    """-alpha * tokens / 100 (the REINFORCE experiment's length term)."""

    def __init__(self, alpha: float = 0.01, tokenizer=None):
        self.alpha, self.tokenizer = float(alpha), tokenizer
        self.__name__ = "length_penalty"

    def count(self, text: str, ids=None) -> int:
        if ids is not None:
            return len(ids)
        if self.tokenizer is not None:
            return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        return len(_TOKEN.findall(text))

    def __call__(self, completions, completion_ids=None, **columns) -> list[float | None]:
        ids = completion_ids if completion_ids is not None else [None] * len(completions)
        return [-self.alpha * self.count(message_text(c), i) / 100 for c, i in zip(completions, ids, strict=True)]


def length_penalty(alpha: float = 0.01, tokenizer=None) -> _LengthPenalty:
    """A reward of -alpha * tokens / 100 per completion.

    Tokens are, in order of preference: the policy's own `completion_ids` (TRL passes them), the given
    tokenizer's count, else a regex count of words and punctuation marks (`\\w+|[^\\w\\s]`).

    >>> length_penalty(alpha=0.5)(["return a + b"])
    [-0.02]
    """
    return _LengthPenalty(alpha, tokenizer)


def compile_reward(completions, **columns) -> list[float | None]:
    """1.0 when prompt + extracted completion compiles (stdio: the program), else 0.0; nothing is run.

    >>> compile_reward(["    return a +\\n"], prompt=["def add(a, b):\\n"])
    [0.0]
    """
    out = []
    for task, text in _rows_or_prompts(completions, columns):
        code = extract_completion(text, task)
        out.append(float(_compiles(code if task.kind == "stdio" else task.prompt + code)))
    return out


def format_reward(completions, **columns) -> list[float | None]:
    """1.0 for exactly one fenced code block, or for a bare body with no fences that compiles after the prompt.

    >>> format_reward(["```python\\nreturn 1\\n```", "```\\nx\\n``` and ```\\ny\\n```"], prompt=["def f():\\n"] * 2)
    [1.0, 0.0]
    """
    out = []
    for task, text in _rows_or_prompts(completions, columns):
        text = message_text(text)
        fences = len(re.findall(r"^[ \t]*```", text, flags=re.M))
        if fences:
            out.append(1.0 if fences == 2 and len(_FENCE.findall(text)) == 1 else 0.0)
        else:
            code = extract_completion(text, task)
            out.append(float(bool(text.strip()) and _compiles(code if task.kind == "stdio" else task.prompt + code)))
    return out


def quality_reward(completions, **columns) -> list[float | None]:
    """1 - 0.2 per lint finding in the completion's own lines (see `lint`), floored at 0; 0.0 if it does not parse.

    >>> quality_reward(["    import os\\n    return a\\n"], prompt=["def f(a):\\n"])
    [0.8]
    """
    out = []
    for task, text in _rows_or_prompts(completions, columns):
        code = extract_completion(text, task)
        head = "" if task.kind == "stdio" else task.prompt
        findings = lint(head + code, first_line=head.count("\n") + 1)
        out.append(0.0 if any(f.startswith("syntax error") for f in findings) else max(0.0, 1.0 - 0.2 * len(findings)))
    return out


def _rows_or_prompts(completions, columns) -> list[tuple[Task, object]]:
    """(task, completion) pairs; rewards that run nothing need only the prompt column."""
    cols = dict(columns)
    tests = cols.get("tests")
    cols["tests"] = [t or "-" for t in tests] if isinstance(tests, (list, tuple)) else ["-"] * len(completions)
    return [(t, c) for t, c in zip(_tasks(len(completions), cols), completions, strict=True)]


# ---------------------------------------------------------------------------------------------------------------
# lint: a few pyflakes-like checks with `ast` (no dependency, microseconds per completion)

_BUILTINS = set(dir(builtins)) | {"__file__", "__name__", "__doc__", "__builtins__", "__spec__"}
_SHADOWED = {"list", "dict", "str", "int", "set", "tuple", "sum", "max", "min", "len", "id", "input", "type", "map"}


def lint(code: str, first_line: int = 1) -> list[str]:
    """Findings in lines >= first_line: syntax error, unused import, unused local variable, undefined name,
    bare `except:`, `== None`/`== True`-style comparisons, mutable default arguments, shadowed builtins, lines over
    119 characters."""
    try:
        tree = ast.parse(code)
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
                if isinstance(op, (ast.Eq, ast.NotEq)) and isinstance(right, ast.Constant) and right.value in (None, True, False) and type(right.value) is not int:  # fmt: skip
                    found.append((node.lineno, f"comparison to {right.value} with {'==' if isinstance(op, ast.Eq) else '!='}"))  # fmt: skip
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


# ---------------------------------------------------------------------------------------------------------------
# the multi-criteria sum and the name -> factory table


class _Weighted:
    """sum_k w_k * reward_k, skipping a component where it returns None (None if every one does)."""

    def __init__(self, parts: list[tuple[float, object]]):
        self.parts = parts
        self.__name__ = "weighted"

    def __call__(self, completions, **columns) -> list[float | None]:
        totals: list[float | None] = [None] * len(completions)
        for weight, fn in self.parts:
            for i, value in enumerate(fn(completions, **columns)):
                if value is not None:
                    totals[i] = (totals[i] or 0.0) + weight * value
        return totals


def weighted(**weights_or_fns) -> _Weighted:
    """The multi-criteria reward `w_c*compile + w_f*functional + w_q*quality + ...`.

    Each keyword names a reward in REWARDS (with or without `_reward`) and gives its weight, or a dict with
    `weight` and the factory's arguments, or a (weight, callable) pair for a reward of your own.

    >>> weighted(compile=0.5, quality=0.5)(["    return a\\n"], prompt=["def f(a):\\n"])
    [1.0]
    """
    parts = []
    for name, spec in weights_or_fns.items():
        if isinstance(spec, (int, float)):
            parts.append((float(spec), make_reward(name)))
        elif isinstance(spec, dict):
            spec = dict(spec)
            weight = float(spec.pop("weight", 1.0))
            parts.append((weight, make_reward(spec.pop("reward", name), **spec)))
        elif isinstance(spec, (tuple, list)) and len(spec) == 2 and callable(spec[1]):
            parts.append((float(spec[0]), spec[1]))
        elif callable(spec):
            parts.append((1.0, spec))
        else:
            raise ValueError(f"weighted: {name}={spec!r} is not a weight, a dict with 'weight', or (weight, fn)")
    if not parts:
        raise ValueError(
            "weighted needs at least one component, e.g. weighted(pass=1.0, length={'weight': 1, 'alpha': 0.01})"
        )
    return _Weighted(parts)


REWARDS = {
    "pass": lambda plus=False: _PassReward(plus) if plus else pass_reward,
    "test_fraction": lambda plus=False: _TestFractionReward(plus) if plus else test_fraction_reward,
    "length": length_penalty,
    "compile": lambda: compile_reward,
    "format": lambda: format_reward,
    "quality": lambda: quality_reward,
    "weighted": weighted,
}


def make_reward(name: str, **kwargs):
    """REWARDS[name](**kwargs), accepting `pass_reward`-style names and `length_penalty`; errors list the names."""
    key = name.removesuffix("_reward").removesuffix("_penalty")
    if key not in REWARDS:
        raise ValueError(f"unknown reward {name!r}; choose one of {', '.join(REWARDS)}")
    return REWARDS[key](**kwargs)
