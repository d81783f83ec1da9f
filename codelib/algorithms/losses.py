"""Policy losses, loss aggregation and KL estimators, one function each, registered by name.

Policy losses take per-token log-probs under the current policy (logp, with gradient) and the sampling policy
(logp_old), advantages broadcast to [N, T-1] and the completion mask, and return the per-token loss [N, T-1] and
the ratio statistics they computed (a loss without a ratio computes none: those are absent from the logs, not 0).

- `pg`: -A * log pi (the plain policy gradient of REINFORCE / RLOO; no ratio).
- `clip`: PPO-Clip -min(rho A, clip(rho, 1 - eps_low, 1 + eps_high) A) (Schulman et al. 2017); eps_high > eps_low
  is DAPO's clip-higher; `dual_clip` c > 1 also bounds the loss of a negative advantage by -c A (Ye et al. 2020).
- `gspo`: the same clip on one length-normalised ratio per sequence, s_i = exp(mean_t log rho_it) (Zheng et al. 2025).
- `cispo`: -sg(clip(rho, 1 - eps_low, 1 + eps_high)) A log pi: the weight is clipped, every token keeps a gradient
  (MiniMax-M1 2025).

Aggregations (verl's `loss_agg_mode`) reduce [N, T-1] to a scalar; they differ only when lengths differ:
`token-mean` sum / all tokens (DAPO), `seq-mean-token-mean` mean over sequences of each one's token mean (GRPO),
`seq-mean-token-sum` mean over sequences of each one's token sum (REINFORCE's -A log p(y)), `seq-mean-token-sum-norm`
sum / (N * max_tokens), a constant normaliser (Dr. GRPO).

KL estimators (Schulman 2020) of KL(pi || ref) at the sampled tokens with log r = ref - logp: k1 = -log r,
k2 = (log r)^2 / 2, k3 = (r - 1) - log r. Placement `reward` folds beta * k into the reward before the advantages
(k1 there is the unbiased gradient of the reverse KL: Shah et al. 2025); `loss` adds beta * mean k to the loss
(k2 or k3; k1 as a loss term has zero expected gradient and is refused).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

POLICY_LOSSES: dict[str, Callable] = {}
AGGREGATIONS: dict[str, Callable] = {}
KL_ESTIMATORS = ("k1", "k2", "k3")
KL_PLACEMENTS = ("loss", "reward")


def _register(table: dict, name: str):
    def add(fn):
        table[name] = fn
        return fn

    return add


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / mask.sum().clamp(min=1)


def _ratio_stats(ratio: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor, low: float, high: float) -> dict:
    """Where the clip binds (TRL's clip_ratio/low and /high): rho < 1 - eps_low with A < 0, rho > 1 + eps_high with
    A > 0; the ratio's mean and max over completion tokens, and approx KL(old || new) (k3 on the ratio)."""
    with torch.no_grad():
        m = mask.bool() & torch.ones_like(ratio, dtype=torch.bool)
        lo = masked_mean(((ratio < low) & (adv < 0)).float(), mask)
        hi = masked_mean(((ratio > high) & (adv > 0)).float(), mask)
        r = ratio.expand_as(mask)[m.expand_as(mask)] if m.any() else ratio.new_ones(1)
        approx_kl = masked_mean((ratio - 1 - ratio.log()).expand_as(mask), mask)  # k3 of KL(old || new)
        return {
            "clip_frac_low": float(lo),
            "clip_frac_high": float(hi),
            "clip_frac": float(lo + hi),
            "ratio_mean": float(r.mean()),
            "ratio_max": float(r.max()),
            "approx_kl": float(approx_kl),
        }


def _ratio(logp, logp_old, mask):
    """exp(logp - logp_old) on completion tokens, 1 elsewhere; the log-ratio clamped to +-20 as verl does, so a
    position outside the mask (whose two forwards may differ) never makes inf * 0 = NaN."""
    return torch.exp(torch.where(mask.bool(), logp - logp_old, torch.zeros_like(logp)).clamp(-20, 20))


@_register(POLICY_LOSSES, "pg")
def pg(logp, logp_old, adv, mask, eps_low=0.2, eps_high=0.2, dual_clip=0.0):
    """-A * log pi per token: the plain policy gradient; no ratio, so no ratio statistics."""
    return -adv * logp, {}


@_register(POLICY_LOSSES, "clip")
def clip(logp, logp_old, adv, mask, eps_low=0.2, eps_high=0.2, dual_clip=0.0):
    """PPO-Clip with clip-higher (eps_high) and optional dual clip (c = dual_clip > 1)."""
    ratio = _ratio(logp, logp_old, mask)
    loss1, loss2 = -adv * ratio, -adv * torch.clamp(ratio, 1 - eps_low, 1 + eps_high)
    loss = torch.max(loss1, loss2)
    if dual_clip:
        loss = torch.where(adv < 0, torch.min(loss, -adv * dual_clip), loss)
    return loss, _ratio_stats(ratio, adv, mask, 1 - eps_low, 1 + eps_high)


@_register(POLICY_LOSSES, "gspo")
def gspo(logp, logp_old, adv, mask, eps_low=3e-4, eps_high=4e-4, dual_clip=0.0):
    """GSPO: s_i = exp(mean over the sequence's tokens of log rho), clipped at sequence level (the gradient reaches
    every token through the mean, as in TRL's importance_sampling_level='sequence')."""
    log_ratio = ((logp - logp_old) * mask).sum(-1, keepdim=True) / mask.sum(-1, keepdim=True).clamp(min=1)
    s = torch.exp(log_ratio)  # [N, 1]
    loss = torch.max(-adv * s, -adv * torch.clamp(s, 1 - eps_low, 1 + eps_high))
    return loss, _ratio_stats(s, adv, mask, 1 - eps_low, 1 + eps_high)


@_register(POLICY_LOSSES, "cispo")
def cispo(logp, logp_old, adv, mask, eps_low=1.0, eps_high=4.0, dual_clip=0.0):
    """CISPO: -sg(clip(rho, 1 - eps_low, 1 + eps_high)) * A * log pi; eps_low 1 leaves the weight unbounded below
    (TRL's cispo caps it above only, at 1 + eps_high)."""
    ratio = _ratio(logp, logp_old, mask)
    weight = torch.clamp(ratio, 1 - eps_low, 1 + eps_high).detach()
    return -weight * adv * logp, _ratio_stats(ratio, adv, mask, 1 - eps_low, 1 + eps_high)


def policy_loss(name: str, logp, logp_old, adv, mask, **kw):
    if name not in POLICY_LOSSES:
        raise ValueError(f"unknown policy_loss {name!r}; use one of {', '.join(POLICY_LOSSES)}")
    if adv.dim() == 1:
        adv = adv[:, None].expand_as(logp)
    return POLICY_LOSSES[name](logp, logp_old, adv, mask, **kw)


@_register(AGGREGATIONS, "token-mean")
def token_mean(loss, mask, max_tokens=None):
    return (loss * mask).sum() / mask.sum().clamp(min=1)


@_register(AGGREGATIONS, "seq-mean-token-mean")
def seq_mean_token_mean(loss, mask, max_tokens=None):
    return ((loss * mask).sum(-1) / mask.sum(-1).clamp(min=1)).mean()


@_register(AGGREGATIONS, "seq-mean-token-sum")
def seq_mean_token_sum(loss, mask, max_tokens=None):
    return (loss * mask).sum(-1).mean()


@_register(AGGREGATIONS, "seq-mean-token-sum-norm")
def seq_mean_token_sum_norm(loss, mask, max_tokens=None):
    """Dr. GRPO: the sum over every token divided by a constant, N * max_tokens (the generation budget)."""
    if not max_tokens:
        raise ValueError("seq-mean-token-sum-norm divides by the generation budget: pass max_tokens")
    return (loss * mask).sum() / (loss.shape[0] * max_tokens)


def aggregate(name: str, loss, mask, max_tokens: int | None = None):
    if name not in AGGREGATIONS:
        raise ValueError(f"unknown loss_agg {name!r}; use one of {', '.join(AGGREGATIONS)}")
    return AGGREGATIONS[name](loss, mask, max_tokens)


def kl_estimate(logp: torch.Tensor, ref_logp: torch.Tensor, estimator: str = "k3") -> torch.Tensor:
    """Per-token estimate of KL(policy || ref) at the sampled tokens, log r = ref_logp - logp (clamped to +-20 against
    overflow, as verl's low-variance k3 clamps it; TRL's GRPOTrainer does not clamp). Gradients flow through `logp`.
    [N, T-1] -> [N, T-1]."""
    if estimator not in KL_ESTIMATORS:
        raise ValueError(f"unknown kl_estimator {estimator!r}; use one of {', '.join(KL_ESTIMATORS)}")
    log_r = (ref_logp - logp).clamp(-20, 20)
    if estimator == "k1":
        return -log_r
    if estimator == "k2":
        return 0.5 * log_r**2
    return log_r.exp() - 1 - log_r


def check_kl(estimator: str, placement: str, coef: float) -> None:
    """Refuse a KL configuration whose gradient is not what its name promises, naming the fix."""
    if estimator not in KL_ESTIMATORS:
        raise ValueError(f"unknown kl_estimator {estimator!r}; use one of {', '.join(KL_ESTIMATORS)}")
    if placement not in KL_PLACEMENTS:
        raise ValueError(f"kl_placement must be one of {', '.join(KL_PLACEMENTS)}; you gave {placement!r}")
    if coef > 0 and estimator == "k1" and placement == "loss":
        raise ValueError(
            "kl_estimator k1 as a loss term has zero expected gradient (it regularises nothing): use "
            "kl_placement: reward with k1 (the unbiased gradient of the reverse KL), or k2 / k3 in the loss"
        )
