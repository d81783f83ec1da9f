"""The study's figures: pass@1 per arm with every seed, the paired differences (a forest plot), pass@k per arm
with each seed's curve. Each takes the `StudySummary` that `codelib.runner.study_report.summarise` returns."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from codelib.evaluation import passk
from codelib.plumbing.stages import STAGES, color_of
from codelib.reports import save_figures


def shown_pairs(comparisons):
    """The pairs summary.md and the comparisons figure show (every pair when the study names none)."""
    if not len(comparisons) or "shown" not in comparisons:
        return comparisons
    return comparisons[comparisons["shown"].astype(bool)]


def plot_arms(s):
    """pass@1 per arm: the mean over seeds with its two-level 95% interval, and every seed as a point."""
    import matplotlib.pyplot as plt

    df = s.arms
    fig, ax = plt.subplots(figsize=(max(5.5, 1.2 * len(df) + 2), 4.2))
    rng = np.random.default_rng(0)
    for i, r in enumerate(df.to_dict("records")):
        color = STAGES[r["stage"]].color if r["stage"] in STAGES else color_of(r["arm"])  # one colour per stage
        ax.errorbar(
            i,
            100 * r["pass@1"],
            yerr=[[100 * (r["pass@1"] - r["ci_low"])], [100 * (r["ci_high"] - r["pass@1"])]],
            fmt="D",
            color=color,
            capsize=6,
            markersize=7,
            zorder=3,
        )
        ax.errorbar(
            i + 0.22,
            100 * r["pass@1"],
            yerr=[[100 * (r["pass@1"] - r["task_ci_low"])], [100 * (r["task_ci_high"] - r["pass@1"])]],
            fmt="none",
            ecolor=color,
            alpha=0.4,
            capsize=3,
        )
        seeds = s.per_seed[s.per_seed["arm"] == r["arm"]]
        if len(seeds):
            ax.scatter(
                i - 0.18 + rng.uniform(-0.06, 0.06, len(seeds)),
                100 * seeds["pass@1"],
                color=color,
                alpha=0.8,
                s=22,
                zorder=4,
            )
    ax.set_xticks(range(len(df)), df["arm"], rotation=20, ha="right")
    ax.set_ylabel("held-out pass@1 (%)")
    ax.set_title(
        "mean over seeds ◆ with 95% CI (seeds + tasks); dots: one per seed; faint bar: tasks only", fontsize=9
    )
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return fig


def plot_comparisons(s):
    """Paired differences of pass@1 with their two-level intervals (a forest plot); 0 = no difference."""
    import matplotlib.pyplot as plt

    df = shown_pairs(s.comparisons)
    fig, ax = plt.subplots(figsize=(6.5, 0.5 * max(len(df), 1) + 1.5))
    for i, r in enumerate(df.to_dict("records")):
        ax.errorbar(
            100 * r["diff"],
            i,
            xerr=[[100 * (r["diff"] - r["ci_low"])], [100 * (r["ci_high"] - r["diff"])]],
            fmt="o",
            color="C0" if r["ci_low"] > 0 else ("C3" if r["ci_high"] < 0 else "0.4"),
            capsize=4,
        )
    ax.axvline(0, color="k", lw=0.8)
    ax.set_yticks(range(len(df)), [f"{r['a']} − {r['b']}" for r in df.to_dict("records")])
    ax.invert_yaxis()
    ax.set_xlabel("Δ pass@1 (points), paired over tasks, 95% CI over seeds and tasks")
    ax.set_title("Paired differences between arms: blue, a ahead; red, b ahead; grey, no clear difference", fontsize=9)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


def plot_curves(s):
    """pass@k per arm (mean over seeds, two-level band) with each seed's curve as a thin line."""
    fig = passk.plot_curves(
        {g: c for g, c in s.curves.items()}, title="pass@k: mean over seeds, 95% CI (seeds + tasks)"
    )
    ax = fig.axes[0]
    for name, c in s.curves.items():
        for ys in c["per_seed"] if len(c["per_seed"]) > 1 else []:
            ax.plot(c["k"], 100 * np.asarray(ys), color=color_of(name), lw=0.6, alpha=0.5)
    return fig


def make_figures(s, show: bool = True) -> dict[str, Path]:
    import matplotlib

    if not show:
        matplotlib.use("Agg")

    figs = {"pass_at_1_seeds": plot_arms(s), "pass_at_k": plot_curves(s)}
    if len(s.comparisons):
        figs["comparisons"] = plot_comparisons(s)
    return save_figures(figs, s.study.summary_dir / "figures", show)
