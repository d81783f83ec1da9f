"""Checkpoints of our own loops that resume exactly: trainable weights, optimizer, RNG states, step.

A checkpoint records a fingerprint of the settings that shape training; one written under other settings, or past
the step a run now stops at, is set aside (`checkpoint.previous`) and the run starts over.
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
