"""Run logs: metrics.jsonl (one row per step, the project's record), samples.jsonl, TensorBoard / W&B mirrors.
(The verdict classes live in `codelib.engine.verdicts`; `metrics.verdict_class` & co. still answer.)

Every trainer writes the same keys (loss, reward_mean, reward_std, pass_rate, completion_len, kl, clip_frac,
rewards/<term>/mean, time_s, ...); the TRL trainers through `trainer_callback`, our loops through `MetricsLog`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from transformers import TrainerCallback

# the verdict classes' old home
from codelib.engine.verdicts import VERDICT_CLASSES, class_counts, class_shares, verdict_class  # noqa: F401
from codelib.plumbing.jsonl import append_jsonl, read_jsonl
from codelib.plumbing.paths import atomic_write_text


def report_to(name: str) -> list[str]:
    """TRL's `report_to` for our setting: TensorBoard by default; W&B only when it is installed."""
    if name == "none":
        return []
    if name == "wandb":
        try:
            import wandb  # noqa: F401  (optional extra)
        except ImportError:
            print("report_to: wandb is not installed (pip install wandb); logging to TensorBoard instead")
            return ["tensorboard"]
    return [name]


class MetricsLog:
    """One row per step to metrics.jsonl, mirrored to TensorBoard or W&B when asked."""

    def __init__(self, run_dir: Path, report_to: str = "tensorboard"):
        self.path = run_dir / "metrics.jsonl"
        self.tb = self.wandb = None
        if report_to == "tensorboard":
            try:
                from torch.utils.tensorboard import SummaryWriter  # optional extra: a trimmed install skips it

                self.tb = SummaryWriter(str(run_dir / "tb"))
            except ImportError:
                self.tb = None
        elif report_to == "wandb":
            try:
                import wandb  # optional extra

                self.wandb = wandb.init(project="codelib", dir=str(run_dir), name=run_dir.name, resume="allow")
            except ImportError:
                print("report_to: wandb is not installed (pip install wandb); metrics.jsonl only")

    def log(self, row: dict) -> None:
        append_jsonl(self.path, row)
        step = row.get("step", 0)
        if self.tb is not None:
            for k, v in row.items():
                if k != "step" and isinstance(v, (int, float)):
                    self.tb.add_scalar(k, v, step)
        if self.wandb is not None:
            self.wandb.log(row, step=step)

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()


def trainer_callback(path: Path) -> TrainerCallback:
    """A TrainerCallback appending every log row (loss, lr, grad norm, step, time) to metrics.jsonl (SFT, DPO)."""

    class MetricsCallback(TrainerCallback):
        def __init__(self):
            self.t0 = time.time()

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and state.is_world_process_zero:
                append_jsonl(path, {"step": state.global_step, **logs, "time_s": round(time.time() - self.t0, 3)})

    return MetricsCallback()


def truncate_metrics(path: Path, step: int) -> None:
    """Drop rows past `step` (written after the checkpoint a resumed run starts from)."""
    if path.exists():
        rows = [r for r in read_jsonl(path) if r.get("step", 0) <= step]
        atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in rows))


def append_samples(run_dir: Path, rows: list[dict]) -> None:
    """Append rows to <run>/samples.jsonl (the main process only); a resumed run first drops rows past its step."""
    if rows:
        with open(run_dir / "samples.jsonl", "a", encoding="utf-8") as f:
            f.write("".join(json.dumps(r) + "\n" for r in rows))
