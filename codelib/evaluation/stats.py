"""Statistics of pass@k, all of them: the unbiased estimator (one k, or every k at once), bootstrap intervals over
tasks, the pass@k curve with its band, paired differences.

Intervals are percentile bootstraps over tasks (tasks are the unit that varies between benchmarks; samples of
one task are not independent). `pass_at_k_curve(per_task)` takes the per-task counts an eval summary holds
(`[{"n": 64, "c": 20}, ...]`) and returns pass@k for k = 1..n; tasks are resampled together for every k, so the band
is one curve's uncertainty, not k independent ones. The figures and the `python -m codelib.passk` command that
draw these curves live in `codelib.evaluation.passk`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c passed (Chen et al. 2021): 1 - C(n-c, k) / C(n, k)."""
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"pass@{k} needs at least {k} samples per task; got n={n}")
    if n - c < k:
        return 1.0  # every k-subset holds a pass
    # The product form avoids the huge binomials of the textbook formula.
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def pass_at_k_matrix(n: Sequence[int], c: Sequence[int], k_max: int | None = None) -> np.ndarray:
    """Unbiased pass@k of every task for k = 1..k_max (default min n): an array [tasks, k_max].

    pass@k = 1 - C(n-c, k) / C(n, k), and the ratio is the running product of (n-c-j) / (n-j) for j < k, so one
    cumulative product gives every k; each factor is in [0, 1], so nothing overflows.
    """
    n, c = np.asarray(n, dtype=np.int64), np.asarray(c, dtype=np.int64)
    if n.shape != c.shape or n.ndim != 1:
        raise ValueError(f"n and c must be 1-d and the same length, got {n.shape} and {c.shape}")
    if n.size and ((c < 0).any() or (c > n).any()):
        raise ValueError("need 0 <= c <= n for every task")
    k_max = int(n.min()) if k_max is None and n.size else int(k_max or 0)
    if n.size and k_max > n.min():
        raise ValueError(f"pass@{k_max} needs at least {k_max} samples per task; the fewest is {int(n.min())}")
    j = np.arange(k_max)  # [k_max]
    factors = np.clip(n[:, None] - c[:, None] - j, 0, None) / (n[:, None] - j)  # [tasks, k_max]
    return 1.0 - np.cumprod(factors, axis=1)  # [tasks, k_max]: column k-1 is pass@k


def pass_at_k_curve(
    per_task: Sequence[dict], k_max: int | None = None, iters: int = 1000, seed: int = 0, alpha: float = 0.05
) -> dict:
    """pass@k for k = 1..k_max over tasks ({"n", "c"} rows) with a (1 - alpha) bootstrap interval over tasks.

    Returns {"k": [1..k_max], "pass@k": [...], "ci_low": [...], "ci_high": [...], "tasks": T}, plain lists.
    """
    if not per_task:
        return {"k": [], "pass@k": [], "ci_low": [], "ci_high": [], "tasks": 0}
    values = pass_at_k_matrix([r["n"] for r in per_task], [r["c"] for r in per_task], k_max)  # [tasks, K]
    rng = np.random.default_rng(seed)
    t = len(values)
    idx = rng.integers(0, t, size=(iters, t))  # [iters, tasks]: one draw shared by every k
    # how often each task was drawn, then one matmul: values[idx] would hold iters x tasks x K floats (150 MB at 64)
    draws = np.bincount((idx + t * np.arange(iters)[:, None]).ravel(), minlength=iters * t).reshape(iters, t)
    means = draws @ values / t  # [iters, K]
    lo, hi = np.quantile(means, [alpha / 2, 1 - alpha / 2], axis=0)  # [K] each
    ks = np.arange(1, values.shape[1] + 1)
    mean = values.mean(axis=0)  # [K]
    return {"k": ks.tolist(), "pass@k": mean.tolist(), "ci_low": lo.tolist(), "ci_high": hi.tolist(), "tasks": t}


def summary_curve(summary: dict, iters: int | None = None, seed: int | None = None) -> dict:
    """The curve an eval summary holds (`pass@k_curve`), or one computed from its per-task counts."""
    if summary.get("pass@k_curve") and iters is None:
        return summary["pass@k_curve"]
    iters = iters or summary.get("settings", {}).get("bootstrap_iters", 1000)
    seed = summary.get("settings", {}).get("seed", 0) if seed is None else seed
    return pass_at_k_curve(summary["per_task"], iters=iters, seed=seed)


def bootstrap_ci(
    per_task_values: Sequence[float], iters: int = 1000, seed: int = 0, alpha: float = 0.05
) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean, resampling tasks with replacement; (nan, nan) for no tasks."""
    x = np.asarray(per_task_values, dtype=float)
    if x.size == 0:
        return (math.nan, math.nan)
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, size=(iters, x.size))].mean(axis=1)  # [iters]
    lo, hi = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    return (float(lo), float(hi))


def paired_difference(
    a_per_task: Sequence[float], b_per_task: Sequence[float], iters: int = 1000, seed: int = 0, alpha: float = 0.05
) -> dict:
    """mean(a - b) over the same tasks, with a paired bootstrap CI (tasks resampled together for a and b).

    Pairing removes the task-difficulty variance both share, so the interval is much tighter than comparing two
    independent intervals. A CI above 0 means a is better than b on these tasks.
    """
    a, b = np.asarray(a_per_task, dtype=float), np.asarray(b_per_task, dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"paired comparison needs the same tasks on both sides; got {a.size} and {b.size} values")
    d = a - b
    lo, hi = bootstrap_ci(d, iters=iters, seed=seed, alpha=alpha)
    return {"diff": float(d.mean()) if d.size else math.nan, "ci_low": lo, "ci_high": hi, "tasks": int(d.size)}
