"""Multi-turn repair: the public/hidden split never leaks a hidden test into feedback, the feedback text, the loss
mask, RLOO by hand, and the trainer on the tiny model (the adapter changes; a resumed run matches an uninterrupted
one)."""

import json
import math
import random

import pytest
import torch

from codelib.engine import repair, repair_data
from codelib.plumbing.params import read_jsonl
from codelib.policy.logprobs import make_batch
from codelib.sandbox import Verdict
from codelib.tasks import Task, load_tasks, synthetic
from codelib.trainers import repair as trainer

TRAIN, TEST = synthetic.generate(seed=0, n_train=200, n_test=36)


def test_split_is_seeded_recorded_and_follows_the_rule():
    for task in TEST:
        s = repair.split_tests(task, "auto", seed=0)
        assert s.rule == "half" and len(s.public) == 3 and len(s.hidden) == 3  # six asserts, half public
        assert s == repair.split_tests(task, "auto", seed=0)  # a function of (task, rule, seed)
        assert sorted(s.public + s.hidden) == list(range(6))
    assert any(repair.split_tests(t, seed=0) != repair.split_tests(t, seed=1) for t in TEST)
    he = load_tasks("humaneval", "test")[:5]
    for task in he:
        s = repair.split_tests(task, "auto")
        assert s.rule == "first" and s.public == (0,) and len(s.hidden) == len(repair.test_units(task)) - 1
    row = repair.splits_record(TEST[:2], "auto", 0)[0]
    assert set(row) == {"task_id", "public", "hidden", "rule", "seed"}


def test_public_task_keeps_only_public_asserts():
    task = TEST[0]
    s = repair.split_tests(task)
    pub = repair.public_task(task, s)
    hidden = repair.hidden_sources(task, s)
    assert len(hidden) == 3 and all(h not in pub.tests for h in hidden)
    assert len(repair.test_units(pub)) == 3 and pub.tests.startswith("def check(candidate):")


def test_calls_tasks_split_by_case():
    """A `calls` task (LiveCodeBench functional, TACO call-based) has JSON cases as tests, as stdio tasks do."""
    cases = [{"input": f"{i}", "output": f"{i + 1}"} for i in range(4)]
    task = Task("lcb/x", "class Solution:\n", json.dumps(cases), "Solution.f", "", kind="calls", compare="lcb")
    s = repair.split_tests(task, "first")
    assert repair.test_units(task) == [(i, i) for i in range(4)] and s.public == (0,) and s.hidden == (1, 2, 3)
    assert json.loads(repair.public_task(task, s).tests) == cases[:1]
    assert repair.hidden_sources(task, s) == [json.dumps(c) for c in cases[1:]]


def flip(split):
    """The split with public and hidden swapped (hidden_sources of it: the public tests' text)."""
    return repair.TestSplit(split.task_id, split.hidden, split.public, split.rule, split.seed)


def test_feedback_never_shows_a_hidden_test():
    """Wrong attempts judged in the sandbox: every feedback names a public assert (or an error), never a hidden one;
    the full verdict still runs all six tests."""
    rng = random.Random(0)
    tasks, attempts = [], []
    for task in TRAIN[:40]:
        wrong = repair_data._mutations(task.canonical_solution, rng)
        for text in (wrong[0] if wrong else "    return None\n", "    return None\n", "    return 1 / 0\n"):
            tasks.append(task)
            attempts.append(text)
    episodes = [repair.Episode(t, repair.split_tests(t), "tests") for t in tasks]
    public, full = repair.judge_attempts(episodes, attempts, workers=2, timeout_s=5.0)
    shown = 0
    for e, pv, fv in zip(episodes, public, full, strict=True):
        assert fv.tests_total == 6 and pv.tests_total == 3
        fb = repair.feedback_from_detail(pv.detail, pv.status, e.task)
        named = e.task.entry_point + "("
        public_src = [src.replace("candidate(", named) for src in repair.hidden_sources(e.task, flip(e.split))]
        hidden_src = [src.replace("candidate(", named) for src in repair.hidden_sources(e.task, e.split)]
        if pv.passed:
            assert fb == ""
            continue
        shown += 1
        src = fb.rsplit(" failed", 1)[0] if " failed" in fb else fb.split(" raised ", 1)[0]
        assert src in public_src, (fb, public_src)
        assert all(h not in fb for h in hidden_src if h not in public_src)
    assert shown > 60  # most wrong attempts fail a public test


def test_feedback_text_names_the_value_returned_and_is_sanitised():
    task = TEST[0]
    fb = repair.feedback_from_detail("line 3: assert candidate(4) == 9: AssertionError (got 11)", "failed", task)
    assert fb == f"assert {task.entry_point}(4) == 9 failed, got 11"
    err = repair.feedback_from_detail(
        "line 2: assert candidate(1) == 6: NameError: name 'y' is not defined", "failed", task
    )
    assert err == f"assert {task.entry_point}(1) == 6 raised NameError: name 'y' is not defined"
    assert repair.feedback_from_detail("SyntaxError: invalid syntax (line 3)", "error", task).startswith("SyntaxError")
    assert repair.feedback_from_detail("", "timeout", task) == "timed out"
    nasty = repair.feedback_from_detail(
        "line 1: x: AssertionError (got '\x1b[2J" + "é" * 500 + "\n\r')", "failed", task
    )
    assert len(nasty) <= repair.FEEDBACK_CHARS and nasty.isascii() and nasty.isprintable()
    assert repair.feedback_block("") == "# feedback:\n"
    prompt = repair.turn_prompt(task, [("    return 0", "boom")])
    assert prompt == task.prompt + "    return 0\n# feedback: boom\n" + task.prompt


def _verdict(passed: bool) -> Verdict:
    return Verdict(status="passed" if passed else "failed", passed=passed, tests_passed=6 * passed, tests_total=6)


def test_loss_mask_covers_the_policys_tokens_only():
    """One row per turn; the mask marks exactly the attempt's tokens: never the prompt, an earlier attempt given as
    context, or the feedback."""
    from codelib.policy.tiny import train_tokenizer

    tok = train_tokenizer([t.prompt + t.canonical_solution for t in TRAIN], vocab_size=300)
    task = TEST[1]
    split = repair.split_tests(task)
    a1, a2 = "    return 12345\n", task.canonical_solution
    fb = "assert f(1) == 2 failed, got 3"
    ids1, ids2 = tok(a1, add_special_tokens=False)["input_ids"], tok(a2, add_special_tokens=False)["input_ids"]
    e = repair.Episode(task, split, "tests")
    e.turns.append(repair.Turn(repair.turn_prompt(task, []), a1, ids1, _verdict(False), _verdict(False), fb))
    e.turns.append(repair.Turn(repair.turn_prompt(task, [(a1, fb)]), a2, ids2, _verdict(True), _verdict(True), ""))
    ctx, att, owner = repair.episode_rows([e], tok)
    assert owner == [0, 0] and att == [ids1, ids2]
    batch = make_batch(ctx, att, tok.pad_token_id)
    targets = batch.input_ids[:, 1:]  # [R, T-1]: the token each position predicts
    for r, ids in enumerate((ids1, ids2)):
        masked = targets[r][batch.completion_mask[r] == 1].tolist()
        assert masked == ids  # exactly the attempt's tokens, in order
        unmasked = tok.decode(targets[r][(batch.completion_mask[r] == 0) & (batch.attention_mask[r, 1:] == 1)])
        assert a1 not in unmasked or r == 1  # row 2 holds attempt 1 only as (masked) context
    second_context = tok.decode(targets[1][batch.completion_mask[1] == 0].tolist())
    assert "# feedback:" in second_context and "12345" in second_context  # feedback and attempt 1: context only
    assert int(batch.completion_mask.sum()) == len(ids1) + len(ids2)  # each policy token trained once


def test_rloo_advantages_and_episode_loss_by_hand():
    r = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0])
    adv = trainer.rloo_advantages(r, 3)
    assert torch.allclose(adv, torch.tensor([1.0, -0.5, -0.5, 0.0, 0.0, 0.0]))
    row_logp = torch.tensor([-1.0, -2.0, -3.0], requires_grad=True)  # episode 0 took two turns, episode 1 one
    loss = trainer.episode_loss(row_logp, torch.tensor([0, 0, 1]), torch.tensor([2.0, -1.0]), 2)
    assert math.isclose(float(loss.detach()), -(2 * -1 + 2 * -2 + -1 * -3) / 2)
    loss.backward()
    assert torch.allclose(row_logp.grad, torch.tensor([-1.0, -1.0, 0.5]))
    assert repair.episode_reward(1.0, 2, 0.9, 0.1) == pytest.approx(0.8)


def test_repair_examples_teach_the_format():
    """prompt, a wrong attempt, its feedback, the prompt again; the solution is the canonical one."""
    by_id = {t.task_id: t for t in TRAIN}
    ex = repair_data.repair_examples(TRAIN, 50, seed=0, empty_share=0.0)
    assert len(ex) == 50
    for t in ex:
        orig = by_id[t.task_id.removesuffix("/repair")]
        assert t.canonical_solution == orig.canonical_solution and t.tests == orig.tests
        assert t.prompt.startswith(orig.prompt) and t.prompt.endswith("\n" + orig.prompt)
        wrong, _, rest = t.prompt[len(orig.prompt) :].partition("# feedback: ")
        assert wrong and wrong != orig.canonical_solution and rest.count("\n") == 1 + orig.prompt.count("\n")
    empty = repair_data.repair_examples(TRAIN, 50, seed=0, empty_share=1.0)
    assert all("# feedback:\n" in t.prompt for t in empty)
    assert repair_data.repair_examples(TRAIN, 20, seed=0) == repair_data.repair_examples(TRAIN, 20, seed=0)  # seeded
    assert len(repair_data.sft_tasks(TRAIN, 30, seed=0)) == len(TRAIN) + 30


def test_config_errors_say_what_to_fix():
    with pytest.raises(ValueError, match="RLOO needs at least 2"):
        trainer.Config(samples_per_task=1)
    with pytest.raises(ValueError, match="feedback must be one of"):
        trainer.Config(feedback="loud")
    with pytest.raises(ValueError, match="eval_independent"):
        trainer.Config(turns=3, eval_independent=2)


def _kwargs(stage, steps):
    # a barely trained policy passes nothing: the length term gives the RLOO groups reward variance to learn from
    return dict(
        profile="test",
        stage=stage,
        steps=steps,
        batch_size=4,
        samples_per_task=2,
        turns=2,
        rewards={"pass": 1.0, "length": {"alpha": 1.0}},
        max_new_tokens=24,
        save_every=1,
        report_to="none",
        limit=64,
        learning_rate=1e-2,
        threads=1,
    )


@pytest.mark.slow
def test_two_step_multi_turn_run_changes_the_adapter_and_resumes(tiny_sft):
    """2 steps train the adapter and leave every turn in episodes.jsonl; stopped after step 2 and started again for a
    third, the run matches an uninterrupted 3-step run."""
    from safetensors.torch import load_file

    part = trainer.train(trainer.Config(init=str(tiny_sft), **_kwargs("repair_part", 2)))
    weights = load_file(str(part / "adapter_model.safetensors"))
    assert any(float(v.abs().sum()) > 0 for k, v in weights.items() if "lora_B" in k)  # B starts at zero
    episodes = read_jsonl(part / "episodes.jsonl")
    assert [e["step"] for e in episodes] == [1] * 8 + [2] * 8
    retried = [e for e in episodes if e["turns_used"] == 2]
    assert retried, "a barely trained policy fails a public test somewhere"
    assert all("# feedback:" in e["turns"][1]["prompt"] for e in retried)
    assert len(read_jsonl(part / "splits.jsonl")) == 64
    resumed = trainer.train(trainer.Config(init=str(tiny_sft), **_kwargs("repair_part", 3)))
    full = trainer.train(trainer.Config(init=str(tiny_sft), **_kwargs("repair_full", 3)))
    a, b = read_jsonl(full / "metrics.jsonl"), read_jsonl(resumed / "metrics.jsonl")
    assert [r["step"] for r in b] == [1, 2, 3]
    assert read_jsonl(full / "episodes.jsonl") == read_jsonl(resumed / "episodes.jsonl")  # nothing repeated or lost
    for key in ("loss", "reward_mean", "pass_rate", "turns_mean"):
        assert math.isclose(a[2][key], b[2][key], rel_tol=1e-4, abs_tol=1e-6), key


def test_explorer_shows_every_turn():
    from codelib.reports import explore

    task = TEST[2]
    e = repair.Episode(task, repair.split_tests(task), "tests")
    e.turns.append(repair.Turn(task.prompt, "    return 0\n", [1], _verdict(False), _verdict(False), "boom, got 0"))
    e.turns.append(repair.Turn("ctx", task.canonical_solution, [2], _verdict(True), _verdict(True), ""))
    row = e.to_row(step=1)
    text = explore.render_episode(row)
    assert "turn 1" in text and "turn 2" in text and "boom, got 0" in text and task.canonical_solution.strip() in text
    assert "boom, got 0" in explore.render_episode_html(row) and row["passed"] and row["turns_used"] == 2


def test_probe_repair_examples_carry_the_answer_in_the_feedback_only():
    """A probe task's repair example: the wrong attempt is an unrelated guess, and the expected value reaches the
    fix only through the feedback, which quotes a public test (never a hidden one)."""
    probe = synthetic.generate_probe(n=40, held_out=False)
    by_id = {t.task_id: t for t in probe}
    ex = repair_data.repair_examples(probe, 40, seed=0, empty_share=0.0)
    assert len(ex) == 40
    for t in ex:
        orig = by_id[t.task_id.removesuffix("/repair")]
        value = orig.canonical_solution.strip().removeprefix("return ")
        wrong, _, rest = t.prompt[len(orig.prompt) :].partition("# feedback: ")
        feedback = rest.splitlines()[0]
        guess = wrong.strip().removeprefix("return ")
        assert guess != value and feedback.endswith(f"== {value} failed, got {guess}")
        split = repair.split_tests(orig)
        shown = feedback.removesuffix(f" failed, got {guess}").replace(f"{orig.entry_point}(", "candidate(")
        assert shown in repair.hidden_sources(orig, flip(split))  # a public test...
        assert shown not in repair.hidden_sources(orig, split)  # ...and no hidden one
    mixed = repair_data.sft_tasks(TRAIN, 30, seed=0, probe=probe[:10])
    assert len(mixed) == len(TRAIN) + 30 + 2 * 10
    assert sum(t.task_id.endswith("/repair") and "/probe_train/" in t.task_id for t in mixed) == 10
    # without probe tasks the mix is what it was before the probe existed
    old = list(TRAIN) + repair_data.repair_examples(TRAIN, 30, seed=0)
    random.Random(0).shuffle(old)
    assert repair_data.sft_tasks(TRAIN, 30, seed=0) == old


@pytest.mark.slow
def test_evaluate_reports_the_probe_beside_the_held_out_tasks(tiny_sft, tmp_path, monkeypatch, capsys):
    """probe_eval adds the probe's comparison: its own cache, a section of summary.md, rows of comparisons.csv and
    figures; the held-out split's summaries are what evaluate returns."""
    import pandas as pd

    monkeypatch.setenv("CODELIB_REPORTS", str(tmp_path))
    cfg = trainer.Config(
        profile="test",
        eval_checkpoints={"sft": str(tiny_sft)},
        eval_limit=3,
        probe_eval=4,
        eval_samples=1,
        eval_independent=2,
        max_new_tokens=8,
        threads=1,
        bootstrap_iters=20,
    )
    out = trainer.evaluate(cfg)
    assert list(out) == ["sft"] and out["sft"]["tasks"] == 3
    probe = trainer.eval_dir(cfg, "sft", trainer.PROBE)
    assert (probe / "summary.json").exists() and "synthetic/probe/3" in (probe / "episodes.jsonl").read_text()
    report = tmp_path / "test" / "repair"
    text = (report / "summary.md").read_text()
    assert "# Held-out tasks" in text and "# Probe: the answer only in the tests" in text
    assert set(pd.read_csv(report / "comparisons.csv")["task_set"]) == {"held_out", "probe"}
    assert (report / "figures" / "success_by_turn_probe.png").exists()
    said = capsys.readouterr().out  # minutes of evaluation in the pipeline's log used to print nothing
    assert "[repair eval 1/2] sft: 3 synthetic/" in said and "[repair eval 2/2] sft (probe): done in" in said
    trainer.evaluate(cfg)
    assert "[repair eval 2/2] sft (probe): up to date, skipped" in capsys.readouterr().out


@pytest.mark.slow
def test_the_stage_notebook_trains_evaluates_and_shows_every_turn(tiny_sft, tmp_path, monkeypatch):
    """09_repair.ipynb under papermill (as `python -m codelib.pipeline --only 09_repair` runs it): the RL cell trains
    (a code cell, not text), the evaluation finds checkpoints by their params-file paths from the notebook's cwd,
    and the report holds both task sets."""
    import json

    from codelib.plumbing.params import REPO_ROOT, load_yaml
    from codelib.runner import pipeline

    monkeypatch.setenv("CODELIB_REPORTS", str(tmp_path / "reports"))
    params = {
        **load_yaml(REPO_ROOT / "params" / "tiny" / "09_repair.yaml"),
        "profile": "test",
        "stage": "repair_nb",
        "init": str(tiny_sft),
        "steps": 1,
        "batch_size": 2,
        "samples_per_task": 2,
        "max_new_tokens": 8,
        "sft_stage": "",
        "limit": 16,
        "eval_checkpoints": {"repair": "checkpoints/test/repair_nb"},
        "eval_limit": 2,
        "probe_eval": 2,
        "eval_samples": 1,
        "eval_independent": 2,
        "threads": 1,
        "report_to": "none",
        "bootstrap_iters": 20,
        "save_every": 1,
    }
    out = tmp_path / "09_repair.ipynb"
    pipeline.run_stage("09_repair", params, REPO_ROOT / "notebooks" / "09_repair.ipynb", out)
    cells = json.loads(out.read_text())["cells"]
    assert any("launch.train" in "".join(c["source"]) for c in cells if c["cell_type"] == "code")
    cfg = trainer.Config(**{k: v for k, v in params.items() if k != "extends"})
    assert read_jsonl(cfg.run_dir / "metrics.jsonl")[0]["step"] == 1  # the RL cell ran
    assert (trainer.eval_dir(cfg, "repair", trainer.PROBE) / "summary.json").exists()
    assert "# Probe" in (tmp_path / "reports" / "test" / "repair" / "summary.md").read_text()


def test_repair_modules_apart_and_old_names_answer():
    """Episodes, SFT examples, evaluation, report and trainer are five modules of at most 400 lines; the names the
    notebook and older callers use still import from the trainer."""
    from codelib.evaluation import repair_eval
    from codelib.plumbing.paths import REPO_ROOT
    from codelib.reports import repair as repair_report

    for name in ("engine/repair", "engine/repair_data", "evaluation/repair_eval", "reports/repair", "trainers/repair"):
        lines = len((REPO_ROOT / "codelib" / f"{name}.py").read_text().splitlines())
        assert lines <= 400, f"codelib/{name}.py has {lines} lines"
    assert trainer.evaluate is repair_eval.evaluate and trainer.eval_dir is repair_eval.eval_dir
    assert trainer.write_report is repair_report.write_report and trainer.PROBE == repair_report.PROBE
