"""PPO-Clip from unit-test rewards (our own loop: TRL 1.16 no longer ships a PPO trainer).

Per update: roll out a batch (prompt length, completion, `logp_old` under the rollout policy, reward =
pass - alpha * tokens / 100), compute advantages, then run `ppo_epochs` passes of the clipped objective
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

from codelib.params import atomic_write_json, config_to_dict, main_config, run_dir
from codelib.trainers import common
from codelib.trainers.sft import DEFAULT_TARGETS


@dataclass
class Config:
    profile: str = "tiny"  # checkpoints/<profile>/<stage>/
    stage: str = "ppo"  # run directory name
    init: str = "checkpoints/tiny/sft"  # the starting policy: SFT adapter dir (merged first), model dir or hub id
    dataset: str = "synthetic"  # training tasks (a codelib.tasks dataset)
    split: str = "train"
    limit: int = 0  # 0 = every task of the split
    steps: int = 100  # PPO updates (rollout batches)
    batch_size: int = 8  # tasks per rollout batch
    samples_per_task: int = 1  # completions per task in a batch
    ppo_epochs: int = 4  # passes over each rollout batch
    minibatch_size: int = 0  # completions per gradient step; 0 = the whole batch
    clip_eps: float = 0.2  # ratio clip range
    learning_rate: float = 1e-3  # AdamW, constant
    alpha: float = 0.01  # length penalty: reward = pass - alpha * tokens / 100
    rewards: dict[str, float] = field(default_factory=lambda: {"pass": 1.0})  # reward terms -> weights
    critic: str = "none"  # "none" (batch-normalised rewards) | "value_head"
    value_coef: float = 0.5  # value loss weight (critic: value_head)
    entropy_coef: float = 0.0  # entropy bonus weight (0.01 with the value head in the 7B seed)
    max_grad_norm: float = 1.0  # 0.5 in the 7B seed
    adv_eps: float = 1e-6  # std floor when normalising advantages
    temperature: float = 1.0  # rollout sampling temperature
    top_p: float = 1.0
    max_new_tokens: int = 64
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.0  # 0 keeps the first epoch's ratio exactly 1
    target_modules: list[str] = field(default_factory=lambda: list(DEFAULT_TARGETS))
    modules_to_save: list[str] = field(default_factory=list)  # also trained in full, e.g. ["norm"]: every RMSNorm
    load_in_4bit: bool = False
    save_every: int = 25  # a resumable checkpoint every N updates
    seed: int = 0
    workers: int = 2  # sandbox workers
    timeout_s: float = 5.0  # per program
    threads: int = 0  # torch CPU threads; 0 = torch's default
    report_to: str = "tensorboard"  # "none" | "tensorboard" | "wandb"
    processes: int = 1  # >1: the notebook starts `accelerate launch` with this many processes (live log)

    def __post_init__(self):
        if self.critic not in ("none", "value_head"):
            raise ValueError(f"critic must be 'none' or 'value_head'; you gave {self.critic!r}")
        if not 0 < self.clip_eps < 1:
            raise ValueError(f"clip_eps must be in (0, 1); you gave {self.clip_eps}")
        if self.ppo_epochs <= 0 or self.steps <= 0 or self.batch_size <= 0:
            raise ValueError("ppo_epochs, steps and batch_size must be positive")
        if self.batch_size * self.samples_per_task < 2 and self.critic == "none":
            raise ValueError("batch-normalised advantages need at least 2 completions per batch")
        if self.temperature <= 0:
            raise ValueError("PPO samples its rollouts: temperature must be > 0")

    @property
    def run_dir(self) -> Path:
        return run_dir(self.profile, self.stage)


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
    from codelib.tasks import load_tasks

    common.seed_everything(cfg.seed, cfg.threads)
    acc = common.accelerator()
    out = cfg.run_dir
    out.mkdir(parents=True, exist_ok=True)
    if acc.is_main_process:
        atomic_write_json(out / "config.json", {"stage": "ppo", **config_to_dict(cfg)})
    tasks = load_tasks(cfg.dataset, cfg.split)[: cfg.limit or None]
    model, tokenizer = common.load_rl_policy(cfg)
    device = acc.device
    modules = {}
    if cfg.critic == "value_head":
        hidden = model.config.hidden_size
        value_head = torch.nn.Linear(hidden, 1).to(device)
        torch.nn.init.zeros_(value_head.weight)  # V = bias = 0 at the start: no arbitrary early advantages
        torch.nn.init.zeros_(value_head.bias)
        modules["value_head"] = value_head
    params = [p for p in model.parameters() if p.requires_grad] + [p for m in modules.values() for p in m.parameters()]
    optimizer = torch.optim.AdamW(params, lr=cfg.learning_rate, weight_decay=0.0)
    # prepare before restoring: whatever RNG accelerate consumes then is consumed in a fresh run too
    if modules:  # the value head trains with the policy: one DDP module each, one optimizer
        model, modules["value_head"], optimizer = acc.prepare(model, modules["value_head"], optimizer)
    else:
        model, optimizer = acc.prepare(model, optimizer)
    policy = acc.unwrap_model(model)
    start, _ = common.load_checkpoint(
        out, policy, optimizer, {k: acc.unwrap_model(m) for k, m in modules.items()},
        fingerprint=common.config_fingerprint(cfg), max_step=cfg.steps,
    )  # fmt: skip
    acc.wait_for_everyone()
    if acc.is_main_process:
        common.truncate_metrics(out / "metrics.jsonl", start)
        common.truncate_metrics(out / "samples.jsonl", start)
    log = common.MetricsLog(out, cfg.report_to) if acc.is_main_process else None
    if start:
        print(f"resuming from step {start}")
    use_values = cfg.critic == "value_head"
    for step in range(start + 1, cfg.steps + 1):
        t0 = time.time()
        # rollout: sample, judge, and record logp_old under the rollout policy
        batch_tasks = common.shard(common.batch_tasks(tasks, cfg.batch_size, step, cfg.seed), acc)
        ro = common.rollout(policy, tokenizer, batch_tasks, cfg.samples_per_task, cfg.temperature, cfg.top_p,
                            cfg.max_new_tokens, cfg.seed + step + 7919 * acc.process_index, cfg.workers,
                            cfg.timeout_s)  # fmt: skip
        if cfg.rewards == {"pass": 1.0}:
            rewards = ro.passed - cfg.alpha * ro.lengths / 100.0  # [N]
            terms = {"rewards/pass_reward/mean": float(ro.passed.mean()),
                     "rewards/length_penalty/mean": float((-cfg.alpha * ro.lengths / 100).mean())}  # fmt: skip
        else:  # the multi-criteria sum of the second seed
            rewards, terms = common.reward_terms(ro, cfg.rewards, cfg.alpha)  # [N]
        rewards = rewards.to(device)
        batch = common.make_batch(ro.prompt_ids, ro.completion_ids, tokenizer.pad_token_id, device)
        mask = batch.completion_mask  # [N, T-1]
        model.eval()
        with torch.no_grad():
            if use_values:
                logp_old, ex = common.token_logprobs(model, batch, with_hidden=True)
                values_old = modules["value_head"](ex["hidden"].float()).squeeze(-1)  # [N, T-1]
            else:
                logp_old = common.token_logprobs(model, batch)  # [N, T-1]
            ref_logp = common.reference_logprobs(policy, batch)
        kl = common.kl_to_start(logp_old, ref_logp, mask)
        # advantages: batch-normalised rewards, or r - V_t from the value head
        if use_values:
            advantages = value_advantages(rewards, values_old, mask, cfg.adv_eps)  # [N, T-1]
        else:
            # normalised with the whole batch's statistics, gathered over ranks
            all_rewards = common.gather(acc, rewards.cpu()).to(device)
            advantages = normalized_advantages(rewards, cfg.adv_eps, all_rewards)  # [N]
        # several epochs of the clipped objective over the same rollouts
        model.train()
        n = len(ro.completion_ids)
        mb = cfg.minibatch_size or n
        stats = {"loss": [], "clip_frac": [], "approx_kl": [], "value_loss": [], "entropy": []}
        for _ in range(cfg.ppo_epochs):
            order = torch.randperm(n)
            for i in range(0, n, mb):
                idx = order[i : i + mb].to(device)
                sub = common.Batch(batch.input_ids[idx], batch.attention_mask[idx], mask[idx])
                need_extra = use_values or cfg.entropy_coef > 0
                res = common.token_logprobs(model, sub, with_entropy=need_extra, with_hidden=use_values)
                logp, ex = res if need_extra else (res, {})
                loss, clip_frac, approx_kl = clipped_policy_loss(logp, logp_old[idx], advantages[idx], sub.completion_mask, cfg.clip_eps)  # fmt: skip
                total = loss
                if use_values:
                    values = modules["value_head"](ex["hidden"].float()).squeeze(-1)  # [mb, T-1]
                    v_loss = value_loss_of(values, rewards[idx], sub.completion_mask)
                    total = total + cfg.value_coef * v_loss
                    stats["value_loss"].append(float(v_loss))
                if need_extra:
                    entropy = (ex["entropy"] * sub.completion_mask).sum() / sub.completion_mask.sum().clamp(min=1)
                    total = total - cfg.entropy_coef * entropy
                    stats["entropy"].append(float(entropy))
                common.check_finite(total, step)
                optimizer.zero_grad(set_to_none=True)
                acc.backward(total)
                acc.clip_grad_norm_(params, cfg.max_grad_norm)
                optimizer.step()
                stats["loss"].append(float(total))
                stats["clip_frac"].append(clip_frac)
                stats["approx_kl"].append(approx_kl)
        all_rewards = common.gather(acc, rewards.cpu())
        passed, lengths = common.gather(acc, ro.passed), common.gather(acc, ro.lengths)
        kl = float(common.gather(acc, torch.tensor([kl])).mean())
        # per completion: its advantage (the value head's: the mean over its tokens)
        seq_adv = (advantages * mask).sum(-1) / mask.sum(-1).clamp(min=1) if advantages.dim() == 2 else advantages
        samples = common.rollout_samples(acc, step, ro, rewards.cpu(), seq_adv.cpu())
        dt = time.time() - t0
        if not acc.is_main_process:
            continue
        common.append_samples(out, samples)

        def mean(xs):
            return sum(xs) / len(xs) if xs else 0.0

        log.log(
            {
                "step": step,
                "loss": mean(stats["loss"]),
                "reward_mean": float(all_rewards.mean()),
                "reward_std": float(all_rewards.std()) if len(all_rewards) > 1 else 0.0,
                "pass_rate": float(passed.mean()),
                "completion_len": float(lengths.mean()),
                "kl": kl,
                "clip_frac": mean(stats["clip_frac"]),
                "approx_kl": mean(stats["approx_kl"]),
                "value_loss": mean(stats["value_loss"]),
                "entropy": mean(stats["entropy"]),
                **terms,
                "time_s": dt,
                "generate_share": ro.generate_s / dt,
                "sandbox_share": ro.sandbox_s / dt,
            }
        )
        if step % cfg.save_every == 0 or step == cfg.steps:
            common.save_checkpoint(out, policy, optimizer, step, {}, {k: acc.unwrap_model(m) for k, m in modules.items()},
                                   fingerprint=common.config_fingerprint(cfg))  # fmt: skip
    acc.wait_for_everyone()
    common.write_rank_checksums(policy, out)
    if acc.is_main_process:
        log.close()
        common.save_final(out, policy, tokenizer)
        if use_values:
            torch.save(acc.unwrap_model(modules["value_head"]).state_dict(), out / "value_head.pt")
    return out


if __name__ == "__main__":
    train(main_config(Config))
