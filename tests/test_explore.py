"""The explorer: one display per view (nothing returned for the cell to render again), highlighted code, coloured
verdicts, rewards from codelib.rewards, and escaped <placeholders> in the generated notebooks' markdown."""

import json

import pytest

from codelib import explore

ROWS = [
    {"task_id": "t/0", "sample": 0, "completion": "    return x + 1\n", "code": "    return x + 1\n",
     "status": "passed", "passed": True, "detail": "", "n_tokens": 10},
    {"task_id": "t/0", "sample": 1, "completion": "    return x <b>\n", "code": "    return x <b>\n",
     "status": "failed", "passed": False, "detail": "AssertionError", "n_tokens": 30},
]  # fmt: skip


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
    assert "+0.999" in html and "-0.003" in html  # pass - 0.01 * tokens / 100, from codelib.rewards


def test_rewards_come_from_the_rewards_module():
    assert explore.sample_rewards(ROWS, {"pass": 1.0}) == [1.0, 0.0]
    with pytest.raises(ValueError, match="unknown reward"):
        explore.ExploreConfig(rewards={"passs": 1.0})


def test_markdown_placeholders_are_escaped():
    from codelib.params import REPO_ROOT

    for path in (REPO_ROOT / "notebooks").glob("*.ipynb"):
        for cell in json.loads(path.read_text())["cells"]:
            if cell["cell_type"] == "markdown":
                text = "".join(cell["source"])
                outside_code = "".join(text.split("`")[::2])
                assert "<profile>" not in outside_code, f"{path.name}: <profile> would render as an HTML tag"
