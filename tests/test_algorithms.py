"""The algorithms of codelib/algorithms (formulas from their papers) on hand-made numbers, their params variants on
the tiny model, and the execution telemetry (verdict classes, zero-variance groups, evaluation during training).

Each math test computes the paper's formula by hand (plain arithmetic on a few numbers) and fails if the code's
advantage or loss differs. The TRL losses (Dr. GRPO, DAPO, GSPO, CISPO) are TRL 1.16's own `_compute_loss`, called on
hand-made log-probs through a stand-in trainer.
"""

import collections
import json
import math
import types
from pathlib import Path
from statistics import pstdev

import pytest
import torch

from codelib.algorithms import (
    AdvantageInput,
    aggregate,
    compute_advantages,
    policy_loss,
)
from codelib.algorithms import formulas as A
from codelib.engine import metrics, rollout
from codelib.plumbing.params import ParamsError, load_config, load_yaml, read_jsonl
from codelib.reports import comparison
from codelib.trainers import grpo, grpo_trl, ppo, reinforce

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = ROOT / "params" / "tiny" / "variants"

# ---------------------------------------------------------------------------------------------------------------
# advantages


def test_rloo_leaves_one_out():
    r = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.5, 0.5, 0.5, 0.5])  # two tasks x G=4
    # task 1, sample 0: 1 - (0 + 0 + 1)/3 = 2/3; sample 1: 0 - (1 + 0 + 1)/3 = -2/3
    expect = [2 / 3, -2 / 3, -2 / 3, 2 / 3, 0.0, 0.0, 0.0, 0.0]
    assert A.rloo(r, 4).tolist() == pytest.approx(expect)
    with pytest.raises(ValueError, match="at least 2 samples"):
        A.rloo(r, 1)


def test_group_normalised_and_dr_grpo_advantages():
    """GRPO's mean and unbiased std are each group's own, also for G = 2; eps is added to the std; Dr. GRPO centres
    without dividing; the batch advantage (PPO without a critic) uses the whole batch's mean and population std."""
    r = torch.tensor([1.0, 0.0, 0.0, 0.0])
    mean, std = 0.25, math.sqrt((0.75**2 + 3 * 0.25**2) / 3)  # TRL: unbiased std within the group
    assert A.group_normalized(r, 4, eps=0.0).tolist() == pytest.approx([(x - mean) / std for x in r.tolist()])
    # Dr. GRPO: centred, no std division
    assert A.group_normalized(r, 4, scale=False).tolist() == pytest.approx([0.75, -0.25, -0.25, -0.25])
    assert A.batch_normalized(torch.tensor([1.0, 1.0])).tolist() == [0.0, 0.0]
    r = torch.tensor([1.0, 0.0, 3.0, 1.0])  # two tasks x G=2: means 0.5 and 2
    s1, s2 = math.sqrt(2 * 0.5**2 / 1), math.sqrt(2 * 1.0**2 / 1)  # unbiased: divide by G - 1
    expect = [0.5 / (s1 + 0.5), -0.5 / (s1 + 0.5), 1 / (s2 + 0.5), -1 / (s2 + 0.5)]
    assert A.group_normalized(r, 2, eps=0.5).tolist() == pytest.approx(expect)
    assert A.group_normalized(r, 2, scale=False).tolist() == pytest.approx([0.5, -0.5, 1.0, -1.0])
    whole = [1.0, 0.0, 0.0, 0.0]
    mean, std = 0.25, pstdev(whole)
    got = A.batch_normalized(torch.tensor([1.0, 0.0]), eps=0.0, batch=torch.tensor(whole))
    assert got.tolist() == pytest.approx([(1 - mean) / std, (0 - mean) / std])


def test_kl_estimators_by_hand():
    logp, ref = torch.tensor([[-1.0, -2.0]]), torch.tensor([[-1.5, -1.0]])
    log_r = [-0.5, 1.0]  # ref - logp
    assert A.kl_estimate(logp, ref, "k1")[0].tolist() == pytest.approx([0.5, -1.0])
    assert A.kl_estimate(logp, ref, "k2")[0].tolist() == pytest.approx([0.125, 0.5])
    assert A.kl_estimate(logp, ref, "k3")[0].tolist() == pytest.approx([math.exp(x) - 1 - x for x in log_r])
    with pytest.raises(ValueError, match="k1, k2, k3"):
        A.kl_estimate(logp, ref, "k4")


def test_reinforce_pp_folds_kl_into_rewards_and_normalises_globally():
    """REINFORCE++ folds -beta k into each token's reward and normalises the returns over the whole batch's tokens;
    -baseline subtracts each group's mean reward (not the batch's); given the global batch's (mean, std), the
    advantages are normalised by those, not by this shard's."""
    # two completions: 3 tokens and 2 tokens (the last position of row 2 is padding)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    kl = torch.tensor([[0.1, 0.2, 0.3], [0.4, 0.5, 9.9]])
    beta, r = 0.5, torch.tensor([1.0, 0.0])
    # token rewards: -beta*kl, + r at the last token; returns are sums from t on
    row1 = [-0.05 - 0.1 - 0.15 + 1, -0.1 - 0.15 + 1, -0.15 + 1]
    row2 = [-0.2 - 0.25, -0.25]
    assert A.reinforce_pp_returns(r, kl, mask, beta)[0].tolist() == pytest.approx(row1)
    flat = row1 + row2
    mean = sum(flat) / 5
    std = math.sqrt(sum((x - mean) ** 2 for x in flat) / 5)  # over all 5 tokens of the batch, not per group
    adv = A.reinforce_pp(r, kl, mask, beta, eps=0.0)
    assert adv[0].tolist() == pytest.approx([(x - mean) / std for x in row1], abs=1e-6)
    assert adv[1, :2].tolist() == pytest.approx([(x - mean) / std for x in row2], abs=1e-6)
    assert adv[1, 2] == 0
    # -baseline: the group mean of r (0.5) subtracted first
    base = A.reinforce_pp_returns(r, kl, mask, beta, group_size=2)
    assert base[0, 2] == pytest.approx(-0.15 + 0.5) and base[1, 1] == pytest.approx(-0.25 - 0.5)
    r, mask, kl = torch.tensor([1.0, 0.0, 1.0, 1.0]), torch.ones(4, 1), torch.zeros(4, 1)  # group means 0.5, 1
    base = A.reinforce_pp_returns(r, kl, mask, 0.0, group_size=2)
    assert base[:, 0].tolist() == pytest.approx([0.5, -0.5, 0.0, 0.0])
    # the global batch's stats: (r - 0.5) / 2
    got = A.reinforce_pp(r, kl, mask, 0.0, eps=0.0, batch_stats=(0.5, 2.0))
    assert got[:, 0].tolist() == pytest.approx([0.25, -0.25, 0.25, 0.25])
    # the baseline variant through both doors: the wrapper's group_size and the registry's
    stats = (0.0, 1.0)
    wrapped = A.reinforce_pp(r, kl, mask, 0.0, eps=0.0, group_size=2, batch_stats=stats)
    assert wrapped[:, 0].tolist() == pytest.approx([0.5, -0.5, 0.0, 0.0])
    x = AdvantageInput(r, 2, mask=mask, eps=0.0, batch_stats=stats)
    assert compute_advantages("reinforce_pp_baseline", x)[:, 0].tolist() == pytest.approx([0.5, -0.5, 0.0, 0.0])
    assert compute_advantages("reinforce_pp", x)[:, 0].tolist() == pytest.approx([1.0, 0.0, 1.0, 1.0])


def test_clip_higher_lets_the_upper_side_grow():
    mask = torch.ones(1, 2)
    logp_old = torch.zeros(1, 2)
    logp = torch.log(torch.tensor([[1.25, 0.75]]))
    adv = torch.tensor([[1.0, -1.0]])
    # symmetric 0.2: token 1 min(1.25, 1.2) = 1.2; token 2 (A < 0): -min(-0.75, -0.8) = 0.8 -> loss (-1.2 + 0.8) / 2
    loss, frac, _ = A.clipped_policy_loss(logp, logp_old, adv, mask, 0.2)
    assert float(loss.detach()) == pytest.approx((-1.2 + 0.8) / 2) and frac == 1.0
    # clip-higher 0.2 / 0.28: 1.25 < 1.28 is no longer clipped
    loss, frac, _ = A.clipped_policy_loss(logp, logp_old, adv, mask, 0.2, 0.28)
    assert float(loss.detach()) == pytest.approx((-1.25 + 0.8) / 2) and frac == 0.5


# ---------------------------------------------------------------------------------------------------------------
# more advantage parts on hand-made numbers (the losses, ratios, aggregations and registry: tests/test_engine.py)


def test_reinforce_subtracts_its_baseline():
    """REINFORCE: A = r - b with the moving-average baseline b, the raw reward before there is one."""
    r = torch.tensor([1.0, 0.0])
    assert compute_advantages("reinforce", AdvantageInput(r, baseline=0.25)).tolist() == [0.75, -0.25]
    assert compute_advantages("reinforce", AdvantageInput(r)).tolist() == [1.0, 0.0]


def test_token_stats_count_only_completion_tokens():
    """(mean, population std) over the mask's tokens: what sits off the completion does not enter."""
    values = torch.tensor([[1.0, 2.0, 99.0], [3.0, 50.0, 50.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    mean, std = A.token_stats(values, mask)
    assert (mean, std) == (pytest.approx(2.0), pytest.approx(math.sqrt(2 / 3)))


def test_gae_whitens_over_completion_tokens_only():
    """gamma = lam = 1: A_t = r - V_t, then (A - mean) / std with mean and population std over the mask's tokens;
    padding (whatever V holds there) stays 0 and enters neither statistic."""
    values = torch.tensor([[0.2, 0.6, 7.0], [0.5, 3.0, 3.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    raw = [1 - 0.2, 1 - 0.6, 0 - 0.5]
    mean, std = sum(raw) / 3, pstdev(raw)
    adv = compute_advantages("gae", AdvantageInput(torch.tensor([1.0, 0.0]), mask=mask, values=values, eps=0.0))
    want = [(a - mean) / std for a in raw]
    assert adv[mask.bool()].tolist() == pytest.approx(want, abs=1e-5)
    assert adv[~mask.bool()].tolist() == [0.0, 0.0, 0.0]


def test_flat_groups_by_reward_and_by_accuracy():
    """A group of equal rewards is flat whatever their value and G (no rounding slack); DAPO's accuracy filter
    flags groups that all passed as well as those that all failed."""
    assert A.zero_std_groups(torch.full((7,), 0.3), 7).tolist() == [True]
    passed = torch.tensor([1, 1, 0, 1, 0, 0])
    assert A.uniform_accuracy_groups(passed, 2).tolist() == [True, False, True]


# ---------------------------------------------------------------------------------------------------------------
# dynamic sampling, verdict classes


def _fake_rollouts(rewards: list[float], tag: str) -> rollout.Rollouts:
    n = len(rewards)
    return rollout.Rollouts(
        tasks=[tag] * n,
        prompt_ids=[[1]] * n,
        completion_ids=[[2]] * n,
        texts=[f"{tag}{i}" for i in range(n)],
        passed=torch.tensor(rewards),
        test_fraction=torch.tensor(rewards),
        lengths=torch.ones(n),
        rewards=torch.tensor(rewards),
        terms={"pass_reward": list(rewards)},
        generate_s=1.0,
        sandbox_s=0.5,
        classes=["passed" if x else "wrong_answer" for x in rewards],
    )


def test_dynamic_sampling_drops_flat_groups_and_refills():
    first = _fake_rollouts([1, 1, 0, 1, 0, 0], "a")  # G=2: groups (1,1) flat, (0,1) varied, (0,0) flat
    refills = {1: _fake_rollouts([1, 0, 1, 1, 0, 0], "b"), 2: _fake_rollouts([0, 1, 0, 0, 0, 0], "c")}
    batch, st = rollout.fill_dynamic(first, refills.__getitem__, 2, groups_wanted=3, max_refills=4)
    assert batch.texts == ["a2", "a3", "b0", "b1", "c0", "c1"]  # the three varied groups, in order
    assert st == {"groups_dropped": 6.0, "groups_seen": 9.0, "refills": 2.0, "groups_short": 0.0}
    assert batch.generate_s == 3.0 and batch.sandbox_s == 1.5  # every rollout's time counts
    # refills spent: the batch keeps its size with dropped groups (no gradient from them)
    batch, st = rollout.fill_dynamic(first, refills.__getitem__, 2, groups_wanted=3, max_refills=0)
    assert batch.texts == ["a2", "a3", "a0", "a1", "a4", "a5"] and st["groups_short"] == 2.0
    assert A.zero_std_groups(torch.tensor([1.0, 1, 0, 1]), 2).tolist() == [True, False]


def test_verdict_classes_from_sandbox_verdicts():
    rows = [
        {"status": "passed", "passed": True, "detail": ""},
        {"status": "failed", "passed": False, "detail": "line 2: assert f(1) == 2: AssertionError"},
        {"status": "failed", "passed": False, "detail": "only 3 of 6 asserts passed"},
        {
            "status": "failed",
            "passed": False,
            "detail": "line 2: assert f(1) == 2: ZeroDivisionError: division by zero",
        },
        {"status": "error", "passed": False, "detail": "SyntaxError: '(' was never closed (line 3)"},
        {"status": "timeout", "passed": False, "detail": "wall-time limit exceeded"},
        {"status": "failed", "passed": False, "detail": "case 1: wrong answer: expected 3"},
    ]
    got = [metrics.verdict_class(r) for r in rows]
    assert got == [
        "passed",
        "wrong_answer",
        "wrong_answer",
        "runtime_error",
        "syntax_error",
        "timeout",
        "wrong_answer",
    ]
    shares = metrics.class_shares(rows)
    assert shares["verdicts/wrong_answer"] == pytest.approx(3 / 7) and sum(shares.values()) == pytest.approx(1)
    assert metrics.class_shares([]) == {}


@pytest.mark.slow
def test_verdict_classes_of_real_sandbox_verdicts():
    from codelib import sandbox
    from codelib.tasks import load_tasks

    t = load_tasks("synthetic", "test")[0]
    codes = [
        t.canonical_solution,
        "    return None\n",
        "    return 1 / 0\n",
        "    return (\n",
        "    while True: pass\n",
    ]
    verdicts = sandbox.check([t] * len(codes), codes, workers=2, timeout_s=1.0)
    assert [metrics.verdict_class(v) for v in verdicts] == list(metrics.VERDICT_CLASSES)


# ---------------------------------------------------------------------------------------------------------------
# TRL's GRPO losses on hand-made numbers


def _trl_loss(
    loss_type: str, logp, old, adv, mask, eps=0.2, eps_high=None, level="token", max_len=4, model=None, ids=None
):
    """TRL's own GRPOTrainer._compute_loss (a stand-in trainer holds only what it reads) on given log-probs, or, with
    `model` and `ids` (prompt ids, prompt mask, completion ids), on the model's own through TRL's log-prob path."""
    import contextlib

    from trl import GRPOTrainer

    acc = types.SimpleNamespace(
        num_processes=1,
        sync_gradients=True,
        is_main_process=True,
        autocast=contextlib.nullcontext,
        gather=lambda x: x,
        gather_for_metrics=lambda x: x,
        reduce=lambda x, reduction="sum": x,
    )
    fake = types.SimpleNamespace(
        loss_type=loss_type,
        importance_sampling_level=level,
        epsilon_low=eps,
        epsilon_high=eps if eps_high is None else eps_high,
        beta=0.0,
        top_entropy_quantile=1.0,
        aux_loss_enabled=False,
        off_policy_mask_threshold=None,
        use_vllm=False,
        max_completion_length=max_len,
        current_gradient_accumulation_steps=1,
        accelerator=acc,
        model=types.SimpleNamespace(training=True),
        _entropy_bonus_enabled=False,
        _metrics=collections.defaultdict(lambda: collections.defaultdict(list)),
        args=types.SimpleNamespace(delta=None, use_bias_correction_kl=False, steps_per_generation=1, report_to=[]),
    )
    b, t = mask.shape
    if model is None:
        fake._get_per_token_logps_and_entropies = lambda *a, **k: (logp, torch.zeros_like(logp), None)
        ids = (
            torch.zeros(b, 1, dtype=torch.long),
            torch.ones(b, 1, dtype=torch.long),
            torch.zeros(b, t, dtype=torch.long),
        )
    else:
        fake._get_per_token_logps_and_entropies = types.MethodType(
            GRPOTrainer._get_per_token_logps_and_entropies, fake
        )
    inputs = {
        "prompt_ids": ids[0],
        "prompt_mask": ids[1],
        "completion_ids": ids[2],
        "completion_mask": mask,
        "advantages": adv,
        "old_per_token_logps": old,
        "num_items_in_batch": mask.sum(),
    }
    return GRPOTrainer._compute_loss(fake, model, inputs)


_LOGP = [[-1.0, -0.5, -2.0], [-0.3, -1.2, -0.7]]
_OLD = [[-1.2, -0.4, -2.0], [-0.3, -1.0, -0.9]]
_MASK = [[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]]
_ADV = [1.0, -1.0]


def _ratios():
    return [[math.exp(a - b) for a, b in zip(x, y, strict=True)] for x, y in zip(_LOGP, _OLD, strict=True)]


def _ppo_token(rho, a, lo, hi):
    return -min(rho * a, min(max(rho, 1 - lo), 1 + hi) * a)


def _tensors():
    logp = torch.tensor(_LOGP, requires_grad=True)
    return logp, torch.tensor(_OLD), torch.tensor(_ADV), torch.tensor(_MASK)


def test_trl_dr_grpo_loss_divides_by_a_constant():
    logp, old, adv, mask = _tensors()
    loss = _trl_loss("dr_grpo", logp, old, adv, mask, max_len=4)
    tokens = [
        _ppo_token(r, _ADV[i], 0.2, 0.2)
        for i, row in enumerate(_ratios())
        for r, m in zip(row, _MASK[i], strict=True)
        if m
    ]
    assert float(loss.detach()) == pytest.approx(
        sum(tokens) / (2 * 4)
    )  # sum over tokens / (G * max_completion_length)


def test_trl_dapo_loss_is_token_level_with_clip_higher():
    logp, old, adv, mask = _tensors()
    loss = _trl_loss("dapo", logp, old, adv, mask, eps=0.2, eps_high=0.28)
    tokens = [
        _ppo_token(r, _ADV[i], 0.2, 0.28)
        for i, row in enumerate(_ratios())
        for r, m in zip(row, _MASK[i], strict=True)
        if m
    ]
    assert float(loss.detach()) == pytest.approx(sum(tokens) / 5)  # every token of the batch weighs the same
    assert _ratios()[0][0] > 1.2  # this token is clipped at 1.2 without clip-higher, not at 1.28
    sym = _trl_loss("dapo", *_tensors()[:1], old, adv, mask, eps=0.2, eps_high=0.2)
    assert float(sym.detach()) != pytest.approx(float(loss.detach()))


def test_trl_gspo_uses_one_length_normalised_ratio_per_sequence():
    logp, old, adv, mask = _tensors()
    eps, eps_high = 3e-4, 4e-4
    loss = _trl_loss("grpo", logp, old, adv, mask, eps=eps, eps_high=eps_high, level="sequence")
    seq = []
    for i in range(2):
        n = sum(_MASK[i])
        s = math.exp(sum((a - b) * m for a, b, m in zip(_LOGP[i], _OLD[i], _MASK[i], strict=True)) / n)
        seq.append(_ppo_token(s, _ADV[i], eps, eps_high))  # s_i = (pi/pi_old)^(1/|y|), clipped at sequence level
    assert float(loss.detach()) == pytest.approx(sum(seq) / 2, rel=1e-4)  # float32
    # the gradient flows through s_i only for the unclipped sequence
    loss.backward()
    assert logp.grad is not None


def test_trl_cispo_clips_and_detaches_the_weight_every_token_keeps_a_gradient():
    logp, old, adv, mask = _tensors()
    cap = 1.1
    loss = _trl_loss("cispo", logp, old, adv, mask, eps_high=cap)
    w = [[min(r, cap) for r in row] for row in _ratios()]
    expect = -sum(w[i][t] * _ADV[i] * _LOGP[i][t] * _MASK[i][t] for i in range(2) for t in range(3)) / 5
    assert float(loss.detach()) == pytest.approx(expect)
    loss.backward()
    # d/dlogp of -sg(w) * A * logp / n_tokens = -w * A / n: clipped tokens too (PPO-clip would zero them)
    grad = [[-w[i][t] * _ADV[i] * _MASK[i][t] / 5 for t in range(3)] for i in range(2)]
    assert logp.grad.tolist() == [pytest.approx(g) for g in grad]


# ---------------------------------------------------------------------------------------------------------------
# configs name the fix


@pytest.mark.parametrize(
    "loss_type, level, eps_high",
    [("dapo", "token", 0.28), ("grpo", "token", 0.0), ("dr_grpo", "token", 0.0), ("cispo", "token", 1.5)]
    + [("dapo", "sequence", 0.0)],
)
def test_the_engine_computes_trls_gradient_on_one_batch(loss_type, level, eps_high, tiny_llama):
    """The backends' updates, not only their formulas: one batch of unequal prompts and completions (prompts
    left-padded for TRL, rows packed for the engine), old log-probs moved off the current ones so every clip or cap
    binds somewhere, through the engine's log-probs, loss and aggregation (as `grpo.engine_config` maps the GRPO
    settings) and through TRL's `_compute_loss`: the same loss and the same gradient."""
    from peft import LoraConfig, get_peft_model
    from trl.trainer.utils import add_fused_lm_head

    from codelib.policy.logprobs import make_batch, token_logprobs

    model = tiny_llama
    add_fused_lm_head(model, outputs=("log_probs", "entropy"))
    model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"]))
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():  # off B = 0, so the adapter's A matrices have a gradient too
        for name, w in model.named_parameters():
            if "lora_B" in name:
                w.copy_(torch.randn(w.shape, generator=g) * 0.3)
    model.train()
    prompts = [[1, 5, 9], [1, 5, 9], [1, 7], [1, 7], [1, 3, 4, 6], [1, 3, 4, 6]]  # groups of 2 share a prompt
    comps = [[int(x) for x in torch.randint(2, 32, (n,), generator=g)] for n in (5, 2, 8, 3, 6, 1)]
    adv = torch.randn(len(comps), generator=g)
    pw, cw = max(map(len, prompts)), max(map(len, comps))
    left = torch.tensor([pw - len(p) for p in prompts])[:, None]
    lens = torch.tensor([len(c) for c in comps])[:, None]
    trl_mask = (torch.arange(cw)[None] < lens).float()
    batch = make_batch(prompts, comps, 0)  # the engine's layout: each row its prompt then its completion
    m = batch.completion_mask
    with torch.no_grad():  # old log-probs: the current ones, moved per token and per row (so sequence ratios move)
        cur = token_logprobs(model, batch)
    shift = (torch.rand(cur.shape, generator=g) - 0.5) * 1.2 + (torch.rand(len(comps), 1, generator=g) - 0.5)
    old = (cur + shift) * m
    trl_old = torch.zeros(len(comps), cw).masked_scatter(trl_mask.bool(), old[m.bool()])
    params = [w for w in model.parameters() if w.requires_grad]

    settings = grpo.Config(
        loss_type=loss_type, importance_sampling_level=level, clip_eps_high=eps_high, max_new_tokens=8
    )
    cfg = grpo.engine_config(settings)
    logp, _ = token_logprobs(model, batch, with_entropy=True, shared=True)
    per_token, stats = policy_loss(
        cfg.policy_loss, logp, old, adv, m, eps_low=cfg.clip_eps, eps_high=cfg.clip_eps_high or cfg.clip_eps
    )
    ours = aggregate(cfg.loss_agg, per_token, m, cfg.max_new_tokens)
    g_ours = torch.autograd.grad(ours, params)

    ids = (
        torch.tensor([[0] * (pw - len(p)) + p for p in prompts]),  # TRL's layout: prompts left-padded
        (torch.arange(pw)[None] >= left).long(),
        torch.tensor([c + [0] * (cw - len(c)) for c in comps]),
    )
    eps_trl = settings.clip_eps_high or settings.clip_eps  # TRL's epsilon_high (CISPO: the cap itself)
    theirs = _trl_loss(
        loss_type, None, trl_old, adv, trl_mask, eps_high=eps_trl, level=level, max_len=8, model=model, ids=ids
    )
    g_theirs = torch.autograd.grad(theirs, params)
    assert torch.allclose(ours, theirs, atol=1e-6), (ours.item(), theirs.item())
    for a, b in zip(g_ours, g_theirs, strict=True):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-6)
    assert sum(float(b.abs().sum()) for b in g_theirs) > 0
    assert stats["clip_frac_low"] + stats["clip_frac_high"] > 0, stats  # the clip (or CISPO's cap) acts here


def test_bad_options_name_the_fix():
    with pytest.raises(ValueError, match="kl_estimator"):
        reinforce.Config(kl_estimator="k4")
    with pytest.raises(ValueError, match="samples_per_task >= 2"):
        reinforce.Config(baseline="rloo", samples_per_task=1)
    with pytest.raises(ValueError, match="samples_per_task >= 2"):
        reinforce.Config(dynamic_sampling=True, samples_per_task=1)
    with pytest.raises(ValueError, match="eval_every"):
        ppo.Config(keep="best")
    with pytest.raises(ValueError, match="critic: none"):
        ppo.Config(critic="value_head", advantage="rloo")
    with pytest.raises(ValueError, match="advantage gae and critic: value_head go together"):
        ppo.Config(advantage="gae")
    with pytest.raises(ValueError, match="advantage must be one of"):
        ppo.Config(advantage="gea")
    with pytest.raises(ValueError, match="TRL 1.16 has"):
        grpo.Config(loss_type="drgrpo")
    with pytest.raises(ValueError, match="sequence"):
        grpo.Config(importance_sampling_level="seq")


def test_grpo_variants_reach_trl_config():
    args = grpo_trl.grpo_args(load_config(grpo.Config, VARIANTS / "04_grpo_gspo.yaml"), "/tmp/x")
    assert (args.importance_sampling_level, args.loss_type, args.epsilon, args.epsilon_high) == (
        "sequence",
        "grpo",
        3e-4,
        4e-4,
    )
    args = grpo_trl.grpo_args(load_config(grpo.Config, VARIANTS / "04_grpo_cispo.yaml"), "/tmp/x")
    assert (args.loss_type, args.epsilon_high) == ("cispo", 5.0)
    args = grpo_trl.grpo_args(load_config(grpo.Config, VARIANTS / "04_grpo_dr_grpo.yaml"), "/tmp/x")
    assert (args.loss_type, args.scale_rewards) == ("dr_grpo", "none")
    args = grpo_trl.grpo_args(load_config(grpo.Config, VARIANTS / "04_grpo_dapo.yaml"), "/tmp/x")
    assert (args.loss_type, args.epsilon_high, args.mask_truncated_completions) == ("dapo", 0.28, True)
    assert (
        grpo_trl.grpo_args(load_config(grpo.Config, ROOT / "params/tiny/04_grpo.yaml"), "/tmp/x").epsilon_high is None
    )  # TRL: = epsilon


# ---------------------------------------------------------------------------------------------------------------
# every variant runs on the tiny model and changes the adapter

MODULES = {"02": reinforce, "03": ppo, "04": grpo}
# shrunk so that each variant takes a few seconds: 1 step, 4 tasks x 4 samples, 16 new tokens; the length term
# makes rewards differ within a group even where the barely trained test policy passes nothing
SMALL = dict(
    profile="test",
    steps=1,
    max_new_tokens=16,
    save_every=1,
    report_to="none",
    limit=32,
    threads=1,
    learning_rate=1e-2,
    rewards={"pass": 1.0, "length": {"alpha": 1.0}},
)


def _variant_config(path: Path, tiny_sft, **extra):
    mod = MODULES[path.name[:2]]
    shrink = dict(SMALL, init=str(tiny_sft), stage=f"v_{path.stem}", **extra)
    if mod is grpo:  # 2 steps of fresh generations: at the first, every completion of the barely trained policy may
        # hit the length cap alike (no reward variance); the ratio math of num_iterations > 1 is tested above by hand
        shrink.update(prompts_per_step=4, num_generations=4, steps=2, num_iterations=1)
    else:
        shrink.update(batch_size=4, samples_per_task=4 if load_yaml(path)["samples_per_task"] > 1 else 1)
    if mod is ppo:
        shrink.update(ppo_epochs=1)
    return mod, load_config(mod.Config, path, **shrink)


def _lora_b_sum(run) -> float:
    from safetensors.torch import load_file

    return sum(
        float(v.abs().sum()) for k, v in load_file(str(run / "adapter_model.safetensors")).items() if "lora_B" in k
    )


ALGORITHM_VARIANTS = sorted(p.name for p in VARIANTS.glob("0[234]_*.yaml") if "eval_best" not in p.name)


# the TRL path of evaluation during training rides along one GRPO variant (4 tasks, 1 sample: seconds)
GRPO_EVAL = dict(eval_every=2, eval_limit=4, eval_samples=1, keep="best")


@pytest.mark.slow
@pytest.mark.parametrize("name", ALGORITHM_VARIANTS)
def test_variant_runs_and_changes_the_adapter(name, tiny_sft):
    mod, cfg = _variant_config(VARIANTS / name, tiny_sft, **(GRPO_EVAL if name == "04_grpo_dapo.yaml" else {}))
    run = mod.train(cfg)
    rows = read_jsonl(run / "metrics.jsonl")
    if cfg.eval_every:
        assert 0 <= rows[-1]["eval_pass@1"] <= 1 and json.loads((run / "kept.json").read_text())["keep"] == "best"
    assert [r["step"] for r in rows] == list(range(1, cfg.steps + 1)) and all(math.isfinite(r["loss"]) for r in rows)
    assert _lora_b_sum(run) > 0  # LoRA B starts at zero
    assert any(k.startswith("verdicts/") for k in rows[-1]) and "sandbox_share" in rows[-1]
    if getattr(cfg, "dynamic_sampling", False):
        assert {"zero_std_frac", "groups_dropped", "refills", "groups_short"} <= set(rows[0])


@pytest.mark.slow
def test_eval_during_training_keeps_the_best_and_resumes(tiny_sft):
    path = VARIANTS / "02_reinforce_eval_best.yaml"
    _, cfg = _variant_config(path, tiny_sft, eval_every=1, eval_limit=8, eval_samples=1, steps=2)
    assert cfg.keep == "best"
    run = reinforce.train(cfg)
    rows = read_jsonl(run / "metrics.jsonl")
    assert all(0 <= r["eval_pass@1"] <= 1 and "eval_verdicts/passed" in r for r in rows)
    kept = json.loads((run / "kept.json").read_text())
    best = max(rows, key=lambda r: r["eval_pass@1"])  # the first of equals
    assert kept["keep"] == "best" and kept["step"] == best["step"]
    assert (run / "last" / "adapter_model.safetensors").exists()
    if kept["step"] != 2:
        assert _lora_b_sum(run) != _lora_b_sum(run / "last")
    # extended by a step: resumes from step 2 with the best so far, evaluates step 3
    _, longer = _variant_config(path, tiny_sft, eval_every=1, eval_limit=8, eval_samples=1, steps=3)
    reinforce.train(longer)
    rows = read_jsonl(run / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert json.loads((run / "kept.json").read_text())["eval_pass@1"] == max(r["eval_pass@1"] for r in rows)


def test_variants_are_valid_params():
    for p in VARIANTS.glob("0[234]_*.yaml"):
        load_config(MODULES[p.name[:2]].Config, p)
    with pytest.raises(ParamsError):
        load_config(reinforce.Config, VARIANTS / "02_reinforce_rloo.yaml", baseline_kind="x")


# ---------------------------------------------------------------------------------------------------------------
# the comparison table and the telemetry figures, from hand-made run dirs


def _summary(name: str, cs: list[int], verdicts: dict) -> dict:
    per_task = [{"task_id": f"t{i}", "n": 4, "c": c} for i, c in enumerate(cs)]
    p = sum(c / 4 for c in cs) / len(cs)
    return {
        "checkpoint": name,
        "source": f"checkpoints/tiny/{name}",
        "pass@1": p,
        "ci_low": p - 0.1,
        "ci_high": p + 0.1,
        "avg_tokens": 11.0,
        "per_task": per_task,
        "verdicts": verdicts,
        "passed": 0.0,
        "tasks": len(cs),
    }


def test_comparison_table_and_telemetry_figures(tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    from codelib import reports

    monkeypatch.setenv("CODELIB_CHECKPOINTS", str(tmp_path / "ck"))
    monkeypatch.setenv("CODELIB_REPORTS", str(tmp_path / "rep"))
    root = tmp_path / "ck" / "tiny"
    summaries = {
        "sft": _summary("sft", [0, 2, 4, 1], {"passed": 7, "wrong_answer": 9}),
        "reinforce_rloo": _summary("reinforce_rloo", [2, 2, 4, 3], {"passed": 11, "syntax_error": 5}),
        "grpo": _summary("grpo", [1, 1, 4, 2], {"passed": 8, "wrong_answer": 4, "runtime_error": 4}),
    }
    for name, s in summaries.items():
        (root / "eval" / name).mkdir(parents=True)
        (root / "eval" / name / "summary.json").write_text(json.dumps(s))
    run = root / "reinforce_rloo"
    run.mkdir()
    (run / "config.json").write_text(
        json.dumps({"stage": "reinforce_rloo", "baseline": "rloo", "samples_per_task": 8, "seed": 3})
    )
    # a run whose trainer wrote its label: the label names it, whatever its options would say
    (root / "grpo").mkdir()
    (root / "grpo" / "config.json").write_text(
        json.dumps(
            {"stage": "grpo", "label": "GRPO, token-mean", "num_generations": 4, "loss_type": "dapo", "seed": 2}
        )
    )
    grpo_rows = [
        {"step": 1, "time_s": 60.0, "clip_frac": 0.01, "entropy": 0.25, "zero_std_frac": 0.5, "drop_frac": 0.9},
        {"step": 2, "time_s": 60.0, "clip_frac": 0.03, "entropy": 0.75, "zero_std_frac": 0.0, "drop_frac": 0.9},
    ]
    (root / "grpo" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in grpo_rows))
    rows = [
        {
            "step": i,
            "time_s": 30.0,
            "pass_rate": 0.5,
            "reward_mean": 0.5,
            "zero_std_frac": z,
            "eval_pass@1": 0.4,
            "eval_ci_low": 0.3,
            "eval_ci_high": 0.5,
            "verdicts/wrong_answer": 0.3,
        }
        for i, z in ((1, 0.5), (2, 0.25))
    ]
    rows[0]["entropy"] = 0.5  # logged at one step only: the mean is over the steps that logged it
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    df = comparison.write_comparison("tiny")
    row = df.set_index("checkpoint").loc["reinforce_rloo"]
    assert row["entropy"] == pytest.approx(0.5) and math.isnan(row["clip_frac"])  # never logged: not computed, not 0
    assert comparison.wall_time_s([{"train_runtime": 50.0, "time_s": 9.0}, {"train_runtime": 120.0}]) == 120.0
    assert row["algorithm"] == "RLOO" and row["train_min"] == pytest.approx(1.0)
    assert row["zero_std_frac"] == pytest.approx(0.375) and row["diff_vs_baseline"] == pytest.approx(0.25)
    assert row["eval_syntax_error"] == pytest.approx(5 / 16)
    md = (tmp_path / "rep" / "tiny" / "comparison.md").read_text()
    assert "| reinforce_rloo | RLOO | 3 | 68.8 [58.8, 78.8] | +25.0 [" in md and "4 tasks" in md
    assert "| 1.0 | 38% | - | 0.50 | 0 / 0 / 31 / 0 |" in md  # train min, zero-var, clip not computed, entropy, fails
    # the label as written; clip fraction in % of tokens; zero-variance groups, not the dynamic filter's drops
    assert "| grpo | GRPO, token-mean | 2 | 50.0 [40.0, 60.0] | +6.2 [" in md
    assert "| 2.0 | 25% | 2.00% | 0.50 | 25 / 25 / 0 / 0 |" in md
    # the baseline is not paired with itself, and a checkpoint with no run has no training columns ("-", not 0)
    assert "| sft | sft | - | 43.8 [33.8, 53.8] | - | 11.0 | - | - | - | - | 56 / 0 / 0 / 0 |" in md
    sft = df.set_index("checkpoint").loc["sft"]
    assert all(math.isnan(sft[c]) for c in ("seed", "diff_vs_baseline", "train_min", "zero_std_frac", "entropy"))
    figs = {
        "eval_during_training": reports.plot_eval_during_training("tiny", ["reinforce_rloo"]),
        "verdict_classes": reports.plot_verdict_classes("tiny", summaries),
        "training_curves": reports.plot_training_curves("tiny", ["reinforce_rloo"]),
    }
    paths = reports.save_figures(figs, tmp_path / "figs", show=False)
    assert all(p.stat().st_size > 0 for p in paths.values())
    # the interval is the results table's: the evaluator's stored comparison, or one with the evaluation's settings
    from codelib.evaluation import evaluator

    s, base = summaries["reinforce_rloo"], summaries["sft"]
    again = evaluator.compare(s, base, iters=1000, seed=0)
    assert (row["diff_ci_low"], row["diff_ci_high"]) == (again["ci_low"], again["ci_high"])
    s["settings"] = {"seed": 1234, "bootstrap_iters": 5}
    theirs = evaluator.compare(s, base, iters=5, seed=1234)
    assert theirs["ci_low"] != evaluator.compare(s, base, iters=1000, seed=1234)["ci_low"]  # the test can tell
    assert comparison.paired_vs(s, base)["ci_low"] == theirs["ci_low"]
    s["vs_baseline"] = {
        "baseline": "sft",
        "a": "reinforce_rloo",
        "b": "sft",
        "diff": 0.25,
        "ci_low": 0.01,
        "ci_high": 0.49,
        "tasks": 4,
    }
    assert comparison.paired_vs(s, base)["ci_low"] == 0.01  # what the results table shows
    assert comparison.paired_vs(s, {**base, "checkpoint": "other"})["ci_low"] == theirs["ci_low"]
    s["vs_baseline"]["tasks"] = 3  # stored over other tasks than the summary's: recomputed
    assert comparison.paired_vs(s, base)["ci_low"] == theirs["ci_low"]
    # what every row was evaluated on; where rows differ, each group (the largest first) names its checkpoints
    st = {"dataset": "synthetic", "split": "test", "temperature": 0.8, "seed": 1, "bootstrap_iters": 1000}
    same = {"tasks": 300, "n_samples": 4, "settings": st}
    line = "synthetic/test: 300 tasks, 4 samples/task at T=0.8, evaluation seed 1, 1000-resample bootstraps"
    assert comparison.settings_line({"a": same, "b": same}) == line + "."
    other = {"tasks": 100, "n_samples": 4, "settings": st}
    assert comparison.settings_line({"c": other, "a": same, "b": same}) == (
        f"{line} (a, b); synthetic/test: 100 tasks, 4 samples/task at T=0.8, evaluation seed 1, 1000-resample "
        "bootstraps (c)."
    )
    # runs written before trainers recorded a label are named from their options
    legacy = {
        "GSPO": (
            {"stage": "g", "num_generations": 8, "loss_type": "grpo", "importance_sampling_level": "sequence"},
            "GSPO",
        ),
        "REINFORCE++": (
            {"ppo_epochs": 2, "advantage": "reinforce_pp", "kl_coef": 0.01, "kl_estimator": "k1"},
            "REINFORCE++, KL k1 x0.01",
        ),
        "RPO": ({"n_candidates": 4, "loss_type": ["sigmoid", "sft"]}, "DPO + NLL (RPO)"),
        "DPO": ({"n_candidates": 4, "loss_type": ["sigmoid"]}, "DPO"),
        "PPO RLOO": ({"ppo_epochs": 2, "advantage": "rloo"}, "PPO (RLOO A)"),
        "PPO critic": ({"ppo_epochs": 2, "advantage": "gae", "critic": "value_head"}, "PPO (value head)"),
        "PPO": ({"ppo_epochs": 2, "clip_eps": 0.2, "clip_eps_high": 0.28}, "PPO, clip 0.2/0.28"),
        "moving": ({"baseline": "moving_average"}, "REINFORCE (moving-average baseline)"),
        "CISPO": ({"num_generations": 8, "loss_type": "cispo"}, "CISPO"),
        "seq": (
            {"num_generations": 8, "loss_type": "bnpo", "importance_sampling_level": "sequence"},
            "GRPO (bnpo loss), sequence ratio",
        ),
        "DAPO": ({"num_generations": 8, "loss_type": "dapo", "clip_eps_high": 0.28}, "DAPO (TRL)"),
        "stage": ({"stage": "mine"}, "mine"),
        "options": (
            {"baseline": "rloo", "dynamic_sampling": True, "keep": "best"},
            "RLOO, dynamic sampling, keep best",
        ),
    }
    for what, (config, name) in legacy.items():
        assert comparison.algorithm_of(config) == name, what
    assert comparison.algorithm_of({"label": "Mine", "baseline": "rloo"}) == "Mine"
