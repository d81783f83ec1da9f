"""Issue 14's fast paths give what the plain ones give: packed log-probs, our decode loop, its sampler."""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from codelib.policy import generation, logprobs, lora
from codelib.policy.logprobs import make_batch, pack, shared_prefix_logprobs, token_logprobs


class _Tok:
    """Enough of a tokenizer for `generation`: id i decodes to chr(97 + i % 26); id 0 is eos."""

    eos_token_id = 0
    pad_token_id = 0

    def __call__(self, prompts):
        return {"input_ids": [[1 + (ord(ch) - 97) % 30 for ch in p] for p in prompts]}

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(97 + i % 26) for i in ids if not (skip_special_tokens and i == 0))

    def batch_decode(self, rows, skip_special_tokens=True):
        return [self.decode(r, skip_special_tokens) for r in rows]


def _llama(vocab_size: int = 32, layers: int = 2, positions: int = 128) -> LlamaForCausalLM:
    """A small random Llama (seed 0): hidden 32, 4 heads, eos and pad 0."""
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=positions,
        eos_token_id=0,
        pad_token_id=0,
    )
    return LlamaForCausalLM(cfg)


@pytest.fixture(scope="module")
def model():
    torch.set_num_threads(1)
    return _llama().eval()


def test_packed_log_probs_equal_padded_ones_values_and_gradients(model):
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(1, 32, (int(n),), generator=g).tolist() for n in (9, 3, 7, 12, 2, 5, 4, 6)]
    comps = [torch.randint(0, 32, (int(n),), generator=g).tolist() for n in (2, 11, 1, 6, 3, 9, 1, 4)]
    batch = make_batch(prompts, comps, pad_id=0)
    p = pack(batch)
    assert p is not None and p.input_ids.shape[0] < batch.input_ids.shape[0]  # fewer rows than sequences
    mask = batch.completion_mask
    results = []
    for packed in (False, True):
        model.zero_grad()
        logp, ex = token_logprobs(model, batch, with_entropy=True, with_hidden=True, packed=packed)
        ((logp * mask).sum() + (ex["entropy"] * mask).sum()).backward()
        grads = torch.cat([q.grad.flatten() for q in model.parameters()])
        results.append((logp * mask, ex["entropy"] * mask, ex["hidden"] * mask[..., None], grads))
    for a, b in zip(*results, strict=True):
        assert torch.allclose(a, b, atol=1e-5), (a - b).abs().max()


def test_shared_prefix_log_probs_equal_packed_ones_values_and_gradients(model):
    """Groups of samples of one prompt (PPO/RLOO batches), prompts and completions of mixed lengths, in any order:
    running each prompt once gives the packed forward's completion log-probs, entropies, hidden states and
    gradients (through the cache, a prompt's gradient sums over its samples)."""
    g = torch.Generator().manual_seed(2)
    distinct = [torch.randint(1, 32, (int(n),), generator=g).tolist() for n in (9, 3, 12, 5)]
    rows = [0, 1, 2, 3, 0, 1, 2, 3, 2, 0, 3, 1]  # every prompt three times, interleaved (a shuffled minibatch)
    prompts = [distinct[r] for r in rows]
    comps = [torch.randint(0, 32, (int(n),), generator=g).tolist() for n in (2, 11, 1, 6, 3, 9, 1, 4, 7, 5, 1, 8)]
    batch = make_batch(prompts, comps, pad_id=0)
    mask = batch.completion_mask
    results = []
    for shared in (False, True):
        model.zero_grad()
        logp, ex = token_logprobs(model, batch, with_entropy=True, with_hidden=True, shared=shared)
        hidden_term = (ex["hidden"].sum(-1) * mask).sum()
        ((logp * mask).sum() + (ex["entropy"] * mask).sum() + hidden_term).backward()
        grads = torch.cat([q.grad.flatten() for q in model.parameters()])
        results.append((logp * mask, ex["entropy"] * mask, ex["hidden"] * mask[..., None], grads))
    for a, b in zip(*results, strict=True):
        assert float((a - b).abs().max()) <= 2e-5 * max(1.0, float(a.abs().max())), (a - b).abs().max()
    assert shared_prefix_logprobs(model, batch) is not None  # it did run, not the packed fallback
    logp = token_logprobs(model, batch, shared=True)
    assert torch.equal(logp * (1 - mask), torch.zeros_like(logp))  # prompt targets carry nothing


def test_length_chunks_bound_the_padding():
    lengths = [12, 48, 11, 13, 12, 10, 12, 11]
    chunks = logprobs.length_chunks(lengths)
    assert sorted(i for c in chunks for i in c) == list(range(8)) and chunks[0] == [1]  # the long one alone
    for c in chunks:
        assert max(lengths[i] for i in c) * len(c) <= logprobs.CHUNK_WASTE * sum(lengths[i] for i in c) or len(c) == 1
    assert logprobs.length_chunks([5] * 6) == [[0, 1, 2, 3, 4, 5]]


def test_shared_prefix_falls_back_when_prompts_barely_repeat(model):
    """Distinct prompts (REINFORCE's 128 x 1) or a single row: the packed forward runs, values unchanged."""
    batch = make_batch([[1, 2, 3], [4, 5], [6]], [[7, 8], [9], [10, 11, 12]], pad_id=0)
    assert shared_prefix_logprobs(model, batch) is None
    assert torch.equal(token_logprobs(model, batch, shared=True), token_logprobs(model, batch))
    half = make_batch([[1, 2], [1, 2], [3], [4]], [[5], [6], [7], [8]], pad_id=0)  # 3 distinct of 4 rows
    assert shared_prefix_logprobs(model, half) is None
    assert shared_prefix_logprobs(model, half, share_at_most=0.75) is not None


def test_packing_leaves_left_padded_and_single_rows_alone(model):
    batch = make_batch([[1, 2, 3]], [[4]], pad_id=0)
    assert pack(batch) is None
    left = make_batch([[1, 2], [3]], [[4], [5]], pad_id=0)
    left.attention_mask = torch.tensor([[1, 1, 1], [0, 1, 1]])
    assert pack(left) is None


def test_our_decode_loop_is_greedy_generate_and_prefills_in_chunks(model):
    """Greedy decoding with our KV-cached loop (prompts prefilled in several chunks joined into one cache) gives the
    tokens of transformers' `model.generate`, cut at the same stop sequences."""
    tok = _Tok()
    prompts = ["abcabcabd", "xyz", "hello", "aaaaaaaaaaaaaaa", "qq", "mnopq", "hello"]
    stop = ("ba",)
    kw = dict(n=2, temperature=0.0, max_new_tokens=10, batch_size=6, stop=stop, progress=False)
    ours = generation.generate(model, tok, prompts, prefill_chunk=2, **kw)
    theirs = []
    with torch.inference_mode():
        for ids in generation.encode_prompts(tok, prompts):
            out = model.generate(
                input_ids=torch.tensor([ids]),
                max_new_tokens=10,
                do_sample=False,
                pad_token_id=0,
                eos_token_id=0,
                top_k=None,
            )
            theirs.append(generation.trim(tok, out[0, len(ids) :].tolist(), stop, [0]).ids)
    assert [[c.ids for c in row] for row in ours] == [[ids, ids] for ids in theirs]
    assert any(c.finished for row in ours for c in row) and any(not c.finished for row in ours for c in row)


def test_our_sampler_draws_from_the_softmax(model):
    """Gumbel-max over the first token of 2000 samples of one prompt: frequencies match softmax(logits / T)."""
    tok = _Tok()
    prompt = "abcd"
    with torch.no_grad():
        logits = model(torch.tensor(tok([prompt])["input_ids"])).logits[0, -1]
    probs = torch.softmax(logits / 0.7, -1)
    out = generation.generate(
        model,
        tok,
        [prompt],
        n=2000,
        temperature=0.7,
        max_new_tokens=1,
        batch_size=2000,
        seed=3,
        stop=(),
        progress=False,
    )
    counts = torch.bincount(torch.tensor([c.ids[0] for c in out[0]]), minlength=32).float() / 2000
    assert (counts - probs).abs().max() < 0.03  # 3 standard errors at p = 0.5 is 0.034


def test_sampling_from_a_lora_policy_folds_the_adapter_in_and_puts_the_weights_back(model):
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(5)
    policy = get_peft_model(
        LlamaForCausalLM(model.config).eval(),
        LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "up_proj"], modules_to_save=["norm"]),
    )
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if "lora_B" in name or "modules_to_save" in name:
                p.add_(torch.randn_like(p) * 0.3)  # an adapter that changes the answers
    before = {k: (v, v.clone()) for k, v in policy.state_dict(keep_vars=True).items()}
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    with torch.no_grad():
        want = policy(input_ids=ids).logits
        with lora.merged_lora(policy):
            got = policy(input_ids=ids).logits
        with policy.disable_adapter():
            base = policy(input_ids=ids).logits
            with lora.merged_lora(policy):  # sampling the start policy: a disabled adapter is not folded in
                got_base = policy(input_ids=ids).logits
    assert torch.allclose(want, got, atol=1e-5) and not torch.allclose(want, base, atol=1e-3)
    assert torch.equal(got_base, base)
    after = policy.state_dict(keep_vars=True)
    assert all(
        after[k] is v and torch.equal(v, copy) for k, (v, copy) in before.items()
    )  # the same tensors, unchanged


def test_folded_lora_gives_peft_log_probs_and_gradients_and_puts_the_layers_back(model, monkeypatch):
    """The shared-prefix update forward runs each plain LoRA layer as one linear of W + s B A: the same log-probs and
    A/B gradients as peft's three matmuls (float rounding), peft's modules back in the tree afterwards; a layer
    whose dropout is live in training, or a disabled adapter, keeps peft's layers."""
    from peft import LoraConfig, get_peft_model
    from peft.tuners.lora import LoraLayer

    torch.manual_seed(6)
    policy = get_peft_model(
        LlamaForCausalLM(model.config),
        LoraConfig(
            r=4,
            lora_alpha=8,
            target_modules=["q_proj", "v_proj", "up_proj", "down_proj"],
            lora_dropout=0.0,
            modules_to_save=["norm"],
        ),
    )
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.add_(torch.randn_like(p) * 0.3)
    policy.train()
    g = torch.Generator().manual_seed(3)
    distinct = [torch.randint(1, 32, (int(n),), generator=g).tolist() for n in (7, 4, 10)]
    rows = [0, 1, 2, 0, 1, 2, 2, 0, 1]
    comps = [torch.randint(1, 32, (int(n),), generator=g).tolist() for n in (3, 8, 1, 5, 2, 9, 4, 6, 2)]
    batch = make_batch([distinct[r] for r in rows], comps, pad_id=0)
    mask = batch.completion_mask
    folds = []
    real = lora._FoldedLinear.forward
    monkeypatch.setattr(lora._FoldedLinear, "forward", lambda self, x: folds.append(1) or real(self, x))
    modules = dict(policy.named_modules())
    results = []
    for fold in (False, True):
        policy.zero_grad()
        logp = token_logprobs(policy, batch, shared=True, fold=fold)
        (logp * mask * torch.linspace(-1, 1, logp.shape[1])).sum().backward()
        grads = {n: p.grad.clone() for n, p in policy.named_parameters() if p.requires_grad}
        results.append((logp * mask, grads))
    forwards = 1 + len(logprobs.length_chunks(mask.sum(-1).long().tolist()))  # the prompts', then each chunk's
    assert len(folds) == 4 * 2 * forwards  # every LoRA layer of both decoder layers, in every forward
    (a, ga), (b, gb) = results
    assert torch.allclose(a, b, atol=1e-5), (a - b).abs().max()
    assert set(ga) == set(gb) and any("lora_A" in n for n in ga) and any("modules_to_save" in n for n in ga)
    for n in ga:
        assert torch.allclose(ga[n], gb[n], atol=1e-5, rtol=1e-4), (n, (ga[n] - gb[n]).abs().max())
    assert all(modules[n] is m for n, m in policy.named_modules())  # peft's own layers back in the tree
    folds.clear()
    with torch.no_grad(), policy.disable_adapter():
        token_logprobs(policy, batch, shared=True)  # the start policy: nothing to fold
    for m in policy.modules():
        if isinstance(m, LoraLayer):
            m.lora_dropout["default"] = torch.nn.Dropout(0.1)
    token_logprobs(policy, batch, shared=True)  # dropout live in training: peft's layers run
    assert folds == []


def test_the_stop_checks_batch_decode_gives_transformers_strings():
    """`batch_decoder` goes straight to the Rust tokenizer only where transformers would do nothing more: the same
    strings as `batch_decode` on ids with special tokens, multi-byte characters cut mid-way and empty rows; a
    tokenizer that cleans up spaces keeps transformers' own path."""
    import random

    from codelib.policy.tiny import train_tokenizer

    corpus = ["def f(x):\n    return x + 1  # é ü 日本\n", "print('a', \"b\")\n"] * 20
    tok = train_tokenizer(corpus, vocab_size=300)
    rng = random.Random(0)
    rows = [[rng.randrange(len(tok)) for _ in range(rng.randrange(0, 30))] for _ in range(200)]
    rows.append([tok.eos_token_id, tok.bos_token_id, tok.pad_token_id])
    fast = generation.batch_decoder(tok)
    assert fast(rows) == tok.batch_decode(rows, skip_special_tokens=True)
    assert fast.__code__ is not generation.batch_decoder(_Tok()).__code__  # the fast path, not the fallback
    tok.clean_up_tokenization_spaces = True
    assert generation.batch_decoder(tok).__code__ is generation.batch_decoder(_Tok()).__code__
    assert generation.batch_decoder(tok)(rows) == tok.batch_decode(rows, skip_special_tokens=True)


def test_shared_prefix_gradients_are_the_same_on_every_run_with_two_threads():
    """Each prompt's samples take its last logits and hidden state by index_select: indexing with repeated rows
    (`x[sel]`) backpropagates through an accumulating index_put whose CPU kernel adds from several threads at once, so
    the gradients came out in another float order on every run (a shared_prefix run drifted from its own rerun)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        big = _llama(vocab_size=1024, layers=1, positions=256).train()  # 128 rows x 1024: a parallel backward
        g = torch.Generator().manual_seed(3)
        distinct = [
            torch.randint(1, 1024, (int(n),), generator=g).tolist() for n in torch.randint(20, 60, (32,), generator=g)
        ]
        rows = torch.randperm(128, generator=g).tolist()  # each prompt 4 times, scattered over the batch
        comps = [
            torch.randint(1, 1024, (int(n),), generator=g).tolist() for n in torch.randint(2, 20, (128,), generator=g)
        ]
        batch = make_batch([distinct[r % 32] for r in rows], comps, pad_id=0)
        mask = batch.completion_mask
        grads = []
        for _ in range(4):
            big.zero_grad()
            logp, ex = token_logprobs(big, batch, with_entropy=True, with_hidden=True, shared=True)
            ((logp * mask).sum() + (ex["entropy"] * mask).sum() + (ex["hidden"].sum(-1) * mask).sum()).backward()
            grads.append(torch.cat([q.grad.flatten() for q in big.parameters()]))
        assert shared_prefix_logprobs(big, batch) is not None  # the shared path ran
        assert all(torch.equal(grads[0], x) for x in grads[1:]), max(float((grads[0] - x).abs().max()) for x in grads)
    finally:
        torch.set_num_threads(threads)


def test_packing_fills_a_row_exactly_and_maps_every_target_back():
    """First-fit packing puts a sequence into a row whose room equals its length, restarts positions at 0 for each
    sequence (the rows being right-padded), and its index reads back, for every real target t of a row, the packed
    state of that row's token t; rows that fill the width each save nothing, and left-padded rows are not packed."""
    batch = make_batch([[1, 2, 3], [4], [6]], [[5], [7], [8]], pad_id=0)  # lengths 4, 2, 2 in width 4
    assert batch.attention_mask.tolist() == [[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 0, 0]]  # right padding
    assert batch.completion_mask.tolist() == [[0, 0, 1], [1, 0, 0], [1, 0, 0]]  # the completion targets only
    p = pack(batch)
    assert p is not None and p.input_ids.tolist() == [[1, 2, 3, 5], [4, 7, 6, 8]]
    assert p.position_ids.tolist() == [[0, 1, 2, 3], [0, 1, 0, 1]]
    assert p.valid.tolist() == [[True, True, True], [True, False, False], [True, False, False]]
    got = p.input_ids.flatten()[p.index]  # [B, T-1]: the token whose state predicts target t + 1
    assert torch.equal(got[p.valid], batch.input_ids[:, :-1][p.valid])
    full = make_batch([[1, 2], [3, 4]], [[5], [6]], pad_id=0)
    assert pack(full) is None  # two rows of the full width: packing would save nothing
    ids = torch.tensor([[1, 2, 3, 5], [0, 0, 4, 7], [0, 0, 6, 8]])  # the same rows left-padded: not packed
    assert pack(logprobs.Batch(ids, (ids > 0).long(), batch.completion_mask)) is None
