"""Evaluation during training and the `keep: last | best` rule: the held-out subset (`eval_tasks`), its pass@1
through the evaluator's scoring (`heldout_eval`), and the `Keeper` that our loops and TRL's callbacks share.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

from codelib.engine import metrics
from codelib.evaluation.eval_sampling import EVAL_SAMPLING
from codelib.plumbing.params import atomic_write_json
from codelib.policy.generation import generate, stops_for
from codelib.policy.models import save_adapter
from codelib.tasks import load_tasks
from codelib.trainers.configs import TrainEvalConfig

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
