"""Mechanisms pinned by hand-computed numbers where a mutant made inert would otherwise pass: the value clip, the
clip fractions (only the side that binds), the ratio statistics over completion tokens, dual clip, the batch-std GRPO
advantage, the logged KL (k3), the overlong floor, the KL in the reward (RLOO and REINFORCE++), the zero-variance share."""

import math
import types

import pytest
import torch

from codelib.algorithms import AdvantageInput, aggregate, compute_advantages, policy_loss
from codelib.engine.rewards import overlong_penalty
from codelib.policy.logprobs import Batch, kl_to_start
from codelib.trainers import online, ppo
from codelib.trainers.common import OnlineRun


def _run(nproc=1):
    g = (lambda t: t) if nproc == 1 else (lambda t: torch.cat([t, t]))
    return types.SimpleNamespace(gather=g, acc=types.SimpleNamespace(num_processes=nproc))


def test_value_clip():
    one = torch.ones(1, 1)
    assert float(online.value_loss_of(one, one, one, torch.zeros(1, 1), clip=0.5)) == pytest.approx(0.25)
    assert float(online.value_loss_of(one, one, one, torch.zeros(1, 1), clip=0.0)) == 0.0


def test_clip_frac_counts_only_binding_side():
    logp = torch.log(torch.tensor([[0.75, 1.25]]))
    adv = torch.tensor([[1.0, -1.0]])
    _, st = policy_loss("clip", logp, torch.zeros(1, 2), adv, torch.ones(1, 2))
    assert st["clip_frac_low"] == 0.0 and st["clip_frac_high"] == 0.0


def test_ratio_mean_over_completion_tokens_only():
    logp = torch.tensor([[math.log(2.0), 0.0]])
    _, st = policy_loss("clip", logp, torch.zeros(1, 2), torch.tensor([1.0]), torch.tensor([[1.0, 0.0]]))
    assert st["ratio_mean"] == pytest.approx(2.0)


def test_ratio_ignores_non_finite_outside_mask():
    logp = torch.zeros(1, 2, requires_grad=True)
    per, _ = policy_loss(
        "clip", logp, torch.tensor([[0.0, float("nan")]]), torch.tensor([1.0]), torch.tensor([[1.0, 0.0]])
    )
    assert float(aggregate("token-mean", per, torch.tensor([[1.0, 0.0]]))) == -1.0


def test_dual_clip_leaves_positive_advantages():
    loss, _ = policy_loss(
        "clip", torch.zeros(1, 1), torch.zeros(1, 1), torch.tensor([[1.0]]), torch.ones(1, 1), dual_clip=3.0
    )
    assert float(loss) == -1.0


def test_grpo_batch_std():
    x = AdvantageInput(torch.tensor([1.0, 0.0, 1.0, 1.0]), group_size=2)
    assert compute_advantages("grpo_batch_std", x).tolist() == pytest.approx([1.0, -1.0, 0.0, 0.0], abs=1e-5)
    x = AdvantageInput(torch.tensor([1.0, 0.0]), group_size=2, batch_rewards=torch.tensor([1.0, 0.0, 0.0, 0.0]))
    assert compute_advantages("grpo_batch_std", x).tolist() == pytest.approx([1.0, -1.0], abs=1e-5)


def test_kl_to_start_is_k3():
    assert kl_to_start(torch.tensor([[-1.0]]), torch.tensor([[-1.5]]), torch.ones(1, 1)) == pytest.approx(
        math.exp(-0.5) - 0.5
    )


def test_overlong_floor():
    assert overlong_penalty(max_tokens=4, cache=2)([""], tokens=[6]) == [-1.0]


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
def test_reinforce_pp_kl_in_token_rewards(nproc):
    cfg = ppo.Config(advantage="reinforce_pp", kl_coef=0.5, kl_estimator="k1", batch_size=2)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    kl = torch.tensor([[0.1, 0.2, 0.3], [0.4, 0.5, 0.0]])
    old = online.Olds(cfg, _run(nproc), _batch(mask), torch.tensor([1.0, 0.0]), torch.zeros(2, 3), None, -kl, None)
    row1 = [-0.05 - 0.1 - 0.15 + 1, -0.1 - 0.15 + 1, -0.15 + 1]
    row2 = [-0.2 - 0.25, -0.25]
    flat = row1 + row2
    mean = sum(flat) / 5
    std = math.sqrt(sum((v - mean) ** 2 for v in flat) / 5)
    assert old.advantages[0].tolist() == pytest.approx([(v - mean) / (std + 1e-6) for v in row1], abs=1e-5)


def test_zero_std_frac():
    st = OnlineRun._group_stats(
        types.SimpleNamespace(n_per_task=2, sampling_stats={}, gather=lambda t: t), torch.tensor([1.0, 1.0, 0.0, 1.0])
    )
    assert st == {"zero_std_frac": 0.5}
