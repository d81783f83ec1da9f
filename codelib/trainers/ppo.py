"""PPO-Clip from unit-test rewards (our own loop: TRL 1.16 no longer ships a PPO trainer).

Per update: roll out a batch (prompt, completion, `logp_old` under the rollout policy, the configured reward),
compute advantages, then run `ppo_epochs` passes of the clipped objective
    ratio = exp(logp_new - logp_old),  loss = -min(ratio * A, clip(ratio, 1 - eps, 1 + eps) * A)
over the batch's completion tokens. `critic: none` uses batch-normalised rewards, A = (r - mean) / (std + eps);
`critic: value_head` adds a linear value head on the policy's last hidden state, A_t = r - V_t(old)
(normalised over the batch's tokens), trained with value loss coefficient 0.5 and an entropy bonus 0.01.

Without a critic, `advantage` picks the estimator (`codelib.advantages`): `batch` (above), `group` (GRPO's
within-task normalisation), `rloo` (leave-one-out), `reinforce_pp` (REINFORCE++, Hu 2025: beta * KL folded into
the token rewards, returns normalised over the global batch's tokens) or `reinforce_pp_baseline` (the group mean
subtracted first). `old_from_first_pass` takes logp_old and the old values from the first epoch's forward when
an epoch is one minibatch and nothing drops out (the policy has not moved yet: TRL's GRPO does the same at one
iteration), instead of a separate no-grad forward; row order moves the floats ~1e-6, so the shipped tables were
made without it. `clip_eps_high` > 0 clips the ratio at 1 + clip_eps_high above (DAPO's clip-higher);
`kl_coef` adds beta * KL to the loss (estimator `kl_estimator`), except under REINFORCE++, where it is in the
reward; `dynamic_sampling` drops groups whose rewards are all equal and refills from fresh tasks (DAPO).

    python -m codelib.trainers.ppo params/tiny/03_ppo.yaml
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from codelib import advantages as adv_lib
from codelib.advantages import clipped_policy_loss, kl_estimate, masked_mean
from codelib.logprobs import Batch, kl_to_start, make_batch, reference_logprobs, token_logprobs
from codelib.params import main_config
from codelib.rewards import PASS_MINUS_LENGTH
from codelib.trainers.common import OnlineConfig, OnlineRun

ADVANTAGES = ("batch", "group", "rloo", "reinforce_pp", "reinforce_pp_baseline")
GROUPED = ("group", "rloo", "reinforce_pp_baseline")  # advantages computed within each task's samples


@dataclass
class Config(OnlineConfig):
    stage: str = "ppo"  # run directory name
    rewards: dict[str, float | dict] = field(default_factory=lambda: dict(PASS_MINUS_LENGTH))  # pass - 0.01*tokens/100
    batch_size: int = 8  # tasks per rollout batch
    samples_per_task: int = 1  # completions per task in a batch
    ppo_epochs: int = 4  # passes over each rollout batch
    minibatch_size: int = 0  # completions per gradient step; 0 for the whole batch
    clip_eps: float = 0.2  # ratio clip range (the lower one when clip_eps_high is set)
    clip_eps_high: float = 0.0  # upper clip, 1 + clip_eps_high (DAPO's clip-higher, e.g. 0.28); 0 for clip_eps
    critic: str = "none"  # "none" (advantages from rewards, see `advantage`) | "value_head"
    advantage: str = "batch"  # critic none: batch | group | rloo | reinforce_pp | reinforce_pp_baseline
    value_coef: float = 0.5  # value loss weight (critic: value_head)
    entropy_coef: float = 0.0  # entropy bonus weight (0.01 with the value head in the 7B seed)
    adv_eps: float = 1e-6  # std floor when normalising advantages
    old_from_first_pass: bool = False  # true: the first epoch's forward gives logp_old (one forward less; floats move)

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
        if self.advantage not in ADVANTAGES:
            raise ValueError(f"advantage must be one of {', '.join(ADVANTAGES)}; you gave {self.advantage!r}")
        if self.critic == "value_head" and self.advantage != "batch":
            raise ValueError(f"advantage: {self.advantage} is for critic: none (the value head gives its own A)")
        if self.advantage in GROUPED and self.samples_per_task < 2:
            raise ValueError(f"advantage: {self.advantage} compares a task's samples: set samples_per_task >= 2")
        if self.clip_eps_high < 0:
            raise ValueError(f"clip_eps_high must be >= 0 (0: the same as clip_eps); you gave {self.clip_eps_high}")


def value_head(model) -> dict[str, torch.nn.Module]:
    """A linear value head on the policy's last hidden state; V = bias = 0 at the start (no arbitrary advantages)."""
    head = torch.nn.Linear(model.config.hidden_size, 1)
    torch.nn.init.zeros_(head.weight)
    torch.nn.init.zeros_(head.bias)
    return {"value_head": head}


normalized_advantages = adv_lib.batch_normalized  # (r - mean) / (std + eps) over the batch; kept for old callers


def value_advantages(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, eps: float = 1e-6):
    """Per-token A_t = r - V_t (one terminal reward, gamma = lambda = 1), normalised over the batch's tokens.

    rewards [N], values [N, T-1], mask [N, T-1] -> [N, T-1] (zero off the completion).
    """
    adv = (rewards[:, None] - values) * mask  # [N, T-1]
    n = mask.sum().clamp(min=1)
    mean = adv.sum() / n
    std = (((adv - mean) * mask) ** 2).sum().div(n).sqrt()
    return (adv - mean) / (std + eps) * mask


def value_loss_of(values: torch.Tensor, rewards: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean squared error of V_t against the terminal reward over completion tokens. [N, T-1], [N] -> scalar."""
    return (((values - rewards[:, None]) ** 2) * mask).sum() / mask.sum().clamp(min=1)


def advantages_of(cfg: Config, rewards, logp_old, ref_logp, mask, run) -> torch.Tensor:
    """The critic-free advantages `cfg.advantage` names: [N], or [N, T-1] for REINFORCE++'s per-token ones."""
    g = cfg.samples_per_task
    if cfg.advantage == "group":
        return adv_lib.group_normalized(rewards, g, cfg.adv_eps)
    if cfg.advantage == "rloo":
        return adv_lib.rloo(rewards, g)
    if cfg.advantage.startswith("reinforce_pp"):
        # [N, T-1] (no gradient: both detached); no reference forward ran when kl_coef is 0: the term is 0 then
        kl = adv_lib.kl_estimate(logp_old, ref_logp, cfg.kl_estimator) if ref_logp is not None else 0 * logp_old
        group = g if cfg.advantage == "reinforce_pp_baseline" else 0
        stats = None
        if run.acc.num_processes > 1:  # normalise with the global batch's token statistics
            ret = adv_lib.reinforce_pp_returns(rewards, kl, mask, cfg.kl_coef, group)
            s = run.gather(torch.stack([(ret * mask).sum(), (ret**2 * mask).sum(), mask.sum()])[None].cpu()).sum(0)
            mean = float(s[0] / s[2].clamp(min=1))
            stats = (mean, max(float(s[1] / s[2].clamp(min=1)) - mean**2, 0.0) ** 0.5)
        adv = adv_lib.reinforce_pp(rewards, kl, mask, cfg.kl_coef, cfg.adv_eps, group, batch_stats=stats)
        return adv
    return adv_lib.batch_normalized(rewards, cfg.adv_eps, run.gather(rewards.cpu()).to(rewards.device))


def dropout_active(model) -> bool:
    """Whether a training-mode forward of `model` drops anything (a dropout module, or attention dropout)."""
    config = getattr(model, "config", None)
    return (getattr(config, "attention_dropout", 0.0) or 0.0) > 0 or any(
        isinstance(m, torch.nn.modules.dropout._DropoutNd) and m.p > 0 for m in model.modules()
    )


def olds(cfg: Config, run, batch, rewards, logp_old, values_old, due: bool) -> tuple:
    """What the update needs from the rollout policy: (logp_old, ref_logp, advantages, logged kl)."""
    mask = batch.completion_mask
    with torch.no_grad():
        ref_logp = reference_logprobs(run.policy, batch, cfg.shared_prefix) if due else None
    kl = kl_to_start(logp_old, ref_logp, mask) if due else None
    # advantages: r - V_t, or from the rewards alone (`advantage`; batch statistics over ranks)
    if values_old is not None:
        advantages = value_advantages(rewards, values_old, mask, cfg.adv_eps)  # [N, T-1]
    else:
        advantages = advantages_of(cfg, rewards, logp_old, ref_logp, mask, run)  # [N] or [N, T-1]
    return logp_old, ref_logp, advantages, kl


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
        n = len(ro.completion_ids)
        mb = cfg.minibatch_size or n
        due = run.reference_due(step)  # a KL term (or REINFORCE++'s KL in the reward), or the logged KL's step
        first_pass = cfg.old_from_first_pass and mb >= n and not dropout_active(run.policy)
        old = None  # (logp_old [N, T-1], ref_logp, advantages, kl): `olds`, before the epochs or in the first pass
        if not first_pass:
            run.model.eval()
            with torch.no_grad():
                if use_values:
                    logp_old, ex = token_logprobs(run.model, batch, with_hidden=True, shared=cfg.shared_prefix)
                    values_old = run.heads["value_head"](ex["hidden"].float()).squeeze(-1)  # [N, T-1]
                else:
                    logp_old, values_old = token_logprobs(run.model, batch, shared=cfg.shared_prefix), None
            old = olds(cfg, run, batch, rewards, logp_old, values_old, due)
        kl_loss = cfg.kl_coef > 0 and not cfg.advantage.startswith("reinforce_pp")  # REINFORCE++: KL in the reward
        eps_high = cfg.clip_eps_high or cfg.clip_eps
        # several epochs of the clipped objective over the same rollouts
        run.model.train()
        need_extra = use_values or cfg.entropy_coef > 0
        stats = {"loss": [], "clip_frac": [], "approx_kl": [], "value_loss": [], "entropy": []}
        for _ in range(cfg.ppo_epochs):
            order = torch.randperm(n)
            for i in range(0, n, mb):
                idx = order[i : i + mb].to(device)
                sub = Batch(batch.input_ids[idx], batch.attention_mask[idx], mask[idx])
                res = token_logprobs(
                    run.model, sub, with_entropy=need_extra, with_hidden=use_values, shared=cfg.shared_prefix
                )
                logp, ex = res if need_extra else (res, {})
                values = run.heads["value_head"](ex["hidden"].float()).squeeze(-1) if use_values else None  # [mb, T-1]
                if old is None:  # the first pass over the whole batch: its rows back in batch order are the old ones
                    logp_old = torch.empty_like(logp).index_copy_(0, idx, logp.detach())
                    values_old = torch.empty_like(values).index_copy_(0, idx, values.detach()) if use_values else None
                    old = olds(cfg, run, batch, rewards, logp_old, values_old, due)
                logp_old, ref_logp, advantages, kl = old
                loss, clip_frac, approx_kl = clipped_policy_loss(logp, logp_old[idx], advantages[idx], sub.completion_mask, cfg.clip_eps, eps_high)  # fmt: skip
                total = loss
                if kl_loss:
                    total = total + cfg.kl_coef * masked_mean(kl_estimate(logp, ref_logp[idx], cfg.kl_estimator), sub.completion_mask)  # fmt: skip
                if use_values:
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
        _, _, advantages, kl = old
        # per completion: its advantage (the value head's: the mean over its tokens)
        seq_adv = (advantages * mask).sum(-1) / mask.sum(-1).clamp(min=1) if advantages.dim() == 2 else advantages
        row = {"kl": kl, **{k: sum(v) / len(v) if v else 0.0 for k, v in stats.items()}}
        run.record(step, ro, t0, row, seq_adv.cpu())
    return run.finish()


if __name__ == "__main__":
    train(main_config(Config))
