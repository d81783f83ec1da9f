"""Browsing in notebooks: tasks (00_tasks) and completions with their verdicts (explore).

Widgets need a live JupyterLab front end; under papermill (plain `papermill` too:
`codelib.plumbing.progress.headless`), with `interactive=False` or CODELIB_HEADLESS=1, every view degrades to printed
output so the notebook still runs headless in CI. A view displays itself and returns None, so a cell ending in one
shows it once. In JupyterLab the task's prompt stands beside its completions, the completions are highlighted Python
and each verdict is coloured (`render_samples_html`); the comparison shows two checkpoints full width, each with its
pass rate and its own picker. Rewards come from `codelib.engine.rewards` like every other reward."""

from __future__ import annotations

import html
import json
from dataclasses import dataclass, field

import ipywidgets as widgets
import pandas as pd
from IPython.display import HTML, display
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import PythonLexer

from codelib.engine import rewards
from codelib.plumbing.params import checkpoints_root, read_jsonl
from codelib.plumbing.progress import headless
from codelib.reports.episodes import (  # noqa: F401  (the repair notebook and tests use them from here)
    COLOURS,
    episode_explorer,
    load_episodes,
    render_episode,
    render_episode_html,
)
from codelib.tasks import Task, load_tasks, task_counts


@dataclass
class TasksConfig:
    profile: str = "tiny"  # reports/<profile>/
    dataset: str = "synthetic"  # the dataset to browse
    split: str = "test"  # its split
    show: int = 0  # index of the task rendered in full
    interactive: bool = True  # ipywidgets picker in JupyterLab; False prints plain output (papermill)


def counts_table():
    """Tasks per dataset and split, as a DataFrame (rows: datasets, columns: splits)."""
    return pd.DataFrame(task_counts()).T.fillna(0).astype(int)


def render_task(task: Task, max_chars: int = 2000) -> str:
    """A task as text: id, kind, prompt, canonical solution and tests (truncated)."""

    def cut(s: str) -> str:
        return s if len(s) <= max_chars else s[:max_chars] + f"\n... ({len(s) - max_chars} more characters)"

    tests = task.tests
    if task.kind == "stdio":
        cases = json.loads(tests)
        first = f"--- input\n{cases[0]['input']}--- output\n{cases[0]['output']}"
        tests = f"{len(cases)} input/output cases; the first:\n{first}"
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
    picker = widgets.Dropdown(options=[(t.task_id, i) for i, t in enumerate(tasks)], value=show, description="task")
    out = widgets.Output()

    def update(change=None):
        out.clear_output()
        with out:
            print(render_task(tasks[picker.value]))

    picker.observe(update, names="value")
    update()
    display(widgets.VBox([picker, out]))
    return None


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
    tampering: bool = False  # only tasks with a sample the sandbox saw probing it (Verdict.tamper)
    rewards: dict[str, float | dict] = field(default_factory=lambda: {"pass": 1.0, "length": {"alpha": 0.01}})  # shown
    interactive: bool = True  # ipywidgets in JupyterLab; False prints plain output (papermill)

    def __post_init__(self):
        rewards.make_rewards(self.rewards)


def load_samples(profile: str, name: str) -> dict[str, list[dict]]:
    """An evaluated checkpoint's samples grouped by task id (in evaluation order)."""
    path = checkpoints_root() / profile / "eval" / name / "samples.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"no samples for checkpoint {name!r} at {path}: evaluate it first (06_eval)")
    out: dict[str, list[dict]] = {}
    for row in read_jsonl(path):
        out.setdefault(row["task_id"], []).append(row)
    return out


def sample_rewards(rows: list[dict], spec: dict) -> list[float]:
    """The rewards of evaluated samples under a `rewards:` spec, from their recorded verdicts and token counts."""
    if not rows:
        return []
    texts = [r.get("completion", r.get("code", "")) for r in rows]
    total, _ = rewards.make_rewards(spec).score(texts, verdicts=rows, tokens=[r.get("n_tokens", 0) for r in rows])
    return total


def render_samples(name: str, rows: list[dict], spec: dict) -> str:
    """A checkpoint's samples of one task as text: verdict, detail, reward and the code."""
    parts = []
    for r, reward in zip(rows, sample_rewards(rows, spec), strict=True):
        parts.append(
            f"-- {name} sample {r['sample']}: {r['status']} (reward {reward:+.3f}, {r.get('n_tokens', '?')} tokens)"
            + (f"  detail: {r['detail']}" if r.get("detail") else "")
            + (f"  tampering: {r['tamper']}" if r.get("tamper") else "")
            + f"\n{r.get('completion', r.get('code', ''))}"
        )
    return "\n".join(parts)


def render_samples_html(name: str, rows: list[dict], spec: dict) -> str:
    """The same as HTML: a coloured verdict per sample and its code highlighted as Python."""
    formatter = HtmlFormatter(noclasses=True, nowrap=False)
    parts = []
    for r, reward in zip(rows, sample_rewards(rows, spec), strict=True):
        colour = COLOURS.get(r["status"], "#57606a")
        detail = f" <span style='color:#57606a'>{html.escape(r['detail'])}</span>" if r.get("detail") else ""
        if r.get("tamper"):
            detail += f" <span style='color:#cf222e'>tampering: {html.escape(r['tamper'])}</span>"
        parts.append(
            f"<div><b>{html.escape(name)}</b> sample {r['sample']}: "
            f"<span style='color:{colour};font-weight:bold'>{html.escape(r['status'])}</span> "
            f"(reward {reward:+.3f}, {r.get('n_tokens', '?')} tokens){detail}"
            + highlight(r.get("completion", r.get("code", "")), PythonLexer(), formatter)
            + "</div>"
        )
    return "\n".join(parts)


def pass_share(rows: list[dict]) -> float:
    return sum(r["passed"] for r in rows) / max(1, len(rows))


def load_prompts(profile: str, name: str) -> dict[str, str]:
    """task id -> prompt of the tasks an evaluated checkpoint was scored on (its summary names the dataset and
    split); {} when the summary or the dataset cannot be read."""
    path = checkpoints_root() / profile / "eval" / name / "summary.json"
    try:
        st = json.loads(path.read_text()).get("settings", {})
        return {t.task_id: t.prompt for t in load_tasks(st["dataset"], st["split"])}
    except (OSError, ValueError, KeyError):
        return {}


def render_prompt_html(prompt: str) -> str:
    """The task's prompt, highlighted, in a grey box headed "prompt"."""
    formatter = HtmlFormatter(noclasses=True, nowrap=False)
    return (
        "<div style='background:#f6f8fa;border:1px solid #d0d7de;padding:4px 8px;border-radius:6px'>"
        "<b style='color:#57606a'>prompt</b>"
        + highlight(prompt or "(prompt not available)", PythonLexer(), formatter)
        + "</div>"
    )


def render_task_html(task_id: str, prompt: str, name: str, rows: list[dict], spec: dict) -> str:
    """The prompt beside the completions of one checkpoint (two columns, each taking half the width)."""
    head = (
        f"<div><b>{html.escape(task_id)}</b>: {html.escape(name)} passes {pass_share(rows):.0%} of "
        f"{len(rows)} samples</div>"
    )
    return (
        head + "<div style='display:grid;grid-template-columns:minmax(0,1fr) minmax(0,1fr);gap:12px;width:100%'>"
        f"<div>{render_prompt_html(prompt)}</div><div>{render_samples_html(name, rows, spec)}</div></div>"
    )


def render_comparison(
    task_id: str, a: str, rows_a: list[dict], b: str, rows_b: list[dict], spec: dict, prompt: str = ""
) -> str:
    return (
        f"== {task_id}: {a} passes {pass_share(rows_a):.0%} of samples, {b} passes {pass_share(rows_b):.0%}\n"
        + (f"--- prompt\n{prompt.rstrip()}\n" if prompt else "")
        + render_samples(a, rows_a, spec)
        + "\n"
        + render_samples(b, rows_b, spec)
    )


def _evaluated(profile: str) -> list[str]:
    root = checkpoints_root() / profile / "eval"
    return sorted(p.name for p in root.iterdir() if (p / "samples.jsonl").exists()) if root.is_dir() else []


def completions_explorer(cfg: ExploreConfig) -> None:
    """Pick a checkpoint and a task, read its prompt beside its completions with verdicts; prints one task when
    headless."""
    samples = load_samples(cfg.profile, cfg.checkpoint)
    task_ids = tampering_tasks(samples) if cfg.tampering else list(samples)
    if cfg.tampering and not task_ids:
        print(f"no sample of {cfg.checkpoint} was seen tampering (Verdict.tamper): nothing to show")
        return None
    if not 0 <= cfg.task_index < len(task_ids):
        raise ValueError(f"task_index={cfg.task_index} is out of range: {len(task_ids)} tasks to show")
    prompts = load_prompts(cfg.profile, cfg.checkpoint)
    if headless(cfg.interactive):
        tid = task_ids[cfg.task_index]
        print(f"== {tid}\n--- prompt\n{prompts.get(tid, '(prompt not available)').rstrip()}")
        print(render_samples(cfg.checkpoint, samples[tid], cfg.rewards))
        return None
    ckpt = widgets.Dropdown(options=_evaluated(cfg.profile), value=cfg.checkpoint, description="checkpoint")
    task = widgets.Dropdown(options=task_ids, value=task_ids[cfg.task_index], description="task")
    probing = widgets.Checkbox(value=cfg.tampering, description="only tasks with tampering samples")
    out = widgets.Output(layout=widgets.Layout(width="100%"))

    def refilter(change=None):
        rows = load_samples(cfg.profile, ckpt.value)
        ids = tampering_tasks(rows) if probing.value else list(rows)
        keep = task.value if task.value in ids else (ids[0] if ids else None)
        task.options = ids
        task.value = keep
        update()

    def update(change=None):
        out.clear_output()
        with out:
            if task.value is None:
                print(f"no sample of {ckpt.value} was seen tampering")
                return
            rows = load_samples(cfg.profile, ckpt.value).get(task.value, [])
            display(HTML(render_task_html(task.value, prompts.get(task.value, ""), ckpt.value, rows, cfg.rewards)))

    ckpt.observe(refilter, names="value")
    probing.observe(refilter, names="value")
    task.observe(update, names="value")
    update()
    display(widgets.VBox([widgets.HBox([ckpt, task, probing]), out], layout=widgets.Layout(width="100%")))
    return None


def tampering_tasks(samples: dict[str, list[dict]]) -> list[str]:
    """The task ids with at least one sample the sandbox saw probing it (a non-empty `tamper`), in order."""
    return [tid for tid, rows in samples.items() if any(r.get("tamper") for r in rows)]


def ranked_tasks(a: dict[str, list[dict]], b: dict[str, list[dict]]) -> list[str]:
    """The tasks both checkpoints answered, the largest difference in pass rate first."""
    common = [t for t in a if t in b]
    return sorted(common, key=lambda t: -abs(pass_share(a[t]) - pass_share(b[t])))


def comparison_view(cfg: ExploreConfig) -> None:
    """Two checkpoints on the same task, side by side at full width, each headed by its pass rate on the task and
    overall, each with its own picker; the prompt above both; starts on a task where they disagree most."""
    if not cfg.other:
        print("no second checkpoint (other = '')")
        return None
    a, b = load_samples(cfg.profile, cfg.checkpoint), load_samples(cfg.profile, cfg.other)
    prompts = load_prompts(cfg.profile, cfg.checkpoint)
    ranked = ranked_tasks(a, b)
    if headless(cfg.interactive):
        differ = sum(1 for t in ranked if pass_share(a[t]) != pass_share(b[t]))
        print(f"{differ} of {len(ranked)} tasks differ; the largest gap:")
        print(
            render_comparison(
                ranked[0],
                cfg.checkpoint,
                a[ranked[0]],
                cfg.other,
                b[ranked[0]],
                cfg.rewards,
                prompts.get(ranked[0], ""),
            )
        )
        return None
    names = _evaluated(cfg.profile)
    half = widgets.Layout(width="50%")
    pick_a = widgets.Dropdown(options=names, value=cfg.checkpoint, description="left", layout=half)
    pick_b = widgets.Dropdown(options=names, value=cfg.other, description="right", layout=half)
    task = widgets.Dropdown(options=ranked, value=ranked[0], description="task", layout=widgets.Layout(width="60%"))
    prompt = widgets.Output(layout=widgets.Layout(width="100%"))
    left, right = widgets.Output(layout=half), widgets.Output(layout=half)
    data = {"a": a, "b": b}

    def overall(rows: dict[str, list[dict]]) -> str:
        flat = [r for rs in rows.values() for r in rs]
        return f"{pass_share(flat):.1%} of all samples"

    def draw(change=None):
        prompt.clear_output()
        with prompt:
            display(HTML(render_prompt_html(prompts.get(task.value, ""))))
        for out, name, rows in ((left, pick_a.value, data["a"]), (right, pick_b.value, data["b"])):
            out.clear_output()
            mine = rows.get(task.value, [])
            with out:
                display(
                    HTML(
                        f"<h4 style='margin:4px 0'>{html.escape(name)}: {pass_share(mine):.0%} on this task, "
                        f"{overall(rows)}</h4>" + render_samples_html(name, mine, cfg.rewards)
                    )
                )

    def repick(change=None):
        data["a"], data["b"] = load_samples(cfg.profile, pick_a.value), load_samples(cfg.profile, pick_b.value)
        order = ranked_tasks(data["a"], data["b"])
        keep = task.value if task.value in order else order[0]
        task.unobserve(draw, names="value")
        task.options, task.value = order, keep
        task.observe(draw, names="value")
        draw()

    pick_a.observe(repick, names="value")
    pick_b.observe(repick, names="value")
    task.observe(draw, names="value")
    draw()
    display(
        widgets.VBox(
            [
                widgets.HBox([pick_a, pick_b], layout=widgets.Layout(width="100%")),
                task,
                prompt,
                widgets.HBox([left, right], layout=widgets.Layout(width="100%")),
            ],
            layout=widgets.Layout(width="100%"),
        )
    )
    return None


# ---------------------------------------------------------------------------------------------------------------
# multi-turn repair: every turn of an episode
