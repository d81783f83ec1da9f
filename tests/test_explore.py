"""The explorer: one display per view (nothing returned for the cell to render again), highlighted code, coloured
verdicts, rewards from codelib.engine.rewards, and escaped <placeholders> in the generated notebooks' markdown."""

import json

import pytest

from codelib.reports import explore

ROWS = [
    {
        "task_id": "t/0",
        "sample": 0,
        "completion": "    return x + 1\n",
        "code": "    return x + 1\n",
        "status": "passed",
        "passed": True,
        "detail": "",
        "n_tokens": 10,
    },
    {
        "task_id": "t/0",
        "sample": 1,
        "completion": "    return x <b>\n",
        "code": "    return x <b>\n",
        "status": "failed",
        "passed": False,
        "detail": "AssertionError",
        "n_tokens": 30,
    },
]


@pytest.fixture
def evaluated(tmp_path, monkeypatch):
    monkeypatch.setenv("CODELIB_CHECKPOINTS", str(tmp_path))
    monkeypatch.delenv("CODELIB_HEADLESS", raising=False)
    for name in ("sft", "grpo"):
        d = tmp_path / "tiny" / "eval" / name
        d.mkdir(parents=True)
        (d / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return tmp_path


def test_views_display_once_and_return_nothing(evaluated, monkeypatch):
    shown = []
    monkeypatch.setattr(explore, "display", shown.append)
    cfg = explore.ExploreConfig(interactive=True)
    assert explore.completions_explorer(cfg) is None
    assert explore.comparison_view(cfg) is None
    widgets = [w for w in shown if type(w).__name__ == "VBox"]  # (the rest: HTML shown inside the widgets' outputs)
    assert len(widgets) == 2  # one widget per view; the cell's result is None, so nothing renders twice
    tasks = [explore.load_tasks("synthetic", "test")[0]]
    assert explore.task_browser(tasks, interactive=True) is None


def test_html_highlights_code_and_colours_verdicts():
    html = explore.render_samples_html("sft", ROWS, {"pass": 1.0, "length": {"alpha": 0.01}})
    assert explore.COLOURS["passed"] in html and explore.COLOURS["failed"] in html
    assert "<span style=" in html and "return" in html  # pygments' inline styles
    assert "x <b>" not in html and "&lt;" in html  # the model's text is escaped, never rendered as HTML
    assert "+0.999" in html and "-0.003" in html  # pass - 0.01 * tokens / 100, from codelib.engine.rewards


def test_rewards_come_from_the_rewards_module():
    assert explore.sample_rewards(ROWS, {"pass": 1.0}) == [1.0, 0.0]
    with pytest.raises(ValueError, match="unknown reward"):
        explore.ExploreConfig(rewards={"passs": 1.0})


def test_markdown_placeholders_are_escaped():
    from codelib.plumbing.params import REPO_ROOT

    for path in (REPO_ROOT / "notebooks").glob("*.ipynb"):
        for cell in json.loads(path.read_text())["cells"]:
            if cell["cell_type"] == "markdown":
                text = "".join(cell["source"])
                outside_code = "".join(text.split("`")[::2])
                assert "<profile>" not in outside_code, f"{path.name}: <profile> would render as an HTML tag"


def test_the_prompt_stands_beside_the_completions(evaluated, monkeypatch, capsys):
    task = explore.load_tasks("synthetic", "test")[0]
    for name in ("sft", "grpo"):
        d = evaluated / "tiny" / "eval" / name
        rows = [{**r, "task_id": task.task_id} for r in ROWS]
        (d / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (d / "summary.json").write_text(json.dumps({"settings": {"dataset": "synthetic", "split": "test"}}))
    assert explore.load_prompts("tiny", "sft")[task.task_id] == task.prompt
    page = explore.render_task_html(task.task_id, task.prompt, "sft", rows, {"pass": 1.0})
    assert "grid-template-columns" in page and "prompt" in page and "50%" in page
    cfg = explore.ExploreConfig(interactive=False)
    explore.completions_explorer(cfg)
    explore.comparison_view(cfg)
    out = capsys.readouterr().out
    assert out.count("--- prompt") == 2 and task.prompt.splitlines()[0] in out


def test_comparison_has_a_picker_for_each_side_and_full_width(evaluated, monkeypatch):
    shown = []
    monkeypatch.setattr(explore, "display", shown.append)
    explore.comparison_view(explore.ExploreConfig(interactive=True))
    box = next(w for w in shown if type(w).__name__ == "VBox")
    pickers = box.children[0].children
    assert [p.description for p in pickers] == ["left", "right"]
    assert {p.value for p in pickers} == {"sft", "grpo"}
    sides = box.children[-1].children
    assert [s.layout.width for s in sides] == ["50%", "50%"] and box.layout.width == "100%"
    pickers[1].value = "sft"  # switching a side re-ranks the tasks and redraws, no error
    assert box.children[1].options


@pytest.mark.slow
def test_headless_under_plain_papermill(tmp_path, monkeypatch):
    """papermill alone (no pipeline, no CODELIB_HEADLESS) is detected: widgets would be dead reprs there."""
    import nbformat
    import papermill as pm

    monkeypatch.delenv("CODELIB_HEADLESS", raising=False)
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell("x = 1")
    params.metadata["tags"] = ["parameters"]
    nb.cells = [
        params,
        nbformat.v4.new_code_cell("from codelib.plumbing.progress import headless\nprint('HEADLESS', headless())"),
    ]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, tmp_path / "in.ipynb")
    for parameters in ({"x": 2}, None):
        pm.execute_notebook(
            str(tmp_path / "in.ipynb"), str(tmp_path / "out.ipynb"), parameters=parameters, progress_bar=False
        )
        out = nbformat.read(tmp_path / "out.ipynb", as_version=4)
        assert "HEADLESS True" in out.cells[-1].outputs[0].text


def test_the_explorer_filters_on_tampering_samples(evaluated, monkeypatch, capsys):
    rows = [
        *ROWS,
        {**ROWS[1], "task_id": "t/1", "tamper": "seccomp,signal", "sample": 0},
        {**ROWS[0], "task_id": "t/2"},
    ]
    d = evaluated / "tiny" / "eval" / "sft"
    (d / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    samples = explore.load_samples("tiny", "sft")
    assert explore.tampering_tasks(samples) == ["t/1"]
    explore.completions_explorer(explore.ExploreConfig(interactive=False, tampering=True))
    out = capsys.readouterr().out
    assert "== t/1" in out and "tampering: seccomp,signal" in out
    assert "tampering: seccomp,signal" in explore.render_samples_html("sft", samples["t/1"], {"pass": 1.0})
    shown = []
    monkeypatch.setattr(explore, "display", shown.append)
    explore.completions_explorer(explore.ExploreConfig(interactive=True))
    box = next(w for w in shown if type(w).__name__ == "VBox")
    ckpt, task, probing = box.children[0].children
    assert list(task.options) == ["t/0", "t/1", "t/2"]
    probing.value = True  # the checkbox narrows the task picker to tampering tasks
    assert list(task.options) == ["t/1"] and task.value == "t/1"
    probing.value = False
    assert list(task.options) == ["t/0", "t/1", "t/2"]
