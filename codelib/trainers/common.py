"""What the trainers share: the Config fields declared once, and the scaffolding of our own loops.

`StageConfig` holds the fields of every training stage, `SamplingConfig` adds those of the stages that sample and
judge completions; each trainer's `Config` extends one of them with its algorithm's own fields (they live in
`configs`, evaluation during training and `Keeper` in `keeper`; both stay importable from here). `OnlineRun` is the
part of a REINFORCE or PPO run that is not the algorithm: set-up (seed, accelerate, the policy with a fresh LoRA
adapter, optimizer, resume), one rollout per step, the step's log rows, checkpoints, and the final adapter. The
algorithms themselves (advantages, losses, the update) live in each trainer's own file.
"""

from __future__ import annotations

import math
import random
import time
from pathlib import Path

import torch
import torch.distributed as dist
from accelerate import Accelerator
from accelerate.utils import gather_object

from codelib.algorithms.advantages import zero_std_groups
from codelib.engine import metrics, rewards, rollout
from codelib.plumbing import checkpoints
from codelib.plumbing.params import atomic_write_json, config_to_dict
from codelib.plumbing.threads import set_threads
from codelib.policy.distributed import refuse_sharded_loop, save_gathered
from codelib.policy.models import adapters_fp32, add_lora, policy_problem
from codelib.tasks import load_tasks
from codelib.trainers.configs import OnlineConfig, SamplingConfig, StageConfig, TrainEvalConfig  # noqa: F401
from codelib.trainers.keeper import EVAL_SEED, EVAL_TEMPERATURE, Keeper, eval_tasks, heldout_eval  # noqa: F401


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


def train_trl(trainer, tokenizer, cfg: StageConfig, out: Path, fresh_metrics: bool = False, data: str = "") -> int:
    """Train a TRL trainer (SFT, DPO) the way our stages do: its adapters in fp32, one progress bar, resumed from the
    last checkpoint in `out` if it was written with the same settings and training rows (`data`: their digest;
    `checkpoints.trl_resume_point`), else from the start (fresh_metrics: a run that starts over drops the old
    metrics.jsonl), then the adapter saved to `out` (gathered under FSDP; the main process writes). A run that
    already finished with them is kept as it is (transformers' Trainer, resumed at its last step, would take one
    step more). Returns the run's optimizer steps."""
    adapters_fp32(trainer.model)  # TRL casts a 4-bit model's adapters to bf16; our loops train them in fp32
    from codelib.plumbing.progress import use_progress

    use_progress(trainer, cfg.stage)  # one bar: a widget in JupyterLab, a line per ~20 s headless
    last = checkpoints.trl_resume_point(out, f"{checkpoints.config_fingerprint(cfg)}/{data}")
    if last and (done := _finished_at(Path(last), trainer.args.max_steps)) and (out / "adapter_config.json").exists():
        print(f"{out}: finished at step {done} with these settings and data; kept (delete it to train again)")
        return done
    if last:
        print(f"resuming from {last}")
    elif fresh_metrics:
        (out / "metrics.jsonl").unlink(missing_ok=True)
    trainer.train(resume_from_checkpoint=last)
    tokenizer.padding_side = "left"
    save_gathered(trainer.accelerator, trainer.model, tokenizer, out)  # FSDP: gathered; the main process writes
    return trainer.state.global_step


def _finished_at(checkpoint: Path, max_steps: int) -> int:
    """The step a TRL checkpoint ended its run at, if the new run does not ask for more steps (`max_steps`), else 0."""
    step = checkpoints.trainer_state_end(checkpoint)
    return step if max_steps <= 0 or max_steps <= step else 0


def seed_everything(seed: int, threads: int = 0) -> None:
    """Seed Python and torch; torch's CPU threads from `threads`, or from the environment's CODELIB_THREADS when set
    (on a machine shared with other jobs, 1 thread per process avoids threads waiting on each other's cores; the
    floats then differ from a 2-thread run's in the last bits)."""
    random.seed(seed)
    torch.manual_seed(seed)
    set_threads(threads)


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
        self,
        cfg: OnlineConfig,
        heads=None,
        algorithm: str = "",
        label: str = "",
        record: dict | None = None,
        clip_apart: bool = False,
    ):
        """heads: model -> {name: module} trained beside the adapter (PPO's value head), built after the adapter;
        algorithm, label: the registered name (codelib.algorithms.ALGORITHMS) and label config.json records;
        record: the config written there (default: cfg's fields); clip_apart: clip the heads' gradient norm apart
        from the policy's (a critic with a trunk of its own, as two models with two optimizers would be)."""
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
        group = getattr(cfg, "samples_per_task", 1)
        if getattr(cfg, "minibatch_order", "rows") == "groups" and (minibatch // ranks) % group:
            raise ValueError(
                f"minibatch_order: groups puts whole groups in every rank's minibatch: minibatch_size ({minibatch}) "
                f"must be a multiple of samples_per_task x processes ({group} x {ranks})"
            )
        self.reward = rewards.make_rewards(cfg.rewards)
        model, self.tokenizer = add_lora(cfg)
        heads = {k: m.to(self.acc.device) for k, m in (heads(model) if heads else {}).items()}
        head_params = [p for m in heads.values() for p in m.parameters() if p.requires_grad]
        self.params = [p for p in model.parameters() if p.requires_grad] + head_params
        # the gradient-norm clip's groups: all together, or (clip_apart) the policy's and the heads' each alone
        n_policy = len(self.params) - len(head_params)
        self.clip_groups = [self.params[:n_policy], head_params] if clip_apart else [self.params]
        self.critic_grad_norm = None  # the heads' norm of the last update (clip_apart)
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
        """The steps still to run, as a progress bar (`codelib.plumbing.progress`: a widget in JupyterLab, one line
        per ~20 s headless) whose postfix `record` sets to the last step's reward, pass rate, length and KL."""
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
        tasks = rollout.batch_tasks(self.tasks, self.cfg.batch_size, step, self.cfg.seed, self.cfg.task_order)
        mine = tasks[rank::ranks]
        seed = self.cfg.seed + step + 7919 * rank
        ro = rollout.rollout(self.policy, self.tokenizer, mine, n_per_task, self.cfg, seed, self.reward)
        self.n_per_task, self.sampling_stats = n_per_task, {}
        if not self.cfg.dynamic_sampling:
            return ro

        def more(r: int) -> rollout.Rollouts:
            """Refill r: fresh tasks and seeds, a function of (seed, step, r) alone (a resumed run sees the same)."""
            fresh = rollout.batch_tasks(
                self.tasks, self.cfg.batch_size, step, self.cfg.seed + 104_729 * r, self.cfg.task_order
            )[rank::ranks]
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
        norms = [self.acc.clip_grad_norm_(group, self.cfg.max_grad_norm) for group in self.clip_groups]
        self.optimizer.step()
        if len(norms) > 1:
            self.critic_grad_norm = norms[1]
        return norms[0]

    def train_mode(self, on: bool) -> None:
        """The policy and the heads in training (on) or eval mode (a critic's trunk drops out like the policy)."""
        for m in (self.model, *self.heads.values()):
            m.train(on)

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
