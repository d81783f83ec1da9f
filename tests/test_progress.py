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
    # a share under 1% keeps two digits (a clip binding on 0.05% of tokens is not "0%"); exactly 0 stays 0%
    assert progress.compact({"clip_frac": 0.00047}) == "clip 0.047%"
    assert progress.compact({"clip_frac": 0.0, "pass_rate": 0.506}) == "pass 51% · clip 0%"


def test_plain_python_is_not_a_notebook_and_not_papermill(monkeypatch):
    monkeypatch.delenv("CODELIB_HEADLESS", raising=False)
    assert not progress.in_notebook() and not progress.under_papermill()
    assert not progress.headless() and progress.headless(interactive=False)


def test_headless_bar_writes_no_line_before_the_first_step(monkeypatch, capsys):
    monkeypatch.setenv("CODELIB_HEADLESS", "1")
    monkeypatch.setenv("CODELIB_PROGRESS_S", "20")  # the default: a loop of a few seconds prints its last line only
    for _ in progress.steps(range(3), total=3, desc="sft"):
        pass
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sft: 3/3 (100%)")  # no "sft: 0/3 (0%)" first


def _trainer_with(callbacks):
    from transformers.trainer_callback import CallbackHandler

    class Trainer:  # what use_progress touches of a transformers Trainer
        def __init__(self):
            self.callback_handler = CallbackHandler(callbacks, None, None, None, None)

        def remove_callback(self, callback):
            self.callback_handler.remove_callback(callback)

        def add_callback(self, callback):
            self.callback_handler.add_callback(callback)

    return Trainer()


def _names(trainer):
    return [type(c).__name__ for c in trainer.callback_handler.callbacks]


def test_headless_trainer_keeps_our_progress_only(monkeypatch):
    # a Trainer made in a kernel gets transformers' NotebookProgressCallback: in an executed report, a table of every
    # logged loss before the curves
    from transformers.trainer_callback import DefaultFlowCallback, PrinterCallback
    from transformers.utils.notebook import NotebookProgressCallback

    monkeypatch.setenv("CODELIB_HEADLESS", "1")
    trainer = progress.use_progress(
        _trainer_with([DefaultFlowCallback, NotebookProgressCallback, PrinterCallback]), "dpo"
    )
    assert _names(trainer) == ["DefaultFlowCallback", "Progress"]


def test_interactive_trainer_shows_one_bar(monkeypatch):
    # in JupyterLab, transformers' notebook bar and loss table stood beside our widget: two bars for one run
    from transformers.trainer_callback import DefaultFlowCallback
    from transformers.utils.notebook import NotebookProgressCallback

    monkeypatch.delenv("CODELIB_HEADLESS", raising=False)
    monkeypatch.setattr(progress, "under_papermill", lambda: False)
    trainer = progress.use_progress(_trainer_with([DefaultFlowCallback, NotebookProgressCallback]), "sft")
    assert _names(trainer) == ["DefaultFlowCallback", "Progress"]


def test_a_trainer_without_ipython_installed_gets_our_progress(monkeypatch):
    # transformers' notebook module imports IPython: a GPU image without IPython failed every SFT, DPO and TRL GRPO
    # run at use_progress with "No module named 'IPython'"
    import sys

    from transformers.trainer_callback import DefaultFlowCallback, PrinterCallback

    monkeypatch.setitem(sys.modules, "IPython", None)  # import IPython raises ImportError, as where it is missing
    monkeypatch.delitem(sys.modules, "transformers.utils.notebook", raising=False)
    monkeypatch.setenv("CODELIB_HEADLESS", "1")
    trainer = progress.use_progress(_trainer_with([DefaultFlowCallback, PrinterCallback]), "sft")
    assert _names(trainer) == ["DefaultFlowCallback", "Progress"]


def test_trainer_line_keeps_the_last_metrics_at_the_end(monkeypatch, capsys):
    # the Trainer's last log (train_runtime, train_loss, ...) has none of the keys a line shows: it used to clear them
    from types import SimpleNamespace

    monkeypatch.setenv("CODELIB_HEADLESS", "1")
    callback = progress.trainer_progress("sft")
    state = SimpleNamespace(is_world_process_zero=True, max_steps=2, global_step=0)
    callback.on_train_begin(None, state, None)
    for step, logs in ((1, {"loss": 0.5}), (2, {"loss": 0.25, "mean_token_accuracy": 0.9})):
        state.global_step = step
        callback.on_step_end(None, state, None)
        callback.on_log(None, state, None, logs=logs)
    callback.on_log(None, state, None, logs={"train_runtime": 3.0, "train_loss": 0.4})
    callback.on_train_end(None, state, None)
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("sft: 2/2 (100%)") and last.endswith("loss 0.25 · acc 90%")
