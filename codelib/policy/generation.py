"""Generation: sample completions for a list of prompts, with HF generate (default) or vLLM (optional, GPU).

One call serves evaluation and the RL trainers' rollouts:

    completions = generate(model, tokenizer, prompts, n=4, temperature=0.8, seed=1234)
    completions[i][j].text   # j-th sample for prompt i, cut at the first stop sequence / eos
    completions[i][j].ids    # the token ids the model actually produced, up to and including the stop

`ids` are exact (never re-tokenized from `text`), so a trainer can recompute log-probs on
`encode_prompts(tokenizer, prompts)[i] + completions[i][j].ids` and get what the sampler saw. The same seed,
prompts, n and batch size give the same completions; the caller's RNG state is left untouched.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers.generation.logits_process import TopPLogitsWarper

from codelib.plumbing.progress import bar as tqdm  # a widget in JupyterLab, a line per interval headless
from codelib.policy.lora import merged_lora
from codelib.policy.vllm_backend import (
    VLLM_LORA_MODULES,
    VLLM_MISSING,
    _lora_rank_slot,
    load_vllm,
    sample_vllm,
    vllm_plan,
)

__all__ = [
    "STOP_SEQUENCES",
    "VLLM_LORA_MODULES",
    "VLLM_MISSING",
    "Completion",
    "encode_prompts",
    "find_stop",
    "generate",
    "load_vllm",
    "stops_for",
    "trim",
    "vllm_plan",
    "_lora_rank_slot",
]

# A function body ends where a new top-level statement begins (HumanEval's stop sequences, as in Codex).
STOP_SEQUENCES = ("\ndef ", "\nclass ", "\nif __name__", "\nprint(", "\n#")
# Whole-function tasks (MBPP): the completion may define helpers and import modules, so a new `def` must not stop it
# (bigcode-evaluation-harness drops "\ndef" for MBPP for the same reason).
WHOLE_FUNCTION_STOPS = ("\nclass ", "\nif __name__", "\nprint(", "\nassert ", '\n"""', "\n```")
PREFILL_CHUNK = 32  # prompts per prefill forward: prompts of like length together, little padding


@dataclass
class Completion:
    """One sampled completion of one prompt."""

    text: str  # decoded completion, cut before the stop sequence (or eos)
    ids: list[int]  # generated token ids: the shortest prefix whose decoding reaches the stop point (eos included)
    n_tokens: int  # len(ids)
    finished: bool  # stopped by a stop sequence or eos; False when max_new_tokens ran out
    logprobs: list[float] | None = None  # log p of each id under the distribution it was drawn from (logprobs=True)


def stops_for(task) -> tuple[str, ...]:
    """The stop sequences that suit a Task: a body continues a signature, a whole function may have helpers."""
    if task.kind == "stdio":
        return ()  # a whole program: only eos ends it
    if task.entry_point and f"def {task.entry_point}" in task.prompt:
        return STOP_SEQUENCES
    return WHOLE_FUNCTION_STOPS


def find_stop(text: str, stop: Sequence[str]) -> tuple[int, int] | None:
    """(start, end) of the earliest stop sequence in `text`, or None.

    Only matches after the completion's first non-blank character count: an MBPP completion that opens with
    "\\ndef f(...)" or a body that opens with a blank line must not stop before it starts.
    """
    begin = len(text) - len(text.lstrip())
    best = None
    for s in stop:
        i = text.find(s, begin)
        if i >= 0 and (best is None or i < best[0]):
            best = (i, i + len(s))
    return best


def _decode(tokenizer, ids: Sequence[int]) -> str:
    return tokenizer.decode(list(ids), skip_special_tokens=True)


def trim(
    tokenizer, ids: Sequence[int], stop: Sequence[str], eos_ids: Sequence[int] = (), logprobs: Sequence[float] = ()
) -> Completion:
    """Cut generated ids at the first eos / stop sequence: the Completion both backends return. logprobs: the
    sampler's log-prob of each id, cut to the kept ids (None when not given)."""
    c = _trim(tokenizer, ids, stop, eos_ids)
    if logprobs:
        c.logprobs = [float(x) for x in logprobs[: c.n_tokens]]
    return c


def _trim(tokenizer, ids: Sequence[int], stop: Sequence[str], eos_ids: Sequence[int]) -> Completion:
    ids = [int(i) for i in ids]
    eos = set(eos_ids)
    cut = next((i for i, t in enumerate(ids) if t in eos), None)
    # Everything after the first eos is padding (HF pads finished rows, often with the eos id itself).
    body = ids if cut is None else ids[:cut]
    text = _decode(tokenizer, body)
    hit = find_stop(text, stop) if stop else None
    if hit is not None:
        start, end = hit
        # The shortest prefix whose decoding covers the whole stop sequence: the tokens the model spent on stopping
        # belong to the completion (a trainer credits or blames them), the rest was never meant to be there.
        lo, hi = 1, len(body)
        while lo < hi:
            mid = (lo + hi) // 2
            if len(_decode(tokenizer, body[:mid])) >= end:
                hi = mid
            else:
                lo = mid + 1
        return Completion(text=text[:start], ids=body[:lo], n_tokens=lo, finished=True)
    if cut is not None:
        kept = ids[: cut + 1]  # eos is part of what the model produced
        return Completion(text=text, ids=kept, n_tokens=len(kept), finished=True)
    return Completion(text=text, ids=ids, n_tokens=len(ids), finished=False)


def batch_decoder(tokenizer):
    """`seqs -> tokenizer.batch_decode(seqs, skip_special_tokens=True)`: straight through the Rust tokenizer's batch
    call when that is all transformers would do (a fast tokenizer whose decode methods are transformers' own, no
    clean-up of spaces), skipping transformers' per-id conversion of the lists (the stop check of every decode
    step); the same strings either way."""
    try:
        from transformers.tokenization_utils_base import PreTrainedTokenizerBase as Base
        from transformers.tokenization_utils_tokenizers import TokenizersBackend as Fast
    except ImportError:  # pragma: no cover - another transformers layout
        Fast = Base = None
    kind = type(tokenizer)
    backend = getattr(tokenizer, "_tokenizer", None)
    if (
        Fast is not None
        and backend is not None
        and isinstance(tokenizer, Fast)
        and kind._decode is Fast._decode
        and kind.decode is Base.decode
        and kind.batch_decode is Base.batch_decode
        and not tokenizer.clean_up_tokenization_spaces
    ):
        return lambda seqs: backend.decode_batch(seqs, skip_special_tokens=True)
    return lambda seqs: tokenizer.batch_decode(seqs, skip_special_tokens=True)


def encode_prompts(tokenizer, prompts: Sequence[str]) -> list[list[int]]:
    """Prompt token ids exactly as `generate` feeds them (the tokenizer's special tokens, e.g. BOS, included)."""
    return [list(ids) for ids in tokenizer(list(prompts))["input_ids"]]


def _eos_ids(model, tokenizer) -> list[int]:
    ids = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids = ids if ids is not None else tokenizer.eos_token_id
    ids = [ids] if isinstance(ids, int) else list(ids or [])
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
        ids.append(tokenizer.eos_token_id)
    return ids


@contextlib.contextmanager
def _seeded(seed: int, device: torch.device):
    """Seed torch's RNG for a block and restore the caller's state after it (training RNG stays untouched)."""
    devices = [device.index or 0] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield


def generate(
    model,
    tokenizer,
    prompts: Sequence[str],
    n: int = 1,
    temperature: float = 0.0,
    top_p: float = 1.0,
    max_new_tokens: int = 256,
    batch_size: int = 32,
    seed: int = 0,
    stop: Sequence[str] = STOP_SEQUENCES,
    progress: bool = True,
    backend: str = "hf",
    prefill_chunk: int = PREFILL_CHUNK,
    logprobs: bool = False,
) -> list[list[Completion]]:
    """Sample `n` completions per prompt; returns one list of `n` Completions per prompt, in prompt order.

    temperature == 0 is greedy decoding (all n samples are then the same one). stop: sequences that end a
    completion (see `find_stop`; `stops_for(task)` picks them per task kind). batch_size counts rows, i.e.
    (prompt, sample) pairs; prefill_chunk: prompts per prefill forward of the HF backend (the same completions
    whatever its value, up to float rounding). backend "vllm" takes, as `model`, a `vllm.LLM` or a hub name / model dir
    / LoRA adapter dir (tokenizer may then be None). logprobs (HF backend, temperature > 0): each Completion also
    carries the log-prob of each of its ids under the distribution the sampler drew it from (softmax of the logits /
    temperature, after top-p), computed in the decode loop; the sampled ids are the same either way."""
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0 (0 = greedy), got {temperature}")
    if backend not in ("hf", "vllm"):
        raise ValueError(f"backend must be 'hf' or 'vllm', not {backend!r}")
    if logprobs and (backend != "hf" or temperature == 0):
        raise ValueError("logprobs=True is for sampling (temperature > 0) on the HF backend")
    kw = dict(
        max_new_tokens=max_new_tokens,
        batch_size=batch_size,
        seed=seed,
        stop=stop,
        progress=progress,
        prefill_chunk=prefill_chunk,
    )
    if temperature == 0 and n > 1:
        # Greedy decoding is deterministic: decode once, hand out copies.
        once = generate(model, tokenizer, prompts, n=1, temperature=0.0, backend=backend, **kw)
        return [[dataclasses.replace(c, ids=list(c.ids)) for _ in range(n)] for (c,) in once]
    if backend == "vllm":  # vLLM cuts at the stop strings; `trim` then applies the same cut as the HF path
        rows, tokenizer = sample_vllm(model, prompts, n, temperature, top_p, max_new_tokens, seed, stop)
        eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
        return [[trim(tokenizer, ids, stop, eos) for ids in row] for row in rows]
    return _generate_hf(model, tokenizer, prompts, n, temperature, top_p, logprobs=logprobs, **kw)


def _generate_hf(
    model,
    tokenizer,
    prompts,
    n,
    temperature,
    top_p,
    *,
    max_new_tokens,
    batch_size,
    seed,
    stop,
    progress,
    prefill_chunk,
    logprobs=False,
):
    """HF backend: our own KV-cached decode loop (see `_decode_batch`), batch by batch of `batch_size` rows."""
    prompt_ids = encode_prompts(tokenizer, prompts)
    eos = _eos_ids(model, tokenizer)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (eos[0] if eos else 0)
    device = next(model.parameters()).device
    # Rows are (prompt, sample) pairs, longest prompts first so each batch carries little padding; a prompt's samples
    # stay next to each other (stable sort), so a batch prefills each distinct prompt once.
    rows = sorted(((i, j) for i in range(len(prompts)) for j in range(n)), key=lambda r: -len(prompt_ids[r[0]]))
    out: list[list[Completion | None]] = [[None] * n for _ in prompts]
    was_training = model.training
    model.eval()  # no dropout while sampling (LoRA dropout would make rollouts differ from the policy)
    bar = tqdm(total=len(rows), desc="generate", unit="sample", disable=not progress)
    try:
        with _seeded(seed, device), merged_lora(model), torch.inference_mode():
            for b in range(0, len(rows), batch_size):
                batch = rows[b : b + batch_size]
                new, lps = _decode_batch(
                    model,
                    tokenizer,
                    [prompt_ids[i] for i, _ in batch],
                    temperature,
                    top_p,
                    max_new_tokens,
                    stop,
                    eos,
                    pad,
                    device,
                    prefill_chunk,
                    logprobs,
                )
                for (i, j), ids, lp in zip(batch, new, lps, strict=True):  # lp: [] without logprobs
                    out[i][j] = trim(tokenizer, ids, stop, eos, lp)
                bar.update(len(batch))
    finally:
        bar.close()
        model.train(was_training)
    return out  # type: ignore[return-value]


def _forward(model, **kw):
    """model(**kw) asking for the last position's logits only where the model takes `logits_to_keep`."""
    global _KEEP_LOGITS
    if _KEEP_LOGITS:
        try:
            return model(logits_to_keep=1, **kw)
        except TypeError:
            _KEEP_LOGITS = False
    return model(**kw)


_KEEP_LOGITS = True


def _prefill(model, seqs, pad, device, chunk: int = PREFILL_CHUNK):
    """Run the prompts (longest first) through the model in chunks of like length, then join the chunks' KV caches
    into one left-padded cache (pad slots are zeros, masked out): (last logits [U, V], cache, mask [U, W],
    position ids [U, W]). A cache that is not transformers' DynamicCache of keys/values tensors is filled in one
    forward instead."""
    width = max(len(s) for s in seqs)
    mask = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in seqs], device=device)  # [U, W]
    pos = (mask.cumsum(-1) - 1).clamp(min=0)  # [U, W]
    chunks = [seqs[i : i + chunk] for i in range(0, len(seqs), chunk)]
    logits, caches = [], []
    for chunk in chunks if len(chunks) > 1 else [seqs]:
        w = max(len(s) for s in chunk)
        ids = torch.tensor([[pad] * (w - len(s)) + s for s in chunk], device=device)  # [b, w]
        m = torch.tensor([[0] * (w - len(s)) + [1] * len(s) for s in chunk], device=device)  # [b, w]
        out = _forward(
            model, input_ids=ids, attention_mask=m, position_ids=(m.cumsum(-1) - 1).clamp(min=0), use_cache=True
        )
        logits.append(out.logits[:, -1].float())
        caches.append(out.past_key_values)
        layers = getattr(caches[0], "layers", None)
        if len(caches) == 1 and not (layers and all(hasattr(x, "keys") and hasattr(x, "values") for x in layers)):
            out = _forward(
                model,
                input_ids=torch.tensor([[pad] * (width - len(s)) + s for s in seqs], device=device),
                attention_mask=mask,
                position_ids=pos,
                use_cache=True,
            )
            return out.logits[:, -1].float(), out.past_key_values, mask, pos
    cache = caches[0]
    if len(caches) > 1:
        for n, layer in enumerate(cache.layers):
            for name in ("keys", "values"):
                parts = []
                for c in caches:
                    t = getattr(c.layers[n], name)  # [b, heads, w, d]
                    parts.append(torch.nn.functional.pad(t, (0, 0, width - t.shape[-2], 0)))
                setattr(layer, name, torch.cat(parts))
    return torch.cat(logits), cache, mask, pos


def _decode_batch(
    model,
    tokenizer,
    seqs,
    temperature,
    top_p,
    max_new_tokens,
    stop,
    eos,
    pad,
    device,
    prefill_chunk=PREFILL_CHUNK,
    logprobs: bool = False,
) -> tuple[list[list[int]], list[list[float]]]:
    """Sample one continuation per row of `seqs` (prompt ids; equal neighbours are samples of one prompt).

    What makes it faster than `model.generate` on short completions (issue 14): each distinct prompt is prefilled
    once and its KV cache copied to its samples; a finished row (eos or a stop sequence) leaves the batch at once, so
    later steps run only the rows still writing and the loop ends when every row has finished; no per-step logits
    processors or stopping criteria over the whole batch. Sampling is the Gumbel-max trick (argmax of
    logits / T + Gumbel noise, the same distribution as softmax sampling) with noise drawn for the *whole* batch at
    every step: a row's draws do not depend on when the other rows finished. Greedy (T = 0) is the argmax.
    Returns the generated ids per row (no padding; eos included when drawn) and, with `logprobs`, each row's log-prob
    of every id it drew under the distribution it was drawn from (log_softmax of the tempered, top-p-warped scores at
    the drawn id: what a trainer's old log-probs recompute, up to float rounding; empty lists without).
    """
    uniq: list[int] = []  # row -> its distinct prompt
    which: list[int] = []
    for r, s in enumerate(seqs):
        if not uniq or seqs[uniq[-1]] != s:
            uniq.append(r)
        which.append(len(uniq) - 1)
    logits, cache, mask, pos = _prefill(model, [seqs[r] for r in uniq], pad, device, prefill_chunk)
    idx = torch.tensor(which, device=device)  # [B]
    if len(uniq) < len(seqs):
        cache.reorder_cache(idx)  # every sample of a prompt gets a copy of its prompt's cache
    logits = logits[idx]  # [B, V]
    mask, last = mask[idx], pos[idx, -1]  # [B, width], [B]
    B = len(seqs)
    active = list(range(B))  # batch rows still writing, in the order of the model's rows
    gen: list[list[int]] = [[] for _ in range(B)]
    lps: list[list[float]] = [[] for _ in range(B)]
    eos_set = set(eos)
    decode = batch_decoder(tokenizer) if stop else None
    top_p_warp = TopPLogitsWarper(top_p) if temperature > 0 and top_p < 1.0 else None
    for step in range(max_new_tokens):
        if temperature > 0:
            scores = logits / temperature
            if top_p_warp is not None:
                scores = top_p_warp(None, scores)
            u = torch.rand(B, logits.shape[-1], device=device)[active] if len(active) < B else torch.rand_like(scores)
            tokens = (scores - torch.log(-torch.log(u))).argmax(-1)  # [A]: Gumbel-max
            if logprobs:  # after the draw: the noise and the tokens are the same either way
                drawn = torch.log_softmax(scores, dim=-1).gather(-1, tokens[:, None])[:, 0].tolist()
                for r, x in zip(active, drawn, strict=True):
                    lps[r].append(x)
        else:
            tokens = logits.argmax(-1)  # [A]
        keep = []
        for k, (r, t) in enumerate(zip(active, tokens.tolist(), strict=True)):
            gen[r].append(t)
            if t not in eos_set:
                keep.append(k)
        if stop and keep:
            texts = decode([gen[active[k]] for k in keep])
            keep = [k for k, text in zip(keep, texts, strict=True) if find_stop(text, stop) is None]
        if not keep or step == max_new_tokens - 1:
            break
        if len(keep) < len(active):
            sel = torch.tensor(keep, device=device)
            cache.reorder_cache(sel)
            tokens, mask, last = tokens[sel], mask[sel], last[sel]
            active = [active[k] for k in keep]
        mask = torch.cat([mask, mask.new_ones(len(active), 1)], dim=1)  # [A, width + step + 1]
        last = last + 1
        out = _forward(
            model,
            input_ids=tokens[:, None],
            attention_mask=mask,
            position_ids=last[:, None],
            past_key_values=cache,
            use_cache=True,
        )
        cache = out.past_key_values
        logits = out.logits[:, -1].float()  # [A, V]
    return gen, lps
