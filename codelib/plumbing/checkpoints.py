"""Checkpoints of our own loops that resume exactly: trainable weights, optimizer, RNG states, step.

A checkpoint records a fingerprint of the settings that shape training; one written under other settings, or past
the step a run now stops at, is set aside (`checkpoint.previous`) and the run starts over. It also records torch's
thread count: a run resumed at another count goes on, and says that its floats no longer match an uninterrupted run's.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import random
import shutil
from pathlib import Path

import torch

from codelib.plumbing.paths import atomic_write_json
from codelib.plumbing.threads import note_resume

# settings that may change between a stop and a resume (`steps`: a run can be extended)
OPERATIONAL = {"save_every", "report_to", "threads", "processes", "workers", "timeout_s", "steps"}


def config_fingerprint(cfg) -> str:
    """A hash of the settings that shape training (not of how often it saves or how many workers judge)."""
    values = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in OPERATIONAL}
    return hashlib.sha256(json.dumps(values, sort_keys=True, default=str).encode()).hexdigest()[:16]


def save_checkpoint(
    run_dir: Path, model, optimizer, step: int, extra: dict | None = None, extra_modules=None, fingerprint: str = ""
):
    """Trainable weights, optimizer, RNG states and step into run_dir/checkpoint (replaced atomically)."""
    tmp = run_dir / "checkpoint.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    state = {
        "step": step,
        "trainable": {k: v.detach().cpu() for k, v in model.named_parameters() if v.requires_grad},
        "optimizer": optimizer.state_dict(),
        "rng": {"torch": torch.get_rng_state(), "python": random.getstate()},
        "extra": extra or {},
        "modules": {k: m.state_dict() for k, m in (extra_modules or {}).items()},
        "fingerprint": fingerprint,
        "threads": torch.get_num_threads(),
    }
    torch.save(state, tmp / "state.pt")
    old = run_dir / "checkpoint.old"
    shutil.rmtree(old, ignore_errors=True)
    if (run_dir / "checkpoint").exists():
        os.replace(run_dir / "checkpoint", old)
    os.replace(tmp, run_dir / "checkpoint")
    shutil.rmtree(old, ignore_errors=True)


def load_checkpoint(
    run_dir: Path, model, optimizer, extra_modules=None, fingerprint: str = "", max_step: int | None = None
) -> tuple[int, dict]:
    """Restore a checkpoint if there is one: (step to start from, extra); (0, {}) for a fresh run.

    A checkpoint written under other settings (fingerprint differs), or one already past `max_step` (the run now
    asks for fewer steps), is not resumed: it is moved to checkpoint.previous and the run starts over.
    """
    path = run_dir / "checkpoint" / "state.pt"
    if not path.exists():
        path = run_dir / "checkpoint.old" / "state.pt"  # a stop between the two renames
        if not path.exists():
            return 0, {}
    state = torch.load(path, weights_only=False)
    stale = fingerprint and state.get("fingerprint", fingerprint) != fingerprint
    if stale or (max_step is not None and state["step"] > max_step):
        print(
            f"{run_dir}: the checkpoint was written with other settings; starting over (kept as checkpoint.previous)"
        )
        shutil.rmtree(run_dir / "checkpoint.previous", ignore_errors=True)
        os.replace(path.parent, run_dir / "checkpoint.previous")
        return 0, {}
    note_resume(run_dir, state.get("threads"))
    params = dict(model.named_parameters())
    with torch.no_grad():
        for k, v in state["trainable"].items():
            params[k].copy_(v)
    optimizer.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["rng"]["torch"])
    random.setstate(state["rng"]["python"])
    for k, m in (extra_modules or {}).items():
        m.load_state_dict(state["modules"][k])
    return state["step"], state["extra"]


def data_digest(rows) -> str:
    """A hash of a stage's training rows (any JSON-able list): part of a TRL-based run's resume fingerprint."""
    return hashlib.sha256(json.dumps(list(rows), sort_keys=True, default=str).encode()).hexdigest()[:16]


def trl_checkpoints(run_dir: Path) -> list[Path]:
    """A TRL-based run's `checkpoint-N` directories, by step (N)."""
    ckpts = [p for p in run_dir.glob("checkpoint-*") if p.is_dir() and p.name.split("-", 1)[1].isdigit()]
    return sorted(ckpts, key=lambda p: int(p.name.split("-", 1)[1]))


def trl_resume_point(run_dir: Path, fingerprint: str) -> str | None:
    """The `checkpoint-N` directory a TRL-based stage (SFT, DPO, GRPO on TRL) resumes from, or None to start over.

    TRL resumes whatever `checkpoint-N` it finds; ours first checks that the run's checkpoints were written under
    `fingerprint` (its settings and its training rows: a DPO run whose pairs were rebuilt differently is another
    run). Checkpoints written under another fingerprint, or by a run that recorded none, are moved into
    `checkpoint.previous/` and the run starts over. The fingerprint and torch's thread count are recorded
    (`resume.json`) before training; a resume at another thread count says so.
    Under several processes (accelerate, torchrun) every one reads the directory first, then the main one changes
    it, so all of them take the same decision."""
    from accelerate import PartialState

    state = PartialState()
    ckpts = trl_checkpoints(run_dir)
    last = ckpts[-1] if ckpts else None
    stamp = run_dir / "resume.json"
    try:
        recorded = json.loads(stamp.read_text())
    except (OSError, ValueError):
        recorded = {}
    old = recorded.get("fingerprint")
    stale = last is not None and old != fingerprint
    state.wait_for_everyone()
    if state.is_main_process:
        if stale:
            print(
                f"{run_dir}: its checkpoints were written with other settings or training data; starting over (kept "
                "in checkpoint.previous/)"
            )
            previous = run_dir / "checkpoint.previous"
            shutil.rmtree(previous, ignore_errors=True)
            previous.mkdir()
            for p in ckpts:
                os.replace(p, previous / p.name)
        if not stale and last is not None:
            note_resume(run_dir, recorded.get("threads"))
        atomic_write_json(stamp, {"fingerprint": fingerprint, "threads": torch.get_num_threads()})
    state.wait_for_everyone()
    return None if stale or last is None else str(last)


def trainer_state_end(checkpoint: Path) -> int:
    """The step at which a transformers `checkpoint-N` ended its run (its trainer_state.json reached max_steps), else
    0 (not the last checkpoint, or no readable state)."""
    try:
        state = json.loads((checkpoint / "trainer_state.json").read_text())
    except (OSError, ValueError):
        return 0
    step = int(state.get("global_step", 0))
    return step if state.get("max_steps", 0) > 0 and step >= state["max_steps"] else 0
