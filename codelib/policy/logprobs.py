"""Token log-probs of completions under a policy (REINFORCE and PPO): batches, log p, the reference, KL.

Speed (issue 14): `token_logprobs` runs the model on *packed* rows. A batch of prompt + completion rows, right-padded
to the longest, is on the tiny profile about half padding; the rows are packed first-fit into as few rows of the same
width as they fit (positions restart at 0 for each sequence, so transformers' attention masks keep the sequences
apart), the model runs on those, and the results are scattered back to the [B, T-1] layout the trainers index.
Positions past a row's last token come back as 0 (they were padding; every consumer masks them). The values equal the
padded forward's up to float rounding (~1e-6: other matmul shapes); `packed=False` runs the padded forward.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import DynamicCache

from codelib.policy.lora import folded_lora


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
    model,
    batch: Batch,
    with_entropy: bool = False,
    with_hidden: bool = False,
    packed: bool = True,
    shared: bool = False,
    temperature: float = 1.0,
    fold: bool = True,
):
    """Per-token log p(token | prefix) of every target position: [B, T-1] (+ entropy [B, T-1], hidden [B, T-1, H]).

    packed: run the model on packed rows (False: the padded forward); the values agree with the padded forward's to
    ~1e-6.
    shared: when rows share prompts (a task's group of samples), run each distinct prompt once (`shared_prefix`);
    then only completion targets carry values (prompt targets are 0, as every consumer masks them); fold: there,
    plain LoRA layers run folded into one linear each (`folded_lora`).
    temperature: the sampling temperature; the logits are divided by it, so the log-probs are those of the
    distribution the sampler drew from (as TRL does)."""
    if shared:
        out = shared_prefix_logprobs(model, batch, with_entropy, with_hidden, temperature, fold=fold)
        if out is not None:
            return out
    p = pack(batch) if packed else None
    if p is None:
        return _token_logprobs_padded(model, batch, with_entropy, with_hidden, temperature)
    out = model(input_ids=p.input_ids, position_ids=p.position_ids, output_hidden_states=with_hidden, use_cache=False)
    logits = _tempered(out.logits.float(), temperature)  # [R, T, V]
    logp_all = torch.log_softmax(logits, dim=-1)  # [R, T, V]
    targets = torch.roll(p.input_ids, -1, dims=1)  # [R, T]: the next token in the packed row (wrong at the ends:
    logp = _unpack(logp_all.gather(-1, targets.unsqueeze(-1)).squeeze(-1), p)  # those are never real targets)
    extras = {}
    if with_entropy:
        extras["entropy"] = _unpack(-(logp_all.exp() * logp_all).sum(-1), p)  # [B, T-1]
    if with_hidden:
        extras["hidden"] = _unpack(out.hidden_states[-1], p)  # [B, T-1, H]: the state that predicts token t+1
    return (logp, extras) if extras else logp


def activations_checkpointed(model) -> bool:
    """Whether `model` recomputes activations in the backward pass (transformers renamed the flag in 5.2x; the old
    name warns there)."""
    flag = getattr(model, "is_activation_checkpointing", None)
    return bool(getattr(model, "is_gradient_checkpointing", False) if flag is None else flag)


def _tempered(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    return logits if temperature == 1.0 else logits / temperature


def _token_logprobs_padded(model, batch: Batch, with_entropy=False, with_hidden=False, temperature: float = 1.0):
    out = model(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask,
        output_hidden_states=with_hidden,
        use_cache=False,
    )
    logits = _tempered(out.logits[:, :-1].float(), temperature)  # [B, T-1, V]
    logp_all = torch.log_softmax(logits, dim=-1)  # [B, T-1, V]
    logp = logp_all.gather(-1, batch.input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)  # [B, T-1]
    extras = {}
    if with_entropy:
        extras["entropy"] = -(logp_all.exp() * logp_all).sum(-1)  # [B, T-1]
    if with_hidden:
        extras["hidden"] = out.hidden_states[-1][:, :-1]  # [B, T-1, H]: the state that predicts token t+1
    return (logp, extras) if extras else logp


def reference_logprobs(model, batch: Batch, shared: bool = False, temperature: float = 1.0) -> torch.Tensor:
    """log-probs under the start policy: the same network with the RL adapter switched off (no autograd graph)."""
    with torch.inference_mode(), model.disable_adapter():
        logp = token_logprobs(model, batch, shared=shared, temperature=temperature)
    return logp.clone()  # clone: a normal tensor, usable beside autograd ones


SHARE_AT_MOST = 0.5  # shared_prefix_logprobs runs only when distinct prompts are at most this share of the rows
CHUNK_WASTE = 1.4  # a completion chunk's padded size (rows x longest) at most this times its tokens (one row at least)


def length_chunks(lengths: list[int], waste: float = CHUNK_WASTE) -> list[list[int]]:
    """Rows grouped by completion length, longest first, so that right-padding a chunk to its longest row costs at
    most `waste` times its real tokens: one 48-token completion among 12-token ones runs alone instead of padding
    127 rows to 48."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    chunks: list[list[int]] = []
    total = 0
    for i in order:
        if chunks and lengths[chunks[-1][0]] * (len(chunks[-1]) + 1) <= waste * (total + lengths[i]):
            chunks[-1].append(i)
            total += lengths[i]
        else:
            chunks.append([i])
            total = lengths[i]
    return chunks


def _place(x: torch.Tensor, valid: torch.Tensor, target: torch.Tensor, width: int) -> torch.Tensor:
    """[n, L, ...] values of completion tokens -> [n, width, ...] at their target positions (0 elsewhere)."""
    n, L, extra = x.shape[0], x.shape[1], x.shape[2:]
    v = valid.reshape(n, L, *([1] * len(extra))).to(x.dtype)
    out = x.new_zeros(n, width + L, *extra)  # room past width: a padded j never lands on a real target
    where = target.reshape(n, L, *([1] * len(extra))).expand(n, L, *extra)
    return out.scatter_add(1, where, x * v)[:, :width]


def shared_prefix_logprobs(
    model,
    batch: Batch,
    with_entropy=False,
    with_hidden=False,
    temperature: float = 1.0,
    fold: bool = True,
    share_at_most: float = SHARE_AT_MOST,
):
    """`token_logprobs` computing each distinct prompt once (speed, issue 14); None when it does not apply.

    A group of samples of one task repeats its prompt in every row: a PPO/RLOO batch of 16 tasks x 8 samples runs the
    model over 128 prompts where 16 differ. Here the distinct prompts run once, left-padded, with a KV cache; the
    cache is indexed out to every row (an autograd op: a prompt's gradient sums over its samples), and the
    completions run on it in chunks of like length (`length_chunks`), right-padded, at positions that continue their
    prompt. Only completion targets get values (log_softmax over completion positions only; prompt targets are 0:
    every consumer masks them with completion_mask). Equal to the packed forward up to float rounding (~1e-5 on a
    sequence's summed log-prob, ~1e-6 relative on gradients: other matmul shapes; `tests/test_speed.py`).

    Not used (None) when prompts repeat little (distinct > share_at_most of the rows), under DDP (two forwards
    through one DDP module before a backward), while gradient checkpointing is on (it turns the cache off), or for a
    model whose cache is not transformers' DynamicCache of key/value tensors. Plain LoRA layers run folded
    (`folded_lora`) unless fold is False."""
    if isinstance(model, torch.nn.parallel.DistributedDataParallel):
        return None
    with folded_lora(model, enabled=fold):
        return _shared_prefix_logprobs(model, batch, with_entropy, with_hidden, temperature, share_at_most)


def _shared_prefix_logprobs(
    model, batch: Batch, with_entropy: bool, with_hidden: bool, temperature: float, share_at_most: float
):
    if model.training and activations_checkpointed(model):  # QLoRA's prep, or a GPU's engine: no cache in training
        return None
    comp = batch.completion_mask  # [B, T-1]
    B, T1 = comp.shape
    clen = comp.sum(-1).long()  # [B]
    if B < 2 or bool((clen < 1).any()):
        return None
    plen = comp.argmax(-1) + 1  # [B]: the first completion target t predicts token t + 1
    prompts = [tuple(r[:n]) for r, n in zip(batch.input_ids.tolist(), plen.tolist(), strict=True)]
    index: dict[tuple, int] = {}
    which = [index.setdefault(p, len(index)) for p in prompts]
    if len(index) > share_at_most * B:
        return None
    device = batch.input_ids.device
    uniq = list(index)
    W, pad = max(len(u) for u in uniq), int(batch.input_ids[0, -1])
    ids = torch.tensor([[pad] * (W - len(u)) + list(u) for u in uniq], device=device)  # [U, W], left-padded
    m = torch.tensor([[0] * (W - len(u)) + [1] * len(u) for u in uniq], device=device)  # [U, W]
    pos = (m.cumsum(-1) - 1).clamp(min=0)  # [U, W]
    # logits at the last prompt position only: it predicts the first completion token; the others predict prompt tokens
    first = model(
        input_ids=ids,
        attention_mask=m,
        position_ids=pos,
        use_cache=True,
        logits_to_keep=1,
        output_hidden_states=with_hidden,
    )
    layers = getattr(first.past_key_values, "layers", None)
    if not layers or not all(hasattr(x, "keys") and hasattr(x, "values") for x in layers):
        return None
    kv = [(x.keys, x.values) for x in layers]  # [U, heads, W, d] each
    idx = torch.tensor(which, device=device)  # [B]: row -> its prompt
    parts, rows_done = [], []
    for rows in length_chunks(clen.tolist()):
        r = torch.tensor(rows, device=device)
        sel = idx[r]
        # every row of the chunk gets its prompt's keys and values (an autograd op: gradients sum over samples).
        # index_select, not k[sel]: its backward is a scatter-add, where k[sel]'s is an accumulating index_put that
        # runs ~2x slower on a CPU (~6 ms of a tiny RLOO step); the sums' order differs (~1e-6)
        cache = DynamicCache(ddp_cache_data=[(k.index_select(0, sel), v.index_select(0, sel)) for k, v in kv])
        pl, cl = plen[r], clen[r]
        L = int(cl.max())
        j = torch.arange(L, device=device)  # [L]
        valid = j[None, :] < cl[:, None]  # [n, L]
        src = (pl[:, None] + j[None, :]).clamp(max=batch.input_ids.shape[1] - 1)  # column of completion token j
        cids = torch.where(valid, batch.input_ids[r].gather(1, src), torch.full_like(src, pad))  # [n, L]
        second = model(
            input_ids=cids,
            attention_mask=torch.cat([m[sel], valid.long()], dim=1),
            position_ids=pos[sel, -1:] + 1 + j[None, :],
            past_key_values=cache,
            use_cache=False,
            output_hidden_states=with_hidden,
        )
        # the state that predicts completion token j: the prompt's last position for j = 0, completion position j-1.
        # index_select again: x[sel] with repeated rows backpropagates through an accumulating index_put, whose CPU
        # kernel adds from several threads at once, so a prompt's gradient summed in another order on every run
        last = first.logits[:, -1:].index_select(0, sel)
        logits = _tempered(torch.cat([last, second.logits[:, :-1]], dim=1).float(), temperature)
        logp_all = torch.log_softmax(logits, dim=-1)
        target = (pl - 1)[:, None] + j[None, :]  # [n, L]: its target position in the [B, T-1] layout

        part = {"logp": _place(logp_all.gather(-1, cids.unsqueeze(-1)).squeeze(-1), valid, target, T1)}
        if with_entropy:
            part["entropy"] = _place(-(logp_all.exp() * logp_all).sum(-1), valid, target, T1)
        if with_hidden:
            hidden = torch.cat(
                [first.hidden_states[-1][:, -1:].index_select(0, sel), second.hidden_states[-1][:, :-1]], dim=1
            )
            part["hidden"] = _place(hidden, valid, target, T1)
        parts.append(part)
        rows_done += rows
    back = torch.empty(B, dtype=torch.long, device=device)
    back[torch.tensor(rows_done, device=device)] = torch.arange(B, device=device)  # chunk order -> batch order
    out = {k: torch.cat([p[k] for p in parts])[back] for k in parts[0]}
    logp = out.pop("logp")
    return (logp, out) if out else logp


def kl_to_start(logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor) -> float:
    """Mean per-token KL(policy || start) estimate on sampled tokens (k3: exp(r) - 1 - r, r = ref - policy)."""
    r = (ref_logp - logp).clamp(-20, 20)
    k3 = r.exp() - 1 - r  # [B, T-1], >= 0, unbiased for KL
    return float((k3 * mask).sum() / mask.sum().clamp(min=1))
