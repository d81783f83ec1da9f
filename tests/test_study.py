"""Studies: the two-level bootstrap, paired comparisons, the nominal width of every interval, pass@k curves, strict
study files, resume after a kill, and a smoke study (2 arms x 2 seeds) run end to end through papermill."""

import copy
import dataclasses
import json
import os
from pathlib import Path

import numpy as np
import pytest
import yaml

from codelib.evaluation import passk
from codelib.evaluation.evaluator import bootstrap_ci, pass_at_k
from codelib.plumbing.params import REPO_ROOT, ParamsError, checkpoints_root
from codelib.runner import run_keys, study, study_report

# ---------------------------------------------------------------------------------------------------------------
# statistics on hand-made data


def hand_made_arms(tasks: int = 300, spread: float = 0.1):
    """Two arms with the same mean: one whose three seeds agree, one whose seeds sit `spread` apart."""
    rng = np.random.default_rng(0)
    p = rng.uniform(0.2, 0.8, size=tasks)  # per-task pass rate both arms share on average
    stable = np.stack([p, p, p])  # [seeds, tasks]
    noisy = np.stack([p - spread, p, p + spread])
    return stable, noisy


@pytest.mark.parametrize("nested", [False, True])
def test_seed_noisy_arm_gets_a_wider_interval_than_a_seed_stable_one(nested):
    stable, noisy = hand_made_arms()
    m_s, lo_s, hi_s = study.two_level_bootstrap(stable, iters=2000, seed=1, nested=nested)
    m_n, lo_n, hi_n = study.two_level_bootstrap(noisy, iters=2000, seed=1, nested=nested)
    assert m_s == pytest.approx(m_n)  # the same mean
    assert lo_s <= m_s <= hi_s and lo_n <= m_n <= hi_n
    assert hi_n - lo_n > 2 * (hi_s - lo_s)  # seed spread of ±10 points dwarfs the task spread of 300 tasks


def test_one_seed_is_the_bootstrap_over_tasks():
    x = np.random.default_rng(3).uniform(0, 1, size=(1, 400))
    _, lo, hi = study.two_level_bootstrap(x, iters=4000, seed=0)
    blo, bhi = bootstrap_ci(x[0], iters=4000, seed=0)
    assert lo == pytest.approx(blo, abs=0.005) and hi == pytest.approx(bhi, abs=0.005)


def test_paired_comparison_cancels_task_difficulty():
    stable, noisy = hand_made_arms()
    same = study.paired_two_level(stable, stable, iters=500)
    assert same["diff"] == 0 and same["ci_low"] == same["ci_high"] == 0
    better = study.paired_two_level(stable + 0.05, stable, iters=500)  # +5 points on every task and seed
    assert better["diff"] == pytest.approx(0.05) and better["ci_low"] == pytest.approx(0.05)
    assert better["p_better"] == 1.0
    noisy_vs = study.paired_two_level(noisy + 0.05, stable, iters=2000)
    assert noisy_vs["ci_low"] < 0.05 < noisy_vs["ci_high"] and noisy_vs["ci_high"] - noisy_vs["ci_low"] > 0.05
    with pytest.raises(ValueError, match="same tasks"):
        study.paired_two_level(stable, stable[:, :10])


def _nominal_width(x, alpha):
    """The width of the normal-theory (1 - alpha) interval of the mean of x: 2 z sd / sqrt(n)."""
    from statistics import NormalDist

    return 2 * NormalDist().inv_cdf(1 - alpha / 2) * np.std(x) / np.sqrt(x.size)


@pytest.mark.parametrize("alpha", [0.05, 0.2])
def test_every_interval_has_its_nominal_width_over_tasks(alpha):
    """400 tasks of pass 0/1 at 30%: the mean is close to normal, so each percentile bootstrap over tasks is about
    2 z(1 - alpha/2) se wide (z 1.96 at alpha 0.05; taking the alpha quantile instead of alpha/2 gives 1.64, 16%
    narrower); the pass@k band, the two-level interval with one seed (shared or nested task draws) and the paired
    difference against an arm of zeros all resample the same tasks."""
    x = np.zeros(400)
    x[::10], x[1::10], x[2::10] = 1.0, 1.0, 1.0  # 30% pass
    want = _nominal_width(x, alpha)
    lo, hi = bootstrap_ci(x, iters=4000, seed=0, alpha=alpha)
    widths = {"bootstrap_ci": hi - lo}
    cv = passk.curve([{"n": 1, "c": int(v)} for v in x], iters=4000, seed=0, alpha=alpha)
    widths["pass@k band"] = cv["ci_high"][0] - cv["ci_low"][0]
    for nested in (False, True):
        _, lo, hi = study.two_level_bootstrap(x[None], iters=4000, seed=0, alpha=alpha, nested=nested)
        widths[f"two-level nested={nested}"] = hi - lo
    d = study.paired_two_level(x[None], np.zeros((1, 400)), iters=4000, seed=0, alpha=alpha)
    widths["paired"] = d["ci_high"] - d["ci_low"]
    for name, w in widths.items():
        assert w == pytest.approx(want, rel=0.06), name


def test_the_pass_at_k_band_is_the_bootstrap_of_the_task_means_with_one_draw_for_every_k():
    """The band's matmul form equals the plain bootstrap it stands for: the same task draws, each replicate the mean
    of the drawn tasks' pass@k, the alpha/2 and 1 - alpha/2 quantiles."""
    rng = np.random.default_rng(5)
    n = np.full(30, 8)
    c = rng.integers(0, 9, size=30)
    values = passk.pass_at_k_matrix(n, c)  # [tasks, k]
    cv = passk.curve([{"n": int(a), "c": int(b)} for a, b in zip(n, c, strict=True)], iters=500, seed=3, alpha=0.1)
    idx = np.random.default_rng(3).integers(0, 30, size=(500, 30))
    means = values[idx].mean(axis=1)  # [iters, k]
    lo, hi = np.quantile(means, [0.05, 0.95], axis=0)
    assert np.allclose(cv["ci_low"], lo, atol=1e-12) and np.allclose(cv["ci_high"], hi, atol=1e-12)
    assert min(np.subtract(cv["ci_high"], cv["ci_low"])[:4]) > 0.05  # tasks differ: the band has a width


def test_a_paired_comparison_resamples_each_arms_seeds_and_reports_the_point_difference():
    """An arm whose two seeds sit 0.6 apart (on every task alike) against a one-seed arm: the tasks add no spread, so
    the interval's width comes from resampling that arm's seeds, on whichever side it stands. `diff` is the
    difference of the two arms' means (not the replicates' average); `p_better` the share of replicates in which the
    first arm is strictly better: 0 for two identical arms."""
    t = 50
    noisy, flat = np.stack([np.full(t, 0.2), np.full(t, 0.8)]), np.full((1, t), 0.5)
    for a, b in ((noisy, flat), (flat, noisy)):
        d = study.paired_two_level(a, b, iters=400, seed=0)
        assert (
            d["diff"] == pytest.approx(0.0, abs=1e-12)
            and d["ci_low"] == pytest.approx(-0.3)
            and d["ci_high"] == pytest.approx(0.3)
        )
    a = np.random.default_rng(1).uniform(0, 1, size=(3, t))
    b = np.random.default_rng(2).uniform(0, 1, size=(2, t))
    assert study.paired_two_level(a, b, iters=50)["diff"] == pytest.approx(a.mean() - b.mean(), abs=1e-15)
    same = study.paired_two_level(flat, flat, iters=50)
    assert same["p_better"] == 0.0


def test_study_rates_are_each_seeds_pass_at_k_on_the_given_tasks():
    summaries = [
        {"per_task": [{"task_id": "a", "n": 4, "c": 2}, {"task_id": "b", "n": 4, "c": 0}]},
        {"per_task": [{"task_id": "b", "n": 4, "c": 4}, {"task_id": "a", "n": 4, "c": 1}]},
    ]
    assert study_report._rates(summaries, ["a", "b"]).tolist() == [[0.5, 0.0], [0.25, 1.0]]
    # pass@2 from 4 samples: 1 - C(4-c, 2) / C(4, 2); c = 2 gives 1 - 1/6, c = 1 gives 1 - 3/6
    assert study_report._rates(summaries, ["a"], k=2)[:, 0].tolist() == pytest.approx([5 / 6, 0.5])


# ---------------------------------------------------------------------------------------------------------------
# pass@k curves


def test_pass_at_k_curve_equals_the_unbiased_estimator_at_every_k():
    rng = np.random.default_rng(0)
    n = np.array([64] * 40 + [70, 65])
    c = np.concatenate([[0, 64, 1, 63], rng.integers(0, 65, size=36), [3, 65]])
    m = passk.pass_at_k_matrix(n, c)
    assert m.shape == (42, 64)
    for i in range(len(n)):
        for k in range(1, 65):
            assert m[i, k - 1] == pytest.approx(pass_at_k(int(n[i]), int(c[i]), k), abs=1e-12)
    per_task = [{"n": int(a), "c": int(b)} for a, b in zip(n, c, strict=True)]
    cv = passk.curve(per_task, iters=300, seed=0)
    assert cv["k"] == list(range(1, 65)) and cv["tasks"] == 42
    for k in cv["k"]:
        want = np.mean([pass_at_k(r["n"], r["c"], k) for r in per_task])
        assert cv["pass@k"][k - 1] == pytest.approx(want, abs=1e-12)
        assert cv["ci_low"][k - 1] <= cv["pass@k"][k - 1] <= cv["ci_high"][k - 1]
    assert all(np.diff(cv["pass@k"]) >= 0)  # pass@k never falls with k
    with pytest.raises(ValueError, match="pass@65 needs at least 65"):
        passk.pass_at_k_matrix(n, c, 65)


def test_evaluator_summary_carries_the_curve(monkeypatch):
    """score_completions adds pass@k for k = 1..n with intervals (the sandbox replaced by a fixed verdict list)."""
    from types import SimpleNamespace

    from codelib import sandbox
    from codelib.evaluation.evaluator import score_completions
    from codelib.tasks import load_tasks

    tasks = load_tasks("synthetic", "test", limit=3)
    passed = iter([True] * 5 + [False] * 3 + [True] * 1 + [False] * 7 + [False] * 8)

    def fake(tasks, codes, **kw):
        return [SimpleNamespace(passed=next(passed), status="x", detail="") for _ in codes]

    monkeypatch.setattr(sandbox, "check", fake)
    out = score_completions(tasks, [["a"] * 8, ["b"] * 8, ["c"] * 8], ks=[1, 8], bootstrap_iters=50)
    cv = out["pass@k_curve"]
    assert cv["k"] == list(range(1, 9))
    assert cv["pass@k"][0] == pytest.approx(out["pass@1"]) and cv["pass@k"][7] == pytest.approx(out["pass@8"])


# ---------------------------------------------------------------------------------------------------------------
# study files, strictly

GOOD = {
    "profile": "smoke",
    "seeds": [0, 1],
    "arms": {
        "rf": {"stage": "02_reinforce", "params": {"steps": 1}, "sweep": {"learning_rate": [0.01, 0.03]}},
        "ppo": {"stage": "03_ppo"},
    },
    "references": {"sft": "checkpoints/smoke/sft"},
    "baseline": "sft",
    "eval": {"limit": 4, "n_samples": 2, "ks": [1, 2]},
}

TWO_ARMS = {  # two arms from the tiny base, no references: the runner's tests
    **GOOD,
    "references": {},
    "baseline": "",
    "arms": {
        "a": {"stage": "02_reinforce", "params": {"init": "tiny"}},
        "b": {"stage": "03_ppo", "params": {"init": "tiny"}},
    },
}


def write_study(tmp_path: Path, data: dict, name: str = "s") -> Path:
    p = tmp_path / f"{name}.yaml"
    p.write_text(yaml.safe_dump(data, sort_keys=False))
    return p


def test_study_file_expands_arms_and_seeds(tmp_path):
    s = study.load_study(write_study(tmp_path, GOOD))
    assert list(s.arms) == ["rf-learning_rate=0.01", "rf-learning_rate=0.03", "ppo"]
    # seed-major: a killed study already has every arm at the first seed
    assert [r.name for r in s.runs] == [
        "rf-learning_rate=0.01-seed0",
        "rf-learning_rate=0.03-seed0",
        "ppo-seed0",
        "rf-learning_rate=0.01-seed1",
        "rf-learning_rate=0.03-seed1",
        "ppo-seed1",
    ]
    run = s.runs[1]
    assert run.params["learning_rate"] == 0.03 and run.params["steps"] == 1 and run.params["seed"] == 0
    assert run.params["stage"] == "studies/s/rf-learning_rate=0.03-seed0" and run.params["profile"] == "smoke"
    cfg = s.eval_config()
    assert list(cfg.checkpoints)[:2] == ["sft", "rf-learning_rate=0.01-seed0"] and cfg.limit == 4


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"sedes": [0]}, r"unknown key 'sedes'.*Valid keys: description"),
        ({"seeds": []}, r"seeds must be a non-empty list of integers"),
        ({"profile": "nope"}, r"profile 'nope' has no params/ directory; known profiles"),
        ({"arms": {"x": {"stage": "06_eval"}}}, r"arm 'x': unknown stage '06_eval'; an arm trains one of: 01_sft"),
        (
            {"arms": {"x": {"stage": "02_reinforce", "params": {"learnig_rate": 0.1}}}},
            r"02_reinforce's codelib.trainers.reinforce.Config has no parameter 'learnig_rate' "
            r"\(did you mean learning_rate\?\)",
        ),
        ({"arms": {"x": {"stage": "02_reinforce", "params": {"seed": 3}}}}, r"'seed' comes from the study's `seeds`"),
        ({"arms": {"x": {"stage": "02_reinforce", "params": {"steps": "many"}}}}, r"parameter 'steps' should be int"),
        (
            {"arms": {"x": {"stage": "02_reinforce", "sweep": {"learning_rate": 0.1}}}},
            r"'learning_rate' needs a non-empty list",
        ),
        ({"arms": {"x": {"stage": "02_reinforce", "stages": 1}}}, r"arm 'x': unknown key 'stages'"),
        ({"eval": {"checkpoints": {}}}, r"eval sets 'checkpoints', which the study sets itself"),
        ({"eval": {"n_sample": 3}}, r"EvalConfig has no parameter 'n_sample'"),
        ({"eval": {"ks": [1, 8]}}, r"pass@8 needs at least 8 samples"),
        ({"baseline": "grpo"}, r"baseline 'grpo' is neither an arm"),
        ({"pairs": [["rf", "sft", "x"]]}, r"pairs is a list of two-name lists, e.g. pairs: \[\[grpo, grpo_trl\]\]"),
        ({"pairs": [["rf", "grpo"]]}, r"pairs: \[rf, grpo\] must name two different arms or references"),
        ({"stage_params": {"04_grpo": {"steps": 1}}}, r"stage_params sets '04_grpo', which no arm trains"),
        ({"stage_params": {"03_ppo": 1}}, r"stage_params maps a stage to the params its arms start from"),
        ({"stage_params": {"03_ppo": {"stepz": 1}}}, r"stage_params 03_ppo: 03_ppo's .* has no parameter 'stepz'"),
        ({"stage_params": {"03_ppo": {"seed": 1}}}, r"stage_params 03_ppo: 'seed' comes from the study's `seeds`"),
    ],
)
def test_bad_study_files_fail_naming_the_fix(tmp_path, edit, message):
    with pytest.raises(study.StudyError, match=message):
        study.load_study(write_study(tmp_path, {**GOOD, **edit}))


def test_stage_params_start_every_arm_of_their_stage_and_an_arm_overrides_them(tmp_path):
    shared = {"02_reinforce": {"steps": 2, "learning_rate": 0.5, "batch_size": 3}, "03_ppo": {"steps": 4}}
    s = study.load_study(write_study(tmp_path, {**GOOD, "stage_params": shared}))
    plain = study.load_study(write_study(tmp_path, GOOD, name="plain"))
    by = {r.name: r.params for r in s.runs}
    # the arm's params (steps: 1) and its sweep (learning_rate) win; what neither sets comes from stage_params
    rf = by["rf-learning_rate=0.03-seed0"]
    assert (rf["steps"], rf["learning_rate"], rf["batch_size"]) == (1, 0.03, 3)
    assert by["ppo-seed1"]["steps"] == 4 and by["ppo-seed1"]["seed"] == 1
    # the arm's overrides (the summary's arm column) name what the arm ran, stage_params included
    assert s.arms["ppo"]["overrides"] == {"steps": 4} and plain.arms["ppo"]["overrides"] == {}
    assert s.arms["rf-learning_rate=0.03"]["overrides"] == {
        **shared["02_reinforce"],
        "steps": 1,
        "learning_rate": 0.03,
    }
    # the same runs written out arm by arm: every run's params are equal
    spelled = {**GOOD, "arms": {**GOOD["arms"], "ppo": {"stage": "03_ppo", "params": {"steps": 4}}}}
    spelled["arms"]["rf"] = {**spelled["arms"]["rf"], "params": {"steps": 1, "batch_size": 3}}
    other = study.load_study(write_study(tmp_path, spelled, name="s2"))
    strip = lambda p: {k: v for k, v in p.items() if k != "stage"}  # noqa: E731 (the run directory differs)
    assert [strip(r.params) for r in other.runs] == [strip(r.params) for r in s.runs]


def test_shipped_study_files_are_valid():
    s = study.load_study("params/tiny/studies/algorithms.yaml")
    stages = {name: a["stage"] for name, a in s.arms.items()}
    assert stages == {
        "reinforce": "02_reinforce",
        "rloo": "02_reinforce",
        "ppo": "03_ppo",
        "grpo": "04_grpo",
        "grpo_trl": "04_grpo",
        "dapo": "04_grpo",
        "dpo": "05_dpo",
        "rpo": "05_dpo",
    }
    assert s.seeds == [0, 1, 2] and len(s.runs) == 24
    alg = {r.arm: r.params for r in s.runs if r.seed == 0}
    # the shipped GRPO stage: four updates per rollout at a quarter of 1e-3; DAPO is it plus DAPO's parts, and the
    # algorithm study's two arms are four_updates_lr's grpo_x4_lr4 and dapo_lr4 with the engine's speed options on
    # (the stage's default since; four_updates_lr pins them off, as its runs trained); grpo_options' grpo_fast is
    # the algorithm study's grpo (the same params: its runs are copied), its grpo the stage without the options
    assert (alg["grpo"]["steps_per_generation"], alg["grpo"]["learning_rate"]) == (4, 0.00025)
    speed = {"old_logprobs": "sampler", "minibatch_order": "groups", "shared_prefix": True}
    assert {k: alg["grpo"][k] for k in speed} == speed and {k: alg["dapo"][k] for k in speed} == speed
    lr4 = {r.arm: r.params for r in study.load_study("params/tiny/studies/four_updates_lr.yaml").runs if r.seed == 0}
    for arm, other in (("grpo", "grpo_x4_lr4"), ("dapo", "dapo_lr4")):
        assert alg[arm] == {**lr4[other], **speed, "stage": alg[arm]["stage"]}, arm
    opts = {r.arm: r.params for r in study.load_study("params/tiny/studies/grpo_options.yaml").runs if r.seed == 0}
    assert opts["grpo_fast"] == {**alg["grpo"], "stage": opts["grpo_fast"]["stage"]}
    assert opts["grpo"] == {**lr4["grpo_x4_lr4"], "stage": opts["grpo"]["stage"]}
    # TRL's arm runs without them (TRL refuses two), and is otherwise the engine's GRPO
    assert {k: alg["grpo_trl"][k] for k in speed} == {
        "old_logprobs": "recompute",
        "minibatch_order": "rows",
        "shared_prefix": False,
    }
    assert {k for k in alg["grpo"] if alg["grpo"][k] != alg["grpo_trl"][k]} == {"stage", "backend", *speed}
    # DAPO's parts, a study of their own, at 1e-3: its grpo is GRPO's one update per rollout (the setting the
    # backends, grpo_samples and grpo_budget studies pin too), its dapo and grpo_x4 four_updates_lr's DAPO and GRPO
    # (the algorithm study's without the speed options) at four times their learning rate
    parts = study.load_study("params/tiny/studies/dapo_parts.yaml")
    assert parts.seeds == s.seeds and len(parts.runs) == 15
    seed0 = {r.arm: r.params for r in parts.runs if r.seed == 0}
    assert (seed0["grpo"]["steps_per_generation"], seed0["grpo"]["learning_rate"]) == (1, 0.001)

    def differ(a: str, b: str, runs: dict = seed0, other: dict | None = None) -> set[str]:
        """Where two arms' params differ ("stage": the run dir); `other`: b's runs, if not `runs`."""
        theirs = (other or runs)[b]
        return {k for k in runs[a] if runs[a][k] != theirs[k]}

    def lr_only(a: str, b: str, factor: float, runs: dict, other: dict | None = None) -> None:
        """Arm a is arm b at `factor` x its learning rate."""
        assert differ(a, b, runs, other) == {"stage", "learning_rate"}
        assert runs[a]["learning_rate"] == factor * (other or runs)[b]["learning_rate"]

    lr_only("dapo", "dapo_lr4", 4, seed0, lr4)
    lr_only("grpo_x4", "grpo_x4_lr4", 4, seed0, lr4)
    assert differ("grpo_x4", "grpo") == {"stage", "steps_per_generation", "shared_prefix"}
    x4, dapo = seed0["grpo_x4"], seed0["dapo"]  # DAPO's updates per rollout, none of its other parts
    assert x4["steps_per_generation"] == dapo["steps_per_generation"] == 4
    assert not x4["dynamic_sampling"] and not x4["clip_eps_high"] and not x4["mask_truncated_completions"]
    assert differ("grpo_x4", "dapo") == {"stage", "clip_eps_high", "dynamic_sampling", "mask_truncated_completions"}
    # DAPO less its accuracy filter, and only that; GRPO plus the filter, and only that
    assert differ("dapo_no_ds", "dapo") == {"stage", "dynamic_sampling"} and dapo["dynamic_sampling"]
    assert differ("grpo_ds", "grpo") == {"stage", "dynamic_sampling"}
    dpo = [r for r in s.runs if r.arm == "dpo"]
    assert [(r.params["seed"], r.params["gen_seed"]) for r in dpo] == [(0, 0), (1, 1), (2, 2)]
    assert {r.params["backend"] for r in s.runs if r.arm.startswith("grpo")} == {"own", "trl"}
    backends = study.load_study("params/tiny/studies/backends.yaml")
    b = {r.arm: r.params for r in backends.runs if r.seed == 0}
    assert [(a, p["backend"]) for a, p in b.items()] == [("grpo", "own"), ("grpo_epoch", "own"), ("grpo_trl", "trl")]
    # GRPO's one update per rollout on both backends, and the epoch arm differs from the engine's in its order only
    assert b["grpo"] == {**seed0["grpo"], "stage": b["grpo"]["stage"]}
    assert differ("grpo_trl", "grpo", b) == {"stage", "backend"}
    assert differ("grpo_epoch", "grpo", b) == {"stage", "task_order"} and b["grpo_epoch"]["task_order"] == "epoch"
    # the filter against the rollouts it spends: plain GRPO with twice the tasks per step, nothing else changed
    samples = study.load_study("params/tiny/studies/grpo_samples.yaml")
    s0 = {r.arm: r.params for r in samples.runs if r.seed == 0}
    assert s0["grpo"] == {**seed0["grpo"], "stage": s0["grpo"]["stage"]}
    assert differ("grpo_ds", "grpo", s0) == {"stage", "dynamic_sampling"}
    assert differ("grpo_p64", "grpo", s0) == {"stage", "prompts_per_step"}
    assert s0["grpo_p64"]["prompts_per_step"] == 2 * s0["grpo"]["prompts_per_step"] and len(samples.runs) == 9
    # twice the tasks in half the steps (GRPO's rollouts), and twice the steps on GRPO's batch (grpo_p64's rollouts)
    budget = study.load_study("params/tiny/studies/grpo_budget.yaml")
    b0 = {r.arm: r.params for r in budget.runs if r.seed == 0}
    assert b0["grpo"] == {**s0["grpo"], "stage": b0["grpo"]["stage"]}
    assert differ("grpo_p64_s125", "grpo", b0) == {"stage", "prompts_per_step", "steps"}

    def rollouts(p: dict) -> int:  # completions sampled over the whole run
        return p["prompts_per_step"] * p["num_generations"] * p["steps"]

    assert rollouts(b0["grpo_p64_s125"]) == rollouts(b0["grpo"]) and b0["grpo_p64_s125"]["prompts_per_step"] == 64
    assert differ("grpo_s500", "grpo", b0) == {"stage", "steps"}
    assert rollouts(b0["grpo_s500"]) == 2 * rollouts(b0["grpo"])
    assert rollouts(b0["grpo_s500"]) == rollouts(s0["grpo_p64"])
    lr_only("grpo_lr2x", "grpo", 2, b0)
    lr_only("grpo_lr_half", "grpo", 0.5, b0)
    # at that learning rate: centred in the group, not scaled by its std (the engine's dr_grpo estimator)
    assert differ("grpo_unscaled_lr_half", "grpo_lr_half", b0) == {"stage", "scale_rewards"}
    assert b0["grpo_unscaled_lr_half"]["scale_rewards"] == "none" and b0["grpo_lr_half"]["scale_rewards"] == "group"
    assert len(budget.runs) == 24
    from codelib.plumbing.params import build_config
    from codelib.runner.pipeline import config_class
    from codelib.trainers.grpo import engine_config

    def built(s: study.Study, arm: str):  # the Config the run's own stage builds from its params (seed 0)
        run = next(r for r in s.runs if r.arm == arm and r.seed == 0)
        return build_config(config_class(run.stage), dict(run.params))

    assert engine_config(built(budget, "grpo_unscaled_lr_half")).advantage == "dr_grpo"
    # GRPO with the raw reward as its advantage (REINFORCE's, no baseline): the engine gets GRPO's settings but for
    # the advantage; the loss differs in name (clip at one update per rollout has pg's gradient), the old log-probs'
    # source and the std floor are unused by pg on raw rewards, and minibatch 0 is the whole batch of 32 x 4
    raw = dataclasses.asdict(built(budget, "grpo_raw"))
    ref = dataclasses.asdict(engine_config(built(budget, "grpo")))
    moved = {"stage", "algorithm", "advantage", "policy_loss", "old_from_first_pass", "adv_eps", "minibatch_size"}
    assert {k for k in raw if raw[k] != ref[k]} == moved
    assert raw["advantage"] == "reinforce" and ref["advantage"] == "grpo"
    assert raw["policy_loss"] == "pg" and ref["policy_loss"] == "clip"
    assert raw["minibatch_size"] == 0 and ref["minibatch_size"] == 32 * 4 and raw["baseline"] == "none"
    # the raw advantage at half the learning rate, and nothing else changed
    lr_only("grpo_raw_lr_half", "grpo_raw", 0.5, b0)
    # RLOO's batch apart from its baseline: REINFORCE (no baseline) on RLOO's 16 x 8, and RLOO differing from it in
    # the baseline only; `reinforce` and `rloo` as in the algorithm study
    shape = study.load_study("params/tiny/studies/reinforce_shape.yaml")
    r0 = {r.arm: r.params for r in shape.runs if r.seed == 0}
    for arm in ("reinforce", "rloo"):
        assert r0[arm] == {**alg[arm], "stage": r0[arm]["stage"]}, arm
    assert differ("reinforce_p16_g8", "reinforce", r0) == {"stage", "batch_size", "samples_per_task"}
    assert differ("rloo", "reinforce_p16_g8", r0) == {"stage", "baseline"} and r0["reinforce"]["baseline"] == "none"
    assert r0["reinforce_p16_g8"]["batch_size"] * r0["reinforce_p16_g8"]["samples_per_task"] == 128
    assert r0["reinforce"]["batch_size"] * r0["reinforce"]["samples_per_task"] == 128 and len(shape.runs) == 15
    lr_only("reinforce_lr_half", "reinforce", 0.5, r0)
    assert differ("reinforce_ma", "reinforce", r0) == {"stage", "baseline"}
    assert r0["reinforce_ma"]["baseline"] == "moving_average"
    # PPO's critic apart from its baseline: `ppo` as in the algorithm study; `ppo_batch` differs from it in the critic
    # only (the batch-normalised reward in place of the value head's r - V); `ppo_raw` is the engine `ppo_batch` runs
    # but for the advantage (the raw reward), built through its own stage (02_reinforce)
    ppo_shape = study.load_study("params/tiny/studies/ppo_shape.yaml")
    p0 = {r.arm: r.params for r in ppo_shape.runs if r.seed == 0}
    assert p0["ppo"] == {**alg["ppo"], "stage": p0["ppo"]["stage"]} and len(ppo_shape.runs) == 9
    ppo, ppo_batch, ppo_raw = (dataclasses.asdict(built(ppo_shape, a)) for a in ("ppo", "ppo_batch", "ppo_raw"))
    assert {k for k in ppo if ppo[k] != ppo_batch[k]} == {"stage", "algorithm", "critic", "advantage"}
    assert (ppo["critic"], ppo["advantage"]) == ("value_head", "gae")
    assert (ppo_batch["critic"], ppo_batch["advantage"]) == ("none", "batch")
    assert set(ppo_raw) == set(ppo_batch)
    assert {k for k in ppo_raw if ppo_raw[k] != ppo_batch[k]} == {"stage", "algorithm", "advantage"}
    assert ppo_raw["advantage"] == "reinforce" and ppo_raw["baseline"] == "none" and ppo_raw["ppo_epochs"] == 2
    assert len(study.load_study("params/smoke/studies/smoke.yaml").runs) == 4
    from codelib.evaluation.evaluator import EvalConfig
    from codelib.plumbing.params import load_config

    assert load_config(EvalConfig, "params/tiny/variants/06_eval_passk.yaml").n_samples >= 64


def test_a_run_depends_on_the_source_its_trainer_imports():
    mods = study.stage_sources("02_reinforce")
    for m in (
        "codelib.runner.launch",
        "codelib.trainers.reinforce",
        "codelib.trainers.common",
        "codelib.engine.rewards",
        "codelib.plumbing.params",
        "codelib.sandbox.pool",
        "codelib.sandbox.judge",
        "codelib.sandbox.worker",
    ):
        assert m in mods, m
    # the evaluator's scoring is part of a run (eval during training, `keep: best`); other trainers and the study's
    # own code do not retrain a study when they change
    assert "codelib.evaluation.evaluator" in mods
    assert not {
        "codelib.trainers.ppo",
        "codelib.runner.study",
        "codelib.runner.study_report",
        "codelib.reports.comparison",
        "codelib.runner.compare",
    } & set(mods)
    assert "codelib.engine.candidates" in study.stage_sources("05_dpo")


# ---------------------------------------------------------------------------------------------------------------
# resume after a kill (the notebooks replaced by a recorder: this tests the bookkeeping, the smoke test the rest)


class Killed(BaseException):
    """What a SIGINT / SIGKILL of the study process looks like from inside: the run never returns."""


def recorder(calls: list, kill_at: int | None = None):
    def execute(stage, params, notebook, out_nb):
        calls.append(params["stage"].rsplit("/", 1)[-1])
        run = checkpoints_root() / params["profile"] / params["stage"]
        run.mkdir(parents=True, exist_ok=True)
        (run / "progress").write_text(str(len(calls)))
        if kill_at is not None and len(calls) == kill_at:
            raise Killed
        out_nb.parent.mkdir(parents=True, exist_ok=True)
        out_nb.write_text("{}")

    return execute


def test_a_run_the_pipeline_trained_is_copied_into_a_study(tmp_path, monkeypatch):
    """`make demo` then `make study`: the pipeline's stamp of a training stage records what it trained (the study's
    `train` key), so the study's seed-0 run of the same params, notebook, code and start is copied, not trained."""
    from codelib.runner import pipeline

    monkeypatch.setenv("CODELIB_CHECKPOINTS", str(tmp_path / "checkpoints"))
    monkeypatch.setenv("CODELIB_REPORTS", str(tmp_path / "reports"))
    sft = tmp_path / "checkpoints/smoke/sft"
    sft.mkdir(parents=True)
    (sft / "adapter_model.safetensors").write_text("sft weights")
    monkeypatch.setattr(pipeline, "build_tiny", lambda log=print: 0.0)

    def stage(name, params, notebook, out_nb, kernel=None, log=None):  # what the notebook leaves behind
        if "stage" in params:  # a training stage: its run directory
            run = checkpoints_root() / params["profile"] / params["stage"]
            run.mkdir(parents=True, exist_ok=True)
            (run / "weights").write_text(f"{name} seed {params['seed']}")
        out_nb.parent.mkdir(parents=True, exist_ok=True)
        out_nb.write_text(json.dumps({"ran": name}))

    monkeypatch.setattr(pipeline, "run_stage", stage)
    pipeline.run("smoke", only=["00_tasks", "02_reinforce"], reports=tmp_path / "reports/smoke", log=lambda *_: None)
    stamps = tmp_path / "checkpoints/smoke/.stamps"
    assert "train" not in json.loads((stamps / "00_tasks.json").read_text())  # trains nothing: no donor
    stamp = json.loads((stamps / "02_reinforce.json").read_text())
    assert stamp["dir"] == "reinforce" and len(stamp["train"]) == 16

    go = dict(evaluate=False, summarise=False)
    data = {**TWO_ARMS, "arms": {"rf": {"stage": "02_reinforce"}, "rf_lr": {"stage": "02_reinforce", "params": {}}}}
    data["arms"]["rf_lr"]["params"]["learning_rate"] = 0.5
    calls, said = [], []
    rows = study.run_study(write_study(tmp_path, data, "s"), execute=recorder(calls), log=said.append, **go)
    assert calls == ["rf_lr-seed0", "rf-seed1", "rf_lr-seed1"]  # only seed 0 of the pipeline's own params
    assert dict((n, st) for n, st, _ in rows)["rf-seed0"] == "reused"
    assert any("rf-seed0: trained already as the pipeline's reinforce; copied" in line for line in said)
    got = tmp_path / "checkpoints/smoke/studies/s/rf-seed0"
    assert (got / "weights").read_text() == "02_reinforce seed 0"
    assert (tmp_path / "reports/smoke/studies/s/rf-seed0/02_reinforce.ipynb").read_text() == '{"ran": "02_reinforce"}'
    assert json.loads((got.parent / ".stamps/rf-seed0.json").read_text())["reused_from"] == "pipeline/reinforce"

    # not a donor once the trainer's code or the start checkpoint differs from what the pipeline trained with
    one_seed = {**data, "seeds": [0]}
    real = run_keys.module_sources
    monkeypatch.setattr(run_keys, "module_sources", lambda code: {**real(code), "codelib.engine.rewards": "# edited"})
    calls = []
    study.run_study(write_study(tmp_path, one_seed, "t"), execute=recorder(calls), log=lambda *_: None, **go)
    assert calls == ["rf-seed0", "rf_lr-seed0"]
    monkeypatch.setattr(run_keys, "module_sources", real)
    (sft / "adapter_model.safetensors").write_text("another sft")
    calls = []
    study.run_study(write_study(tmp_path, one_seed, "u"), execute=recorder(calls), log=lambda *_: None, **go)
    assert calls == ["rf-seed0", "rf_lr-seed0"]


def test_a_killed_study_resumes_and_reruns_only_what_changed(tmp_path, monkeypatch):
    monkeypatch.setenv("CODELIB_CHECKPOINTS", str(tmp_path / "checkpoints"))
    monkeypatch.setenv("CODELIB_REPORTS", str(tmp_path / "reports"))
    data = copy.deepcopy(TWO_ARMS)  # a test below edits its arms
    path = write_study(tmp_path, data)
    go = dict(evaluate=False, summarise=False, log=lambda *_: None)

    calls: list[str] = []
    with pytest.raises(Killed):  # killed during the second run, after the first finished
        study.run_study(path, execute=recorder(calls, kill_at=2), **go)
    assert calls == ["a-seed0", "b-seed0"]
    killed = tmp_path / "checkpoints/smoke/studies/s/b-seed0"
    assert killed.is_dir()  # its partial checkpoint is kept: the trainer resumes from it

    calls = []
    said: list[str] = []
    rows = study.run_study(path, execute=recorder(calls), **{**go, "log": said.append})
    assert calls == ["b-seed0", "a-seed1", "b-seed1"]  # the finished first run is not redone
    assert [st for _, st, _ in rows] == ["skipped", "ran", "ran", "ran"]
    assert any("b-seed0: resuming" in line for line in said)

    calls = []
    assert [st for _, st, _ in study.run_study(path, execute=recorder(calls), **go)] == ["skipped"] * 4
    assert calls == []

    # the first arm's params change: its runs (and only they) are trained again, from scratch
    data["arms"]["a"]["params"]["learning_rate"] = 0.123
    path = write_study(tmp_path, data)
    (tmp_path / "checkpoints/smoke/studies/s/a-seed0/stale").write_text("old run")
    calls = []
    study.run_study(path, execute=recorder(calls), **go)
    assert calls == ["a-seed0", "a-seed1"]
    assert not (tmp_path / "checkpoints/smoke/studies/s/a-seed0/stale").exists()

    # the code a run imports changes: every run is trained again
    real = run_keys.module_sources
    monkeypatch.setattr(run_keys, "module_sources", lambda code: {**real(code), "codelib.engine.rewards": "# edited"})
    calls = []
    study.run_study(path, execute=recorder(calls), **go)
    assert calls == ["a-seed0", "b-seed0", "a-seed1", "b-seed1"]

    # a deleted run directory is trained again; --force names a run or an arm
    monkeypatch.setattr(run_keys, "module_sources", real)
    calls = []
    study.run_study(path, execute=recorder(calls), **go)
    import shutil

    shutil.rmtree(tmp_path / "checkpoints/smoke/studies/s/b-seed1")
    calls = []
    study.run_study(path, execute=recorder(calls), force=["a"], **go)
    assert calls == ["a-seed0", "a-seed1", "b-seed1"]
    with pytest.raises(study.StudyError, match="--force 'c' is neither a run nor an arm"):
        study.run_study(path, execute=recorder(calls), force=["c"], **go)


def test_a_run_another_study_finished_is_copied_not_trained(tmp_path, monkeypatch):
    monkeypatch.setenv("CODELIB_CHECKPOINTS", str(tmp_path / "checkpoints"))
    monkeypatch.setenv("CODELIB_REPORTS", str(tmp_path / "reports"))
    go = dict(evaluate=False, summarise=False, log=lambda *_: None)
    ckpts, stamps = tmp_path / "checkpoints/smoke/studies", tmp_path / "checkpoints/smoke/studies/s/.stamps"
    calls: list[str] = []
    study.run_study(write_study(tmp_path, TWO_ARMS, "s"), execute=recorder(calls), **go)
    assert calls == ["a-seed0", "b-seed0", "a-seed1", "b-seed1"]
    old = json.loads((stamps / "a-seed0.json").read_text())
    (stamps / "a-seed0.json").write_text(json.dumps({k: v for k, v in old.items() if k != "train"}))  # pre-`train`

    # t: `a` as in s, `b2` is s's `b` under another name, `c` differs from `b` in one param
    arms = {"a": TWO_ARMS["arms"]["a"], "b2": TWO_ARMS["arms"]["b"]}
    arms["c"] = {"stage": "03_ppo", "params": {"init": "tiny", "learning_rate": 0.5}}
    t = write_study(tmp_path, {**TWO_ARMS, "arms": arms}, "t")
    calls, said = [], []
    rows = dict((n, st) for n, st, _ in study.run_study(t, execute=recorder(calls), **{**go, "log": said.append}))
    assert calls == ["a-seed0", "c-seed0", "c-seed1"]  # a-seed0's stamp predates `train`: not a donor
    assert rows == {"a-seed0": "ran", "a-seed1": "reused", "b2-seed0": "reused", "b2-seed1": "reused"} | {
        "c-seed0": "ran",
        "c-seed1": "ran",
    }
    assert any("b2-seed1: trained already as studies/s/b-seed1; copied" in line for line in said)
    got = ckpts / "t/b2-seed1"
    assert (got / "progress").read_text() == (ckpts / "s/b-seed1/progress").read_text() == "4"
    assert (tmp_path / "reports/smoke/studies/t/b2-seed1/03_ppo.ipynb").read_text() == "{}"
    stamp = json.loads((ckpts / "t/.stamps/b2-seed1.json").read_text())
    assert stamp["status"] == "finished" and stamp["reused_from"] == "s/b-seed1"
    assert study.finished(study.load_study(t), next(r for r in study.load_study(t).runs if r.name == "b2-seed1"))
    calls = []
    assert set(st for _, st, _ in study.run_study(t, execute=recorder(calls), **go)) == {"skipped"} and calls == []

    # skipping s's up-to-date runs writes `train` into the old stamp: from then on a-seed0 is a donor too
    study.run_study(write_study(tmp_path, TWO_ARMS, "s"), execute=recorder(calls), **go)
    assert calls == [] and json.loads((stamps / "a-seed0.json").read_text())["train"]
    u = write_study(tmp_path, {**TWO_ARMS, "arms": {"a": arms["a"]}}, "u")
    assert [st for _, st, _ in study.run_study(u, execute=recorder(calls), **go)] == ["reused", "reused"]
    assert calls == []

    # not reused: --force, --no-reuse, a donor stopped before it finished, a donor whose code changed since
    calls = []
    study.run_study(u, execute=recorder(calls), force=["a-seed0"], **go)
    assert calls == ["a-seed0"]
    v = write_study(tmp_path, {**TWO_ARMS, "arms": {"a": arms["a"]}}, "v")
    calls = []
    study.run_study(v, execute=recorder(calls), reuse=False, **go)
    assert calls == ["a-seed0", "a-seed1"]
    for name in ("s", "t", "u", "v"):  # every donor of a-seed1 but w's own stopped run
        (ckpts / name / ".stamps/a-seed1.json").unlink()
    w = write_study(tmp_path, {**TWO_ARMS, "arms": {"a": arms["a"], "b": TWO_ARMS["arms"]["b"]}}, "w")
    calls = []
    study.run_study(w, execute=recorder(calls), only=["a-seed1"], **go)
    with pytest.raises(Killed):  # retrained and stopped: its notebook is the last run's, its directory partial
        study.run_study(w, execute=recorder(calls, kill_at=2), force=["a-seed1"], only=["a-seed1"], **go)
    assert (tmp_path / "reports/smoke/studies/w/a-seed1/02_reinforce.ipynb").exists()
    x = write_study(tmp_path, {**TWO_ARMS, "arms": {"a": arms["a"]}}, "x")
    calls = []
    assert dict((n, st) for n, st, _ in study.run_study(x, execute=recorder(calls), **go))["a-seed1"] == "ran"
    real = run_keys.module_sources
    monkeypatch.setattr(run_keys, "module_sources", lambda code: {**real(code), "codelib.engine.rewards": "# edited"})
    y = write_study(tmp_path, {**TWO_ARMS, "arms": {"b": TWO_ARMS["arms"]["b"]}}, "y")
    calls = []
    study.run_study(y, execute=recorder(calls), **go)
    assert calls == ["b-seed0", "b-seed1"]


def test_jobs_train_runs_at_once_and_a_failed_run_stops_no_other(tmp_path, monkeypatch):
    import threading

    monkeypatch.setenv("CODELIB_CHECKPOINTS", str(tmp_path / "checkpoints"))
    monkeypatch.setenv("CODELIB_REPORTS", str(tmp_path / "reports"))
    data = {**copy.deepcopy(TWO_ARMS), "jobs": 2}
    path = write_study(tmp_path, data)
    assert study.load_study(path).jobs == 2
    together = threading.Barrier(2, timeout=20)  # broken (an error) unless two runs are inside execute at once
    calls: list[str] = []
    inner = recorder(calls)

    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    policies = []

    def execute(stage, params, notebook, out_nb):
        together.wait()
        policies.append(os.environ.get("OMP_WAIT_POLICY"))  # what a run's kernel inherits
        if params["stage"].endswith("b-seed0"):
            raise ValueError("b-seed0 failed")
        inner(stage, params, notebook, out_nb)

    with pytest.raises(ValueError, match="b-seed0 failed"):
        study.run_study(path, execute=execute, evaluate=False, summarise=False, log=lambda *_: None)
    assert sorted(calls) == ["a-seed0", "a-seed1", "b-seed1"]  # the failure stopped no other run
    # runs at once get torch threads that sleep while they wait (not spin on the cores the other runs need); the
    # study's own process gets its environment back
    assert policies == ["PASSIVE"] * 4 and "OMP_WAIT_POLICY" not in os.environ
    stamps = tmp_path / "checkpoints/smoke/studies/s/.stamps"
    status = {p.stem: json.loads(p.read_text())["status"] for p in stamps.glob("*.json")}
    assert status == {"a-seed0": "finished", "a-seed1": "finished", "b-seed0": "started", "b-seed1": "finished"}
    calls.clear()  # resumed one job at a time: only the failed run trains again, its threads as configured
    seen = []
    one = recorder(calls)

    def execute_one(*args):
        seen.append(os.environ.get("OMP_WAIT_POLICY"))
        one(*args)

    rows = study.run_study(path, execute=execute_one, evaluate=False, summarise=False, log=lambda *_: None, jobs=1)
    assert calls == ["b-seed0"] and sorted(st for _, st, _ in rows) == ["ran", "skipped", "skipped", "skipped"]
    assert seen == [None]
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")  # a policy the user set is theirs
    policies.clear()
    study.run_study(path, execute=execute, evaluate=False, summarise=False, log=lambda *_: None, force=["a"])
    assert policies == ["ACTIVE", "ACTIVE"] and os.environ["OMP_WAIT_POLICY"] == "ACTIVE"
    with pytest.raises(study.StudyError, match="jobs is how many runs train at once"):
        study.load_study(write_study(tmp_path, {**data, "jobs": 0}))


def test_only_trains_the_named_arms_and_the_evaluation_leaves_out_unfinished_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("CODELIB_CHECKPOINTS", str(tmp_path / "checkpoints"))
    monkeypatch.setenv("CODELIB_REPORTS", str(tmp_path / "reports"))
    data = copy.deepcopy(TWO_ARMS)  # a test below edits its arms
    path = write_study(tmp_path, data)
    calls: list[str] = []
    evaluated: list[list[str]] = []
    monkeypatch.setattr(study.evaluator, "evaluate", lambda cfg, **kw: evaluated.append(sorted(cfg.checkpoints)))
    said: list[str] = []
    study.run_study(path, execute=recorder(calls), summarise=False, log=said.append, only=["b-seed1", "a"])
    assert calls == ["b-seed1", "a-seed0", "a-seed1"]  # in the order named
    assert evaluated == [["a-seed0", "a-seed1", "b-seed1"]]  # b-seed0 is not trained: named, not evaluated
    assert any("not trained yet, left out of the evaluation: b-seed0" in line for line in said)
    with pytest.raises(study.StudyError, match="--only 'c' is neither a run nor an arm"):
        study.run_study(path, execute=recorder(calls), only=["c"])


def test_missing_start_checkpoint_is_named_before_anything_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("CODELIB_CHECKPOINTS", str(tmp_path / "checkpoints"))
    calls: list[str] = []
    with pytest.raises(
        study.StudyError, match=r"starts from checkpoints/smoke/sft, which does not exist.*--only 01_sft"
    ):
        study.run_study(write_study(tmp_path, GOOD), execute=recorder(calls), log=lambda *_: None)
    assert calls == []


# ---------------------------------------------------------------------------------------------------------------
# the smoke study, end to end


@pytest.mark.slow
def test_smoke_study_end_to_end(tmp_path, monkeypatch, tiny_sft):
    """2 arms (a sweep of learning_rate) x 2 seeds of REINFORCE through papermill, two kernels at once (`jobs: 2`),
    evaluated, summarised by 08_study."""
    monkeypatch.setenv("CODELIB_CHECKPOINTS", str(tmp_path / "checkpoints"))
    monkeypatch.setenv("CODELIB_REPORTS", str(tmp_path / "reports"))
    data = yaml.safe_load((REPO_ROOT / "params/smoke/studies/smoke.yaml").read_text())
    data["arms"]["reinforce"]["params"]["init"] = str(tiny_sft)
    data["references"] = {"sft": str(tiny_sft)}
    path = write_study(tmp_path, data, name="smoke")
    rows = study.run_study(path)
    assert [st for _, st, _ in rows] == ["ran"] * 4
    out = tmp_path / "reports/smoke/studies/smoke"
    for run, _, _ in rows:
        nb = json.loads((out / run / "02_reinforce.ipynb").read_text())
        assert not [o for c in nb["cells"] for o in c.get("outputs", []) if o.get("output_type") == "error"]
        assert (tmp_path / "checkpoints/smoke/studies/smoke" / run / "adapter_config.json").exists()
        assert (tmp_path / "checkpoints/smoke/studies/smoke/eval" / run / "summary.json").exists()
    nb = json.loads((out / "08_study.ipynb").read_text())
    assert not [o for c in nb["cells"] for o in c.get("outputs", []) if o.get("output_type") == "error"]
    import pandas as pd

    arms = pd.read_csv(out / "summary.csv")
    assert list(arms["arm"]) == ["sft", "reinforce-learning_rate=0.0001", "reinforce-learning_rate=0.0005"]
    assert list(arms["seeds"]) == [1, 2, 2]
    assert ((arms["ci_low"] <= arms["pass@1"]) & (arms["pass@1"] <= arms["ci_high"])).all()
    assert len(pd.read_csv(out / "per_seed.csv")) == 4
    comps = pd.read_csv(out / "comparisons.csv")
    assert [(a, b) for a, b in zip(comps["a"], comps["b"], strict=True)] == [
        ("reinforce-learning_rate=0.0001", "sft"),
        ("reinforce-learning_rate=0.0005", "sft"),
        ("reinforce-learning_rate=0.0001", "reinforce-learning_rate=0.0005"),
    ]
    curves = pd.read_csv(out / "pass_at_k.csv")
    assert sorted(set(curves["k"])) == [1, 2, 3, 4]
    for fig in ("pass_at_1_seeds", "pass_at_k", "comparisons"):
        assert (out / "figures" / f"{fig}.png").stat().st_size > 1000
    assert "two-level bootstrap" in (out / "summary.md").read_text()
    # a second invocation trains nothing and reuses every evaluation
    rows = study.run_study(path, summarise=False)
    assert [st for _, st, _ in rows] == ["skipped"] * 4
    # the same runs on another split: no training, its own evaluations and summary (08_study's code, in this
    # process: the notebook itself ran above), the first one untouched
    first = (out / "summary.md").read_text()
    rows = study.run_study(path, split="fresh", summarise=False)
    assert [st for _, st, _ in rows] == ["skipped"] * 4
    assert (tmp_path / "checkpoints/smoke/studies/smoke/eval_fresh" / rows[0][0] / "summary.json").exists()
    cfg = study.StudyReportConfig(study=str(path), split="fresh", bootstrap_iters=100, curve_iters=20)
    assert study.summarise(cfg).study.summary_dir == out / "fresh"
    assert "(synthetic/fresh)" in (out / "fresh" / "summary.md").read_text()
    assert (out / "summary.md").read_text() == first and "(synthetic/test)" in first


def fake_summaries(s, tasks: int = 60, n: int = 8, seed: int = 0) -> None:
    """Eval summaries for every run and reference of a study: arm i solves more with a per-seed offset."""
    rng = np.random.default_rng(seed)
    p = rng.uniform(0.1, 0.7, size=tasks)
    names = [(ref, 0.0, 0.0) for ref in s.references]
    names += [(r.name, 0.05 * (list(s.arms).index(r.arm) + 1), 0.04 * (r.seed - 1)) for r in s.runs]
    for name, lift, wobble in names:
        c = rng.binomial(n, np.clip(p + lift + wobble, 0, 1))
        per_task = [{"task_id": f"t/{i}", "n": n, "c": int(ci)} for i, ci in enumerate(c)]
        d = s.eval_dir / name
        d.mkdir(parents=True, exist_ok=True)
        mean = float(np.mean(c / n))
        (d / "summary.json").write_text(
            json.dumps(
                {
                    "checkpoint": name,
                    "per_task": per_task,
                    "pass@1": mean,
                    "ci_low": mean - 0.05,
                    "ci_high": mean + 0.05,
                    "avg_tokens": 12.0,
                }
            )
        )


def test_summary_tables_and_figures_from_evaluations(tmp_path, monkeypatch):
    monkeypatch.setenv("CODELIB_CHECKPOINTS", str(tmp_path / "checkpoints"))
    monkeypatch.setenv("CODELIB_REPORTS", str(tmp_path / "reports"))
    cfg = study.StudyReportConfig(study="params/tiny/studies/algorithms.yaml", bootstrap_iters=200, curve_iters=50)
    s = study.load_study(cfg.study)
    with pytest.raises(FileNotFoundError, match="have no evaluation yet"):
        study.summarise(cfg)
    fake_summaries(s)
    out = study.summarise(cfg)
    arm_names = [
        "reinforce",
        "rloo",
        "ppo",
        "grpo",
        "grpo_trl",
        "dapo",
        "dpo",
        "rpo",
    ]
    assert list(out.arms["arm"]) == ["base", "sft", *arm_names]
    assert list(out.arms["seeds"]) == [1, 1] + [3] * len(arm_names)
    arms = out.arms.set_index("arm")
    # the two-level interval contains the tasks-only one's width and more (the seeds disagree by ±4 points)
    assert (arms["ci_high"] - arms["ci_low"])["ppo"] > (arms["task_ci_high"] - arms["task_ci_low"])["ppo"]
    pairs = list(zip(out.comparisons["a"], out.comparisons["b"], strict=True))
    assert pairs[:8] == [(a, "sft") for a in arm_names] and len(pairs) == 8 + 8 * 7 // 2
    assert out.curves["dpo"]["k"] == list(range(1, 9)) and len(out.curves["dpo"]["per_seed"]) == 3
    paths = study.make_figures(out, show=False)
    for p in paths.values():
        assert p.stat().st_size > 5000
    named = [
        ("grpo", "grpo_trl"),
        ("dapo", "grpo"),
        ("grpo", "reinforce"),
        ("rloo", "reinforce"),
        ("ppo", "reinforce"),
        ("rpo", "dpo"),
    ]
    assert s.pairs == named and pairs[8:14] == named  # the study's pairs come next, in its order
    assert list(out.comparisons["shown"]) == [True] * 14 + [False] * (len(pairs) - 14)
    md = (s.reports / "summary.md").read_text()
    row = [line for line in md.splitlines() if line.startswith("| dpo | 05_dpo")]  # the stage and its overrides
    assert len(row) == 1 and "| 3 |" in row[0] and "two-level bootstrap" in md
    shown_rows = [line for line in md.splitlines() if line.count("|") == 5 and line.startswith("| ") and "[" in line]
    assert len(shown_rows) == 1 + 14 and "| rpo | dpo | " in md and "| dpo | rloo |" not in md
    assert f"the other {len(pairs) - 14} pairs are in comparisons.csv" in md
    one_left = out.comparisons.copy()
    one_left["shown"] = [True] * (len(pairs) - 1) + [False]  # one pair hidden: said in the singular
    md_one = study_report.summary_markdown(dataclasses.replace(out, comparisons=one_left), cfg)
    assert "the other pair is in comparisons.csv" in md_one and "other 1 pairs" not in md_one
    import pandas as pd

    assert len(pd.read_csv(s.reports / "comparisons.csv")) == len(pairs)
    assert "Not trained yet" not in md

    # a study with runs left (stopped, or trained with --only) is summarised over what it has, naming the rest
    for name in ["dpo-seed0", "dpo-seed1", "dpo-seed2", "rpo-seed2"]:
        (s.eval_dir / name / "summary.json").unlink()
    part = study.summarise(cfg)
    assert (
        "dpo" not in list(part.arms["arm"])
        and dict(zip(part.arms["arm"], part.arms["seeds"], strict=True))["rpo"] == 2
    )
    assert ("rpo", "sft") in set(zip(part.comparisons["a"], part.comparisons["b"], strict=True))
    md = (s.reports / "summary.md").read_text()
    assert "Not trained yet, so not in the tables: dpo (seed 0, 1, 2); rpo (seed 2)." in md


def test_another_split_has_its_own_evaluations_and_summary(tmp_path, monkeypatch):
    """--split: the study's runs scored on another split of the eval's dataset, written beside (not over) the
    study's own evaluation and summary; a split the dataset lacks is named before anything runs."""
    monkeypatch.setenv("CODELIB_CHECKPOINTS", str(tmp_path / "checkpoints"))
    monkeypatch.setenv("CODELIB_REPORTS", str(tmp_path / "reports"))
    own, fresh = (study.load_study("params/tiny/studies/algorithms.yaml", split) for split in ("", "fresh"))
    assert own.eval_config().split == "test" and fresh.eval_config().split == "fresh"
    assert fresh.eval_dir == own.checkpoints / "eval_fresh" and own.eval_dir == own.checkpoints / "eval"
    assert fresh.summary_dir == own.reports / "fresh" and own.summary_dir == own.reports
    assert [fresh.run_dir(r) for r in fresh.runs] == [own.run_dir(r) for r in own.runs]  # the same trained runs
    fake_summaries(own)
    cfg = study.StudyReportConfig(
        study="params/tiny/studies/algorithms.yaml", split="fresh", bootstrap_iters=50, curve_iters=20
    )
    with pytest.raises(FileNotFoundError, match="have no evaluation yet"):
        study.summarise(cfg)  # the test split's evaluations do not stand in for the fresh ones
    fake_summaries(fresh, seed=1)
    out = study.summarise(cfg)
    assert out.study.summary_dir == fresh.summary_dir and not (own.reports / "summary.md").exists()
    assert "(synthetic/fresh)" in (fresh.summary_dir / "summary.md").read_text()
    # a run trained but not scored on this split is named as such, not as "not trained yet"
    gone = fresh.runs[0]
    (fresh.eval_dir / gone.name / "summary.json").unlink()
    stamp = fresh.checkpoints / ".stamps" / f"{gone.name}.json"
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.write_text(json.dumps({"status": "finished"}))
    fresh.run_dir(gone).mkdir(parents=True)
    study.summarise(cfg)
    md = (fresh.summary_dir / "summary.md").read_text()
    told = f"Trained, not evaluated on this split, so not in the tables: {gone.arm} (seed {gone.seed})."
    assert told in md and "Not trained yet" not in md
    with pytest.raises(study.StudyError, match="'nope' is not a split of synthetic"):
        study.load_study("params/tiny/studies/algorithms.yaml", "nope")


def test_passk_command_writes_curves_table_and_figure(tmp_path, monkeypatch):
    """`python -m codelib.passk` (the evaluation itself replaced: it is the evaluator's, tested elsewhere)."""
    from codelib.evaluation import evaluator
    from codelib.plumbing.params import load_config

    monkeypatch.setenv("CODELIB_CHECKPOINTS", str(tmp_path / "checkpoints"))
    monkeypatch.setenv("CODELIB_REPORTS", str(tmp_path / "reports"))
    cfg = load_config(evaluator.EvalConfig, "params/tiny/variants/06_eval_passk.yaml")
    rng = np.random.default_rng(0)

    def fake_evaluate(cfg, force=False, out_root=None, reports=None):
        for i, name in enumerate(cfg.checkpoints):
            per_task = [
                {"task_id": f"t/{t}", "n": 64, "c": int(c)} for t, c in enumerate(rng.binomial(64, 0.1 * i, 50))
            ]
            (Path(out_root) / name).mkdir(parents=True)
            summary = {"checkpoint": name, "per_task": per_task, "pass@k_curve": passk.curve(per_task, iters=50)}
            (Path(out_root) / name / "summary.json").write_text(json.dumps(summary))

    monkeypatch.setattr(evaluator, "evaluate", fake_evaluate)
    passk.main(["params/tiny/variants/06_eval_passk.yaml"])
    out = tmp_path / "reports/tiny/passk"
    import pandas as pd

    df = pd.read_csv(out / "pass_at_k.csv")
    assert len(df) == 64 * len(cfg.checkpoints) and set(df["checkpoint"]) == set(cfg.checkpoints)
    assert "| sft | " in (out / "pass_at_k.md").read_text() and "pass@64" in (out / "pass_at_k.md").read_text()
    assert (out / "figures/pass_at_k_curve.png").stat().st_size > 5000


def test_plots_pass_at_k_draws_old_and_greedy_summaries():
    """07_plots' pass@k panel reads the curve a summary carries, or computes it from an older summary's counts."""
    from codelib import reports

    old = {"per_task": [{"n": 4, "c": c} for c in (0, 1, 4, 2)]}
    greedy = {"per_task": [{"n": 1, "c": c} for c in (0, 1, 1)]}
    new = {"per_task": old["per_task"], "pass@k_curve": passk.curve(old["per_task"], iters=20)}
    fig = reports.plot_pass_at_k({"old": old, "greedy": greedy, "new": new})
    panels = [ax for ax in fig.axes if ax.axison and ax.get_title()]  # one panel per checkpoint
    assert [ax.get_title() for ax in panels] == ["old", "greedy", "new"]
    lines = [ax.get_lines()[-1] for ax in panels]  # each panel's own curve (the baseline's, dashed, comes first)
    assert [len(ln.get_xdata()) for ln in lines] == [4, 1, 4]
    assert list(lines[0].get_ydata()) == pytest.approx(list(lines[2].get_ydata()))


def test_comparison_keeps_a_finished_run_and_trains_a_stopped_one(tmp_path):
    """make compare's currency: a run whose config.json holds the params file's settings is current once it finished
    (its end marker, or an HF trainer's last checkpoint at max_steps); a run stopped halfway is trained again."""
    import json as _json

    from codelib.plumbing.params import config_to_dict, load_config
    from codelib.plumbing.stages import STAGES
    from codelib.runner.compare import same_config

    params_file = REPO_ROOT / "params/tiny/05_dpo.yaml"
    run = tmp_path / "dpo"
    (run / "checkpoint-120").mkdir(parents=True)
    config = config_to_dict(load_config(STAGES["05_dpo"].config_class(), params_file))
    (run / "config.json").write_text(_json.dumps(config))
    (run / "adapter_model.safetensors").write_bytes(b"")
    state = run / "checkpoint-120" / "trainer_state.json"
    state.write_text(_json.dumps({"global_step": 80, "max_steps": 120}))
    assert not same_config(run, params_file)  # stopped at 80 of 120
    state.write_text(_json.dumps({"global_step": 120, "max_steps": 120}))
    assert same_config(run, params_file)
    (run / "config.json").write_text(_json.dumps({**config, "beta": config["beta"] * 2}))
    assert not same_config(run, params_file)  # other settings
    (run / "config.json").write_text(_json.dumps(config))
    state.unlink()
    assert not same_config(run, params_file)
    (run / "train_summary.json").write_text("{}")
    assert same_config(run, params_file)


def test_make_compare_trains_a_run_whose_params_changed(tmp_path, monkeypatch):
    """A run is current when its done.json holds the digest of its params file as it is now: a changed file trains
    it again; each params file runs its stage's trainer (an eval file is not one)."""
    from codelib.runner import compare as comparison

    monkeypatch.setenv("CODELIB_CHECKPOINTS", str(tmp_path / "ck"))
    params = tmp_path / "02_reinforce.yaml"
    tiny = REPO_ROOT / "params/tiny/02_reinforce.yaml"  # every parameter checks: a run's params file is whole
    params.write_text(f"extends: {tiny}\nprofile: tiny\nstage: rf\nsteps: 3\n")
    spec = tmp_path / "comparison.yaml"
    spec.write_text("eval: 06_eval.yaml\nruns:\n  rf: 02_reinforce.yaml\n")
    assert comparison.train_missing(spec, dry_run=True) == ["rf"]  # no run yet
    (tmp_path / "ck" / "tiny" / "rf").mkdir(parents=True)
    done = {"params": comparison.run_fingerprint(params), "file": "02_reinforce.yaml"}
    (tmp_path / "ck" / "tiny" / "rf" / "done.json").write_text(json.dumps(done))
    assert comparison.train_missing(spec, dry_run=True) == []  # current
    params.write_text(f"extends: {tiny}\nprofile: tiny\nstage: rf\nsteps: 4\n")
    assert comparison.train_missing(spec, dry_run=True) == ["rf"]  # its params changed since
    assert comparison.stage_of(Path("variants/03_ppo_kl_k2.yaml")) == "03_ppo"
    with pytest.raises(ValueError, match="a training stage's number"):
        comparison.stage_of(Path("06_eval.yaml"))


def test_a_run_trained_by_make_compare_or_a_study_is_trained_once(tmp_path, monkeypatch):
    """`make compare` trains each run through its stage's notebook and records its `train` key: a study's run of
    the same params (but its directory), notebook, code and start is copied from it, and the other way round, a
    comparison run a study already trained is copied, not trained again."""
    from codelib.runner import compare as comparison

    monkeypatch.setenv("CODELIB_CHECKPOINTS", str(tmp_path / "checkpoints"))
    monkeypatch.setenv("CODELIB_REPORTS", str(tmp_path / "reports"))
    base = REPO_ROOT / "params/smoke/02_reinforce.yaml"
    (tmp_path / "02_reinforce_lr.yaml").write_text(f"extends: {base}\nstage: rf_lr\ninit: tiny\nlearning_rate: 0.5\n")
    (tmp_path / "02_reinforce_b.yaml").write_text(f"extends: {base}\nstage: rf_b\ninit: tiny\nbatch_size: 4\n")
    spec = tmp_path / "comparison.yaml"
    spec.write_text("eval: 06_eval.yaml\nruns:\n  rf_lr: 02_reinforce_lr.yaml\n")
    ran = []

    def execute(stage, params, notebook, out_nb):  # what a training notebook leaves behind
        ran.append((stage, params["stage"], notebook.name))
        run = checkpoints_root() / params["profile"] / params["stage"]
        run.mkdir(parents=True, exist_ok=True)
        (run / "weights").write_text(f"lr {params['learning_rate']} batch {params['batch_size']}")
        out_nb.parent.mkdir(parents=True, exist_ok=True)
        out_nb.write_text(json.dumps({"ran": params["stage"]}))

    said = []
    assert comparison.train_missing(spec, execute=execute, log=said.append) == ["rf_lr"]
    assert ran == [("02_reinforce", "rf_lr", "02_reinforce.ipynb")]  # the stage's notebook, with the file's values
    done = json.loads((tmp_path / "checkpoints/smoke/rf_lr/done.json").read_text())
    assert done["notebook"] == "comparison/rf_lr.ipynb" and len(done["train"]) == 16
    assert (tmp_path / "reports/smoke/comparison/rf_lr.ipynb").exists()
    assert comparison.train_missing(spec, execute=execute, log=said.append) == [] and len(ran) == 1  # current

    # the study's seed-0 run of the same params is the comparison's run, copied; the other arm trains
    arms = {
        "lr": {"stage": "02_reinforce", "params": {"init": "tiny", "learning_rate": 0.5}},
        "b": {"stage": "02_reinforce", "params": {"init": "tiny", "batch_size": 4}},
    }
    data = {**TWO_ARMS, "seeds": [0], "arms": arms}
    calls, said = [], []
    go = dict(evaluate=False, summarise=False)
    rows = study.run_study(write_study(tmp_path, data, "s"), execute=recorder(calls), log=said.append, **go)
    assert calls == ["b-seed0"] and dict((n, st) for n, st, _ in rows)["lr-seed0"] == "reused"
    assert any("lr-seed0: trained already as the comparison's rf_lr; copied" in line for line in said)
    got = tmp_path / "checkpoints/smoke/studies/s/lr-seed0"
    assert (got / "weights").read_text() == "lr 0.5 batch 16"
    assert json.loads((got.parent / ".stamps/lr-seed0.json").read_text())["reused_from"] == "comparison/rf_lr"
    assert (tmp_path / "reports/smoke/studies/s/lr-seed0/02_reinforce.ipynb").read_text() == '{"ran": "rf_lr"}'

    # a comparison run the study trained first is copied from the study
    spec.write_text("eval: 06_eval.yaml\nruns:\n  rf_lr: 02_reinforce_lr.yaml\n  rf_b: 02_reinforce_b.yaml\n")
    said = []
    assert comparison.train_missing(spec, execute=execute, log=said.append) == ["rf_b"] and len(ran) == 1
    assert any("rf_b: trained already as studies/s/b-seed0; copied" in line for line in said)
    assert (tmp_path / "checkpoints/smoke/rf_b/progress").exists()  # the study's run directory, copied
    done = json.loads((tmp_path / "checkpoints/smoke/rf_b/done.json").read_text())
    assert done["reused_from"] == "s/b-seed0" and done["notebook"] == "comparison/rf_b.ipynb"
    assert comparison.train_missing(spec, execute=execute, log=said.append) == []


def test_a_stopped_or_overwritten_comparison_run_is_no_donor(tmp_path, monkeypatch):
    """A comparison run whose notebook stopped leaves no done.json (the next `make compare` trains it again, its
    trainer resuming); a run directory the pipeline trains again loses the comparison's done.json, and one the
    comparison trains again loses the pipeline's stamp: neither record may offer a study what the directory no
    longer holds. A bad params file fails before any run trains."""
    from codelib.runner import compare, pipeline

    monkeypatch.setenv("CODELIB_CHECKPOINTS", str(tmp_path / "checkpoints"))
    monkeypatch.setenv("CODELIB_REPORTS", str(tmp_path / "reports"))
    base = REPO_ROOT / "params/smoke/02_reinforce.yaml"
    (tmp_path / "02_reinforce_x.yaml").write_text(f"extends: {base}\nstage: reinforce\ninit: tiny\nsteps: 2\n")
    spec = tmp_path / "comparison.yaml"
    spec.write_text("eval: 06_eval.yaml\nruns:\n  x: 02_reinforce_x.yaml\n")
    ck = tmp_path / "checkpoints/smoke"
    (ck / ".stamps").mkdir(parents=True)
    (ck / ".stamps/02_reinforce.json").write_text(json.dumps({"key": "k", "dir": "reinforce", "train": "t"}))

    def stops(stage, params, notebook, out_nb):
        (ck / "reinforce").mkdir(exist_ok=True)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        compare.train_missing(spec, execute=stops, log=lambda *_: None)
    assert not (ck / "reinforce/done.json").exists()
    assert not (ck / ".stamps/02_reinforce.json").exists()  # the pipeline's record of the directory it overwrote
    ran = []
    assert compare.train_missing(spec, execute=lambda *a: ran.append(a), log=lambda *_: None) == ["x"] and ran
    done = json.loads((ck / "reinforce/done.json").read_text())
    assert run_keys.find_donor(ck, tmp_path / "reports/smoke", "02_reinforce", done["train"]) is None  # no notebook
    (tmp_path / "reports/smoke/comparison").mkdir(parents=True)
    (tmp_path / "reports/smoke/comparison/x.ipynb").write_text("{}")
    assert (
        run_keys.find_donor(ck, tmp_path / "reports/smoke", "02_reinforce", done["train"]).name
        == "comparison/reinforce"
    )

    # make demo trains the pipeline's REINFORCE into that directory again: the comparison's record of it is gone
    monkeypatch.setattr(pipeline, "build_tiny", lambda log=print: 0.0)
    monkeypatch.setattr(pipeline, "run_stage", lambda *a, **k: None)
    pipeline.run("smoke", only=["02_reinforce"], reports=tmp_path / "reports/smoke", log=lambda *_: None)
    assert not (ck / "reinforce/done.json").exists()
    assert run_keys.find_donor(ck, tmp_path / "reports/smoke", "02_reinforce", done["train"]) is None

    (tmp_path / "02_reinforce_y.yaml").write_text(f"extends: {base}\nstage: y\nnosuch: 1\n")
    spec.write_text("eval: 06_eval.yaml\nruns:\n  x: 02_reinforce_x.yaml\n  y: 02_reinforce_y.yaml\n")
    ran = []
    with pytest.raises(ParamsError, match="nosuch"):
        compare.train_missing(spec, execute=lambda *a: ran.append(a), log=lambda *_: None)
    assert ran == []  # x, which has no current run, did not train either


def test_the_shipped_comparison_and_demo_runs_are_the_algorithm_studys_seed_0_runs():
    """What `make demo`, `make compare`, `make study` in that order train once: the study's seed-0 runs of these
    arms have the `train` key of the demo's stage or the comparison's variant (params but the directory, notebook,
    code and start all equal). A params change on one side only shows here, not as a study that trains again."""
    from codelib.plumbing.params import load_yaml

    alg = study.load_study("params/tiny/studies/algorithms.yaml")
    seed0 = {r.arm: r for r in alg.runs if r.seed == 0}
    same = {
        "reinforce": "02_reinforce.yaml",
        "ppo": "03_ppo.yaml",
        "grpo": "04_grpo.yaml",
        "rpo": "05_dpo.yaml",
        "rloo": "variants/02_reinforce_rloo.yaml",
        "grpo_trl": "variants/04_grpo_trl.yaml",
        "dapo": "variants/04_grpo_dapo.yaml",
        "dpo": "variants/05_dpo_sigmoid.yaml",
    }
    assert set(same) == set(alg.arms)
    for arm, rel in same.items():
        run = seed0[arm]
        notebook = REPO_ROOT / "notebooks" / f"{run.stage}.ipynb"
        theirs = run_keys.run_key(run.stage, load_yaml(REPO_ROOT / "params/tiny" / rel), notebook)["train"]
        assert study.run_key(run, notebook)["train"] == theirs, arm
    listed = load_yaml(REPO_ROOT / "params/tiny/comparison.yaml")["runs"].values()
    assert {rel for rel in same.values() if rel.startswith("variants/")} <= set(listed)
