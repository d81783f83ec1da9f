"""Tables and figures from run directories: the one writer of the results table and of the figures.

Reads checkpoints/<profile>/<stage>/metrics.jsonl (training curves) and checkpoints/<profile>/eval/<name>/
summary.json (evaluation). `write_results` writes the profile's one results table, reports/<profile>/results.csv
(plain numeric columns) and results.md (what the README embeds); the eval stage calls it. `make_all` (07_plots)
writes the PNGs to reports/<profile>/figures/.
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

from codelib.params import atomic_write_text, checkpoints_root, read_jsonl, reports_root, resolve

CURVES = [
    ("reward_mean", "mean reward"),
    ("pass_rate", "rollout pass rate"),
    ("completion_len", "completion tokens"),
    ("kl", "KL to start policy"),
    ("clip_frac", "clip fraction"),
    ("loss", "loss"),
    ("zero_std_frac", "groups with zero reward variance"),
    ("sandbox_share", "sandbox share of step time"),
    ("verdicts/wrong_answer", "rollouts: wrong answer"),
    ("verdicts/runtime_error", "rollouts: runtime error"),
    ("verdicts/syntax_error", "rollouts: syntax error"),
    ("verdicts/timeout", "rollouts: timeout"),
]
CLASSES = ("passed", "wrong_answer", "runtime_error", "syntax_error", "timeout")  # = metrics.VERDICT_CLASSES
CLASS_COLORS = {"passed": "#55A868", "wrong_answer": "#C44E52", "runtime_error": "#DD8452", "syntax_error": "#8172B3",
                "timeout": "#937860"}  # fmt: skip
TABLE_COLUMNS = ["checkpoint", "method", "pass@1", "ci_low", "ci_high", "passed", "tasks", "avg_tokens"]
DIFF_COLUMNS = ["diff_vs_baseline", "diff_ci_low", "diff_ci_high"]


@dataclass
class PlotsConfig:
    profile: str = "tiny"  # reads checkpoints/<profile>/, writes reports/<profile>/
    stages: list[str] = field(default_factory=lambda: ["sft", "reinforce", "ppo", "grpo", "dpo"])  # curves of
    checkpoints: list[str] = field(default_factory=list)  # evaluated checkpoints to show; [] for every one found
    smoothing: int = 5  # moving-average window for curves (1: raw)
    heatmap_tasks: int = 60  # at most this many tasks in the per-task heat map


def ckpt_root(profile: str) -> Path:
    return checkpoints_root() / profile


def figures_dir(profile: str) -> Path:
    d = reports_root() / profile / "figures"
    d.mkdir(parents=True, exist_ok=True)
    return d


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


def plot_training_curves(profile: str, stages: list[str], window: int = 5):
    """Reward, pass rate, length, KL, clip fraction and loss per stage, plus each reward term's mean."""
    metrics = {s: rows for s, rows in load_metrics(profile, stages).items() if rows}
    terms = sorted(
        {k for rows in metrics.values() for r in rows for k in r if k.startswith("rewards/") and k.endswith("/mean")}
    )
    logged = {k for rows in metrics.values() for r in rows for k in r}
    panels = [(k, t) for k, t in CURVES if k in logged] + [(t, t) for t in terms]
    cols = 3
    fig, axes = plt.subplots(math.ceil(len(panels) / cols), cols, figsize=(13, 3.2 * math.ceil(len(panels) / cols)))
    colors = {stage: f"C{i}" for i, stage in enumerate(stages)}  # one colour per stage in every panel
    for ax, (key, title) in zip(axes.flat, panels, strict=False):
        for stage, rows in metrics.items():
            pts = [(r["step"], r[key]) for r in rows if isinstance(r.get(key), (int, float))]
            if pts:
                ax.plot([p[0] for p in pts], smooth([p[1] for p in pts], window), label=stage, color=colors[stage])
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    handles = [Line2D([], [], color=colors[s], label=s) for s in metrics]
    if handles:
        fig.legend(handles=handles, loc="upper right", ncol=len(handles))
    fig.suptitle(f"training curves ({profile}; moving average over {window} steps)")
    fig.tight_layout()
    return fig


def plot_pass_at_1(summaries: dict[str, dict]):
    """pass@1 per checkpoint, bars with 95% bootstrap intervals."""
    names = list(summaries)
    vals = [100 * summaries[n]["pass@1"] for n in names]
    lo = [100 * (summaries[n]["pass@1"] - summaries[n]["ci_low"]) for n in names]
    hi = [100 * (summaries[n]["ci_high"] - summaries[n]["pass@1"]) for n in names]
    fig, ax = plt.subplots(figsize=(max(5, 1.1 * len(names)), 4))
    bars = ax.bar(names, vals, yerr=[lo, hi], capsize=4, color="#4C72B0")
    for b, v in zip(bars, vals, strict=True):
        ax.text(b.get_x() + b.get_width() / 2, v + 1, f"{v:.1f}", ha="center", va="bottom", fontsize=9)
    ax.set_ylabel("pass@1 (%) with 95% CI")
    ax.set_title("held-out pass@1 per checkpoint")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return fig


def plot_length_accuracy(summaries: dict[str, dict]):
    """pass@1 against mean generated tokens, one point per checkpoint (the length-accuracy trade-off)."""
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for n, s in summaries.items():
        ax.errorbar(s["avg_tokens"], 100 * s["pass@1"], yerr=[[100 * (s["pass@1"] - s["ci_low"])], [100 * (s["ci_high"] - s["pass@1"])]], fmt="o", capsize=3)  # fmt: skip
        ax.annotate(n, (s["avg_tokens"], 100 * s["pass@1"]), textcoords="offset points", xytext=(5, 5))
    ax.set_xlabel("mean generated tokens")
    ax.set_ylabel("pass@1 (%)")
    ax.set_title("length vs accuracy")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def plot_pass_at_k(summaries: dict[str, dict]):
    """pass@k for k = 1..n from the per-task counts (unbiased estimator), with 95% intervals over tasks."""
    from codelib import passk

    return passk.plot_curves({name: passk.summary_curve(s) for name, s in summaries.items()}, title="pass@k")


def plot_task_heatmap(summaries: dict[str, dict], max_tasks: int = 60):
    """Tasks x checkpoints: share of samples that passed (the tasks where checkpoints differ most first)."""
    names = list(summaries)
    rates = {n: {r["task_id"]: r["c"] / r["n"] for r in s["per_task"]} for n, s in summaries.items()}
    tasks = sorted(set.intersection(*(set(r) for r in rates.values()))) if rates else []
    grid = np.array([[rates[n][t] for n in names] for t in tasks])  # [tasks, checkpoints]
    order = np.argsort(-grid.std(axis=1), kind="stable")[:max_tasks] if len(tasks) else []
    grid = grid[order] if len(tasks) else grid
    fig, ax = plt.subplots(figsize=(1.2 * len(names) + 3, 0.16 * len(order) + 1.5))
    im = ax.imshow(grid, aspect="auto", cmap="RdYlGn", vmin=0, vmax=1)
    ax.set_xticks(range(len(names)), names)
    ax.set_yticks(range(len(order)), [tasks[i].split("/")[-1] for i in order], fontsize=6)
    ax.set_title(f"per-task pass rate ({len(order)} tasks where checkpoints differ most)")
    fig.colorbar(im, ax=ax, fraction=0.05)
    fig.tight_layout()
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
        rows.append({"checkpoint": name, "method": s.get("method") or name, "pass@1": s["pass@1"],
                     "ci_low": s["ci_low"], "ci_high": s["ci_high"], "passed": s["passed"], "tasks": s["tasks"],
                     "avg_tokens": s["avg_tokens"], **{f"pass@{k}": s.get(f"pass@{k}", math.nan) for k in extra_ks},
                     "diff_vs_baseline": vs.get("diff", math.nan), "diff_ci_low": vs.get("ci_low", math.nan),
                     "diff_ci_high": vs.get("ci_high", math.nan)})  # fmt: skip
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
    """Every figure; returns name -> PNG path. `show` displays them (in a notebook). The table is the eval stage's
    (`write_results`): reports/<profile>/results.md, shown by 07_plots."""
    if not show:
        matplotlib.use("Agg")
    summaries = load_summaries(cfg.profile, cfg.checkpoints or None)
    if not summaries:
        raise FileNotFoundError(
            f"no evaluation summaries under {ckpt_root(cfg.profile) / 'eval'}: run the 06_eval stage first"
        )
    figs = {
        "training_curves": plot_training_curves(cfg.profile, cfg.stages, cfg.smoothing),
        "pass_at_1": plot_pass_at_1(summaries),
        "length_accuracy": plot_length_accuracy(summaries),
        "pass_at_k": plot_pass_at_k(summaries),
        "task_heatmap": plot_task_heatmap(summaries, cfg.heatmap_tasks),
        "verdict_classes": plot_verdict_classes(cfg.profile, summaries),
    }
    evaluated = [s for s, rows in load_metrics(cfg.profile, run_stages(cfg.profile, cfg.stages)).items()
                 if any("eval_pass@1" in r for r in rows)]  # fmt: skip
    if evaluated:
        figs["eval_during_training"] = plot_eval_during_training(cfg.profile, evaluated, cfg.smoothing)
    return save_figures(figs, figures_dir(cfg.profile), show)


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
    """One stage's metrics.jsonl as small curves (whatever of `keys` it logged); returns the figure."""
    rows = read_jsonl(Path(run) / "metrics.jsonl")
    if not rows:
        raise FileNotFoundError(f"no metrics.jsonl rows in {run}")
    keys = keys or [k for k, _ in CURVES] + sorted(
        {k for r in rows for k in r if k.startswith("rewards/") and k.endswith("/mean")}
    )
    keys = [k for k in keys if any(isinstance(r.get(k), (int, float)) for r in rows)]
    cols = min(3, len(keys))
    fig, axes = plt.subplots(math.ceil(len(keys) / cols), cols, figsize=(4.2 * cols, 3 * math.ceil(len(keys) / cols)), squeeze=False)  # fmt: skip
    for ax, key in zip(axes.flat, keys, strict=False):
        pts = [(r["step"], r[key]) for r in rows if isinstance(r.get(key), (int, float))]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], alpha=0.3, color="C0")
        ax.plot([p[0] for p in pts], smooth([p[1] for p in pts], window), color="C0")
        ax.set_title(key)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(keys) :]:
        ax.axis("off")
    fig.suptitle(Path(run).name)
    fig.tight_layout()
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
    from codelib.metrics import class_counts

    counts = summary.get("verdicts")
    if not counts:
        path = ckpt_root(profile) / "eval" / name / "samples.jsonl"
        counts = class_counts(read_jsonl(path)) if path.exists() else {}
    n = sum(counts.values())
    return {k: counts.get(k, 0) / n for k in CLASSES} if n else {}


def plot_verdict_classes(profile: str, summaries: dict[str, dict]):
    """What became of each checkpoint's eval samples: stacked shares of passed / wrong answer / runtime error /
    syntax error / timeout."""
    names = list(summaries)
    shares = {n: eval_classes(profile, n, summaries[n]) for n in names}
    fig, ax = plt.subplots(figsize=(max(5, 1.1 * len(names)), 4))
    bottom = np.zeros(len(names))
    for c in CLASSES:
        vals = np.array([100 * shares[n].get(c, 0.0) for n in names])
        ax.bar(names, vals, bottom=bottom, label=c.replace("_", " "), color=CLASS_COLORS[c])
        bottom += vals
    ax.set_ylabel("% of eval samples")
    ax.set_title("verdict classes of the held-out samples")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1, 1))
    ax.tick_params(axis="x", rotation=30)
    fig.tight_layout()
    return fig


def plot_eval_during_training(profile: str, stages: list[str], window: int = 5):
    """Training reward and rollout pass rate (lines) beside held-out pass@1 with its 95% interval (points), per
    stage on one figure: the first thing to look at when a training reward rises and the model does not improve."""
    metrics = {s: rows for s, rows in load_metrics(profile, stages).items() if rows}
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for i, (stage, rows) in enumerate(metrics.items()):
        color = f"C{i}"
        pts = [(r["step"], r["pass_rate"]) for r in rows if isinstance(r.get("pass_rate"), (int, float))]
        if pts:
            ax.plot([p[0] for p in pts], [100 * v for v in smooth([p[1] for p in pts], window)], color=color,
                    alpha=0.6, label=f"{stage}: rollout pass rate (train)")  # fmt: skip
        ev = [r for r in rows if isinstance(r.get("eval_pass@1"), (int, float))]
        if ev:
            x = [r["step"] for r in ev]
            y = [100 * r["eval_pass@1"] for r in ev]
            lo = [100 * (r["eval_pass@1"] - r.get("eval_ci_low", r["eval_pass@1"])) for r in ev]
            hi = [100 * (r.get("eval_ci_high", r["eval_pass@1"]) - r["eval_pass@1"]) for r in ev]
            ax.errorbar(x, y, yerr=[lo, hi], fmt="o--", color=color, capsize=3, label=f"{stage}: held-out pass@1")
    ax.set_xlabel("step")
    ax.set_ylabel("%")
    ax.set_title("training pass rate vs held-out pass@1 during training")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
