"""Scoring: the one path from completions to pass@k. `score_completions(tasks, completions)` extracts the code of
each completion, checks every (task, code) pair in one sandbox call and returns pass@k with confidence intervals,
per-task counts and per-sample verdicts; the eval stage and evaluation during training both score through it.
"""

from __future__ import annotations

import collections
import math
import warnings
from collections.abc import Sequence

import numpy as np

from codelib import sandbox
from codelib.engine import metrics, rewards
from codelib.evaluation.stats import bootstrap_ci, pass_at_k, pass_at_k_curve
from codelib.tasks import Task


def score_completions(
    tasks: Sequence[Task],
    completions: Sequence[Sequence[str]],
    ks: Sequence[int] = (1,),
    workers: int | None = None,
    timeout_s: float = 5.0,
    plus: bool = False,
    bootstrap_iters: int = 1000,
    seed: int = 0,
) -> dict:
    """Check every completion of every task in one sandbox call; pass@k with CIs, per-task and per-sample records.

    completions[i] is the list of raw completions (model text) for tasks[i]; each goes through
    `rewards.extract_completion` first. Returns a dict with
      tasks, n_samples, ks, pass@k (for each k <= n_samples; pass@1 always), pass@k_ci_low/high,
      ci_low/ci_high (pass@1's), passed (sum over tasks of c/n: tasks solved when greedy),
      per_task: [{task_id, n, c, pass@k...}],
      samples: [{task_id, sample, code, status, passed, detail, verdict, tamper}],
      verdicts: {class: count} over `metrics.VERDICT_CLASSES` (passed, wrong_answer, runtime_error, syntax_error,
      timeout).
    """
    if len(tasks) != len(completions):
        raise ValueError(f"one list of completions per task: {len(tasks)} tasks, {len(completions)} lists")
    empty = [t.task_id for t, c in zip(tasks, completions, strict=True) if not c]
    if empty:
        raise ValueError(f"task {empty[0]} has no completions ({len(empty)} tasks have none)")
    flat_tasks, flat_codes, index = [], [], []
    for i, (task, comps) in enumerate(zip(tasks, completions, strict=True)):
        for j, text in enumerate(comps):
            flat_tasks.append(task)
            flat_codes.append(rewards.extract_completion(text, task))
            index.append((i, j))
    verdicts = sandbox.check(flat_tasks, flat_codes, workers=workers, plus=plus, timeout_s=timeout_s)

    n_min = min((len(c) for c in completions), default=0)
    ks = sorted({1, *ks})
    dropped = [k for k in ks if k > n_min]
    if dropped:
        warnings.warn(
            f"pass@{dropped} dropped: it needs at least that many samples per task, and there are {n_min}",
            stacklevel=2,
        )
    ks = [k for k in ks if k <= n_min] or [1]

    counts = [0] * len(tasks)
    samples = []
    for (i, j), code, v in zip(index, flat_codes, verdicts, strict=True):
        counts[i] += bool(v.passed)
        samples.append(
            {
                "task_id": tasks[i].task_id,
                "sample": j,
                "code": code,
                "status": v.status,
                "passed": bool(v.passed),
                "detail": v.detail,
                "verdict": metrics.verdict_class(v),
                "tamper": sandbox.tamper_of(v),  # what the sandbox saw it try ("" = nothing)
            }
        )
    per_task = []
    for task, comps, c in zip(tasks, completions, counts, strict=True):
        row = {"task_id": task.task_id, "n": len(comps), "c": c}
        row.update({f"pass@{k}": pass_at_k(len(comps), c, k) for k in ks})
        per_task.append(row)

    out = {"tasks": len(tasks), "n_samples": n_min, "ks": ks}
    for k in ks:
        values = [r[f"pass@{k}"] for r in per_task]
        lo, hi = bootstrap_ci(values, iters=bootstrap_iters, seed=seed)
        out[f"pass@{k}"] = float(np.mean(values)) if values else math.nan
        out[f"pass@{k}_ci_low"], out[f"pass@{k}_ci_high"] = lo, hi
    out["ci_low"], out["ci_high"] = out["pass@1_ci_low"], out["pass@1_ci_high"]
    out["passed"] = float(sum(r["c"] / r["n"] for r in per_task))
    out["verdicts"] = metrics.class_counts(s["verdict"] for s in samples)
    # reward-hacking telemetry: the share of samples the sandbox saw probing it, and how often each class
    out["tamper_frac"] = sum(1 for s in samples if s["tamper"]) / len(samples) if samples else math.nan
    out["tamper"] = dict(collections.Counter(c for s in samples for c in s["tamper"].split(",") if c))
    # pass@k for every k = 1..n with intervals over tasks: the curve figures read it
    out["pass@k_curve"] = pass_at_k_curve(per_task, iters=bootstrap_iters, seed=seed)
    out["per_task"] = per_task
    out["samples"] = samples
    return out
