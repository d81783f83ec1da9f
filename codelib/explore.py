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


# ---------------------------------------------------------------------------------------------------------------
# completions explorer (notebooks/explore.ipynb)


@dataclass
class ExploreConfig:
    profile: str = "tiny"  # reads checkpoints/<profile>/eval/<name>/samples.jsonl
    checkpoint: str = "sft"  # the evaluated checkpoint to read
    other: str = "grpo"  # a second checkpoint for the side-by-side view ("" for none)
    task_index: int = 0  # the task shown first
    alpha: float = 0.01  # length penalty used for the displayed reward: pass - alpha * tokens / 100
    interactive: bool = True  # ipywidgets in JupyterLab; False prints plain output (papermill)


def load_samples(profile: str, name: str) -> dict[str, list[dict]]:
    """An evaluated checkpoint's samples grouped by task id (in evaluation order)."""
    from codelib.params import checkpoints_root, read_jsonl

    path = checkpoints_root() / profile / "eval" / name / "samples.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"no samples for checkpoint {name!r} at {path}: evaluate it first (06_eval)")
    out: dict[str, list[dict]] = {}
    for row in read_jsonl(path):
        out.setdefault(row["task_id"], []).append(row)
    return out


def render_samples(name: str, rows: list[dict], alpha: float) -> str:
    """A checkpoint's samples of one task: verdict, detail, reward and the code."""
    parts = []
    for r in rows:
        reward = float(r["passed"]) - alpha * r.get("n_tokens", 0) / 100
        parts.append(
            f"-- {name} sample {r['sample']}: {r['status']} (reward {reward:+.3f}, {r.get('n_tokens', '?')} tokens)"
            + (f"  detail: {r['detail']}" if r.get("detail") else "")
            + f"\n{r.get('completion', r.get('code', ''))}"
        )
    return "\n".join(parts)


def render_comparison(task_id: str, a: str, rows_a: list[dict], b: str, rows_b: list[dict], alpha: float) -> str:
    pa = sum(r["passed"] for r in rows_a) / max(1, len(rows_a))
    pb = sum(r["passed"] for r in rows_b) / max(1, len(rows_b))
    return (
        f"== {task_id}: {a} passes {pa:.0%} of samples, {b} passes {pb:.0%}\n"
        + render_samples(a, rows_a, alpha)
        + "\n"
        + render_samples(b, rows_b, alpha)
    )


def completions_explorer(cfg: ExploreConfig):
    """Pick a checkpoint and a task, read its completions with verdicts; prints one task when headless."""
    samples = load_samples(cfg.profile, cfg.checkpoint)
    task_ids = list(samples)
    if not 0 <= cfg.task_index < len(task_ids):
        raise ValueError(f"task_index={cfg.task_index} is out of range: {len(task_ids)} tasks were evaluated")
    if headless(cfg.interactive):
        tid = task_ids[cfg.task_index]
        print(render_samples(cfg.checkpoint, samples[tid], cfg.alpha))
        return None
    import ipywidgets as widgets
    from IPython.display import display

    from codelib.params import checkpoints_root

    names = sorted(p.name for p in (checkpoints_root() / cfg.profile / "eval").iterdir() if p.is_dir())
    ckpt = widgets.Dropdown(options=names, value=cfg.checkpoint, description="checkpoint")
    task = widgets.Dropdown(options=task_ids, value=task_ids[cfg.task_index], description="task")
    out = widgets.Output()

    def update(change=None):
        out.clear_output()
        with out:
            rows = load_samples(cfg.profile, ckpt.value).get(task.value, [])
            print(render_samples(ckpt.value, rows, cfg.alpha))

    ckpt.observe(update, names="value")
    task.observe(update, names="value")
    update()
    box = widgets.VBox([widgets.HBox([ckpt, task]), out])
    display(box)
    return box


def comparison_view(cfg: ExploreConfig):
    """Two checkpoints on the same task, side by side; starts on a task where they disagree most."""
    if not cfg.other:
        print("no second checkpoint (other = '')")
        return None
    a, b = load_samples(cfg.profile, cfg.checkpoint), load_samples(cfg.profile, cfg.other)
    common = [t for t in a if t in b]

    def gap(t):
        return abs(sum(r["passed"] for r in a[t]) / len(a[t]) - sum(r["passed"] for r in b[t]) / len(b[t]))

    ranked = sorted(common, key=lambda t: -gap(t))
    if headless(cfg.interactive):
        print(f"{len([t for t in common if gap(t) > 0])} of {len(common)} tasks differ; the largest gap:")
        print(render_comparison(ranked[0], cfg.checkpoint, a[ranked[0]], cfg.other, b[ranked[0]], cfg.alpha))
        return None
    import ipywidgets as widgets
    from IPython.display import display

    task = widgets.Dropdown(options=ranked, value=ranked[0], description="task")
    left, right = widgets.Output(), widgets.Output()

    def update(change=None):
        for out, name, rows in ((left, cfg.checkpoint, a), (right, cfg.other, b)):
            out.clear_output()
            with out:
                print(render_samples(name, rows[task.value], cfg.alpha))

    task.observe(update, names="value")
    update()
    box = widgets.VBox([task, widgets.HBox([left, right])])
    display(box)
    return box
