"""Progress of long loops, shown where the reader is: a live bar in JupyterLab, a bar in a terminal, and one compact
line every so often when nobody can watch a bar (a notebook run by papermill or the pipeline, whose terminal shows
the lines as they come).

    from codelib.plumbing.progress import steps, compact

    bar = steps(range(start, cfg.steps), total=cfg.steps, initial=start, desc="grpo")
    for step in bar:
        row = train_step(...)
        bar.set_postfix_str(compact(row), refresh=False)   # reward 0.42 · pass 38% · len 41 · kl 0.003

`bar(...)` takes tqdm's arguments (`total`, `desc`, `unit`, `disable`, ...), so
`from codelib.plumbing.progress import bar as tqdm` replaces `tqdm.auto.tqdm` in a loop that has one. Headless, a
line is printed at most every `$CODELIB_PROGRESS_S` seconds (default 20) and at the end, each one line: `grpo: 40/250 (16%) 1:24<7:21, 1.9 s/step
· reward 0.42 · pass 38%`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from pathlib import Path

from tqdm import tqdm as text_tqdm

# the metrics a compact line shows, in this order: (key, label, shown in %)
COMPACT = (
    ("reward_mean", "reward", False),
    ("pass_rate", "pass", True),
    ("loss", "loss", False),
    ("completion_len", "len", False),
    ("kl", "kl", False),
    ("clip_frac", "clip", True),
)


def under_papermill() -> bool:
    """True in a kernel that no interactive front end started: papermill's injected-parameters cell is in the input
    history, or the kernel was launched by papermill (or nbclient, nbconvert --execute) rather than by JupyterLab,
    whose server names the notebook in $JPY_SESSION_NAME, or by VS Code."""
    try:
        from IPython import get_ipython

        ip = get_ipython()
    except ImportError:
        return False
    if ip is None or "IPKernelApp" not in ip.config:
        return False  # a terminal IPython or plain Python: no kernel, no papermill
    if any(isinstance(s, str) and s.startswith("# Parameters\n") for s in ip.user_ns.get("In") or []):
        return True
    if os.environ.get("JPY_SESSION_NAME"):
        return False
    try:
        if b"papermill" in Path(f"/proc/{os.getppid()}/cmdline").read_bytes():
            return True
    except OSError:
        pass
    return not any(k.startswith("VSCODE") for k in os.environ)


HEADLESS_ENV = {  # what the pipeline and studies set for the kernels they start (nobody watches them live)
    "CODELIB_HEADLESS": "1",  # widgets print, bars print lines (this module, codelib.reports.explore)
    # the libraries' own bars would be widgets there, saved in the executed notebook as their first state
    # ("Loading weights: 0%| 0/38"): transformers' and the hub's, and datasets' map/filter bars
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
}


def headless(interactive: bool = True) -> bool:
    """True when no one can interact with widgets or watch a bar: asked for (`interactive=False`), $CODELIB_HEADLESS
    set (the pipeline sets it), or a kernel run by plain papermill."""
    return not interactive or os.environ.get("CODELIB_HEADLESS", "") not in ("", "0") or under_papermill()


def in_notebook() -> bool:
    """A live Jupyter kernel (a front end may render widgets)."""
    try:
        from IPython import get_ipython

        return get_ipython() is not None and "IPKernelApp" in get_ipython().config
    except ImportError:
        return False


class _Lines:
    """A file for tqdm that turns its carriage-return redraws into whole lines (one per refresh)."""

    def __init__(self, stream):
        self.stream = stream
        self.last = ""
        self.armed = False  # tqdm draws the bar once as it is created ("0/250 (0%)"): noise in a log, not written

    def write(self, s: str) -> None:
        if not self.armed:
            return
        text = s.replace("\r", "").strip()
        count = text.split(" (")[0]  # "grpo: 40/250": closing a bar redraws its last count once more
        if text and count != self.last:
            self.last = count
            self.stream.write(text + "\n")
            self.stream.flush()

    def flush(self) -> None:
        self.stream.flush()


def interval_s() -> float:
    try:
        return float(os.environ.get("CODELIB_PROGRESS_S", "20"))
    except ValueError:
        return 20.0


def bar(iterable: Iterable | None = None, total: int | None = None, desc: str | None = None, **kwargs):
    """A tqdm progress bar of the right kind: a widget in JupyterLab, text in a terminal, a line every
    `interval_s()` seconds when headless (papermill, the pipeline, a log file)."""
    if in_notebook() and not headless():
        from tqdm.auto import tqdm

        return tqdm(iterable, total=total, desc=desc, **kwargs)
    if not in_notebook() and sys.stderr.isatty() and not headless():
        return text_tqdm(iterable, total=total, desc=desc, dynamic_ncols=True, **kwargs)
    kwargs.setdefault("mininterval", interval_s())
    kwargs.setdefault("maxinterval", max(interval_s(), 10.0))
    fmt = "{desc}: {n_fmt}/{total_fmt} ({percentage:.0f}%) {elapsed}<{remaining}, {rate_fmt}{postfix}"
    lines = _Lines(sys.stdout)
    made = text_tqdm(
        iterable,
        total=total,
        desc=desc or "progress",
        file=lines,
        ascii=True,
        bar_format=fmt if total else "{desc}: {n_fmt} {elapsed}, {rate_fmt}{postfix}",
        **kwargs,
    )
    lines.armed = True  # from here on: a line per interval and the last one
    return made


def steps(iterable: Iterable | None = None, total: int | None = None, desc: str = "train", **kwargs):
    """`bar` over training steps (unit "step"); `initial=` a resumed run's first step."""
    kwargs.setdefault("unit", "step")
    return bar(iterable, total=total, desc=desc, **kwargs)


def _percent(v: float) -> str:
    """Whole percents, but two significant digits under 1%: a clip that binds on 0.05% of tokens is not shown as 0%."""
    return f"{100 * v:.0f}%" if v == 0 or abs(v) >= 0.01 else f"{100 * v:.2g}%"


def compact(row: dict, keys=COMPACT) -> str:
    """A metrics row as a short postfix: `reward 0.42 · pass 38% · len 41`; a key missing or null is left out."""
    parts = []
    for key, label, percent in keys:
        v = row.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v:
            parts.append(f"{label} {_percent(v)}" if percent else f"{label} {v:.3g}")
    return " · ".join(parts)


# the keys a TRL trainer's log rows carry that a compact line shows
TRAINER_KEYS = (
    ("loss", "loss", False),
    ("mean_token_accuracy", "acc", True),
    ("rewards/margins", "margin", False),
    ("rewards/accuracies", "pairs right", True),
    ("reward", "reward", False),
    ("kl", "kl", False),
)


def trainer_progress(desc: str):
    """A transformers TrainerCallback that shows a Trainer's steps with `steps` (and its last log as the postfix)."""
    from transformers import TrainerCallback

    class Progress(TrainerCallback):
        bar = None

        def on_train_begin(self, args, state, control, **kwargs):
            if state.is_world_process_zero:
                self.bar = steps(total=state.max_steps, initial=state.global_step, desc=desc)

        def on_step_end(self, args, state, control, **kwargs):
            if self.bar is not None:
                self.bar.update(state.global_step - self.bar.n)

        def on_log(self, args, state, control, logs=None, **kwargs):
            text = compact(logs or {}, TRAINER_KEYS)
            if self.bar is not None and text:  # the end-of-training log (train_loss, ...) keeps the last metrics
                self.bar.set_postfix_str(text, refresh=False)

        def on_train_end(self, args, state, control, **kwargs):
            if self.bar is not None:
                self.bar.close()
                self.bar = None

    return Progress()


def use_progress(trainer, desc: str):
    """Replace a transformers Trainer's own progress display with `trainer_progress`: a widget in JupyterLab, one
    line per interval headless. Its own display is a bar in a terminal, a dict printed per log when that bar is
    disabled, and in a kernel a second bar with a table of every logged loss (in JupyterLab beside ours; in an
    executed report a long table before the curves that show the same numbers). Returns the trainer."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    callbacks = [ProgressCallback, PrinterCallback]
    try:  # transformers' notebook module imports IPython: without it, it never adds its notebook callback either
        from transformers.utils.notebook import NotebookProgressCallback

        callbacks.append(NotebookProgressCallback)
    except ImportError:
        pass
    for callback in callbacks:
        trainer.remove_callback(callback)
    trainer.add_callback(trainer_progress(desc))
    return trainer
