"""Advantage estimators, one function each, registered by name in `ADVANTAGES`.

Every estimator takes an `AdvantageInput` and returns advantages [N] (one per completion, broadcast over its tokens)
or [N, T-1] (per token). Rows hold a task's G samples side by side (rows i*G .. i*G+G-1).

- `reinforce`: r - b, b a moving average of the batch reward or none (Williams 1992).
- `rloo`: r_i - mean_{j != i} r_j within the group (Kool et al. 2019; Ahmadian et al. 2024).
- `grpo`: (r_i - mean) / (std + eps) within the group (Shao et al. 2024; std unbiased, as TRL).
- `dr_grpo`: r_i - mean within the group, no std division (Liu et al. 2025).
- `grpo_batch_std`: r_i - group mean, divided by the std of the whole batch's rewards (TRL's scale_rewards=batch).
- `batch`: (r - mean) / (std + eps) over the batch (PPO without a critic).
- `reinforce_pp` / `reinforce_pp_baseline`: per-token returns of r and -beta * KL, normalised over the global
  batch's tokens; the baseline variant subtracts the group mean first (Hu 2025).
- `gae`: generalised advantage estimation on a value head's V_t with one terminal reward (Schulman et al. 2016),
  whitened over the batch's tokens; gamma = lam = 1 gives A_t = r - V_t.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass
class AdvantageInput:
    rewards: torch.Tensor  # [N]
    group_size: int = 1  # G
    mask: torch.Tensor | None = None  # [N, T-1] completion tokens
    eps: float = 1e-6  # std floor
    batch_rewards: torch.Tensor | None = None  # the whole batch's rewards when this rank holds a shard
    baseline: float | None = None  # reinforce: the moving-average baseline (None: no baseline)
    kl: torch.Tensor | None = None  # [N, T-1] detached per-token KL estimate (REINFORCE++'s token rewards)
    kl_coef: float = 0.0  # beta of those token rewards
    batch_stats: tuple[float, float] | None = None  # REINFORCE++: (mean, std) of the global batch's returns
    values: torch.Tensor | None = None  # [N, T-1] V_t under the rollout policy (gae)
    gamma: float = 1.0
    lam: float = 1.0


ADVANTAGES: dict[str, Callable[[AdvantageInput], torch.Tensor]] = {}


def register(name: str):
    def add(fn):
        ADVANTAGES[name] = fn
        return fn

    return add


def compute_advantages(name: str, x: AdvantageInput) -> torch.Tensor:
    if name not in ADVANTAGES:
        raise ValueError(f"unknown advantage estimator {name!r}; use one of {', '.join(ADVANTAGES)}")
    return ADVANTAGES[name](x)


def groups_of(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """[N] -> [N / G, G]; fails naming the fix when N is not a multiple of G."""
    if group_size < 1 or rewards.numel() % group_size:
        raise ValueError(f"{rewards.numel()} rewards do not split into groups of {group_size} samples per task")
    return rewards.reshape(-1, group_size)


@register("reinforce")
def reinforce(x: AdvantageInput) -> torch.Tensor:
    """r - baseline ([N]); the raw reward when there is no baseline (yet)."""
    return x.rewards - x.baseline if x.baseline is not None else x.rewards


@register("rloo")
def rloo(x: AdvantageInput) -> torch.Tensor:
    """A_i = r_i - (1 / (G - 1)) * sum_{j != i} r_j within each task's group of G samples. [N] -> [N]."""
    if x.group_size < 2:
        raise ValueError("RLOO's leave-one-out baseline needs at least 2 samples per task (samples_per_task >= 2)")
    g = groups_of(x.rewards, x.group_size)  # [N/G, G]
    others = (g.sum(-1, keepdim=True) - g) / (x.group_size - 1)  # [N/G, G]: mean of the other G-1 rewards
    return (g - others).reshape(-1)


def _group_centred(x: AdvantageInput) -> tuple[torch.Tensor, torch.Tensor]:
    g = groups_of(x.rewards, x.group_size)  # [N/G, G]
    return g, g - g.mean(-1, keepdim=True)


@register("grpo")
def grpo(x: AdvantageInput) -> torch.Tensor:
    """(r_i - mean_group) / (std_group + eps), std unbiased as in TRL. [N] -> [N]."""
    g, centred = _group_centred(x)
    if x.group_size > 1:
        centred = centred / (g.std(-1, keepdim=True) + x.eps)
    return centred.reshape(-1)


@register("dr_grpo")
def dr_grpo(x: AdvantageInput) -> torch.Tensor:
    """r_i - mean_group (Dr. GRPO drops the std division). [N] -> [N]."""
    return _group_centred(x)[1].reshape(-1)


@register("grpo_batch_std")
def grpo_batch_std(x: AdvantageInput) -> torch.Tensor:
    """(r_i - mean_group) / (std of the whole batch's rewards + eps) (TRL's scale_rewards: batch). [N] -> [N]."""
    batch = x.rewards if x.batch_rewards is None else x.batch_rewards
    return _group_centred(x)[1].reshape(-1) / (batch.std() + x.eps)


@register("batch")
def batch(x: AdvantageInput) -> torch.Tensor:
    """(r - mean) / (std + eps) over the batch (population std). [N] -> [N]. All-equal rewards give zeros."""
    b = x.rewards if x.batch_rewards is None else x.batch_rewards
    return (x.rewards - b.mean()) / (b.std(unbiased=False) + x.eps)


def token_stats(values: torch.Tensor, mask: torch.Tensor) -> tuple[float, float]:
    """(mean, population std) of values over the mask's tokens."""
    n = mask.sum().clamp(min=1)
    mean = (values * mask).sum() / n
    std = (((values - mean) * mask) ** 2).sum().div(n).sqrt()
    return float(mean), float(std)


def reinforce_pp_returns(
    rewards: torch.Tensor, kl: torch.Tensor, mask: torch.Tensor, beta: float, group_size: int = 0
) -> torch.Tensor:
    """REINFORCE++'s per-token returns before normalisation ([N, T-1], zero off the completion): token rewards
    r_t = -beta * kl_t plus the sequence's reward at its last token; G_t = sum_{s >= t} r_s (gamma = 1).
    group_size > 0: the group's mean reward subtracted from r first (REINFORCE++-baseline)."""
    if group_size:
        rewards = rewards - groups_of(rewards, group_size).mean(-1).repeat_interleave(group_size)
    token_r = -beta * kl.detach() * mask  # [N, T-1]
    last = mask.cumsum(-1).argmax(-1)  # [N]: index of each row's last completion token
    token_r = token_r.scatter_add(-1, last[:, None], rewards[:, None].to(token_r.dtype))
    return token_r.flip(-1).cumsum(-1).flip(-1) * mask  # [N, T-1]: sum of the rewards from t on


def _reinforce_pp(x: AdvantageInput, group_size: int) -> torch.Tensor:
    kl = x.kl if x.kl is not None else torch.zeros_like(x.mask, dtype=torch.float32)
    returns = reinforce_pp_returns(x.rewards, kl, x.mask, x.kl_coef, group_size)
    mean, std = x.batch_stats if x.batch_stats is not None else token_stats(returns, x.mask)
    return (returns - mean) / (std + x.eps) * x.mask


@register("reinforce_pp")
def reinforce_pp(x: AdvantageInput) -> torch.Tensor:
    """REINFORCE++ per-token advantages, normalised over every completion token of the batch. [N, T-1]."""
    return _reinforce_pp(x, 0)


@register("reinforce_pp_baseline")
def reinforce_pp_baseline(x: AdvantageInput) -> torch.Tensor:
    """REINFORCE++-baseline: the group's mean reward subtracted before the token returns. [N, T-1]."""
    return _reinforce_pp(x, x.group_size)


def gae_raw(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float, lam: float):
    """(advantages, returns) [N, T-1] of GAE before whitening: one terminal reward at each row's last completion
    token, V = 0 past it; delta_t = r_t + gamma V_{t+1} - V_t, A_t = sum_l (gamma lam)^l delta_{t+l}; returns
    A_t + V_t are the value targets. gamma = lam = 1 is A_t = r - V_t exactly."""
    values = values * mask
    if gamma == 1.0 and lam == 1.0:
        adv = (rewards[:, None] - values) * mask  # the telescoped sum, without its rounding
        return adv, rewards[:, None] * mask
    last = mask.cumsum(-1).argmax(-1)
    token_r = torch.zeros_like(values).scatter_(-1, last[:, None], rewards[:, None].to(values.dtype))
    adv = torch.zeros_like(values)
    running = torch.zeros_like(values[:, 0])
    for t in range(values.shape[1] - 1, -1, -1):
        next_v = values[:, t + 1] if t + 1 < values.shape[1] else torch.zeros_like(running)
        delta = token_r[:, t] + gamma * next_v - values[:, t]
        running = (delta + gamma * lam * running) * mask[:, t]
        adv[:, t] = running
    return adv, (adv + values) * mask


@register("gae")
def gae(x: AdvantageInput) -> torch.Tensor:
    """GAE advantages of a value head, whitened over the batch's completion tokens. [N, T-1]."""
    if x.values is None:
        raise ValueError("advantage: gae needs a value head (critic: value_head)")
    adv, _ = gae_raw(x.rewards, x.values, x.mask, x.gamma, x.lam)
    n = x.mask.sum().clamp(min=1)
    mean = adv.sum() / n
    std = (((adv - mean) * x.mask) ** 2).sum().div(n).sqrt()
    return (adv - mean) / (std + x.eps) * x.mask


def zero_std_groups(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """[N] -> [N / G] bool: True where every value of the group is the same."""
    g = groups_of(rewards, group_size)
    return (g.max(-1).values - g.min(-1).values).abs() < 1e-9


def uniform_accuracy_groups(passed: torch.Tensor, group_size: int) -> torch.Tensor:
    """[N] -> [N / G] bool: True where the group's samples all passed or all failed (DAPO's dynamic sampling keeps
    only 0 < #passed < G, whatever other reward terms such as a length penalty add)."""
    n_passed = groups_of(passed.float(), group_size).sum(-1)
    return (n_passed == 0) | (n_passed == group_size)
