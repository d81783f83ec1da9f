"""pass@k curves for k = 1..n: their table, their figure, and the command that evaluates checkpoints for them.

With many samples per task (n >= 64) the curve shows whether RL raises pass@1 while narrowing what the model can
solve at large k. The estimators are `codelib.evaluation.stats`'s (`pass_at_k_curve`, `pass_at_k_matrix`,
`summary_curve`; `passk.curve` is the old name of the first).

    python -m codelib.passk params/tiny/variants/06_eval_passk.yaml   # 64 samples/task, every checkpoint
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from codelib.evaluation.stats import pass_at_k_curve, pass_at_k_matrix, summary_curve

curve = pass_at_k_curve  # the name studies and tests knew
__all__ = ["curve", "curves_frame", "evaluate_curves", "main", "pass_at_k_matrix", "plot_curves", "summary_curve"]


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

    from codelib.plumbing.stages import color_of

    fig, ax = (ax.figure, ax) if ax is not None else plt.subplots(figsize=(7.5, 4.2), layout="constrained")
    for name, cv in curves.items():
        if not cv["k"]:
            continue
        color, marker = color_of(name), "." if len(cv["k"]) < 20 else None
        ax.plot(cv["k"], 100 * np.asarray(cv["pass@k"]), color=color, label=name, marker=marker)
        low, high = 100 * np.asarray(cv["ci_low"]), 100 * np.asarray(cv["ci_high"])
        ax.fill_between(cv["k"], low, high, color=color, alpha=0.2)
    k_max = max((max(cv["k"]) for cv in curves.values() if cv["k"]), default=1)
    ax.set_xscale("log", base=2)
    ticks = [2**i for i in range(int(math.log2(k_max)) + 1)]
    ax.set_xticks(ticks, [str(k) for k in ticks])
    ax.set_xlabel("k (samples per task)")
    ax.set_ylabel("pass@k (%)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)  # beside the panel, clear of the bands
    return fig


def evaluate_curves(cfg, force: bool = False, show: bool = False) -> dict[str, Path]:
    """Evaluate cfg's checkpoints (an EvalConfig, typically with n_samples >= 64) and write the curves.

    Outputs go beside, not over, the eval stage's: checkpoints/<profile>/eval_passk/<name>/ and
    reports/<profile>/passk/ (pass_at_k.csv, pass_at_k.md, figures/pass_at_k_curve.png).
    """
    import matplotlib

    if not show:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from codelib.evaluation import evaluator
    from codelib.plumbing.paths import atomic_write_text, reports_root, run_dir

    out = reports_root() / cfg.profile / "passk"
    evaluator.evaluate(cfg, force=force, out_root=run_dir(cfg.profile, "eval_passk"), reports=out)
    summaries = {name: evaluator.load_summary(run_dir(cfg.profile, "eval_passk") / name) for name in cfg.checkpoints}
    curves = {name: summary_curve(s) for name, s in summaries.items()}
    df = curves_frame(curves)
    atomic_write_text(out / "pass_at_k.csv", df.to_csv(index=False))
    ks = [k for k in (1, 2, 4, 8, 16, 32, 64, 128, 256) if k <= cfg.n_samples]
    title = f"# pass@k: {cfg.dataset}/{cfg.split} ({cfg.profile}), {cfg.n_samples} samples/task at T={cfg.temperature}"
    header = "| checkpoint | " + " | ".join(f"pass@{k}" for k in ks) + " |\n" + "|---" * (len(ks) + 1) + "|"
    lines = [title, "", "Percentages with 95% bootstrap intervals over tasks.", "", header]
    for name, cv in curves.items():
        pct = {key: [f"{100 * v:.1f}" for v in cv[key]] for key in ("pass@k", "ci_low", "ci_high")}
        cells = [f"{pct['pass@k'][k - 1]} [{pct['ci_low'][k - 1]}, {pct['ci_high'][k - 1]}]" for k in ks]
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
    from codelib.evaluation.evaluator import EvalConfig
    from codelib.plumbing.params import main_config

    cfg = main_config(EvalConfig, argv)
    for name, path in evaluate_curves(cfg).items():
        print(f"{name}: {path}")


if __name__ == "__main__":
    main()
