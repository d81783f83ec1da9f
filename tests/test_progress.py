"""Progress: headless, a bar becomes one compact line per interval (what the pipeline streams to the terminal); a
metric that is missing or null is left out of the line, never shown as 0."""

from __future__ import annotations

from codelib.plumbing import progress


def test_headless_bar_prints_whole_compact_lines(monkeypatch, capsys):
    monkeypatch.setenv("CODELIB_HEADLESS", "1")
    monkeypatch.setenv("CODELIB_PROGRESS_S", "0")
    bar = progress.steps(range(4), total=4, desc="grpo")
    for _ in bar:
        bar.set_postfix_str(progress.compact({"reward_mean": 0.4213, "pass_rate": 0.38, "kl": None}), refresh=False)
    out = capsys.readouterr().out
    lines = out.strip().splitlines()
    assert lines[-1].startswith("grpo: 4/4 (100%)") and "reward 0.421 · pass 38%" in lines[-1]
    assert "\r" not in out and "kl" not in out
    assert len([ln for ln in lines if ln.startswith("grpo: 4/4")]) == 1  # closing does not repeat the last count


def test_compact_skips_absent_and_non_numbers():
    row = {"loss": 1.5, "pass_rate": float("nan"), "kl": None, "clip_frac": 0.125, "completion_len": True}
    assert progress.compact(row) == "loss 1.5 · clip 12%"


def test_plain_python_is_not_a_notebook_and_not_papermill(monkeypatch):
    monkeypatch.delenv("CODELIB_HEADLESS", raising=False)
    assert not progress.in_notebook() and not progress.under_papermill()
    assert not progress.headless() and progress.headless(interactive=False)
