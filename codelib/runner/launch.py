"""Start a trainer from a notebook: in the kernel (one process) or as `accelerate launch` (several), live log.

    from codelib import launch
    run = launch.train("codelib.trainers.grpo", cfg, processes=2)

With processes=1 it calls `train(cfg)` in the kernel. With more, it writes cfg to a params file, starts
`accelerate launch --num_processes N -m <module> <params>` as a subprocess, streams its output line by line into
the notebook while it runs, and returns the run directory when it exits (raising with the tail of the log if it
fails). `config` names a file of params/accelerate/ (default: multi_gpu with CUDA, cpu_2proc without).
"""

from __future__ import annotations

import collections
import importlib
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import yaml

from codelib.plumbing.params import REPO_ROOT, config_to_dict


def command(module: str, params: str | Path, processes: int, config: str | None = None) -> list[str]:
    """The `accelerate launch` command line for a trainer module and a params file."""
    config = config or ("multi_gpu" if torch.cuda.is_available() else "cpu_2proc")
    path = Path(config) if config.endswith(".yaml") else REPO_ROOT / "params" / "accelerate" / f"{config}.yaml"
    if not path.exists():
        raise FileNotFoundError(f"no accelerate config {path}; see params/accelerate/")
    return [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(path),
        "--num_processes",
        str(processes),
        "-m",
        module,
        str(params),
    ]


def train(module: str, cfg, processes: int = 1, config: str | None = None, echo=print) -> Path:
    """Run `module.train(cfg)` here (processes=1) or under accelerate with a live log; returns the run dir."""
    mod = importlib.import_module(module)
    if processes <= 1:
        return mod.train(cfg)
    params = Path(tempfile.mkdtemp(prefix="codelib-launch-")) / "params.yaml"
    params.write_text(yaml.safe_dump(config_to_dict(cfg)))
    cmd = command(module, params, processes, config)
    echo("$ " + " ".join(cmd[1:]))
    tail: collections.deque[str] = collections.deque(maxlen=40)
    with subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1, cwd=REPO_ROOT
    ) as proc:
        for line in proc.stdout:
            tail.append(line.rstrip())
            echo(line.rstrip())
    if proc.returncode != 0:
        raise RuntimeError(f"{module} under accelerate exited with {proc.returncode}:\n" + "\n".join(tail))
    return cfg.run_dir
