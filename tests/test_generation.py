"""Generation: stop sequences, exact token ids, seeded determinism, batching that does not change answers."""

import importlib.util
from pathlib import Path

import pytest
import torch

from codelib.policy import generation
from codelib.policy.generation import STOP_SEQUENCES, WHOLE_FUNCTION_STOPS, Completion, find_stop, stops_for, trim
from codelib.tasks import Task, load_tasks

_spec = importlib.util.spec_from_file_location("memorizer", Path(__file__).parent / "fixtures" / "memorizer.py")
memorizer = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(memorizer)

TAIL = "\ndef unused():\n    return 0\n"  # what the memorised documents continue with after the body


class CharTokenizer:
    """A stand-in tokenizer: each id maps to a fixed string; id 0 is eos (skipped when decoding)."""

    eos_token_id = 0
    pad_token_id = 0

    def __init__(self, vocab: dict[int, str]):
        self.vocab = vocab

    def decode(self, ids, skip_special_tokens=True):
        return "".join(self.vocab[i] for i in ids if not (skip_special_tokens and i == 0))

    def batch_decode(self, rows, skip_special_tokens=True):
        return [self.decode(r, skip_special_tokens) for r in rows]


# ---------------------------------------------------------------------------------------------------------------
# the stopping logic, on text


def test_find_stop_picks_the_earliest_stop_sequence():
    text = "    return x\nprint(f(1))\ndef g():\n"
    assert find_stop(text, STOP_SEQUENCES) == (12, 12 + len("\nprint("))
    assert find_stop("    return x\n", STOP_SEQUENCES) is None


def test_indented_comments_and_nested_defs_do_not_stop_a_body():
    body = "    # helper first\n    def inner(y):\n        return y\n    return inner(x)\n"
    assert find_stop(body, STOP_SEQUENCES) is None
    assert find_stop(body + "\n# top-level comment", STOP_SEQUENCES)[0] == len(body)


def test_stops_before_the_completion_starts_do_not_count():
    # An MBPP completion is a whole function; one opening with a newline must not stop at its own `def`.
    text = "\ndef f(x):\n    return x\n\ndef g(y):\n"
    start, _ = find_stop(text, STOP_SEQUENCES)
    assert text[:start] == "\ndef f(x):\n    return x\n"
    assert find_stop("\n\n#", STOP_SEQUENCES) is None  # nothing but blanks before it


def test_stops_for_picks_by_task_shape():
    body = Task("t/0", 'def f(x):\n    """Add one."""\n', "assert True", "f", "    return x + 1\n")
    whole = Task(
        "t/1", '"""\nAdd one.\nassert f(1) == 2\n"""\n', "assert f(1) == 2", "f", "def f(x):\n    return x + 1\n"
    )
    stdio = Task("t/2", "Read n, print n.", "[]", "", "print(input())\n", kind="stdio")
    assert stops_for(body) == STOP_SEQUENCES
    assert stops_for(whole) == WHOLE_FUNCTION_STOPS and "\ndef " not in WHOLE_FUNCTION_STOPS
    assert stops_for(stdio) == ()
    assert stops_for(load_tasks("humaneval", "test")[0]) == STOP_SEQUENCES
    assert stops_for(load_tasks("mbpp", "test")[0]) == WHOLE_FUNCTION_STOPS
    # a whole function ends where the model starts testing or explaining it, and may define helpers
    own = "def f(x):\n    return g(x)\n\ndef g(x):\n    return x + 1\n"
    for tail in ("\nassert f(1) == 2", "\nprint(f(1))", '\n"""Example', "\n```", "\nclass T:", "\nif __name__"):
        assert find_stop(own + tail, WHOLE_FUNCTION_STOPS)[0] == len(own), tail
    assert find_stop(own, WHOLE_FUNCTION_STOPS) is None  # the helper's def does not end it


# ---------------------------------------------------------------------------------------------------------------
# the stopping logic, on token ids (a fake tokenizer with multi-character tokens)

VOCAB = {0: "", 1: "    return x", 2: "\nde", 3: "f g", 4: "():", 5: "\n", 6: "    pass"}


def test_trim_keeps_the_shortest_prefix_that_covers_the_stop_sequence():
    tok = CharTokenizer(VOCAB)
    c = trim(tok, [1, 2, 3, 4, 5, 6], STOP_SEQUENCES, eos_ids=[0])
    # "\ndef " ends inside token 3 ("f g"): tokens 1-3 were needed to produce it, token 4 on were not.
    assert c == Completion(text="    return x", ids=[1, 2, 3], n_tokens=3, finished=True)


def test_trim_cuts_at_eos_and_keeps_it_and_ignores_padding_after_it():
    tok = CharTokenizer(VOCAB)
    c = trim(tok, [1, 5, 0, 0, 0], STOP_SEQUENCES, eos_ids=[0])
    assert c == Completion(text="    return x\n", ids=[1, 5, 0], n_tokens=3, finished=True)
    # A stop sequence only after eos (in padding positions) does not count.
    assert trim(tok, [1, 0, 2, 3], STOP_SEQUENCES, eos_ids=[0]).ids == [1, 0]


def test_trim_cuts_the_samplers_logprobs_with_the_ids():
    tok = CharTokenizer(VOCAB)
    c = trim(tok, [1, 2, 3, 4, 5, 6], STOP_SEQUENCES, eos_ids=[0], logprobs=[-0.5, -1.0, -1.5, -2.0, -2.5, -3.0])
    assert c.ids == [1, 2, 3] and c.logprobs == [-0.5, -1.0, -1.5]  # one log-prob per kept id
    assert trim(tok, [1, 5, 0, 0], STOP_SEQUENCES, eos_ids=[0], logprobs=[-1.0, -2.0, -3.0, 0.0]).logprobs == [
        -1.0,
        -2.0,
        -3.0,
    ]  # eos kept, its log-prob too
    assert trim(tok, [1, 5], STOP_SEQUENCES, eos_ids=[0]).logprobs is None  # none given: none, not []


def test_trim_marks_a_completion_that_ran_out_of_tokens_unfinished():
    c = trim(CharTokenizer(VOCAB), [1, 5, 6], STOP_SEQUENCES, eos_ids=[0])
    assert c == Completion(text="    return x\n    pass", ids=[1, 5, 6], n_tokens=3, finished=False)


# ---------------------------------------------------------------------------------------------------------------
# a real model that has memorised bodies followed by a new top-level def


@pytest.fixture(scope="module")
def memorised():
    torch.set_num_threads(1)  # 2 shared cores; this model is tiny
    tasks = load_tasks("synthetic", "test")[:6]
    model, tok, _ = memorizer.build_memorizer([t.prompt + t.canonical_solution + TAIL for t in tasks])
    return model, tok, tasks


def test_generation_stops_at_the_next_def_and_ids_are_what_the_model_produced(memorised):
    model, tok, tasks = memorised
    out = generation.generate(model, tok, [t.prompt for t in tasks], max_new_tokens=60, progress=False)
    prompt_ids = generation.encode_prompts(tok, [t.prompt for t in tasks])
    for task, (c,), p in zip(tasks, out, prompt_ids, strict=True):
        assert c.text == task.canonical_solution and c.finished
        assert c.n_tokens == len(c.ids) and tok.decode(c.ids).startswith(c.text + "\ndef ")
        # Exact ids: teacher-forcing prompt + ids through the model gives back each id as the greedy choice.
        with torch.no_grad():
            logits = model(torch.tensor([p + c.ids])).logits[0]  # [len(p) + n_tokens, vocab]
        assert logits[len(p) - 1 : -1].argmax(-1).tolist() == c.ids


def test_greedy_answers_do_not_depend_on_batch_size(memorised):
    model, tok, tasks = memorised
    prompts = [t.prompt for t in tasks]
    one = generation.generate(model, tok, prompts, max_new_tokens=60, batch_size=1, progress=False)
    many = generation.generate(model, tok, prompts, max_new_tokens=60, batch_size=6, progress=False)
    assert [c[0].ids for c in one] == [c[0].ids for c in many]  # left padding and the mask work


def test_greedy_with_n_returns_n_copies(memorised):
    model, tok, tasks = memorised
    out = generation.generate(model, tok, [tasks[0].prompt], n=3, max_new_tokens=60, progress=False)
    assert len(out) == 1 and len(out[0]) == 3 and len({tuple(c.ids) for c in out[0]}) == 1
    out[0][0].ids.append(-1)  # copies, not aliases: a trainer may edit one
    assert out[0][1].ids[-1] != -1


def test_sampling_is_seeded_and_leaves_the_callers_rng_alone(memorised):
    model, tok, tasks = memorised
    prompts = [t.prompt for t in tasks[:3]]
    kw = dict(n=4, temperature=3.0, max_new_tokens=12, batch_size=5, progress=False)  # hot: samples differ
    torch.manual_seed(7)
    untouched = torch.rand(1)  # what the caller draws next without any generate call
    torch.manual_seed(7)
    a = generation.generate(model, tok, prompts, seed=1, **kw)
    assert torch.rand(1) == untouched  # generate forks the RNG: training randomness is not disturbed
    b = generation.generate(model, tok, prompts, seed=1, **kw)
    c = generation.generate(model, tok, prompts, seed=2, **kw)
    ids = lambda out: [[s.ids for s in row] for row in out]  # noqa: E731
    assert ids(a) == ids(b)
    assert ids(a) != ids(c)
    assert [len(row) for row in a] == [4, 4, 4]
    assert all(s.n_tokens <= 12 for row in a for s in row)


def test_sampling_is_gumbel_max_with_whole_batch_noise_and_records_the_drawn_logprobs(memorised):
    """Each draw is argmax(top_p(logits / T) - log(-log u)), u the step's torch.rand(B, V) under the seed for the
    whole batch, so a row's draws do not depend on when the other rows finished; rows run longest prompt first; the
    recorded log-prob is the drawn id's under that tempered, top-p-warped distribution. Replayed here by teacher
    forcing each row's prompt and ids."""
    from transformers.generation.logits_process import TopPLogitsWarper

    model, tok, tasks = memorised
    prompt_ids = generation.encode_prompts(tok, [t.prompt for t in tasks])
    prompts = [t.prompt for _, t in sorted(zip(prompt_ids, tasks, strict=True), key=lambda r: len(r[0]))][:4]
    ids = generation.encode_prompts(tok, prompts)
    order = sorted(range(len(prompts)), key=lambda i: -len(ids[i]))  # the sampler's row order
    assert order != list(range(len(prompts)))  # given shortest first: the sampler reorders them
    temperature, top_p, seed, max_new = 3.0, 0.9, 3, 12
    out = generation.generate(
        model, tok, prompts, temperature=temperature, top_p=top_p, max_new_tokens=max_new, seed=seed,
        batch_size=8, logprobs=True, progress=False,
    )  # fmt: skip
    rows = [row[0] for row in out]
    lengths = sorted(c.n_tokens for c in rows)
    assert lengths[0] < max_new and lengths[0] < lengths[-1]  # a row finished while another still wrote
    g = torch.Generator().manual_seed(seed)
    warp = TopPLogitsWarper(top_p)
    draws = 0
    for b, i in enumerate(order):
        c = rows[i]
        with torch.no_grad():
            logits = model(torch.tensor([ids[i] + c.ids])).logits[0, len(ids[i]) - 1 : -1].float()
        if b == 0:
            noise = [torch.rand(len(prompts), logits.shape[-1], generator=g) for _ in range(max_new)]
        scores = warp(None, logits / temperature)
        assert (scores == -float("inf")).any()  # top-p cuts tokens here
        for t, drawn in enumerate(c.ids):
            assert drawn == int((scores[t] - torch.log(-torch.log(noise[t][b]))).argmax()), (i, t)
            assert c.logprobs[t] == pytest.approx(float(torch.log_softmax(scores[t], -1)[drawn]), abs=1e-4)
            draws += 1
    assert draws == sum(lengths)


def test_a_finished_row_leaves_the_batch_and_each_prompt_is_prefilled_once(memorised, monkeypatch):
    """The forwards the sampler runs: one prefill row per distinct prompt (its samples share the cache), then each
    row fed back only while it still writes (eos, a stop sequence or the token budget takes it out), and no forward
    after the last draw."""
    model, tok, tasks = memorised
    calls = []
    real = generation._forward

    def counting(model, **kw):
        calls.append((kw.get("past_key_values") is not None, kw["input_ids"].shape[0]))
        return real(model, **kw)

    monkeypatch.setattr(generation, "_forward", counting)
    prompts = [t.prompt for t in tasks[:3]]
    for stop, max_new, ends in ((STOP_SEQUENCES, 60, "stop"), ((), 200, "eos"), (STOP_SEQUENCES, 5, "budget")):
        calls.clear()
        out = generation.generate(
            model, tok, prompts, n=2, temperature=1.0, max_new_tokens=max_new, stop=stop, seed=0, progress=False
        )
        rows = [c for row in out for c in row]
        if ends == "eos":
            assert all(c.finished and c.ids[-1] == tok.eos_token_id for c in rows)
        elif ends == "stop":
            assert all(c.finished and c.ids[-1] != tok.eos_token_id for c in rows)
        else:
            assert not any(c.finished for c in rows) and {c.n_tokens for c in rows} == {5}
        assert len({c.n_tokens for c in rows}) > 1 or ends == "budget"
        prefill = [rows_in for cached, rows_in in calls if not cached]
        decode = [rows_in for cached, rows_in in calls if cached]
        assert sum(prefill) == len(prompts), ends  # not one per sample
        assert sum(decode) == sum(c.n_tokens - 1 for c in rows), ends  # a finished row is not fed back
        assert len(decode) == max(c.n_tokens for c in rows) - 1, ends  # no forward after the last draw


def test_sampling_runs_without_dropout_and_gives_the_model_back_in_its_mode(memorised):
    model, tok, tasks = memorised
    prompts = [t.prompt for t in tasks[:2]]
    attention = [m for m in model.modules() if hasattr(m, "attention_dropout")]
    assert attention
    want = [row[0].ids for row in generation.generate(model, tok, prompts, max_new_tokens=30, progress=False)]
    x = torch.tensor([generation.encode_prompts(tok, prompts[:1])[0]])
    try:
        for m in attention:
            m.attention_dropout = 0.9
        model.train()
        torch.manual_seed(0)
        with torch.no_grad():
            assert not torch.allclose(model(x).logits, model.eval()(x).logits)  # the dropout acts in train mode
        model.train()
        got = [row[0].ids for row in generation.generate(model, tok, prompts, max_new_tokens=30, progress=False)]
        assert got == want and model.training  # sampled in eval mode, handed back in train mode
        model.eval()
        generation.generate(model, tok, prompts[:1], max_new_tokens=4, progress=False)
        assert not model.training
    finally:
        for m in attention:
            m.attention_dropout = 0.0
        model.eval()


def test_eos_ids_and_special_tokens_in_a_completion(memorised):
    """The model's eos ids and the tokenizer's (both end a row); a special token sampled mid-completion is not text."""
    from types import SimpleNamespace

    model, tok, _ = memorised
    fake = SimpleNamespace(generation_config=SimpleNamespace(eos_token_id=[7]))
    assert generation._eos_ids(fake, tok) == [7, tok.eos_token_id]
    assert generation._eos_ids(SimpleNamespace(), tok) == [tok.eos_token_id]
    body = tok("    return 1", add_special_tokens=False)["input_ids"]
    c = trim(tok, body[:1] + [tok.bos_token_id] + body[1:], (), [tok.eos_token_id])
    assert c.text == tok.decode(body) and "<" not in c.text and c.n_tokens == len(body) + 1


def test_vllm_backend_without_vllm_says_how_to_get_it():
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed here; the GPU path is exercised on GPU machines")
    with pytest.raises(ImportError, match="requirements-vllm.txt"):
        generation.generate("tiny", None, ["def f():\n"], backend="vllm")


def test_bad_arguments_fail_clearly():
    with pytest.raises(ValueError, match="backend"):
        generation.generate(None, None, ["x"], backend="jax")
    with pytest.raises(ValueError, match="temperature"):
        generation.generate(None, None, ["x"], temperature=-1)
    with pytest.raises(ValueError, match="n must be at least 1, got 0"):
        generation.generate(None, None, ["x"], n=0)
    with pytest.raises(ValueError, match=r"logprobs=True is for sampling \(temperature > 0\)"):
        generation.generate(None, None, ["x"], temperature=0.0, logprobs=True)
