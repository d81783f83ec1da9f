"""Statistics of pass@k: the unbiased estimator, bootstrap intervals over tasks, paired differences.

Intervals are percentile bootstraps over tasks (tasks are the unit that varies between benchmarks; samples of
one task are not independent).
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
