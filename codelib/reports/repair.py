"""The report of multi-turn repair's evaluation: reports/<profile>/repair/ (summary.md, comparisons.csv, figures).

Reads the summaries `codelib.evaluation.repair_eval` computes; `cfg` is the repair stage's Config.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from codelib.plumbing.paths import report_dir

PROBE = "probe"  # the probe's task set: its eval summaries under repair_eval/probe/, its report section and figures

# the tiny profile's evaluated checkpoints (eval_checkpoints) and the arms, in words for the figures
CHECKPOINT_WORDS = {"sft": "SFT", "repair_sft": "SFT with repair examples", "repair": "multi-turn RL (RLOO)"}
ARM_WORDS = {"tests": "feedback", "empty": "empty feedback", "independent": "independent samples"}


def checkpoint_title(name: str) -> str:
    """`repair_sft: SFT with repair examples`; a name the table does not know stays as it is."""
    return f"{name}: {CHECKPOINT_WORDS[name]}" if name in CHECKPOINT_WORDS else name


def summary_markdown(summaries: dict[str, dict]) -> str:
    """A markdown report of one or more evaluated checkpoints (name -> summary)."""

    def pct(x):
        return f"{100 * x:.1f}"

    lines = []
    for name, s in summaries.items():
        lines += [
            f"## {name}",
            "",
            f"{s['tasks']} held-out tasks; {s['episodes_per_task']} episodes per task and arm, up to "
            f"{s['turns']} turns; {s['independent_per_task']} independent samples per task; T={s['temperature']},"
            f" seed {s['seed']}; public tests: rule {s['public_rule']!r}. Mean turns used: feedback "
            f"{s['turns_used']['tests']:.2f}, empty {s['turns_used']['empty']:.2f}.",
            "",
            "| turn t | with feedback | empty feedback | independent pass@t |",
            "|---|---|---|---|",
        ]
        for t in range(s["turns"]):
            cells = [
                f"{pct(s['arms'][a][t]['success'])} [{pct(s['arms'][a][t]['ci_low'])}, "
                f"{pct(s['arms'][a][t]['ci_high'])}]"
                for a in ("tests", "empty", "independent")
            ]
            lines.append(f"| {t + 1} | " + " | ".join(cells) + " |")
        lines += [
            "",
            "Paired differences over tasks (points, 95% bootstrap interval):",
            "",
            "| comparison | turn | difference | interval |",
            "|---|---|---|---|",
        ]
        for c in s["comparisons"]:
            interval = f"[{pct(c['ci_low'])}, {pct(c['ci_high'])}]"
            lines.append(f"| {c['a']} − {c['b']} | {c['turn']} | {pct(c['diff'])} | {interval} |")
        lines.append("")
    return "\n".join(lines)


def plot_success_by_turn(summaries: dict[str, dict], task_set: str = "held-out tasks"):
    """Success by turn per arm (%, with intervals), one panel per checkpoint; the title names the task set."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(summaries), figsize=(5 * len(summaries), 3.9), squeeze=False, layout="constrained")
    labels = {"tests": "repair, with feedback", "empty": "repair, empty feedback", "independent": "independent pass@t"}
    for ax, (name, s) in zip(axes[0], summaries.items(), strict=True):
        for arm, label in labels.items():
            curve = s["arms"][arm]
            t = [p["turn"] for p in curve]
            ax.plot(t, [100 * p["success"] for p in curve], marker="o", label=label)
            ax.fill_between(t, [100 * p["ci_low"] for p in curve], [100 * p["ci_high"] for p in curve], alpha=0.15)
        ax.set_xticks(t)
        ax.set_xlabel("turns (= samples per task)")
        ax.set_ylabel("success, all tests (%)")
        ax.set_title(checkpoint_title(name), fontsize=10)
    fig.legend(*axes[0][0].get_legend_handles_labels(), loc="outside right upper", fontsize=8, frameon=False)
    fig.suptitle(f"Success by turn on the {task_set} (95% CI over tasks)")
    return fig


def plot_differences(summaries: dict[str, dict], task_set: str = "held-out tasks"):
    """The paired differences at every turn > 1 in points: feedback - empty, feedback - independent, with intervals."""
    import matplotlib.pyplot as plt

    rows = [(name, c) for name, s in summaries.items() for c in s["comparisons"] if c["turn"] > 1]
    fig, ax = plt.subplots(figsize=(9, 1.6 + 0.3 * len(rows)))
    y = np.arange(len(rows))
    diffs = 100 * np.array([c["diff"] for _, c in rows])
    err = 100 * np.array([[c["diff"] - c["ci_low"] for _, c in rows], [c["ci_high"] - c["diff"] for _, c in rows]])
    ax.errorbar(diffs, y, xerr=err, fmt="o", capsize=3)
    ax.axvline(0, color="grey", lw=1)
    words = [
        f"{name}: {ARM_WORDS.get(c['a'], c['a'])} − {ARM_WORDS.get(c['b'], c['b'])}, turn {c['turn']}"
        for name, c in rows
    ]
    ax.set_yticks(y, words, fontsize=8)
    ax.invert_yaxis()  # the first checkpoint on top, as in the summary
    ax.set_xlabel("paired difference in success (points, 95% bootstrap interval)")
    ax.set_title(f"Feedback against its controls on the {task_set}", fontsize=10)
    fig.tight_layout()
    return fig


def write_report(cfg, summaries: dict[str, dict], probe: dict[str, dict] | None = None) -> Path:
    """reports/<profile>/repair/: summary.md, comparisons.csv, figures/success_by_turn.png and differences.png (and
    the probe's section, rows and figures *_probe.png when it ran)."""
    import pandas as pd

    from codelib.reports import save_figures

    rep = report_dir(cfg.profile) / "repair"
    rep.mkdir(parents=True, exist_ok=True)
    head = (
        f"# Multi-turn repair ({cfg.profile})\n\nWritten by `codelib.trainers.repair.evaluate`. Success = the "
        "last attempt made by turn t passes every test (public and hidden); independent = unbiased pass@t of "
        f"{cfg.eval_independent} independent first attempts per task (the same budget of t samples).\n\n"
    )
    text = head + f"# Held-out tasks (`{cfg.dataset}` split `{cfg.eval_split}`)\n\n" + summary_markdown(summaries)
    if probe:
        text += (
            "\n# Probe: the answer only in the tests (`synthetic` split `probe`)\n\nEach probe task returns a fixed "
            "number or two-letter word that its docstring does not name and its training side never used "
            "(`synthetic.probe_specs`): the prompt cannot determine the answer, a failing public test's feedback "
            "can. Turn-2 success above the empty-feedback arm is the model reading the feedback.\n\n"
            + summary_markdown(probe)
        )
    (rep / "summary.md").write_text(text)
    rows = [
        {"task_set": which, "checkpoint": name, **c}
        for which, sums in (("held_out", summaries), (PROBE, probe or {}))
        for name, s in sums.items()
        for c in s["comparisons"]
    ]
    pd.DataFrame(rows).to_csv(rep / "comparisons.csv", index=False)
    figs = {
        "success_by_turn": plot_success_by_turn(summaries),
        "differences": plot_differences(summaries),
    }
    if probe:
        figs["success_by_turn_probe"] = plot_success_by_turn(probe, "probe tasks")
        figs["differences_probe"] = plot_differences(probe, "probe tasks")
    save_figures(figs, rep / "figures", show=False)
    return rep
