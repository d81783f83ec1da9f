"""Tables and figures from run directories: the one writer of the results table and of the figures.

Reads checkpoints/<profile>/<stage>/metrics.jsonl (training curves) and checkpoints/<profile>/eval/<name>/
summary.json (evaluation). `write_results` writes the profile's one results table, reports/<profile>/results.csv
(plain numeric columns) and results.md (what the README embeds); the eval stage calls it. `make_all` (07_plots)
writes the PNGs to <out_dir>/figures/ (the pipeline's out_dir: reports/<profile>/).

The figures themselves, and the rules every one follows, are `figures` (training) and `eval_figures` (evaluation);
their names stay importable from here. Beside them in this folder: `comparison` (the comparison of algorithms),
`repair` (multi-turn repair's report), `explore` (the task and completion explorers).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import pandas as pd

from codelib.plumbing.params import atomic_write_text, reports_root, resolve
from codelib.plumbing.paths import profile_dir as ckpt_root  # checkpoints/<profile>/ (paths: every run directory)
from codelib.reports.eval_figures import (  # noqa: F401  (the figures stay importable from codelib.reports)
    eval_classes,
    plot_length_accuracy,
    plot_pass_at_1,
    plot_pass_at_k,
    plot_task_heatmap,
    plot_verdict_classes,
)
from codelib.reports.figures import (  # noqa: F401
    CLASS_COLORS,
    CLASSES,
    finite,
    label_of,
    load_metrics,
    plot_eval_during_training,
    plot_run,
    plot_training_curves,
    rel,
    run_stages,
    smooth,
)

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
# the results table


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
    """The run directory a checkpoint came from: its source path if that is a run dir, else
    checkpoints/<profile>/<name>."""
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
