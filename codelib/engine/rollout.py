"""Rollouts for every online trainer: generate -> judge -> reward, and the samples.jsonl rows they leave.

`rollout` samples `n_per_task` completions of each task from the current policy, judges them all in one sandbox
call, and scores them with the run's reward (`codelib.engine.rewards.make_rewards(cfg.rewards)`): the verdicts are
cached, so a reward term that needs them costs nothing more. REINFORCE and PPO call it once per step; GRPO
hands the same reward's terms to TRL, which samples for itself. Batches of tasks are a function of (seed, step)
alone, so a resumed run sees the batches an uninterrupted one would have; `task_order` says whether each step draws
its own (the default) or the run walks shuffled passes over the tasks, as TRL's sampler does.
"""

from __future__ import annotations

import dataclasses
import random
import time
from dataclasses import dataclass

import torch

from codelib import sandbox
from codelib.engine import metrics, rewards
from codelib.policy.generation import encode_prompts, generate, stops_for
from codelib.tasks import tasks_to_rows


@dataclass
class Rollouts:
    tasks: list  # [N] Task per completion (task i's samples are rows i*n .. i*n+n-1)
    prompt_ids: list[list[int]]
    completion_ids: list[list[int]]
    texts: list[str]
    passed: torch.Tensor  # [N] 1.0 / 0.0
    test_fraction: torch.Tensor  # [N]
    lengths: torch.Tensor  # [N] generated tokens
    rewards: torch.Tensor  # [N] the weighted sum of the reward terms
    terms: dict[str, list]  # reward term name -> [N] values (None where a term does not apply)
    generate_s: float
    sandbox_s: float
    classes: list[str] = dataclasses.field(default_factory=list)  # [N] metrics.VERDICT_CLASSES of each verdict
    finished: torch.Tensor | None = None  # [N] 1.0 where a stop sequence or eos ended it, 0.0 where the budget did
    tamper: list[str] = dataclasses.field(default_factory=list)  # [N] what the sandbox saw it try ("" = nothing)
    # [N] the sampler's log-prob of each completion id (None for a row with none: an empty completion's stand-in eos)
    sampler_logprobs: list = dataclasses.field(default_factory=list)


TASK_ORDERS = ("independent", "epoch")


def batch_tasks(tasks: list, batch_size: int, step: int, seed: int, order: str = "independent") -> list:
    """The tasks of step `step` (from 1): a function of (seed, step) alone, so a resumed run sees the same batches.

    independent: each step draws its tasks alone, so a task can come back before another is seen (a 250-step run of
    32 tasks sees ~80% of 5,000). epoch: a shuffled pass over the tasks, cut into batches, then another (TRL's
    RepeatSampler; an incomplete last batch of a pass is dropped, as there)."""
    if order == "independent":
        rng = random.Random(seed * 1_000_003 + step)
        return rng.sample(tasks, min(batch_size, len(tasks)))
    if order != "epoch":
        raise ValueError(f"task_order must be one of {', '.join(TASK_ORDERS)}; you gave {order!r}")
    per_epoch = max(1, len(tasks) // batch_size)
    epoch, i = divmod(step - 1, per_epoch)
    perm = random.Random(seed * 1_000_003 + epoch).sample(range(len(tasks)), len(tasks))
    return [tasks[j] for j in perm[i * batch_size : (i + 1) * batch_size]]


def rollout(model, tokenizer, tasks: list, n_per_task: int, cfg, seed: int, reward) -> Rollouts:
    """n_per_task completions of each task, judged and scored. cfg: temperature, top_p, max_new_tokens, workers,
    timeout_s; reward: `rewards.make_rewards(cfg.rewards)`."""
    t0 = time.time()
    groups = generate(
        model,
        tokenizer,
        [t.prompt for t in tasks],
        n=n_per_task,
        temperature=cfg.temperature,
        top_p=cfg.top_p,
        max_new_tokens=cfg.max_new_tokens,
        batch_size=len(tasks) * n_per_task,
        seed=seed,
        stop=stops_for(tasks[0]),
        progress=False,
        logprobs=True,  # online configs sample at temperature > 0
    )
    t1 = time.time()
    prompt_ids = encode_prompts(tokenizer, [t.prompt for t in tasks])
    flat_tasks, p_ids, c_ids, texts, finished, lps = [], [], [], [], [], []
    for t, p, group in zip(tasks, prompt_ids, groups, strict=True):
        for c in group:
            finished.append(1.0 if c.finished else 0.0)
            flat_tasks.append(t)
            p_ids.append(p)
            c_ids.append(c.ids if c.ids else [tokenizer.eos_token_id])  # an empty completion still has a token
            lps.append(c.logprobs if c.ids else None)  # the stand-in eos was not drawn
            texts.append(c.text)
    sandbox.configure(workers=cfg.workers, timeout_s=cfg.timeout_s)
    rows = tasks_to_rows(flat_tasks)
    columns = {k: [row[k] for row in rows] for k in rows[0]}
    # one Sandbox.map for the batch; the verdicts are cached, so the reward terms below reuse them
    verdicts = rewards.verdicts(texts, **columns)
    t2 = time.time()
    total, terms = reward.score(texts, completion_ids=c_ids, **columns)
    return Rollouts(
        tasks=flat_tasks,
        prompt_ids=p_ids,
        completion_ids=c_ids,
        texts=texts,
        passed=torch.tensor([1.0 if v.passed else 0.0 for v in verdicts]),
        test_fraction=torch.tensor([rewards.test_fraction_of(v) for v in verdicts]),
        lengths=torch.tensor([float(len(c)) for c in c_ids]),
        rewards=torch.tensor(total),  # float32, as the terms were summed
        terms=terms,
        generate_s=t1 - t0,
        sandbox_s=t2 - t1,
        classes=[metrics.verdict_class(v) for v in verdicts],
        finished=torch.tensor(finished),
        tamper=[sandbox.tamper_of(v) for v in verdicts],
        sampler_logprobs=lps,
    )


def select(ro: Rollouts, rows: list[int]) -> Rollouts:
    """The rollouts of the given rows (in that order); times stay the whole batch's."""
    out = {}
    for f in dataclasses.fields(ro):
        v = getattr(ro, f.name)
        if isinstance(v, torch.Tensor):
            out[f.name] = v[torch.tensor(rows, dtype=torch.long)] if rows else v[:0]
        elif isinstance(v, dict):
            out[f.name] = {k: [vals[i] for i in rows] for k, vals in v.items()}
        elif isinstance(v, list):
            out[f.name] = [v[i] for i in rows] if v else []
        else:
            out[f.name] = v
    return Rollouts(**out)


def concat(parts: list[Rollouts]) -> Rollouts:
    """Several rollouts as one batch (rows in order); times add up."""
    first, out = parts[0], {}
    for f in dataclasses.fields(first):
        vals = [getattr(p, f.name) for p in parts]
        if any(v is None for v in vals):
            out[f.name] = None
        elif isinstance(vals[0], torch.Tensor):
            out[f.name] = torch.cat(vals)
        elif isinstance(vals[0], dict):
            out[f.name] = {k: [x for v in vals for x in v[k]] for k in vals[0]}
        elif isinstance(vals[0], list):
            out[f.name] = [x for v in vals for x in v]
        else:
            out[f.name] = sum(vals)
    return Rollouts(**out)


def fill_dynamic(first: Rollouts, more, n_per_task: int, groups_wanted: int, max_refills: int):
    """DAPO's dynamic sampling: keep the groups whose accuracy varies (0 < #passed < G: a length or format term makes
    rewards differ inside an all-pass or all-fail group, so equal rewards are not the test), refill from `more(r)`
    (fresh rollouts for refill r = 1, 2, ...) until `groups_wanted` groups are kept or `max_refills` are spent; a batch
    still short is topped up with dropped groups (every rank keeps the same batch shape; their count is logged).
    Returns the batch and its stats: groups_dropped (uniform-accuracy groups), groups_seen, refills, groups_short."""
    from codelib.algorithms.advantages import uniform_accuracy_groups

    kept, dropped, ro, refills, gen_s, sandbox_s = [], [], first, 0, 0.0, 0.0
    while True:
        gen_s, sandbox_s = gen_s + ro.generate_s, sandbox_s + ro.sandbox_s
        flat = uniform_accuracy_groups(ro.passed, n_per_task).tolist()
        for g, uniform in enumerate(flat):
            rows = list(range(g * n_per_task, (g + 1) * n_per_task))
            (dropped if uniform else kept).append(select(ro, rows))
        if len(kept) >= groups_wanted or refills >= max_refills:
            break
        refills += 1
        ro = more(refills)
    short = max(0, groups_wanted - len(kept))
    batch = dataclasses.replace(
        concat((kept + dropped[:short])[:groups_wanted]), generate_s=gen_s, sandbox_s=sandbox_s
    )
    stats = {
        "groups_dropped": float(len(dropped)),
        "groups_seen": float(len(kept) + len(dropped)),
        "refills": float(refills),
        "groups_short": float(short),
    }
    return batch, stats


def term_means(ro: Rollouts) -> dict[str, float | None]:
    """`rewards/<name>/mean` of every reward term over the rows it applies to, as TRL's GRPOTrainer logs it (a
    nanmean: a row where the term is None, e.g. one without tests, is left out, not counted 0); None (not computed)
    for a term that applies to no row of the batch."""
    out = {}
    for name, values in ro.terms.items():
        applied = [v for v in values if v is not None]
        out[f"rewards/{name}/mean"] = float(torch.tensor(applied).mean()) if applied else None
    return out


def sample_rows(ro: Rollouts, step: int, advantages: torch.Tensor | None = None) -> list[dict]:
    """One samples.jsonl row per completion: its reward (and each term), verdict, tokens and advantage."""
    rows = []
    for i, (task, text) in enumerate(zip(ro.tasks, ro.texts, strict=True)):
        row = {
            "step": step,
            "task_id": task.task_id,
            "completion": text,
            "reward": round(float(ro.rewards[i]), 6),
            "rewards": {k: None if v[i] is None else round(v[i], 6) for k, v in ro.terms.items()},
            "passed": bool(ro.passed[i]),
            "test_fraction": round(float(ro.test_fraction[i]), 6),
            "tokens": int(ro.lengths[i]),
            "verdict": ro.classes[i] if ro.classes else None,
        }
        if advantages is not None:
            row["advantage"] = round(float(advantages[i]), 6)
        rows.append(row)
    return rows
