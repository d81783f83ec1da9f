"""The summary of a study (08_study): per-arm pass@1 over training seeds with two-level bootstrap intervals, paired
comparisons between arms, pass@k curves and their tables (the figures: `codelib.reports.study_figures`).

Intervals: per arm, pass@1 is the mean over seeds of each seed's mean over tasks; its interval is a two-level
bootstrap (resample seeds, then tasks), so an arm whose seeds disagree gets a wider interval than one whose seeds
agree. Comparisons between arms are paired over tasks (the same task draw on both sides) with seeds resampled
within each arm.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from codelib.evaluation.passk import curves_frame, pass_at_k_matrix
from codelib.plumbing.params import REPO_ROOT, atomic_write_text
from codelib.reports.study_figures import (  # noqa: F401  (the figures' names stay importable from here)
    make_figures,
    plot_arms,
    plot_comparisons,
    plot_curves,
    shown_pairs,
)
from codelib.runner.study_file import Study, finished, load_study, load_summaries

# ---------------------------------------------------------------------------------------------------------------
# statistics: seeds and tasks


def two_level_bootstrap(
    x, iters: int = 1000, seed: int = 0, alpha: float = 0.05, nested: bool = False
) -> tuple[float, float, float]:
    """Mean of x [seeds, tasks] with a two-level percentile bootstrap: resample seeds, then tasks.

    Each replicate draws S seeds with replacement, then T tasks with replacement: one task draw shared by every
    drawn seed (the seeds ran the same tasks; default) or, with nested=True, a fresh task draw within each drawn
    seed. With one seed this is the usual bootstrap over tasks. Returns (mean, lo, hi).
    """
    x = np.asarray(x, dtype=float)
    if x.ndim != 2 or x.size == 0:
        raise ValueError(f"need a [seeds, tasks] array with at least one value, got shape {x.shape}")
    s, t = x.shape
    rng = np.random.default_rng(seed)
    seeds_idx = rng.integers(0, s, size=(iters, s))  # [iters, S]
    if nested:
        tasks_idx = rng.integers(0, t, size=(iters, s, t))  # [iters, S, T]
        est = x[seeds_idx[..., None], tasks_idx].mean(axis=(1, 2))  # [iters]
    else:
        tasks_idx = rng.integers(0, t, size=(iters, t))  # [iters, T]
        per_seed = x[:, tasks_idx].mean(axis=2)  # [S, iters]: each seed's mean over the replicate's tasks
        est = np.take_along_axis(per_seed.T, seeds_idx, axis=1).mean(axis=1)  # [iters]
    lo, hi = np.quantile(est, [alpha / 2, 1 - alpha / 2])
    return float(x.mean()), float(lo), float(hi)


def paired_two_level(a, b, iters: int = 1000, seed: int = 0, alpha: float = 0.05) -> dict:
    """mean(a) - mean(b) for a [seeds_a, tasks], b [seeds_b, tasks] on the same tasks, two-level bootstrap.

    Seeds are resampled within each arm (different arms' seeds are different runs); tasks are drawn once per
    replicate for both arms, so the task difficulty both share cancels (a paired comparison).
    """
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"paired comparison needs [seeds, tasks] arrays on the same tasks, got {a.shape}, {b.shape}")
    rng = np.random.default_rng(seed)
    t = a.shape[1]
    tasks_idx = rng.integers(0, t, size=(iters, t))  # [iters, T], shared by both arms
    sa = rng.integers(0, a.shape[0], size=(iters, a.shape[0]))  # [iters, Sa]
    sb = rng.integers(0, b.shape[0], size=(iters, b.shape[0]))  # [iters, Sb]
    ma = np.take_along_axis(a[:, tasks_idx].mean(axis=2).T, sa, axis=1).mean(axis=1)  # [iters]
    mb = np.take_along_axis(b[:, tasks_idx].mean(axis=2).T, sb, axis=1).mean(axis=1)  # [iters]
    d = ma - mb
    lo, hi = np.quantile(d, [alpha / 2, 1 - alpha / 2])
    return {
        "diff": float(a.mean() - b.mean()),
        "ci_low": float(lo),
        "ci_high": float(hi),
        "p_better": float((d > 0).mean()),
        "tasks": int(t),
        "seeds_a": int(a.shape[0]),
        "seeds_b": int(b.shape[0]),
    }


def _rates(summaries: Sequence[dict], task_ids: list[str], k: int = 1):
    """[seeds, tasks] per-task pass@k of several eval summaries on the given tasks."""
    rows = []
    for s in summaries:
        by_id = {r["task_id"]: r for r in s["per_task"]}
        n = [by_id[t]["n"] for t in task_ids]
        c = [by_id[t]["c"] for t in task_ids]
        rows.append(pass_at_k_matrix(n, c, k)[:, k - 1])
    return np.asarray(rows)


# ---------------------------------------------------------------------------------------------------------------
# the summary: tables and figures


@dataclass
class StudyReportConfig:
    """Parameters of 08_study: which study to summarise (its runs must be trained and evaluated)."""

    study: str = "params/tiny/studies/algorithms.yaml"  # the study file
    split: str = ""  # another split to evaluate on (e.g. fresh; --split): its own <name>/<split>/ report
    bootstrap_iters: int = 1000  # resamples for every interval
    seed: int = 0  # bootstrap seed
    nested: bool = False  # True draws tasks afresh within each resampled seed (default: one draw shared by all)
    curve_iters: int = 200  # resamples per k for the pass@k bands

    def __post_init__(self):
        if self.bootstrap_iters < 10 or self.curve_iters < 10:
            raise ValueError("bootstrap_iters and curve_iters need at least 10 resamples (1000 for a report)")


@dataclass
class StudySummary:
    study: Study
    arms: object  # DataFrame: one row per arm (and reference)
    per_seed: object  # DataFrame: one row per run
    comparisons: object  # DataFrame: paired differences
    curves: dict = field(default_factory=dict)  # name -> {"k", "pass@k", "ci_low", "ci_high", "per_seed"}
    task_ids: list = field(default_factory=list)
    missing: list = field(default_factory=list)  # the study's runs without an evaluation (not trained yet)


def summarise(cfg: StudyReportConfig, write: bool = True) -> StudySummary:
    """Arm table (mean over seeds, two-level CI), per-seed table, paired comparisons, pass@k curves."""
    import pandas as pd

    study = load_study(cfg.study, cfg.split)
    summaries = load_summaries(study)
    missing = [r.name for r in study.runs if r.name not in summaries]
    if len(missing) == len(study.runs):  # nothing to summarise yet (a study with some runs left is summarised)
        shipped = study.summary_dir / "08_study.ipynb"
        where = (
            f"\nThe committed result of this study is {shipped.relative_to(REPO_ROOT)} (with summary.md and figures/ "
            "beside it): open it in JupyterLab (make lab) to read it without running anything."
            if shipped.exists() and shipped.is_relative_to(REPO_ROOT)
            else ""
        )
        raise FileNotFoundError(
            f"{len(missing)} run(s) of study {study.name} have no evaluation yet (first: "
            f"{missing[0]}); run: python -m codelib.study {study.path}{where}"
        )
    runs = [r for r in study.runs if r.name in summaries]  # the runs not trained yet are named in the summary
    groups: dict[str, list[str]] = {ref: [ref] for ref in study.references if ref in summaries}
    for run in runs:
        groups.setdefault(run.arm, []).append(run.name)
    task_sets = [{r["task_id"] for r in summaries[n]["per_task"]} for names in groups.values() for n in names]
    task_ids = sorted(set.intersection(*task_sets))
    if not task_ids:
        raise ValueError(f"study {study.name}: the runs share no evaluated task")
    it, sd = cfg.bootstrap_iters, cfg.seed
    data = {g: _rates([summaries[n] for n in names], task_ids) for g, names in groups.items()}  # g -> [S, T]

    per_seed = []
    for run in runs:
        s = summaries[run.name]
        per_seed.append(
            {
                "run": run.name,
                "arm": run.arm,
                "stage": run.stage,
                "seed": run.seed,
                "pass@1": s["pass@1"],
                "ci_low": s["ci_low"],
                "ci_high": s["ci_high"],
                "avg_tokens": s["avg_tokens"],
            }
        )
    arms = []
    for g, x in data.items():
        mean, lo, hi = two_level_bootstrap(x, it, sd, nested=cfg.nested)
        _, tlo, thi = two_level_bootstrap(x.mean(axis=0, keepdims=True), it, sd)  # tasks only, seeds held fixed
        seed_means = x.mean(axis=1)
        ref = g in study.references
        arms.append(
            {
                "arm": g,
                "kind": "reference" if ref else "arm",
                "stage": "" if ref else study.arms[g]["stage"],
                "overrides": "" if ref else json.dumps(study.arms[g]["overrides"], sort_keys=True),
                "seeds": x.shape[0],
                "pass@1": mean,
                "ci_low": lo,
                "ci_high": hi,
                "task_ci_low": tlo,
                "task_ci_high": thi,
                "seed_sd": float(seed_means.std(ddof=1)) if len(seed_means) > 1 else math.nan,
                "per_seed": " ".join(f"{100 * v:.1f}" for v in seed_means),
                "avg_tokens": float(np.mean([summaries[n]["avg_tokens"] for n in groups[g]])),
            }
        )
    arm_names = [g for g in groups if g not in study.references]
    pairs = [(g, study.baseline) for g in arm_names if study.baseline and g != study.baseline]
    shown = set(pairs)
    if study.pairs is not None:  # the pairs the study names come next, in its order (a reference may be in one)
        named = [p for p in study.pairs if p[0] in groups and p[1] in groups]
        pairs += [p for p in named if p not in pairs and p[::-1] not in pairs]
        shown.update(named)
    pairs += [p for p in itertools.combinations(arm_names, 2) if p not in pairs and p[::-1] not in pairs]
    comparisons = [
        {
            "a": a,
            "b": b,
            "shown": study.pairs is None or (a, b) in shown or (b, a) in shown,
            **paired_two_level(data[a], data[b], it, sd),
        }
        for a, b in pairs
    ]

    curves = {}
    k_max = min(min(r["n"] for r in summaries[n]["per_task"]) for names in groups.values() for n in names)
    for g, names in groups.items():
        rates = [_rates([summaries[n] for n in names], task_ids, k) for k in range(1, k_max + 1)]  # K x [S, T]
        boots = [two_level_bootstrap(x, cfg.curve_iters, sd, nested=cfg.nested) for x in rates]
        curves[g] = {
            "k": list(range(1, k_max + 1)),
            "pass@k": [b[0] for b in boots],
            "ci_low": [b[1] for b in boots],
            "ci_high": [b[2] for b in boots],
            "per_seed": [[float(x[i].mean()) for x in rates] for i in range(len(names))],
        }
    out = StudySummary(
        study, pd.DataFrame(arms), pd.DataFrame(per_seed), pd.DataFrame(comparisons), curves, task_ids, missing
    )
    if write:
        write_summary(out, cfg)
    return out


def _pct(x) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}"


def summary_markdown(s: StudySummary, cfg: StudyReportConfig) -> str:
    st = s.study
    ev = st.eval_values
    seeds = ", ".join(map(str, st.seeds))
    lines = [
        f"# Study `{st.name}` ({st.profile})",
        "",
        st.description,
        "",
        f"{len(s.task_ids)} held-out tasks ({ev['dataset']}/{st.split or ev['split']}), "
        f"{ev['n_samples']} samples/task at "
        f"T={ev['temperature']}, eval seed {ev['seed']}; training seeds {seeds}. pass@1 is the mean over seeds; "
        f"[95% CI] is a {cfg.bootstrap_iters}-resample two-level bootstrap (seeds, then tasks); `tasks only` holds "
        "the seeds fixed (what a single-seed table reports); `seed sd` is the standard deviation of the per-seed "
        "pass@1. Percentages.",
        "",
        "| arm | stage | seeds | pass@1 [95% CI, seeds+tasks] | tasks only | seed sd | per seed | avg tokens |",
        "|---|---|---|---|---|---|---|---|",
    ]
    if s.missing:  # said before the table: an arm below may hold fewer seeds than the study names
        said = []
        for trained, words in ((False, "Not trained yet"), (True, "Trained, not evaluated on this split")):
            left: dict[str, list[str]] = {}
            for run in st.runs:
                if run.name in s.missing and finished(st, run) == trained:
                    left.setdefault(run.arm, []).append(str(run.seed))
            if left:
                told = "; ".join(f"{arm} (seed {', '.join(seeds)})" for arm, seeds in left.items())
                said += [f"{words}, so not in the tables: {told}.", ""]
        lines[-2:-2] = said
    for r in s.arms.to_dict("records"):
        stage = r["stage"] + (f" {r['overrides']}" if r["overrides"] not in ("", "{}") else "")
        lines.append(
            f"| {r['arm']} | {stage or 'reference'} | {r['seeds']} | {_pct(r['pass@1'])} "
            f"[{_pct(r['ci_low'])}, {_pct(r['ci_high'])}] | [{_pct(r['task_ci_low'])}, "
            f"{_pct(r['task_ci_high'])}] | {_pct(r['seed_sd'])} | {r['per_seed']} | {r['avg_tokens']:.1f} |"
        )
    shown = shown_pairs(s.comparisons)
    if len(shown):
        hidden = len(s.comparisons) - len(shown)
        lines += [
            "",
            "Paired over the same tasks, seeds resampled within each arm; `P(a > b)` is the share of "
            "bootstrap replicates where a is ahead."
            + (
                " Every arm against the baseline and the pairs the study names; "
                + ("the other pair is" if hidden == 1 else f"the other {hidden} pairs are")
                + " in comparisons.csv."
                if hidden
                else ""
            ),
            "",
            "| a | b | Δ pass@1 (a - b) [95% CI] | P(a > b) |",
            "|---|---|---|---|",
        ]
        for r in shown.to_dict("records"):
            lines.append(
                f"| {r['a']} | {r['b']} | {100 * r['diff']:+.1f} [{100 * r['ci_low']:+.1f}, "
                f"{100 * r['ci_high']:+.1f}] | {r['p_better']:.2f} |"
            )
    return "\n".join(lines) + "\n"


def write_summary(s: StudySummary, cfg: StudyReportConfig) -> dict[str, Path]:
    out = s.study.summary_dir
    paths = {
        "summary.md": out / "summary.md",
        "summary.csv": out / "summary.csv",
        "per_seed.csv": out / "per_seed.csv",
        "comparisons.csv": out / "comparisons.csv",
    }
    atomic_write_text(paths["summary.md"], summary_markdown(s, cfg))
    atomic_write_text(paths["summary.csv"], s.arms.to_csv(index=False))
    atomic_write_text(paths["per_seed.csv"], s.per_seed.to_csv(index=False))
    atomic_write_text(paths["comparisons.csv"], s.comparisons.to_csv(index=False))

    atomic_write_text(out / "pass_at_k.csv", curves_frame(s.curves).to_csv(index=False))
    return paths
