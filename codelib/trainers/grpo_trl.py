"""The GRPO family on TRL's GRPOTrainer (`backend: trl`): the second backend, for the settings many users know and
as a cross-check of the own engine (`codelib.trainers.online`) on the same config.

The start policy (the SFT adapter, merged into its base) gets a fresh LoRA adapter that TRL trains; TRL's reference
model is that network with the adapter off. Generation is TRL's, fed the project's stop sequences: each completion is
cut at the first one (`StoppingTrainer`), as the own engine and the evaluator cut theirs, and the rewards score the
text before it. TRL logs its own keys; `metrics_callback` renames them to the keys the own engine writes, and a
quantity TRL did not compute (KL at beta 0) is left absent, not 0.

    python -m codelib.trainers.grpo params/tiny/variants/04_grpo_trl.yaml
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from accelerate.utils import gather_object
from datasets import Dataset
from transformers import TrainerCallback
from trl import GRPOConfig, GRPOTrainer

from codelib import sandbox
from codelib.engine import metrics, rewards
from codelib.engine.rewards import make_rewards
from codelib.plumbing import checkpoints
from codelib.plumbing.params import atomic_write_json, config_to_dict
from codelib.policy.distributed import gathered_trainable_state, grpo_batches, refuse_rank0_work
from codelib.policy.generation import find_stop, stops_for, trim
from codelib.policy.models import adapters_fp32, load_policy, lora_config, starting_model_dir
from codelib.tasks import load_tasks
from codelib.trainers.common import Keeper, check_init, seed_everything, trainer_args, write_rank_checksums


class _Timed:
    """A reward function that cuts each completion before its stop sequence (TRL decodes the tokens up to and
    including the stop), adds its wall time to a shared counter (the sandbox's share of a step); the first one also
    records the verdict class of every completion it scored (`rewards.verdicts` is cached: no new runs when a term
    already judged them) and starts the generation batch's sample record (prompts and completions as TRL passes
    them, gathered over processes), to which every term adds its rewards (`grpo_samples` writes them)."""

    spent = 0.0
    classes: list[str] = []
    batch: dict = {}  # the last generation batch: prompt, completion, rewards {term: values}; {} once written

    def __init__(self, fn, record_classes: bool = False, stop: tuple = ()):
        self.fn, self.record_classes, self.stop = fn, record_classes, stop
        self.__name__ = getattr(fn, "__name__", type(fn).__name__)

    def __call__(self, completions, **kwargs):
        t0 = time.time()
        scored = [_before_stop(c, self.stop) for c in completions]
        try:
            out = self.fn(scored, **kwargs)
            if self.record_classes:
                _Timed.classes.extend(metrics.verdict_class(v) for v in rewards.verdicts(scored, **kwargs) if v)
                prompts = kwargs.get("prompts") or [""] * len(completions)
                _Timed.batch = {
                    "prompt": gather_object(list(prompts)),
                    "completion": gather_object(list(completions)),
                    "rewards": {},
                }
            if _Timed.batch:
                values = [float("nan") if v is None else float(v) for v in out]
                _Timed.batch["rewards"][self.__name__] = gather_object(values)
            return out
        finally:
            _Timed.spent += time.time() - t0


def _before_stop(text: str, stop: tuple) -> str:
    hit = find_stop(text, stop) if stop else None
    return text if hit is None else text[: hit[0]]


def reward_functions(cfg, stop: tuple = ()) -> tuple[list, list[float]]:
    """The configured reward terms (TRL signature, timed, cut at `stop`) and their weights; the sandbox pool sized
    from the config."""
    sandbox.configure(workers=cfg.workers, timeout_s=cfg.timeout_s)
    reward = make_rewards(cfg.rewards)
    parts = [_Timed(fn, record_classes=i == 0, stop=stop) for i, (_, fn) in enumerate(reward.parts)]
    return parts, reward.weights


class StoppingTrainer(GRPOTrainer):
    """TRL's GRPOTrainer whose completions end at the project's stop sequences: each one is cut to the shortest prefix
    whose decoding reaches the first stop (`generation.trim`, what the own sampler returns); the rest is dropped
    before TRL computes masks, log-probs and the loss, so no token past the stop point is trained. TRL has no public
    hook between generating and scoring, so this overrides its generation step (`_generate_single_turn`)."""

    def __init__(self, *args, stop_sequences: tuple = (), stop_tokenizer=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.stop_sequences, self.stop_tokenizer = tuple(stop_sequences), stop_tokenizer

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        completion_ids, logprobs = super()._generate_single_turn(
            prompt_ids, images, multimodal_fields, num_generations, has_tool_images
        )
        if not self.stop_sequences:
            return completion_ids, logprobs
        cut = [
            trim(self.stop_tokenizer, ids, self.stop_sequences, self.eos_token_ids).ids or ids[:1]
            for ids in completion_ids
        ]
        if logprobs is not None:
            logprobs = [lp[: len(c)] for lp, c in zip(logprobs, cut, strict=True)]
        return cut, logprobs


def build_dataset(cfg, tokenizer) -> Dataset:
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


def metrics_callback(
    run: Path,
    task_ids: dict[str, str] | None = None,
    keeper: Keeper | None = None,
    weights: list[float] | None = None,
    per: int = 1,
):
    """Rename TRL's log keys to the keys REINFORCE and PPO write, and append them to metrics.jsonl; also each
    generation batch's completions to samples.jsonl (task_ids: prompt -> task id; weights: the reward terms'), and
    with a `keeper` (and `callback.trainer` set), held-out pass@1 every eval_every steps. `per`: TRL's optimizer
    steps per rollout step (`updates_per_rollout`); a row's `step` counts rollouts, as the own engine's do. The
    telemetry rows also go to TRL's TensorBoard / W&B: the callback runs first among the trainer's callbacks
    (`first_callback`) and adds them to the logs every callback receives, and to `state.log_history`."""
    log = metrics.MetricsLog(run, "none")  # TRL itself reports to TensorBoard / W&B

    class Callback(TrainerCallback):
        t_last = time.time()
        trainer = None
        pending: dict = {}

        def on_step_end(self, args, state, control, **kwargs):
            """The step's verdict classes (and, when due, held-out pass@1), for on_log: it adds them to the step's
            logs (TensorBoard / W&B report them there) and copies them to metrics.jsonl."""
            pending = metrics.class_shares(_Timed.classes)  # {} on a step that reused a generation batch
            _Timed.classes = []
            step, within = divmod(state.global_step, per)
            if keeper is not None and state.is_world_process_zero and not within and keeper.due(step):
                t0 = time.time()
                model = self.trainer.accelerator.unwrap_model(self.trainer.model)
                pending.update(keeper.evaluate(model, self.trainer.processing_class, step))
                pending["eval_s"] = time.time() - t0
                model.train()
            Callback.pending = {**Callback.pending, **pending}  # until on_log: a rollout's updates log once

        def on_log(self, args, state, control, logs=None, **kwargs):
            if not logs or "loss" not in logs or not state.is_world_process_zero:
                return
            logs.update(Callback.pending)  # the callbacks after this one (TensorBoard, W&B) report them too
            if state.log_history and state.log_history[-1].get("step") == state.global_step:
                state.log_history[-1].update(Callback.pending)
            now = time.time()
            dt, Callback.t_last = now - Callback.t_last, now
            steps = max(1, args.logging_steps // per)  # rollout steps since the last row
            step = state.global_step // per
            pass_rate = next(
                (v for k, v in logs.items() if k.startswith("rewards/pass") and k.endswith("/mean")), None
            )
            row = {
                "step": step,
                "loss": logs.get("loss"),
                "reward_mean": logs.get("reward"),
                "reward_std": logs.get("reward_std"),
                "pass_rate": pass_rate,
                "completion_len": logs.get("completions/mean_length"),
                "kl": logs.get("kl"),  # absent at beta 0: TRL computes no KL then
                "clip_frac": logs.get("clip_ratio/region_mean"),
                "clip_frac_low": logs.get("clip_ratio/low_mean"),
                "clip_frac_high": logs.get("clip_ratio/high_mean"),
                "zero_std_frac": logs.get("frac_reward_zero_std"),
                "entropy": logs.get("entropy"),
                "grad_norm": logs.get("grad_norm"),  # before clipping, as the own engine logs it
                "time_s": dt / steps,
                "sandbox_share": _Timed.spent / dt if dt > 0 else 0.0,
            }
            row = {k: v for k, v in row.items() if v is not None}  # a key TRL did not log is absent, not 0
            row.update({k: v for k, v in logs.items() if k.startswith("rewards/")})
            row.update(Callback.pending)
            _Timed.spent, Callback.pending = 0.0, {}
            log.log(row)
            metrics.append_samples(run, grpo_samples(_Timed.batch, step, task_ids or {}, weights))
            _Timed.batch = {}

    return Callback()


def grpo_samples(batch: dict, step: int, task_ids: dict[str, str], weights: list[float] | None = None) -> list[dict]:
    """samples.jsonl rows of a generation batch (`_Timed.batch`: what TRL passed the reward terms, gathered over
    processes, and what each term returned): completion, each reward term, their weighted sum. [] once written."""
    if not batch or not batch.get("completion"):
        return []
    terms_of = batch["rewards"]
    weights = list(weights or [1.0] * len(terms_of))
    rows = []
    for i, (prompt, completion) in enumerate(zip(batch["prompt"], batch["completion"], strict=False)):
        terms = {name: values[i] for name, values in terms_of.items() if i < len(values)}
        row = {
            "step": step,
            "task_id": task_ids.get(prompt, ""),
            "completion": completion,
            "reward": round(sum(w * v for w, v in zip(weights, terms.values(), strict=False) if v == v), 6),
            "rewards": {k: round(v, 6) for k, v in terms.items()},
        }
        if "pass_reward" in terms:
            row["passed"] = terms["pass_reward"] == 1.0
        rows.append(row)
    return rows


def first_callback(trainer, callback) -> None:
    """Put `callback` first among the trainer's callbacks (transformers adds the reporting ones before the caller's):
    what its on_log adds to the logs reaches TensorBoard / W&B."""
    trainer.remove_callback(callback)
    trainer.callback_handler.callbacks.insert(0, callback)


def updates_per_rollout(cfg) -> int:
    """Optimizer steps per generation batch: `num_iterations` passes of `steps_per_generation` minibatches. The own
    engine's `steps` count rollouts; TRL's `max_steps` counts optimizer steps, so the TRL run takes `steps` times
    this many (and saves and logs once per rollout) to train on as many rollouts."""
    return cfg.steps_per_generation * cfg.num_iterations


def grpo_args(cfg, out, vocab: int = 0):
    """TRL's GRPOConfig for one generation batch = P prompts x G completions over all processes, `steps_per_generation`
    optimizer steps per generation batch (as the own engine's minibatches), in micro-batches whose logits fit
    (`distributed.grpo_batches`; vocab 0: no cap); `steps` rollouts, as the own engine runs them."""
    from accelerate import PartialState

    k = cfg.steps_per_generation
    micro, accum = grpo_batches(
        cfg.prompts_per_step * cfg.num_generations // k,
        PartialState().num_processes,
        cfg.max_prompt_tokens + cfg.max_new_tokens,
        vocab,
    )
    per = updates_per_rollout(cfg)
    return GRPOConfig(
        **trainer_args(cfg, out, max_steps=cfg.steps * per, save_steps=cfg.save_every * per),
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=accum,
        steps_per_generation=accum * k,
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
        logging_steps=per,  # one row per rollout: TRL averages its metrics over the rollout's updates
        remove_unused_columns=False,
        disable_tqdm=False,
        log_completions=False,
    )


def train(cfg) -> Path:
    """Run the GRPO family with TRL (cfg: `codelib.trainers.grpo.Config`); returns the run directory (adapter,
    config.json, metrics.jsonl, checkpoint-N/)."""
    check_init(cfg)
    seed_everything(cfg.seed, cfg.threads)
    out = cfg.run_dir
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(
        out / "config.json",
        {"stage": cfg.stage, "algorithm": cfg.algorithm, "label": cfg.label, **config_to_dict(cfg)},
    )
    model, tokenizer = load_policy(starting_model_dir(cfg.init), load_in_4bit=cfg.load_in_4bit, trainable=True)
    dataset = build_dataset(cfg, tokenizer)
    stop = stops_for(load_tasks(cfg.dataset, cfg.split)[0])
    funcs, weights = reward_functions(cfg, stop)
    args = grpo_args(cfg, out, vocab=model.config.vocab_size)
    data = checkpoints.data_digest(dataset["prompt"])  # a checkpoint of other settings or tasks is not resumed
    last = checkpoints.trl_resume_point(out, f"{checkpoints.config_fingerprint(cfg)}/{data}")
    best = out / "best" / "eval.json"
    keeper = Keeper(cfg, out, json.loads(best.read_text()) if last and best.exists() else None, fresh=not last)
    per = updates_per_rollout(cfg)
    callback = metrics_callback(
        out, dict(zip(dataset["prompt"], dataset["task_id"], strict=True)), keeper, weights, per=per
    )
    trainer = StoppingTrainer(
        model=model,
        reward_funcs=funcs,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=lora_config(cfg),
        callbacks=[callback],
        stop_sequences=stop,
        stop_tokenizer=tokenizer,
    )
    adapters_fp32(trainer.model)  # TRL casts a 4-bit model's adapters to bf16; our loops train them in fp32
    from codelib.plumbing.progress import use_progress

    use_progress(trainer, cfg.stage)  # one bar: a widget in JupyterLab, a line per ~20 s headless
    refuse_rank0_work(trainer.accelerator, cfg)  # eval on rank 0 alone would hang under FSDP
    callback.trainer = trainer
    first_callback(trainer, callback)
    if last:
        print(f"resuming from {last}")
        at = int(Path(last).name.split("-")[-1]) // per  # the checkpoint's rollout step
        metrics.truncate_metrics(out / "metrics.jsonl", at)
        metrics.truncate_metrics(out / "samples.jsonl", at)
    else:
        (out / "metrics.jsonl").unlink(missing_ok=True)
        (out / "samples.jsonl").unlink(missing_ok=True)
    trainer.train(resume_from_checkpoint=last)
    write_rank_checksums(trainer.model, out)
    state = gathered_trainable_state(trainer.model)  # FSDP: every rank joins in gathering the adapter's shards
    if trainer.accelerator.is_main_process:
        keeper.finish(trainer.accelerator.unwrap_model(trainer.model), tokenizer, state_dict=state)
    return out
