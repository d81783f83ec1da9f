"""REINFORCE from unit-test rewards (our own loop: TRL has no REINFORCE trainer).

Per step: take a batch of training tasks, sample one completion per task from the current policy, run it in
the sandbox, score it with the configured reward (the REINFORCE experiment's is
`rewards: {pass: 1.0, length: {alpha: 0.01}}`: reward = pass - alpha * generated_tokens / 100), and descend
loss = -(reward - baseline) * log p(completion | prompt), log p summed over completion tokens. The baseline is an
optional moving average of the batch reward (variance reduction; it leaves the gradient unbiased), or, with
`baseline: rloo` and several samples per task, RLOO's leave-one-out mean of the task's other samples (Kool et al.
2019; Ahmadian et al. 2024). `kl_coef` > 0 adds beta * KL(policy || start) as a loss term (per-token estimator
`kl_estimator`, averaged over completion tokens); `dynamic_sampling` drops groups whose rewards are all equal
(DAPO) and refills the batch from fresh tasks. Only the LoRA parameters train; the merged start policy underneath
is frozen.

    python -m codelib.trainers.reinforce params/tiny/02_reinforce.yaml
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from codelib.advantages import kl_estimate, masked_mean, rloo
from codelib.logprobs import kl_to_start, make_batch, reference_logprobs, token_logprobs
from codelib.params import main_config
from codelib.rewards import PASS_MINUS_LENGTH
from codelib.trainers.common import OnlineConfig, OnlineRun

BASELINES = ("moving_average", "none", "rloo")


@dataclass
class Config(OnlineConfig):
    stage: str = "reinforce"  # run directory name
    rewards: dict[str, float | dict] = field(default_factory=lambda: dict(PASS_MINUS_LENGTH))  # pass - 0.01*tokens/100
    batch_size: int = 64  # tasks per step (one completion each)
    samples_per_task: int = 1  # REINFORCE proper samples one completion per task
    baseline: str = "moving_average"  # "moving_average" | "none" | "rloo" (leave-one-out; 2+ samples_per_task)
    baseline_decay: float = 0.9  # weight of the old baseline in the moving average

    def __post_init__(self):
        super().__post_init__()
        if self.baseline not in BASELINES:
            raise ValueError(f"baseline must be one of {', '.join(BASELINES)}; you gave {self.baseline!r}")
        if self.baseline == "rloo" and self.samples_per_task < 2:
            raise ValueError("baseline: rloo leaves one sample out of each task's group: set samples_per_task >= 2")
        if not 0 <= self.baseline_decay < 1:
            raise ValueError(f"baseline_decay must be in [0, 1); you gave {self.baseline_decay}")
        if self.batch_size <= 0 or self.samples_per_task <= 0:
            raise ValueError("batch_size and samples_per_task must be positive")


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
    run = OnlineRun(cfg)
    baseline = run.extra.get("baseline")
    for step in run.steps():
        t0 = time.time()
        # rollout: one sample per task, judged and scored (each rank its shard of the batch)
        ro = run.rollout(step, cfg.samples_per_task)
        # advantage: against the moving average of the whole batch's reward (gathered over ranks), or RLOO's
        # leave-one-out mean of the task's other samples (a task's group never straddles ranks)
        all_rewards = run.gather(ro.rewards)  # [N * ranks]
        if cfg.baseline == "rloo":
            advantages = rloo(ro.rewards, cfg.samples_per_task)  # [N]
        else:
            advantages = advantages_of(ro.rewards, baseline if cfg.baseline == "moving_average" else None)  # [N]
        # loss: -A * sum of completion-token log-probs (+ beta * the mean per-token KL estimate to the start policy)
        batch = make_batch(ro.prompt_ids, ro.completion_ids, run.tokenizer.pad_token_id, run.acc.device)
        mask = batch.completion_mask  # [N, T-1]
        due = run.reference_due(step)  # a KL term, or the logged KL's step
        ref_logp = reference_logprobs(run.policy, batch, cfg.shared_prefix) if due else None  # [N, T-1], no grad
        run.model.train()
        logp = token_logprobs(run.model, batch, shared=cfg.shared_prefix)  # [N, T-1]
        seq_logp = (logp * mask).sum(-1)  # [N]
        loss = reinforce_loss(seq_logp, advantages.to(run.acc.device))
        if cfg.kl_coef > 0:
            loss = loss + cfg.kl_coef * masked_mean(kl_estimate(logp, ref_logp, cfg.kl_estimator), mask)
        grad_norm = run.update(loss, step)
        if cfg.baseline == "moving_average":
            baseline = update_baseline(baseline, all_rewards, cfg.baseline_decay)
        kl = kl_to_start(logp.detach(), ref_logp, mask) if due else None
        row = {"loss": float(loss.detach()), "kl": kl, "grad_norm": float(grad_norm),
               "baseline": baseline if baseline is not None else 0.0}  # fmt: skip
        run.record(step, ro, t0, row, advantages, extra={"baseline": baseline})
    return run.finish()


if __name__ == "__main__":
    train(main_config(Config))
