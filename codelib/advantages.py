"""Advantages, KL estimators and clipped losses of our own loops (REINFORCE, PPO): the formulas, one function each.

Every function is pure tensor arithmetic, so `tests/test_algorithms.py` checks each one against its paper's formula
on hand-made numbers. Rows of a batch hold a task's G samples side by side (rows i*G .. i*G+G-1), as
`rollout.rollout` returns them. Notation (the papers are named in the README): rewards r [N], per-token log-probs
[N, T-1] under the current policy (logp), the policy that sampled (logp_old) and the start policy (ref_logp).

- `rloo`: REINFORCE Leave-One-Out (Kool et al. 2019; Ahmadian et al. 2024): A_i = r_i - mean_{j != i} r_j.
- `group_normalized`: GRPO (Shao et al. 2024): A_i = (r_i - mean(r)) / (std(r) + eps) within the group.
- `batch_normalized`: (r - mean) / (std + eps) over the whole batch (PPO without a critic).
- `reinforce_pp`: REINFORCE++ (Hu 2025): the KL penalty folded into per-token rewards, returns with gamma = 1,
  normalised over every completion token of the global batch; `group_baseline=True` is "REINFORCE++-baseline"
  (the group's mean reward subtracted first).
- `kl_estimate`: k1 / k2 / k3 of Schulman (2020), "Approximating KL Divergence".
- `clipped_policy_loss`: PPO-Clip (Schulman et al. 2017) with DAPO's clip-higher (eps_low != eps_high).
- `zero_std_groups`: the groups whose rewards are all equal (no signal; DAPO's dynamic sampling drops them).
"""

from __future__ import annotations

import torch

KL_ESTIMATORS = ("k1", "k2", "k3")


def groups_of(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """[N] -> [N / G, G]; fails naming the fix when N is not a multiple of G."""
    if group_size < 1 or rewards.numel() % group_size:
        raise ValueError(f"{rewards.numel()} rewards do not split into groups of {group_size} samples per task")
    return rewards.reshape(-1, group_size)


def rloo(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """A_i = r_i - (1 / (G - 1)) * sum_{j != i} r_j within each task's group of G samples. [N] -> [N]."""
    if group_size < 2:
        raise ValueError("RLOO's leave-one-out baseline needs at least 2 samples per task (samples_per_task >= 2)")
    g = groups_of(rewards, group_size)  # [N/G, G]
    others = (g.sum(-1, keepdim=True) - g) / (group_size - 1)  # [N/G, G]: mean of the other G-1 rewards
    return (g - others).reshape(-1)


def group_normalized(rewards: torch.Tensor, group_size: int, eps: float = 1e-6, scale: bool = True) -> torch.Tensor:
    """GRPO's A_i = (r_i - mean_group) / (std_group + eps) (std over the group, unbiased as in TRL); scale=False is
    Dr. GRPO's A_i = r_i - mean_group. [N] -> [N]."""
    g = groups_of(rewards, group_size)  # [N/G, G]
    centred = g - g.mean(-1, keepdim=True)
    if scale:
        centred = centred / (g.std(-1, keepdim=True) + eps) if group_size > 1 else centred
    return centred.reshape(-1)


def batch_normalized(rewards: torch.Tensor, eps: float = 1e-6, batch: torch.Tensor | None = None) -> torch.Tensor:
    """(r - mean) / (std + eps) over the batch (population std). [N] -> [N]. All-equal rewards give zeros.

    batch: the whole batch's rewards when this process holds only its shard (several ranks); default `rewards`.
    """
    batch = rewards if batch is None else batch
    return (rewards - batch.mean()) / (batch.std(unbiased=False) + eps)


def kl_estimate(logp: torch.Tensor, ref_logp: torch.Tensor, estimator: str = "k3") -> torch.Tensor:
    """Per-token estimate of KL(policy || ref) at the sampled tokens, log r = ref_logp - logp:
    k1 = -log r (unbiased, can be negative), k2 = (log r)^2 / 2 (biased, >= 0), k3 = (r - 1) - log r (unbiased,
    >= 0; GRPO's). Gradients flow through `logp`. [N, T-1] -> [N, T-1]."""
    if estimator not in KL_ESTIMATORS:
        raise ValueError(f"unknown kl_estimator {estimator!r}; use one of {', '.join(KL_ESTIMATORS)}")
    log_r = (ref_logp - logp).clamp(-20, 20)  # clamped as TRL and OpenRLHF do: exp() of a far-off token stays finite
    if estimator == "k1":
        return -log_r
    if estimator == "k2":
        return 0.5 * log_r**2
    return log_r.exp() - 1 - log_r


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of x over the positions where mask is 1 (all completion tokens of the batch)."""
    return (x * mask).sum() / mask.sum().clamp(min=1)


def reinforce_pp_returns(rewards: torch.Tensor, kl: torch.Tensor, mask: torch.Tensor, beta: float,
                         group_size: int = 0) -> torch.Tensor:  # fmt: skip
    """REINFORCE++'s per-token returns before normalisation. rewards [N], kl [N, T-1] (an estimate per completion
    token, no gradient), mask [N, T-1] -> [N, T-1] (zero off the completion).

    Token rewards r_t = -beta * kl_t, plus the sequence's reward at its last token; G_t = sum_{s >= t} r_s
    (return-to-go, gamma = 1). group_size > 0: REINFORCE++-baseline, the group's mean reward subtracted from r first.
    """
    if group_size:
        rewards = rewards - groups_of(rewards, group_size).mean(-1).repeat_interleave(group_size)
    token_r = -beta * kl.detach() * mask  # [N, T-1]
    last = mask.cumsum(-1).argmax(-1)  # [N]: index of each row's last completion token
    token_r = token_r.scatter_add(-1, last[:, None], rewards[:, None].to(token_r.dtype))
    return token_r.flip(-1).cumsum(-1).flip(-1) * mask  # [N, T-1]: sum of the rewards from t on


def reinforce_pp(rewards: torch.Tensor, kl: torch.Tensor, mask: torch.Tensor, beta: float, eps: float = 1e-6,
                 group_size: int = 0, batch_stats: tuple[float, float] | None = None) -> torch.Tensor:  # fmt: skip
    """REINFORCE++ advantages (Hu 2025), per token: the returns of `reinforce_pp_returns`, normalised as
    (G - mean) / (std + eps) over every completion token of the global batch (not per group). [N, T-1].
    batch_stats: (mean, std) of the whole batch's returns when this rank holds a shard (several ranks).
    """
    returns = reinforce_pp_returns(rewards, kl, mask, beta, group_size)
    mean, std = batch_stats if batch_stats is not None else token_stats(returns, mask)
    return (returns - mean) / (std + eps) * mask


def token_stats(values: torch.Tensor, mask: torch.Tensor) -> tuple[float, float]:
    """(mean, population std) of values over the mask's tokens."""
    n = mask.sum().clamp(min=1)
    mean = (values * mask).sum() / n
    std = (((values - mean) * mask) ** 2).sum().div(n).sqrt()
    return float(mean), float(std)


def clipped_policy_loss(logp: torch.Tensor, logp_old: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor,
                        eps: float, eps_high: float | None = None):  # fmt: skip
    """PPO-Clip, -min(rho * A, clip(rho, 1 - eps, 1 + eps_high) * A), averaged over the batch's completion tokens
    (DAPO's token-level aggregation); eps_high None is plain PPO's symmetric clip. Also the clip fraction (tokens
    whose ratio left the range) and approx KL(old || new) (k3).

    logp, logp_old, adv, mask: [N, T-1] (adv may be [N], broadcast over tokens).
    """
    eps_high = eps if eps_high is None else eps_high
    if adv.dim() == 1:
        adv = adv[:, None].expand_as(logp)  # [N, T-1]
    ratio = torch.exp(logp - logp_old)  # [N, T-1]
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1 - eps, 1 + eps_high) * adv
    per_token = -torch.min(unclipped, clipped)  # [N, T-1]
    loss = masked_mean(per_token, mask)
    with torch.no_grad():
        outside = ((ratio < 1 - eps) | (ratio > 1 + eps_high)).float()
        clip_frac = masked_mean(outside, mask)
        log_ratio = logp - logp_old
        approx_kl = masked_mean((ratio - 1) - log_ratio, mask)  # k3 estimator, >= 0
    return loss, float(clip_frac), float(approx_kl)


def zero_std_groups(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """[N] -> [N / G] bool: True where every reward of the group is the same (zero advantage, no gradient)."""
    g = groups_of(rewards, group_size)
    return (g.max(-1).values - g.min(-1).values).abs() < 1e-9
