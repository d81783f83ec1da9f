"""REINFORCE from unit-test rewards (our own loop: TRL has no REINFORCE trainer).

Per step: take a batch of training tasks, sample one completion per task from the current policy, run it in
the sandbox, reward = pass - alpha * generated_tokens / 100 (the length penalty of the REINFORCE experiment),
and descend loss = -(reward - baseline) * log p(completion | prompt), log p summed over completion tokens.
The baseline is an optional moving average of the batch reward (variance reduction; it leaves the gradient
unbiased). Only the LoRA parameters train; the merged start policy underneath is frozen.

    python -m codelib.trainers.reinforce params/tiny/02_reinforce.yaml
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
    stage: str = "reinforce"  # run directory name
    init: str = "checkpoints/tiny/sft"  # the starting policy: SFT adapter dir (merged first), model dir or hub id
    dataset: str = "synthetic"  # training tasks (a codelib.tasks dataset)
    split: str = "train"
    limit: int = 0  # 0 = every task of the split
    steps: int = 100  # policy updates
    batch_size: int = 64  # tasks per step (one completion each)
    samples_per_task: int = 1  # REINFORCE proper samples one completion per task
    learning_rate: float = 1e-3  # AdamW, constant
    alpha: float = 0.01  # length penalty: reward = pass - alpha * tokens / 100
    rewards: dict[str, float] = field(
        default_factory=lambda: {"pass": 1.0}
    )  # reward terms -> weights; {pass: 1.0} is the plain pass/fail reward
    baseline: str = "moving_average"  # "moving_average" | "none"
    baseline_decay: float = 0.9  # weight of the old baseline in the moving average
    max_grad_norm: float = 1.0
    temperature: float = 1.0  # rollout sampling temperature
    top_p: float = 1.0
    max_new_tokens: int = 64
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.0  # 0 keeps training forward passes identical to the sampling policy
    target_modules: list[str] = field(default_factory=lambda: list(DEFAULT_TARGETS))
    modules_to_save: list[str] = field(default_factory=list)  # also trained in full, e.g. ["norm"]: every RMSNorm
    load_in_4bit: bool = False
    save_every: int = 25  # a resumable checkpoint every N steps
    seed: int = 0
    workers: int = 2  # sandbox workers
    timeout_s: float = 5.0  # per program
    threads: int = 0  # torch CPU threads; 0 = torch's default
    report_to: str = "tensorboard"  # "none" | "tensorboard" | "wandb"
    processes: int = 1  # >1: the notebook starts `accelerate launch` with this many processes (live log)

    def __post_init__(self):
        if self.baseline not in ("moving_average", "none"):
            raise ValueError(f"baseline must be 'moving_average' or 'none'; you gave {self.baseline!r}")
        if not 0 <= self.baseline_decay < 1:
            raise ValueError(f"baseline_decay must be in [0, 1); you gave {self.baseline_decay}")
        if self.steps <= 0 or self.batch_size <= 0 or self.samples_per_task <= 0:
            raise ValueError("steps, batch_size and samples_per_task must be positive")
        if self.temperature <= 0:
            raise ValueError("REINFORCE samples its rollouts: temperature must be > 0")

    @property
    def run_dir(self) -> Path:
        return run_dir(self.profile, self.stage)


def rewards_of(passed: torch.Tensor, lengths: torch.Tensor, alpha: float) -> torch.Tensor:
    """reward = pass - alpha * tokens / 100, per completion. [N] -> [N]."""
    return passed - alpha * lengths / 100.0


def advantages_of(rewards: torch.Tensor, baseline: float | None) -> torch.Tensor:
    """reward - baseline ([N]); the raw reward when there is no baseline (yet)."""
    return rewards - baseline if baseline is not None else rewards


def update_baseline(baseline: float | None, rewards: torch.Tensor, decay: float) -> float:
    """Exponential moving average of the mean batch reward; the first batch seeds it."""
    mean = float(rewards.mean())
    return mean if baseline is None else decay * baseline + (1 - decay) * mean


def reinforce_loss(seq_logp: torch.Tensor, advantages: torch.Tensor) -> torch.Tensor:
    """-A * log p(completion), averaged over the batch. seq_logp, advantages: [N] -> scalar."""
    return -(advantages.detach() * seq_logp).mean()


def train(cfg: Config) -> Path:
    """Run REINFORCE; returns the run directory (adapter, config.json, metrics.jsonl, samples.jsonl, checkpoint/)."""
    from codelib.tasks import load_tasks

    common.seed_everything(cfg.seed, cfg.threads)
    acc = common.accelerator()
    out = cfg.run_dir
    out.mkdir(parents=True, exist_ok=True)
    if acc.is_main_process:
        atomic_write_json(out / "config.json", {"stage": "reinforce", **config_to_dict(cfg)})
    tasks = load_tasks(cfg.dataset, cfg.split)[: cfg.limit or None]
    model, tokenizer = common.load_rl_policy(cfg)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.learning_rate, weight_decay=0.0)
    # prepare before restoring: whatever RNG accelerate consumes then is consumed in a fresh run too
    model, optimizer = acc.prepare(model, optimizer)  # DDP under accelerate launch: gradients are averaged
    policy = acc.unwrap_model(model)
    start, extra = common.load_checkpoint(
        out, policy, optimizer, fingerprint=common.config_fingerprint(cfg), max_step=cfg.steps
    )
    baseline = extra.get("baseline")
    acc.wait_for_everyone()
    if acc.is_main_process:
        common.truncate_metrics(out / "metrics.jsonl", start)
        common.truncate_metrics(out / "samples.jsonl", start)
    log = common.MetricsLog(out, cfg.report_to) if acc.is_main_process else None
    if start:
        print(f"resuming from step {start}")
    device = acc.device
    for step in range(start + 1, cfg.steps + 1):
        t0 = time.time()
        # rollout: one sample per task, judged in the sandbox (each rank its shard of the batch)
        batch_tasks = common.shard(common.batch_tasks(tasks, cfg.batch_size, step, cfg.seed), acc)
        ro = common.rollout(policy, tokenizer, batch_tasks, cfg.samples_per_task, cfg.temperature, cfg.top_p,
                            cfg.max_new_tokens, cfg.seed + step + 7919 * acc.process_index, cfg.workers,
                            cfg.timeout_s)  # fmt: skip
        # reward and advantage
        if cfg.rewards == {"pass": 1.0}:
            rewards = rewards_of(ro.passed, ro.lengths, cfg.alpha)  # [N]
            terms = {"rewards/pass_reward/mean": float(ro.passed.mean()),
                     "rewards/length_penalty/mean": float((-cfg.alpha * ro.lengths / 100).mean())}  # fmt: skip
        else:  # the multi-criteria sum of the second seed
            rewards, terms = common.reward_terms(ro, cfg.rewards, cfg.alpha)  # [N]
        all_rewards = common.gather(acc, rewards)  # [N * ranks]: the baseline and the logs see the whole batch
        advantages = advantages_of(rewards, baseline if cfg.baseline == "moving_average" else None)  # [N]
        # loss: -A * sum of completion-token log-probs
        batch = common.make_batch(ro.prompt_ids, ro.completion_ids, tokenizer.pad_token_id, device)
        model.train()
        logp = common.token_logprobs(model, batch)  # [N, T-1]
        seq_logp = (logp * batch.completion_mask).sum(-1)  # [N]
        loss = reinforce_loss(seq_logp, advantages.to(device))
        common.check_finite(loss, step)
        optimizer.zero_grad(set_to_none=True)
        acc.backward(loss)
        grad_norm = acc.clip_grad_norm_(params, cfg.max_grad_norm)
        optimizer.step()
        if cfg.baseline == "moving_average":
            baseline = update_baseline(baseline, all_rewards, cfg.baseline_decay)
        kl = common.kl_to_start(logp.detach(), common.reference_logprobs(policy, batch), batch.completion_mask)
        passed, lengths = common.gather(acc, ro.passed), common.gather(acc, ro.lengths)
        kl = float(common.gather(acc, torch.tensor([kl])).mean())
        samples = common.rollout_samples(acc, step, ro, rewards, advantages)
        dt = time.time() - t0
        if not acc.is_main_process:
            continue
        common.append_samples(out, samples)
        log.log(
            {
                "step": step,
                "loss": float(loss),
                "reward_mean": float(all_rewards.mean()),
                "reward_std": float(all_rewards.std()) if len(all_rewards) > 1 else 0.0,
                "pass_rate": float(passed.mean()),
                "completion_len": float(lengths.mean()),
                "kl": kl,
                "grad_norm": float(grad_norm),
                "baseline": baseline if baseline is not None else 0.0,
                **terms,
                "time_s": dt,
                "generate_share": ro.generate_s / dt,
                "sandbox_share": ro.sandbox_s / dt,
            }
        )
        if step % cfg.save_every == 0 or step == cfg.steps:
            common.save_checkpoint(
                out, policy, optimizer, step, {"baseline": baseline}, fingerprint=common.config_fingerprint(cfg)
            )
    acc.wait_for_everyone()
    common.write_rank_checksums(policy, out)
    if acc.is_main_process:
        log.close()
        common.save_final(out, policy, tokenizer)
    return out


if __name__ == "__main__":
    train(main_config(Config))
