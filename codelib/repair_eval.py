"""Evaluation of multi-turn repair: success after t turns with the public tests' feedback, with an empty message, and
pass@t of independent samples at the same sample budget, paired over tasks with intervals; its table and figures.
The episodes themselves are `codelib.repair`'s.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from codelib.eval_sampling import EVAL_SAMPLING
from codelib.repair import MODES, run_episodes
from codelib.stats import bootstrap_ci, paired_difference, pass_at_k
from codelib.tasks import Task


def evaluate_repair(model, tokenizer, tasks: list[Task], cfg, out: Path | None = None) -> dict:
    """The three-way comparison on `tasks`. cfg: turns, eval_samples (episodes per task and arm), eval_independent
    (independent samples per task, >= turns), eval_temperature, eval_seed, max_new_tokens, public_rule, split_seed,
    workers, timeout_s, feedback_chars, bootstrap_iters.

    Per task and turn t: success with feedback and with empty feedback (share of its episodes whose last attempt by
    turn t passes all tests) and pass@t of independent samples (unbiased estimator); paired differences over tasks.
    Writes out/episodes.jsonl (every turn of every episode) and out/summary.json when `out` is given."""
    T, n, m = cfg.turns, cfg.eval_samples, max(cfg.eval_independent, cfg.turns)
    common = dict(public_rule=cfg.public_rule, split_seed=cfg.split_seed, temperature=cfg.eval_temperature,
                  top_p=EVAL_SAMPLING.top_p, max_new_tokens=cfg.max_new_tokens, seed=cfg.eval_seed, workers=cfg.workers,
                  timeout_s=cfg.timeout_s, feedback_chars=cfg.feedback_chars)  # fmt: skip
    arms = {}
    for mode in MODES:
        arms[mode], _ = run_episodes(model, tokenizer, tasks, n, T, mode=mode, **common)
    # independent samples: m first attempts per task (one-turn episodes; same seed, so sample j of a task is the
    # first attempt of its episode j in the other arms when m >= n)
    indep, _ = run_episodes(model, tokenizer, tasks, m, 1, mode="tests", **common)
    per_task = []
    for i, task in enumerate(tasks):
        row = {"task_id": task.task_id}
        for mode in MODES:
            eps = arms[mode][i * n : (i + 1) * n]
            row[mode] = [float(np.mean([e.passed_by(t) for e in eps])) for t in range(1, T + 1)]
            row[f"{mode}_turns_used"] = float(np.mean([len(e.turns) for e in eps]))
        c = sum(e.passed for e in indep[i * m : (i + 1) * m])
        row["independent"] = [pass_at_k(m, c, t) for t in range(1, T + 1)]
        per_task.append(row)
    iters = cfg.bootstrap_iters
    arms_out = {}
    for arm in (*MODES, "independent"):
        curve = []
        for t in range(T):
            values = [r[arm][t] for r in per_task]
            lo, hi = bootstrap_ci(values, iters=iters, seed=0)
            curve.append({"turn": t + 1, "success": float(np.mean(values)), "ci_low": lo, "ci_high": hi})
        arms_out[arm] = curve
    comparisons = []
    for a, b in (("tests", "empty"), ("tests", "independent"), ("empty", "independent")):
        for t in range(T):
            d = paired_difference([r[a][t] for r in per_task], [r[b][t] for r in per_task], iters=iters, seed=0)
            comparisons.append({"a": a, "b": b, "turn": t + 1, **d})
    summary = {"tasks": len(tasks), "turns": T, "episodes_per_task": n, "independent_per_task": m,
               "temperature": cfg.eval_temperature, "seed": cfg.eval_seed, "public_rule": cfg.public_rule,
               "arms": arms_out, "comparisons": comparisons,
               "turns_used": {mode: float(np.mean([r[f"{mode}_turns_used"] for r in per_task])) for mode in MODES},
               "per_task": per_task}  # fmt: skip
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        with open(out / "episodes.jsonl", "w") as f:
            for mode in MODES:
                for j, e in enumerate(arms[mode]):
                    f.write(json.dumps(e.to_row(episode=j % n)) + "\n")
        (out / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary


def summary_markdown(summaries: dict[str, dict]) -> str:
    """A markdown report of one or more evaluated checkpoints (name -> summary)."""

    def pct(x):
        return f"{100 * x:.1f}"

    lines = []
    for name, s in summaries.items():
        lines += [f"## {name}", "",
                  f"{s['tasks']} held-out tasks; {s['episodes_per_task']} episodes per task and arm, up to "
                  f"{s['turns']} turns; {s['independent_per_task']} independent samples per task; T={s['temperature']},"
                  f" seed {s['seed']}; public tests: rule {s['public_rule']!r}. Mean turns used: feedback "
                  f"{s['turns_used']['tests']:.2f}, empty {s['turns_used']['empty']:.2f}.", "",
                  "| turn t | with feedback | empty feedback | independent pass@t |", "|---|---|---|---|"]  # fmt: skip
        for t in range(s["turns"]):
            cells = [f"{pct(s['arms'][a][t]['success'])} [{pct(s['arms'][a][t]['ci_low'])}, "
                     f"{pct(s['arms'][a][t]['ci_high'])}]" for a in ("tests", "empty", "independent")]  # fmt: skip
            lines.append(f"| {t + 1} | " + " | ".join(cells) + " |")
        lines += ["", "Paired differences over tasks (points, 95% bootstrap interval):", "",
                  "| comparison | turn | difference | interval |", "|---|---|---|---|"]  # fmt: skip
        for c in s["comparisons"]:
            lines.append(f"| {c['a']} − {c['b']} | {c['turn']} | {pct(c['diff'])} | [{pct(c['ci_low'])}, "
                         f"{pct(c['ci_high'])}] |")  # fmt: skip
        lines.append("")
    return "\n".join(lines)


def plot_success_by_turn(summaries: dict[str, dict]):
    """Success by turn per arm (with intervals), one panel per evaluated checkpoint."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(summaries), figsize=(5 * len(summaries), 3.6), squeeze=False)
    labels = {"tests": "repair, with feedback", "empty": "repair, empty feedback", "independent": "independent pass@t"}
    for ax, (name, s) in zip(axes[0], summaries.items(), strict=True):
        for arm, label in labels.items():
            curve = s["arms"][arm]
            t = [p["turn"] for p in curve]
            ax.plot(t, [p["success"] for p in curve], marker="o", label=label)
            ax.fill_between(t, [p["ci_low"] for p in curve], [p["ci_high"] for p in curve], alpha=0.15)
        ax.set_xticks(t)
        ax.set_xlabel("turns (= samples per task)")
        ax.set_ylabel("success (all tests)")
        ax.set_title(name)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_differences(summaries: dict[str, dict]):
    """The paired differences at every turn > 1: feedback - empty, feedback - independent, with intervals."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.6))
    rows = [(name, c) for name, s in summaries.items() for c in s["comparisons"] if c["turn"] > 1]
    y = np.arange(len(rows))
    diffs = np.array([c["diff"] for _, c in rows])
    err = np.array([[c["diff"] - c["ci_low"] for _, c in rows], [c["ci_high"] - c["diff"] for _, c in rows]])
    ax.errorbar(diffs, y, xerr=err, fmt="o", capsize=3)
    ax.axvline(0, color="grey", lw=1)
    ax.set_yticks(y, [f"{name}: {c['a']} − {c['b']} (t={c['turn']})" for name, c in rows], fontsize=8)
    ax.set_xlabel("paired difference in success (95% bootstrap interval)")
    fig.tight_layout()
    return fig
