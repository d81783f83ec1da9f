"""Multi-turn repair RL: attempt -> test feedback -> attempt, RLOO advantages on the final attempt's reward.

Per step: a batch of training tasks, `samples_per_task` episodes of each (`codelib.engine.repair.run_episodes`): the
policy writes an attempt; the sandbox judges it on the task's public tests (the feedback) and on all its tests (the
verdict); while the public tests fail and turns remain, the policy sees its attempt and the feedback and tries
again. An episode's reward is the configured reward (`rewards`) of its *last* attempt on all tests, times
`turn_discount` per extra turn, minus `turn_cost` per extra turn. Advantages are leave-one-out within a task's
episodes (RLOO, Kool et al. 2019): A_i = r_i - mean_{j != i} r_j. The loss is -A_i times the log-probability of the
policy's own tokens in the episode (every attempt; the prompt, earlier attempts as context and the feedback are
masked), summed over tokens and averaged over episodes. Only the LoRA parameters train.

Before the RL run, `train_sft`: SFT with repair examples mixed in (`codelib.engine.repair_data`), so the policy knows
the format. After it, `evaluate` (`codelib.evaluation.repair_eval`, importable from here): the three-way comparison
for each checkpoint, written up by `codelib.reports.repair`.

    python -m codelib.trainers.repair params/tiny/09_repair.yaml
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from codelib.engine import metrics, repair, repair_data, rollout
from codelib.evaluation.eval_sampling import EVAL_SAMPLING
from codelib.evaluation.repair_eval import PROBE, eval_dir, eval_sets, evaluate  # noqa: F401 - its old home
from codelib.plumbing.params import load_config, main_train
from codelib.policy.logprobs import kl_to_start, make_batch, reference_logprobs, token_logprobs
from codelib.reports.repair import write_report  # noqa: F401  (old home)
from codelib.tasks import load_tasks, tasks_to_rows
from codelib.trainers.common import OnlineRun, SamplingConfig

EVALUATED = {"repair": "checkpoints/tiny/repair"}  # eval_checkpoints' default


@dataclass
class Config(SamplingConfig):
    stage: str = "repair"  # run directory name
    init: str = "checkpoints/tiny/repair_sft"  # the starting policy: the SFT adapter trained with repair examples
    batch_size: int = 16  # tasks per step
    samples_per_task: int = 4  # episodes per task (the RLOO group; at least 2)
    turns: int = 2  # attempts per episode at most
    turn_discount: float = 1.0  # reward factor per extra turn (1: a repaired pass is worth a first-try pass)
    turn_cost: float = 0.0  # reward subtracted per extra turn
    feedback: str = "tests"  # what training shows between turns: "tests" (public tests' feedback) or "empty"
    public_rule: str = "auto"  # public tests: "half" (synthetic), "first" (first assert / case), "auto"
    split_seed: int = 0  # seed of the public/hidden split (recorded in splits.jsonl)
    feedback_chars: int = 160  # a feedback message is cut to this many characters
    shared_prefix: bool = False  # update forwards run each distinct context once (see the REINFORCE/PPO option)
    sft_params: str = "params/tiny/01_sft.yaml"  # the SFT stage whose recipe train_sft reuses
    sft_stage: str = "repair_sft"  # train_sft's run directory; "" skips it (init must then exist)
    sft_steps: int = 300  # train_sft's optimizer steps
    repair_examples: int = 2500  # repair examples mixed into the SFT data (synthetic tasks only)
    repair_empty_share: float = 0.2  # share of them shown an empty feedback message
    probe_examples: int = 0  # probe tasks (answer only in the tests) in the SFT data, plain and as repair examples
    eval_checkpoints: dict[str, str] = field(default_factory=lambda: dict(EVALUATED))  # name -> checkpoint dir
    eval_split: str = "test"  # held-out split of `dataset` for the comparison
    eval_limit: int = 0  # first N held-out tasks; 0 for all
    eval_samples: int = 4  # episodes per task and arm (feedback, empty feedback)
    eval_independent: int = 8  # independent samples per task for pass@t (at least `turns`)
    eval_temperature: float = EVAL_SAMPLING.temperature  # evaluation sampling temperature
    eval_seed: int = EVAL_SAMPLING.seed  # evaluation sampling seed
    bootstrap_iters: int = 1000  # resamples for the intervals
    probe_eval: int = 0  # also compare on the first N held-out probe tasks (synthetic split `probe`); 0 for none

    def __post_init__(self):
        super().__post_init__()
        if self.samples_per_task < 2:
            raise ValueError(
                f"RLOO needs at least 2 episodes per task; you gave samples_per_task={self.samples_per_task}"
            )
        if self.turns < 1 or self.batch_size <= 0:
            raise ValueError("turns and batch_size must be positive")
        if self.feedback not in repair.MODES:
            raise ValueError(f"feedback must be one of {', '.join(repair.MODES)}; you gave {self.feedback!r}")
        if self.public_rule not in repair.RULES:
            raise ValueError(f"public_rule must be one of {', '.join(repair.RULES)}; you gave {self.public_rule!r}")
        if not 0 < self.turn_discount <= 1 or self.turn_cost < 0:
            raise ValueError("turn_discount must be in (0, 1] and turn_cost >= 0")
        if self.eval_independent < self.turns:
            raise ValueError(f"pass@{self.turns} needs eval_independent >= turns; you gave {self.eval_independent}")


def rloo_advantages(rewards: torch.Tensor, group: int) -> torch.Tensor:
    """A_i = r_i - mean of the other episodes of its task. rewards: [N] (task i's episodes contiguous) -> [N]."""
    r = rewards.view(-1, group)  # [tasks, G]
    others = (r.sum(-1, keepdim=True) - r) / (group - 1)  # [tasks, G]
    return (r - others).reshape(-1)


def episode_loss(row_logp: torch.Tensor, owner: torch.Tensor, advantages: torch.Tensor, n_episodes: int):
    """-sum_i A_i * log p(episode i's own tokens) / N. row_logp: [R] summed over each row's attempt tokens; owner: [R]
    episode index of each row; advantages: [N] -> scalar."""
    return -(advantages.detach()[owner] * row_logp).sum() / n_episodes


def score_episodes(episodes: list, reward, cfg: Config) -> tuple[torch.Tensor, dict]:
    """Each episode's reward: the configured reward of its last attempt on all tests, discounted per extra turn."""
    finals = [e.turns[-1] for e in episodes]
    rows = tasks_to_rows([e.task for e in episodes])
    columns = {k: [row[k] for row in rows] for k in rows[0]}
    total, terms = reward.score([t.completion for t in finals], completion_ids=[t.ids for t in finals], **columns)
    out = [
        repair.episode_reward(float(r), len(e.turns), cfg.turn_discount, cfg.turn_cost)
        for r, e in zip(total, episodes, strict=True)
    ]
    return torch.tensor(out), terms


def to_rollouts(episodes: list, rewards: torch.Tensor, terms: dict, timing: dict) -> rollout.Rollouts:
    """The episodes as the Rollouts `OnlineRun.record` logs (final attempt; lengths count every attempt's tokens)."""
    finals = [e.turns[-1] for e in episodes]
    return rollout.Rollouts(
        tasks=[e.task for e in episodes],
        prompt_ids=[[] for _ in episodes],
        completion_ids=[t.ids for t in finals],
        texts=[t.completion for t in finals],
        passed=torch.tensor([1.0 if e.passed else 0.0 for e in episodes]),
        test_fraction=torch.tensor(
            [t.full.tests_passed / t.full.tests_total if t.full.tests_total else 0.0 for t in finals]
        ),
        lengths=torch.tensor([float(sum(len(t.ids) for t in e.turns)) for e in episodes]),
        rewards=rewards,
        terms=terms,
        generate_s=timing["generate_s"],
        sandbox_s=timing["sandbox_s"],
    )


def turn_stats(episodes: list, turns: int) -> dict:
    """Per-step repair metrics: first-attempt pass rate, share of episodes that took a second turn, and of those
    the share whose last attempt passed."""
    first = [e.turns[0].full.passed for e in episodes]
    retried = [e for e in episodes if len(e.turns) > 1]
    return {
        "turn1_pass_rate": sum(first) / len(episodes),
        "retry_share": len(retried) / len(episodes),
        "repaired_share": sum(e.passed for e in retried) / len(retried) if retried else 0.0,
        "turns_mean": sum(len(e.turns) for e in episodes) / len(episodes),
    }


def train(cfg: Config) -> Path:
    """Run multi-turn repair RL; returns the run directory (adapter, config.json, metrics.jsonl, samples.jsonl with
    final attempts, episodes.jsonl with every turn, splits.jsonl, checkpoint/)."""
    run = OnlineRun(cfg)
    episodes_path = run.out / "episodes.jsonl"
    if run.acc.is_main_process:
        metrics.truncate_metrics(episodes_path, run.start)
        splits = run.out / "splits.jsonl"
        if not splits.exists():  # which tests are public, per task: a function of (rule, seed), recorded once
            splits.write_text(
                "".join(json.dumps(r) + "\n" for r in repair.splits_record(run.tasks, cfg.public_rule, cfg.split_seed))
            )
    G = cfg.samples_per_task
    for step in run.steps():
        t0 = time.time()
        # rollout: G episodes per task of this rank's share of the step's tasks, each up to `turns` attempts
        tasks = rollout.batch_tasks(run.tasks, cfg.batch_size, step, cfg.seed)
        mine = tasks[run.acc.process_index :: run.acc.num_processes]
        seed = cfg.seed + step + 7919 * run.acc.process_index
        episodes, timing = repair.run_episodes(
            run.policy,
            run.tokenizer,
            mine,
            G,
            cfg.turns,
            mode=cfg.feedback,
            public_rule=cfg.public_rule,
            split_seed=cfg.split_seed,
            temperature=cfg.temperature,
            top_p=cfg.top_p,
            max_new_tokens=cfg.max_new_tokens,
            batch_size=len(mine) * G,
            seed=seed,
            workers=cfg.workers,
            timeout_s=cfg.timeout_s,
            feedback_chars=cfg.feedback_chars,
        )
        # reward of the last attempt (all tests), discounted per extra turn; RLOO advantage within each task
        rewards, terms = score_episodes(episodes, run.reward, cfg)  # [N]
        advantages = rloo_advantages(rewards, G)  # [N]
        # loss: one row per turn, its context masked; -A * log p of the policy's own tokens, per episode
        ctx_ids, att_ids, owner = repair.episode_rows(episodes, run.tokenizer)
        batch = make_batch(ctx_ids, att_ids, run.tokenizer.pad_token_id, run.acc.device)
        run.model.train()
        logp = token_logprobs(run.model, batch, shared=cfg.shared_prefix)  # [R, T-1]
        row_logp = (logp * batch.completion_mask).sum(-1)  # [R]
        owner_t = torch.tensor(owner, device=run.acc.device)  # [R]
        loss = episode_loss(row_logp, owner_t, advantages.to(run.acc.device), len(episodes))
        grad_norm = run.update(loss, step)
        kl = kl_to_start(
            logp.detach(), reference_logprobs(run.policy, batch, cfg.shared_prefix), batch.completion_mask
        )
        row = {
            "loss": float(loss.detach()),
            "kl": kl,
            "grad_norm": float(grad_norm),
            **turn_stats(episodes, cfg.turns),
        }
        if run.acc.is_main_process:  # every turn of every episode (this rank's; the explorer reads them)
            with open(episodes_path, "a", encoding="utf-8") as f:
                rows = (
                    e.to_row(step=step, reward=round(float(r), 6), advantage=round(float(a), 6))
                    for e, r, a in zip(episodes, rewards, advantages, strict=True)
                )
                f.writelines(json.dumps(row) + "\n" for row in rows)
        run.record(step, to_rollouts(episodes, rewards, terms, timing), t0, row, advantages)
    return run.finish()


# ---------------------------------------------------------------------------------------------------------------
# before the RL run: SFT with repair examples


def sft_config(cfg: Config):
    """The SFT stage's Config from `sft_params`, with this stage's run directory, step count and threads."""
    from codelib.trainers import sft

    return load_config(sft.Config, cfg.sft_params, stage=cfg.sft_stage, steps=cfg.sft_steps, threads=cfg.threads)


def train_sft(cfg: Config) -> Path | None:
    """SFT on the training split with `repair_examples` repair examples mixed in (the format: attempt, feedback,
    fix); None when `sft_stage` is "". Resumes like the SFT stage."""
    if not cfg.sft_stage:
        return None
    from codelib.trainers import sft

    scfg = sft_config(cfg)
    done = scfg.run_dir / "train_summary.json"
    if done.exists() and json.loads(done.read_text()).get("steps", 0) >= scfg.steps:
        return scfg.run_dir  # finished: resuming a finished TRL run would train one step more
    train_tasks = load_tasks(scfg.dataset, scfg.split)[: scfg.limit or None]
    # probe tasks: the answer only in the tests, so a second turn can solve them only by reading the feedback
    probe = load_tasks("synthetic", "probe_train")[: cfg.probe_examples] if cfg.probe_examples else []
    mixed = repair_data.sft_tasks(
        train_tasks,
        cfg.repair_examples,
        seed=scfg.seed,
        probe=probe,
        public_rule=cfg.public_rule,
        split_seed=cfg.split_seed,
        empty_share=cfg.repair_empty_share,
        feedback_chars=cfg.feedback_chars,
    )
    return sft.train(scfg, tasks=mixed)


if __name__ == "__main__":
    main_train(Config, train)
