"""DPO path: the pair rule on hand-made annotations, resumable annotation, merge equality, the sampled-id rows, a
2-step RPO run on them with its loss weights."""

import json
from types import SimpleNamespace

import pytest
import torch

from codelib.engine.candidates import PairRule, annotate, build_preferences, make_pairs, rank
from codelib.plumbing.params import read_jsonl
from codelib.tasks import Task


def row(tid, i, completion, passed, frac, tokens=10):
    return {
        "task_id": tid,
        "index": i,
        "completion": completion,
        "passed": passed,
        "test_fraction": frac,
        "tokens": tokens,
        "status": "passed" if passed else "failed",
        "detail": "",
    }


ANNOTATED = [
    # mixed task: two passing (one duplicated), three failing at different test fractions
    row("mixed", 0, "good_long", True, 1.0, tokens=20),
    row("mixed", 1, "good_short", True, 1.0, tokens=5),
    row("mixed", 2, "good_short", True, 1.0, tokens=5),
    row("mixed", 3, "bad_zero", False, 0.0),
    row("mixed", 4, "bad_half", False, 0.5),
    row("mixed", 5, "bad_close", False, 0.8),  # gap 0.2 < 0.4: never a rejected
    # every candidate passes / fails: no pairs
    row("all_pass", 0, "a", True, 1.0),
    row("all_pass", 1, "b", True, 1.0),
    row("all_fail", 0, "x", False, 0.0),
    row("all_fail", 1, "y", False, 0.3),
]


def test_rank_dedups_and_breaks_ties_by_length():
    ranked = rank(ANNOTATED)
    mixed = [r["completion"] for r in ranked["mixed"]]
    assert mixed[:2] == ["good_short", "good_long"]  # same reward, shorter first
    assert mixed.count("good_short") == 1
    assert mixed[-1] == "bad_zero"


def test_pair_rule():
    pairs = make_pairs(rank(ANNOTATED), PairRule(min_chosen=0.8, min_gap=0.4, max_pairs_per_task=10))
    assert {p["task_id"] for p in pairs} == {"mixed"}  # all-pass and all-fail tasks give none
    got = {(p["chosen"], p["rejected"]) for p in pairs}
    assert got == {
        ("good_long", "bad_zero"),
        ("good_long", "bad_half"),
        ("good_short", "bad_zero"),
        ("good_short", "bad_half"),
    }
    assert all(p["chosen_fraction"] - p["rejected_fraction"] >= 0.4 for p in pairs)


def test_pair_cap_prefers_distinct_completions():
    pairs = make_pairs(rank(ANNOTATED), PairRule(max_pairs_per_task=2))
    assert len(pairs) == 2
    assert len({p["chosen"] for p in pairs}) == 2 and len({p["rejected"] for p in pairs}) == 2


def test_pair_rule_bounds_are_inclusive():
    """A chosen at exactly min_chosen and a gap of exactly min_gap (1.0 - 0.6 == 0.4 in floats) make a pair."""
    ranked = rank([row("t", 0, "good", True, 1.0), row("t", 1, "bad", False, 0.0), row("t", 2, "near", False, 0.6)])
    strict = make_pairs(ranked, PairRule(min_chosen=1.0, min_gap=1.0))
    assert [(p["chosen"], p["rejected"]) for p in strict] == [("good", "bad")]
    assert {p["rejected"] for p in make_pairs(ranked, PairRule(min_chosen=0.8, min_gap=0.4))} == {"bad", "near"}


def test_rejected_always_fails_even_without_a_margin():
    """min_chosen = min_gap = 0 (as an RPO run may set): every pair is still a passing chosen against a failing
    rejected, never two passing completions nor a completion against itself."""
    pairs = make_pairs(rank(ANNOTATED), PairRule(min_chosen=0.0, min_gap=0.0, max_pairs_per_task=10))
    expected = {(c, r) for c in ("good_long", "good_short") for r in ("bad_zero", "bad_half", "bad_close")}
    assert len(pairs) == 6 and {(p["chosen"], p["rejected"]) for p in pairs} == expected


def test_pairs_under_the_cap_are_a_draw_the_seed_fixes():
    """Under the cap the pairs are drawn from all eligible ones: one seed gives one set, and over seeds every eligible
    pair is drawn (not always the best-ranked ones)."""
    ranked = rank(ANNOTATED)

    def pick(seed):
        return [(p["chosen"], p["rejected"]) for p in make_pairs(ranked, PairRule(max_pairs_per_task=1), seed)]

    assert pick(3) == pick(3)
    drawn = {pair for seed in range(20) for pair in pick(seed)}
    assert drawn == {(c, r) for c in ("good_long", "good_short") for r in ("bad_zero", "bad_half")}


def test_pair_cap_is_per_task():
    """K caps each task's pairs, not the whole set: two tasks with two eligible pairs each give 2 + 2."""
    rows = [
        row(t, i, f"{t}_{c}", passed, frac)
        for t in ("a", "b")
        for i, (c, passed, frac) in enumerate([("ok", True, 1.0), ("bad", False, 0.0), ("worse", False, 0.1)])
    ]
    pairs = make_pairs(rank(rows), PairRule(max_pairs_per_task=2))
    assert sorted(p["task_id"] for p in pairs) == ["a", "a", "b", "b"]


def test_pairs_carry_each_sides_own_sampled_ids():
    """The ids a pair trains on are those its chosen and its rejected completion were sampled as."""
    rows = [dict(row("t", 0, "good", True, 1.0), ids=[1, 2]), dict(row("t", 1, "bad", False, 0.0), ids=[3])]
    (p,) = make_pairs(rank(rows), PairRule())
    assert (p["chosen"], p["chosen_ids"], p["rejected"], p["rejected_ids"]) == ("good", [1, 2], "bad", [3])


def test_preferences_rank_by_the_given_reward_reading_the_tasks_prompts(tmp_path):
    """A `reward` spec replaces RANKING, and a reward that reads the code sees it after its task's prompt: by quality,
    `y = x` is clean inside `def f(x):` (without the prompt, x is undefined), so the shorter of the two clean bodies
    ranks first; by RANKING, the one that passes does."""
    a, b, c = "    y = x\n    return y\n", "    return 1\n", "    return (\n"
    rows = [row("t", 0, a, False, 0.0, tokens=5), row("t", 1, b, True, 1.0, tokens=20), row("t", 2, c, False, 0.0, 30)]
    path = tmp_path / "ann.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tasks = [Task("t", "def f(x):\n", "assert f(1) == 1", "f", "")]
    m = build_preferences(path, tasks, tmp_path, PairRule(), {}, reward={"quality": 1.0})
    (nbest,) = read_jsonl(tmp_path / "nbest.jsonl")
    assert [r["completion"] for r in nbest["ranked"]] == [a, b, c]
    assert [r["completion"] for r in rank(rows)["t"]] == [b, a, c]
    assert m["counts"]["candidates"] == 3 and m["counts"]["passed"] == 1


def test_manifest_counts(tmp_path):
    path = tmp_path / "ann.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ANNOTATED))
    tasks = [Task(t, "p", "assert 1", "f", "") for t in ("mixed", "all_pass", "all_fail")]
    m = build_preferences(path, tasks, tmp_path, PairRule(max_pairs_per_task=3), {"source_policy": "x"})
    assert m["counts"]["pairs"] == 3 and m["tasks_with_no_pass"] == 1 and m["tasks_with_no_fail"] == 1
    assert m["counts"]["distinct"] == 9 and m["source_policy"] == "x"
    assert len(read_jsonl(tmp_path / "pairs.jsonl")) == 3 and (tmp_path / "nbest.jsonl").exists()
    assert all(p["prompt"] == "p" for p in read_jsonl(tmp_path / "pairs.jsonl"))
    assert m["counts"]["candidates"] == 10 and m["counts"]["passed"] == 5 and m["counts"]["tasks_with_pairs"] == 1


def test_no_preference_pairs_ends_the_command_with_its_fix_not_a_traceback(tmp_path, monkeypatch, capsys):
    """A start whose candidates all fail (a random model, as on a first GPU run) leaves DPO without pairs: the command
    ends with the counts and what to change, as a wrong params file does."""
    from codelib.plumbing.params import REPO_ROOT
    from codelib.trainers import dpo

    monkeypatch.chdir(REPO_ROOT)
    monkeypatch.setenv("CODELIB_CHECKPOINTS", str(tmp_path))
    monkeypatch.setattr(dpo, "check_init", lambda cfg: None)

    def all_failed(cfg):
        (cfg.run_dir / "pairs.jsonl").write_text("")
        return {"tasks_with_no_pass": 16, "tasks_with_no_fail": 0}

    monkeypatch.setattr(dpo, "prepare", all_failed)
    with pytest.raises(SystemExit) as ended:
        dpo.main_train(dpo.Config, dpo.train, argv=["params/tiny/05_dpo.yaml"])
    message = str(ended.value.code)
    assert message.startswith("error: no preference pairs: 16 tasks had no passing") and "n_candidates" in message
    assert "Traceback" not in message + capsys.readouterr().err
    with pytest.raises(ValueError, match="no preference pairs"):  # --debug: the error itself, where it was raised
        dpo.main_train(dpo.Config, dpo.train, argv=["params/tiny/05_dpo.yaml", "--debug"])


def test_annotation_resumes_without_rerunning(tmp_path, monkeypatch):
    from codelib import sandbox

    task = Task(
        "t/1", "def f(x):\n", "def check(candidate):\n    assert candidate(2) == 4\n", "f", "    return 2 * x\n"
    )
    cands = tmp_path / "candidates.jsonl"
    good, bad = "    return 2 * x\n", "    return x\n"
    cands.write_text(
        "".join(
            json.dumps({"task_id": "t/1", "index": i, "completion": c, "tokens": 3}) + "\n"
            for i, c in enumerate([good, bad, good, bad, good])
        )
    )
    out = tmp_path / "ann.jsonl"
    # a first run that stops after the first batch of 2
    calls = []
    real = sandbox.check

    def counting(tasks, completions, **kw):
        calls.append(len(completions))
        if len(calls) == 2:
            raise KeyboardInterrupt  # stopped mid-run
        return real(tasks, completions, **kw)

    monkeypatch.setattr(sandbox, "check", counting)
    with pytest.raises(KeyboardInterrupt):
        annotate(cands, [task], out, batch_size=2)
    assert len(read_jsonl(out)) == 2  # the finished batch is kept
    calls.clear()
    monkeypatch.setattr(sandbox, "check", lambda t, c, **kw: (calls.append(len(c)), real(t, c, **kw))[1])
    annotate(cands, [task], out, batch_size=2)
    assert calls == [2, 1]  # only the 3 left were run
    rows = read_jsonl(out)
    assert [r["index"] for r in rows] == [0, 1, 2, 3, 4]
    assert [r["passed"] for r in rows] == [True, False, True, False, True]
    annotate(cands, [task], out, batch_size=2)
    assert len(read_jsonl(out)) == 5  # a rerun adds nothing


def test_annotation_resume_tells_tasks_apart(tmp_path, monkeypatch):
    """Annotated rows are keyed by (task, index): one task's sample 0 already annotated does not skip another's."""
    from codelib import sandbox

    tasks = [Task(t, "def f(x):\n", "assert f(1) == 1", "f", "") for t in ("a", "b")]
    cands = tmp_path / "candidates.jsonl"
    row0 = {"index": 0, "completion": "    return x\n", "tokens": 3}
    cands.write_text("".join(json.dumps({"task_id": t, **row0}) + "\n" for t in ("a", "b")))
    out = tmp_path / "ann.jsonl"
    out.write_text(
        json.dumps({"task_id": "a", **row0, "status": "passed", "passed": True, "test_fraction": 1.0}) + "\n"
    )
    judged = []

    def check(tasks, codes, **kw):
        judged.extend(t.task_id for t in tasks)
        return [
            SimpleNamespace(status="failed", passed=False, detail="", tests_passed=0, tests_total=1) for _ in codes
        ]

    monkeypatch.setattr(sandbox, "check", check)
    annotate(cands, tasks, out)
    assert judged == ["b"]
    assert [(r["task_id"], r["passed"]) for r in read_jsonl(out)] == [("a", True), ("b", False)]


def test_generated_candidates_are_extracted_indexed_and_reused_only_for_the_same_settings(tmp_path, monkeypatch):
    """candidates.jsonl keeps each sample's raw text, its extracted code (what is judged) and its index; a second call
    with the same settings reuses the file, one with other settings samples again."""
    from codelib.engine import candidates

    text = "Here:\n```python\ndef f(x):\n    return 2 * x\n```"
    calls = []

    def generate(model, tokenizer, prompts, n, **kw):
        calls.append(n)
        return [[SimpleNamespace(text=text, n_tokens=7, finished=True, ids=[1, 2]) for _ in range(n)] for _ in prompts]

    monkeypatch.setattr(candidates, "generate", generate)
    task = Task("t/1", "def f(x):\n", "assert f(2) == 4", "f", "    return 2 * x\n")
    path = tmp_path / "candidates.jsonl"
    settings = dict(temperature=1.0, top_p=1.0, max_new_tokens=16, seed=0)
    candidates.generate_candidates(None, None, [task], path, n=2, **settings)
    rows = read_jsonl(path)
    assert [(r["index"], r["raw"], r["completion"]) for r in rows] == [(i, text, "    return 2 * x\n") for i in (0, 1)]
    assert rows[0]["ids"] == [1, 2] and rows[0]["tokens"] == 7
    candidates.generate_candidates(None, None, [task], path, n=2, **settings)  # the same settings: reused
    candidates.generate_candidates(None, None, [task], path, n=3, **settings)  # other settings: sampled again
    assert calls == [2, 3] and [r["index"] for r in read_jsonl(path)] == [0, 1, 2]


@pytest.mark.slow
def test_merged_model_logits_equal_adapter_logits(tiny_sft, tmp_path):
    from codelib.policy.models import load_policy, merge_adapter

    # make the adapter non-trivial so the test could fail: perturb lora_B (it is zero at init)
    adapter, tok = load_policy(tiny_sft)
    merged_dir = merge_adapter(tiny_sft, tmp_path / "merged")
    merged, _ = load_policy(merged_dir)
    ids = torch.tensor([tok("def f(x):\n    return x + 1\n")["input_ids"]], device=adapter.device)
    with torch.no_grad():
        a = adapter(ids).logits
        m = merged(ids.to(merged.device)).logits.to(a.device)
    with adapter.disable_adapter(), torch.no_grad():
        base = adapter(ids).logits
    assert (a - base).abs().max() > 1e-4  # the adapter does change the logits
    # fp32 (CPU): equal to rounding; bf16 (a GPU): the merged weights are rounded to 8 significant bits (#32)
    atol = 1e-4 if merged.dtype == torch.float32 else 2**-6 * float(a.abs().max())
    assert torch.allclose(a.float(), m.float(), atol=atol)


def test_sampled_ids_keep_the_draws_and_fall_back_to_text_only_when_ids_are_missing(tiny_base, capsys):
    """DPO rows are the sampled ids: the prompt as the sampler encoded it, each completion's ids as drawn (no eos
    added), cut to fit max_length; one pair without ids (either side) turns the set into text rows TRL tokenises."""
    from transformers import AutoTokenizer

    from codelib.policy.generation import encode_prompts
    from codelib.trainers.dpo import sampled_ids

    tok = AutoTokenizer.from_pretrained(tiny_base)
    pairs = [
        {"prompt": "def f(x):\n", "chosen": "a", "rejected": "b", "chosen_ids": [5, 6, 7, 8], "rejected_ids": [9]},
        {"prompt": "def g():\n", "chosen": "c", "rejected": "d", "chosen_ids": [10], "rejected_ids": [11, 12]},
    ]
    prompt, other = encode_prompts(tok, [p["prompt"] for p in pairs])
    rows = sampled_ids(pairs, tok, max_length=len(prompt) + 2)
    assert rows[0] == {"prompt_ids": prompt, "chosen_ids": [5, 6], "rejected_ids": [9]}  # cut to the 2 left
    assert rows[1] == {
        "prompt_ids": other,
        "chosen_ids": [10],
        "rejected_ids": [11, 12][: len(prompt) + 2 - len(other)],
    }
    assert tok.eos_token_id not in rows[0]["chosen_ids"] + rows[1]["rejected_ids"]
    # prompts longer than max_length: kept whole, and one token of each side (either side cut, not just chosen)
    assert min(len(prompt), len(other)) > 2
    rows = sampled_ids(pairs, tok, max_length=2)
    assert [(r["chosen_ids"], r["rejected_ids"]) for r in rows] == [([5], [9]), ([10], [11])]
    assert [r["prompt_ids"] for r in rows] == [prompt, other]
    for missing in ("chosen_ids", "rejected_ids"):
        hand = [dict(pairs[0]), {**pairs[1], missing: None}]
        rows = sampled_ids(hand, tok, max_length=64)
        assert rows == [{k: p[k] for k in ("prompt", "chosen", "rejected")} for p in hand], missing
        assert "TRL tokenises their text" in capsys.readouterr().out


@pytest.mark.slow
def test_rpo_trains_on_the_sampled_ids_with_its_loss_weights(tiny_sft, monkeypatch):
    """RPO (sigmoid DPO + NLL at the weights given) for two steps: TRL receives the loss types and weights, trains on
    the pairs' sampled ids as they are (its own preparation would re-tokenise text and add eos), and the LoRA moves."""
    from safetensors.torch import load_file
    from transformers import AutoTokenizer

    from codelib.policy.generation import encode_prompts
    from codelib.trainers import dpo

    cfg = dpo.Config(
        profile="test",
        init=str(tiny_sft),
        limit=24,
        n_candidates=4,
        max_new_tokens=24,
        steps=2,
        batch_size=4,
        learning_rate=1e-2,
        report_to="none",
        min_chosen=0.0,
        min_gap=0.0,
        threads=1,
        loss_type=["sigmoid", "sft"],
        loss_weights=[1.0, 0.5],
    )
    manifest = dpo.prepare(cfg)
    tok = AutoTokenizer.from_pretrained(tiny_sft)
    if manifest["counts"]["pairs"] == 0:
        # the barely trained tiny model may pass nothing; seed a pair from the canonical solution, as ids
        from codelib.tasks import load_tasks

        t = load_tasks("synthetic", "train")[0]
        chosen, rejected = t.canonical_solution, "    return None\n"
        ids = tok([chosen, rejected], add_special_tokens=False)["input_ids"]
        pair = {"task_id": t.task_id, "prompt": t.prompt, "chosen": chosen, "rejected": rejected}
        pair.update(chosen_ids=ids[0], rejected_ids=ids[1])
        (cfg.run_dir / "pairs.jsonl").write_text(json.dumps(pair) + "\n")
        monkeypatch.setattr(dpo, "prepare", lambda cfg: manifest)  # keep the seeded pairs
    pairs = read_jsonl(cfg.run_dir / "pairs.jsonl")
    assert all(p["chosen_ids"] and p["rejected_ids"] for p in pairs)
    trainers = []
    real_init = dpo.SampledIdsDPOTrainer.__init__

    def init(self, *a, **k):
        real_init(self, *a, **k)
        trainers.append(self)

    monkeypatch.setattr(dpo.SampledIdsDPOTrainer, "__init__", init)
    run = dpo.train(cfg)
    (trainer,) = trainers
    assert list(trainer.args.loss_type) == ["sigmoid", "sft"] and list(trainer.args.loss_weights) == [1.0, 0.5]
    data = trainer.train_dataset
    room = [cfg.max_length - len(encode_prompts(tok, [p["prompt"]])[0]) for p in pairs]
    assert data["chosen_ids"] == [p["chosen_ids"][:r] for p, r in zip(pairs, room, strict=True)]
    assert data["rejected_ids"] == [p["rejected_ids"][:r] for p, r in zip(pairs, room, strict=True)]
    assert data["prompt_ids"] == encode_prompts(tok, [p["prompt"] for p in pairs])
    weights = load_file(str(run / "adapter_model.safetensors"))
    assert any(float(v.abs().sum()) > 0 for k, v in weights.items() if "lora_B" in k)
    rows = read_jsonl(run / "metrics.jsonl")
    assert any("rewards/margins" in r for r in rows)
    assert json.loads((run / "config.json").read_text())["label"] == "RPO (DPO + NLL, 1:0.5)"


def test_dpo_settings_are_checked_named_and_reach_trl(tmp_path, monkeypatch):
    """Each check of the DPO stage's Config names its setting; a run's algorithm and label follow its losses and
    weights (what config.json records and the comparison table names the row); DPOConfig gets every setting."""
    from codelib.trainers import dpo

    monkeypatch.setenv("CODELIB_CHECKPOINTS", str(tmp_path))
    for bad, message in (
        (dict(n_candidates=1), "at least 2 candidates per task; you gave n_candidates=1"),
        (dict(loss_type=["sigmoid", "sft"], loss_weights=[1.0]), "one weight per loss"),
        (dict(min_gap=1.5), r"min_chosen and min_gap are test fractions in \[0, 1\]"),
        (dict(min_chosen=-0.1), r"min_chosen and min_gap are test fractions in \[0, 1\]"),
        (dict(gen_backend="sglang"), "gen_backend must be 'hf' or 'vllm'"),
    ):
        with pytest.raises(ValueError, match=message):
            dpo.Config(**bad)
    dpo.Config(n_candidates=2, min_gap=1.0, min_chosen=0.0)  # the bounds themselves are allowed
    cases = [
        (["sigmoid"], [], ("dpo", "DPO")),
        (["sigmoid", "sft"], [], ("rpo", "RPO (DPO + NLL, 1:1)")),
        (["sigmoid", "sft"], [0.2, 1.0], ("rpo", "RPO (DPO + NLL, 0.2:1)")),
        (["ipo"], [], ("dpo", "DPO (ipo)")),
        (["sigmoid", "bco_pair"], [], ("dpo", "DPO (sigmoid, bco_pair)")),  # no NLL term: not RPO
    ]
    for losses, weights, named in cases:
        assert dpo.run_label(dpo.Config(loss_type=losses, loss_weights=weights)) == named, losses
    cfg = dpo.Config(
        beta=0.3, loss_type=["sigmoid", "sft"], loss_weights=[1.0, 0.5], batch_size=6, max_length=200, steps=3
    )
    args = dpo.dpo_args(cfg)
    assert (args.beta, list(args.loss_type), list(args.loss_weights)) == (0.3, ["sigmoid", "sft"], [1.0, 0.5])
    assert (args.per_device_train_batch_size, args.max_length, args.max_steps) == (6, 200, 3)
    assert args.lr_scheduler_type == "constant" and args.logging_steps == 1
    default = dpo.dpo_args(dpo.Config())  # plain sigmoid DPO at beta 0.1, 16 pairs a step
    assert dpo.run_label(dpo.Config()) == ("dpo", "DPO") and list(default.loss_type) == ["sigmoid"]
    assert (default.beta, default.per_device_train_batch_size, default.max_length) == (0.1, 16, 512)
    assert default.loss_weights is None  # [] weighs every loss 1 (TRL's default)


def test_prepare_samples_judges_and_pairs_with_the_configured_settings(tmp_path, monkeypatch):
    """`prepare` hands each setting to its step: the sampling seed and sizes to the candidates, the sandbox's to the
    annotation, the pair rule, the ranking reward and the training seed to the pair builder, the settings to the
    manifest; `limit` takes the first tasks."""
    from codelib.trainers import dpo

    monkeypatch.setenv("CODELIB_CHECKPOINTS", str(tmp_path))
    seen = {}
    monkeypatch.setattr(dpo, "load_policy", lambda init: ("model", "tokenizer"))
    monkeypatch.setattr(dpo, "generate_candidates", lambda *a, **k: seen.update(gen=(a, k)))
    monkeypatch.setattr(dpo, "annotate", lambda *a, **k: seen.update(annotate=(a, k)))
    monkeypatch.setattr(dpo, "build_preferences", lambda *a: seen.update(pairs=a) or {"counts": {}})
    rank_by = {"test_fraction": 1.0}
    cfg = dpo.Config(
        init="tiny", limit=3, n_candidates=5, gen_seed=11, gen_batch_size=9, temperature=0.9, top_p=0.95, max_new_tokens=20,
        min_chosen=0.7, min_gap=0.3, max_pairs_per_task=2, seed=4, rewards=rank_by, workers=1, timeout_s=2.5,
    )  # fmt: skip
    dpo.prepare(cfg)
    (model, tok, tasks, path, n, temperature, top_p, max_new, gen_seed), kw = seen["gen"]
    assert (model, tok, n, temperature, top_p, max_new, gen_seed) == ("model", "tokenizer", 5, 0.9, 0.95, 20, 11)
    assert [t.task_id for t in tasks] == [t.task_id for t in dpo.load_tasks(cfg.dataset, cfg.split)[:3]]
    assert kw == {"batch_size": 9, "source": "tiny", "backend": "hf"} and path.name == "candidates.jsonl"
    assert seen["annotate"][1] == {"workers": 1, "timeout_s": 2.5}
    _, judged, out, rule, settings, seed, rewards = seen["pairs"]
    assert len(judged) == 3 and out == cfg.run_dir and seed == 4 and rewards == rank_by
    assert rule == PairRule(0.7, 0.3, 2)
    assert settings == {
        "source_policy": "tiny",
        "n_candidates": 5,
        "temperature": 0.9,
        "top_p": 0.95,
        "max_new_tokens": 20,
        "gen_seed": 11,
    }


def test_prepare_samples_the_candidates_at_the_runs_threads(tmp_path, monkeypatch):
    """The notebook builds the preference data before `train` seeds the run: the candidates are still sampled at
    the run's `threads` (torch's default instead would give other floats on a machine with another core count, and
    runs trained at once would stall on each other's cores)."""
    from codelib.trainers import dpo

    monkeypatch.setenv("CODELIB_CHECKPOINTS", str(tmp_path))
    monkeypatch.delenv("CODELIB_THREADS", raising=False)
    seen = []

    class Loaded(Exception):
        pass

    def load_policy(init, **_):
        seen.append(torch.get_num_threads())
        raise Loaded

    monkeypatch.setattr(dpo, "load_policy", load_policy)
    before = torch.get_num_threads()
    try:
        for threads in (1, 2):
            with pytest.raises(Loaded):
                dpo.prepare(dpo.Config(profile="test", init="tiny", limit=4, threads=threads))
    finally:
        torch.set_num_threads(before)
    assert seen == [1, 2]
