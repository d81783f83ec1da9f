"""GRPO: TRL's GRPOTrainer on a LoRA adapter, with the project's sandbox rewards.

The start policy (the SFT adapter, merged into its base) gets a fresh LoRA adapter that TRL trains; TRL's
reference model is then that same network with the adapter off, i.e. the start policy. Per step: P prompts,
G completions each, rewards from `codelib.rewards` (the terms of `rewards:` with their weights; every term logged
as `rewards/<name>/mean`), advantages normalised within each prompt's group. A group whose G rewards are all
equal gives no signal: TRL logs their share as `frac_reward_zero_std`, copied here as `zero_std_frac`.

TRL 1.16 defaults worth knowing: beta = 0 (no KL term, no reference forward), loss_type = "dapo", and no
`max_prompt_length` (prompts are truncated here, from the left, to `max_prompt_tokens`).

The algorithms of this family are TRL settings (see params/tiny/variants/04_grpo_*.yaml): Dr. GRPO
(`loss_type: dr_grpo`, `scale_rewards: none`), DAPO (`loss_type: dapo`, `clip_eps_high: 0.28`,
`mask_truncated_completions: true`), GSPO (`importance_sampling_level: sequence`, `loss_type: grpo`, clip 3e-4 /
4e-4), CISPO (`loss_type: cispo`; `clip_eps_high` is then TRL's cap on the importance weight itself, e.g. 5.0).
Every step also logs the verdict classes of the rollouts (`verdicts/<class>`, from the rewards' verdict cache)
and, with `eval_every`, held-out pass@1 (`eval_pass@1`); `keep: best` leaves the best evaluated adapter.

    python -m codelib.trainers.grpo params/tiny/04_grpo.yaml
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from datasets import Dataset
from transformers import TrainerCallback
from transformers.trainer_utils import get_last_checkpoint
from trl import GRPOConfig, GRPOTrainer

from codelib import metrics, rewards, sandbox
from codelib.models import load_policy, lora_config, starting_model_dir
from codelib.params import atomic_write_json, config_to_dict, main_config
from codelib.rewards import make_rewards
from codelib.tasks import load_tasks
from codelib.trainers.common import Keeper, TrainEvalConfig, seed_everything, trainer_args, write_rank_checksums

LOSS_TYPES = ("grpo", "dapo", "dr_grpo", "bnpo", "cispo", "sapo", "luspo", "vespo")  # TRL 1.16's GRPOConfig.loss_type


@dataclass
class Config(TrainEvalConfig):
    stage: str = "grpo"  # run directory name
    prompts_per_step: int = 16  # P: distinct tasks per step
    num_generations: int = 8  # G: completions per task (the group)
    beta: float = 0.0  # KL coefficient to the start policy (TRL's default 0: no reference forward)
    loss_type: str = "dapo"  # TRL loss: grpo | dapo | dr_grpo | bnpo | cispo | sapo | luspo | vespo
    clip_eps: float = 0.2  # ratio clip range (TRL's epsilon)
    clip_eps_high: float = 0.0  # TRL's epsilon_high: upper clip 1 + this (cispo: the weight's cap); 0 for clip_eps
    importance_sampling_level: str = "token"  # token | sequence (GSPO: one length-normalised ratio per sequence)
    mask_truncated_completions: bool = False  # DAPO's overlong filtering: no loss on completions cut at the cap
    num_iterations: int = 1  # PPO-style passes per generation batch
    scale_rewards: str = "group"  # group | batch | none (std normalisation of advantages)
    max_prompt_tokens: int = 512  # prompts longer than this keep their last tokens
    use_vllm: bool = False  # generation on vLLM (GPU; pip install -r requirements-vllm.txt)
    vllm_mode: str = "colocate"  # colocate | server (trl vllm-serve)
    vllm_server_url: str = "http://localhost:8000"  # server mode: where `trl vllm-serve --model ...` listens
    vllm_gpu_memory_utilization: float = 0.3  # colocate mode: the share of GPU memory vLLM takes beside training

    def __post_init__(self):
        super().__post_init__()
        if self.num_generations < 2:
            raise ValueError(
                f"GRPO needs at least 2 generations per prompt to compare within a group; you gave {self.num_generations}"
            )
        if self.loss_type not in LOSS_TYPES:
            raise ValueError(f"unknown loss_type {self.loss_type!r}; TRL 1.16 has {', '.join(LOSS_TYPES)}")
        if self.importance_sampling_level not in ("token", "sequence"):
            raise ValueError(
                f"importance_sampling_level must be 'token' or 'sequence' (GSPO); you gave {self.importance_sampling_level!r}"
            )
        if self.loss_type == "luspo" and self.importance_sampling_level != "sequence":
            raise ValueError("loss_type: luspo needs importance_sampling_level: sequence")
        if self.clip_eps_high < 0:
            raise ValueError(f"clip_eps_high must be >= 0 (0: the same as clip_eps); you gave {self.clip_eps_high}")
        if self.vllm_mode not in ("colocate", "server"):
            raise ValueError(f"vllm_mode must be colocate or server; you gave {self.vllm_mode!r}")
        if not 0 < self.vllm_gpu_memory_utilization < 1:
            raise ValueError(
                f"vllm_gpu_memory_utilization must be in (0, 1) (a share of the GPU), got {self.vllm_gpu_memory_utilization}"
            )


class _Timed:
    """A reward function that adds its wall time to a shared counter (the sandbox's share of a step); the first
    one also records the verdict class of every completion it scored (`rewards.verdicts` is cached: no new runs
    when a term already judged them)."""

    spent = 0.0
    classes: list[str] = []

    def __init__(self, fn, record_classes: bool = False):
        self.fn, self.record_classes = fn, record_classes
        self.__name__ = getattr(fn, "__name__", type(fn).__name__)

    def __call__(self, completions, **kwargs):
        t0 = time.time()
        try:
            out = self.fn(completions, **kwargs)
            if self.record_classes:
                _Timed.classes.extend(metrics.verdict_class(v) for v in rewards.verdicts(completions, **kwargs) if v)
            return out
        finally:
            _Timed.spent += time.time() - t0


def reward_functions(cfg: Config) -> tuple[list, list[float]]:
    """The configured reward terms (TRL signature, timed) and their weights; the sandbox pool sized from the config."""
    sandbox.configure(workers=cfg.workers, timeout_s=cfg.timeout_s)
    reward = make_rewards(cfg.rewards)
    return [_Timed(fn, record_classes=i == 0) for i, (_, fn) in enumerate(reward.parts)], reward.weights


def build_dataset(cfg: Config, tokenizer) -> Dataset:
    """Prompt rows carrying every Task column (the reward functions' kwargs); long prompts cut from the left."""
    tasks = load_tasks(cfg.dataset, cfg.split)[: cfg.limit or None]
    rows = []
    for t in tasks:
        row = t.to_dict()
        row["source_prompt"] = t.prompt  # the rewards rebuild the program from the whole prompt
        ids = tokenizer(t.prompt, add_special_tokens=False)["input_ids"]
        if len(ids) > cfg.max_prompt_tokens:
            row["prompt"] = tokenizer.decode(ids[-cfg.max_prompt_tokens :])
        rows.append(row)
    return Dataset.from_list(rows)


def metrics_callback(run: Path, task_ids: dict[str, str] | None = None, keeper: Keeper | None = None):
    """Rename TRL's log keys to the keys REINFORCE and PPO write, and append them to metrics.jsonl; with
    `callback.trainer` set, also the step's completions to samples.jsonl (task_ids: prompt -> task id), and with a
    `keeper`, held-out pass@1 every eval_every steps (the telemetry rows also go to TRL's TensorBoard)."""
    log = metrics.MetricsLog(run, "none")  # TRL itself reports to TensorBoard / W&B

    class Callback(TrainerCallback):
        t_last = time.time()
        trainer = None
        pending: dict = {}

        def on_step_end(self, args, state, control, **kwargs):
            """The step's verdict classes (and, when due, held-out pass@1) into TRL's metrics, before TRL logs them:
            TRL then reports them to TensorBoard / W&B with its own keys, and on_log copies them to metrics.jsonl."""
            pending = metrics.class_shares(_Timed.classes)  # {} on a step that reused a generation batch
            _Timed.classes = []
            if keeper is not None and state.is_world_process_zero and keeper.due(state.global_step):
                t0 = time.time()
                model = self.trainer.accelerator.unwrap_model(self.trainer.model)
                pending.update(keeper.evaluate(model, self.trainer.processing_class, state.global_step))
                pending["eval_s"] = time.time() - t0
                model.train()
            if self.trainer is not None and hasattr(self.trainer, "_metrics"):
                for k, v in pending.items():
                    self.trainer._metrics["train"][k].append(v)
            Callback.pending = pending

        def on_log(self, args, state, control, logs=None, **kwargs):
            if not logs or "loss" not in logs or not state.is_world_process_zero:
                return
            now = time.time()
            dt, Callback.t_last = now - Callback.t_last, now
            steps = max(1, args.logging_steps)
            pass_rate = next(
                (v for k, v in logs.items() if k.startswith("rewards/pass") and k.endswith("/mean")), None
            )
            row = {
                "step": state.global_step,
                "loss": logs.get("loss"),
                "reward_mean": logs.get("reward"),
                "reward_std": logs.get("reward_std"),
                "pass_rate": pass_rate,
                "completion_len": logs.get("completions/mean_length"),
                "kl": logs.get("kl", 0.0),
                "clip_frac": logs.get("clip_ratio/region_mean", 0.0),
                "zero_std_frac": logs.get("frac_reward_zero_std"),
                "entropy": logs.get("entropy"),
                "time_s": dt / steps,
                "sandbox_share": _Timed.spent / dt if dt > 0 else 0.0,
            }
            row.update({k: v for k, v in logs.items() if k.startswith("rewards/")})
            row.update(Callback.pending)
            _Timed.spent, Callback.pending = 0.0, {}
            log.log(row)
            metrics.append_samples(run, grpo_samples(self.trainer, state.global_step, task_ids or {}))

    return Callback()


def grpo_samples(trainer, step: int, task_ids: dict[str, str]) -> list[dict]:
    """samples.jsonl rows of the last generation batch, from what TRL keeps for `log_completions` (gathered over
    ranks): completion, each reward term, their weighted sum, advantage. [] if this TRL keeps no such record."""
    logs = getattr(trainer, "_logs", None)
    if not logs or not logs.get("completion"):
        return []
    names = list(logs["rewards"])
    weights = [float(w) for w in trainer.reward_weights.tolist()] if hasattr(trainer, "reward_weights") else [1.0]
    rows = []
    for i, (prompt, completion) in enumerate(zip(logs["prompt"], logs["completion"], strict=False)):
        terms = {name: logs["rewards"][name][i] for name in names if i < len(logs["rewards"][name])}
        row = {"step": step, "task_id": task_ids.get(prompt, ""), "completion": completion,
               "reward": round(sum(w * v for w, v in zip(weights, terms.values(), strict=False) if v == v), 6),
               "rewards": {k: round(v, 6) for k, v in terms.items()}}  # fmt: skip
        if "pass_reward" in terms:
            row["passed"] = terms["pass_reward"] == 1.0
        if i < len(logs["advantages"]):
            row["advantage"] = round(float(logs["advantages"][i]), 6)
        rows.append(row)
    return rows


def grpo_args(cfg: Config, out):
    """TRL's GRPOConfig for one step = P prompts x G completions, one optimizer step per generation batch."""
    completions_per_step = cfg.prompts_per_step * cfg.num_generations
    return GRPOConfig(
        **trainer_args(cfg, out),
        per_device_train_batch_size=completions_per_step,
        gradient_accumulation_steps=1,
        steps_per_generation=1,
        num_generations=cfg.num_generations,
        lr_scheduler_type="constant",
        warmup_steps=0,
        beta=cfg.beta,
        loss_type=cfg.loss_type,
        epsilon=cfg.clip_eps,
        epsilon_high=cfg.clip_eps_high or None,
        importance_sampling_level=cfg.importance_sampling_level,
        mask_truncated_completions=cfg.mask_truncated_completions,
        num_iterations=cfg.num_iterations,
        scale_rewards=cfg.scale_rewards,
        reward_weights=make_rewards(cfg.rewards).weights,
        temperature=cfg.temperature,
        top_p=cfg.top_p,
        max_completion_length=cfg.max_new_tokens,
        use_vllm=cfg.use_vllm,
        vllm_mode=cfg.vllm_mode,
        vllm_server_base_url=cfg.vllm_server_url if cfg.use_vllm and cfg.vllm_mode == "server" else None,
        vllm_gpu_memory_utilization=cfg.vllm_gpu_memory_utilization,
        logging_steps=1,
        remove_unused_columns=False,
        disable_tqdm=False,
        log_completions=False,
    )


def train(cfg: Config) -> Path:
    """Run GRPO with TRL; returns the run directory (adapter, config.json, metrics.jsonl, checkpoint-N/)."""
    seed_everything(cfg.seed, cfg.threads)
    out = cfg.run_dir
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / "config.json", {"stage": "grpo", **config_to_dict(cfg)})
    model, tokenizer = load_policy(starting_model_dir(cfg.init), load_in_4bit=cfg.load_in_4bit, trainable=True)
    dataset = build_dataset(cfg, tokenizer)
    funcs, _ = reward_functions(cfg)
    args = grpo_args(cfg, out)
    last = get_last_checkpoint(str(out)) if any(out.glob("checkpoint-*")) else None
    best = out / "best" / "eval.json"
    keeper = Keeper(cfg, out, json.loads(best.read_text()) if last and best.exists() else None, fresh=not last)
    callback = metrics_callback(out, dict(zip(dataset["prompt"], dataset["task_id"], strict=True)), keeper)
    trainer = GRPOTrainer(model=model, reward_funcs=funcs, args=args, train_dataset=dataset,
                          processing_class=tokenizer, peft_config=lora_config(cfg), callbacks=[callback])  # fmt: skip
    callback.trainer = trainer
    if last:
        print(f"resuming from {last}")
        metrics.truncate_metrics(out / "metrics.jsonl", int(Path(last).name.split("-")[-1]))
        metrics.truncate_metrics(out / "samples.jsonl", int(Path(last).name.split("-")[-1]))
    else:
        (out / "metrics.jsonl").unlink(missing_ok=True)
        (out / "samples.jsonl").unlink(missing_ok=True)
    trainer.train(resume_from_checkpoint=last)
    write_rank_checksums(trainer.model, out)
    if trainer.accelerator.is_main_process:
        keeper.finish(trainer.accelerator.unwrap_model(trainer.model), tokenizer)
    return out


if __name__ == "__main__":
    train(main_config(Config))
