"""Browsing in notebooks: tasks (00_tasks) and completions with their verdicts (explore).

Widgets need a live JupyterLab front end; under papermill (or with `interactive=False`, or CODELIB_HEADLESS=1)
every view degrades to printed output so the notebook still runs headless in CI.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from codelib.tasks import Task, load_tasks, task_counts


@dataclass
class TasksConfig:
    profile: str = "tiny"  # reports/<profile>/
    dataset: str = "synthetic"  # the dataset to browse
    split: str = "test"  # its split
    show: int = 0  # index of the task rendered in full
    interactive: bool = True  # ipywidgets picker in JupyterLab; False prints plain output (papermill)


def headless(interactive: bool = True) -> bool:
    """True when widgets cannot be shown: asked for, or CODELIB_HEADLESS set (the pipeline sets it)."""
    return not interactive or os.environ.get("CODELIB_HEADLESS", "") not in ("", "0")


def counts_table():
    """Tasks per dataset and split, as a DataFrame (rows: datasets, columns: splits)."""
    import pandas as pd

    return pd.DataFrame(task_counts()).T.fillna(0).astype(int)


def render_task(task: Task, max_chars: int = 2000) -> str:
    """A task as text: id, kind, prompt, canonical solution and tests (truncated)."""

    def cut(s: str) -> str:
        return s if len(s) <= max_chars else s[:max_chars] + f"\n... ({len(s) - max_chars} more characters)"

    tests = task.tests
    if task.kind == "stdio":
        cases = json.loads(tests)
        tests = f"{len(cases)} input/output cases; the first:\n--- input\n{cases[0]['input']}--- output\n{cases[0]['output']}"
    plus = f"\nplus inputs: {len(json.loads(task.plus_inputs))}" if task.plus_inputs else ""
    return (
        f"== {task.task_id}  (kind: {task.kind}, entry point: {task.entry_point or '-'}){plus}\n"
        f"--- prompt\n{cut(task.prompt)}\n--- canonical solution\n{cut(task.canonical_solution)}\n"
        f"--- tests\n{cut(tests)}"
    )


def task_browser(tasks: list[Task], show: int = 0, interactive: bool = True):
    """A dropdown over tasks showing each one rendered; prints task `show` when headless."""
    if headless(interactive):
        print(render_task(tasks[show]))
        return None
    import ipywidgets as widgets
    from IPython.display import display

    picker = widgets.Dropdown(options=[(t.task_id, i) for i, t in enumerate(tasks)], value=show, description="task")
    out = widgets.Output()

    def update(change=None):
        out.clear_output()
        with out:
            print(render_task(tasks[picker.value]))

    picker.observe(update, names="value")
    update()
    box = widgets.VBox([picker, out])
    display(box)
    return box


def load_for_browsing(cfg: TasksConfig) -> list[Task]:
    tasks = load_tasks(cfg.dataset, cfg.split)
    if not 0 <= cfg.show < len(tasks):
        raise ValueError(f"show={cfg.show} is out of range: {cfg.dataset}/{cfg.split} has {len(tasks)} tasks")
    return tasks
