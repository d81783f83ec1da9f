"""Every figure 07_plots makes, rendered from hand-made run directories, checked for what a reader relies on:
each stage in its registry colour, "not computed" where a run logged nothing (never a line at 0), shares in %,
labelled colour bars, legends clear of titles and data, axes that do not magnify noise, stale figures removed."""

from __future__ import annotations

import json

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from matplotlib.colors import to_hex  # noqa: E402

from codelib import reports  # noqa: E402
from codelib.plumbing.stages import STAGES, color_of  # noqa: E402

PROFILE = "figs"
TASKS = [f"synthetic/t{i}" for i in range(12)]


def summary(name: str, p: float, tokens: float, baseline: str = "sft") -> dict:
    per_task = [{"task_id": t, "n": 4, "c": (i * 7 + int(10 * p)) % 5} for i, t in enumerate(TASKS)]
    mean = sum(r["c"] / r["n"] for r in per_task) / len(per_task)
    return {
        "checkpoint": name,
        "method": name,
        "source": "",
        "pass@1": mean,
        "ci_low": mean - 0.05,
        "ci_high": mean + 0.05,
        "passed": mean * len(TASKS),
        "tasks": len(TASKS),
        "avg_tokens": tokens,
        "ks": [1],
        "per_task": per_task,
        "verdicts": {"passed": 10, "wrong_answer": 5, "runtime_error": 2, "syntax_error": 1, "timeout": 0},
        "settings": {
            "dataset": "synthetic",
            "split": "test",
            "temperature": 0.8,
            "n_samples": 4,
            "seed": 1,
            "bootstrap_iters": 100,
        },
        "vs_baseline": None
        if name == baseline
        else {"baseline": baseline, "diff": 0.01, "ci_low": -0.02, "ci_high": 0.04},
    }


def rows(kind: str, steps: int = 30) -> list[dict]:
    out = []
    for s in range(steps):
        r = {"step": s, "loss": 1.0 / (s + 1)}
        if kind != "offline":
            r |= {
                "reward_mean": 0.3 + 0.01 * s,
                "pass_rate": 0.3 + 0.01 * s,
                "completion_len": 40.0 - 0.2 * s,
                "clip_frac": 0.1,
                "verdicts/timeout": 0.0,
                "verdicts/wrong_answer": 0.4 - 0.005 * s,
            }
            # KL: computed by PPO; absent (null) where not computed, as GRPO at beta 0 logs it
            r["kl"] = 0.002 * s if kind == "ppo" else None
        out.append(r)
    return out


@pytest.fixture()
def runs(tmp_path, monkeypatch):
    """checkpoints/figs/{sft,ppo,grpo,dpo}/metrics.jsonl and eval summaries of base, sft, ppo, grpo, dpo."""
    ck, rep = tmp_path / "checkpoints", tmp_path / "reports"
    monkeypatch.setenv("CODELIB_CHECKPOINTS", str(ck))
    monkeypatch.setenv("CODELIB_REPORTS", str(rep))
    for stage, kind in (("sft", "offline"), ("ppo", "ppo"), ("grpo", "grpo"), ("dpo", "offline")):
        d = ck / PROFILE / stage
        d.mkdir(parents=True)
        (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows(kind)))
    for i, name in enumerate(["base", "sft", "ppo", "grpo", "dpo"]):
        d = ck / PROFILE / "eval" / name
        d.mkdir(parents=True)
        (d / "summary.json").write_text(json.dumps(summary(name, 0.2 + 0.1 * i, 11.3 + 0.1 * i)))
    return tmp_path


def overlaps(a, b) -> bool:
    return a.width > 0 and b.width > 0 and a.overlaps(b)


def legend_clear(fig) -> None:
    """No legend overlaps the figure title, a panel title or a panel's data area."""
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    boxes = [t.get_window_extent(r) for t in [fig._suptitle] if t is not None]
    for ax in fig.axes:
        if ax.get_label() == "<colorbar>" or not ax.axison:
            continue
        boxes += [ax.title.get_window_extent(r), ax.get_window_extent(r)]
    for leg in fig.legends + [ax.get_legend() for ax in fig.axes if ax.get_legend()]:
        lb = leg.get_window_extent(r)
        for b in boxes:
            assert not overlaps(lb, b), f"legend {lb} overlaps {b}"


def line_colors(ax) -> set[str]:
    return {
        to_hex(ln.get_color()).lower() for ln in ax.get_lines() if ln.get_xdata() is not None and len(ln.get_xdata())
    }


def texts(fig) -> str:
    return (
        " ".join(t.get_text() for ax in fig.axes for t in ax.texts) + " " + " ".join(t.get_text() for t in fig.texts)
    )


def test_training_curves_colours_not_computed_and_no_loss_mix(runs):
    fig = reports.plot_training_curves(PROFILE, ["sft", "ppo", "grpo", "dpo"], window=3)
    titles = {ax.get_title(): ax for ax in fig.axes}
    # titles in words, never raw metric keys; no loss panel mixing algorithms; no all-zero panel
    assert all("_" not in t and "/" not in t for t in titles if t)
    assert "training loss" not in titles and "loss" not in titles
    assert not any("timed out" in t for t in titles), "a panel that is 0 in every run is left out"
    assert "timed out" in fig._supxlabel.get_text()
    # KL: drawn for PPO in its colour, "not computed" for GRPO, never a GRPO line at 0
    kl = titles["KL divergence to the starting policy"]
    assert line_colors(kl) == {color_of("ppo").lower()}
    assert any("not computed" in t.get_text() and "GRPO" in t.get_text() for t in kl.texts)
    # every stage in the registry's colour, offline stages named instead of drawn
    assert line_colors(titles["training rollouts that pass (%)"]) == {
        color_of("ppo").lower(),
        color_of("grpo").lower(),
    }
    assert "SFT" in fig._supxlabel.get_text() and "DPO" in fig._supxlabel.get_text()
    # shares in %: the values are scaled, the ticks say %
    pr = titles["training rollouts that pass (%)"]
    assert max(max(ln.get_ydata()) for ln in pr.get_lines()) > 1
    assert "%" in pr.yaxis.get_major_formatter()(50, 0)
    legend_clear(fig)
    plt.close(fig)


def test_a_quantity_no_run_computed_is_a_not_computed_panel(runs):
    ck = runs / "checkpoints" / PROFILE / "grpo" / "metrics.jsonl"
    ck.write_text("".join(json.dumps({**r, "kl": None}) + "\n" for r in rows("grpo")))
    fig = reports.plot_training_curves(PROFILE, ["grpo"], window=3)
    kl = next(ax for ax in fig.axes if ax.get_title() == "KL divergence to the starting policy")
    assert not kl.get_lines() and any(t.get_text() == "not computed" for t in kl.texts)
    plt.close(fig)
    fig = reports.plot_run(runs / "checkpoints" / PROFILE / "grpo", keys=["kl", "pass_rate"])
    assert any(t.get_text() == "not computed" for t in fig.axes[0].texts) and not fig.axes[0].get_lines()
    assert fig.axes[0].get_title() == "KL divergence to the starting policy"
    plt.close(fig)


def test_a_short_run_has_whole_steps_on_its_axes(runs):
    # a 5-step run in the browser drew its KL panel (logged every 2 steps) with ticks at steps 2.5, 3.5, ...
    run = runs / "checkpoints" / PROFILE / "short"
    run.mkdir(parents=True)
    rows5 = [{"step": i, "pass_rate": 0.1 * i, "kl": 0.01 * i if i % 2 == 0 else None} for i in range(1, 6)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows5))
    fig = reports.plot_run(run, keys=["kl", "pass_rate"])
    for ax in fig.axes[:2]:
        lo, hi = ax.get_xlim()
        ticks = [t for t in ax.get_xticks() if lo <= t <= hi]
        assert ticks and all(float(t).is_integer() for t in ticks), (ax.get_title(), ticks)
    plt.close(fig)


def test_eval_figures(runs):
    summaries = reports.load_summaries(PROFILE)
    # pass@1: bars in stage colours, labels above the interval caps, % axis
    fig = reports.plot_pass_at_1(summaries)
    ax = fig.axes[0]
    assert [to_hex(b.get_facecolor()).lower() for b in ax.patches] == [color_of(n).lower() for n in summaries]
    for t, n in zip(ax.texts, summaries, strict=True):
        assert t.get_position()[1] > 100 * summaries[n]["ci_high"] and t.get_text().endswith("%")
    assert "%" in ax.get_ylabel()
    plt.close(fig)
    # length-accuracy: 11.3-11.7 tokens do not fill the axis (it spans at least +-25% of the mean length)
    fig = reports.plot_length_accuracy(summaries)
    lo, hi = fig.axes[0].get_xlim()
    assert lo < 11.3 and hi > 11.7 and hi - lo >= 0.5 * 11.5
    legend_clear(fig)
    plt.close(fig)
    # pass@k: one panel per checkpoint, each band in its stage colour, the baseline dashed elsewhere
    fig = reports.plot_pass_at_k(summaries)
    panels = [ax for ax in fig.axes if ax.axison]
    assert [ax.get_title() for ax in panels] == list(summaries)
    for ax in panels:
        assert len(ax.collections) == 1  # one band per panel
        assert to_hex(ax.collections[0].get_facecolor()[0]).lower() == color_of(ax.get_title()).lower()
    legend_clear(fig)
    plt.close(fig)
    # heat map: % with a labelled colour bar
    fig = reports.plot_task_heatmap(summaries, 8)
    bar = next(ax for ax in fig.axes if ax.get_label() == "<colorbar>")
    assert "%" in bar.get_ylabel()
    assert fig.axes[0].images[0].get_clim() == (0, 100)
    plt.close(fig)
    fig = reports.plot_verdict_classes(PROFILE, summaries)
    assert set(reports.CLASS_COLORS.values()).isdisjoint({s.color for s in STAGES.values()})
    legend_clear(fig)
    plt.close(fig)


def test_colours_come_from_the_stage_registry():
    for stage in STAGES.values():
        if stage.run:
            assert color_of(stage.run) == stage.color
            assert reports.label_of(stage.run) == stage.label
    assert color_of("grpo_dapo") == STAGES["04_grpo"].color
    assert reports.label_of("grpo_dapo") == "GRPO (grpo_dapo)"


def test_make_all_writes_where_asked_and_removes_stale_figures(runs):
    stale = runs / "out" / "figures" / "eval_during_training.png"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"old")
    cfg = reports.PlotsConfig(profile=PROFILE, stages=["sft", "ppo", "grpo", "dpo"], out_dir=str(runs / "out"))
    paths = reports.make_all(cfg, show=False)
    assert set(paths) == reports.FIGURES - {"eval_during_training"}
    assert all(p.parent == runs / "out" / "figures" and p.stat().st_size > 0 for p in paths.values())
    assert not stale.exists(), "a figure this run did not make is removed"
    assert not (runs / "reports" / PROFILE / "figures").exists(), "nothing written to the committed reports"
    # empty out_dir: a scratch folder beside the checkpoints
    cfg.out_dir = ""
    assert reports.out_dir(cfg) == runs / "checkpoints" / PROFILE / "plots"


def test_a_second_run_of_a_stage_is_dashed_and_duplicates_are_named_not_drawn(runs):
    d = runs / "checkpoints" / PROFILE / "grpo_trl"
    d.mkdir()
    (d / "metrics.jsonl").write_text(
        "".join(json.dumps({**r, "rewards/pass/mean": r["pass_rate"]}) + "\n" for r in rows("grpo"))
    )
    fig = reports.plot_training_curves(PROFILE, ["ppo", "grpo", "grpo_trl"], window=3)
    legend = fig.legends[0]
    styles = {t.get_text(): h.get_linestyle() for t, h in zip(legend.get_texts(), legend.legend_handles, strict=True)}
    assert styles["GRPO"] == "-" and styles["GRPO (grpo_trl)"] == "--"
    titles = [ax.get_title() for ax in fig.axes]
    assert "mean reward of the training rollouts" not in titles  # the reward is the pass rate here
    assert not any("reward term" in t for t in titles)  # a term equal to the pass rate repeats it
    assert "mean reward: the pass rate" in fig._supxlabel.get_text()
    plt.close(fig)
