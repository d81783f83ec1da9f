"""REINFORCE / PPO / GRPO: the math against hand-computed values, and the trainers on the tiny model."""

import json
import math
import statistics
import types

import pytest
import torch

from codelib.algorithms import AdvantageInput, aggregate, compute_advantages, policy_loss
from codelib.algorithms import formulas as A
from codelib.engine import rewards
from codelib.plumbing.params import read_jsonl
from codelib.policy.logprobs import make_batch, token_logprobs
from codelib.tasks import load_tasks
from codelib.trainers import common, grpo, online, ppo, reinforce

# ---------------------------------------------------------------------------------------------------------------
# the math


def test_reinforce_reward_advantage_and_loss_by_hand():
    passed = [{"passed": True}, {"passed": False}, {"passed": True}]
    reward = rewards.make_rewards({"pass": 1.0, "length": {"alpha": 0.03}})
    r = torch.tensor(reward.score(["a", "b", "c"], verdicts=passed, tokens=[100, 50, 200])[0])
    assert torch.allclose(r, torch.tensor([0.97, -0.015, 0.94]))
    # bit for bit the tensor arithmetic of the loops before rewards.py owned the length term
    assert torch.equal(r, torch.tensor([1.0, 0.0, 1.0]) - 0.03 * torch.tensor([100.0, 50.0, 200.0]) / 100.0)
    assert torch.allclose(compute_advantages("reinforce", AdvantageInput(r, baseline=None)), r)
    adv = compute_advantages("reinforce", AdvantageInput(r, baseline=0.5))
    assert torch.allclose(adv, torch.tensor([0.47, -0.515, 0.44]))
    # REINFORCE's loss: pg per token, summed over each completion's tokens, averaged over completions
    logp = torch.tensor([[-1.0, -1.0], [-1.0, 0.0], [-4.0, 0.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 0.0]])  # log p(y): -2, -1, -4
    per_token, _ = policy_loss("pg", logp, logp.detach(), adv, mask)
    loss = aggregate("seq-mean-token-sum", per_token, mask)
    # -(0.47*-2 + -0.515*-1 + 0.44*-4) / 3
    assert math.isclose(float(loss), -(0.47 * -2 + 0.515 + 0.44 * -4) / 3, rel_tol=1e-6)
    loss.backward()
    assert torch.allclose(logp.grad, (-adv / 3)[:, None] * mask)  # the advantage is a constant, not differentiated


def test_moving_average_baseline():
    b = online.moving_average(None, torch.tensor([1.0, 0.0]), 0.9)
    assert b == 0.5
    assert math.isclose(online.moving_average(b, torch.tensor([1.0, 1.0]), 0.9), 0.9 * 0.5 + 0.1 * 1.0)


def test_batch_normalised_advantages():
    adv = compute_advantages("batch", AdvantageInput(torch.tensor([1.0, 0.0, 0.0, 1.0])))
    assert torch.allclose(adv, torch.tensor([1.0, -1.0, -1.0, 1.0]), atol=1e-5)
    flat = compute_advantages("batch", AdvantageInput(torch.tensor([1.0, 1.0, 1.0])))
    assert torch.all(flat == 0)  # no variance, no signal


def test_clipped_loss_clips_on_both_sides():
    mask = torch.ones(1, 1)
    logp_old = torch.zeros(1, 1)
    # positive advantage, ratio 1.5 > 1.2: the clipped term (1.2 * A) is the min
    loss, clip_frac, _ = A.clipped_policy_loss(
        torch.log(torch.tensor([[1.5]])), logp_old, torch.tensor([2.0]), mask, 0.2
    )
    assert math.isclose(float(loss), -1.2 * 2.0, rel_tol=1e-6) and clip_frac == 1.0
    # negative advantage, ratio 0.5 < 0.8: min(0.5*-1, 0.8*-1) = -0.8 -> loss 0.8
    loss, clip_frac, _ = A.clipped_policy_loss(
        torch.log(torch.tensor([[0.5]])), logp_old, torch.tensor([-1.0]), mask, 0.2
    )
    assert math.isclose(float(loss), 0.8, rel_tol=1e-6) and clip_frac == 1.0
    # positive advantage, ratio 0.5: the unclipped term is the min (pessimistic), gradient flows
    logp = torch.log(torch.tensor([[0.5]])).requires_grad_(True)
    loss, clip_frac, _ = A.clipped_policy_loss(logp, logp_old, torch.tensor([1.0]), mask, 0.2)
    assert math.isclose(float(loss), -0.5, rel_tol=1e-6)
    loss.backward()
    assert math.isclose(float(logp.grad), -0.5, rel_tol=1e-6)  # d(-ratio*A)/dlogp = -ratio*A
    # ratio 1 inside the range: no clipping, approx KL 0
    loss, clip_frac, kl = A.clipped_policy_loss(torch.zeros(1, 1), logp_old, torch.tensor([1.0]), mask, 0.2)
    assert clip_frac == 0.0 and kl == 0.0 and math.isclose(float(loss), -1.0)


def test_mask_excludes_prompt_and_padding():
    logp = torch.tensor([[0.0, 5.0], [0.0, 0.0]])
    mask = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    loss, _, _ = A.clipped_policy_loss(logp, torch.zeros(2, 2), torch.tensor([1.0, 1.0]), mask, 0.2)
    assert math.isclose(float(loss), -1.0, rel_tol=1e-6)  # the masked ratio e^5 never enters


def test_value_loss_and_value_advantages():
    values = torch.tensor([[0.5, 0.5], [0.0, 0.0]])
    rewards = torch.tensor([1.0, 0.0])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    # squared errors on masked tokens: 0.25, 0.25, 0 -> mean 1/6
    returns = rewards[:, None].expand_as(values)  # gamma = lam = 1: every token's target is the terminal reward
    assert math.isclose(float(online.value_loss_of(values, returns, mask)), 0.5 / 3, rel_tol=1e-6)
    adv = compute_advantages("gae", AdvantageInput(rewards, mask=mask, values=values))
    # raw r - V on masked tokens: 0.5, 0.5, 0 -> normalised mean 0, std 1
    on = adv[mask.bool()]
    assert math.isclose(float(on.mean()), 0.0, abs_tol=1e-5)
    assert math.isclose(float(on.std(unbiased=False)), 1.0, rel_tol=1e-3)
    assert adv[1, 1] == 0
    # the value head starts at V = 0 for every state (weight and bias), so the first advantages are r - 0
    head = online.value_head(types.SimpleNamespace(config=types.SimpleNamespace(hidden_size=3)))["value_head"]
    assert float(head(torch.randn(2, 5, 3)).detach().abs().sum()) == 0.0


def test_make_batch_marks_completion_targets():
    b = make_batch([[5, 6], [7]], [[8, 9], [10, 11, 12]], pad_id=0)
    assert b.input_ids.tolist() == [[5, 6, 8, 9], [7, 10, 11, 12]]
    # targets are tokens 1..T-1; completion tokens of row 0 are at targets 1, 2; of row 1 at 0, 1, 2
    assert b.completion_mask.tolist() == [[0, 1, 1], [1, 1, 1]]
    assert b.attention_mask.tolist() == [[1, 1, 1, 1], [1, 1, 1, 1]]


def test_sampler_logprobs_sit_on_the_completion_targets_or_are_none():
    """The sampler's log-probs in the batch's [N, T-1] layout (on the targets make_batch marks, 0 elsewhere); None
    when a row has none (an empty completion's stand-in eos) or not one per token, so the engine recomputes them."""
    prompts, completions = [[5, 6], [7]], [[8, 9], [10, 11, 12]]
    b = make_batch(prompts, completions, pad_id=0)
    lps = [[-0.5, -1.0], [-0.25, -2.0, -0.125]]
    ro = types.SimpleNamespace(prompt_ids=prompts, completion_ids=completions, sampler_logprobs=lps)
    assert online.sampler_logprobs(ro, b).tolist() == [[0.0, -0.5, -1.0], [-0.25, -2.0, -0.125]]
    for bad in ([lps[0], None], [[-0.5], lps[1]], []):
        assert online.sampler_logprobs(types.SimpleNamespace(**{**vars(ro), "sampler_logprobs": bad}), b) is None


def test_config_errors_say_what_to_fix():
    with pytest.raises(ValueError, match="at least 2 generations"):
        grpo.Config(num_generations=1)
    with pytest.raises(ValueError, match="critic must be"):
        ppo.Config(critic="q_head")
    with pytest.raises(ValueError, match="baseline must be"):
        reinforce.Config(baseline="mean")
    with pytest.raises(ValueError, match="old_logprobs: recompute with critic: value_head"):
        ppo.Config(critic="value_head", old_logprobs="sampler")
    with pytest.raises(ValueError, match="reads no old log-probs"):
        reinforce.Config(old_logprobs="sampler")  # REINFORCE's pg loss has no ratio
    with pytest.raises(ValueError, match="old_logprobs must be recompute or sampler"):
        ppo.Config(old_logprobs="vllm")
    with pytest.raises(ValueError, match="old_logprobs and minibatch_order are own-engine"):
        grpo.Config(backend="trl", old_logprobs="sampler")
    # the engine's own checks, each naming what to set
    for adv in ("rloo", "grpo", "dr_grpo", "grpo_batch_std", "reinforce_pp_baseline"):  # they compare a task's samples
        with pytest.raises(ValueError, match=f"advantage {adv} compares a task's samples: set samples_per_task >= 2"):
            online.Config(algorithm="grpo", advantage=adv, samples_per_task=1)
    with pytest.raises(ValueError, match="at least 2 completions per batch"):
        online.Config(algorithm="ppo_no_critic", batch_size=1, samples_per_task=1)
    for algorithm, critic in (("ppo", "none"), ("grpo", "value_head")):  # GAE needs V_t, and V_t only feeds GAE
        with pytest.raises(ValueError, match="advantage gae and critic: value_head go together"):
            online.Config(algorithm=algorithm, critic=critic)
    with pytest.raises(ValueError, match="no importance ratio"):  # minibatches: a second update on moved weights
        online.Config(algorithm="reinforce", batch_size=4, samples_per_task=2, minibatch_size=4)
    online.Config(algorithm="reinforce", batch_size=4, samples_per_task=2, minibatch_size=8)  # the whole batch: one
    for bad in (dict(dual_clip=0.5), dict(dual_clip=1.0), dict(clip_eps=0.0), dict(clip_eps_high=-0.1)):
        with pytest.raises(ValueError, match=r"clip_eps must be in \(0, 1\]"):
            online.Config(algorithm="ppo_no_critic", **bad)
    online.Config(algorithm="ppo_no_critic", dual_clip=3.0)
    with pytest.raises(ValueError, match=r"baseline_decay in \[0, 1\)"):
        reinforce.Config(baseline="moving_average", baseline_decay=1.0)
    for bad in (dict(gamma=0.0), dict(gamma=1.5), dict(lam=-0.1), dict(lam=1.5), dict(value_clip=-1.0)):
        with pytest.raises(ValueError, match=r"gamma must be in \(0, 1\], lam in \[0, 1\]"):
            ppo.Config(critic="value_head", **bad)
    with pytest.raises(ValueError, match="minibatch_order must be rows or groups; you gave 'tasks'"):
        online.Config(algorithm="grpo", minibatch_order="tasks")
    with pytest.raises(ValueError, match=r"minibatch_size \(6\) must be a multiple of samples_per_task \(4\)"):
        online.Config(algorithm="grpo", samples_per_task=4, minibatch_size=6, minibatch_order="groups")
    for name in ("ppo_no_critic", "grpo", "gspo", "cispo"):  # every ratio loss can take the sampler's log-probs
        online.Config(algorithm=name, old_logprobs="sampler")
    # the GRPO stage's own checks, on either backend
    refused = [
        ("backend must be own or trl; you gave 'verl'", dict(backend="verl")),
        ("importance_sampling_level must be token or sequence", dict(importance_sampling_level="group")),
        ("luspo needs importance_sampling_level: sequence", dict(backend="trl", loss_type="luspo")),
        ("scale_rewards must be one of group, none, batch", dict(scale_rewards="task")),
        ("steps_per_generation and num_iterations >= 1", dict(num_iterations=0)),
        (
            "split evenly into steps_per_generation",
            dict(prompts_per_step=3, num_generations=2, steps_per_generation=4),
        ),
        ("task_order must be one of", dict(backend="trl", task_order="shuffled")),
        ("vllm_mode must be colocate or server", dict(backend="trl", vllm_mode="remote")),
        (r"vllm_gpu_memory_utilization must be in \(0, 1\)", dict(backend="trl", vllm_gpu_memory_utilization=1.0)),
        ("use_vllm with load_in_4bit", dict(backend="trl", use_vllm=True, load_in_4bit=True)),
        ("must be > 1; you gave 1.0", dict(loss_type="cispo", clip_eps_high=1.0)),
        (
            "runs on TRL only: set backend: trl, or importance_sampling_level: token",
            dict(loss_type="cispo", importance_sampling_level="sequence"),
        ),
        ("use_vllm samples through TRL's vLLM integration: set backend: trl", dict(use_vllm=True)),
        ("own-engine options", dict(backend="trl", entropy_coef=0.01)),
        ("own-engine options", dict(backend="trl", kl_placement="reward")),
        ("mask_truncated_completions would also mask", dict(backend="trl", mask_truncated_completions=True)),
    ]
    for message, kw in refused:
        with pytest.raises(ValueError, match=message):
            grpo.Config(**kw)


def test_nan_loss_stops_with_message():
    with pytest.raises(FloatingPointError, match="lower learning_rate"):
        common.check_finite(torch.tensor(float("nan")), 7)


# ---------------------------------------------------------------------------------------------------------------
# the trainers on the tiny model


def _lora_changed(run, start_state=None) -> bool:
    from safetensors.torch import load_file

    weights = load_file(str(run / "adapter_model.safetensors"))
    lora_b = [v for k, v in weights.items() if "lora_B" in k]
    return bool(lora_b) and any(float(v.abs().sum()) > 0 for v in lora_b)  # B starts at zero


def _rl_kwargs(stage):
    return dict(
        profile="test",
        stage=stage,
        steps=2,
        batch_size=8,
        max_new_tokens=24,
        save_every=1,
        report_to="none",
        limit=64,
        learning_rate=1e-2,
        threads=1,
    )


@pytest.mark.slow
def test_log_probs_match_generation_scores(tiny_sft):
    """Recomputed log-probs of sampled tokens equal what the policy assigned while sampling."""
    from codelib.policy.generation import encode_prompts
    from codelib.policy.models import load_policy

    model, tok = load_policy(tiny_sft)
    prompt = "def f(x):\n    "
    ids = torch.tensor([encode_prompts(tok, [prompt])[0]], device=model.device)  # cuda where load_policy put it
    torch.manual_seed(0)
    gen = model.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        do_sample=True,
        max_new_tokens=8,
        top_k=None,
        output_scores=True,
        return_dict_in_generate=True,
        pad_token_id=tok.pad_token_id,
    )
    new = gen.sequences[0, ids.shape[1] :].tolist()
    scored = [float(torch.log_softmax(s[0], -1)[t]) for s, t in zip(gen.scores, new, strict=False)]
    batch = make_batch([ids[0].tolist()], [new], tok.pad_token_id, device=model.device)
    with torch.no_grad():
        logp = token_logprobs(model, batch)
    recomputed = logp[0][batch.completion_mask[0].bool()].tolist()
    assert len(recomputed) == len(scored)
    tol = 1e-4 if model.dtype == torch.float32 else 0.1  # bf16 on a GPU: cached vs full forwards round apart
    assert max(abs(a - b) for a, b in zip(recomputed, scored, strict=True)) < tol


@pytest.mark.slow
def test_reinforce_trains_lora_and_logs_shared_keys(tiny_sft):
    run = reinforce.train(reinforce.Config(init=str(tiny_sft), **{**_rl_kwargs("reinforce"), "save_every": 5}))
    rows = read_jsonl(run / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    # the last step is checkpointed, though 2 is not a multiple of save_every
    assert torch.load(run / "checkpoint" / "state.pt", weights_only=False)["step"] == 2
    for key in ("loss", "reward_mean", "reward_std", "pass_rate", "completion_len", "kl", "time_s", "sandbox_share"):
        assert all(math.isfinite(r[key]) for r in rows), key
    assert _lora_changed(run)
    assert json.loads((run / "adapter_config.json").read_text())["base_model_name_or_path"].endswith("merged")
    _assert_samples(run, steps=2, per_step=8, rows=rows)
    # the stage's default moving-average baseline: the first batch's mean reward seeds it, then 0.9 old + 0.1 new
    first = rows[0]["reward_mean"]
    assert rows[0]["baseline"] == pytest.approx(first, abs=1e-6)
    assert rows[1]["baseline"] == pytest.approx(0.9 * first + 0.1 * rows[1]["reward_mean"], abs=1e-6)


def _assert_samples(run, steps: int, per_step: int, rows: list[dict]) -> None:
    """samples.jsonl: every completion of every step, its reward and verdict, agreeing with metrics.jsonl."""
    samples = read_jsonl(run / "samples.jsonl")
    assert [s["step"] for s in samples] == [s for s in range(1, steps + 1) for _ in range(per_step)]
    assert all(s["task_id"] and isinstance(s["completion"], str) for s in samples)
    for r in rows:
        mine = [s for s in samples if s["step"] == r["step"]]
        if "passed" in mine[0]:
            assert math.isclose(sum(s["passed"] for s in mine) / len(mine), r["pass_rate"], abs_tol=1e-6)
        assert math.isclose(sum(s["reward"] for s in mine) / len(mine), r["reward_mean"], abs_tol=1e-4)
        assert math.isclose(sum(s["tokens"] for s in mine) / len(mine), r["completion_len"], abs_tol=1e-4)
        if len(mine) > 1:  # the sample standard deviation, as torch's std and TRL's reward_std give it
            assert math.isclose(
                statistics.stdev(s["reward"] for s in mine), r["reward_std"], rel_tol=1e-2, abs_tol=1e-6
            )


@pytest.mark.slow
def test_ppo_value_head_trains(tiny_sft):
    cfg = ppo.Config(
        init=str(tiny_sft),
        critic="value_head",
        entropy_coef=0.01,
        max_grad_norm=0.5,
        ppo_epochs=2,
        **_rl_kwargs("ppo_vh"),
    )
    run = ppo.train(cfg)
    rows = read_jsonl(run / "metrics.jsonl")
    assert all(math.isfinite(r[k]) for r in rows for k in ("loss", "clip_frac", "approx_kl", "value_loss", "entropy"))
    assert rows[-1]["value_loss"] > 0
    _assert_samples(run, steps=2, per_step=8, rows=rows)
    head = torch.load(run / "value_head.pt")
    assert float(head["weight"].abs().sum()) > 0  # started at zero
    assert _lora_changed(run)


@pytest.mark.slow
def test_shared_prefix_trains_as_the_packed_forward_does(tiny_sft):
    """PPO with a value head on groups of 4 samples: `shared_prefix` runs each prompt once and the first update
    sees the same rollouts, loss, value loss and KL (to float rounding), and moves the adapter the same way."""
    from safetensors.torch import load_file

    runs = {}
    for shared in (False, True):
        kw = {**_rl_kwargs(f"ppo_shared_{shared}"), "steps": 1, "batch_size": 4}
        runs[shared] = ppo.train(
            ppo.Config(init=str(tiny_sft), critic="value_head", samples_per_task=4, shared_prefix=shared, **kw)
        )
    a, b = (read_jsonl(runs[s] / "metrics.jsonl")[0] for s in (False, True))
    assert a["reward_mean"] == b["reward_mean"] and a["completion_len"] == b["completion_len"]  # same rollouts
    for key in ("loss", "value_loss", "kl", "approx_kl"):
        assert math.isclose(a[key], b[key], rel_tol=1e-3, abs_tol=1e-5), (key, a[key], b[key])
    wa, wb = (load_file(str(runs[s] / "adapter_model.safetensors")) for s in (False, True))
    for k in wa:
        if "lora_B" in k:
            assert torch.allclose(wa[k], wb[k], atol=1e-4), k
    assert json.loads((runs[True] / "config.json").read_text())["shared_prefix"] is True


@pytest.mark.slow
def test_old_from_first_pass_drops_one_forward_and_trains_as_the_separate_one(tiny_sft, monkeypatch):
    """`old_from_first_pass`: the first epoch's forward gives logp_old and the old values, so an update runs one
    forward less; at one epoch the ratio is then exactly 1 (clip_frac and approx_kl 0), the same rollouts train
    the same way to float rounding, and a model with dropout (or minibatches) keeps the separate forward."""
    from safetensors.torch import load_file

    class Attention(torch.nn.Module):  # attention dropout counts, as a dropout module with p > 0 does
        config = types.SimpleNamespace(attention_dropout=0.1)

    assert online.dropout_active(Attention()) and online.dropout_active(torch.nn.Sequential(torch.nn.Dropout(0.1)))
    assert not online.dropout_active(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.0)))
    calls = []
    original = online.token_logprobs
    monkeypatch.setattr(online, "token_logprobs", lambda *a, **k: calls.append(1) or original(*a, **k))
    runs, forwards = {}, {}
    for first in (False, True):
        calls.clear()
        kw = {**_rl_kwargs(f"ppo_first_{first}"), "steps": 2, "batch_size": 4}
        runs[first] = ppo.train(
            ppo.Config(
                init=str(tiny_sft),
                critic="value_head",
                samples_per_task=4,
                ppo_epochs=1,
                old_from_first_pass=first,
                **kw,
            )
        )
        forwards[first] = len(calls)
    assert forwards == {False: 4, True: 2}  # 2 steps: old + update each, against the update alone
    a, b = (read_jsonl(runs[f] / "metrics.jsonl") for f in (False, True))
    assert a[0]["reward_mean"] == b[0]["reward_mean"] and a[0]["completion_len"] == b[0]["completion_len"]
    assert all(r["clip_frac"] == 0.0 and r["approx_kl"] == 0.0 for r in b)
    for key in ("loss", "value_loss"):
        assert all(math.isclose(x[key], y[key], rel_tol=1e-3, abs_tol=1e-5) for x, y in zip(a, b, strict=True)), key
    wa, wb = (load_file(str(runs[f] / "adapter_model.safetensors")) for f in (False, True))
    assert all(torch.allclose(wa[k], wb[k], atol=1e-4) for k in wa)
    calls.clear()
    ppo.train(
        ppo.Config(
            init=str(tiny_sft),
            samples_per_task=2,
            ppo_epochs=1,
            old_from_first_pass=True,
            lora_dropout=0.1,
            **{**_rl_kwargs("ppo_first_dropout"), "steps": 1, "batch_size": 4},
        )
    )
    assert len(calls) == 2  # dropout: the old log-probs need their own forward


@pytest.mark.slow
def test_sampler_logprobs_are_the_recomputed_ones_and_leave_the_draws_alone(tiny_sft):
    """generate(logprobs=True) draws the same ids from the same seed and gives each id's log-prob under the
    distribution it was drawn from: at T = 0.7 the recomputed, tempered log-probs of the trainer's forward (to float
    rounding), and not the untempered ones."""
    from codelib.policy.generation import encode_prompts, generate
    from codelib.policy.models import load_policy

    model, tok = load_policy(tiny_sft)
    prompts = [t.prompt for t in load_tasks("synthetic", "rl")[:6]]
    kw = dict(n=3, temperature=0.7, max_new_tokens=16, batch_size=18, seed=5, progress=False)
    plain = generate(model, tok, prompts, **kw)
    scored = generate(model, tok, prompts, logprobs=True, **kw)
    assert [[c.ids for c in g] for g in plain] == [[c.ids for c in g] for g in scored]
    assert all(c.logprobs is None for g in plain for c in g)
    rows = [(p, c) for p, g in zip(encode_prompts(tok, prompts), scored, strict=True) for c in g]
    assert all(len(c.logprobs) == len(c.ids) and max(c.logprobs) <= 0 for _, c in rows)
    batch = make_batch([p for p, _ in rows], [c.ids for _, c in rows], tok.pad_token_id, device=model.device)
    mask = batch.completion_mask.bool()
    with torch.no_grad():
        tempered, untempered = (token_logprobs(model, batch, temperature=t) for t in (0.7, 1.0))
    sampled = torch.tensor([x for _, c in rows for x in c.logprobs])
    assert float((tempered[mask].cpu() - sampled).abs().max()) < 1e-4
    assert float((untempered[mask].cpu() - sampled).abs().max()) > 1e-2  # the temperature is in them
    with pytest.raises(ValueError, match="temperature > 0"):
        generate(model, tok, prompts[:1], temperature=0.0, logprobs=True, progress=False)


def _two_minibatch_grpo(tiny_sft, stage: str, prompts: int, group: int, **kw) -> grpo.Config:
    """A 2-step GRPO run on the own engine (the trainers' test settings), two minibatch updates per rollout, with a
    length term in the reward (a gradient in every group, passing or not)."""
    base = {k: v for k, v in _rl_kwargs(stage).items() if k != "batch_size"}  # GRPO counts prompts_per_step
    return grpo.Config(
        init=str(tiny_sft),
        prompts_per_step=prompts,
        num_generations=group,
        steps_per_generation=2,
        rewards={"pass": 1.0, "length": {"alpha": 1.0}},
        **base,
        **kw,
    )


@pytest.mark.slow
def test_old_logprobs_sampler_drops_the_old_forward_and_logs_the_gap(tiny_sft, monkeypatch):
    """Two minibatch updates per rollout: `old_logprobs: recompute` runs a forward of the rollout policy per step
    and logs how far it is from the sampler's own log-probs (float rounding here); `sampler` takes the sampler's
    and runs one forward less, from the same rollouts to the same first loss (to float rounding), and says so."""
    calls = []
    original = online.token_logprobs
    monkeypatch.setattr(online, "token_logprobs", lambda *a, **k: calls.append(1) or original(*a, **k))
    rows, forwards = {}, {}
    for mode in ("recompute", "sampler"):
        calls.clear()
        cfg = _two_minibatch_grpo(tiny_sft, f"grpo_old_{mode}", 4, 4, old_logprobs=mode)
        rows[mode] = read_jsonl(grpo.train(cfg) / "metrics.jsonl")
        forwards[mode] = len(calls)
    assert forwards == {"recompute": 6, "sampler": 4}  # per step: (old +) 2 minibatch updates
    a, b = rows["recompute"], rows["sampler"]
    assert all(0 <= r["sampler_logp_diff_mean"] <= r["sampler_logp_diff_max"] < 1e-4 for r in a)
    assert all("sampler_logp_diff_mean" not in r and r["old_from_sampler"] == 1.0 for r in b)
    assert all("old_from_sampler" not in r for r in a)
    assert a[0]["reward_mean"] == b[0]["reward_mean"] and a[0]["completion_len"] == b[0]["completion_len"]
    assert math.isclose(a[0]["loss"], b[0]["loss"], rel_tol=1e-3, abs_tol=1e-5)
    assert all(r["ratio_max"] > 1.0 for r in a + b)  # the second minibatch runs a moved policy
    # a batch without the sampler's log-probs (a row's stand-in eos) falls back to the forward, and the row says so
    monkeypatch.setattr(online, "sampler_logprobs", lambda ro, batch: None)
    calls.clear()
    cfg = _two_minibatch_grpo(tiny_sft, "grpo_old_fallback", 4, 4, old_logprobs="sampler")
    rows = read_jsonl(grpo.train(cfg) / "metrics.jsonl")
    assert len(calls) == 6 and all(r["old_from_sampler"] == 0.0 for r in rows)


def test_group_minibatch_order_keeps_each_tasks_samples_together():
    torch.manual_seed(0)
    order = online.shuffled(24, 4, 8)
    assert sorted(order.tolist()) == list(range(24))
    for i in range(0, 24, 8):
        groups = {int(r) // 4 for r in order[i : i + 8]}
        assert len(groups) == 2 and sorted(order[i : i + 8].tolist()) == [
            r for g in sorted(groups) for r in range(4 * g, 4 * g + 4)
        ]
    assert online.shuffled(24, 1, 8).tolist() != list(range(24))
    with pytest.raises(ValueError, match="multiple of samples_per_task"):
        online.shuffled(24, 4, 6)
    with pytest.raises(ValueError, match="multiple of samples_per_task"):
        grpo.Config(prompts_per_step=8, num_generations=4, steps_per_generation=16, minibatch_order="groups")


@pytest.mark.slow
def test_group_minibatches_let_the_shared_prefix_forward_act(tiny_sft, monkeypatch):
    """With several minibatches, shuffled rows put most of a minibatch's rows on distinct prompts, so the
    shared-prefix forward does not apply; whole groups per minibatch (`minibatch_order: groups`) let it run each
    prompt once in every update."""
    from codelib.policy import logprobs

    applied = []
    original = logprobs.shared_prefix_logprobs

    def spy(*a, **k):
        out = original(*a, **k)
        if torch.is_grad_enabled():  # the updates' forwards (not the reference's)
            applied.append(out is not None)
        return out

    monkeypatch.setattr(logprobs, "shared_prefix_logprobs", spy)
    seen = {}
    for order in ("rows", "groups"):
        applied.clear()
        cfg = _two_minibatch_grpo(
            tiny_sft, f"grpo_order_{order}", 8, 2, shared_prefix=True, old_logprobs="sampler", minibatch_order=order
        )
        rows = read_jsonl(grpo.train(cfg) / "metrics.jsonl")
        assert all(r["updates"] == 2 and r["ratio_max"] > 1.0 for r in rows)
        seen[order] = list(applied)
    assert seen == {"rows": [False] * 4, "groups": [True] * 4}


@pytest.mark.slow
def test_kl_every_skips_the_reference_forward_and_changes_no_weight(tiny_sft, monkeypatch):
    """kl_every: with kl_coef 0 the start policy's forward runs only on the steps that log the KL (every N and the
    last), and training is bit for bit the run that logs it every step; a KL term still runs it every step."""
    from safetensors.torch import load_file

    calls = []
    original = online.reference_logprobs
    monkeypatch.setattr(online, "reference_logprobs", lambda *a, **k: calls.append(1) or original(*a, **k))
    runs, logged = {}, {}
    for every in (1, 2, 0):
        calls.clear()
        runs[every] = reinforce.train(
            reinforce.Config(init=str(tiny_sft), kl_every=every, **{**_rl_kwargs(f"kl_every{every}"), "steps": 3})
        )
        logged[every] = [r["step"] for r in read_jsonl(runs[every] / "metrics.jsonl") if "kl" in r]
        assert len(calls) == len(logged[every]), every
    assert logged == {1: [1, 2, 3], 2: [2, 3], 0: []}
    weights = {e: load_file(str(r / "adapter_model.safetensors")) for e, r in runs.items()}
    assert all(torch.equal(weights[1][k], weights[e][k]) for e in (2, 0) for k in weights[1])
    calls.clear()
    run = reinforce.train(
        reinforce.Config(init=str(tiny_sft), kl_every=0, kl_coef=0.1, **{**_rl_kwargs("kl_term"), "steps": 2})
    )
    assert len(calls) == 2 and all("kl" in r for r in read_jsonl(run / "metrics.jsonl"))
    with pytest.raises(ValueError, match="kl_every"):
        reinforce.Config(kl_every=-1)


@pytest.mark.slow
def test_ppo_resume_gives_the_same_next_step(tiny_sft):
    """Stopped after step 2 and started again, step 3 matches an uninterrupted 3-step run."""
    full = ppo.train(ppo.Config(init=str(tiny_sft), **{**_rl_kwargs("ppo_full"), "steps": 3}))
    part = ppo.Config(init=str(tiny_sft), **{**_rl_kwargs("ppo_part"), "steps": 2})
    ppo.train(part)
    resumed = ppo.train(ppo.Config(init=str(tiny_sft), **{**_rl_kwargs("ppo_part"), "steps": 3}))
    a, b = read_jsonl(full / "metrics.jsonl"), read_jsonl(resumed / "metrics.jsonl")
    assert [r["step"] for r in b] == [1, 2, 3]
    assert read_jsonl(full / "samples.jsonl") == read_jsonl(resumed / "samples.jsonl")  # nothing repeated or lost
    for key in ("loss", "reward_mean", "pass_rate", "completion_len", "clip_frac"):
        assert math.isclose(a[2][key], b[2][key], rel_tol=1e-4, abs_tol=1e-6), key


@pytest.mark.slow
def test_reinforce_resume_after_kill(tiny_sft, tmp_path):
    """Kill the process mid-run; a second start continues from the last checkpoint with the same step count."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import yaml

    cfg = reinforce.Config(init=str(tiny_sft), **{**_rl_kwargs("reinforce_kill"), "steps": 40})
    from codelib.plumbing.params import config_to_dict

    params = tmp_path / "p.yaml"
    params.write_text(yaml.safe_dump(config_to_dict(cfg)))
    env = {**os.environ}
    proc = subprocess.Popen(
        [sys.executable, "-m", "codelib.trainers.reinforce", str(params)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    ckpt = cfg.run_dir / "checkpoint" / "state.pt"
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        rows = read_jsonl(cfg.run_dir / "metrics.jsonl")
        if ckpt.exists() and len(rows) >= 3:
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    saved = torch.load(ckpt, weights_only=False)["step"]
    assert 0 < saved < 40
    for name in ("metrics.jsonl", "samples.jsonl"):  # a step logged after the last checkpoint, as a kill can leave
        with open(cfg.run_dir / name, "a") as f:
            f.write(json.dumps({"step": saved + 1, "stale": True}) + "\n")
    short = reinforce.Config(init=str(tiny_sft), **{**_rl_kwargs("reinforce_kill"), "steps": saved + 2})
    reinforce.train(short)
    steps = [r["step"] for r in read_jsonl(cfg.run_dir / "metrics.jsonl")]
    assert steps == list(range(1, saved + 3))  # nothing repeated, nothing skipped
    samples = read_jsonl(cfg.run_dir / "samples.jsonl")
    assert [s["step"] for s in samples] == [s for s in range(1, saved + 3) for _ in range(8)]
    assert not any(s.get("stale") for s in samples)


@pytest.mark.slow
def test_grpo_trains_lora_with_project_rewards(tiny_sft):
    cfg = grpo.Config(
        profile="test",
        init=str(tiny_sft),
        steps=2,
        prompts_per_step=4,
        num_generations=4,
        max_new_tokens=24,
        save_every=1,
        report_to="none",
        limit=32,
        learning_rate=1e-2,
        beta=0.01,
        rewards={"pass": 1.0, "compile": 0.2, "length": {"alpha": 1.0}},
        threads=1,
    )
    run = grpo.train(cfg)
    rows = read_jsonl(run / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    assert {"rewards/pass_reward/mean", "rewards/compile_reward/mean", "zero_std_frac", "kl"} <= set(rows[0])
    # the length term differs within every group, so there is a gradient even where no completion passes
    assert _lora_changed(run)
    _assert_samples(run, steps=2, per_step=16, rows=rows)
    assert set(read_jsonl(run / "samples.jsonl")[0]["rewards"]) == {"pass_reward", "compile_reward", "length_penalty"}


def test_multi_criteria_reward_terms_by_hand():
    from codelib.tasks import load_tasks, tasks_to_rows

    t = load_tasks("synthetic", "train")[0]
    texts = [t.canonical_solution, "    return (\n"]
    rows = tasks_to_rows([t, t])
    columns = {k: [r[k] for r in rows] for k in rows[0]}
    reward = rewards.make_rewards({"pass": 1.0, "compile": 0.5, "length": {"alpha": 0.1}})
    total, terms = reward.score(texts, completion_ids=[[2] * 10, [2] * 30], **columns)
    # canonical: 1 + 0.5*1 - 0.1*10/100; broken: 0 + 0.5*0 - 0.1*30/100; the length term counted once
    assert total == pytest.approx([1.5 - 0.01, -0.03])
    assert list(terms) == ["pass_reward", "compile_reward", "length_penalty"]
    assert terms["pass_reward"] == [1.0, 0.0] and terms["compile_reward"] == [1.0, 0.0]


@pytest.mark.slow
def test_changed_settings_start_over_instead_of_resuming(tiny_sft):
    kw = {**_rl_kwargs("reinforce_restart"), "steps": 2}
    run = reinforce.train(reinforce.Config(init=str(tiny_sft), **kw))
    # fewer steps than the checkpoint holds: a resume would keep the longer run's weights; start over instead
    reinforce.train(reinforce.Config(init=str(tiny_sft), **{**kw, "steps": 1}))
    assert [r["step"] for r in read_jsonl(run / "metrics.jsonl")] == [1]
    assert (run / "checkpoint.previous").exists()
    # another learning rate: also a fresh run
    reinforce.train(reinforce.Config(init=str(tiny_sft), **{**kw, "learning_rate": 5e-3}))
    assert [r["step"] for r in read_jsonl(run / "metrics.jsonl")] == [1, 2]
