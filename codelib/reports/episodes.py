"""Browsing repair episodes in notebooks (09_repair): each turn's completion, its public and full verdicts and the
feedback the next turn saw. Printed under papermill / headless, widgets in JupyterLab, as in `explore`."""

from __future__ import annotations

import html
from pathlib import Path

import ipywidgets as widgets
from IPython.display import HTML, display
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import PythonLexer

from codelib.plumbing.params import read_jsonl
from codelib.plumbing.progress import headless

COLOURS = {"passed": "#1a7f37", "failed": "#cf222e", "timeout": "#9a6700", "error": "#8250df"}


def load_episodes(path: str | Path) -> list[dict]:
    """Episode rows (`codelib.engine.repair.Episode.to_row`): a repair run's or a repair evaluation's
    episodes.jsonl."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no episodes at {path}: run the repair stage (09_repair) first")
    return read_jsonl(path)


def render_episode(row: dict) -> str:
    """One episode as text: per turn the attempt, its verdict on the public tests and on all tests, and the
    feedback the next turn was shown."""
    head = (
        f"== {row['task_id']} ({row['mode']} feedback): {'passed' if row['passed'] else 'failed'} after "
        f"{row['turns_used']} turn(s); public tests {row['public_tests']}, hidden {row['hidden_tests']}"
    )
    parts = [head]
    for t in row["turns"]:
        full, pub = t["full"], t["public"]
        parts.append(
            f"-- turn {t['turn']}: public {pub['status']}, all tests {full['status']} "
            f"({full.get('tests_passed', '?')}/{full.get('tests_total', '?')}), {t['tokens']} tokens"
            + (f"  detail (all tests): {full['detail']}" if full.get("detail") else "")
        )
        parts.append(t["completion"].rstrip("\n"))
        if t["turn"] < row["turns_used"]:
            parts.append(f"   feedback shown: {t['feedback']!r}")
    return "\n".join(parts)


def render_episode_html(row: dict) -> str:
    """The same as HTML, each attempt highlighted as Python and each verdict coloured."""
    formatter = HtmlFormatter(noclasses=True, nowrap=False)
    parts = [
        f"<div><b>{html.escape(row['task_id'])}</b> ({html.escape(row['mode'])} feedback): "
        f"public tests {row['public_tests']}, hidden {row['hidden_tests']}</div>"
    ]
    for t in row["turns"]:
        full, pub = t["full"], t["public"]
        parts.append(
            f"<div>turn {t['turn']}: public <span style='color:{COLOURS.get(pub['status'], '#57606a')}'>"
            f"{pub['status']}</span>, all tests <span style='color:{COLOURS.get(full['status'], '#57606a')};"
            f"font-weight:bold'>{full['status']}</span> <span style='color:#57606a'>"
            f"{html.escape(full.get('detail', ''))}</span>"
            + highlight(t["completion"], PythonLexer(), formatter)
            + (
                f"<pre style='color:#9a6700'># feedback: {html.escape(t['feedback'])}</pre>"
                if t["turn"] < row["turns_used"]
                else ""
            )
            + "</div>"
        )
    return "\n".join(parts)


def episode_explorer(path: str | Path, index: int = -1, interactive: bool = True) -> None:
    """Pick an episode (repaired ones first) and read every turn; prints one when headless. index -1: the first
    episode that took more than one turn and passed."""
    rows = load_episodes(path)
    order = sorted(
        range(len(rows)), key=lambda i: (-(rows[i]["turns_used"] > 1 and rows[i]["passed"]), -rows[i]["turns_used"], i)
    )
    start = order[0] if index < 0 else index
    if headless(interactive):
        print(render_episode(rows[start]))
        return None
    labels = [
        (
            f"{rows[i]['task_id']} #{i} ({rows[i]['mode']}, {rows[i]['turns_used']} turns, "
            f"{'pass' if rows[i]['passed'] else 'fail'})",
            i,
        )
        for i in order
    ]
    pick = widgets.Dropdown(options=labels, value=start, description="episode")
    out = widgets.Output()

    def update(change=None):
        out.clear_output()
        with out:
            display(HTML(render_episode_html(rows[pick.value])))

    pick.observe(update, names="value")
    update()
    display(widgets.VBox([pick, out]))
    return None
