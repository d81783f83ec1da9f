"""Completions judged by the sandbox, as the reward functions see them: each row's Task rebuilt from the reward
columns (TRL's, or ours), one `Sandbox.map` of the shared pool per batch, and a cache of verdicts, so every reward term
of a batch (`codelib.engine.rewards`) runs each program once.
"""

from __future__ import annotations

import collections

from codelib import sandbox
from codelib.engine.extraction import extract_completion
from codelib.tasks import Task

# ---------------------------------------------------------------------------------------------------------------
# rows: Task records from TRL's columns


_FIELDS = (
    "task_id",
    "prompt",
    "tests",
    "entry_point",
    "canonical_solution",
    "kind",
    "plus_inputs",
    "atol",
    "time_limit_s",
    "memory_limit_mb",
    "compare",
)  # the task's own limits (TACO, CodeContests) and its benchmark's comparator reach the sandbox


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
                time_limit_s=float(row["time_limit_s"]) if row["time_limit_s"] else None,
                memory_limit_mb=int(row["memory_limit_mb"]) if row["memory_limit_mb"] else None,
                compare=row["compare"] or "",
            )
        )
    return tasks


class VerdictCache:
    """The verdicts of the `size` (task, program, plus) keys used last."""

    def __init__(self, size: int = 8192):
        self.size, self.items = size, collections.OrderedDict()

    def clear(self) -> None:
        self.items.clear()


CACHE = VerdictCache()  # the one every reward term of a run shares


def verdicts(completions, plus: bool = False, cache: VerdictCache | None = None, **columns) -> list:
    """Sandbox verdicts for a batch (one `Sandbox.map` for the rows not in the cache: `CACHE` unless given); the
    `verdicts` column as it is when the caller already has them (annotated candidates, evaluated samples)."""
    if columns.get("verdicts") is not None:
        return list(columns["verdicts"])
    cache = CACHE if cache is None else cache
    held = cache.items
    tasks = _tasks(len(completions), columns)
    keys, todo, found = [], {}, {}
    for task, completion in zip(tasks, completions, strict=True):
        if task is None:
            keys.append(None)
            continue
        key = (task, extract_completion(completion, task), plus)
        keys.append(key)
        if key in held:
            found[key] = held[key]  # held here: evictions below must not lose this batch's hits
            held.move_to_end(key)
        elif key not in todo:
            todo[key] = task
    if todo:
        results = sandbox.check(list(todo.values()), [k[1] for k in todo], plus=plus)
        for key, verdict in zip(todo, results, strict=True):
            held[key] = found[key] = verdict
        while len(held) > cache.size:
            held.popitem(last=False)
    return [found[k] if k is not None else None for k in keys]


def passed_of(verdict) -> bool:
    """Whether a Verdict (or an annotated row with `passed`) passed."""
    return bool(verdict["passed"] if isinstance(verdict, dict) else verdict.passed)


def test_fraction_of(verdict) -> float:
    """The share of asserts (stdio: cases) that held: 1.0 for a pass; a row's own `test_fraction` if it has one."""
    if isinstance(verdict, dict):
        return float(verdict["test_fraction"]) if "test_fraction" in verdict else float(verdict["passed"])
    if verdict.passed:
        return 1.0
    return verdict.tests_passed / verdict.tests_total if verdict.tests_total else 0.0
