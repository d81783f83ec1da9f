"""What the trainers share: the Config fields declared once, and the scaffolding of our own loops.

`StageConfig` holds the fields of every training stage, `SamplingConfig` adds those of the stages that sample and
judge completions; each trainer's `Config` extends one of them with its algorithm's own fields. `OnlineRun` is the
part of a REINFORCE or PPO run that is not the algorithm: set-up (seed, accelerate, the policy with a fresh LoRA
adapter, optimizer, resume), one rollout per step, the step's log rows, checkpoints, and the final adapter. The
algorithms themselves (advantages, losses, the update) live in each trainer's own file.
"""

from __future__ import annotations

import math
import os
import random
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist
from accelerate import Accelerator
from accelerate.utils import gather_object

from codelib.algorithms.advantages import zero_std_groups
from codelib.algorithms.losses import KL_ESTIMATORS
from codelib.engine import metrics, rewards, rollout
from codelib.evaluation.eval_sampling import EVAL_SAMPLING
from codelib.plumbing import checkpoints
from codelib.plumbing.params import atomic_write_json, config_to_dict, run_dir
from codelib.policy.distributed import refuse_sharded_loop
from codelib.policy.generation import generate, stops_for
from codelib.policy.models import DEFAULT_TARGETS, add_lora, policy_problem, save_adapter
from codelib.tasks import load_tasks


@dataclass
class StageConfig:
    """The fields every training stage has (params/<profile>/NN_<stage>.yaml)."""

    profile: str = "tiny"  # checkpoints/<profile>/<stage>/
    stage: str = "stage"  # run directory name
    init: str = "checkpoints/tiny/sft"  # the starting policy: adapter dir (merged first), model dir, hub id or "tiny"
    dataset: str = "synthetic"  # training tasks (a codelib.tasks dataset)
    split: str = "train"  # the dataset's split
    limit: int = 0  # 0 for every task of the split
    steps: int = 100  # optimizer steps
    learning_rate: float = 1e-3  # AdamW learning rate
    max_grad_norm: float = 1.0  # gradient clipping
    lora_r: int = 16  # LoRA rank
    lora_alpha: int = 32  # LoRA scale numerator (the update is scaled by lora_alpha / lora_r)
    lora_dropout: float = 0.0  # 0 keeps training forward passes identical to the sampling policy
    target_modules: list[str] = field(default_factory=lambda: list(DEFAULT_TARGETS))  # the layers LoRA adapts
    modules_to_save: list[str] = field(default_factory=list)  # also trained in full, e.g. ["norm"]: every RMSNorm
    load_in_4bit: bool = False  # QLoRA: 4-bit NF4 base (needs CUDA)
    save_every: int = 25  # a resumable checkpoint every N steps
    seed: int = 0  # training seed
    threads: int = 0  # torch CPU threads; 0 for torch's default
    report_to: str = "tensorboard"  # "none" | "tensorboard" | "wandb"
    processes: int = 1  # >1: the notebook starts `accelerate launch` with this many processes (live log)

    def __post_init__(self):
        if self.steps <= 0:
            raise ValueError(f"steps must be positive; you gave {self.steps}")
        if self.lora_r <= 0:
            raise ValueError(f"lora_r must be positive; you gave {self.lora_r}")
        if self.save_every <= 0:
            raise ValueError(f"save_every must be positive; you gave {self.save_every}")
        if self.report_to not in ("none", "tensorboard", "wandb"):
            raise ValueError(f"report_to must be none, tensorboard or wandb; you gave {self.report_to!r}")

    @property
    def run_dir(self) -> Path:
        return run_dir(self.profile, self.stage)


@dataclass
class SamplingConfig(StageConfig):
    """+ the fields of the stages that sample completions and judge them in the sandbox."""

    rewards: dict[str, float | dict] = field(default_factory=lambda: {"pass": 1.0})  # name -> weight or {weight, args}
    temperature: float = 1.0  # sampling temperature
    top_p: float = 1.0  # nucleus sampling
    max_new_tokens: int = 64  # generation budget per completion
    workers: int = 2  # sandbox workers
    timeout_s: float = 5.0  # wall-clock limit per program

    def __post_init__(self):
        super().__post_init__()
        if self.temperature <= 0:
            raise ValueError(f"{type(self).__module__.split('.')[-1]} samples: temperature must be > 0")
        rewards.make_rewards(self.rewards)  # an unknown reward or argument fails here, naming it


@dataclass
class TrainEvalConfig(SamplingConfig):
    """+ held-out evaluation during training, and which adapter the stage leaves behind."""

    eval_every: int = 0  # held-out pass@1 every N steps (and at the last step); 0 for none
    eval_split: str = "test"  # the held-out split of `dataset` evaluated during training
    eval_limit: int = 100  # the first N tasks of eval_split (a fixed subset); 0 for all
    eval_samples: int = 2  # samples per eval task (T 0.8, seed 1234, as the eval stage samples)
    keep: str = "last"  # "last" | "best": the adapter the stage leaves (best: highest eval pass@1, needs eval_every)

    def __post_init__(self):
        super().__post_init__()
        if self.keep not in ("last", "best"):
            raise ValueError(f"keep must be 'last' or 'best'; you gave {self.keep!r}")
        if self.keep == "best" and self.eval_every <= 0:
            raise ValueError("keep: best picks the adapter by held-out pass@1: set eval_every > 0 (e.g. 25)")
        if self.eval_every < 0 or self.eval_limit < 0 or self.eval_samples < 1:
            raise ValueError("eval_every and eval_limit must be >= 0 and eval_samples >= 1")


@dataclass
class OnlineConfig(TrainEvalConfig):
    """+ the options of the online engine's plumbing (`OnlineRun`): a KL to the start policy and dynamic sampling."""

    batch_size: int = 16  # tasks per step
    samples_per_task: int = 1  # completions per task (a group when >= 2)
    kl_coef: float = 0.0  # beta: weight of the KL to the start policy (placement: the engine's kl_placement)
    kl_estimator: str = "k3"  # k1 | k2 | k3 (Schulman 2020); k3 is GRPO's
    dynamic_sampling: bool = False  # DAPO: drop groups whose accuracy is uniform (all pass / all fail), refill
    max_refills: int = 4  # dynamic sampling: at most this many extra rollout batches per step
    shared_prefix: bool = False  # update forwards run each distinct prompt once (faster; floats move ~1e-5)
    kl_every: int = 1  # with kl_coef 0 the KL to the start policy is only logged: every N steps (0: never)

    def __post_init__(self):
        super().__post_init__()
        if self.kl_estimator not in KL_ESTIMATORS:
            raise ValueError(f"unknown kl_estimator {self.kl_estimator!r}; use one of {', '.join(KL_ESTIMATORS)}")
        if self.kl_coef < 0:
            raise ValueError(f"kl_coef must be >= 0; you gave {self.kl_coef}")
        if self.dynamic_sampling and self.samples_per_task < 2:
            raise ValueError("dynamic_sampling drops groups of uniform accuracy: it needs samples_per_task >= 2")
        if self.max_refills < 0:
            raise ValueError(f"max_refills must be >= 0; you gave {self.max_refills}")
        if self.kl_every < 0:
            raise ValueError(f"kl_every must be >= 0 (0: the KL is never logged); you gave {self.kl_every}")


EVAL_TEMPERATURE, EVAL_SEED = EVAL_SAMPLING.temperature, EVAL_SAMPLING.seed  # as the eval stage samples


def eval_tasks(cfg: TrainEvalConfig) -> list:
    """The fixed held-out subset evaluated during training: the first eval_limit tasks of eval_split."""
    return load_tasks(cfg.dataset, cfg.eval_split)[: cfg.eval_limit or None]


def heldout_eval(model, tokenizer, cfg: TrainEvalConfig, tasks: list) -> dict:
    """Held-out pass@1 of the current policy through the evaluator's scoring and the sandbox: eval_pass@1 with its
    95% interval over tasks, and the share of each verdict class (eval_verdicts/<class>). RNG states are kept."""
    from codelib.evaluation.evaluator import score_completions  # the eval stage's one scoring path

    rows = len(tasks) * cfg.eval_samples
    with torch.random.fork_rng(devices=[]):
        comps = generate(
            model,
            tokenizer,
            [t.prompt for t in tasks],
            n=cfg.eval_samples,
            temperature=EVAL_TEMPERATURE,
            max_new_tokens=cfg.max_new_tokens,
            batch_size=min(rows, 256),
            seed=EVAL_SEED,
            stop=stops_for(tasks[0]),
            progress=False,
        )
    score = score_completions(
        tasks,
        [[c.text for c in cs] for cs in comps],
        workers=cfg.workers,
        timeout_s=cfg.timeout_s,
        bootstrap_iters=200,
        seed=EVAL_SEED,
    )
    return {
        "eval_pass@1": score["pass@1"],
        "eval_ci_low": score["ci_low"],
        "eval_ci_high": score["ci_high"],
        **metrics.class_shares(score["samples"], "eval_verdicts/"),
    }


class Keeper:
    """Evaluation during training and the `keep: last | best` rule, for our loops and TRL's alike: `due(step)`,
    `evaluate(...)` (also saves the adapter to <run>/best/ when it is the best so far), `finish(...)` (the kept
    adapter in the run dir, the last one in <run>/last/ when keep is best, kept.json)."""

    def __init__(self, cfg: TrainEvalConfig, out: Path, best: dict | None = None, fresh: bool = True):
        # a Config without the TrainEvalConfig fields (a loop built on SamplingConfig alone) evaluates nothing
        self.cfg, self.out, self.best = cfg, out, best
        self.every, self.keep = getattr(cfg, "eval_every", 0), getattr(cfg, "keep", "last")
        self.tasks = eval_tasks(cfg) if self.every else []
        if fresh:  # a run that starts over must not inherit an older run's best adapter
            shutil.rmtree(out / "best", ignore_errors=True)
            self.best = None

    def due(self, step: int) -> bool:
        return bool(self.every) and (step % self.every == 0 or step == self.cfg.steps)

    def evaluate(self, model, tokenizer, step: int) -> dict:
        res = heldout_eval(model, tokenizer, self.cfg, self.tasks)
        if self.best is None or res["eval_pass@1"] > self.best["eval_pass@1"]:
            self.best = {"step": step, "eval_pass@1": res["eval_pass@1"]}
            save_adapter(model, tokenizer, self.out / "best")
            atomic_write_json(self.out / "best" / "eval.json", self.best)
        return {**res, "eval_best": self.best["eval_pass@1"]}

    def finish(self, model, tokenizer, state_dict=None) -> None:
        """The trained adapter into the run dir; with keep: best, the best one there instead (the last in last/).
        state_dict: the adapter gathered from FSDP shards (`distributed.gathered_trainable_state`), else None."""
        save_adapter(model, tokenizer, self.out, state_dict=state_dict)
        kept = {"keep": self.keep, "step": self.cfg.steps}
        if self.keep == "best" and self.best is not None and (self.out / "best").exists():
            save_adapter(model, tokenizer, self.out / "last")
            for f in (self.out / "best").iterdir():
                if f.is_file() and f.name != "eval.json":
                    shutil.copy2(f, self.out / f.name)
            kept = {"keep": "best", **self.best}
        atomic_write_json(self.out / "kept.json", kept)


def check_init(cfg: StageConfig) -> None:
    """cfg.init can be loaded: checked before a run writes anything, so a typo in it never rewrites a finished run's
    config.json, and the message names the command that trains it."""
    if why := policy_problem(cfg.init, cfg.profile):
        raise FileNotFoundError(f"init: {why}")


def trainer_args(cfg: StageConfig, out: Path | None = None, **override) -> dict:
    """The transformers TrainingArguments every TRL-based stage (SFT, GRPO, DPO) sets the same way from its Config.

    TRL's configs default to bf16 autocast and gradient checkpointing; on a CPU both only cost time (DPO's tiny
    stage took 7x longer with them), so they are on only where CUDA is, unless a stage's Config says otherwise."""
    cuda = torch.cuda.is_available()
    args = dict(
        output_dir=str(out or cfg.run_dir),
        max_steps=cfg.steps,
        learning_rate=cfg.learning_rate,
        max_grad_norm=cfg.max_grad_norm,
        save_steps=cfg.save_every,
        save_total_limit=2,
        seed=cfg.seed,
        data_seed=cfg.seed,
        report_to=metrics.report_to(cfg.report_to),
        use_cpu=not cuda,
        bf16=cuda and torch.cuda.is_bf16_supported(),
        gradient_checkpointing=cuda,
    )
    return args | override


def seed_everything(seed: int, threads: int = 0) -> None:
    """Seed Python and torch; torch's CPU threads from `threads`, or from the environment's CODELIB_THREADS when set
    (on a machine shared with other jobs, 1 thread per process avoids threads waiting on each other's cores; the
    floats then differ from a 2-thread run's in the last bits)."""
    random.seed(seed)
    torch.manual_seed(seed)
    threads = int(os.environ.get("CODELIB_THREADS") or threads or 0)
    if threads:
        torch.set_num_threads(threads)


def check_finite(loss: torch.Tensor, step: int) -> None:
    if not math.isfinite(float(loss.detach())):
        raise FloatingPointError(
            f"loss is {float(loss.detach())} at step {step}: training stopped. The last good checkpoint is kept; "
            "lower learning_rate or raise max_grad_norm clipping, then rerun (it resumes from the checkpoint)."
        )


def write_rank_checksums(model, run: Path) -> None:
    """Every rank's sum of its trainable weights into run/ranks.json: identical sums = synchronised training."""
    total = sum(float(p.detach().double().sum()) for p in model.parameters() if p.requires_grad)
    if dist.is_available() and dist.is_initialized():
        sums = [None] * dist.get_world_size()
        dist.all_gather_object(sums, total)
        main = dist.get_rank() == 0
    else:
        sums, main = [total], True
    if main:
        atomic_write_json(run / "ranks.json", {"processes": len(sums), "trainable_sums": sums})


class OnlineRun:
    """A REINFORCE / PPO run's plumbing: one process as is, or DDP under `accelerate launch` (each rank rolls out and
    scores its shard of a step's tasks; gradients are averaged)."""

    def __init__(
        self, cfg: OnlineConfig, heads=None, algorithm: str = "", label: str = "", record: dict | None = None
    ):
        """heads: model -> {name: module} trained beside the adapter (PPO's value head), built after the adapter;
        algorithm, label: the registered name (codelib.algorithms.ALGORITHMS) and label config.json records;
        record: the config written there (default: cfg's fields)."""
        check_init(cfg)
        seed_everything(cfg.seed, cfg.threads)
        self.cfg, self.acc = cfg, Accelerator(cpu=not torch.cuda.is_available())
        refuse_sharded_loop(self.acc)  # FSDP / DeepSpeed: stop here with the fix (our loops sample on every rank)
        self.out = cfg.run_dir
        self.out.mkdir(parents=True, exist_ok=True)
        if self.acc.is_main_process:
            fields = record if record is not None else config_to_dict(cfg)
            atomic_write_json(
                self.out / "config.json", {"stage": cfg.stage, "algorithm": algorithm, "label": label, **fields}
            )
        self.tasks = load_tasks(cfg.dataset, cfg.split)[: cfg.limit or None]
        ranks = self.acc.num_processes
        minibatch = getattr(cfg, "minibatch_size", 0)
        if cfg.batch_size % ranks or minibatch % ranks:
            raise ValueError(
                f"batch_size ({cfg.batch_size}) and minibatch_size ({minibatch}) must divide by the number "
                f"of processes ({ranks}): every rank takes the same share of a step"
            )
        self.reward = rewards.make_rewards(cfg.rewards)
        model, self.tokenizer = add_lora(cfg)
        heads = {k: m.to(self.acc.device) for k, m in (heads(model) if heads else {}).items()}
        self.params = [p for p in model.parameters() if p.requires_grad] + [
            p for m in heads.values() for p in m.parameters()
        ]
        optimizer = torch.optim.AdamW(self.params, lr=cfg.learning_rate, weight_decay=0.0)
        # prepare before restoring: whatever RNG accelerate consumes then is consumed in a fresh run too
        prepared = self.acc.prepare(model, *heads.values(), optimizer)  # one DDP module each, one optimizer
        self.model, self.optimizer = prepared[0], prepared[-1]
        self.heads = dict(zip(heads, prepared[1:-1], strict=True))
        self.policy = self.acc.unwrap_model(self.model)
        self.fingerprint = checkpoints.config_fingerprint(cfg)
        self.start, self.extra = checkpoints.load_checkpoint(
            self.out,
            self.policy,
            self.optimizer,
            self._unwrapped_heads(),
            fingerprint=self.fingerprint,
            max_step=cfg.steps,
        )
        self.acc.wait_for_everyone()
        if self.acc.is_main_process:
            metrics.truncate_metrics(self.out / "metrics.jsonl", self.start)
            metrics.truncate_metrics(self.out / "samples.jsonl", self.start)
        self.log = metrics.MetricsLog(self.out, cfg.report_to) if self.acc.is_main_process else None
        self.keeper = (
            Keeper(cfg, self.out, self.extra.get("best"), fresh=not self.start) if self.acc.is_main_process else None
        )
        self.n_per_task, self.sampling_stats = 1, {}
        if self.start:
            print(f"resuming from step {self.start}")

    def _unwrapped_heads(self) -> dict:
        return {k: self.acc.unwrap_model(m) for k, m in self.heads.items()}

    def steps(self):
        """The steps still to run, as a progress bar (`codelib.plumbing.progress`: a widget in JupyterLab, one line per ~20 s
        headless) whose postfix `record` sets to the last step's reward, pass rate, length and KL."""
        from codelib.plumbing.progress import steps as progress_steps

        self.bar = progress_steps(
            range(self.start + 1, self.cfg.steps + 1),
            total=self.cfg.steps,
            initial=self.start,
            desc=self.out.name,
            disable=not self.acc.is_main_process,
        )
        return self.bar

    def rollout(self, step: int, n_per_task: int) -> rollout.Rollouts:
        """This rank's share of the step's tasks, n_per_task completions each, judged and scored."""
        rank, ranks = self.acc.process_index, self.acc.num_processes
        tasks = rollout.batch_tasks(self.tasks, self.cfg.batch_size, step, self.cfg.seed)
        mine = tasks[rank::ranks]
        seed = self.cfg.seed + step + 7919 * rank
        ro = rollout.rollout(self.policy, self.tokenizer, mine, n_per_task, self.cfg, seed, self.reward)
        self.n_per_task, self.sampling_stats = n_per_task, {}
        if not self.cfg.dynamic_sampling:
            return ro

        def more(r: int) -> rollout.Rollouts:
            """Refill r: fresh tasks and seeds, a function of (seed, step, r) alone (a resumed run sees the same)."""
            fresh = rollout.batch_tasks(self.tasks, self.cfg.batch_size, step, self.cfg.seed + 104_729 * r)[
                rank::ranks
            ]
            return rollout.rollout(
                self.policy, self.tokenizer, fresh, n_per_task, self.cfg, seed + 15_485_863 * r, self.reward
            )

        ro, self.sampling_stats = rollout.fill_dynamic(ro, more, n_per_task, len(mine), self.cfg.max_refills)
        return ro

    def reference_due(self, step: int) -> bool:
        """Whether this step runs the start policy's forward: a KL term (kl_coef > 0) needs it every step; the logged
        KL alone every `kl_every` steps and at the last (the forward is ~10% of a step; TRL's GRPO at beta 0 skips
        it too)."""
        cfg = self.cfg
        every = cfg.kl_every
        return cfg.kl_coef > 0 or (every > 0 and (step % every == 0 or step == cfg.steps))

    def gather(self, t: torch.Tensor) -> torch.Tensor:
        """Concatenate a per-rank tensor over ranks (the identity in one process)."""
        if self.acc.num_processes == 1:
            return t
        return self.acc.gather(t.to(self.acc.device).contiguous()).cpu()

    def update(self, loss: torch.Tensor, step: int) -> torch.Tensor:
        """One optimizer step on `loss` (checked finite), gradients clipped; returns the gradient norm."""
        check_finite(loss, step)
        self.optimizer.zero_grad(set_to_none=True)
        self.acc.backward(loss)
        grad_norm = self.acc.clip_grad_norm_(self.params, self.cfg.max_grad_norm)
        self.optimizer.step()
        return grad_norm

    def record(self, step: int, ro: rollout.Rollouts, t0: float, row: dict, advantages=None, extra=None) -> None:
        """The step's samples and metrics row (whole-batch statistics over ranks), then a checkpoint when due."""
        all_rewards = self.gather(ro.rewards)  # [N * ranks]
        passed, lengths = self.gather(ro.passed), self.gather(ro.lengths)
        kl = row.pop("kl")  # None on a step that ran no reference forward (`kl_every`)
        kl = {} if kl is None else {"kl": float(self.gather(torch.tensor([kl])).mean())}
        samples = rollout.sample_rows(ro, step, advantages)
        multi = self.acc.num_processes > 1
        samples = gather_object(samples) if multi else samples
        classes = gather_object(list(ro.classes)) if multi else ro.classes
        telemetry = {**metrics.class_shares(classes), **self._group_stats(all_rewards)}
        tamper = gather_object(list(ro.tamper)) if multi else ro.tamper
        if tamper:  # the share of rollouts the sandbox saw probing it (signals, denied calls, early exits, ...)
            telemetry["tamper_frac"] = sum(1 for t in tamper if t) / len(tamper)
        if self.acc.is_main_process:
            metrics.append_samples(self.out, samples)
        dt = time.time() - t0  # the samples' rows written included, as TRL's step time includes its logging
        if self.acc.is_main_process:
            log_row = {
                "step": step,
                "loss": row.pop("loss"),
                "reward_mean": float(all_rewards.mean()),
                "reward_std": float(all_rewards.std()) if len(all_rewards) > 1 else 0.0,
                "pass_rate": float(passed.mean()),
                "completion_len": float(lengths.mean()),
                **kl,
                **row,
                **rollout.term_means(ro),
                **telemetry,
                "time_s": dt,
                "generate_share": ro.generate_s / dt,
                "sandbox_share": ro.sandbox_s / dt,
            }
            if self.keeper.due(step):
                t_eval = time.time()
                log_row.update(self.keeper.evaluate(self.policy, self.tokenizer, step))
                log_row["eval_s"] = time.time() - t_eval
            self.log.log(log_row)
            if getattr(self, "bar", None) is not None:
                from codelib.plumbing.progress import compact

                self.bar.set_postfix_str(compact(log_row), refresh=False)
            if step % self.cfg.save_every == 0 or step == self.cfg.steps:
                checkpoints.save_checkpoint(
                    self.out,
                    self.policy,
                    self.optimizer,
                    step,
                    {**(extra or {}), "best": self.keeper.best},
                    self._unwrapped_heads(),
                    fingerprint=self.fingerprint,
                )
        if multi and getattr(self.cfg, "eval_every", 0):
            self.acc.wait_for_everyone()  # the main process evaluated while the others waited

    def _group_stats(self, all_rewards: torch.Tensor) -> dict:
        """zero_std_frac: the share of the trained batch's groups whose rewards were all equal; with dynamic
        sampling also drop_frac, the share of sampled groups it dropped for uniform accuracy, and its counts (summed
        over ranks). Absent with one sample per task (no groups)."""
        if self.n_per_task < 2:
            return {}
        out = {"zero_std_frac": float(zero_std_groups(all_rewards, self.n_per_task).float().mean())}
        if not self.sampling_stats:
            return out
        st = self.sampling_stats
        sums = self.gather(
            torch.tensor([[st["groups_dropped"], st["groups_seen"], st["refills"], st["groups_short"]]])
        )
        dropped, seen, refills, short = sums.sum(0).tolist()
        return {
            **out,
            "drop_frac": dropped / max(1.0, seen),
            "groups_dropped": dropped,
            "refills": refills,
            "groups_short": short,
        }

    def finish(self) -> Path:
        """Every rank's weight checksum, then the trained adapter (+ heads) in the run dir; returns it."""
        self.acc.wait_for_everyone()
        write_rank_checksums(self.policy, self.out)
        if self.acc.is_main_process:
            self.log.close()
            self.keeper.finish(self.policy, self.tokenizer)
            for name, head in self._unwrapped_heads().items():
                torch.save(head.state_dict(), self.out / f"{name}.pt")
        return self.out
