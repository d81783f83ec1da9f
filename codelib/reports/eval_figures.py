"""The evaluation figures: pass@1 and pass@k with their intervals, length vs accuracy, the per-task heat map, the
verdict classes of each checkpoint's samples (the rules every figure follows: `codelib.reports.figures`).
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.lines import Line2D

from codelib.engine.verdicts import class_counts
from codelib.evaluation.stats import summary_curve
from codelib.plumbing.params import read_jsonl
from codelib.plumbing.paths import (
    profile_dir as ckpt_root,  # checkpoints/<profile>/ (codelib.plumbing.paths: every run directory)
)
from codelib.plumbing.stages import color_of
from codelib.reports.figures import (
    CLASS_COLORS,
    CLASSES,
    MARKERS,
    mark_not_computed,
    outside_legend,
    pct_axis,
    styles_of,
)


def _ci(s: dict) -> tuple[float, float]:
    return 100 * (s["pass@1"] - s["ci_low"]), 100 * (s["ci_high"] - s["pass@1"])


def plot_pass_at_1(summaries: dict[str, dict]):
    """pass@1 per checkpoint in %, bars in each stage's colour with 95% bootstrap intervals; each value is written
    above its interval, clear of the cap."""
    names = list(summaries)
    vals = [100 * summaries[n]["pass@1"] for n in names]
    errs = [_ci(summaries[n]) for n in names]
    fig, ax = plt.subplots(figsize=(max(5.5, 1.1 * len(names) + 1.5), 4.2), layout="constrained")
    ax.bar(
        names,
        vals,
        yerr=np.array(errs).T,
        capsize=4,
        color=[color_of(n) for n in names],
        error_kw={"ecolor": "0.2", "lw": 1},
    )
    top = max((v + e[1] for v, e in zip(vals, errs, strict=True)), default=0)
    for i, (v, e) in enumerate(zip(vals, errs, strict=True)):
        ax.text(i, v + e[1] + 0.02 * max(top, 1), f"{v:.1f}%", ha="center", va="bottom", fontsize=9)
    ax.set_ylim(0, min(100, top * 1.15 + 2) if top else 100)
    ax.set_ylabel("pass@1 (%)")
    pct_axis(ax)
    ax.set_title("Held-out pass@1 per checkpoint (bars: 95% CI over tasks)", fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    ax.tick_params(axis="x", rotation=20)
    return fig


def plot_length_accuracy(summaries: dict[str, dict]):
    """pass@1 (%) against mean completion length, one point per checkpoint. pass@1 starts at 0, and a difference
    of a few tenths of a token is drawn as the small thing it is: the length axis spans at least +-25% of the mean."""
    fig, ax = plt.subplots(figsize=(7, 4.2), layout="constrained")
    handles = []
    style = styles_of(summaries)
    for n, s in summaries.items():
        lo, hi = _ci(s)
        marker = MARKERS[style[n] % len(MARKERS)]
        ax.errorbar(
            s["avg_tokens"],
            100 * s["pass@1"],
            yerr=[[lo], [hi]],
            fmt=marker,
            capsize=3,
            color=color_of(n),
            markersize=7,
        )
        handles.append(Line2D([], [], marker=marker, ls="", color=color_of(n), label=n))
    xs = [s["avg_tokens"] for s in summaries.values()] or [1.0]
    mid = (min(xs) + max(xs)) / 2
    half = max(0.25 * mid, 0.6 * (max(xs) - min(xs)), 0.5)  # at least +-25% of the length: noise stays small
    y_max = max((100 * s["ci_high"] for s in summaries.values()), default=100)
    ax.set_xlim(max(0.0, mid - half), mid + half)
    ax.set_ylim(0, min(100, 1.2 * y_max + 2))
    ax.set_xlabel("mean completion length (tokens)")
    ax.set_ylabel("pass@1 (%)")
    pct_axis(ax)
    ax.set_title("Accuracy against completion length (bars: 95% CI)", fontsize=10)
    ax.grid(alpha=0.3)
    outside_legend(fig, handles, "checkpoint")
    return fig


def plot_pass_at_k(summaries: dict[str, dict]):
    """pass@k for k = 1..n (unbiased estimator), one panel per checkpoint with its 95% band over tasks and, dashed
    in every other panel, the baseline's curve: six overlapping bands become six readable ones."""

    curves = {n: summary_curve(s) for n, s in summaries.items()}
    curves = {n: c for n, c in curves.items() if c["k"]}
    baseline = next((s["vs_baseline"]["baseline"] for s in summaries.values() if s.get("vs_baseline")), "")
    baseline = baseline if baseline in curves else next(iter(curves), "")
    cols = min(3, max(1, len(curves)))
    nrows = max(1, math.ceil(len(curves) / cols))
    fig, axes = plt.subplots(
        nrows,
        cols,
        figsize=(3.6 * cols + 0.5, 2.8 * nrows + 0.8),
        sharex=True,
        sharey=True,
        squeeze=False,
        layout="constrained",
    )
    k_max = max((max(c["k"]) for c in curves.values()), default=1)
    for ax, (name, cv) in zip(axes.flat, curves.items(), strict=False):
        if name != baseline and baseline:
            b = curves[baseline]
            ax.plot(b["k"], 100 * np.asarray(b["pass@k"]), color=color_of(baseline), ls="--", lw=1)
        ax.plot(
            cv["k"],
            100 * np.asarray(cv["pass@k"]),
            color=color_of(name),
            lw=2,
            marker="." if len(cv["k"]) < 20 else None,
        )
        ax.fill_between(
            cv["k"],
            100 * np.asarray(cv["ci_low"]),
            100 * np.asarray(cv["ci_high"]),
            color=color_of(name),
            alpha=0.25,
            lw=0,
        )
        ax.set_title(name, fontsize=10, color=color_of(name))
        ax.set_xscale("log", base=2)
        ticks = [2**i for i in range(int(math.log2(k_max)) + 1)]
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.set_ylim(0, 100)
        pct_axis(ax)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(curves) :]:
        ax.axis("off")
    if not curves:
        mark_not_computed(axes.flat[0], [], everything=True)
    fig.supxlabel("k (samples per task)")
    fig.supylabel("pass@k (%)")
    note = f"; dashed: {baseline}" if baseline and len(curves) > 1 else ""
    fig.suptitle(f"pass@k per checkpoint (band: 95% CI over tasks{note})", fontsize=11)
    return fig


def plot_task_heatmap(summaries: dict[str, dict], max_tasks: int = 60):
    """Tasks x checkpoints: the % of each task's samples that passed (the tasks where checkpoints differ most)."""
    names = list(summaries)
    rates = {n: {r["task_id"]: 100 * r["c"] / r["n"] for r in s["per_task"]} for n, s in summaries.items()}
    tasks = sorted(set.intersection(*(set(r) for r in rates.values()))) if rates else []
    grid = np.array([[rates[n][t] for n in names] for t in tasks]).reshape(len(tasks), len(names))  # [tasks, ckpts]
    order = np.argsort(-grid.std(axis=1), kind="stable")[:max_tasks] if len(tasks) else np.array([], dtype=int)
    grid = grid[order]
    fig, ax = plt.subplots(figsize=(1.1 * len(names) + 3.5, 0.16 * len(order) + 2), layout="constrained")
    im = ax.imshow(
        grid if len(order) else np.zeros((1, max(1, len(names)))), aspect="auto", cmap="RdYlGn", vmin=0, vmax=100
    )
    ax.set_xticks(range(len(names)), names, rotation=20, ha="right")
    ax.set_yticks(range(len(order)), [tasks[i].split("/")[-1] for i in order], fontsize=6)
    ax.set_title(f"Per-task pass rate: the {len(order)} tasks where the checkpoints differ most", fontsize=10)
    bar = fig.colorbar(im, ax=ax, fraction=0.05)
    bar.set_label("samples of the task that pass (%)")
    if not len(order):
        mark_not_computed(ax, [], everything=True)
    return fig


def eval_classes(profile: str, name: str, summary: dict) -> dict[str, float]:
    """Shares of each verdict class among a checkpoint's eval samples: the summary's `verdicts` counts, or (older
    summaries) classified again from its samples.jsonl."""
    counts = summary.get("verdicts")
    if not counts:
        path = ckpt_root(profile) / "eval" / name / "samples.jsonl"
        counts = class_counts(read_jsonl(path)) if path.exists() else {}
    n = sum(counts.values())
    return {k: counts.get(k, 0) / n for k in CLASSES} if n else {}


def plot_verdict_classes(profile: str, summaries: dict[str, dict]):
    """What became of each checkpoint's eval samples: stacked % of passed / wrong answer / runtime error / syntax
    error / timeout (class colours, which no stage uses)."""
    names = list(summaries)
    shares = {n: eval_classes(profile, n, summaries[n]) for n in names}
    fig, ax = plt.subplots(figsize=(max(5.5, 1.1 * len(names) + 2.5), 4.2), layout="constrained")
    bottom = np.zeros(len(names))
    for c in CLASSES:
        vals = np.array([100 * shares[n].get(c, 0.0) for n in names])
        ax.bar(names, vals, bottom=bottom, label=c.replace("_", " "), color=CLASS_COLORS[c])
        bottom += vals
    ax.set_ylim(0, 100)
    ax.set_ylabel("held-out samples (%)")
    pct_axis(ax)
    ax.set_title("What became of the held-out samples, per checkpoint", fontsize=10)
    outside_legend(fig, ax.get_legend_handles_labels()[0][::-1], "verdict")
    ax.tick_params(axis="x", rotation=20)
    return fig
