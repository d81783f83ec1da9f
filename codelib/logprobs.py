"""Token log-probs of completions under a policy (REINFORCE and PPO): batches, log p, the reference, KL."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Batch:
    """Prompt + completion token rows, right-padded, and which target positions are completion tokens."""

    input_ids: torch.Tensor  # [B, T]
    attention_mask: torch.Tensor  # [B, T]
    completion_mask: torch.Tensor  # [B, T-1]: 1 where target token t+1 belongs to the completion


def make_batch(prompt_ids: list[list[int]], completion_ids: list[list[int]], pad_id: int, device=None) -> Batch:
    rows = [p + c for p, c in zip(prompt_ids, completion_ids, strict=True)]
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    att = torch.zeros((len(rows), width), dtype=torch.long)
    comp = torch.zeros((len(rows), width - 1), dtype=torch.float)
    for i, (p, c) in enumerate(zip(prompt_ids, completion_ids, strict=True)):
        ids[i, : len(p) + len(c)] = torch.tensor(p + c)
        att[i, : len(p) + len(c)] = 1
        # logits at position t predict token t+1: completion tokens p..p+c-1 are predicted at p-1..p+c-2
        comp[i, len(p) - 1 : len(p) + len(c) - 1] = 1.0
    if device is not None:
        ids, att, comp = ids.to(device), att.to(device), comp.to(device)
    return Batch(ids, att, comp)


def token_logprobs(model, batch: Batch, with_entropy: bool = False, with_hidden: bool = False):
    """Per-token log p(token | prefix) of every target position: [B, T-1] (+ entropy [B, T-1], hidden [B, T-1, H])."""
    out = model(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask,
        output_hidden_states=with_hidden,
        use_cache=False,
    )
    logits = out.logits[:, :-1].float()  # [B, T-1, V]
    logp_all = torch.log_softmax(logits, dim=-1)  # [B, T-1, V]
    logp = logp_all.gather(-1, batch.input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)  # [B, T-1]
    extras = {}
    if with_entropy:
        extras["entropy"] = -(logp_all.exp() * logp_all).sum(-1)  # [B, T-1]
    if with_hidden:
        extras["hidden"] = out.hidden_states[-1][:, :-1]  # [B, T-1, H]: the state that predicts token t+1
    return (logp, extras) if extras else logp


@torch.no_grad()
def reference_logprobs(model, batch: Batch) -> torch.Tensor:
    """log-probs under the start policy: the same network with the RL adapter switched off."""
    with model.disable_adapter():
        return token_logprobs(model, batch)


def kl_to_start(logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor) -> float:
    """Mean per-token KL(policy || start) estimate on sampled tokens (k3: exp(r) - 1 - r, r = ref - policy)."""
    r = (ref_logp - logp).clamp(-20, 20)
    k3 = r.exp() - 1 - r  # [B, T-1], >= 0, unbiased for KL
    return float((k3 * mask).sum() / mask.sum().clamp(min=1))
