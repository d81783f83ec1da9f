"""The RL algorithms of the one online engine, as registered parts (verl's `core_algos` layout).

An online algorithm is a row of `ALGORITHMS`: an advantage estimator, a policy loss and a loss aggregation, each a
function registered by name in `advantages` or `losses`. The engine (`codelib.trainers.online`) samples, judges and
scores the same way for all of them; only these parts differ. A new algorithm is one function (if it needs a new
part), one registry line and one params file.

What enters: rewards [N] (task i's G samples are rows i*G .. i*G+G-1), per-token log-probs [N, T-1] under the
current policy, the policy that sampled (old) and the start policy (ref), the completion mask [N, T-1] and, with a
critic, values [N, T-1]. What leaves: advantages, a scalar loss, and the statistics every step logs (clip fractions
low/high, ratio mean/max, the KL estimate).
"""

from __future__ import annotations

from dataclasses import dataclass

from codelib.algorithms.advantages import ADVANTAGES, AdvantageInput, compute_advantages
from codelib.algorithms.losses import (
    AGGREGATIONS,
    KL_ESTIMATORS,
    KL_PLACEMENTS,
    POLICY_LOSSES,
    aggregate,
    kl_estimate,
    policy_loss,
)


@dataclass(frozen=True)
class Algorithm:
    advantage: str  # a name in ADVANTAGES
    policy_loss: str  # a name in POLICY_LOSSES
    loss_agg: str  # a name in AGGREGATIONS
    label: str  # how tables and figures name it
    paper: str  # where it comes from


# name -> parts. The params file names the algorithm (`algorithm:`); any part it sets itself overrides the row's.
ALGORITHMS: dict[str, Algorithm] = {
    "reinforce": Algorithm("reinforce", "pg", "seq-mean-token-sum", "REINFORCE", "Williams 1992"),
    "rloo": Algorithm("rloo", "pg", "seq-mean-token-sum", "RLOO", "Kool et al. 2019; Ahmadian et al. 2024"),
    "ppo": Algorithm("gae", "clip", "token-mean", "PPO (value head)", "Schulman et al. 2017"),
    "ppo_no_critic": Algorithm("batch", "clip", "token-mean", "PPO (batch-normalised A)", "Schulman et al. 2017"),
    "reinforce_pp": Algorithm("reinforce_pp", "clip", "token-mean", "REINFORCE++", "Hu 2025"),
    "reinforce_pp_baseline": Algorithm(
        "reinforce_pp_baseline", "clip", "token-mean", "REINFORCE++-baseline", "Hu 2025"
    ),
    "grpo": Algorithm("grpo", "clip", "seq-mean-token-mean", "GRPO", "Shao et al. 2024"),
    "dr_grpo": Algorithm("dr_grpo", "clip", "seq-mean-token-sum-norm", "Dr. GRPO", "Liu et al. 2025"),
    "dapo": Algorithm("grpo", "clip", "token-mean", "DAPO", "Yu et al. 2025"),
    "gspo": Algorithm("grpo", "gspo", "seq-mean-token-mean", "GSPO", "Zheng et al. 2025"),
    "cispo": Algorithm("grpo", "cispo", "token-mean", "CISPO", "MiniMax 2025"),
}


def parts_of(name: str, advantage: str = "", loss: str = "", agg: str = "") -> tuple[str, str, str]:
    """(advantage, policy_loss, loss_agg) of a registered algorithm, each replaced by the given one when set."""
    if name not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {name!r}; registered: {', '.join(ALGORITHMS)}")
    a = ALGORITHMS[name]
    parts = (advantage or a.advantage, loss or a.policy_loss, agg or a.loss_agg)
    for value, table, what in zip(
        parts, (ADVANTAGES, POLICY_LOSSES, AGGREGATIONS), ("advantage", "policy_loss", "loss_agg"), strict=True
    ):
        if value not in table:
            raise ValueError(f"unknown {what} {value!r}; use one of {', '.join(table)}")
    return parts


__all__ = [
    "ADVANTAGES",
    "AGGREGATIONS",
    "ALGORITHMS",
    "KL_ESTIMATORS",
    "KL_PLACEMENTS",
    "POLICY_LOSSES",
    "AdvantageInput",
    "Algorithm",
    "aggregate",
    "compute_advantages",
    "kl_estimate",
    "parts_of",
    "policy_loss",
]
