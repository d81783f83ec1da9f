"""PPO-Clip from unit-test rewards: a preset of the one online engine (`codelib.trainers.online`).

Per update: roll out a batch, record logp_old under the rollout policy, compute advantages, then `ppo_epochs` passes
of the clipped objective -min(rho A, clip(rho, 1 - eps, 1 + eps_high) A) over the batch's completion tokens
(`token-mean`). `critic: value_head` adds a linear value head on the policy's last hidden state, advantages from
GAE (`gamma`, `lam`; 1 and 1 give A_t = r - V_t) whitened over the batch's tokens, a value loss (coefficient
`value_coef`, optionally clipped by `value_clip`) and `value_trunk` (shared: the value loss also trains the policy's
LoRA trunk; detached: only the head; separate: the critic's own copy of the start model with its own LoRA adapter).
`critic: none` takes `advantage` (batch | group | rloo | reinforce_pp | reinforce_pp_baseline;
`codelib.algorithms.advantages`). `clip_eps_high` is DAPO's clip-higher, `dual_clip` the
dual clip of a negative advantage; `kl_coef` with `kl_placement` loss or reward (REINFORCE++: in the token rewards).

    python -m codelib.trainers.ppo params/tiny/03_ppo.yaml
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from codelib.engine.rewards import PASS_MINUS_LENGTH
from codelib.plumbing.params import main_train
from codelib.trainers import online
from codelib.trainers.online import dropout_active, value_head, value_loss_of  # noqa: F401 - public since PPO had them

ADVANTAGES = ("gae", "batch", "group", "rloo", "reinforce_pp", "reinforce_pp_baseline")


@dataclass
class Config(online.Config):
    stage: str = "ppo"  # run directory name
    algorithm: str = ""  # "" follows critic / advantage: ppo (value head), ppo_no_critic, reinforce_pp, ...
    rewards: dict[str, float | dict] = field(default_factory=lambda: dict(PASS_MINUS_LENGTH))  # pass - 0.01*tokens/100
    batch_size: int = 8  # tasks per rollout batch
    samples_per_task: int = 1  # completions per task in a batch
    ppo_epochs: int = 4  # passes over each rollout batch
    advantage: str = (
        "batch"  # critic none: batch | group | rloo | reinforce_pp | reinforce_pp_baseline; value head: gae
    )
    policy_loss: str = "clip"  # PPO-Clip
    loss_agg: str = "token-mean"  # over every completion token of the (mini)batch

    def __post_init__(self):
        if self.critic == "value_head" and self.advantage in ("batch", "gae"):
            self.advantage = "gae"  # the value head's advantages (params written before GAE say `batch`)
        elif self.critic == "value_head":
            raise ValueError(f"advantage: {self.advantage} is for critic: none (the value head gives GAE's A)")
        if self.advantage not in ADVANTAGES:
            raise ValueError(f"advantage must be one of {', '.join(ADVANTAGES)}; you gave {self.advantage!r}")
        if self.advantage == "group":
            self.advantage = "grpo"
        if self.advantage.startswith("reinforce_pp") and self.kl_coef > 0:
            self.kl_placement = "reward"  # REINFORCE++ folds the KL into its token rewards
        if not self.algorithm:
            pp = self.advantage if self.advantage.startswith("reinforce_pp") else ""
            self.algorithm = "ppo" if self.critic == "value_head" else pp or "ppo_no_critic"
        super().__post_init__()


def train(cfg: Config) -> Path:
    """Run PPO; returns the run directory (adapter, value_head.pt, config.json, metrics.jsonl, checkpoint/)."""
    return online.train(cfg)


if __name__ == "__main__":
    main_train(Config, train)
