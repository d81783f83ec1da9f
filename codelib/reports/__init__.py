"""Tables and figures from run directories: the one writer of the results table and of the figures.

Reads checkpoints/<profile>/<stage>/metrics.jsonl (training curves) and checkpoints/<profile>/eval/<name>/
summary.json (evaluation). `write_results` writes the profile's one results table, reports/<profile>/results.csv
(plain numeric columns) and results.md (what the README embeds); the eval stage calls it. `make_all` (07_plots)
writes the PNGs to <out_dir>/figures/ (the pipeline's out_dir: reports/<profile>/).

Every figure follows the same rules: a stage has one colour everywhere (`codelib.plumbing.stages.color_of`), shares are
drawn in %, legends sit outside the panels, and a quantity a run did not compute (a metrics key missing or null, as
KL at beta 0) is written "not computed" in its panel, never drawn as 0.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from codelib.plumbing.params import REPO_ROOT, atomic_write_text, read_jsonl, reports_root, resolve
from codelib.plumbing.paths import profile_dir as ckpt_root  # checkpoints/<profile>/ (codelib.plumbing.paths: every run directory)
from codelib.plumbing.stages import color_of, stage_of
from codelib.evaluation.stats import summary_curve
from codelib.engine.verdicts import VERDICT_CLASSES, class_counts

TABLE_COLUMNS = ["checkpoint", "method", "pass@1", "ci_low", "ci_high", "passed", "tasks", "avg_tokens"]
DIFF_COLUMNS = ["diff_vs_baseline", "diff_ci_low", "diff_ci_high"]


@dataclass
class PlotsConfig:
    profile: str = "tiny"  # reads checkpoints/<profile>/, writes reports/<profile>/
    stages: list[str] = field(default_factory=lambda: ["sft", "reinforce", "ppo", "grpo", "dpo"])  # curves of
    checkpoints: list[str] = field(default_factory=list)  # evaluated checkpoints to show; [] for every one found
    smoothing: int = 5  # moving-average window for curves (1: raw)
    heatmap_tasks: int = 60  # at most this many tasks in the per-task heat map
    out_dir: str = ""  # figures go here; empty: checkpoints/<profile>/plots/ (the pipeline passes reports/<profile>)


def out_dir(cfg: PlotsConfig) -> Path:
    """Where 07_plots writes: cfg.out_dir (relative to the repo root), or a scratch folder beside the checkpoints
    when empty, so a run "just to look" (`papermill ... -p smoothing 5`) never overwrites the committed figures.
    The pipeline passes reports/<profile>/."""
    return resolve(cfg.out_dir) if cfg.out_dir else ckpt_root(cfg.profile) / "plots"


def figures_dir(profile: str) -> Path:
    d = reports_root() / profile / "figures"
    d.mkdir(parents=True, exist_ok=True)
    return d


def rel(path: Path) -> str:
    """A path as a message shows it: relative to the repo root when inside it."""
    path = Path(path)
    return str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path)


def smooth(values: list[float], window: int) -> list[float]:
    """Trailing moving average (the first points average what exists so far)."""
    out, acc = [], []
    for v in values:
        acc.append(v)
        if len(acc) > window:
            acc.pop(0)
        vals = [a for a in acc if a is not None and not (isinstance(a, float) and math.isnan(a))]
        out.append(sum(vals) / len(vals) if vals else math.nan)
    return out


def load_metrics(profile: str, stages: list[str]) -> dict[str, list[dict]]:
    return {s: read_jsonl(ckpt_root(profile) / s / "metrics.jsonl") for s in stages}


def load_summaries(profile: str, names: list[str] | None = None) -> dict[str, dict]:
    """Eval summaries in the order of the last results table (or the names given)."""
    root = ckpt_root(profile) / "eval"
    if not names:
        csv = reports_root() / profile / "results.csv"
        if csv.exists():
            names = list(pd.read_csv(csv)["checkpoint"])
        else:
            names = sorted(p.name for p in root.glob("*") if (p / "summary.json").exists())
    return {
        n: json.loads((root / n / "summary.json").read_text()) for n in names if (root / n / "summary.json").exists()
    }


# ---------------------------------------------------------------------------------------------------------------
# figure conventions: one colour per stage (codelib.plumbing.stages), shares in %, "not computed" where a run logged nothing

NOT_COMPUTED = "not computed"
# (metric key, title in words, a share drawn in %)
CURVES = [
    ("reward_mean", "mean reward of the training rollouts", False),
    ("pass_rate", "training rollouts that pass (%)", True),
    ("completion_len", "completion length (tokens)", False),
    ("kl", "KL divergence to the starting policy", False),
    ("clip_frac", "tokens whose ratio was clipped (%)", True),
    ("zero_std_frac", "groups with no reward variance (%)", True),
    ("sandbox_share", "sandbox's share of step time (%)", True),
    ("verdicts/wrong_answer", "rollouts with a wrong answer (%)", True),
    ("verdicts/runtime_error", "rollouts with a runtime error (%)", True),
    ("verdicts/syntax_error", "rollouts with a syntax error (%)", True),
    ("verdicts/timeout", "rollouts that timed out (%)", True),
]
TITLES = {k: t for k, t, _ in CURVES} | {
    "loss": "training loss",
    "learning_rate": "learning rate",
    "grad_norm": "gradient norm",
    "mean_token_accuracy": "next-token accuracy (%)",
    "entropy": "policy entropy",
    "value_loss": "value-head loss",
    "rewards/margins": "DPO reward margin (chosen - rejected)",
    "rewards/accuracies": "pairs ranked right (%)",
    "rewards/chosen": "DPO reward of chosen completions",
    "rewards/rejected": "DPO reward of rejected completions",
    "turn1_pass_rate": "first attempts that pass (%)",
    "retry_share": "episodes that used a second turn (%)",
    "repaired_share": "episodes repaired after a failure (%)",
    "turns_mean": "turns per episode",
}
PERCENT = {k for k, _, p in CURVES if p} | {
    "mean_token_accuracy",
    "rewards/accuracies",
    "turn1_pass_rate",
    "retry_share",
    "repaired_share",
    "eval_pass@1",
}
CLASSES = VERDICT_CLASSES  # the one list, codelib.engine.verdicts
# verdict classes get colours no stage uses (a stage's colour means that stage in every figure)
CLASS_COLORS = {
    "passed": "#1B9E77",
    "wrong_answer": "#E7298A",
    "runtime_error": "#E6AB02",
    "syntax_error": "#666666",
    "timeout": "#17BECF",
}


def title_of(key: str) -> str:
    """A metric's title in words: the known ones from TITLES, a reward term as "reward term: <name>"."""
    if key in TITLES:
        return TITLES[key]
    if key.startswith("rewards/") and key.endswith("/mean"):
        return f"reward term '{key[len('rewards/') : -len('/mean')]}' (mean)"
    return key.replace("_", " ")


def label_of(name: str) -> str:
    """How a run or checkpoint is named in legends: its stage's label (`GRPO`), a variant as `GRPO (grpo_dapo)`."""
    stage = stage_of(name)
    if stage is None:
        return name
    return stage.label if name == stage.run else f"{stage.label} ({name})"


def finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def points(rows: list[dict], key: str, scale: float = 1.0) -> tuple[list, list]:
    """(steps, values) of the rows that logged a number for key; a missing key or null (not computed) is skipped."""
    pts = [(r.get("step", i), scale * r[key]) for i, r in enumerate(rows) if finite(r.get(key))]
    return [p[0] for p in pts], [p[1] for p in pts]


def mark_not_computed(ax, names: list[str], everything: bool) -> None:
    """Write "not computed" into a panel: alone in its middle when no run computed the quantity, else in a corner
    naming the runs that did not (never a line at 0)."""
    if everything:
        ax.text(0.5, 0.5, NOT_COMPUTED, transform=ax.transAxes, ha="center", va="center", color="0.4", fontsize=11)
        ax.set_xticks([])
        ax.set_yticks([])
    elif names:
        ax.text(
            0.02,
            0.97,
            f"{NOT_COMPUTED}: " + ", ".join(names),
            transform=ax.transAxes,
            ha="left",
            va="top",
            fontsize=7,
            color="0.35",
            bbox={"facecolor": "white", "edgecolor": "0.8", "alpha": 0.85},
        )


def outside_legend(fig, handles: list, title: str | None = None) -> None:
    """A figure legend to the right of every panel (constrained layout keeps it clear of the data and titles)."""
    if handles:
        fig.legend(handles=handles, loc="outside right upper", title=title, fontsize=9, frameon=False)


def pct_axis(ax, axis: str = "y") -> None:
    """A 0-100 % axis label tick format (the values are already in %)."""
    from matplotlib.ticker import PercentFormatter

    (ax.yaxis if axis == "y" else ax.xaxis).set_major_formatter(PercentFormatter(decimals=None))


def is_online(rows: list[dict]) -> bool:
    """A run that sampled rollouts (RL): its rows carry a reward or a rollout pass rate."""
    return any(finite(r.get("reward_mean")) or finite(r.get("pass_rate")) for r in rows)


LINESTYLES = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "^", "D", "v")


def styles_of(names) -> dict[str, int]:
    """name -> its rank among the names of the same stage (0 for the first): two runs of one stage share its colour
    and differ by line style (`LINESTYLES`) or marker (`MARKERS`)."""
    seen: dict[str, int] = {}
    out = {}
    for n in names:
        stage = stage_of(n)
        key = stage.name if stage else n
        out[n] = seen.get(key, 0)
        seen[key] = out[n] + 1
    return out


def _same_as(rows: list[dict], key: str, others: tuple[str, ...], tol: float) -> bool:
    """Whether a run's `key` is within tol of one of `others` at every step that logged both."""
    for other in others:
        pairs = [(r[key], r[other]) for r in rows if finite(r.get(key)) and finite(r.get(other))]
        if pairs and all(abs(a - b) <= tol for a, b in pairs):
            return True
    return False


def plot_training_curves(profile: str, stages: list[str], window: int = 5):
    """The online RL runs side by side: reward, rollout pass rate, length, KL, clipping, zero-variance groups, the
    sandbox's share, the rollouts' verdict classes and each reward term. One colour per stage (codelib.plumbing.stages; a
    second run of a stage dashed); a quantity a run did not compute is written "not computed" in its panel, never
    drawn as 0. Left out and named below: a panel that is 0 in every run, the mean reward where it is the pass rate
    within 0.01 in every run, and a reward term that repeats the reward or the pass rate. Losses are not drawn here:
    each algorithm's loss means something else (each stage's notebook plots its own)."""
    loaded = {s: rows for s, rows in load_metrics(profile, stages).items() if rows}
    metrics = {s: rows for s, rows in loaded.items() if is_online(rows)}
    offline = [label_of(s) for s in loaded if s not in metrics]
    style = styles_of(metrics)
    keys = {k for rows in metrics.values() for r in rows for k in r}
    terms = sorted(k for k in keys if k.startswith("rewards/") and k.endswith("/mean"))
    panels = [(k, t, p) for k, t, p in CURVES if k in keys]
    panels += [
        (t, title_of(t), False)
        for t in terms
        if not all(
            _same_as(rows, t, ("reward_mean", "pass_rate"), 1e-6)
            for rows in metrics.values()
            if any(finite(r.get(t)) for r in rows)
        )
    ]
    zero, kept, notes = [], [], []
    if (
        "reward_mean" in keys
        and metrics
        and all(_same_as(rows, "reward_mean", ("pass_rate",), 0.01) for rows in metrics.values())
    ):
        panels = [pn for pn in panels if pn[0] != "reward_mean"]
        notes.append("mean reward: the pass rate within 0.01 in every run (not drawn)")
    for key, title, p in panels:
        vals = [v for rows in metrics.values() for v in points(rows, key)[1]]
        if vals and all(v == 0 for v in vals):
            zero.append(title.replace(" (%)", ""))
        else:
            kept.append((key, title, p))
    cols = 3 if len(kept) > 4 else max(1, len(kept))
    nrows = max(1, math.ceil(len(kept) / cols))
    fig, axes = plt.subplots(
        nrows, cols, figsize=(4.2 * cols + 1.6, 3.0 * nrows + 0.8), squeeze=False, layout="constrained"
    )
    for ax, (key, title, p) in zip(axes.flat, kept, strict=False):
        missing = []
        for stage, rows in metrics.items():
            x, y = points(rows, key, 100.0 if p else 1.0)
            if x:
                ax.plot(
                    x, smooth(y, window), color=color_of(stage), lw=1.5, ls=LINESTYLES[style[stage] % len(LINESTYLES)]
                )
            else:
                missing.append(label_of(stage))
        term = key.startswith("rewards/")
        if term and missing and len(missing) < len(metrics):
            ax.text(
                0.02,
                0.97,
                "not in the reward of: " + ", ".join(missing),
                transform=ax.transAxes,
                ha="left",
                va="top",
                fontsize=7,
                color="0.35",
                bbox={"facecolor": "white", "edgecolor": "0.8", "alpha": 0.85},
            )
        else:
            mark_not_computed(ax, missing, everything=len(missing) == len(metrics))
        ax.set_title(title, fontsize=10)
        if len(missing) < len(metrics):
            ax.set_xlabel("step")
            if p:
                pct_axis(ax)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(kept) :]:
        ax.axis("off")
    if not metrics:
        mark_not_computed(axes.flat[0], [], everything=True)
    handles = [
        Line2D([], [], color=color_of(s), lw=2, ls=LINESTYLES[style[s] % len(LINESTYLES)], label=label_of(s))
        for s in metrics
    ]
    outside_legend(fig, handles, "stage")
    fig.suptitle(f"Training curves of the online RL stages ({profile}; moving average over {window} steps)")
    if offline:
        notes.insert(0, f"{', '.join(offline)}: offline (no rollouts), curves in their own notebooks")
    if zero:
        notes.append(f"0 throughout in every run: {', '.join(zero)}")
    if notes:
        fig.supxlabel("; ".join(notes), fontsize=8, color="0.35")
    return fig


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


def _extra_ks(summaries: dict[str, dict]) -> list[int]:
    first = next(iter(summaries.values()), {})
    return [k for k in first.get("ks", [1]) if k != 1]


def results_frame(summaries: dict[str, dict]) -> pd.DataFrame:
    """One row per checkpoint: TABLE_COLUMNS, pass@k for the other k, and the paired diff vs the baseline."""
    extra_ks = _extra_ks(summaries)
    rows = []
    for name, s in summaries.items():
        vs = s.get("vs_baseline") or {}
        rows.append(
            {
                "checkpoint": name,
                "method": s.get("method") or name,
                "pass@1": s["pass@1"],
                "ci_low": s["ci_low"],
                "ci_high": s["ci_high"],
                "passed": s["passed"],
                "tasks": s["tasks"],
                "avg_tokens": s["avg_tokens"],
                **{f"pass@{k}": s.get(f"pass@{k}", math.nan) for k in extra_ks},
                "diff_vs_baseline": vs.get("diff", math.nan),
                "diff_ci_low": vs.get("ci_low", math.nan),
                "diff_ci_high": vs.get("ci_high", math.nan),
            }
        )
    return pd.DataFrame(rows, columns=TABLE_COLUMNS + [f"pass@{k}" for k in extra_ks] + DIFF_COLUMNS)


def pct(x: float) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}"


def run_dir_of(profile: str, source: str, name: str) -> Path | None:
    """The run directory a checkpoint came from: its source path if that is a run dir, else checkpoints/<profile>/<name>."""
    for cand in (resolve(source) if source else None, ckpt_root(profile) / name):
        if cand is not None and cand.is_dir() and (cand / "config.json").exists():
            return cand
    return None


def training_seeds(profile: str, summaries: dict[str, dict]) -> str:
    """ "; training seed 0 (one run per checkpoint)": the seeds in the config.json of the runs the checkpoints came
    from ("" when none names one)."""
    seeds = set()
    for name, s in summaries.items():
        run = run_dir_of(profile, s.get("source", ""), name)
        seed = json.loads((run / "config.json").read_text()).get("seed") if run else None
        if seed is not None:
            seeds.add(seed)
    if not seeds:
        return ""
    return (
        f"; training seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, sorted(seeds)))} (one run per checkpoint)"
    )


def results_markdown(profile: str, summaries: dict[str, dict], df: pd.DataFrame | None = None) -> str:
    """The results table as Markdown: pass@1 [95% CI] in percent, passed/tasks, paired diff vs the baseline.

    The sampling settings and the baseline are read from the summaries (every checkpoint of a table shares them)."""
    df = results_frame(summaries) if df is None else df
    first = next(iter(summaries.values()), {})
    st = first.get("settings", {})
    baseline = next((s["vs_baseline"]["baseline"] for s in summaries.values() if s.get("vs_baseline")), "")
    greedy = st.get("temperature") == 0
    sampling = (
        "greedy"
        if greedy
        else f"{st.get('n_samples')} samples/task at T={st.get('temperature')}, top_p={st.get('top_p')}"
    )
    extra_ks = _extra_ks(summaries)
    head = ["checkpoint", "pass@1 [95% CI]"] + [f"pass@{k}" for k in extra_ks] + ["passed", "avg tokens"]
    if baseline:
        head.append(f"Δ vs {baseline} [95% CI]")
    lines = [
        f"# Results: {st.get('dataset')}/{st.get('split')} ({profile})",
        "",
        f"{int(df['tasks'].max()) if len(df) else 0} tasks, {sampling}, evaluation seed {st.get('seed')}"
        f"{training_seeds(profile, summaries)}. Percentages; CIs are "
        f"{st.get('bootstrap_iters')}-resample bootstraps over tasks, Δ is paired over the same tasks. "
        + ("`passed` = tasks solved." if greedy else "`passed` = expected tasks solved by one sample (Σ c/n)."),
        "",
        "| " + " | ".join(head) + " |",
        "|" + "|".join("---" for _ in head) + "|",
    ]
    for r in df.to_dict("records"):
        passed = f"{int(round(r['passed']))}/{r['tasks']}" if greedy else f"{r['passed']:.1f}/{r['tasks']}"
        cells = [r["checkpoint"], f"{pct(r['pass@1'])} [{pct(r['ci_low'])}, {pct(r['ci_high'])}]"]
        cells += [pct(r[f"pass@{k}"]) for k in extra_ks]
        cells += [passed, f"{r['avg_tokens']:.1f}"]
        if baseline:
            if r["checkpoint"] == baseline or math.isnan(r["diff_vs_baseline"]):
                cells.append("-")
            else:
                d, lo, hi = (100 * r[c] for c in DIFF_COLUMNS)
                cells.append(f"{d:+.1f} [{lo:+.1f}, {hi:+.1f}]")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_results(profile: str, summaries: dict[str, dict], out: Path | None = None) -> pd.DataFrame:
    """The profile's results table: reports/<profile>/results.csv and results.md (out replaces the folder)."""
    df = results_frame(summaries)
    out = out or reports_root() / profile
    atomic_write_text(out / "results.csv", df.to_csv(index=False))
    atomic_write_text(out / "results.md", results_markdown(profile, summaries, df))
    return df


def make_all(cfg: PlotsConfig, show: bool = True) -> dict[str, Path]:
    """Every figure into `out_dir(cfg)/figures/`; returns name -> PNG path. `show` displays them (in a notebook).
    A figure of an earlier run that this one did not make (say, held-out pass@1 during training, when no stage
    evaluated while training) is removed, so the folder holds only what its data shows. The results table is the
    eval stage's (`write_results`): reports/<profile>/results.md, shown by 07_plots."""
    if not show:
        matplotlib.use("Agg")
    summaries = load_summaries(cfg.profile, cfg.checkpoints or None)
    if not summaries:
        raise FileNotFoundError(
            f"no evaluation summaries under {rel(ckpt_root(cfg.profile) / 'eval')}: run the 06_eval stage first "
            f"(python -m codelib.pipeline --profile {cfg.profile} --only 06_eval)"
        )
    figs = {
        "training_curves": plot_training_curves(cfg.profile, cfg.stages, cfg.smoothing),
        "pass_at_1": plot_pass_at_1(summaries),
        "length_accuracy": plot_length_accuracy(summaries),
        "pass_at_k": plot_pass_at_k(summaries),
        "task_heatmap": plot_task_heatmap(summaries, cfg.heatmap_tasks),
        "verdict_classes": plot_verdict_classes(cfg.profile, summaries),
    }
    evaluated = [
        s
        for s, rows in load_metrics(cfg.profile, run_stages(cfg.profile, cfg.stages)).items()
        if any(finite(r.get("eval_pass@1")) for r in rows)
    ]
    if evaluated:
        figs["eval_during_training"] = plot_eval_during_training(cfg.profile, evaluated, cfg.smoothing)
    out = out_dir(cfg) / "figures"
    for stale in FIGURES - set(figs):
        (out / f"{stale}.png").unlink(missing_ok=True)
    return save_figures(figs, out, show)


FIGURES = {
    "training_curves",
    "pass_at_1",
    "length_accuracy",
    "pass_at_k",
    "task_heatmap",
    "verdict_classes",
    "eval_during_training",
}  # what make_all may write


def save_figures(figs: dict, out: Path, show: bool = True) -> dict[str, Path]:
    """Write each figure to out/<name>.png (the one place figures are written), show it, close it."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, fig in figs.items():
        paths[name] = out / f"{name}.png"
        fig.savefig(paths[name], dpi=110)
        if show:
            plt.show()
        plt.close(fig)
    return paths


def plot_run(run: str | Path, keys: list[str] | None = None, window: int = 5):
    """One stage's metrics.jsonl as small curves (whatever of `keys` it logged), titled in words, shares in %; a
    key the run logged only as null (not computed) gets a "not computed" panel. Returns the figure."""
    rows = read_jsonl(Path(run) / "metrics.jsonl")
    if not rows:
        raise FileNotFoundError(f"no metrics.jsonl rows in {rel(Path(run))}: the run has not logged a step yet")
    logged = {k for r in rows for k in r}
    notes = []
    if not keys:  # the run's loss, the shared curves and its reward terms, without panels that repeat or stay 0
        terms = sorted(k for k in logged if k.startswith("rewards/") and k.endswith("/mean"))
        keys = (
            ["loss"]
            + [k for k, _, _ in CURVES]
            + [t for t in terms if not _same_as(rows, t, ("reward_mean", "pass_rate"), 1e-6)]
        )
        zero = [k for k in keys if (v := points(rows, k)[1]) and all(x == 0 for x in v)]
        keys = [k for k in keys if k not in zero]
        if zero:
            notes.append("0 throughout: " + ", ".join(title_of(k).replace(" (%)", "") for k in zero if k in logged))
    keys = [k for k in keys if k in logged]
    color = color_of(Path(run).name)
    cols = max(1, min(3, len(keys)))
    nrows = max(1, math.ceil(len(keys) / cols))
    fig, axes = plt.subplots(nrows, cols, figsize=(4.2 * cols, 3 * nrows + 0.4), squeeze=False, layout="constrained")
    for ax, key in zip(axes.flat, keys, strict=False):
        p = key in PERCENT
        x, y = points(rows, key, 100.0 if p else 1.0)
        if x:
            ax.plot(x, y, alpha=0.3, color=color)
            ax.plot(x, smooth(y, window), color=color)
            ax.set_xlabel("step")
            if p:
                pct_axis(ax)
        else:
            mark_not_computed(ax, [], everything=True)
        ax.set_title(title_of(key), fontsize=10)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(keys) :]:
        ax.axis("off")
    fig.suptitle(f"{label_of(Path(run).name)}: training metrics (moving average over {window} steps)")
    if notes:
        fig.supxlabel("; ".join(notes), fontsize=8, color="0.35")
    return fig


# ---------------------------------------------------------------------------------------------------------------
# execution telemetry and the comparison of algorithms


def run_stages(profile: str, stages: list[str] | None = None) -> list[str]:
    """The given stages, then every other run directory of the profile with a metrics.jsonl (variants' stages)."""
    root = ckpt_root(profile)
    found = sorted(p.parent.name for p in root.glob("*/metrics.jsonl") if p.parent.name != "eval")
    return list(dict.fromkeys([*(stages or []), *found]))


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


def plot_eval_during_training(profile: str, stages: list[str], window: int = 5):
    """Training rollout pass rate (lines) beside held-out pass@1 with its 95% interval (points), per stage in its
    colour: the first thing to look at when a training reward rises and the model does not improve."""
    metrics = {s: rows for s, rows in load_metrics(profile, stages).items() if rows}
    fig, ax = plt.subplots(figsize=(9, 4.5), layout="constrained")
    handles = []
    for stage, rows in metrics.items():
        color = color_of(stage)
        x, y = points(rows, "pass_rate", 100.0)
        if x:
            ax.plot(x, smooth(y, window), color=color, alpha=0.6)
        ev = [r for r in rows if finite(r.get("eval_pass@1"))]
        if ev:
            xs = [r["step"] for r in ev]
            ys = [100 * r["eval_pass@1"] for r in ev]
            lo = [100 * (r["eval_pass@1"] - r.get("eval_ci_low", r["eval_pass@1"])) for r in ev]
            hi = [100 * (r.get("eval_ci_high", r["eval_pass@1"]) - r["eval_pass@1"]) for r in ev]
            ax.errorbar(xs, ys, yerr=[lo, hi], fmt="o--", color=color, capsize=3)
        handles.append(Line2D([], [], color=color, lw=2, label=label_of(stage)))
    handles += [
        Line2D([], [], color="0.3", alpha=0.6, label="line: training rollouts that pass"),
        Line2D([], [], color="0.3", marker="o", ls="--", label="points: held-out pass@1 (95% CI)"),
    ]
    ax.set_xlabel("step")
    ax.set_ylabel("pass rate (%)")
    pct_axis(ax)
    ax.set_title("Training pass rate against held-out pass@1 during training", fontsize=10)
    ax.grid(alpha=0.3)
    outside_legend(fig, handles)
    return fig
