"""Token log-probs of completions under a policy (REINFORCE and PPO): batches, log p, the reference, KL.

Speed (issue 14): `token_logprobs` runs the model on *packed* rows. A batch of prompt + completion rows, right-padded
to the longest, is on the tiny profile about half padding; the rows are packed first-fit into as few rows of the same
width as they fit (positions restart at 0 for each sequence, so transformers' attention masks keep the sequences
apart), the model runs on those, and the results are scattered back to the [B, T-1] layout the trainers index.
Positions past a row's last token come back as 0 (they were padding; every consumer masks them). The values equal the
padded forward's up to float rounding (~1e-6: other matmul shapes); `pack=False` keeps the padded forward.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

PACK = True  # token_logprobs on packed rows (issue 14); False: the padded forward, as before (bench.rl --before)


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


@dataclass
class Packed:
    """A Batch's sequences packed into fewer rows of the same width."""

    input_ids: torch.Tensor  # [R, T]
    position_ids: torch.Tensor  # [R, T]: 0.. per sequence; the padding at a row's end counts as one more sequence
    index: torch.Tensor  # [B, T-1]: flat index into a packed [R, T] tensor of the state that predicts target t+1
    valid: torch.Tensor  # [B, T-1] bool: t + 1 < the row's length (a real target)


def pack(batch: Batch) -> Packed | None:
    """First-fit-decreasing packing of the batch's rows (deterministic); None when it would save nothing or the rows
    are not right-padded (then the padded forward runs)."""
    att = batch.attention_mask
    lengths = att.sum(-1)  # [B]
    B, T = att.shape
    if B < 2 or T < 2 or bool((lengths < 1).any()):
        return None
    ar = torch.arange(T, device=att.device)
    if not bool(((ar[None, :] < lengths[:, None]).long() == att).all()):  # only right padding packs
        return None
    lens = lengths.tolist()
    order = sorted(range(B), key=lambda i: (-lens[i], i))
    free: list[int] = []  # room left in each packed row
    where = [(0, 0)] * B  # row i -> (packed row, offset)
    for i in order:
        r = next((r for r, room in enumerate(free) if room >= lens[i]), None)
        if r is None:
            free.append(T)
            r = len(free) - 1
        where[i] = (r, T - free[r])
        free[r] -= lens[i]
    R = len(free)
    if R >= B:
        return None
    ids = torch.full((R, T), int(batch.input_ids[0, -1]), dtype=batch.input_ids.dtype, device=att.device)
    pos = torch.zeros((R, T), dtype=torch.long, device=att.device)
    for r, room in enumerate(free):  # the tail of each packed row: one padding "sequence" of its own
        pos[r, T - room :] = torch.arange(room, device=att.device)
    rows = torch.tensor([w[0] for w in where], device=att.device)  # [B]
    offs = torch.tensor([w[1] for w in where], device=att.device)  # [B]
    for i, (r, o) in enumerate(where):
        ids[r, o : o + lens[i]] = batch.input_ids[i, : lens[i]]
        pos[r, o : o + lens[i]] = ar[: lens[i]]
    t = ar[: T - 1]
    valid = t[None, :] < (lengths[:, None] - 1)  # [B, T-1]
    index = rows[:, None] * T + (offs[:, None] + t[None, :]).clamp(max=T - 1)  # [B, T-1]
    return Packed(ids, pos, torch.where(valid, index, torch.zeros_like(index)), valid)


def _unpack(x: torch.Tensor, p: Packed) -> torch.Tensor:
    """[R, T, ...] packed per-position values -> [B, T-1, ...] in the batch's layout (0 where not a real target)."""
    flat = x.reshape(-1, *x.shape[2:])  # [R*T, ...]
    out = flat[p.index]  # [B, T-1, ...]
    mask = p.valid.reshape(*p.valid.shape, *([1] * (x.dim() - 2)))
    return out * mask.to(out.dtype)


def token_logprobs(
    model, batch: Batch, with_entropy: bool = False, with_hidden: bool = False, packed: bool | None = None
):
    """Per-token log p(token | prefix) of every target position: [B, T-1] (+ entropy [B, T-1], hidden [B, T-1, H]).

    packed: run the model on packed rows (default `PACK`); the values agree with the padded forward's to ~1e-6."""
    p = pack(batch) if (PACK if packed is None else packed) else None
    if p is None:
        return _token_logprobs_padded(model, batch, with_entropy, with_hidden)
    out = model(input_ids=p.input_ids, position_ids=p.position_ids, output_hidden_states=with_hidden, use_cache=False)
    logits = out.logits.float()  # [R, T, V]
    logp_all = torch.log_softmax(logits, dim=-1)  # [R, T, V]
    targets = torch.roll(p.input_ids, -1, dims=1)  # [R, T]: the next token in the packed row (wrong at the ends:
    logp = _unpack(logp_all.gather(-1, targets.unsqueeze(-1)).squeeze(-1), p)  # those are never real targets)
    extras = {}
    if with_entropy:
        extras["entropy"] = _unpack(-(logp_all.exp() * logp_all).sum(-1), p)  # [B, T-1]
    if with_hidden:
        extras["hidden"] = _unpack(out.hidden_states[-1], p)  # [B, T-1, H]: the state that predicts token t+1
    return (logp, extras) if extras else logp


def _token_logprobs_padded(model, batch: Batch, with_entropy: bool = False, with_hidden: bool = False):
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


def reference_logprobs(model, batch: Batch) -> torch.Tensor:
    """log-probs under the start policy: the same network with the RL adapter switched off (no autograd graph)."""
    with torch.inference_mode(), model.disable_adapter():
        return token_logprobs(model, batch).clone()  # clone: a normal tensor, usable beside autograd ones


def kl_to_start(logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor) -> float:
    """Mean per-token KL(policy || start) estimate on sampled tokens (k3: exp(r) - 1 - r, r = ref - policy)."""
    r = (ref_logp - logp).clamp(-20, 20)
    k3 = r.exp() - 1 - r  # [B, T-1], >= 0, unbiased for KL
    return float((k3 * mask).sum() / mask.sum().clamp(min=1))
