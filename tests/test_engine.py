"""The online engine's mechanisms, each pinned by numbers computed by hand, and each shown acting in a real step.

A test here fails when its mechanism is inert: aggregation modes on rows of unequal length, GAE and the value
advantage's sign, GSPO's gradient on an unclipped sequence, the KL estimators' gradients (k1 as a loss term refused),
dual clip and clip-higher (and dual clip leaving positive advantages alone), the clip fractions counting only the side
that binds, the ratio statistics over completion tokens only, value clipping, the batch-std GRPO advantage, KL in the
reward reaching RLOO's and REINFORCE++'s advantages, the logged KL (k3), the overlong penalty's floor, the
zero-variance share, dynamic sampling on accuracy, temperature in the log-probs, and a DAPO step on the tiny model
whose ratio leaves 1 with a clip fraction above 0, and one step with every term on whose wiring is watched from
outside (clip range, KL in the loss, entropy bonus, value loss weight and trunk, truncation mask, temperature).
"""

import dataclasses
import json
import math
import types
from statistics import stdev

import pytest
import torch

from codelib.algorithms import (
    AGGREGATIONS,
    ALGORITHMS,
    AdvantageInput,
    aggregate,
    compute_advantages,
    parts_of,
    policy_loss,
)
from codelib.algorithms import formulas as A
from codelib.algorithms.advantages import gae_raw
from codelib.algorithms.losses import check_kl, kl_estimate
from codelib.engine import rollout
from codelib.engine.rewards import overlong_penalty
from codelib.plumbing.params import load_yaml, read_jsonl
from codelib.policy.logprobs import Batch, kl_to_start
from codelib.tasks import load_tasks
from codelib.trainers import grpo, online, ppo, reinforce
from codelib.trainers.common import OnlineRun

LOSS = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 0.0]])
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])  # 3 tokens and 2 tokens


@pytest.mark.parametrize(
    "mode, expect",
    [
        ("token-mean", (1 + 2 + 3 + 4 + 5) / 5),  # 3.0: every token weighs the same
        ("seq-mean-token-mean", (6 / 3 + 9 / 2) / 2),  # 3.25: every sequence weighs the same
        ("seq-mean-token-sum", (6 + 9) / 2),  # 7.5: longer sequences weigh more
        ("seq-mean-token-sum-norm", 15 / (2 * 4)),  # 1.875: Dr. GRPO, a constant N x max_tokens = 2 x 4
    ],
)
def test_each_aggregation_on_rows_of_unequal_length(mode, expect):
    assert float(aggregate(mode, LOSS, MASK, max_tokens=4)) == pytest.approx(expect)


def test_aggregations_differ_only_when_lengths_differ():
    """token-mean and seq-mean-token-mean agree on rows of equal length; on a 3-token and a 1-token completion
    (padding holds junk) verl's loss_agg_mode gives: token-mean sum / 4, seq-mean-token-mean the mean of each row's
    mean, seq-mean-token-sum the mean of each row's sum, seq-mean-token-sum-norm sum / (N * max_tokens)."""
    equal = torch.ones(2, 3)
    values = {m: float(aggregate(m, LOSS, equal, max_tokens=3)) for m in ("token-mean", "seq-mean-token-mean")}
    assert values["token-mean"] == pytest.approx(values["seq-mean-token-mean"])
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 99.0, 99.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    got = {name: float(aggregate(name, loss, mask, max_tokens=5)) for name in AGGREGATIONS}
    assert got == {
        "token-mean": pytest.approx(10 / 4),
        "seq-mean-token-mean": pytest.approx((6 / 3 + 4 / 1) / 2),
        "seq-mean-token-sum": pytest.approx((6 + 4) / 2),
        "seq-mean-token-sum-norm": pytest.approx(10 / (2 * 5)),
    }
    with pytest.raises(ValueError, match="max_tokens"):
        aggregate("seq-mean-token-sum-norm", loss, mask)
    assert float(A.masked_mean(loss, torch.zeros(2, 3))) == 0.0  # an empty mask gives 0, not NaN


def test_gae_by_hand_and_the_value_advantage_sign():
    """GAE: delta_t = r_t + gamma V_{t+1} - V_t (one terminal reward, V = 0 past the last completion token, whatever
    V holds on padding), A_t = delta_t + gamma lam A_{t+1}; the value targets are A_t + V_t; the advantage is r - V
    in sign (not V - r), after whitening."""
    values, mask, r = torch.tensor([[0.2, 0.5, 0.7]]), torch.ones(1, 3), torch.tensor([1.0])
    adv, ret = gae_raw(r, values, mask, gamma=0.9, lam=0.8)
    # delta_2 = 1 - 0.7 = 0.3; delta_1 = 0.9*0.7 - 0.5 = 0.13; delta_0 = 0.9*0.5 - 0.2 = 0.25; gamma*lam = 0.72
    a2, a1 = 0.3, 0.13 + 0.72 * 0.3
    a0 = 0.25 + 0.72 * a1
    assert adv[0].tolist() == pytest.approx([a0, a1, a2])
    assert ret[0].tolist() == pytest.approx([a0 + 0.2, a1 + 0.5, a2 + 0.7])
    adv, ret = gae_raw(r, values, mask, gamma=1.0, lam=1.0)
    assert adv[0].tolist() == pytest.approx([0.8, 0.5, 0.3]) and ret[0].tolist() == pytest.approx([1.0, 1.0, 1.0])
    # sign: a completion whose reward beats its value gets a positive advantage (r - V, not V - r), after whitening
    x = AdvantageInput(torch.tensor([1.0, 0.0]), mask=torch.ones(2, 3), values=torch.full((2, 3), 0.5))
    a = compute_advantages("gae", x)
    assert (a[0] > 0).all() and (a[1] < 0).all()
    values = torch.tensor([[0.2, 0.4, 0.6, 5.0]])  # the last position is padding
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    g, lam = 0.9, 0.5
    d2, d1, d0 = 1 + g * 0 - 0.6, 0 + g * 0.6 - 0.4, 0 + g * 0.4 - 0.2
    a2 = d2
    a1 = d1 + g * lam * a2
    a0 = d0 + g * lam * a1
    adv, ret = gae_raw(torch.tensor([1.0]), values, mask, g, lam)
    assert adv[0].tolist() == pytest.approx([a0, a1, a2, 0.0])
    assert ret[0].tolist() == pytest.approx([a0 + 0.2, a1 + 0.4, a2 + 0.6, 0.0])
    # the engine's value targets are those returns at the run's own gamma and lam (the first case above)
    cfg = ppo.Config(critic="value_head", gamma=0.9, lam=0.8, batch_size=1, samples_per_task=1)
    values = torch.tensor([[0.2, 0.5, 0.7]])
    old = online.Olds(cfg, _run(), _batch(torch.ones(1, 3)), r, torch.zeros(1, 3), values, None, None)
    a1 = 0.13 + 0.72 * 0.3
    assert old.returns[0].tolist() == pytest.approx([0.25 + 0.72 * a1 + 0.2, a1 + 0.5, 0.3 + 0.7])


def test_gspo_gradient_on_an_unclipped_sequence():
    """GSPO: s_i = exp(mean over the completion's tokens of log rho) (padding excluded, divided by |y_i| not T),
    clipped with the paper's eps 3e-4 / 4e-4 by default; inside the clip every token gets the gradient -A s / |y|."""
    logp_old = torch.tensor([[-1.0, -1.0]])
    logp = torch.tensor([[-0.9, -1.1]], requires_grad=True)  # mean log-ratio 0: s = 1, inside 1 +- 3e-4
    per_token, stats = policy_loss(
        "gspo", logp, logp_old, torch.tensor([1.0]), torch.ones(1, 2), eps_low=3e-4, eps_high=4e-4
    )
    aggregate("seq-mean-token-mean", per_token, torch.ones(1, 2)).backward()
    # loss = -A s, s = exp(mean_t log rho_t): d/d logp_t = -A s / |y| = -0.5 for each token
    assert logp.grad[0].tolist() == pytest.approx([-0.5, -0.5])
    assert stats["ratio_mean"] == pytest.approx(1.0) and stats["clip_frac"] == 0.0
    old = torch.zeros(2, 3, dtype=torch.float64)
    logp = torch.tensor([[0.001, 0.003, 5.0], [-0.002, 7.0, 7.0]], dtype=torch.float64)  # padding holds junk
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]], dtype=torch.float64)
    adv = torch.tensor([1.0, -1.0], dtype=torch.float64)
    s0, s1 = math.exp(0.002), math.exp(-0.002)
    wide, _ = policy_loss("gspo", logp, old, adv, mask, eps_low=0.2, eps_high=0.2)
    assert wide[:, 0].tolist() == pytest.approx([-s0, s1])  # inside the clip: -A s_i
    clipped, _ = policy_loss("gspo", logp, old, adv, mask)
    # A > 0: max(-s0, -(1 + 4e-4)); A < 0: max(s1, 1 - 3e-4)
    assert clipped[:, 0].tolist() == pytest.approx([-(1 + 4e-4), 1 - 3e-4])
    assert float(aggregate("seq-mean-token-mean", clipped, mask)) == pytest.approx((-(1 + 4e-4) + 1 - 3e-4) / 2)


def test_clip_higher_dual_clip_and_where_the_clip_binds():
    mask, old = torch.ones(1, 2), torch.zeros(1, 2)
    logp = torch.log(torch.tensor([[1.25, 0.75]]))
    adv = torch.tensor([[1.0, -1.0]])
    # symmetric 0.2: token 1 min(1.25, 1.2) A = 1.2 (clip binds above), token 2: -min(-0.75, -0.8) = 0.8 (binds below)
    loss, st = policy_loss("clip", logp, old, adv, mask, eps_low=0.2, eps_high=0.2)
    assert loss[0].tolist() == pytest.approx([-1.2, 0.8])
    assert (st["clip_frac_low"], st["clip_frac_high"], st["ratio_max"]) == (0.5, 0.5, pytest.approx(1.25))
    loss, st = policy_loss("clip", logp, old, adv, mask, eps_low=0.2, eps_high=0.28)  # clip-higher: 1.25 < 1.28
    assert loss[0].tolist() == pytest.approx([-1.25, 0.8]) and st["clip_frac_high"] == 0.0
    big = torch.log(torch.tensor([[5.0]]))  # A < 0, ratio 5: PPO's loss 5, dual clip c = 3 bounds it at 3
    assert float(policy_loss("clip", big, torch.zeros(1, 1), torch.tensor([[-1.0]]), torch.ones(1, 1))[0]) == 5.0
    dual = policy_loss("clip", big, torch.zeros(1, 1), torch.tensor([[-1.0]]), torch.ones(1, 1), dual_clip=3.0)[0]
    assert float(dual) == 3.0


def test_cispo_every_token_keeps_a_gradient_and_pg_computes_no_ratio():
    """CISPO: -sg(clip(rho, 1 - eps_low, 1 + eps_high)) A log pi; the default caps the weight at 5 (eps_high 4) and
    leaves it unbounded below (eps_low 1); the gradient is -w A on every token. REINFORCE / RLOO's pg: -A log pi
    per token, with no ratio statistics (absent, not 0)."""
    logp = torch.log(torch.tensor([[2.0, 0.5]])).requires_grad_()
    per_token, st = policy_loss(
        "cispo", logp, torch.zeros(1, 2), torch.tensor([1.0]), torch.ones(1, 2), eps_low=1.0, eps_high=0.5
    )
    per_token.sum().backward()
    assert logp.grad[0].tolist() == pytest.approx([-1.5, -0.5])  # -sg(min(rho, 1.5)) * A: clipped weight, live grad
    assert st["clip_frac_high"] == 0.5
    assert policy_loss("pg", logp, logp.detach(), torch.tensor([1.0]), torch.ones(1, 2))[1] == {}  # absent, not 0
    old = torch.tensor([[-2.0, -1.0]])
    logp = (old + torch.log(torch.tensor([[6.0, 0.01]]))).requires_grad_(True)
    per_token, _ = policy_loss("cispo", logp, old, torch.tensor([1.0]), torch.ones(1, 2))
    w = [5.0, 0.01]
    assert per_token[0].tolist() == pytest.approx([-w[t] * float(logp[0, t]) for t in range(2)], rel=1e-5)
    per_token.sum().backward()
    assert logp.grad[0].tolist() == pytest.approx([-5.0, -0.01], rel=1e-5)
    logp = torch.tensor([[-1.0, -2.0], [-0.5, -3.0]])
    per_token, st = policy_loss("pg", logp, logp, torch.tensor([0.5, -2.0]), torch.ones(2, 2))
    assert per_token.tolist() == [[0.5, 1.0], [-1.0, -6.0]] and st == {}


def test_kl_estimator_gradients_and_k1_in_the_loss_refused():
    """k1 as a loss term has zero expected gradient (refused); folded into the reward it is the unbiased one."""
    ref = torch.tensor([-1.5])
    grads = {}
    for k in ("k1", "k2", "k3"):
        logp = torch.tensor([-1.0], requires_grad=True)
        kl_estimate(logp, ref, k).sum().backward()
        grads[k] = float(logp.grad)
    # log r = ref - logp = -0.5: d k1/d logp = 1; d k2 = logp - ref = 0.5; d k3 = 1 - exp(log r)
    assert grads == pytest.approx({"k1": 1.0, "k2": 0.5, "k3": 1 - math.exp(-0.5)})
    with pytest.raises(ValueError, match="kl_placement: reward"):
        check_kl("k1", "loss", 0.1)
    check_kl("k1", "reward", 0.1)  # the unbiased pairing is available
    with pytest.raises(ValueError, match="kl_placement: reward"):
        online.Config(kl_coef=0.1, kl_estimator="k1", kl_placement="loss")
    with pytest.raises(ValueError, match="zero expected gradient"):
        check_kl("k1", "loss", 0.1)
    check_kl("k3", "loss", 0.1)
    check_kl("k1", "loss", 0.0)  # no KL term at all


def test_dynamic_sampling_drops_all_pass_groups_of_different_lengths(monkeypatch):
    n = 6
    passed = [1.0, 1.0, 0.0, 1.0, 0.0, 0.0]  # G=2: all pass (lengths differ), mixed, all fail
    rewards = [0.99, 0.97, -0.01, 0.98, -0.02, -0.03]  # pass - alpha * length: no two rewards equal
    ro = rollout.Rollouts(
        tasks=["t"] * n,
        prompt_ids=[[1]] * n,
        completion_ids=[[2]] * n,
        texts=[f"a{i}" for i in range(n)],
        passed=torch.tensor(passed),
        test_fraction=torch.tensor(passed),
        lengths=torch.ones(n),
        rewards=torch.tensor(rewards),
        terms={},
        generate_s=1.0,
        sandbox_s=0.5,
    )
    batch, st = rollout.fill_dynamic(ro, lambda r: ro, 2, groups_wanted=1, max_refills=0)
    assert batch.texts == ["a2", "a3"] and st["groups_dropped"] == 2.0  # reward-equality would have dropped none
    # two refills, then short: the kept groups first, topped up with dropped ones; every uniform group seen counts
    batch, st = rollout.fill_dynamic(ro, lambda r: ro, 2, groups_wanted=4, max_refills=1)
    assert batch.texts == ["a2", "a3", "a2", "a3", "a0", "a1", "a4", "a5"]
    assert st == {"groups_dropped": 4.0, "groups_seen": 6.0, "refills": 1.0, "groups_short": 2.0}
    assert (batch.generate_s, batch.sandbox_s) == (2.0, 1.0)  # both rollouts' times
    # a run's refills: each draws other tasks with another seed than the step's batch, as a function of (seed, step,
    # refill) alone, so a resumed run refills as the uninterrupted one did
    calls = []

    def sampled(policy, tokenizer, tasks, n, cfg, seed, reward):
        calls.append((tuple(t.task_id for t in tasks), seed))
        return ro  # one varied group in three: every refill is spent

    monkeypatch.setattr(rollout, "rollout", sampled)
    run = object.__new__(OnlineRun)
    run.cfg = online.Config(algorithm="rloo", batch_size=3, samples_per_task=2, dynamic_sampling=True, max_refills=2)
    run.acc = types.SimpleNamespace(process_index=0, num_processes=1)
    run.tasks, run.policy, run.tokenizer, run.reward = load_tasks("synthetic", "rl")[:64], None, None, None
    run.rollout(5, 2)
    assert len(calls) == 3 and run.sampling_stats["refills"] == 2.0
    assert len({tasks for tasks, _ in calls}) == 3 and len({seed for _, seed in calls}) == 3
    first = list(calls)
    calls.clear()
    run.rollout(5, 2)
    assert calls == first


def _run(nproc=1):
    g = (lambda t: t) if nproc == 1 else (lambda t: torch.cat([t, t]))
    return types.SimpleNamespace(gather=g, acc=types.SimpleNamespace(num_processes=nproc))


def test_value_clip():
    one = torch.ones(1, 1)
    assert float(online.value_loss_of(one, one, one, torch.zeros(1, 1), clip=0.5)) == pytest.approx(0.25)
    assert float(online.value_loss_of(one, one, one, torch.zeros(1, 1), clip=0.0)) == 0.0


def test_clip_frac_counts_only_binding_side():
    """clip_frac_low counts rho < 1 - eps_low with A < 0, clip_frac_high rho > 1 + eps_high (strictly) with A > 0,
    each over the completion tokens; ratio mean / max and approx KL (k3 on the ratio) skip padding."""
    logp = torch.log(torch.tensor([[0.75, 1.25]]))
    adv = torch.tensor([[1.0, -1.0]])
    _, st = policy_loss("clip", logp, torch.zeros(1, 2), adv, torch.ones(1, 2))
    assert st["clip_frac_low"] == 0.0 and st["clip_frac_high"] == 0.0
    rho = [0.5, 0.5, 1.5, 1.5, 1.25]
    logp = torch.log(torch.tensor([rho + [9.0]]))  # the last position is padding
    mask = torch.tensor([[1.0] * 5 + [0.0]])
    adv = torch.tensor([[-1.0, 1.0, 1.0, -1.0, 1.0, 1.0]])
    _, st = policy_loss("clip", logp, torch.zeros(1, 6), adv, mask, eps_low=0.2, eps_high=0.28)
    assert (st["clip_frac_low"], st["clip_frac_high"], st["clip_frac"]) == pytest.approx((0.2, 0.2, 0.4))
    assert (st["ratio_mean"], st["ratio_max"]) == pytest.approx((sum(rho) / 5, 1.5))
    k3 = sum(x - 1 - math.log(x) for x in rho) / 5
    assert st["approx_kl"] == pytest.approx(k3, rel=1e-5)
    assert A.clipped_policy_loss(logp, torch.zeros(1, 6), adv, mask, 0.2, 0.28)[2] == pytest.approx(k3, rel=1e-5)
    # clip-higher: 1.25 is below 1 + 0.28 but above 1 + 0.2
    _, sym = policy_loss("clip", logp, torch.zeros(1, 6), adv, mask, eps_low=0.2, eps_high=0.2)
    assert sym["clip_frac_high"] == pytest.approx(0.4)
    # rho exactly at 1 + eps_high does not count as clipped
    _, edge = policy_loss(
        "clip", torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1, 1), torch.ones(1, 1), eps_high=0.0
    )
    assert edge["clip_frac_high"] == 0.0
    logp = torch.tensor([[math.log(2.0), 0.0]])
    _, st = policy_loss("clip", logp, torch.zeros(1, 2), torch.tensor([1.0]), torch.tensor([[1.0, 0.0]]))
    assert st["ratio_mean"] == pytest.approx(2.0)


def test_ratio_ignores_non_finite_outside_mask():
    """The log-ratio is clamped to +-20 (verl); positions off the mask count as ratio 1, so -inf - -inf there
    (NaN) never reaches the loss."""
    logp = torch.zeros(1, 2, requires_grad=True)
    per, _ = policy_loss(
        "clip", logp, torch.tensor([[0.0, float("nan")]]), torch.tensor([1.0]), torch.tensor([[1.0, 0.0]])
    )
    assert float(aggregate("token-mean", per, torch.tensor([[1.0, 0.0]]))) == -1.0
    ninf = float("-inf")
    logp, old = torch.tensor([[-1.0, ninf]]), torch.tensor([[-1.0, ninf]])
    mask = torch.tensor([[1.0, 0.0]])
    per_token, st = policy_loss("clip", logp, old, torch.tensor([1.0]), mask)
    assert float(aggregate("token-mean", per_token, mask)) == pytest.approx(-1.0) and st["ratio_max"] == 1.0
    per_token, _ = policy_loss(
        "clip", torch.tensor([[30.0]]), torch.zeros(1, 1), torch.tensor([-1.0]), torch.ones(1, 1)
    )
    assert float(per_token) == pytest.approx(math.exp(20), rel=1e-5)  # max(rho * 1, 1.2), rho = e^20 not e^30


def test_dual_clip_leaves_positive_advantages():
    """Dual clip c: for A < 0 the PPO loss is capped at -c A (Ye et al. 2020); A > 0 tokens are left alone."""
    loss, _ = policy_loss(
        "clip", torch.zeros(1, 1), torch.zeros(1, 1), torch.tensor([[1.0]]), torch.ones(1, 1), dual_clip=3.0
    )
    assert float(loss) == -1.0
    logp = torch.log(torch.tensor([[5.0], [0.5], [0.1]]))
    adv, mask = torch.tensor([-1.0, -1.0, 1.0]), torch.ones(3, 1)
    plain, _ = policy_loss("clip", logp, torch.zeros(3, 1), adv, mask, eps_low=0.2, eps_high=0.2)
    assert plain[:, 0].tolist() == pytest.approx([5.0, 0.8, -0.1])  # max(-rho A, -clip(rho) A)
    dual, _ = policy_loss("clip", logp, torch.zeros(3, 1), adv, mask, eps_low=0.2, eps_high=0.2, dual_clip=3.0)
    assert dual[:, 0].tolist() == pytest.approx([3.0, 0.8, -0.1])  # min(., -c A) = min(5, 3) on the first only


def test_grpo_batch_std():
    """TRL's scale_rewards=batch: r - group mean over the unbiased std of every rank's rewards, not the shard's."""
    x = AdvantageInput(torch.tensor([1.0, 0.0, 1.0, 1.0]), group_size=2)
    assert compute_advantages("grpo_batch_std", x).tolist() == pytest.approx([1.0, -1.0, 0.0, 0.0], abs=1e-5)
    x = AdvantageInput(torch.tensor([1.0, 0.0]), group_size=2, batch_rewards=torch.tensor([1.0, 0.0, 0.0, 0.0]))
    assert compute_advantages("grpo_batch_std", x).tolist() == pytest.approx([1.0, -1.0], abs=1e-5)
    r = torch.tensor([1.0, 0.0, 3.0, 1.0])
    whole = [1.0, 0.0, 3.0, 1.0, 0.0, 0.0, 2.0, 2.0]
    centred = [0.5, -0.5, 1.0, -1.0]
    x = AdvantageInput(r, 2, eps=0.0, batch_rewards=torch.tensor(whole))
    assert compute_advantages("grpo_batch_std", x).tolist() == pytest.approx([c / stdev(whole) for c in centred])
    alone = compute_advantages("grpo_batch_std", AdvantageInput(r, 2, eps=0.0))
    assert alone.tolist() == pytest.approx([c / stdev(r.tolist()) for c in centred])


def test_kl_to_start_is_k3():
    """The logged KL is the k3 mean over completion tokens: prompt and padding targets neither add nor count."""
    assert kl_to_start(torch.tensor([[-1.0]]), torch.tensor([[-1.5]]), torch.ones(1, 1)) == pytest.approx(
        math.exp(-0.5) - 0.5
    )
    logp = torch.tensor([[-1.0, -2.0, -3.0], [-1.0, -1.0, 0.0]])
    ref = torch.tensor([[-1.5, -9.0, -2.0], [-1.0, -0.5, 0.0]])
    mask = torch.tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]])
    k3 = [math.exp(r) - 1 - r for r in (-0.5, 1.0, 0.5)]  # r = ref - logp on the three masked tokens
    assert kl_to_start(logp, ref, mask) == pytest.approx(sum(k3) / 3)


def test_overlong_floor():
    """0 up to max_tokens - cache, linear to -1 at max_tokens, -1 past it; a cache of the whole budget is allowed."""
    assert overlong_penalty(max_tokens=4, cache=2)([""] * 5, tokens=[1, 2, 3, 4, 6]) == [0.0, 0.0, -0.5, -1.0, -1.0]
    assert overlong_penalty(max_tokens=4, cache=4)([""] * 3, tokens=[0, 2, 5]) == [0.0, -0.5, -1.0]
    with pytest.raises(ValueError, match="0 < cache <= max_tokens"):
        overlong_penalty(max_tokens=4, cache=5)


def _batch(mask):
    return Batch(
        torch.zeros(mask.shape[0], mask.shape[1] + 1, dtype=torch.long),
        torch.ones(mask.shape[0], mask.shape[1] + 1),
        mask,
    )


def test_kl_in_reward_reaches_advantages():
    cfg = online.Config(algorithm="rloo", samples_per_task=2, kl_coef=0.5, kl_estimator="k1", kl_placement="reward")
    mask = torch.ones(2, 2)
    logp_old = torch.full((2, 2), -1.0)
    ref = torch.tensor([[-1.5, -1.5], [-1.0, -1.0]])
    old = online.Olds(cfg, _run(), _batch(mask), torch.tensor([1.0, 1.0]), logp_old, None, ref, None)
    assert old.rewards.tolist() == pytest.approx([0.5, 1.0]) and old.advantages.tolist() == pytest.approx([-0.5, 0.5])


@pytest.mark.parametrize("nproc", [1, 2])
@pytest.mark.parametrize("baseline", [0.0, 0.5])
def test_reinforce_pp_kl_in_token_rewards(nproc, baseline):
    """k1 KL as token rewards, the sequence's reward at its last token, returns whitened over the batch's tokens;
    REINFORCE++-baseline first takes the group's mean reward (0.5) off; over two ranks the whitening uses the
    gathered statistics of those same returns (each rank holds the same rows here, so the same numbers)."""
    adv = "reinforce_pp_baseline" if baseline else "reinforce_pp"
    cfg = ppo.Config(advantage=adv, kl_coef=0.5, kl_estimator="k1", batch_size=1, samples_per_task=2)
    kl = torch.tensor([[0.1, 0.2, 0.3], [0.4, 0.5, 0.0]])  # on MASK's 3 and 2 tokens
    old = online.Olds(cfg, _run(nproc), _batch(MASK), torch.tensor([1.0, 0.0]), torch.zeros(2, 3), None, -kl, None)
    b = baseline
    row1 = [-0.05 - 0.1 - 0.15 + 1 - b, -0.1 - 0.15 + 1 - b, -0.15 + 1 - b]
    row2 = [-0.2 - 0.25 - b, -0.25 - b]
    flat = row1 + row2
    mean = sum(flat) / 5
    std = math.sqrt(sum((v - mean) ** 2 for v in flat) / 5)
    assert old.advantages[0].tolist() == pytest.approx([(v - mean) / (std + 1e-6) for v in row1], abs=1e-5)
    assert old.advantages[1, :2].tolist() == pytest.approx([(v - mean) / (std + 1e-6) for v in row2], abs=1e-5)


def test_zero_std_frac():
    st = OnlineRun._group_stats(
        types.SimpleNamespace(n_per_task=2, sampling_stats={}, gather=lambda t: t), torch.tensor([1.0, 1.0, 0.0, 1.0])
    )
    assert st == {"zero_std_frac": 0.5}
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0])
    one = types.SimpleNamespace(n_per_task=1, sampling_stats={}, gather=lambda t: t)
    assert OnlineRun._group_stats(one, rewards) == {}  # one sample per task: no groups, so absent (not 0)
    # dynamic sampling: the share of the sampled groups it dropped, and its counts, summed over ranks
    counts = {"groups_dropped": 3.0, "groups_seen": 12.0, "refills": 2.0, "groups_short": 1.0}
    for ranks in (1, 2):
        run = types.SimpleNamespace(n_per_task=2, sampling_stats=counts, gather=lambda t, k=ranks: torch.cat([t] * k))
        assert OnlineRun._group_stats(run, rewards) == {
            "zero_std_frac": 0.5,
            "drop_frac": 0.25,
            "groups_dropped": 3.0 * ranks,
            "refills": 2.0 * ranks,
            "groups_short": 1.0 * ranks,
        }


def test_task_orders_independent_draws_and_epoch_passes():
    tasks = list(range(100))
    # independent: each step alone (what every shipped run used): within a run tasks repeat before all are seen
    ind = [rollout.batch_tasks(tasks, 8, s, seed=3) for s in range(1, 13)]  # 96 draws
    assert ind[4] == rollout.batch_tasks(tasks, 8, 5, seed=3)  # a function of (seed, step): a resume sees the same
    assert all(len(set(b)) == 8 for b in ind) and len({t for b in ind for t in b}) < 96
    # epoch: steps 1-12 are one shuffled pass (12 x 8 = 96 distinct tasks, the last 4 dropped, as TRL's sampler)
    ep = [rollout.batch_tasks(tasks, 8, s, seed=3, order="epoch") for s in range(1, 26)]
    first = [t for b in ep[:12] for t in b]
    assert len(set(first)) == 96 and first != sorted(first)
    second = [t for b in ep[12:24] for t in b]
    assert len(set(second)) == 96 and second != first  # the next pass, shuffled anew
    assert ep[24] == rollout.batch_tasks(tasks, 8, 25, seed=3, order="epoch") != ep[0]  # step 25 opens pass 3
    assert rollout.batch_tasks(tasks[:5], 8, 2, seed=3, order="epoch") != []  # fewer tasks than a batch: all of them
    assert sorted(rollout.batch_tasks(tasks[:5], 8, 2, seed=3, order="epoch")) == tasks[:5]
    assert grpo.engine_config(grpo.Config(task_order="epoch")).task_order == "epoch"
    for bad in (lambda: grpo.Config(task_order="shuffled"), lambda: online.Config(task_order="shuffled")):
        with pytest.raises(ValueError, match="task_order must be one of independent, epoch"):
            bad()


def test_temperature_is_applied_in_the_log_probs(tiny_llama):
    """The padded, packed and shared-prefix forwards all divide the logits by the temperature before the softmax:
    log-probs and entropies of completion targets are those of log_softmax(logits / T) of the plain padded model
    call (the sampler's distribution, as TRL computes them), not of the untempered logits."""
    from codelib.policy.logprobs import make_batch, pack, shared_prefix_logprobs, token_logprobs

    model = tiny_llama
    batch = make_batch([[1, 2, 3], [1, 2, 3]], [[4, 5], [6, 7, 8]], pad_id=0)
    for packed in (False, True):
        with torch.no_grad():
            got = token_logprobs(model, batch, packed=packed, temperature=0.5)
            logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits[:, :-1].float()
            want = torch.log_softmax(logits / 0.5, -1).gather(-1, batch.input_ids[:, 1:, None]).squeeze(-1)
            plain = token_logprobs(model, batch, packed=packed)
        m = batch.completion_mask.bool()
        assert torch.allclose(got[m], want[m], atol=1e-5) and not torch.allclose(got[m], plain[m], atol=1e-3)
    with pytest.raises(ValueError, match="top_p"):
        online.Config(top_p=0.9)
    prompts = [[3, 4, 5, 6], [7, 8], [3, 4, 5, 6], [7, 8]]  # two prompts of unequal length, twice each
    comps = [[9, 10], [11], [14, 19, 20, 21], [15]]
    batch = make_batch(prompts, comps, pad_id=0)
    m = batch.completion_mask.bool()
    with torch.no_grad():
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits[:, :-1].float()
        want = torch.log_softmax(logits / 0.7, -1)
        want_logp = want.gather(-1, batch.input_ids[:, 1:, None]).squeeze(-1)
        want_ent = -(want.exp() * want).sum(-1)
        plain = torch.log_softmax(logits, -1)
        assert not torch.allclose(want_ent[m], -(plain.exp() * plain).sum(-1)[m], atol=1e-3)  # T matters here
        for kw in ({"packed": False}, {"packed": True}, {"shared": True}):
            logp, ex = token_logprobs(model, batch, with_entropy=True, temperature=0.7, **kw)
            assert torch.allclose(logp[m], want_logp[m], atol=1e-5), kw
            assert torch.allclose(ex["entropy"][m], want_ent[m], atol=1e-5), kw
            if kw != {"packed": False}:  # packed rows: targets past a row's last token come back as 0
                assert torch.equal(logp * (1 - batch.attention_mask[:, 1:]), torch.zeros_like(logp)), kw
    assert pack(batch) is not None and shared_prefix_logprobs(model, batch) is not None  # each path did run


def test_registry_rows_resolve_and_presets_name_their_algorithm():
    """Each algorithm's (advantage, policy loss, aggregation) as its paper defines it; the stages' presets name
    their algorithm; a part set by the params file overrides the row's, and an unknown part is refused by name."""
    assert reinforce.Config(baseline="rloo", samples_per_task=2).algorithm == "rloo"
    named = reinforce.Config(algorithm="reinforce_pp_baseline", baseline="rloo", samples_per_task=2)
    assert (named.algorithm, named.advantage) == ("reinforce_pp_baseline", "reinforce_pp_baseline")  # a name wins
    assert ppo.Config(critic="value_head").advantage == "gae"
    assert ppo.Config(advantage="group", samples_per_task=2).advantage == "grpo"  # the group baseline is GRPO's
    # the presets as their modules document them: REINFORCE one sample of 64 tasks, a moving-average baseline, the
    # per-sequence sum; PPO-Clip 4 epochs over 8 tasks, the token mean
    rf, pp = reinforce.Config(), ppo.Config()
    assert (rf.algorithm, rf.baseline, rf.batch_size, rf.samples_per_task) == ("reinforce", "moving_average", 64, 1)
    assert (rf.policy_loss, rf.loss_agg) == ("pg", "seq-mean-token-sum")
    assert (pp.algorithm, pp.advantage, pp.policy_loss) == ("ppo_no_critic", "batch", "clip")
    assert (pp.loss_agg, pp.ppo_epochs, pp.batch_size, pp.samples_per_task) == ("token-mean", 4, 8, 1)
    dapo = grpo.Config(
        clip_eps_high=0.28, dynamic_sampling=True, steps_per_generation=4, prompts_per_step=4, num_generations=4
    )
    eng = grpo.engine_config(dapo)
    assert (eng.algorithm, eng.loss_agg, eng.minibatch_size, eng.clip_eps_high) == ("dapo", "token-mean", 4, 0.28)
    # every GRPO setting reaches the engine: a config with each one away from its default
    cfg = grpo.Config(
        prompts_per_step=4,
        num_generations=4,
        num_iterations=2,
        steps_per_generation=2,
        beta=0.05,
        kl_estimator="k1",
        kl_placement="reward",
        kl_every=3,
        entropy_coef=0.01,
        dynamic_sampling=True,
        max_refills=2,
        mask_truncated_completions=True,
        shared_prefix=True,
        task_order="epoch",
        scale_rewards="batch",
        loss_type="bnpo",
        clip_eps_high=0.28,
    )
    eng = grpo.engine_config(cfg)
    assert (eng.algorithm, eng.advantage, eng.policy_loss, eng.loss_agg) == (
        "grpo",
        "grpo_batch_std",
        "clip",
        "token-mean",
    )
    assert (eng.batch_size, eng.samples_per_task, eng.ppo_epochs, eng.minibatch_size) == (4, 4, 2, 8)
    assert (eng.kl_coef, eng.kl_estimator, eng.kl_placement, eng.kl_every) == (0.05, "k1", "reward", 3)
    assert (eng.entropy_coef, eng.dynamic_sampling, eng.max_refills, eng.mask_truncated) == (0.01, True, 2, True)
    assert (eng.shared_prefix, eng.task_order, eng.clip_eps, eng.clip_eps_high) == (True, "epoch", 0.2, 0.28)
    assert eng.adv_eps == 1e-4  # TRL's std floor
    # CISPO caps the weight itself (5.0 unless set: TRL would cap at epsilon); Dr. GRPO's scale_rewards none
    eng = grpo.engine_config(grpo.Config(loss_type="cispo", scale_rewards="none"))
    assert (eng.algorithm, eng.advantage, eng.policy_loss, eng.loss_agg) == ("cispo", "dr_grpo", "cispo", "token-mean")
    assert (eng.clip_eps, eng.clip_eps_high) == (1.0, 4.0)  # no lower bound; the cap 1 + 4.0
    assert (
        grpo.engine_config(grpo.Config(loss_type="grpo", importance_sampling_level="sequence")).policy_loss == "gspo"
    )
    assert grpo.Config(loss_type="dr_grpo").algorithm == "dr_grpo"
    assert grpo.Config(loss_type="dapo", dynamic_sampling=True).algorithm == "dapo"  # without clip-higher too
    assert grpo.Config(backend="trl").label == "GRPO (dapo loss) [TRL]"
    with pytest.raises(ValueError, match="backend: trl"):
        grpo.Config(loss_type="sapo")
    with pytest.raises(ValueError, match="no importance ratio"):
        online.Config(algorithm="reinforce", ppo_epochs=2)
    assert {name: parts_of(name) for name in ALGORITHMS} == {
        "reinforce": ("reinforce", "pg", "seq-mean-token-sum"),
        "rloo": ("rloo", "pg", "seq-mean-token-sum"),
        "ppo": ("gae", "clip", "token-mean"),
        "ppo_no_critic": ("batch", "clip", "token-mean"),
        "reinforce_pp": ("reinforce_pp", "clip", "token-mean"),
        "reinforce_pp_baseline": ("reinforce_pp_baseline", "clip", "token-mean"),
        "grpo": ("grpo", "clip", "seq-mean-token-mean"),
        "dr_grpo": ("dr_grpo", "clip", "seq-mean-token-sum-norm"),  # a constant normaliser
        "dapo": ("grpo", "clip", "token-mean"),  # token-level aggregation
        "gspo": ("grpo", "gspo", "seq-mean-token-mean"),
        "cispo": ("grpo", "cispo", "token-mean"),
    }
    assert parts_of("grpo", "rloo", "cispo", "token-mean") == ("rloo", "cispo", "token-mean")
    with pytest.raises(ValueError, match="unknown policy_loss 'clipp'"):
        parts_of("grpo", loss="clipp")
    with pytest.raises(ValueError, match="unknown algorithm"):
        parts_of("grpoo")


SMALL = dict(
    profile="test",
    max_new_tokens=16,
    save_every=1,
    report_to="none",
    limit=32,
    threads=1,
    rewards={"pass": 1.0, "length": {"alpha": 1.0}},
)


@pytest.mark.slow
def test_a_dapo_step_moves_the_ratio_and_the_clip_binds(tiny_sft, monkeypatch):
    """Four minibatch updates per rollout: from the second on the policy has moved, the ratio leaves 1 and
    clip-higher binds; with one update per rollout the same step measures a ratio of exactly 1 (inert clip)."""
    common = dict(
        SMALL,
        init=str(tiny_sft),
        steps=1,
        prompts_per_step=4,
        num_generations=4,
        learning_rate=5e-2,
        loss_type="dapo",
        clip_eps_high=0.28,
    )
    losses, real_update = [], OnlineRun.update
    monkeypatch.setattr(
        OnlineRun, "update", lambda run, loss, step: losses.append(float(loss)) or real_update(run, loss, step)
    )
    run = grpo.train(grpo.Config(stage="dapo_moves", steps_per_generation=4, **common))
    row = read_jsonl(run / "metrics.jsonl")[-1]
    assert row["updates"] == 4 and row["ratio_max"] > 1.0 and row["clip_frac"] > 0
    assert row["loss"] == pytest.approx(sum(losses) / 4) and len(set(losses)) == 4  # the mean over the updates
    assert {"clip_frac_low", "clip_frac_high", "ratio_mean", "entropy", "zero_std_frac"} <= set(row)
    run = grpo.train(grpo.Config(stage="dapo_inert", steps_per_generation=1, **common))
    row = read_jsonl(run / "metrics.jsonl")[-1]
    assert row["updates"] == 1 and row["ratio_max"] == 1.0 and row["clip_frac"] == 0.0


@pytest.mark.slow
def test_reinforce_logs_entropy_and_no_ratio(tiny_sft):
    cfg = reinforce.Config(**SMALL, init=str(tiny_sft), stage="rf_absent", steps=1, batch_size=4, baseline="none")
    row = read_jsonl(reinforce.train(cfg) / "metrics.jsonl")[-1]
    assert "entropy" in row and row["entropy"] > 0
    assert "clip_frac" not in row and "ratio_mean" not in row  # a quantity REINFORCE does not compute is absent


@pytest.mark.slow
@pytest.mark.parametrize("updates", [1, 2])
def test_the_trl_backend_logs_the_engine_keys_and_its_samples(tiny_sft, updates, monkeypatch):
    """backend: trl reads only what TRL offers publicly (the logs its callbacks receive, what it passes the reward
    functions): metrics.jsonl rows carry the own engine's keys and the verdict-class shares, samples.jsonl one row
    per completion of the generation batch with each reward term and their weighted sum. `steps` counts rollouts on
    both backends: with two updates per rollout TRL takes twice the optimizer steps and still logs one row each."""
    pytest.importorskip("trl")
    from codelib.engine.rewards import make_rewards

    cfg = grpo.Config(
        **SMALL,
        init=str(tiny_sft),
        stage=f"trl_logs{updates}",
        backend="trl",
        steps=2,
        prompts_per_step=2,
        num_generations=2,
        steps_per_generation=updates,
    )
    from codelib.trainers import grpo_trl

    given = []
    real_init = grpo_trl.StoppingTrainer.__init__

    def init(self, *a, **k):
        real_init(self, *a, **k)
        given.append(self.stop_sequences)

    monkeypatch.setattr(grpo_trl.StoppingTrainer, "__init__", init)
    run = grpo.train(cfg)
    state = json.loads(max(run.glob("checkpoint-*/trainer_state.json"), key=lambda p: p.stat().st_mtime).read_text())
    assert state["global_step"] == 2 * updates  # optimizer steps: every rollout's updates
    rows = read_jsonl(run / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    assert {"loss", "reward_mean", "pass_rate", "completion_len", "grad_norm", "time_s", "sandbox_share"} <= set(
        rows[0]
    )
    # TRL computes the gradient norm at every optimizer step, and it reaches the log (0 where all rewards were equal)
    assert all(r["grad_norm"] > 0 or r["reward_std"] == 0 for r in rows) and any(r["grad_norm"] > 0 for r in rows)
    assert any(k.startswith("rewards/") for k in rows[0]) and any(k.startswith("verdicts/") for k in rows[0])
    assert all("kl" not in r for r in rows)  # beta 0: TRL computes no KL, and an absent KL is not logged as 0
    samples = read_jsonl(run / "samples.jsonl")
    assert len(samples) == 2 * 4 and {s["step"] for s in samples} == {1, 2}
    assert all(s["task_id"] and set(s["rewards"]) == {"pass_reward", "length_penalty"} for s in samples)
    weights = dict(zip(("pass_reward", "length_penalty"), make_rewards(cfg.rewards).weights, strict=True))
    for s in samples:
        assert abs(s["reward"] - sum(weights[k] * v for k, v in s["rewards"].items())) < 1e-5
    # TRL's completions end at the first stop sequence (StoppingTrainer, given the tasks' stops), never past one
    from codelib.policy.generation import find_stop, stops_for

    stops = stops_for(load_tasks(cfg.dataset, cfg.split)[0])
    assert given == [stops] and stops  # the tasks' stop sequences reach TRL's generation step
    for s in samples:  # past the first stop: at most the rest of the token that completed it
        hit = find_stop(s["completion"], stops)
        assert hit is None or len(s["completion"]) - hit[1] <= 8, s["completion"]
    if updates == 2:  # stopped after its first rollout's checkpoint: the resumed run cuts its rows back to rollout 1
        import shutil

        shutil.rmtree(run / f"checkpoint-{2 * updates}")
        grpo.train(cfg)
        assert [r["step"] for r in read_jsonl(run / "metrics.jsonl")] == [1, 2]
        assert sorted({s["step"] for s in read_jsonl(run / "samples.jsonl")}) == [1, 2]
        assert len(read_jsonl(run / "samples.jsonl")) == 2 * 4


def test_shipped_params_run_the_algorithm_their_names_promise():
    """Each shipped tiny params file resolves to its registered algorithm and that algorithm's parts (a preset that
    wrote a resolved part into the file would silently run another algorithm: RLOO as plain REINFORCE)."""
    from pathlib import Path

    from codelib.plumbing.params import load_config

    root = Path(__file__).resolve().parent.parent / "params" / "tiny"
    modules = {"02": reinforce, "03": ppo, "04": grpo}
    expect = {
        "02_reinforce.yaml": ("reinforce", "reinforce"),
        "variants/02_reinforce_rloo.yaml": ("rloo", "rloo"),
        "variants/02_reinforce_dynamic.yaml": ("rloo", "rloo"),
        "03_ppo.yaml": ("ppo", "gae"),
        "variants/03_ppo_reinforce_pp.yaml": ("reinforce_pp", "reinforce_pp"),
        "variants/03_ppo_reinforce_pp_baseline.yaml": ("reinforce_pp_baseline", "reinforce_pp_baseline"),
        "04_grpo.yaml": ("grpo", "grpo"),
        "variants/04_grpo_dapo.yaml": ("dapo", "grpo"),
        "variants/04_grpo_gspo.yaml": ("gspo", "grpo"),
        "variants/04_grpo_cispo.yaml": ("cispo", "grpo"),
        "variants/04_grpo_dr_grpo.yaml": ("dr_grpo", "dr_grpo"),
    }
    for rel, (algorithm, advantage) in expect.items():
        mod = modules[Path(rel).name[:2]]
        cfg = load_config(mod.Config, root / rel)
        eng = grpo.engine_config(cfg) if mod is grpo else cfg
        assert (eng.algorithm, eng.advantage) == (algorithm, advantage), rel
    # the comparison's algorithm column is each run's label as its trainer writes it now (make compare reproduces it)
    import pandas as pd

    shipped = pd.read_csv(root.parent.parent / "reports/tiny/comparison.csv").set_index("checkpoint")["algorithm"]
    online_runs = {n: r for n, r in load_yaml(root / "comparison.yaml")["runs"].items() if Path(r).name[:2] in modules}
    assert len(online_runs) == 14
    for name, rel in online_runs.items():
        assert load_config(modules[Path(rel).name[:2]].Config, root / rel).label == shipped[name], rel
    # a part set over the algorithm's row, and every mechanism added, is named
    cfg = online.Config(
        algorithm="grpo",
        advantage="rloo",
        policy_loss="cispo",
        loss_agg="token-mean",
        clip_eps_high=0.28,
        kl_coef=0.1,
        kl_estimator="k1",
        kl_placement="reward",
        dynamic_sampling=True,
        mask_truncated=True,
        old_logprobs="sampler",
        minibatch_order="groups",
        minibatch_size=16,
    )
    assert cfg.label == (
        "GRPO, A rloo, loss cispo, token-mean, clip 0.2/0.28, KL k1 x0.1 in the reward, dynamic sampling, "
        "overlong masked, old log-probs from the sampler, group minibatches"
    )
    assert online.Config(algorithm="grpo").label == "GRPO"


def test_trl_backend_cuts_its_completions_at_the_stop_sequences(monkeypatch):
    """backend: trl samples with TRL's generate, which stops at eos only; StoppingTrainer keeps the shortest prefix
    whose decoding reaches the first stop sequence (what the own sampler keeps), before TRL computes masks and loss."""
    pytest.importorskip("trl")
    from trl import GRPOTrainer

    from codelib.trainers import grpo_trl

    class Chars:  # token id = a character's code point
        def decode(self, ids, skip_special_tokens=True):
            return "".join(chr(i) for i in ids)

    sampled = [[ord(c) for c in "    return x\ndef g():\n  pass"], [ord(c) for c in "    return 1"]]
    monkeypatch.setattr(GRPOTrainer, "_generate_single_turn", lambda self, *a, **k: (sampled, None))
    trainer = grpo_trl.StoppingTrainer.__new__(grpo_trl.StoppingTrainer)
    trainer.stop_tokenizer, trainer.eos_token_ids = Chars(), [0]
    trainer.stop_sequences = ("\ndef",)
    ids, _ = trainer._generate_single_turn(None, None, None, 2)
    assert "".join(map(chr, ids[0])) == "    return x\ndef" and ids[1] == sampled[1]
    assert grpo_trl._before_stop("    return x\ndef g():", ("\ndef",)) == "    return x"  # what the rewards score
    # eos ends a completion before any stop sequence, and the sampler's log-probs are cut with the ids
    sampled = [[ord(c) for c in "    return 1"] + [0] + [ord(c) for c in "\ndef g"], [ord(c) for c in "  x\ndef y"]]
    logprobs = [[-1.0] * len(sampled[0]), [-2.0] * len(sampled[1])]
    monkeypatch.setattr(GRPOTrainer, "_generate_single_turn", lambda self, *a, **k: (sampled, logprobs))
    ids, lps = trainer._generate_single_turn(None, None, None, 2)
    assert ids == [sampled[0][:13], sampled[1][:7]] and lps == [[-1.0] * 13, [-2.0] * 7]
    trainer.stop_sequences = ()  # no stop sequences (stdio tasks): TRL's completions as they are
    assert trainer._generate_single_turn(None, None, None, 2) == (sampled, logprobs)


def test_trl_backend_callback_renames_tracks_and_counts_rollouts(tmp_path, monkeypatch):
    """The callback over TRL's logs, with two optimizer steps per rollout: a rollout's verdict shares kept over its
    updates and added to the logs TensorBoard / W&B get; held-out eval only on a rollout's last update; one row per
    rollout in the own engine's keys (pass rate from the pass term, TRL's clip keys renamed, a key TRL did not log
    absent, the sandbox's share of the wall time); the generation batch's samples written once; TRL's closing log
    (no loss) ignored; the callback first among the trainer's."""
    pytest.importorskip("trl")
    import time

    from codelib.trainers import grpo_trl
    from codelib.trainers.grpo_trl import _Timed

    monkeypatch.setattr(_Timed, "spent", 0.0)
    monkeypatch.setattr(_Timed, "classes", [])
    batch = {"prompt": ["p"], "completion": ["    return 1"], "rewards": {"pass_reward": [1.0]}}
    monkeypatch.setattr(_Timed, "batch", batch)
    evals = []

    class Keeper:
        def due(self, step):
            return True

        def evaluate(self, model, tokenizer, step):
            evals.append(step)
            return {"eval_pass@1": 0.5}

    cb = grpo_trl.metrics_callback(tmp_path, {"p": "t/1"}, Keeper(), [1.0], per=2)
    model = types.SimpleNamespace(train=lambda: None)
    cb.trainer = types.SimpleNamespace(
        accelerator=types.SimpleNamespace(unwrap_model=lambda m: m), model=model, processing_class=None
    )
    args = types.SimpleNamespace(logging_steps=2)
    state = types.SimpleNamespace(global_step=1, is_world_process_zero=True, log_history=[])
    _Timed.classes = ["passed", "wrong_answer"]
    cb.on_step_end(args, state, None)  # the rollout's first update
    assert evals == []  # within a rollout: no eval
    state.global_step = 2
    cb.on_step_end(args, state, None)  # its second: no new generation batch, eval due
    assert evals == [1]
    type(cb).t_last = time.time() - 10.0
    _Timed.spent = 2.0
    logs = {
        "loss": 0.5,
        "reward": 0.3,
        "rewards/length_penalty/mean": -0.01,
        "rewards/pass_reward/mean": 0.25,
        "completions/mean_length": 9.0,
        "clip_ratio/region_mean": 0.1,
        "clip_ratio/low_mean": 0.04,
        "clip_ratio/high_mean": 0.06,
        "entropy": 0.7,
        "grad_norm": 1.2,
    }
    state.log_history = [{"step": 2, "loss": 0.5}]
    cb.on_log(args, state, None, logs=logs)
    (row,) = read_jsonl(tmp_path / "metrics.jsonl")
    assert row["step"] == 1 and row["pass_rate"] == 0.25 and row["reward_mean"] == 0.3
    assert (row["clip_frac"], row["clip_frac_low"], row["clip_frac_high"]) == (0.1, 0.04, 0.06)
    assert (row["entropy"], row["grad_norm"], row["completion_len"]) == (0.7, 1.2, 9.0)
    assert not {"kl", "zero_std_frac", "reward_std"} & set(row)  # not logged by TRL: absent, not 0 or None
    assert row["rewards/pass_reward/mean"] == 0.25 and row["eval_pass@1"] == 0.5
    assert row["verdicts/passed"] == row["verdicts/wrong_answer"] == 0.5  # the first update's, kept
    assert logs["verdicts/passed"] == 0.5 and state.log_history[-1]["eval_pass@1"] == 0.5  # reporters see them
    assert 0.15 < row["sandbox_share"] < 0.21 and _Timed.spent == 0.0
    (sample,) = read_jsonl(tmp_path / "samples.jsonl")
    assert (sample["step"], sample["task_id"], sample["passed"]) == (1, "t/1", True) and _Timed.batch == {}
    state.global_step = 4
    cb.on_log(args, state, None, logs={"loss": 0.4})  # a rollout whose logs carry no clip ratios
    assert not {"clip_frac", "clip_frac_low", "clip_frac_high"} & set(read_jsonl(tmp_path / "metrics.jsonl")[-1])
    cb.on_log(args, state, None, logs={"train_runtime": 12.0})  # TRL's closing log: no row
    assert [r["step"] for r in read_jsonl(tmp_path / "metrics.jsonl")] == [1, 2]
    trainer = types.SimpleNamespace(callback_handler=types.SimpleNamespace(callbacks=["tensorboard", cb]))
    trainer.remove_callback = trainer.callback_handler.callbacks.remove
    grpo_trl.first_callback(trainer, cb)
    assert trainer.callback_handler.callbacks == [cb, "tensorboard"]


def test_trl_backend_reward_terms_dataset_and_args(monkeypatch):
    """What backend: trl hands TRL, tested without training: reward terms that score the text before the stop
    sequence and time themselves (the first also records verdict classes and the batch's completions, a None reward
    kept as NaN); prompt rows that keep a long prompt's last tokens and the whole prompt for the rewards; a rollout's
    updates, rows, steps and saves counted as the own engine counts them."""
    pytest.importorskip("trl")
    from codelib.trainers import grpo_trl
    from codelib.trainers.grpo_trl import _Timed

    scored = []

    def first(completions, **kw):
        scored.append(list(completions))
        return [1.0, None]

    monkeypatch.setattr(grpo_trl, "gather_object", list)
    monkeypatch.setattr(grpo_trl.rewards, "verdicts", lambda c, **kw: [types.SimpleNamespace(status="passed")] * 2)
    monkeypatch.setattr(grpo_trl.metrics, "verdict_class", lambda v: v.status)
    monkeypatch.setattr(_Timed, "spent", 1.5)
    monkeypatch.setattr(_Timed, "classes", [])
    monkeypatch.setattr(_Timed, "batch", {})
    terms = [_Timed(first, record_classes=True, stop=("\ndef",)), _Timed(lambda c, **kw: [0.5, 0.25])]
    terms[1].__name__ = "second"
    texts = ["    return 1\ndef g():", "    return 2"]
    assert terms[0](texts, prompts=["p1", "p2"]) == [1.0, None] and scored == [["    return 1", "    return 2"]]
    assert terms[1](texts, prompts=["p1", "p2"]) == [0.5, 0.25]
    assert _Timed.classes == ["passed", "passed"]  # recorded by the first term only
    batch = _Timed.batch
    assert batch["prompt"] == ["p1", "p2"] and batch["completion"] == texts
    assert batch["rewards"]["first"][0] == 1.0 and math.isnan(batch["rewards"]["first"][1])
    assert batch["rewards"]["second"] == [0.5, 0.25]
    assert _Timed.spent > 1.5  # added to, never reset by a term
    cfg = grpo.Config(rewards={"pass": 1.0, "length": {"weight": 0.5}}, workers=1)
    parts, weights = grpo_trl.reward_functions(cfg, stop=("\ndef",))
    assert [p.stop for p in parts] == [("\ndef",)] * 2 and [p.record_classes for p in parts] == [True, False]
    assert weights == [1.0, 0.5]
    rows = grpo_trl.grpo_samples(_Timed.batch, 3, {"p1": "t/1"}, weights=[1.0, 2.0])
    assert [(r["step"], r["task_id"], r["reward"]) for r in rows] == [(3, "t/1", 2.0), (3, "", 0.5)]

    class Chars:
        def __call__(self, text, add_special_tokens=False):
            return {"input_ids": [ord(c) for c in text]}

        def decode(self, ids):
            return "".join(map(chr, ids))

    cfg = grpo.Config(backend="trl", limit=2, max_prompt_tokens=12)
    data = grpo_trl.build_dataset(cfg, Chars())
    tasks = load_tasks(cfg.dataset, cfg.split)[:2]
    assert data["task_id"] == [t.task_id for t in tasks] and data["source_prompt"] == [t.prompt for t in tasks]
    assert data["prompt"] == [t.prompt[-12:] for t in tasks] and all(len(t.prompt) > 12 for t in tasks)
    from pathlib import Path

    from codelib.plumbing.params import load_config

    params = Path(__file__).resolve().parent.parent / "params" / "tiny" / "04_grpo.yaml"
    cfg = load_config(
        grpo.Config,
        params,
        backend="trl",
        old_logprobs="recompute",  # the tiny stage's speed options are own-engine ones: TRL refuses them
        minibatch_order="rows",
        num_iterations=2,
        beta=0.04,
        rewards={"pass": 1.0, "length": {"weight": 0.5}},
    )
    args = grpo_trl.grpo_args(cfg, "/tmp/unused")
    per = grpo_trl.updates_per_rollout(cfg)
    assert per == 8  # 4 minibatches x 2 passes over each rollout
    assert (args.max_steps, args.save_steps, args.logging_steps) == (250 * per, 25 * per, per)
    assert args.per_device_train_batch_size * args.gradient_accumulation_steps == 32  # a quarter of 32 x 4
    assert (args.beta, args.num_iterations, list(args.reward_weights)) == (0.04, 2, [1.0, 0.5])


@pytest.mark.slow
@pytest.mark.parametrize("trunk", ["detached", "shared"])
def test_one_step_wires_every_term_into_the_loss(tiny_sft, monkeypatch, trunk):
    """One PPO step with every term switched on, watched from outside the engine: the policy loss gets the configured
    clip range (clip-higher's upper one); the KL term enters the loss through the trained log-probs (with the shared
    trunk; with the detached one it is placed in the reward, and the loss has no KL term); the loss handed
    to the optimizer is the aggregated loss minus entropy_coef x the masked entropy plus value_coef x the value loss;
    truncated completions carry no loss; the value head reads a detached trunk when asked; and every forward (old,
    update, reference) runs at the sampling temperature, so with one update the ratio is exactly 1, the recomputed
    log-probs equal the sampler's and the KL to the (unmoved) start policy is 0."""
    seen: dict[str, list] = {k: [] for k in ("loss_kw", "kl", "agg", "value", "update", "lp", "ref", "head", "ro")}

    def spy(owner, name, record):  # owner.name still runs; record(its result, its arguments) sees each call
        real = getattr(owner, name)

        def wrapped(*a, **k):
            out = real(*a, **k)
            record(out, *a, **k)
            return out

        monkeypatch.setattr(owner, name, wrapped)

    spy(online, "policy_loss", lambda out, *a, **k: seen["loss_kw"].append((k, out[0].detach(), a)))
    spy(online, "kl_estimate", lambda out, logp, *a, **k: seen["kl"].append((logp.requires_grad, out.detach())))
    spy(online, "aggregate", lambda out, mode, per, m, *a: seen["agg"].append((per.detach(), m, out.detach(), a)))
    spy(online, "value_loss_of", lambda out, *a, **k: seen["value"].append(out.detach()))
    spy(online, "token_logprobs", lambda out, _, b, **k: seen["lp"].append((k["temperature"], out, b.completion_mask)))
    spy(online, "reference_logprobs", lambda out, model, b, shared, temp: seen["ref"].append(temp))
    spy(OnlineRun, "update", lambda out, run, loss, step: seen["update"].append(float(loss.detach())))
    spy(OnlineRun, "rollout", lambda out, run, *a: seen["ro"].append(out))
    spy(
        online,
        "value_head",
        lambda out, model: out["value_head"].register_forward_pre_hook(
            lambda mod, args: seen["head"].append(args[0].requires_grad) if torch.is_grad_enabled() else None
        ),
    )
    cfg = ppo.Config(
        **dict(SMALL, max_new_tokens=6),
        init=str(tiny_sft),
        stage=f"wiring_{trunk}",
        steps=1,
        batch_size=3,
        samples_per_task=2,
        ppo_epochs=1,
        critic="value_head",
        value_trunk=trunk,
        value_coef=0.3,
        entropy_coef=0.1,
        clip_eps=0.2,
        clip_eps_high=0.28,
        dual_clip=3.0,
        kl_coef=0.1,
        kl_estimator="k2" if trunk == "shared" else "k1",
        kl_placement="loss" if trunk == "shared" else "reward",
        mask_truncated=True,
        temperature=0.7,
    )
    run = ppo.train(cfg)
    row = read_jsonl(run / "metrics.jsonl")[-1]
    ((kw, pg, (_, _, _, adv, adv_mask)),) = seen["loss_kw"]
    # each sample's logged advantage is the mean of its tokens' (over its completion tokens only)
    per_row = ((adv * adv_mask).sum(-1) / adv_mask.sum(-1).clamp(min=1)).tolist()
    logged = [s["advantage"] for s in read_jsonl(run / "samples.jsonl")]
    assert sorted(logged) == pytest.approx(sorted(per_row), abs=1e-5)
    assert (kw["eps_low"], kw["eps_high"], kw["dual_clip"]) == (0.2, 0.28, 3.0)
    grad_kl = [est for needs_grad, est in seen["kl"] if needs_grad]
    in_loss = trunk == "shared"
    assert len(grad_kl) == in_loss  # the loss's KL term, on the log-probs being trained (none: in the reward)
    ((per_token, m, agg, rest),) = seen["agg"]
    assert torch.allclose(per_token, pg + 0.1 * grad_kl[0] if in_loss else pg, atol=1e-6)
    assert rest == (cfg.max_new_tokens,)  # Dr. GRPO's constant normaliser: the generation budget
    temps = [t for t, _, _ in seen["lp"]]
    assert temps == [0.7, 0.7] and seen["ref"] == [0.7]  # the old forward, the update's, the start policy's
    _, (logp, ex), _ = seen["lp"][1]
    entropy = float((ex["entropy"].detach() * m).sum() / m.sum())
    assert row["entropy"] == pytest.approx(entropy, rel=1e-6)
    (v_loss,) = seen["value"]
    assert seen["update"] == [pytest.approx(float(agg) - 0.1 * entropy + 0.3 * float(v_loss), abs=1e-6)]
    assert seen["head"] == [trunk == "shared"]  # the update's value forward: a trunk the value loss reaches or not
    (ro,) = seen["ro"]
    lengths = torch.tensor([len(c) for c in ro.completion_ids])
    assert (ro.finished == 0).any() and (ro.finished == 1).any(), "pick max_new_tokens so that both kinds occur"
    assert bool(((ro.finished == 0) == (lengths == cfg.max_new_tokens)).all())  # unfinished: the budget cut them
    kept = seen["lp"][0][2].sum(-1)  # the old forward's mask, in rollout order (the update's rows are shuffled)
    assert bool((kept[ro.finished == 0] == 0).all()) and bool((kept[ro.finished == 1] > 0).all())
    assert torch.equal(m.sum(-1).sort().values, kept.sort().values)
    assert row["truncated_frac"] == pytest.approx(float(1 - ro.finished.mean()))
    assert row["sandbox_share"] * row["time_s"] == pytest.approx(ro.sandbox_s)  # judging's and sampling's shares
    assert row["generate_share"] * row["time_s"] == pytest.approx(ro.generate_s)
    assert row["ratio_max"] == 1.0 and row["sampler_logp_diff_max"] < 1e-4 and row["kl"] < 1e-6


def _critic_state(run):
    return torch.load(run / "value_head.pt")


@pytest.mark.slow
def test_a_separate_critic_trains_apart_from_the_policy(tiny_sft, monkeypatch):
    """`value_trunk: separate`: the value loss has no autograd path to the policy's weights and one to the critic's
    adapter; one step with value_coef 0.5 leaves the policy's adapter bit for bit what value_coef 0 leaves, also when
    the gradient clip binds (each model's norm is clipped alone), while a shared trunk's moves it. value_head.pt holds
    the critic's trained tensors only (its adapter, the norms it trains, the head), not its frozen copy of the model;
    by step 2 (the head is 0 at the start) the value loss has moved the critic's adapter; a resumed run gives the
    uninterrupted one's critic and policy."""
    from safetensors.torch import load_file

    paths, v_losses, real_update, real_value_loss = [], [], OnlineRun.update, online.value_loss_of

    def value_loss_of(*a, **k):
        v_losses.append(real_value_loss(*a, **k))
        return v_losses[-1]

    monkeypatch.setattr(online, "value_loss_of", value_loss_of)

    def update(run, loss, step):
        if run.cfg.value_trunk == "separate" and run.cfg.value_coef:
            policy, critic = run.clip_groups
            to_policy = torch.autograd.grad(v_losses[-1], policy, allow_unused=True, retain_graph=True)
            to_critic = torch.autograd.grad(v_losses[-1], critic, allow_unused=True, retain_graph=True)
            paths.append((sum(g is not None for g in to_policy), sum(g is not None for g in to_critic)))
        return real_update(run, loss, step)

    monkeypatch.setattr(OnlineRun, "update", update)
    common = dict(
        SMALL,
        init=str(tiny_sft),
        steps=1,
        batch_size=3,
        samples_per_task=2,
        ppo_epochs=1,
        critic="value_head",
        max_grad_norm=0.01,  # both norms are larger: the clip binds for each
    )
    runs = {
        (trunk, coef): ppo.train(
            ppo.Config(**common, stage=f"critic_{trunk}_{coef}", value_trunk=trunk, value_coef=coef)
        )
        for trunk, coef in (("separate", 0.5), ("separate", 0.0), ("shared", 0.5))
    }
    ((to_policy, to_critic),) = paths
    assert to_policy == 0 and to_critic > 2  # the head and the critic's LoRA matrices, never the policy's
    policy = {k: load_file(str(r / "adapter_model.safetensors")) for k, r in runs.items()}
    start = policy[("separate", 0.0)]
    assert all(torch.equal(start[n], w) for n, w in policy[("separate", 0.5)].items())
    assert not all(torch.equal(start[n], w) for n, w in policy[("shared", 0.5)].items())  # the test can see a leak
    row = read_jsonl(runs[("separate", 0.5)] / "metrics.jsonl")[-1]
    assert row["critic_grad_norm"] > 0.01 and row["grad_norm"] > 0.01 and row["value_loss"] > 0
    assert read_jsonl(runs[("separate", 0.0)] / "metrics.jsonl")[-1]["critic_grad_norm"] == 0.0
    assert "critic_grad_norm" not in read_jsonl(runs[("shared", 0.5)] / "metrics.jsonl")[-1]
    critic, untrained = _critic_state(runs[("separate", 0.5)]), _critic_state(runs[("separate", 0.0)])
    assert critic.keys() == untrained.keys()
    assert all("lora_" in k or "modules_to_save" in k or k.startswith("head.") for k in critic)
    lora_b = [k for k in critic if "lora_B" in k]
    assert lora_b and all(untrained[k].abs().sum() == 0 for k in lora_b)  # B = 0 at the start
    assert critic["head.weight"].abs().sum() > 0 and untrained["head.weight"].abs().sum() == 0
    assert "separate value trunk" in json.loads((runs[("separate", 0.5)] / "config.json").read_text())["label"]

    two = dict(common, steps=2, value_trunk="separate")
    full = ppo.train(ppo.Config(**two, stage="critic_full"))
    ppo.train(ppo.Config(**dict(two, steps=1), stage="critic_part"))
    resumed = ppo.train(ppo.Config(**two, stage="critic_part"))
    a, b = _critic_state(full), _critic_state(resumed)
    assert any(a[k].abs().sum() > 0 for k in lora_b)  # step 2: through the moved head, the critic's adapter learns
    assert a.keys() == b.keys() and all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    pa, pb = (load_file(str(r / "adapter_model.safetensors")) for r in (full, resumed))
    assert all(torch.allclose(pa[k], pb[k], atol=1e-6) for k in pa)


def test_the_value_trunk_is_checked():
    """A value trunk the engine does not offer is refused with the choices."""
    with pytest.raises(ValueError, match="shared | detached | separate"):
        ppo.Config(critic="value_head", value_trunk="own")


def test_rollout_passes_the_sampling_settings_and_keeps_each_completions_tokens(monkeypatch):
    """`rollout` samples at the run's temperature, top_p and budget with the task's stop sequences; an empty
    completion becomes one stand-in eos (with no sampler log-probs: it was not drawn), `finished` says whether a
    stop or eos ended a row, and lengths, passes, test fractions, rewards and samples.jsonl rows are per row;
    `concat` adds the times up and `select` of no rows is an empty batch."""
    from codelib.policy.generation import Completion, stops_for

    task = types.SimpleNamespace(prompt="def f(x):\n", kind="function", entry_point="f", task_id="t0")
    seen = {}

    def fake_generate(model, tok, prompts, **kw):
        seen.update(kw, prompts=prompts)
        return [
            [
                Completion(text="    return x", ids=[5, 6, 7], n_tokens=3, finished=True, logprobs=[-0.1, -0.2, -0.3]),
                Completion(text="", ids=[], n_tokens=0, finished=False, logprobs=[]),
            ]
        ]

    verdicts = [
        types.SimpleNamespace(passed=True, tests_passed=2, tests_total=2, status="passed", detail="", tamper=""),
        types.SimpleNamespace(passed=False, tests_passed=1, tests_total=4, status="failed", detail="", tamper=""),
    ]
    monkeypatch.setattr(rollout, "generate", fake_generate)
    monkeypatch.setattr(rollout, "encode_prompts", lambda tok, prompts: [[1, 2]] * len(prompts))
    monkeypatch.setattr(rollout.sandbox, "configure", lambda **kw: None)
    monkeypatch.setattr(rollout, "tasks_to_rows", lambda ts: [{"task_id": t.task_id} for t in ts])
    monkeypatch.setattr(rollout.rewards, "verdicts", lambda texts, **cols: verdicts)
    reward = types.SimpleNamespace(
        score=lambda texts, completion_ids, **cols: ([0.5, -1.0], {"pass": [1.0, 0.0], "len": [None, -1.0]})
    )
    cfg = types.SimpleNamespace(temperature=0.7, top_p=0.95, max_new_tokens=5, workers=1, timeout_s=1.0)
    ro = rollout.rollout(None, types.SimpleNamespace(eos_token_id=0), [task], 2, cfg, seed=3, reward=reward)
    assert [seen[k] for k in ("temperature", "top_p", "max_new_tokens", "n", "seed")] == [0.7, 0.95, 5, 2, 3]
    assert seen["stop"] == stops_for(task) and seen["logprobs"] is True
    assert ro.prompt_ids == [[1, 2], [1, 2]] and ro.completion_ids == [[5, 6, 7], [0]]
    assert ro.sampler_logprobs == [[-0.1, -0.2, -0.3], None]
    assert ro.finished.tolist() == [1.0, 0.0] and ro.lengths.tolist() == [3.0, 1.0]
    assert ro.passed.tolist() == [1.0, 0.0] and ro.test_fraction.tolist() == [1.0, 0.25]
    assert ro.rewards.tolist() == [0.5, -1.0] and ro.classes[0] == "passed"
    rows = rollout.sample_rows(ro, 7, advantages=torch.tensor([0.75, -0.75]))
    assert [(r["reward"], r["passed"], r["tokens"], r["advantage"]) for r in rows] == [
        (0.5, True, 3, 0.75),
        (-1.0, False, 1, -0.75),
    ]
    assert rows[1]["rewards"] == {"pass": 0.0, "len": -1.0} and rows[0]["rewards"]["len"] is None
    assert rows[1]["test_fraction"] == 0.25 and rows[0]["step"] == 7 and rows[0]["task_id"] == "t0"
    assert rollout.term_means(ro) == {"rewards/pass/mean": 0.5, "rewards/len/mean": -1.0}
    both = rollout.concat([dataclasses.replace(ro, generate_s=1.0, sandbox_s=0.5)] * 2)
    assert both.completion_ids == ro.completion_ids * 2 and (both.generate_s, both.sandbox_s) == (2.0, 1.0)
    empty = rollout.select(ro, [])
    assert empty.texts == [] and empty.passed.shape == (0,) and empty.terms == {"pass": [], "len": []}
