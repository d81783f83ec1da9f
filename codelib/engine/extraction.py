"""Completion extraction: the code a model's text contributes to a task's program.

One function, `extract_completion`, is used by the rewards, the evaluator and the candidates alike, so a rule
changed here changes every score (and, through `codelib.plumbing.fingerprint`, invalidates cached eval summaries and
pipeline stages). Compiling a completion here never runs it; its warnings (a `SyntaxWarning` for an invalid
escape in a model's string) are silenced, as they are the model's, not the trainer's.
"""

from __future__ import annotations

import ast
import functools
import re
import textwrap
import warnings

FENCE = re.compile(r"^[ \t]*```[ \t]*([\w+#.-]*)[^\n]*\n(.*?)(?:^[ \t]*```[^\n]*$|\Z)", re.S | re.M)
_CODE_LANGS = {"", "python", "py", "python3", "py3"}
_KEEP = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom, ast.Assign, ast.AnnAssign)


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
    return _extract(text, prompt, kind, entry)


@functools.lru_cache(maxsize=4096)
def _extract(text: str, prompt: str, kind: str, entry: str) -> str:
    """`extract_completion` of plain strings, memoised: a rollout's verdicts and its reward terms extract the same
    completions, and a group's samples often repeat one."""
    code = _fenced_code(text, entry)
    if code is None:
        code = text
    if kind == "stdio":
        return code.strip("\n") + "\n"
    return _fit_function(code, prompt, entry)


def _fenced_code(text: str, entry: str) -> str | None:
    blocks = [(lang.lower(), body) for lang, body in FENCE.findall(text)]
    code = [b for lang, b in blocks if lang in _CODE_LANGS] or [b for _, b in blocks]
    if not code:
        return None
    with_entry = [b for b in code if entry and re.search(rf"\bdef\s+{re.escape(entry)}\s*\(", b)]
    return (with_entry or code)[0]


def _last_def(prompt: str) -> str:
    names = re.findall(r"^\s*(?:async\s+)?def\s+(\w+)\s*\(", prompt, flags=re.M)
    return names[-1] if names else ""


def compiles(source: str) -> bool:
    """True when `source` compiles (nothing is run; the compiler's warnings about the model's code are dropped)."""
    try:
        parse(source, mode="compile")
        return True
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return False


def parse(source: str, mode: str = "ast"):
    """`ast.parse(source)` (or `compile`, mode="compile") with the model's SyntaxWarnings silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if mode == "compile":
            return compile(source, "<completion>", "exec", dont_inherit=True)
        return ast.parse(source)


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
        if compiles(prompt + sep + full):
            return sep + full
        body = _body_of(flat, entry)
        if body is not None:
            code = body
    body = _reindent(code, _body_indent(prompt))
    return _drop_top_level_statements(prompt + sep, body, sep)


def _definitions_only(code: str) -> str:
    """Keep definitions, imports and assignments; drop statements that would run (prints, asserts, __main__)."""
    try:
        tree = parse(code)
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
        tree = parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == entry:
            lines = code.split("\n")
            first = node.body[0]
            body = lines[first.lineno - 1 : node.end_lineno]
            raw = body[0].encode()  # col_offset counts UTF-8 bytes
            if raw[: first.col_offset].strip():  # a one-line def (`def f(x): return x`): the body follows the colon
                body[0] = raw[first.col_offset :].decode()
            return "\n".join(body) + "\n"
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
        tree = parse(source)
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
