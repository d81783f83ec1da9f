"""The comparison table of algorithms on one profile: every evaluated checkpoint (pipeline stages and variants) with
what it trained (`algorithm_of`, from its config.json), pass@1 with its interval, the paired difference from SFT, mean
length, wall time, the share of zero-variance groups and the eval's verdict classes; `comparison.md` / `.csv`. The
command that trains the comparison's runs and evaluates them is `codelib.runner.compare` (`python -m
codelib.comparison`, `make compare`)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from codelib.evaluation import evaluator
from codelib.plumbing.params import atomic_write_text, read_jsonl, reports_root
from codelib.reports import CLASSES, ckpt_root, eval_classes, load_summaries, pct, run_dir_of


def algorithm_of(config: dict) -> str:
    """What a run trained: the label its trainer wrote into config.json (the registered algorithm and the settings
    that depart from it); runs written before trainers recorded it get a name from their options."""
    if config.get("label"):
        return config["label"]
    stage = config.get("stage", "")
    if "n_candidates" in config:
        out = "DPO + NLL (RPO)" if "sft" in config.get("loss_type", []) else "DPO"
    elif "ppo_epochs" in config:
        adv = config.get("advantage", "batch")
        out = {
            "reinforce_pp": "REINFORCE++",
            "reinforce_pp_baseline": "REINFORCE++-baseline",
            "rloo": "PPO (RLOO A)",
            "group": "PPO (group A)",
        }.get(adv, "PPO (value head)" if config.get("critic") == "value_head" else "PPO")
        if config.get("clip_eps_high"):
            out += f", clip {config['clip_eps']}/{config['clip_eps_high']}"
    elif "baseline" in config:  # REINFORCE
        name = {"rloo": "RLOO", "none": "REINFORCE", "moving_average": "REINFORCE (moving-average baseline)"}
        out = name.get(config["baseline"], "REINFORCE")
    elif "num_generations" in config:
        lt = config.get("loss_type", "dapo")
        out = {"dr_grpo": "Dr. GRPO", "cispo": "CISPO"}.get(lt, f"GRPO ({lt} loss)")
        if config.get("importance_sampling_level") == "sequence":
            out = "GSPO" if lt == "grpo" else out + ", sequence ratio"
        elif lt == "dapo" and config.get("clip_eps_high"):
            out = "DAPO (TRL)"
    else:
        out = "SFT" if stage == "sft" else stage
    if config.get("kl_coef"):
        out += f", KL {config.get('kl_estimator', 'k3')} x{config['kl_coef']}"
    if config.get("dynamic_sampling"):
        out += ", dynamic sampling"
    if config.get("keep") == "best":
        out += ", keep best"
    return out


def wall_time_s(rows: list[dict]) -> float:
    """Training time of a run from its metrics.jsonl: TRL's train_runtime where logged, else the sum of step times."""
    runtime = [r["train_runtime"] for r in rows if isinstance(r.get("train_runtime"), (int, float))]
    if runtime:
        return float(max(runtime))
    return float(sum(r["time_s"] for r in rows if isinstance(r.get("time_s"), (int, float))))


COMPARISON_COLUMNS = [
    "checkpoint",
    "algorithm",
    "seed",
    "pass@1",
    "ci_low",
    "ci_high",
    "diff_vs_baseline",
    "diff_ci_low",
    "diff_ci_high",
    "avg_tokens",
    "train_min",
    "zero_std_frac",
    "clip_frac",
    "entropy",
    *[f"eval_{c}" for c in CLASSES],
]


def run_mean(metrics: list[dict], key: str) -> float:
    """The mean of a logged quantity over a run's steps; NaN ("not computed") when no step logged it."""
    vals = [r[key] for r in metrics if isinstance(r.get(key), (int, float))]
    return float(np.mean(vals)) if vals else math.nan


def _all_summaries(profile: str) -> dict[str, dict]:
    return load_summaries(profile, sorted(p.parent.name for p in (ckpt_root(profile) / "eval").glob("*/summary.json")))


def comparison_frame(profile: str, summaries: dict[str, dict] | None = None, baseline: str = "sft") -> pd.DataFrame:
    """One row per evaluated checkpoint: its algorithm (from the run's config.json), pass@1 with its 95% interval,
    the paired difference vs `baseline` over the tasks both scored, mean generated tokens, training wall time
    (minutes), the mean share of zero-variance groups over the run's steps, and the eval verdict classes."""
    summaries = _all_summaries(profile) if summaries is None else summaries
    base = summaries.get(baseline)
    rows = []
    for name, s in summaries.items():
        run = run_dir_of(profile, s.get("source", ""), name)
        config = json.loads((run / "config.json").read_text()) if run and (run / "config.json").exists() else {}
        metrics = read_jsonl(run / "metrics.jsonl") if run and (run / "metrics.jsonl").exists() else []
        diff = paired_vs(s, base) if base is not None and name != baseline else {}
        classes = eval_classes(profile, name, s)
        rows.append(
            {
                "checkpoint": name,
                "algorithm": algorithm_of(config) if config else name,
                "seed": config.get("seed", math.nan) if config else math.nan,
                "pass@1": s["pass@1"],
                "ci_low": s["ci_low"],
                "ci_high": s["ci_high"],
                "diff_vs_baseline": diff.get("diff", math.nan),
                "diff_ci_low": diff.get("ci_low", math.nan),
                "diff_ci_high": diff.get("ci_high", math.nan),
                "avg_tokens": s.get("avg_tokens", math.nan),
                "train_min": wall_time_s(metrics) / 60 if metrics else math.nan,
                "zero_std_frac": run_mean(metrics, "zero_std_frac"),
                "clip_frac": run_mean(metrics, "clip_frac"),
                "entropy": run_mean(metrics, "entropy"),
                **{f"eval_{c}": classes.get(c, math.nan) for c in CLASSES},
            }
        )
    return pd.DataFrame(rows, columns=COMPARISON_COLUMNS)


def paired_vs(s: dict, base: dict) -> dict:
    """The paired difference of a summary from the baseline's, as the results table gives it: the one the evaluator
    stored (`vs_baseline`) when it was against this baseline, else recomputed with the evaluation's own bootstrap
    settings (seed, iterations), so one comparison never shows two intervals."""
    stored = s.get("vs_baseline") or {}
    if stored.get("b") == base.get("checkpoint") and stored.get("tasks") == len(s.get("per_task", [])):
        return stored
    settings = s.get("settings") or {}
    try:
        return evaluator.compare(s, base, iters=settings.get("bootstrap_iters", 1000), seed=settings.get("seed", 0))
    except ValueError:  # no task in common
        return {}


def settings_line(summaries: dict[str, dict]) -> str:
    """What every row was evaluated on (tasks, samples per task, temperature, evaluation seed, bootstrap), from the
    summaries' settings; rows evaluated otherwise are named."""
    groups: dict[tuple, list[str]] = {}
    for name, s in summaries.items():
        st = s.get("settings") or {}
        key = (
            st.get("dataset", "?"),
            st.get("split", "?"),
            s.get("tasks", "?"),
            s.get("n_samples", st.get("n_samples", "?")),
            st.get("temperature", "?"),
            st.get("seed", "?"),
            st.get("bootstrap_iters", "?"),
        )
        groups.setdefault(key, []).append(name)
    parts = []
    for (ds, split, tasks, n, t, seed, iters), names in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        text = (
            f"{ds}/{split}: {tasks} tasks, {n} samples/task at T={t}, evaluation seed {seed}, "
            f"{iters}-resample bootstraps"
        )
        parts.append(text if len(groups) == 1 else f"{text} ({', '.join(sorted(names))})")
    return "; ".join(parts) + "." if parts else ""


def comparison_markdown(profile: str, df: pd.DataFrame, baseline: str = "sft", summaries: dict | None = None) -> str:
    """The comparison of algorithms as Markdown (percentages; Δ paired over the same tasks)."""

    def num(x, fmt):
        return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else fmt.format(x)

    head = [
        "checkpoint",
        "algorithm",
        "seed",
        "pass@1 [95% CI]",
        f"Δ vs {baseline} [95% CI]",
        "avg tokens",
        "train min",
        "zero-var groups",
        "clip frac",
        "entropy",
        "wrong / runtime / syntax / timeout",
    ]
    lines = [
        f"# Algorithms compared ({profile})",
        "",
        "Held-out pass@1 (%) with its 95% bootstrap interval over tasks; Δ is paired over the same tasks; avg "
        "tokens of the eval samples; train min: the run's training wall time as it happened (a run trained beside "
        "other jobs took longer: not a speed comparison, bench/ measures speed); zero-var groups: the mean share of a "
        "step's groups whose rewards were all equal (no signal; '-' for one sample per task); clip frac: the mean "
        "share of completion tokens where the ratio clip bound (low + high), entropy: the policy's mean token "
        "entropy over the run ('-': not computed by that algorithm or trainer); the last column: "
        "% of eval samples in each failing verdict class; seed: the run's training seed (one per run).",
        "",
        *([settings_line(summaries), ""] if summaries else []),
        "| " + " | ".join(head) + " |",
        "|" + "|".join("---" for _ in head) + "|",
    ]
    for r in df.to_dict("records"):
        delta = "-"
        if not math.isnan(r["diff_vs_baseline"]):
            delta = (
                f"{100 * r['diff_vs_baseline']:+.1f} [{100 * r['diff_ci_low']:+.1f}, {100 * r['diff_ci_high']:+.1f}]"
            )
        fails = " / ".join(num(100 * r[f"eval_{c}"], "{:.0f}") for c in CLASSES[1:])
        cells = [
            r["checkpoint"],
            r["algorithm"],
            num(r["seed"], "{:.0f}"),
            f"{pct(r['pass@1'])} [{pct(r['ci_low'])}, {pct(r['ci_high'])}]",
            delta,
            num(r["avg_tokens"], "{:.1f}"),
            num(r["train_min"], "{:.1f}"),
            num(100 * r["zero_std_frac"], "{:.0f}%"),
            num(100 * r["clip_frac"], "{:.2f}%"),
            num(r["entropy"], "{:.2f}"),
            fails,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_comparison(
    profile: str, summaries: dict[str, dict] | None = None, baseline: str = "sft", out: Path | None = None
) -> pd.DataFrame:
    """reports/<profile>/comparison.csv and comparison.md: every evaluated checkpoint of the profile (pipeline stages
    and variants) in one table (`comparison_frame`)."""
    summaries = _all_summaries(profile) if summaries is None else summaries
    df = comparison_frame(profile, summaries, baseline)
    out = out or reports_root() / profile
    atomic_write_text(out / "comparison.csv", df.to_csv(index=False))
    atomic_write_text(out / "comparison.md", comparison_markdown(profile, df, baseline, summaries))
    return df
