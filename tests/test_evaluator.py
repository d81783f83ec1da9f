"""Evaluator: the HumanEval canary, scoring and evaluate() end to end (the statistics it reports: tests/test_stats.py)."""

import importlib.util
import json
import math
from pathlib import Path

import pytest

from codelib.evaluation import evaluator
from codelib.evaluation.evaluator import EvalConfig, score_completions
from codelib.plumbing.params import ParamsError, build_config, config_to_dict
from codelib.policy import generation
from codelib.reports import DIFF_COLUMNS, TABLE_COLUMNS
from codelib.tasks import load_tasks

FIXTURES = Path(__file__).parent / "fixtures"
_spec = importlib.util.spec_from_file_location("memorizer", FIXTURES / "memorizer.py")
memorizer = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(memorizer)

needs_sandbox = pytest.mark.skipif(
    importlib.util.find_spec("codelib.sandbox") is None or importlib.util.find_spec("codelib.engine.rewards") is None,
    reason="codelib.sandbox / codelib.engine.rewards not present",
)


# ---------------------------------------------------------------------------------------------------------------
# scoring through the sandbox: the canary


def read_canary() -> tuple[list, list[list[str]]]:
    rows = [json.loads(line) for line in (FIXTURES / "canary_humaneval.jsonl").read_text().splitlines()]
    by_id: dict[str, list[str]] = {}
    for r in rows:
        by_id.setdefault(r["task_id"], []).append(r["completion"])
    tasks = load_tasks("humaneval", "test")
    assert [t.task_id for t in tasks] == list(by_id)
    return tasks, [by_id[t.task_id] for t in tasks]


@needs_sandbox
def test_canary_reproduces_known_pass_at_1_and_2():
    # 17 tasks: 4 canonical completions (c=4); 16 tasks: 2 canonical + 2 `return None` (c=2). By hand:
    # pass@1 = (17 * 1 + 16 * 1/2) / 33 = 25/33; pass@2 = (17 * 1 + 16 * (1 - C(2,2)/C(4,2))) / 33 = 91/99.
    tasks, comps = read_canary()
    res = score_completions(tasks, comps, ks=[1, 2], workers=2)
    assert [r["c"] for r in res["per_task"]] == [4] * 17 + [2] * 16
    assert res["pass@1"] == pytest.approx(25 / 33, abs=1e-12)
    assert res["pass@2"] == pytest.approx(91 / 99, abs=1e-12)
    assert res["ci_low"] <= 25 / 33 <= res["ci_high"] and res["passed"] == pytest.approx(25)
    assert len(res["samples"]) == 132 and {s["status"] for s in res["samples"]} == {"passed", "failed"}


@needs_sandbox
def test_canonical_solutions_pass_and_empty_completions_fail():
    tasks = load_tasks("humaneval", "test")
    good = score_completions(tasks, [[t.canonical_solution] for t in tasks], workers=2)
    assert good["pass@1"] == 1.0 and good["tasks"] == 33
    bad = score_completions(tasks, [[""] for t in tasks], workers=2)
    assert bad["pass@1"] == 0.0 and bad["passed"] == 0
    assert all(s["detail"] is not None for s in bad["samples"])


@needs_sandbox
def test_each_sample_records_its_tampering_and_the_summary_its_share():
    tasks = load_tasks("humaneval", "test")[:2]
    probe = "    import os\n    os.chroot('/')\n"  # a system call the sandbox's filter kills for
    res = score_completions(tasks, [[t.canonical_solution, probe] for t in tasks], workers=2)
    assert ["seccomp" in s["tamper"].split(",") for s in res["samples"]] == [False, True, False, True]
    assert [s["tamper"] for s in res["samples"]][::2] == ["", ""]  # (killed mid-call, it also counts as an exit)
    assert res["tamper_frac"] == 0.5 and res["tamper"]["seccomp"] == 2
    assert res["pass@1"] == 0.5


@needs_sandbox
def test_scoring_extracts_the_code_numbers_each_tasks_samples_and_seeds_its_intervals():
    """A fenced full definition is extracted before it is judged (and recorded as judged); samples are numbered
    within their task; pass@1 is always reported; the intervals and the pass@k band follow the bootstrap seed."""
    tasks = load_tasks("humaneval", "test")[:12]
    fenced = [f"```python\n{t.prompt}{t.canonical_solution}```\n" for t in tasks]
    comps = [[f, "    return None\n"] if i % 3 else [f, f] for i, f in enumerate(fenced)]  # pass@1 1.0 or 0.5
    res = score_completions(tasks, comps, ks=[2], workers=2, seed=0, bootstrap_iters=20)
    assert {"pass@1", "pass@2"} <= set(res) and res["ks"] == [1, 2]
    assert [s["sample"] for s in res["samples"]] == [0, 1] * 12
    assert res["samples"][0]["code"] != fenced[0] and "```" not in res["samples"][0]["code"]
    assert [r["c"] for r in res["per_task"]] == [2 if i % 3 == 0 else 1 for i in range(12)]
    other = score_completions(tasks, comps, ks=[2], workers=2, seed=7, bootstrap_iters=20)
    assert other["pass@1"] == res["pass@1"] and (other["ci_low"], other["ci_high"]) != (res["ci_low"], res["ci_high"])
    assert other["pass@k_curve"]["ci_low"] != res["pass@k_curve"]["ci_low"]
    again = score_completions(tasks, comps, ks=[2], workers=2, seed=0, bootstrap_iters=20)
    assert (again["ci_low"], again["pass@k_curve"]) == (res["ci_low"], res["pass@k_curve"])


@needs_sandbox
def test_score_drops_k_above_n_with_a_warning():
    tasks = load_tasks("synthetic", "test")[:3]
    with pytest.warns(UserWarning, match="pass@"):
        res = score_completions(tasks, [[t.canonical_solution, "    return None\n"] for t in tasks], ks=[1, 2, 5])
    assert res["ks"] == [1, 2] and "pass@5" not in res and res["pass@1"] == 0.5 and res["pass@2"] == 1.0


def test_score_rejects_mismatched_inputs():
    tasks = load_tasks("synthetic", "test")[:2]
    with pytest.raises(ValueError, match="one list of completions per task"):
        score_completions(tasks, [["x"]])
    with pytest.raises(ValueError, match="no completions"):
        score_completions(tasks, [["x"], []])


# ---------------------------------------------------------------------------------------------------------------
# EvalConfig


def test_eval_config_defaults_and_fix_it_messages():
    cfg = EvalConfig()
    assert (cfg.profile, cfg.checkpoints, cfg.baseline, cfg.n_samples, cfg.ks) == (
        "tiny",
        {"base": "tiny"},
        "base",
        4,
        [1],
    )
    assert EvalConfig(temperature=0.0).n_samples == 1  # greedy: one sample is all there is
    with pytest.raises(ValueError, match="pass@8 needs at least 8 samples.*n_samples"):
        EvalConfig(ks=[1, 8])
    with pytest.raises(ValueError, match="greedy"):
        EvalConfig(temperature=0.0, ks=[2])
    with pytest.raises(ValueError, match="baseline 'sft' is not one of the checkpoints"):
        EvalConfig(baseline="sft")
    with pytest.raises(ValueError, match="dataset"):
        EvalConfig(dataset="humaneva")
    assert EvalConfig(ks=[2], n_samples=2).ks == [1, 2]  # pass@1 is always reported
    with pytest.raises(ValueError, match="out 'eval/fresh' must be a plain directory name"):
        EvalConfig(out="eval/fresh")


def test_another_split_evaluates_beside_the_eval_stage_not_over_it():
    """06_eval_fresh (the second held-out set) keeps its summaries in eval_fresh/: the eval stage's summaries of the
    same checkpoints on the test split stay where the pipeline and the comparison table read them."""
    from codelib.plumbing.params import load_config
    from codelib.runner.pipeline import stage_outputs

    fresh = load_config(EvalConfig, "params/tiny/variants/06_eval_fresh.yaml")
    stage = load_config(EvalConfig, "params/tiny/06_eval.yaml")
    assert (fresh.split, fresh.out, stage.split, stage.out) == ("fresh", "eval_fresh", "test", "eval")
    assert set(fresh.checkpoints) >= set(stage.checkpoints) - {"base"}
    assert len(load_tasks(fresh.dataset, fresh.split)) == 400
    assert {p.parent.name for p in stage_outputs("06_eval", config_to_dict(fresh))} == {"eval_fresh"}
    assert {p.parent.name for p in stage_outputs("06_eval", config_to_dict(stage))} == {"eval"}


def test_eval_config_loads_strictly_from_params():
    values = config_to_dict(EvalConfig())
    assert build_config(EvalConfig, values) == EvalConfig()
    with pytest.raises(ParamsError, match="n_sample"):
        build_config(EvalConfig, {**values, "n_sample": 4})
    with pytest.raises(ParamsError, match="n_samples"):
        build_config(EvalConfig, {**values, "ks": [1, 16]})


# ---------------------------------------------------------------------------------------------------------------
# evaluate(): a memorised model, a LoRA adapter on it, files, skipping, the table


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """A model dir that has memorised 4 synthetic test solutions, and a zero-initialised LoRA adapter on it."""
    import torch
    from peft import LoraConfig, get_peft_model

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("ckpt")
    tasks = load_tasks("synthetic", "test")[:4]
    texts = [t.prompt + t.canonical_solution + "\ndef unused():\n    return 0\n" for t in tasks]
    model, tok, model_dir = memorizer.build_memorizer(texts, out_dir=root / "model")
    # LoRA's B starts at zero: the adapter computes exactly what its base does (a paired difference of 0).
    peft_model = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"))
    peft_model.peft_config["default"].base_model_name_or_path = str(model_dir)
    peft_model.save_pretrained(root / "adapter")
    return {"base": str(model_dir), "lora": str(root / "adapter")}


def _cfg(ckpts, **kw):
    base = dict(
        profile="test",
        dataset="synthetic",
        split="test",
        limit=4,
        checkpoints=ckpts,
        baseline="base",
        temperature=0.0,
        max_new_tokens=48,
        batch_size=4,
        workers=2,
        bootstrap_iters=200,
    )
    return EvalConfig(**{**base, **kw})


@needs_sandbox
@pytest.mark.slow
def test_evaluate_writes_samples_summary_and_table_and_skips_when_up_to_date(checkpoints, tmp_path, monkeypatch):
    pytest.importorskip("codelib.policy.models")
    cfg = _cfg(checkpoints)
    out, reports = tmp_path / "eval", tmp_path / "reports"
    df = evaluator.evaluate(cfg, out_root=out, reports=reports)

    assert list(df.columns) == TABLE_COLUMNS + DIFF_COLUMNS
    assert df["checkpoint"].tolist() == ["base", "lora"] and df["method"].tolist() == ["base", "lora"]
    assert df["pass@1"].tolist() == [1.0, 1.0] and df["passed"].tolist() == [4, 4] and df["tasks"].tolist() == [4, 4]
    assert math.isnan(df["diff_vs_baseline"][0]) and df["diff_vs_baseline"][1] == 0.0
    rows = [json.loads(line) for line in (out / "lora" / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and {"task_id", "sample", "completion", "status", "passed", "detail", "n_tokens"} <= set(
        rows[0]
    )
    assert all(r["passed"] and r["finished"] for r in rows)
    summary = json.loads((out / "lora" / "summary.json").read_text())
    assert summary["vs_baseline"]["diff"] == 0.0 and summary["per_task"][0]["n"] == 1
    assert (reports / "results.csv").exists() and "pass@1 [95% CI]" in (reports / "results.md").read_text()
    assert "4/4" in (reports / "results.md").read_text()
    assert evaluator.compare(out / "lora", out / "base")["diff"] == 0.0

    # Same settings: nothing is generated again. force=True, or a changed setting, re-runs.
    def boom(*a, **k):
        raise AssertionError("generate called for an up-to-date checkpoint")

    monkeypatch.setattr(generation, "generate", boom)
    again = evaluator.evaluate(cfg, out_root=out, reports=reports)
    assert again.equals(df)
    with pytest.raises(AssertionError, match="up-to-date"):
        evaluator.evaluate(cfg, out_root=out, reports=reports, force=True)
    with pytest.raises(AssertionError, match="up-to-date"):
        evaluator.evaluate(_cfg(checkpoints, max_new_tokens=40), out_root=out, reports=reports)
    # a change to the code that extracts, judges or scores re-runs it too
    monkeypatch.setattr(evaluator, "code_hash", lambda *_: "changed-judging-code")
    with pytest.raises(AssertionError, match="up-to-date"):
        evaluator.evaluate(cfg, out_root=out, reports=reports)


@needs_sandbox
@pytest.mark.slow
def test_evaluate_sampled_reports_pass_at_k(checkpoints, tmp_path):
    pytest.importorskip("codelib.policy.models")
    cfg = _cfg({"base": checkpoints["base"]}, temperature=0.8, n_samples=2, ks=[1, 2])
    df = evaluator.evaluate(cfg, out_root=tmp_path / "eval", reports=tmp_path / "reports")
    assert list(df.columns) == TABLE_COLUMNS + ["pass@2"] + DIFF_COLUMNS
    assert df["pass@2"][0] >= df["pass@1"][0] > 0.5  # memorised answers survive T=0.8 most of the time
    assert "/4" in (tmp_path / "reports" / "results.md").read_text()


def test_results_table_names_the_training_seeds(tmp_path):
    from codelib import reports

    summaries = {}
    for name, seed in (("base", None), ("sft", 0), ("grpo", 2)):
        run = tmp_path / name
        run.mkdir()
        if seed is not None:
            (run / "config.json").write_text(json.dumps({"stage": name, "seed": seed}))
        summaries[name] = {"source": str(run) if seed is not None else "tiny"}
    assert reports.training_seeds("nowhere", summaries) == "; training seeds 0, 2 (one run per checkpoint)"
    assert reports.training_seeds("nowhere", {"base": {"source": "tiny"}}) == ""
    assert reports.training_seeds("nowhere", {"sft": summaries["sft"]}) == "; training seed 0 (one run per checkpoint)"


def test_every_checkpoint_is_checked_before_any_is_evaluated(tmp_path, monkeypatch):
    """A missing run dir is named, with the command that makes it, before a single sample is generated."""
    from codelib.evaluation import evaluator

    monkeypatch.setenv("CODELIB_CHECKPOINTS", str(tmp_path))
    (tmp_path / "tiny" / "sft").mkdir(parents=True)
    (tmp_path / "tiny" / "sft" / "adapter_config.json").write_text("{}")
    (tmp_path / "tiny" / "empty").mkdir()
    cfg = evaluator.EvalConfig(
        checkpoints={
            "base": "tiny",
            "sft": "checkpoints/tiny/sft",
            "grpo": "checkpoints/tiny/grpo",
            "dpo": "checkpoints/tiny/dpo",
            "odd": "checkpoints/tiny/empty",
            "hub": "org/model",
        },
        baseline="base",
    )
    monkeypatch.setattr(evaluator, "load_tasks", lambda *a, **k: pytest.fail("tasks loaded before the check"))
    with pytest.raises(FileNotFoundError) as e:
        evaluator.evaluate(cfg)
    msg = str(e.value)
    assert msg.startswith("3 of 6 checkpoint(s)")
    assert "grpo: checkpoints/tiny/grpo does not exist; train it first: python -m codelib.pipeline" in msg
    assert "--profile tiny --only 04_grpo" in msg
    assert "--only 05_dpo" in msg and "odd: checkpoints/tiny/empty holds no model" in msg
    assert "sft:" not in msg and "hub" not in msg and "base" not in msg


# ---------------------------------------------------------------------------------------------------------------
# every setting checked, every setting that decides a summary in its hash, every setting passed on


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"checkpoints": {}}, "checkpoints is empty"),
        ({"out": ""}, "must be a plain directory name"),
        ({"out": ".eval"}, "must be a plain directory name"),
        ({"out": "eval\\fresh"}, "must be a plain directory name"),
        ({"checkpoints": {"": "tiny"}, "baseline": ""}, "must be a plain name"),
        ({"checkpoints": {".base": "tiny"}, "baseline": ""}, "must be a plain name"),
        ({"checkpoints": {"a\\b": "tiny"}, "baseline": ""}, "must be a plain name"),
        ({"temperature": -0.5}, "temperature must be >= 0"),
        ({"n_samples": 0, "ks": [1]}, "n_samples must be at least 1"),
        ({"ks": []}, "ks must be a non-empty list"),
        ({"ks": [0]}, "ks must be a non-empty list"),
        ({"ks": [5]}, "pass@5 needs at least 5 samples per task: raise n_samples to at least 5"),
        ({"top_p": 0.0}, r"top_p must be in \(0, 1\]"),
        ({"top_p": 1.5}, r"top_p must be in \(0, 1\]"),
        ({"backend": "tgi"}, "backend must be 'hf' or 'vllm'"),
        ({"max_new_tokens": 0}, "max_new_tokens must be at least 1"),
        ({"batch_size": 0}, "batch_size must be at least 1"),
        ({"workers": 0}, "workers must be at least 1"),
        ({"bootstrap_iters": 0}, "bootstrap_iters must be at least 1"),
        ({"limit": -1}, "limit must be >= 0"),
        ({"timeout_s": 0.0}, "timeout_s must be positive"),
    ],
)
def test_eval_config_refuses_each_bad_setting_with_what_to_set(setting, message):
    with pytest.raises(ValueError, match=message):
        EvalConfig(**setting)


def test_eval_config_accepts_the_edges_of_each_range():
    cfg = EvalConfig(top_p=1.0, limit=0, n_samples=1, ks=[1], max_new_tokens=1, batch_size=1, workers=1)
    assert (cfg.top_p, cfg.limit, cfg.n_samples) == (1.0, 0, 1)
    assert EvalConfig(n_samples=4, ks=[4]).ks == [1, 4] and EvalConfig(backend="vllm").backend == "vllm"


def test_a_checkpoint_path_is_resolved_from_the_repo_root_and_a_hub_name_is_left_alone(monkeypatch, tmp_path):
    from codelib.plumbing.paths import REPO_ROOT

    monkeypatch.chdir(tmp_path)  # not the repo root: a relative path in a params file still means the repo's
    assert evaluator.checkpoint_source("params/tiny") == str(REPO_ROOT / "params" / "tiny")
    assert evaluator.checkpoint_source("org/model") == "org/model"
    assert evaluator.checkpoint_source("tiny") == "tiny"


def test_a_summary_is_reused_only_when_everything_that_decides_its_samples_and_scores_is_equal(tmp_path):
    """Each setting that changes what is sampled or how it is scored changes the hash, and so do other tasks and a
    retrained checkpoint; the settings that only name or place the outputs (baseline, workers, out, out_dir) do not."""
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text("{}")
    (ckpt / "model.safetensors").write_bytes(b"1234")
    tasks = load_tasks("synthetic", "test")[:3]
    base = dict(checkpoints={"a": str(ckpt), "b": "tiny"}, baseline="a", temperature=0.8, n_samples=2)
    h0 = evaluator.settings_hash(evaluator.settings_for(EvalConfig(**base), "a", tasks))
    assert h0 == evaluator.settings_hash(evaluator.settings_for(EvalConfig(**base), "a", list(tasks)))

    def changed(**kw):
        return evaluator.settings_hash(evaluator.settings_for(EvalConfig(**{**base, **kw}), "a", tasks)) != h0

    for kw in (
        {"dataset": "humaneval"},
        {"split": "fresh"},
        {"limit": 3},
        {"n_samples": 3},
        {"temperature": 0.7},
        {"top_p": 0.9},
        {"max_new_tokens": 128},
        {"batch_size": 8},
        {"seed": 1},
        {"ks": [2]},
        {"backend": "vllm"},
        {"timeout_s": 2.0},
        {"bootstrap_iters": 500},
        {"checkpoints": {"a": "tiny", "b": "tiny"}},
    ):
        assert changed(**kw), kw
    for kw in ({"baseline": "b"}, {"workers": 7}, {"out": "eval_fresh"}, {"out_dir": "reports/look"}):
        assert not changed(**kw), kw
    other = load_tasks("synthetic", "test")[:1] + load_tasks("synthetic", "test")[3:5]  # the same first task
    assert evaluator.settings_hash(evaluator.settings_for(EvalConfig(**base), "a", other)) != h0
    (ckpt / "model.safetensors").write_bytes(b"123456")  # retrained: other weights
    assert evaluator.settings_hash(evaluator.settings_for(EvalConfig(**base), "a", tasks)) != h0


def _fake_policy(monkeypatch, answers=None):
    """load_policy and generate replaced: a checkpoint named "org/bad" writes `return None`, any other its tasks'
    canonical solutions; `calls` records what each call was given."""
    calls = {"load": [], "generate": [], "free": []}
    by_prompt = {t.prompt: t.canonical_solution for d in ("synthetic", "mbpp_plus") for t in load_tasks(d, "test")}

    def load_policy(source):
        calls["load"].append(source)
        return source, "tokenizer"

    def generate(model, tokenizer, prompts, **kw):
        calls["generate"].append({"model": model, "n_prompts": len(prompts), **kw})
        out = []
        for i, p in enumerate(prompts):
            text = "    return None\n" if model == "org/bad" and i % 2 else by_prompt[p]
            out.append(
                [generation.Completion(text, [1] * (3 + j), 3 + j, finished=j % 2 == 0) for j in range(kw["n"])]
            )
        return out

    monkeypatch.setattr(evaluator.models, "load_policy", load_policy)
    monkeypatch.setattr(evaluator.generation, "generate", generate)
    monkeypatch.setattr(evaluator, "_free", lambda model: calls["free"].append(model))
    return calls


@needs_sandbox
def test_a_checkpoint_is_sampled_and_judged_with_the_configured_settings(monkeypatch, tmp_path):
    calls = _fake_policy(monkeypatch)
    scored = {}
    real = evaluator.score_completions

    def score(tasks, comps, **kw):
        scored.update(kw)
        return real(tasks, comps, **kw)

    monkeypatch.setattr(evaluator, "score_completions", score)
    cfg = EvalConfig(
        dataset="mbpp_plus",
        limit=2,
        checkpoints={"m": "org/model"},
        baseline="",
        temperature=0.6,
        top_p=0.9,
        n_samples=2,
        ks=[2],
        max_new_tokens=77,
        batch_size=3,
        seed=11,
        workers=2,
        timeout_s=4.0,
        bootstrap_iters=50,
    )
    tasks = load_tasks("mbpp_plus", "test", limit=2)
    s = evaluator.evaluate_checkpoint(cfg, "m", tasks, tmp_path)
    (gen,) = calls["generate"]
    assert calls["load"] == ["org/model"] and calls["free"] == ["org/model"]
    assert {k: gen[k] for k in ("n", "temperature", "top_p", "max_new_tokens", "batch_size", "seed", "stop")} == {
        "n": 2,
        "temperature": 0.6,
        "top_p": 0.9,
        "max_new_tokens": 77,
        "batch_size": 3,
        "seed": 11,
        "stop": generation.WHOLE_FUNCTION_STOPS,  # an MBPP prompt asks for the whole function
    }
    assert scored == {"ks": [1, 2], "workers": 2, "timeout_s": 4.0, "plus": True, "bootstrap_iters": 50, "seed": 11}
    assert (s["source"], s["checkpoint"], s["pass@1"]) == ("org/model", "m", 1.0)
    assert s["settings_hash"] == evaluator.settings_hash(evaluator.settings_for(cfg, "m", tasks))
    assert s["avg_tokens"] == 3.5 and s["finished_rate"] == 0.5  # tokens 3, 4 and finished, not, per task
    rows = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert [(r["n_tokens"], r["finished"], r["tamper"]) for r in rows] == [(3, True, ""), (4, False, "")] * 2
    assert json.loads((tmp_path / "summary.json").read_text()) == s


@needs_sandbox
def test_scoring_passes_the_time_limit_and_the_plus_tests_to_the_sandbox(monkeypatch):
    from codelib import sandbox
    from codelib.evaluation import scoring

    tasks = load_tasks("synthetic", "test")[:1]
    res = score_completions(tasks, [["    while True:\n        pass\n"]], workers=1, timeout_s=0.5)
    assert res["samples"][0]["verdict"] == "timeout" and res["verdicts"]["timeout"] == 1
    seen = {}
    real = sandbox.check

    def check(tasks, codes, **kw):
        seen.update(kw)
        return real(tasks, codes, **kw)

    monkeypatch.setattr(scoring.sandbox, "check", check)
    score_completions(tasks, [[tasks[0].canonical_solution]], workers=1, timeout_s=3.5, plus=True)
    assert seen == {"workers": 1, "plus": True, "timeout_s": 3.5}


@needs_sandbox
def test_tasks_with_fewer_samples_are_counted_by_their_own_number():
    tasks = load_tasks("synthetic", "test")[:2]
    wrong = "    return None\n"
    res = score_completions(tasks, [[tasks[0].canonical_solution, wrong, wrong], [wrong]], workers=2)
    assert [(r["n"], r["c"]) for r in res["per_task"]] == [(3, 1), (1, 0)]
    assert res["n_samples"] == 1 and res["ks"] == [1]
    assert res["pass@1"] == pytest.approx((1 / 3 + 0) / 2) and res["passed"] == pytest.approx(1 / 3)
    samples = [(s["task_id"], s["sample"], s["code"], s["passed"], s["verdict"]) for s in res["samples"]]
    assert samples == [
        (tasks[0].task_id, 0, tasks[0].canonical_solution, True, "passed"),
        (tasks[0].task_id, 1, wrong, False, "wrong_answer"),
        (tasks[0].task_id, 2, wrong, False, "wrong_answer"),
        (tasks[1].task_id, 0, wrong, False, "wrong_answer"),
    ]
    assert res["verdicts"]["passed"] == 1 and res["verdicts"]["wrong_answer"] == 3


def test_compare_pairs_the_shared_tasks_by_their_pass_rates_a_minus_b():
    a = {"checkpoint": "a", "per_task": [{"task_id": "t1", "n": 4, "c": 4}, {"task_id": "t2", "n": 4, "c": 2}]}
    b = {"checkpoint": "b", "per_task": [{"task_id": "t2", "n": 2, "c": 0}, {"task_id": "t1", "n": 2, "c": 1}]}
    res = evaluator.compare(a, b, iters=100)
    assert (res["a"], res["b"]) == ("a", "b") and res["diff"] == pytest.approx(((1 - 0.5) + (0.5 - 0)) / 2)
    assert evaluator.compare(b, a, iters=100)["diff"] == pytest.approx(-0.5)
    c = {"checkpoint": "c", "per_task": [{"task_id": "t1", "n": 1, "c": 0}, {"task_id": "t3", "n": 1, "c": 1}]}
    with pytest.warns(UserWarning, match="comparing on the 1 tasks both summaries scored"):
        assert evaluator.compare(a, c, iters=100)["diff"] == 1.0
    with pytest.raises(ValueError, match="a and d share no task"):
        evaluator.compare(a, {"checkpoint": "d", "per_task": [{"task_id": "t9", "n": 1, "c": 1}]})


@needs_sandbox
def test_evaluate_orchestrates_baselines_tables_and_summaries(monkeypatch, tmp_path):
    """evaluate_checkpoints compares with its first checkpoint; a summary is reused until a setting changes; a changed
    baseline rewrites the reused summaries' paired differences; the paired interval follows the seed; results go to
    out_dir when it is set."""
    calls = _fake_policy(monkeypatch)
    monkeypatch.setenv("CODELIB_CHECKPOINTS", str(tmp_path / "ck"))
    common = dict(profile="test", limit=6, temperature=0.0, max_new_tokens=8, workers=2, bootstrap_iters=200)
    ckpts = {"good": "org/good", "bad": "org/bad"}
    df = evaluator.evaluate_checkpoints(ckpts, **common)
    root = tmp_path / "ck" / "test" / "eval"
    assert df["checkpoint"].tolist() == ["good", "bad"] and df["pass@1"].tolist() == [1.0, 0.5]
    assert (root / "results.md").exists() and (root / "results.csv").exists()
    good, bad = (evaluator.load_summary(root / n) for n in ("good", "bad"))
    assert good.get("vs_baseline") is None and bad["vs_baseline"]["baseline"] == "good"
    assert bad["vs_baseline"]["diff"] == pytest.approx(-0.5) and good["tasks"] == 6
    assert evaluator.load_summary(root / "bad" / "summary.json") == bad
    assert len(calls["generate"]) == 2

    # the same settings reuse both; another baseline rewrites the paired differences of the reused summaries
    evaluator.evaluate(EvalConfig(checkpoints=ckpts, baseline="bad", **common))
    assert len(calls["generate"]) == 2
    good, bad = (evaluator.load_summary(root / n) for n in ("good", "bad"))
    assert bad.get("vs_baseline") is None and good["vs_baseline"]["diff"] == pytest.approx(0.5)
    evaluator.evaluate(EvalConfig(checkpoints=ckpts, baseline="bad", **common), force=True)
    assert len(calls["generate"]) == 4
    evaluator.evaluate(EvalConfig(checkpoints=ckpts, baseline="bad", **{**common, "max_new_tokens": 9}))
    assert len(calls["generate"]) == 6

    # the paired interval is the seed's, and a results folder of its own keeps the profile's table as it was
    look = tmp_path / "look"
    evaluator.evaluate(EvalConfig(checkpoints=ckpts, baseline="bad", out_dir=str(look), **{**common, "seed": 3}))
    other = evaluator.load_summary(root / "good")["vs_baseline"]
    assert other["diff"] == good["vs_baseline"]["diff"]
    assert (other["ci_low"], other["ci_high"]) != (good["vs_baseline"]["ci_low"], good["vs_baseline"]["ci_high"])
    assert (look / "results.md").exists()

    monkeypatch.setattr(evaluator, "load_tasks", lambda *a, **k: [])
    with pytest.raises(ValueError, match="synthetic/test has no tasks"):
        evaluator.evaluate(EvalConfig(checkpoints=ckpts, baseline="good", **common))
    with pytest.raises(FileNotFoundError, match="no eval summary at .*nowhere.*run evaluate"):
        evaluator.load_summary(tmp_path / "nowhere")


def test_a_missing_checkpoint_is_named_with_its_own_profiles_command(tmp_path, monkeypatch):
    monkeypatch.setenv("CODELIB_CHECKPOINTS", str(tmp_path))
    cfg = EvalConfig(profile="small", checkpoints={"grpo": "checkpoints/small/grpo"}, baseline="")
    with pytest.raises(FileNotFoundError, match="--profile small --only 04_grpo"):
        evaluator.check_checkpoints(cfg)
