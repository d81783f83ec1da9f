"""The figures' rules and the training figures: curves of every stage, held-out pass@1 during training, one run's
curves (`plot_run`); the evaluation figures build on these rules (`codelib.reports.eval_figures`).

Every figure follows the same rules: a stage has one colour everywhere (`codelib.plumbing.stages.color_of`), shares are
drawn in %, legends sit outside the panels, and a quantity a run did not compute (a metrics key missing or null, as
KL at beta 0) is written "not computed" in its panel, never drawn as 0.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from codelib.engine.verdicts import VERDICT_CLASSES
from codelib.plumbing.params import REPO_ROOT, read_jsonl
from codelib.plumbing.paths import (
    profile_dir as ckpt_root,  # checkpoints/<profile>/ (codelib.plumbing.paths: every run directory)
)
from codelib.plumbing.stages import color_of, stage_of


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
    "sampler_logp_diff_mean": "trainer vs sampler log-prob, mean |difference|",
    "sampler_logp_diff_max": "trainer vs sampler log-prob, max |difference|",
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


def corner_note(ax, text: str) -> None:
    """A small grey note in a panel's top-left corner (what the panel does not show, and why)."""
    ax.text(
        0.02,
        0.97,
        text,
        transform=ax.transAxes,
        ha="left",
        va="top",
        fontsize=7,
        color="0.35",
        bbox={"facecolor": "white", "edgecolor": "0.8", "alpha": 0.85},
    )


def mark_not_computed(ax, names: list[str], everything: bool) -> None:
    """Write "not computed" into a panel: alone in its middle when no run computed the quantity, else in a corner
    naming the runs that did not (never a line at 0)."""
    if everything:
        ax.text(0.5, 0.5, NOT_COMPUTED, transform=ax.transAxes, ha="center", va="center", color="0.4", fontsize=11)
        ax.set_xticks([])
        ax.set_yticks([])
    elif names:
        corner_note(ax, f"{NOT_COMPUTED}: " + ", ".join(names))


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
    sandbox's share, the rollouts' verdict classes and each reward term. One colour per stage (codelib.plumbing.stages;
    a second run of a stage dashed); a quantity a run did not compute is written "not computed" in its panel, never
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
            corner_note(ax, "not in the reward of: " + ", ".join(missing))
        else:
            mark_not_computed(ax, missing, everything=len(missing) == len(metrics))
        ax.set_title(title, fontsize=10)
        if len(missing) < len(metrics):
            ax.set_xlabel("step")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # no step 2.5 on a short run
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
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
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
