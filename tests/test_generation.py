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
    a = generation.generate(model, tok, prompts, seed=1, **kw)
    after_a = torch.rand(1)
    torch.manual_seed(7)
    b = generation.generate(model, tok, prompts, seed=1, **kw)
    assert torch.rand(1) == after_a  # generate forks the RNG: training randomness is not disturbed
    c = generation.generate(model, tok, prompts, seed=2, **kw)
    ids = lambda out: [[s.ids for s in row] for row in out]  # noqa: E731
    assert ids(a) == ids(b)
    assert ids(a) != ids(c)
    assert [len(row) for row in a] == [4, 4, 4]
    assert all(s.n_tokens <= 12 for row in a for s in row)


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
