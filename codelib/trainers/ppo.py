"""PPO-Clip from unit-test rewards (our own loop: TRL 1.16 no longer ships a PPO trainer).

Per update: roll out a batch (prompt, completion, `logp_old` under the rollout policy, the configured reward),
compute advantages, then run `ppo_epochs` passes of the clipped objective
    ratio = exp(logp_new - logp_old),  loss = -min(ratio * A, clip(ratio, 1 - eps, 1 + eps) * A)
over the batch's completion tokens. `critic: none` uses batch-normalised rewards, A = (r - mean) / (std + eps);
`critic: value_head` adds a linear value head on the policy's last hidden state, A_t = r - V_t(old)
(normalised over the batch's tokens), trained with value loss coefficient 0.5 and an entropy bonus 0.01.

    python -m codelib.trainers.ppo params/tiny/03_ppo.yaml
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from codelib.logprobs import Batch, kl_to_start, make_batch, reference_logprobs, token_logprobs
from codelib.params import main_config
from codelib.rewards import PASS_MINUS_LENGTH
from codelib.trainers.common import OnlineRun, SamplingConfig


@dataclass
class Config(SamplingConfig):
    stage: str = "ppo"  # run directory name
    rewards: dict[str, float | dict] = field(default_factory=lambda: dict(PASS_MINUS_LENGTH))  # pass - 0.01*tokens/100
    batch_size: int = 8  # tasks per rollout batch
    samples_per_task: int = 1  # completions per task in a batch
    ppo_epochs: int = 4  # passes over each rollout batch
    minibatch_size: int = 0  # completions per gradient step; 0 for the whole batch
    clip_eps: float = 0.2  # ratio clip range
    critic: str = "none"  # "none" (batch-normalised rewards) | "value_head"
    value_coef: float = 0.5  # value loss weight (critic: value_head)
    entropy_coef: float = 0.0  # entropy bonus weight (0.01 with the value head in the 7B seed)
    adv_eps: float = 1e-6  # std floor when normalising advantages

    def __post_init__(self):
        super().__post_init__()
        if self.critic not in ("none", "value_head"):
            raise ValueError(f"critic must be 'none' or 'value_head'; you gave {self.critic!r}")
        if not 0 < self.clip_eps < 1:
            raise ValueError(f"clip_eps must be in (0, 1); you gave {self.clip_eps}")
        if self.ppo_epochs <= 0 or self.batch_size <= 0:
            raise ValueError("ppo_epochs and batch_size must be positive")
        if self.batch_size * self.samples_per_task < 2 and self.critic == "none":
            raise ValueError("batch-normalised advantages need at least 2 completions per batch")


def value_head(model) -> dict[str, torch.nn.Module]:
    """A linear value head on the policy's last hidden state; V = bias = 0 at the start (no arbitrary advantages)."""
    head = torch.nn.Linear(model.config.hidden_size, 1)
    torch.nn.init.zeros_(head.weight)
    torch.nn.init.zeros_(head.bias)
    return {"value_head": head}


def normalized_advantages(rewards: torch.Tensor, eps: float = 1e-6, batch: torch.Tensor | None = None) -> torch.Tensor:
    """(r - mean) / (std + eps) over the batch. [N] -> [N]. All-equal rewards give zeros (no signal).

    batch: the whole batch's rewards when this process holds only its shard (several ranks); default `rewards`.
    """
    batch = rewards if batch is None else batch
    return (rewards - batch.mean()) / (batch.std(unbiased=False) + eps)


def value_advantages(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, eps: float = 1e-6):
    """Per-token A_t = r - V_t (one terminal reward, gamma = lambda = 1), normalised over the batch's tokens.

    rewards [N], values [N, T-1], mask [N, T-1] -> [N, T-1] (zero off the completion).
    """
    adv = (rewards[:, None] - values) * mask  # [N, T-1]
    n = mask.sum().clamp(min=1)
    mean = adv.sum() / n
    std = (((adv - mean) * mask) ** 2).sum().div(n).sqrt()
    return (adv - mean) / (std + eps) * mask


def clipped_policy_loss(logp: torch.Tensor, logp_old: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor, eps: float):
    """PPO-Clip surrogate, averaged over completion tokens; also the clip fraction and approx KL(old || new).

    logp, logp_old, adv, mask: [N, T-1] (adv may be [N], broadcast over tokens).
    """
    if adv.dim() == 1:
        adv = adv[:, None].expand_as(logp)  # [N, T-1]
    ratio = torch.exp(logp - logp_old)  # [N, T-1]
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1 - eps, 1 + eps) * adv
    per_token = -torch.min(unclipped, clipped)  # [N, T-1]
    n = mask.sum().clamp(min=1)
    loss = (per_token * mask).sum() / n
    with torch.no_grad():
        clip_frac = (((ratio - 1).abs() > eps).float() * mask).sum() / n
        log_ratio = logp - logp_old
        approx_kl = (((ratio - 1) - log_ratio) * mask).sum() / n  # k3 estimator, >= 0
    return loss, float(clip_frac), float(approx_kl)


def value_loss_of(values: torch.Tensor, rewards: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean squared error of V_t against the terminal reward over completion tokens. [N, T-1], [N] -> scalar."""
    return (((values - rewards[:, None]) ** 2) * mask).sum() / mask.sum().clamp(min=1)


def train(cfg: Config) -> Path:
    """Run PPO; returns the run directory (adapter, value_head.pt, config.json, metrics.jsonl, checkpoint/)."""
    use_values = cfg.critic == "value_head"
    run = OnlineRun(cfg, heads=value_head if use_values else None)
    device = run.acc.device
    for step in run.steps():
        t0 = time.time()
        # rollout: sample, judge, score, and record logp_old under the rollout policy
        ro = run.rollout(step, cfg.samples_per_task)
        rewards = ro.rewards.to(device)  # [N]
        batch = make_batch(ro.prompt_ids, ro.completion_ids, run.tokenizer.pad_token_id, device)
        mask = batch.completion_mask  # [N, T-1]
        run.model.eval()
        with torch.no_grad():
            if use_values:
                logp_old, ex = token_logprobs(run.model, batch, with_hidden=True)
                values_old = run.heads["value_head"](ex["hidden"].float()).squeeze(-1)  # [N, T-1]
            else:
                logp_old = token_logprobs(run.model, batch)  # [N, T-1]
            ref_logp = reference_logprobs(run.policy, batch)
        kl = kl_to_start(logp_old, ref_logp, mask)
        # advantages: batch-normalised rewards (the whole batch's statistics, over ranks), or r - V_t
        if use_values:
            advantages = value_advantages(rewards, values_old, mask, cfg.adv_eps)  # [N, T-1]
        else:
            advantages = normalized_advantages(rewards, cfg.adv_eps, run.gather(ro.rewards).to(device))  # [N]
        # several epochs of the clipped objective over the same rollouts
        run.model.train()
        n = len(ro.completion_ids)
        mb = cfg.minibatch_size or n
        need_extra = use_values or cfg.entropy_coef > 0
        stats = {"loss": [], "clip_frac": [], "approx_kl": [], "value_loss": [], "entropy": []}
        for _ in range(cfg.ppo_epochs):
            order = torch.randperm(n)
            for i in range(0, n, mb):
                idx = order[i : i + mb].to(device)
                sub = Batch(batch.input_ids[idx], batch.attention_mask[idx], mask[idx])
                res = token_logprobs(run.model, sub, with_entropy=need_extra, with_hidden=use_values)
                logp, ex = res if need_extra else (res, {})
                loss, clip_frac, approx_kl = clipped_policy_loss(logp, logp_old[idx], advantages[idx], sub.completion_mask, cfg.clip_eps)  # fmt: skip
                total = loss
                if use_values:
                    values = run.heads["value_head"](ex["hidden"].float()).squeeze(-1)  # [mb, T-1]
                    v_loss = value_loss_of(values, rewards[idx], sub.completion_mask)
                    total = total + cfg.value_coef * v_loss
                    stats["value_loss"].append(float(v_loss.detach()))
                if need_extra:
                    entropy = (ex["entropy"] * sub.completion_mask).sum() / sub.completion_mask.sum().clamp(min=1)
                    total = total - cfg.entropy_coef * entropy
                    stats["entropy"].append(float(entropy.detach()))
                run.update(total, step)
                stats["loss"].append(float(total.detach()))
                stats["clip_frac"].append(clip_frac)
                stats["approx_kl"].append(approx_kl)
        # per completion: its advantage (the value head's: the mean over its tokens)
        seq_adv = (advantages * mask).sum(-1) / mask.sum(-1).clamp(min=1) if advantages.dim() == 2 else advantages
        row = {"kl": kl, **{k: sum(v) / len(v) if v else 0.0 for k, v in stats.items()}}
        run.record(step, ro, t0, row, seq_adv.cpu())
    return run.finish()


if __name__ == "__main__":
    train(main_config(Config))
