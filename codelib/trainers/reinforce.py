"""REINFORCE and RLOO from unit-test rewards: presets of the one online engine (`codelib.trainers.online`).

Per step: a batch of training tasks, `samples_per_task` completions each from the current policy, judged in the
sandbox, scored with the configured reward (the REINFORCE experiment's `rewards: {pass: 1.0, length: {alpha: 0.01}}`:
reward = pass - alpha * generated_tokens / 100), and loss = -(reward - baseline) * log p(completion | prompt), log p
summed over completion tokens (policy loss `pg`, aggregation `seq-mean-token-sum`). The baseline is none, a moving
average of the batch reward (`baseline: moving_average`), or RLOO's leave-one-out mean of the task's other samples
(`baseline: rloo`, samples_per_task >= 2; Kool et al. 2019; Ahmadian et al. 2024). Only the LoRA parameters train.

    python -m codelib.trainers.reinforce params/tiny/02_reinforce.yaml
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from codelib.engine.rewards import PASS_MINUS_LENGTH
from codelib.plumbing.params import main_train
from codelib.trainers import online

BASELINES = ("moving_average", "none", "rloo")


@dataclass
class Config(online.Config):
    stage: str = "reinforce"  # run directory name
    algorithm: str = ""  # "" follows `baseline`: reinforce, or rloo with baseline rloo
    rewards: dict[str, float | dict] = field(default_factory=lambda: dict(PASS_MINUS_LENGTH))  # pass - 0.01*tokens/100
    batch_size: int = 64  # tasks per step
    samples_per_task: int = 1  # REINFORCE proper samples one completion per task
    baseline: str = "moving_average"  # "moving_average" | "none" | "rloo" (leave-one-out; 2+ samples_per_task)

    def __post_init__(self):
        if self.baseline not in BASELINES:
            raise ValueError(f"baseline must be one of {', '.join(BASELINES)}; you gave {self.baseline!r}")
        if self.baseline == "rloo":
            if self.samples_per_task < 2:
                raise ValueError(
                    "baseline: rloo leaves one sample out of each task's group: set samples_per_task >= 2"
                )
            self.algorithm, self.baseline = self.algorithm or "rloo", "none"
        self.algorithm = self.algorithm or "reinforce"
        super().__post_init__()


def train(cfg: Config) -> Path:
    """Run REINFORCE / RLOO; returns the run directory (adapter, config.json, metrics.jsonl, samples.jsonl)."""
    return online.train(cfg)


if __name__ == "__main__":
    main_train(Config, train)
