"""The one online RL engine: every online algorithm (REINFORCE, RLOO, REINFORCE++, PPO, GRPO, Dr. GRPO, DAPO, GSPO,
CISPO) samples, judges, scores, masks and updates here; they differ only by the registered parts `codelib.algorithms`
names (advantage estimator, policy loss, loss aggregation) and their settings.

Per step: roll out `batch_size` tasks x `samples_per_task` completions with the project's sampler and stop
sequences (`rollout.rollout`), judged in one sandbox call; optionally drop groups whose accuracy is uniform and
refill (DAPO's dynamic sampling); mask truncated completions if asked (DAPO's overlong filtering); compute the
sampling policy's log-probs (and values), the start policy's when a KL is used or logged, the advantages; then
`ppo_epochs` passes of minibatch updates (`minibatch_size`): with more than one update per rollout the ratio leaves
1 and a clip can act. Every step logs the clip fractions (low, high), ratio mean/max, entropy, KL and the share of
zero-variance groups, and (where a forward recomputes the old log-probs) their gap to the sampler's; a quantity the
algorithm does not compute is absent from the row (drawn "not computed"). `old_logprobs: sampler` takes the sampler's
own log-probs as the old ones instead of that forward.

    python -m codelib.trainers.online params/...yaml      (or through reinforce / ppo / grpo, which call `train`)
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from codelib.algorithms import ALGORITHMS, AdvantageInput, aggregate, compute_advantages, parts_of, policy_loss
from codelib.algorithms.losses import check_kl, kl_estimate
from codelib.plumbing.params import main_train
from codelib.policy.logprobs import Batch, kl_to_start, make_batch, reference_logprobs, token_logprobs
from codelib.trainers.common import OnlineConfig, OnlineRun

RATIO_LOSSES = ("clip", "gspo", "cispo")  # policy losses that read the sampling policy's log-probs
GROUPED = ("rloo", "grpo", "dr_grpo", "grpo_batch_std", "reinforce_pp_baseline")  # need a task's G samples


VALUE_TRUNKS = ("shared", "detached", "separate")


@dataclass
class Config(OnlineConfig):
    stage: str = "online"  # run directory name
    algorithm: str = "grpo"  # a row of codelib.algorithms.ALGORITHMS: its advantage, policy loss and aggregation
    advantage: str = ""  # override of the algorithm's advantage estimator (empty: the algorithm's)
    policy_loss: str = ""  # override of its policy loss: pg | clip | gspo | cispo (empty: the algorithm's)
    loss_agg: str = ""  # override of its aggregation: token-mean | seq-mean-token-mean | seq-mean-token-sum | ...
    batch_size: int = 16  # tasks per rollout batch
    samples_per_task: int = 8  # completions per task (the group)
    ppo_epochs: int = 1  # passes over each rollout batch
    minibatch_size: int = 0  # completions per gradient step, all processes together; 0: the whole batch
    minibatch_order: str = "rows"  # rows: each epoch shuffles completions | groups: whole groups (a task's samples)
    clip_eps: float = 0.2  # ratio clip range (the lower one when clip_eps_high is set)
    clip_eps_high: float = 0.0  # upper clip 1 + clip_eps_high (DAPO's clip-higher, e.g. 0.28); 0 for clip_eps
    dual_clip: float = 0.0  # c > 1: a negative advantage's loss is bounded by -c A (dual-clip PPO); 0 off
    kl_placement: str = "loss"  # "loss": + beta * KL estimate in the loss | "reward": r - beta * sum of the estimate
    entropy_coef: float = 0.0  # entropy bonus weight
    critic: str = "none"  # "none" | "value_head" (a linear head on the policy's last hidden state)
    value_coef: float = 0.5  # value loss weight (critic: value_head)
    value_clip: float = 0.0  # > 0: the value update is clipped to +- this around the old value (PPO2's value clip)
    value_trunk: str = "shared"  # shared: the value loss also trains the LoRA trunk | detached: only the head |
    # separate: the critic's own copy of the start model with its own LoRA adapter (a second model in memory)
    gamma: float = 1.0  # GAE discount (critic: value_head)
    lam: float = 1.0  # GAE lambda (critic: value_head); gamma and lam at 1 give A_t as r - V_t
    baseline: str = "none"  # advantage reinforce: "none" | "moving_average" (of the batch reward)
    baseline_decay: float = 0.9  # weight of the old baseline in the moving average
    mask_truncated: bool = False  # DAPO's overlong filtering: no loss on completions the token budget cut
    adv_eps: float = 1e-6  # std floor when normalising advantages
    old_from_first_pass: bool = False  # true: the first pass's forward gives logp_old (one forward less; floats move)
    old_logprobs: str = "recompute"  # logp_old of a ratio loss: "recompute" (a forward) | "sampler" (the draws' own)

    def __post_init__(self):
        super().__post_init__()
        adv, loss, agg = parts_of(self.algorithm, self.advantage, self.policy_loss, self.loss_agg)
        self.advantage, self.policy_loss, self.loss_agg = adv, loss, agg
        check_kl(self.kl_estimator, self.kl_placement, self.kl_coef)
        if self.batch_size <= 0 or self.samples_per_task <= 0 or self.ppo_epochs <= 0 or self.minibatch_size < 0:
            raise ValueError("batch_size, samples_per_task and ppo_epochs must be positive, minibatch_size >= 0")
        if adv in GROUPED and self.samples_per_task < 2:
            raise ValueError(f"advantage {adv} compares a task's samples: set samples_per_task >= 2")
        if adv == "batch" and self.batch_size * self.samples_per_task < 2:
            raise ValueError("batch-normalised advantages need at least 2 completions per batch")
        if (adv == "gae") != (self.critic == "value_head"):
            raise ValueError("advantage gae and critic: value_head go together (the value head gives GAE its V_t)")
        if self.critic not in ("none", "value_head") or self.value_trunk not in VALUE_TRUNKS:
            raise ValueError(f"critic must be none | value_head and value_trunk {' | '.join(VALUE_TRUNKS)}")
        if loss == "pg" and (
            self.ppo_epochs > 1 or self.minibatch_size not in (0, self.batch_size * self.samples_per_task)
        ):
            raise ValueError(
                "policy_loss pg has no importance ratio: it is only right for one update per rollout. Use "
                "policy_loss: clip for several epochs or minibatches"
            )
        if not 0 < self.clip_eps <= 1 or self.clip_eps_high < 0 or (self.dual_clip and self.dual_clip <= 1):
            raise ValueError("clip_eps must be in (0, 1], clip_eps_high >= 0 and dual_clip 0 (off) or > 1")
        if self.baseline not in ("none", "moving_average") or not 0 <= self.baseline_decay < 1:
            raise ValueError("baseline must be none | moving_average and baseline_decay in [0, 1)")
        if self.top_p != 1.0:
            raise ValueError(
                f"top_p {self.top_p} truncates the sampling distribution, so the trained log-probs would not be the "
                "sampler's: set top_p: 1 for online training (temperature is handled)"
            )
        if not 0 < self.gamma <= 1 or not 0 <= self.lam <= 1 or self.value_clip < 0:
            raise ValueError("gamma must be in (0, 1], lam in [0, 1] and value_clip >= 0")
        if self.minibatch_order not in ("rows", "groups"):
            raise ValueError(f"minibatch_order must be rows or groups; you gave {self.minibatch_order!r}")
        if self.minibatch_order == "groups" and self.minibatch_size % self.samples_per_task:
            raise ValueError(
                f"minibatch_order: groups puts whole groups in a minibatch: minibatch_size ({self.minibatch_size}) "
                f"must be a multiple of samples_per_task ({self.samples_per_task})"
            )
        if self.old_logprobs not in ("recompute", "sampler"):
            raise ValueError(f"old_logprobs must be recompute or sampler; you gave {self.old_logprobs!r}")
        if self.old_logprobs == "sampler" and self.critic != "none":
            raise ValueError(
                "old_logprobs: sampler saves the rollout policy's forward, but a critic needs that forward for its "
                "values: set old_logprobs: recompute with critic: value_head"
            )
        if self.old_logprobs == "sampler" and loss not in RATIO_LOSSES:
            raise ValueError(
                f"old_logprobs: sampler feeds a ratio loss ({', '.join(RATIO_LOSSES)}); policy_loss {loss} reads no "
                "old log-probs: leave old_logprobs at recompute"
            )

    @property
    def label(self) -> str:
        """The registered algorithm's label, plus every setting that departs from its row or adds a mechanism."""
        a, extra = ALGORITHMS[self.algorithm], []
        if self.advantage != a.advantage:
            extra.append(f"A {self.advantage}")
        if self.policy_loss != a.policy_loss:
            extra.append(f"loss {self.policy_loss}")
        if self.loss_agg != a.loss_agg:
            extra.append(self.loss_agg)
        if self.policy_loss in RATIO_LOSSES and self.clip_eps_high:
            extra.append(f"clip {self.clip_eps}/{self.clip_eps_high}")
        if self.kl_coef:
            extra.append(f"KL {self.kl_estimator} x{self.kl_coef} in the {self.kl_placement}")
        if self.dynamic_sampling:
            extra.append("dynamic sampling")
        if self.mask_truncated:
            extra.append("overlong masked")
        if self.keep == "best":
            extra.append("keep best")
        if self.old_logprobs == "sampler":
            extra.append("old log-probs from the sampler")
        if self.minibatch_order == "groups":
            extra.append("group minibatches")
        if self.critic == "value_head" and self.value_trunk != "shared":
            extra.append(f"{self.value_trunk} value trunk")
        return a.label + (", " + ", ".join(extra) if extra else "")


def value_head(model) -> dict[str, torch.nn.Module]:
    """A linear value head on the policy's last hidden state; V = bias = 0 at the start (no arbitrary advantages)."""
    head = torch.nn.Linear(model.config.hidden_size, 1)
    torch.nn.init.zeros_(head.weight)
    torch.nn.init.zeros_(head.bias)
    return {"value_head": head}


class Critic(torch.nn.Module):
    """PPO's critic on a trunk of its own (`value_trunk: separate`): a second copy of the start model with its own
    LoRA adapter and the linear value head on its last hidden state, as verl and OpenRLHF run a critic model beside
    the actor. The value loss trains this adapter and head only, and the policy's loss never reaches them. Its
    state_dict holds what it trains (the adapter, the modules it saves, the head), not the frozen copy."""

    def __init__(self, trunk):
        super().__init__()
        self.trunk = trunk
        self.head = value_head(trunk)["value_head"]

    def forward(self, batch: Batch, shared: bool = False) -> torch.Tensor:
        """V_t of every target position: [B, T-1] (the hidden state that predicts token t+1, as the shared head)."""
        _, ex = token_logprobs(self.trunk, batch, with_hidden=True, shared=shared)
        return self.head(ex["hidden"].float()).squeeze(-1)

    def _trained(self) -> set[str]:
        return {n for n, p in self.named_parameters() if p.requires_grad}

    def state_dict(self, *args, **kwargs):
        trained = self._trained()
        return {k: v for k, v in super().state_dict(*args, **kwargs).items() if k in trained}

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        missing = sorted(self._trained() - set(state_dict))
        if strict and missing:
            raise RuntimeError(f"the critic's checkpoint lacks {len(missing)} trained tensors, e.g. {missing[0]}")
        return super().load_state_dict(state_dict, strict=False, assign=assign)


def separate_critic(model) -> dict[str, torch.nn.Module]:
    """The heads of `value_trunk: separate`: {"value_head": Critic} on a copy of the policy as just built (the merged
    start model with its fresh adapter, B = 0), so the start model is loaded and merged once and no RNG is drawn."""
    return {"value_head": Critic(copy.deepcopy(model))}


def values_of(run, cfg, batch: Batch, ex: dict) -> torch.Tensor:
    """V_t [B, T-1] from the policy's hidden state (`ex`, shared or detached trunk) or the critic's own forward."""
    head = run.heads["value_head"]
    if cfg.value_trunk == "separate":
        return head(batch, shared=cfg.shared_prefix)
    hidden = ex["hidden"].float()
    return head(hidden.detach() if cfg.value_trunk == "detached" else hidden).squeeze(-1)


def value_loss_of(values, returns, mask, values_old=None, clip: float = 0.0) -> torch.Tensor:
    """Mean squared error of V_t against the returns over completion tokens; with clip > 0 the larger of the plain and
    the clipped error (V_old + clamp(V - V_old, -clip, clip)), as PPO2 and OpenRLHF clip the value update. No 1/2
    factor: value_coef 0.5 here weighs the value loss as value_coef 1.0 does in verl's and TRL's units."""
    err = (values - returns) ** 2
    if clip > 0 and values_old is not None:
        clipped = values_old + (values - values_old).clamp(-clip, clip)
        err = torch.max(err, (clipped - returns) ** 2)
    return (err * mask).sum() / mask.sum().clamp(min=1)


def dropout_active(model) -> bool:
    """Whether a training-mode forward of `model` drops anything (a dropout module, or attention dropout)."""
    config = getattr(model, "config", None)
    return (getattr(config, "attention_dropout", 0.0) or 0.0) > 0 or any(
        isinstance(m, torch.nn.modules.dropout._DropoutNd) and m.p > 0 for m in model.modules()
    )


def _stats_over_ranks(run, returns, mask) -> tuple[float, float] | None:
    """(mean, std) of REINFORCE++'s returns over every rank's tokens (None in one process: computed locally)."""
    if run.acc.num_processes == 1:
        return None
    s = run.gather(torch.stack([(returns * mask).sum(), (returns**2 * mask).sum(), mask.sum()])[None].cpu()).sum(0)
    mean = float(s[0] / s[2].clamp(min=1))
    return mean, max(float(s[1] / s[2].clamp(min=1)) - mean**2, 0.0) ** 0.5


def shuffled(n: int, group: int, mb: int) -> torch.Tensor:
    """An epoch's row order: a permutation of the n rows (group 1), or of whole groups of `group` consecutive rows (a
    task's samples), so that each minibatch of `mb` rows holds whole groups and a shared-prefix forward runs each of
    its prompts once."""
    if group == 1:
        return torch.randperm(n)
    if n % group or mb % group:
        raise ValueError(
            f"minibatch_order: groups needs whole groups of {group} on every rank: {n} rows a rank, minibatches of "
            f"{mb}; set minibatch_size to a multiple of samples_per_task x processes"
        )
    return (torch.randperm(n // group)[:, None] * group + torch.arange(group)[None, :]).reshape(-1)


def sampler_logprobs(ro, batch: Batch) -> torch.Tensor | None:
    """The sampler's log-prob of every completion token in the [N, T-1] layout of `batch` (0 elsewhere), or None when
    a row has none (an empty completion's stand-in eos, a sampler that gives none)."""
    lps = ro.sampler_logprobs
    if not lps or any(x is None for x in lps):
        return None
    mask = batch.completion_mask
    out = torch.zeros(mask.shape, dtype=mask.dtype)  # filled on the CPU, moved once
    for i, (p, c, lp) in enumerate(zip(ro.prompt_ids, ro.completion_ids, lps, strict=True)):
        if len(lp) != len(c):
            return None
        out[i, len(p) - 1 : len(p) - 1 + len(c)] = torch.tensor(lp, dtype=out.dtype)
    return out.to(mask.device)


def sampler_gap(logp: torch.Tensor, sampled: torch.Tensor | None, mask: torch.Tensor) -> dict[str, float]:
    """How far the trainer's recomputed log-probs are from the sampler's on the completion tokens (mean and max
    |difference|): 0 up to float rounding when sampler and trainer run the same numbers; a bf16 sampler, another
    kernel or a stale policy shows here. Empty when there is nothing to compare."""
    if sampled is None:
        return {}
    d = (logp.detach() - sampled).abs() * mask
    return {
        "sampler_logp_diff_mean": float(d.sum() / mask.sum().clamp(min=1)),
        "sampler_logp_diff_max": float(d.max()),
    }


class Olds:
    """What the updates need from the rollout policy: logp_old, values_old, ref_logp, the advantages (and returns)."""

    def __init__(self, cfg: Config, run, batch: Batch, rewards, logp_old, values_old, ref_logp, baseline):
        from codelib.algorithms.advantages import gae_raw, reinforce_pp_returns

        mask = batch.completion_mask
        self.logp_old, self.values_old, self.ref_logp = logp_old, values_old, ref_logp
        self.kl = kl_to_start(logp_old, ref_logp, mask) if ref_logp is not None else None
        use_kl = cfg.kl_coef > 0 and ref_logp is not None
        token_kl = kl_estimate(logp_old, ref_logp, cfg.kl_estimator).detach() if use_kl else None
        in_reward = use_kl and cfg.kl_placement == "reward"
        if in_reward and not cfg.advantage.startswith("reinforce_pp"):
            rewards = rewards - cfg.kl_coef * (token_kl * mask).sum(-1)  # the sequence's KL estimate, in its reward
        x = AdvantageInput(
            rewards=rewards,
            group_size=cfg.samples_per_task,
            mask=mask,
            eps=cfg.adv_eps,
            batch_rewards=run.gather(rewards.cpu()).to(rewards.device),
            baseline=baseline,
            kl=token_kl if in_reward else None,
            kl_coef=cfg.kl_coef if in_reward else 0.0,
            values=values_old,
            gamma=cfg.gamma,
            lam=cfg.lam,
        )
        if cfg.advantage.startswith("reinforce_pp"):
            group = cfg.samples_per_task if cfg.advantage.endswith("baseline") else 0
            kl = token_kl if token_kl is not None and in_reward else torch.zeros_like(logp_old)
            x.batch_stats = _stats_over_ranks(run, reinforce_pp_returns(rewards, kl, mask, x.kl_coef, group), mask)
        self.advantages = compute_advantages(cfg.advantage, x)  # [N] or [N, T-1]
        self.returns = gae_raw(rewards, values_old, mask, cfg.gamma, cfg.lam)[1] if values_old is not None else None
        self.rewards = rewards


def moving_average(baseline: float | None, rewards: torch.Tensor, decay: float) -> float:
    """Exponential moving average of the mean batch reward; the first batch seeds it."""
    mean = float(rewards.mean())
    return mean if baseline is None else decay * baseline + (1 - decay) * mean


def _mean(v: list) -> float | None:
    return sum(v) / len(v) if v else None


def train(cfg: Config, label: str | None = None, record: dict | None = None) -> Path:
    """Run the online engine on `cfg`; returns the run directory (adapter, config.json, metrics.jsonl,
    samples.jsonl, checkpoint/; value_head.pt with a critic). config.json records the registered algorithm and its
    label (`label` replaces it); `record`: the config to write there instead of `cfg` (a GRPO config mapped here)."""
    use_values = cfg.critic == "value_head"
    separate = use_values and cfg.value_trunk == "separate"
    policy_hidden = use_values and not separate  # the value head reads the policy's last hidden state
    heads = (separate_critic if separate else value_head) if use_values else None
    run = OnlineRun(
        cfg, heads=heads, algorithm=cfg.algorithm, label=label or cfg.label, record=record, clip_apart=separate
    )
    device, temp = run.acc.device, cfg.temperature
    baseline = run.extra.get("baseline")
    ratio_loss = cfg.policy_loss in RATIO_LOSSES
    eps_high = cfg.clip_eps_high or cfg.clip_eps
    for step in run.steps():
        t0 = time.time()
        ro = run.rollout(step, cfg.samples_per_task)
        rewards = ro.rewards.to(device)  # [N]
        batch = make_batch(ro.prompt_ids, ro.completion_ids, run.tokenizer.pad_token_id, device)
        mask = batch.completion_mask  # [N, T-1]
        if cfg.mask_truncated and ro.finished is not None:
            mask = mask * ro.finished.to(device)[:, None]
            batch = Batch(batch.input_ids, batch.attention_mask, mask)
        n = len(ro.completion_ids)  # this rank's rows; minibatch_size counts the whole step's, over every rank
        mb = cfg.minibatch_size // run.acc.num_processes or n
        due = run.reference_due(step)  # a KL term, or the logged KL's step
        with torch.no_grad():
            ref_logp = reference_logprobs(run.policy, batch, cfg.shared_prefix, temp) if due else None
        # the sampling policy's log-probs: a separate forward, or (`old_from_first_pass`, an epoch of one minibatch,
        # no dropout) the first update's own forward, detached: the policy has not moved yet, so they are the same
        # numbers (TRL's GRPO does this at one update per generation); `pg` reads no old log-probs at all
        # `old_logprobs: sampler`: the sampler's own log-probs of its draws are the old ones (no forward at all)
        sampled = sampler_logprobs(ro, batch)
        use_sampler = cfg.old_logprobs == "sampler" and sampled is not None  # (the Config allows it with a ratio loss)
        first_pass = not ratio_loss or (
            cfg.old_from_first_pass and mb >= n and not dropout_active(run.policy) and not use_sampler
        )
        mov = baseline if cfg.baseline == "moving_average" else None
        old, gap = None, {}
        if use_sampler:
            old = Olds(cfg, run, batch, rewards, sampled, None, ref_logp, mov)
        elif not first_pass:
            run.train_mode(False)
            with torch.no_grad():
                res = token_logprobs(
                    run.model, batch, with_hidden=policy_hidden, shared=cfg.shared_prefix, temperature=temp
                )
                logp_old, ex = res if policy_hidden else (res, {})
                values_old = values_of(run, cfg, batch, ex) if use_values else None
            old = Olds(cfg, run, batch, rewards, logp_old, values_old, ref_logp, mov)
            gap = sampler_gap(logp_old, sampled, batch.completion_mask)
        run.train_mode(True)
        stats: dict[str, list] = {}
        for _ in range(cfg.ppo_epochs):
            order = shuffled(n, cfg.samples_per_task if cfg.minibatch_order == "groups" else 1, mb)
            for i in range(0, n, mb):
                idx = order[i : i + mb].to(device)
                sub = Batch(batch.input_ids[idx], batch.attention_mask[idx], mask[idx])
                logp, ex = token_logprobs(
                    run.model,
                    sub,
                    with_entropy=True,
                    with_hidden=policy_hidden,
                    shared=cfg.shared_prefix,
                    temperature=temp,
                )
                values = values_of(run, cfg, sub, ex) if use_values else None  # [mb, T-1]
                if old is None:  # the first pass over the whole batch: its rows, in batch order, are the old ones
                    logp_old = torch.empty_like(logp).index_copy_(0, idx, logp.detach())
                    values_old = torch.empty_like(values).index_copy_(0, idx, values.detach()) if use_values else None
                    old = Olds(cfg, run, batch, rewards, logp_old, values_old, ref_logp, mov)
                    gap = sampler_gap(logp_old, sampled, batch.completion_mask)
                m = sub.completion_mask
                per_token, ratio_stats = policy_loss(
                    cfg.policy_loss,
                    logp,
                    old.logp_old[idx],
                    old.advantages[idx],
                    m,
                    eps_low=cfg.clip_eps,
                    eps_high=eps_high,
                    dual_clip=cfg.dual_clip,
                )
                if cfg.kl_coef > 0 and cfg.kl_placement == "loss":
                    per_token = per_token + cfg.kl_coef * kl_estimate(logp, old.ref_logp[idx], cfg.kl_estimator)
                loss = aggregate(cfg.loss_agg, per_token, m, cfg.max_new_tokens)
                entropy = (ex["entropy"] * m).sum() / m.sum().clamp(min=1)
                if cfg.entropy_coef:
                    loss = loss - cfg.entropy_coef * entropy
                if use_values:
                    v_loss = value_loss_of(values, old.returns[idx], m, old.values_old[idx], cfg.value_clip)
                    loss = loss + cfg.value_coef * v_loss
                    stats.setdefault("value_loss", []).append(float(v_loss.detach()))
                grad_norm = run.update(loss, step)
                if separate:
                    stats.setdefault("critic_grad_norm", []).append(float(run.critic_grad_norm))
                for k, v in {
                    "loss": float(loss.detach()),
                    "entropy": float(entropy.detach()),
                    "grad_norm": float(grad_norm),
                    **ratio_stats,
                }.items():
                    stats.setdefault(k, []).append(v)
        if cfg.baseline == "moving_average":
            baseline = moving_average(baseline, run.gather(ro.rewards), cfg.baseline_decay)
        adv = old.advantages
        seq_adv = (adv * mask).sum(-1) / mask.sum(-1).clamp(min=1) if adv.dim() == 2 else adv
        row = {"kl": old.kl, "updates": len(stats["loss"]), **{k: _mean(v) for k, v in stats.items()}, **gap}
        if cfg.old_logprobs == "sampler":
            row["old_from_sampler"] = 1.0 if use_sampler else 0.0  # 0: a row had no sampler log-probs (recomputed)
        if cfg.baseline == "moving_average":
            row["baseline"] = baseline
        if cfg.mask_truncated and ro.finished is not None:
            row["truncated_frac"] = float(1 - ro.finished.mean())
        run.record(step, ro, t0, row, seq_adv.cpu(), extra={"baseline": baseline})
    return run.finish()


if __name__ == "__main__":
    main_train(Config, train)
