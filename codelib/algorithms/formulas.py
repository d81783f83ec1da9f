"""The formulas of the online engine under their earlier names (positional tensors in, tensors out); the registry
they come from is `codelib.algorithms` (advantage estimators, policy losses, aggregations, KL estimators)."""

from __future__ import annotations

import torch

from codelib.algorithms import advantages as _adv
from codelib.algorithms.advantages import (  # noqa: F401  (re-exported)
    groups_of,
    reinforce_pp_returns,
    token_stats,
    uniform_accuracy_groups,
    zero_std_groups,
)
from codelib.algorithms.losses import KL_ESTIMATORS, kl_estimate, masked_mean  # noqa: F401  (re-exported)
from codelib.algorithms.losses import clip as _clip


def rloo(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    return _adv.rloo(_adv.AdvantageInput(rewards, group_size))


def group_normalized(rewards: torch.Tensor, group_size: int, eps: float = 1e-6, scale: bool = True) -> torch.Tensor:
    x = _adv.AdvantageInput(rewards, group_size, eps=eps)
    return _adv.grpo(x) if scale else _adv.dr_grpo(x)


def batch_normalized(rewards: torch.Tensor, eps: float = 1e-6, batch: torch.Tensor | None = None) -> torch.Tensor:
    return _adv.batch(_adv.AdvantageInput(rewards, eps=eps, batch_rewards=batch))


def reinforce_pp(rewards, kl, mask, beta, eps=1e-6, group_size=0, batch_stats=None) -> torch.Tensor:
    x = _adv.AdvantageInput(rewards, group_size or 1, mask=mask, eps=eps, kl=kl, kl_coef=beta, batch_stats=batch_stats)
    return _adv._reinforce_pp(x, group_size)


def clipped_policy_loss(logp, logp_old, adv, mask, eps: float, eps_high: float | None = None):
    """PPO-Clip averaged over the batch's completion tokens; (loss, clip fraction, approx KL(old || new))."""
    if adv.dim() == 1:
        adv = adv[:, None].expand_as(logp)
    per_token, stats = _clip(logp, logp_old, adv, mask, eps, eps if eps_high is None else eps_high)
    with torch.no_grad():
        log_ratio = logp - logp_old
        approx_kl = masked_mean(log_ratio.exp() - 1 - log_ratio, mask)
    return masked_mean(per_token, mask), stats["clip_frac"], float(approx_kl)
