"""pass@k curves: the unbiased estimator for every k = 1..n at once, with bootstrap intervals over tasks.

`curve(per_task)` takes the per-task counts an eval summary holds (`[{"n": 64, "c": 20}, ...]`) and returns
pass@k for k = 1..n with a percentile bootstrap interval over tasks (tasks are resampled together for every k, so
the band is one curve's uncertainty, not k independent ones). With many samples per task (n >= 64) the curve
shows whether RL raises pass@1 while narrowing what the model can solve at large k.

    python -m codelib.passk params/tiny/variants/06_eval_passk.yaml   # 64 samples/task, every checkpoint
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np


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


def curve(
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
    return {"k": ks.tolist(), "pass@k": values.mean(axis=0).tolist(), "ci_low": lo.tolist(), "ci_high": hi.tolist(),
            "tasks": len(values)}  # fmt: skip


def curves_frame(curves: dict[str, dict]):
    """One row per (checkpoint, k): checkpoint, k, pass@k, ci_low, ci_high (a pandas DataFrame)."""
    import pandas as pd

    rows = [
        {"checkpoint": name, "k": k, "pass@k": v, "ci_low": lo, "ci_high": hi}
        for name, cv in curves.items()
        for k, v, lo, hi in zip(cv["k"], cv["pass@k"], cv["ci_low"], cv["ci_high"], strict=True)
    ]
    return pd.DataFrame(rows, columns=["checkpoint", "k", "pass@k", "ci_low", "ci_high"])


def plot_curves(curves: dict[str, dict], title: str = "pass@k with 95% bootstrap intervals over tasks", ax=None):
    """pass@k against k (log2 axis) per checkpoint, each with its interval as a band; returns the figure."""
    import matplotlib.pyplot as plt

    from codelib.stages import color_of

    fig, ax = (ax.figure, ax) if ax is not None else plt.subplots(figsize=(7.5, 4.2), layout="constrained")
    for name, cv in curves.items():
        if not cv["k"]:
            continue
        ax.plot(cv["k"], 100 * np.asarray(cv["pass@k"]), color=color_of(name), label=name, marker="." if len(cv["k"]) < 20 else None)  # fmt: skip
        ax.fill_between(cv["k"], 100 * np.asarray(cv["ci_low"]), 100 * np.asarray(cv["ci_high"]), color=color_of(name), alpha=0.2)  # fmt: skip
    k_max = max((max(cv["k"]) for cv in curves.values() if cv["k"]), default=1)
    ax.set_xscale("log", base=2)
    ax.set_xticks([2**i for i in range(int(math.log2(k_max)) + 1)], [str(2**i) for i in range(int(math.log2(k_max)) + 1)])  # fmt: skip
    ax.set_xlabel("k (samples per task)")
    ax.set_ylabel("pass@k (%)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)  # beside the panel, clear of the bands
    return fig


def summary_curve(summary: dict, iters: int | None = None, seed: int | None = None) -> dict:
    """The curve an eval summary holds (`pass@k_curve`), or one computed from its per-task counts."""
    if summary.get("pass@k_curve") and iters is None:
        return summary["pass@k_curve"]
    iters = iters or summary.get("settings", {}).get("bootstrap_iters", 1000)
    seed = summary.get("settings", {}).get("seed", 0) if seed is None else seed
    return curve(summary["per_task"], iters=iters, seed=seed)


def evaluate_curves(cfg, force: bool = False, show: bool = False) -> dict[str, Path]:
    """Evaluate cfg's checkpoints (an EvalConfig, typically with n_samples >= 64) and write the curves.

    Outputs go beside, not over, the eval stage's: checkpoints/<profile>/eval_passk/<name>/ and
    reports/<profile>/passk/ (pass_at_k.csv, pass_at_k.md, figures/pass_at_k_curve.png).
    """
    import matplotlib

    if not show:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from codelib import evaluator
    from codelib.params import atomic_write_text, reports_root, run_dir

    out = reports_root() / cfg.profile / "passk"
    evaluator.evaluate(cfg, force=force, out_root=run_dir(cfg.profile, "eval_passk"), reports=out)
    summaries = {name: evaluator.load_summary(run_dir(cfg.profile, "eval_passk") / name) for name in cfg.checkpoints}
    curves = {name: summary_curve(s) for name, s in summaries.items()}
    df = curves_frame(curves)
    atomic_write_text(out / "pass_at_k.csv", df.to_csv(index=False))
    ks = [k for k in (1, 2, 4, 8, 16, 32, 64, 128, 256) if k <= cfg.n_samples]
    lines = [f"# pass@k: {cfg.dataset}/{cfg.split} ({cfg.profile}), {cfg.n_samples} samples/task at "
             f"T={cfg.temperature}", "", "Percentages with 95% bootstrap intervals over tasks.", "",
             "| checkpoint | " + " | ".join(f"pass@{k}" for k in ks) + " |", "|---" * (len(ks) + 1) + "|"]  # fmt: skip
    for name, cv in curves.items():
        cells = [f"{100 * cv['pass@k'][k - 1]:.1f} [{100 * cv['ci_low'][k - 1]:.1f}, {100 * cv['ci_high'][k - 1]:.1f}]" for k in ks]  # fmt: skip
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    atomic_write_text(out / "pass_at_k.md", "\n".join(lines) + "\n")
    fig = plot_curves(curves, title=f"pass@k, k = 1..{cfg.n_samples} ({cfg.profile}; 95% CI over tasks)")
    (out / "figures").mkdir(parents=True, exist_ok=True)
    paths = {"pass_at_k_curve": out / "figures" / "pass_at_k_curve.png", "table": out / "pass_at_k.md"}
    fig.savefig(paths["pass_at_k_curve"], dpi=110)
    if show:
        plt.show()
    plt.close(fig)
    return paths


def main(argv: list[str] | None = None) -> None:
    """`python -m codelib.passk PARAMS.yaml [key=value ...]`: an EvalConfig file; prints where the curves went."""
    from codelib.evaluator import EvalConfig
    from codelib.params import main_config

    cfg = main_config(EvalConfig, argv)
    for name, path in evaluate_curves(cfg).items():
        print(f"{name}: {path}")


if __name__ == "__main__":
    main()
