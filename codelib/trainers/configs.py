"""The Config fields the training stages share, declared once: `StageConfig` (every stage), `SamplingConfig` (the
stages that sample and judge completions), `TrainEvalConfig` (+ held-out evaluation during training, `keep`),
`OnlineConfig` (+ the online loops' rollout and KL fields). Each trainer's `Config` extends one of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from codelib.algorithms.losses import KL_ESTIMATORS
from codelib.engine import rewards
from codelib.engine.rollout import TASK_ORDERS
from codelib.plumbing.params import run_dir
from codelib.policy.models import DEFAULT_TARGETS


@dataclass
class StageConfig:
    """The fields every training stage has (params/<profile>/NN_<stage>.yaml)."""

    profile: str = "tiny"  # checkpoints/<profile>/<stage>/
    stage: str = "stage"  # run directory name
    init: str = "checkpoints/tiny/sft"  # the starting policy: adapter dir (merged first), model dir, hub id or "tiny"
    dataset: str = "synthetic"  # training tasks (a codelib.tasks dataset)
    split: str = "train"  # the dataset's split
    limit: int = 0  # 0 for every task of the split
    steps: int = 100  # optimizer steps (RL stages: rollout steps, each with its minibatch updates)
    learning_rate: float = 1e-3  # AdamW learning rate
    max_grad_norm: float = 1.0  # gradient clipping
    lora_r: int = 16  # LoRA rank
    lora_alpha: int = 32  # LoRA scale numerator (the update is scaled by lora_alpha / lora_r)
    lora_dropout: float = 0.0  # 0 keeps training forward passes identical to the sampling policy
    target_modules: list[str] = field(default_factory=lambda: list(DEFAULT_TARGETS))  # the layers LoRA adapts
    modules_to_save: list[str] = field(default_factory=list)  # also trained in full, e.g. ["norm"]: every RMSNorm
    load_in_4bit: bool = False  # QLoRA: 4-bit NF4 base (needs CUDA)
    save_every: int = 25  # a resumable checkpoint every N steps
    seed: int = 0  # training seed
    threads: int = 0  # torch CPU threads; 0 for torch's default
    report_to: str = "tensorboard"  # "none" | "tensorboard" | "wandb"
    processes: int = 1  # >1: the notebook starts `accelerate launch` with this many processes (live log)

    def __post_init__(self):
        if self.steps <= 0:
            raise ValueError(f"steps must be positive; you gave {self.steps}")
        if self.lora_r <= 0:
            raise ValueError(f"lora_r must be positive; you gave {self.lora_r}")
        if self.save_every <= 0:
            raise ValueError(f"save_every must be positive; you gave {self.save_every}")
        if self.report_to not in ("none", "tensorboard", "wandb"):
            raise ValueError(f"report_to must be none, tensorboard or wandb; you gave {self.report_to!r}")

    @property
    def run_dir(self) -> Path:
        return run_dir(self.profile, self.stage)


@dataclass
class SamplingConfig(StageConfig):
    """+ the fields of the stages that sample completions and judge them in the sandbox."""

    rewards: dict[str, float | dict] = field(default_factory=lambda: {"pass": 1.0})  # name -> weight or {weight, args}
    temperature: float = 1.0  # sampling temperature
    top_p: float = 1.0  # nucleus sampling
    max_new_tokens: int = 64  # generation budget per completion
    workers: int = 2  # sandbox workers
    timeout_s: float = 5.0  # wall-clock limit per program

    def __post_init__(self):
        super().__post_init__()
        if self.temperature <= 0:
            raise ValueError(f"{type(self).__module__.split('.')[-1]} samples: temperature must be > 0")
        rewards.make_rewards(self.rewards)  # an unknown reward or argument fails here, naming it


@dataclass
class TrainEvalConfig(SamplingConfig):
    """+ held-out evaluation during training, and which adapter the stage leaves behind."""

    eval_every: int = 0  # held-out pass@1 every N steps (and at the last step); 0 for none
    eval_split: str = "test"  # the held-out split of `dataset` evaluated during training
    eval_limit: int = 100  # the first N tasks of eval_split (a fixed subset); 0 for all
    eval_samples: int = 2  # samples per eval task (T 0.8, seed 1234, as the eval stage samples)
    keep: str = "last"  # "last" | "best": the adapter the stage leaves (best: highest eval pass@1, needs eval_every)

    def __post_init__(self):
        super().__post_init__()
        if self.keep not in ("last", "best"):
            raise ValueError(f"keep must be 'last' or 'best'; you gave {self.keep!r}")
        if self.keep == "best" and self.eval_every <= 0:
            raise ValueError("keep: best picks the adapter by held-out pass@1: set eval_every > 0 (e.g. 25)")
        if self.eval_every < 0 or self.eval_limit < 0 or self.eval_samples < 1:
            raise ValueError("eval_every and eval_limit must be >= 0 and eval_samples >= 1")


@dataclass
class OnlineConfig(TrainEvalConfig):
    """+ the options of the online engine's plumbing (`OnlineRun`): a KL to the start policy and dynamic sampling."""

    batch_size: int = 16  # tasks per step
    samples_per_task: int = 1  # completions per task (a group when >= 2)
    kl_coef: float = 0.0  # beta: weight of the KL to the start policy (placement: the engine's kl_placement)
    kl_estimator: str = "k3"  # k1 | k2 | k3 (Schulman 2020); k3 is GRPO's
    dynamic_sampling: bool = False  # DAPO: drop groups whose accuracy is uniform (all pass / all fail), refill
    max_refills: int = 4  # dynamic sampling: at most this many extra rollout batches per step
    shared_prefix: bool = False  # update forwards run each distinct prompt once (faster; floats move ~1e-5)
    kl_every: int = 1  # with kl_coef 0 the KL to the start policy is only logged: every N steps (0: never)
    task_order: str = "independent"  # independent: each step draws its tasks | epoch: shuffled passes (TRL's order)

    def __post_init__(self):
        super().__post_init__()
        if self.kl_estimator not in KL_ESTIMATORS:
            raise ValueError(f"unknown kl_estimator {self.kl_estimator!r}; use one of {', '.join(KL_ESTIMATORS)}")
        if self.kl_coef < 0:
            raise ValueError(f"kl_coef must be >= 0; you gave {self.kl_coef}")
        if self.dynamic_sampling and self.samples_per_task < 2:
            raise ValueError("dynamic_sampling drops groups of uniform accuracy: it needs samples_per_task >= 2")
        if self.max_refills < 0:
            raise ValueError(f"max_refills must be >= 0; you gave {self.max_refills}")
        if self.kl_every < 0:
            raise ValueError(f"kl_every must be >= 0 (0: the KL is never logged); you gave {self.kl_every}")
        if self.task_order not in TASK_ORDERS:
            raise ValueError(f"task_order must be one of {', '.join(TASK_ORDERS)}; you gave {self.task_order!r}")
