"""Evaluation: pass@k (unbiased), bootstrap confidence intervals, paired comparisons, per-sample records.

One code path scores everything: `score_completions(tasks, completions)` extracts the code of each completion,
checks every (task, code) pair in one sandbox call and returns pass@k with confidence intervals, per-task counts
and per-sample verdicts. `evaluate(cfg)` generates with each checkpoint, scores through it, and writes

    checkpoints/<profile>/eval/<name>/samples.jsonl   one row per sample: code, verdict, tokens
    checkpoints/<profile>/eval/<name>/summary.json    pass@k with CIs, per-task counts, paired diff vs baseline
    reports/<profile>/results.csv, results.md         one row per checkpoint (`reports.write_results`)

The statistics (pass@k, bootstrap and paired intervals) are `codelib.evaluation.stats`'s, re-exported here.
`python -m codelib.evaluator params/tiny/06_eval.yaml [key=value ...]`.
"""

from __future__ import annotations

import gc
import hashlib
import json
import math
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from codelib.evaluation.eval_sampling import EVAL_SAMPLING
from codelib.evaluation.scoring import score_completions
from codelib.evaluation.stats import bootstrap_ci, paired_difference, pass_at_k
from codelib.plumbing.fingerprint import SCORE, checkpoint_fingerprint, code_hash
from codelib.plumbing.params import atomic_write_json, atomic_write_text, main_config, resolve, run_dir
from codelib.plumbing.paths import eval_dir, report_dir  # noqa: F401 - their old home (now plumbing.paths)
from codelib.policy import generation, models
from codelib.reports import write_results
from codelib.tasks import Task, load_tasks, parse_dataset

__all__ = [
    "EvalConfig",
    "bootstrap_ci",
    "compare",
    "evaluate",
    "evaluate_checkpoints",
    "load_summary",
    "paired_difference",
    "pass_at_k",
    "score_completions",
    "settings_for",
    "settings_hash",
]


# ---------------------------------------------------------------------------------------------------------------
# evaluating checkpoints


@dataclass
class EvalConfig:
    """Parameters of the eval stage (params/<profile>/06_eval.yaml mirrors these fields one to one)."""

    profile: str = "tiny"  # outputs go to checkpoints/<profile>/<out>/ and reports/<profile>/
    out: str = "eval"  # samples and summaries: checkpoints/<profile>/<out>/<name>/ (another split: another name)
    out_dir: str = ""  # results.md/.csv go here; empty: checkpoints/<profile>/<out>/ (the pipeline: reports/<profile>)
    dataset: str = "synthetic"  # humaneval | mbpp | humaneval_plus | mbpp_plus | codecontests | synthetic
    split: str = "test"  # held-out split
    limit: int = 0  # first `limit` tasks only; 0 for all
    checkpoints: dict[str, str] = field(default_factory=lambda: {"base": "tiny"})  # name -> hub name / dir / adapter
    baseline: str = "base"  # every other checkpoint is compared with this one, paired; "" for none
    n_samples: int = 4  # samples per task
    temperature: float = EVAL_SAMPLING.temperature  # 0 means greedy (n_samples is then 1)
    top_p: float = EVAL_SAMPLING.top_p  # nucleus sampling
    max_new_tokens: int = 256  # generation budget per sample
    batch_size: int = 64  # (prompt, sample) rows per generate call
    seed: int = EVAL_SAMPLING.seed  # sampling seed, separate from training seeds so two evaluations agree
    ks: list[int] = field(default_factory=lambda: [1])  # pass@k reported for each k (each at most n_samples)
    backend: str = "hf"  # hf | vllm (GPU, pip install -r requirements-vllm.txt)
    workers: int = 2  # sandbox worker processes
    timeout_s: float = 5.0  # wall-clock limit per test program
    bootstrap_iters: int = 1000  # resamples for the confidence intervals

    def __post_init__(self):
        parse_dataset(self.dataset)  # a known name, with known options: "livecodebench:release_version=..."
        if not self.checkpoints:
            raise ValueError("checkpoints is empty; give at least one, e.g. {base: tiny}")
        if not self.out or "/" in self.out or "\\" in self.out or self.out.startswith("."):
            raise ValueError(f"out {self.out!r} must be a plain directory name, e.g. eval or eval_fresh")
        bad = [n for n in self.checkpoints if not n or "/" in n or "\\" in n or n.startswith(".")]
        if bad:
            raise ValueError(f"checkpoint name {bad[0]!r} must be a plain name (it becomes a directory name)")
        if self.baseline and self.baseline not in self.checkpoints:
            raise ValueError(
                f"baseline {self.baseline!r} is not one of the checkpoints ({', '.join(self.checkpoints)}); "
                "name one of them, or set baseline to '' for no comparison"
            )
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {self.temperature}")
        if self.temperature == 0 and self.n_samples != 1:
            # Greedy decoding gives the same answer every time: more samples would only cost time.
            self.n_samples = 1
        if self.n_samples < 1:
            raise ValueError(f"n_samples must be at least 1, got {self.n_samples}")
        if not self.ks or any(k < 1 for k in self.ks):
            raise ValueError(f"ks must be a non-empty list of positive integers, got {self.ks}")
        too_big = [k for k in self.ks if k > self.n_samples]
        if too_big:
            hint = (
                "greedy decoding (temperature 0) gives 1 sample; use temperature > 0"
                if self.temperature == 0
                else (f"raise n_samples to at least {max(too_big)}")
            )
            raise ValueError(f"pass@{max(too_big)} needs at least {max(too_big)} samples per task: {hint}, or drop it")
        self.ks = sorted({1, *self.ks})
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.backend not in ("hf", "vllm"):
            raise ValueError(f"backend must be 'hf' or 'vllm', not {self.backend!r}")
        for name in ("max_new_tokens", "batch_size", "workers", "bootstrap_iters"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.limit < 0:
            raise ValueError(f"limit must be >= 0 (0 = all tasks), got {self.limit}")
        if self.timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {self.timeout_s}")


def checkpoint_source(spec: str) -> str:
    """A checkpoint as load_policy takes it: an existing path (relative to the repo root) or a hub/alias name."""
    p = resolve(spec)
    return str(p) if p.exists() else spec


def settings_for(cfg: EvalConfig, name: str, tasks: Sequence[Task]) -> dict:
    """What decides a checkpoint's samples and scores; an equal hash means its summary can be reused."""
    source = checkpoint_source(cfg.checkpoints[name])
    task_ids = hashlib.sha256("\n".join(t.task_id for t in tasks).encode()).hexdigest()[:16]
    return {
        "checkpoint": cfg.checkpoints[name],
        "fingerprint": checkpoint_fingerprint(source),
        "dataset": cfg.dataset,
        "split": cfg.split,
        "limit": cfg.limit,
        "task_ids": task_ids,
        "n_samples": cfg.n_samples,
        "temperature": cfg.temperature,
        "top_p": cfg.top_p,
        "max_new_tokens": cfg.max_new_tokens,
        # batch composition decides which random numbers each row draws, so it is part of the sample
        "batch_size": cfg.batch_size,
        "seed": cfg.seed,
        "ks": list(cfg.ks),
        "backend": cfg.backend,
        "timeout_s": cfg.timeout_s,
        "bootstrap_iters": cfg.bootstrap_iters,
        # the code that extracts, judges and scores: a changed rule re-scores instead of reusing old numbers
        "code": code_hash(SCORE),
    }


def settings_hash(settings: dict) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]


def _free(model) -> None:
    del model
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def evaluate_checkpoint(cfg: EvalConfig, name: str, tasks: Sequence[Task], out: Path) -> dict:
    """Generate with one checkpoint, score, write samples.jsonl and summary.json; returns the summary."""
    source = checkpoint_source(cfg.checkpoints[name])
    prompts = [t.prompt for t in tasks]
    stop = generation.stops_for(tasks[0]) if tasks else generation.STOP_SEQUENCES
    t0 = time.time()
    kwargs = dict(
        n=cfg.n_samples,
        temperature=cfg.temperature,
        top_p=cfg.top_p,
        max_new_tokens=cfg.max_new_tokens,
        batch_size=cfg.batch_size,
        seed=cfg.seed,
        stop=stop,
    )
    if cfg.backend == "vllm":
        comps = generation.generate(source, None, prompts, backend="vllm", **kwargs)
    else:
        model, tokenizer = models.load_policy(source)
        try:
            comps = generation.generate(model, tokenizer, prompts, **kwargs)
        finally:
            _free(model)
    gen_s = time.time() - t0
    t0 = time.time()
    score = score_completions(
        tasks,
        [[c.text for c in cs] for cs in comps],
        ks=cfg.ks,
        workers=cfg.workers,
        timeout_s=cfg.timeout_s,
        plus=cfg.dataset.endswith("_plus"),
        bootstrap_iters=cfg.bootstrap_iters,
        seed=cfg.seed,
    )
    exec_s = time.time() - t0

    flat = [c for cs in comps for c in cs]
    rows = [
        {
            **{k: s[k] for k in ("task_id", "sample")},
            "completion": c.text,
            "code": s["code"],
            "status": s["status"],
            "passed": s["passed"],
            "detail": s["detail"],
            "verdict": s["verdict"],
            "tamper": s["tamper"],
            "n_tokens": c.n_tokens,
            "finished": c.finished,
        }
        for s, c in zip(score.pop("samples"), flat, strict=True)
    ]
    atomic_write_text(out / "samples.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    settings = settings_for(cfg, name, tasks)
    summary = {
        "checkpoint": name,
        "method": name,
        "source": cfg.checkpoints[name],
        "settings": settings,
        "settings_hash": settings_hash(settings),
        **score,
        "avg_tokens": float(np.mean([c.n_tokens for c in flat])) if flat else math.nan,
        "finished_rate": float(np.mean([c.finished for c in flat])) if flat else math.nan,
        "generate_s": round(gen_s, 2),
        "execute_s": round(exec_s, 2),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    atomic_write_json(out / "summary.json", summary)
    return summary


def check_checkpoints(cfg: EvalConfig) -> None:
    """Every checkpoint of cfg exists before any is evaluated: a missing local one is named with the command that
    makes it, all of them in one message (a hub id or "tiny" is left to the loader)."""
    problems = [
        f"{name}: {why}" for name, spec in cfg.checkpoints.items() if (why := models.policy_problem(spec, cfg.profile))
    ]
    if problems:
        raise FileNotFoundError(
            f"{len(problems)} of {len(cfg.checkpoints)} checkpoint(s) cannot be evaluated:\n  " + "\n  ".join(problems)
        )


def load_summary(path: str | Path) -> dict:
    """A summary.json, given the file or its eval directory."""
    p = resolve(path)
    p = p / "summary.json" if p.is_dir() else p
    if not p.exists():
        raise FileNotFoundError(f"no eval summary at {p}; run evaluate() for that checkpoint first")
    return json.loads(p.read_text())


def _per_task(summary: dict) -> dict[str, float]:
    return {r["task_id"]: r["c"] / r["n"] for r in summary["per_task"]}


def compare(a: str | Path | dict, b: str | Path | dict, iters: int = 1000, seed: int = 0, alpha: float = 0.05) -> dict:
    """Paired difference of pass@1 (a - b) over the tasks both summaries scored; a, b are summaries or their paths."""
    sa = a if isinstance(a, dict) else load_summary(a)
    sb = b if isinstance(b, dict) else load_summary(b)
    pa, pb = _per_task(sa), _per_task(sb)
    common = [t for t in pa if t in pb]
    if not common:
        raise ValueError(f"{sa.get('checkpoint')} and {sb.get('checkpoint')} share no task: nothing to compare")
    if len(common) != len(pa) or len(common) != len(pb):
        warnings.warn(
            f"comparing on the {len(common)} tasks both summaries scored ({len(pa)} vs {len(pb)})", stacklevel=2
        )
    res = paired_difference([pa[t] for t in common], [pb[t] for t in common], iters=iters, seed=seed, alpha=alpha)
    return {"a": sa.get("checkpoint"), "b": sb.get("checkpoint"), **res}


def evaluate(
    cfg: EvalConfig, force: bool = False, out_root: str | Path | None = None, reports: str | Path | None = None
):
    """Evaluate every checkpoint of `cfg` on its dataset and return the results table (a pandas DataFrame).

    A checkpoint whose summary.json was written with the same settings (dataset, sampling, seed, the checkpoint
    files' sizes and mtimes, ...) is not re-run unless force=True. out_root replaces checkpoints/<profile>/<out>
    and reports replaces the results table's folder, `results_dir(cfg)` (tests use both).
    """
    check_checkpoints(cfg)
    tasks = load_tasks(cfg.dataset, cfg.split, limit=cfg.limit or None)
    if not tasks:
        raise ValueError(f"{cfg.dataset}/{cfg.split} has no tasks (limit={cfg.limit})")
    root = Path(out_root) if out_root is not None else run_dir(cfg.profile, cfg.out)
    summaries: dict[str, dict] = {}
    total = len(cfg.checkpoints)
    for i, name in enumerate(cfg.checkpoints, 1):
        out = root / name
        want = settings_hash(settings_for(cfg, name, tasks))
        old = json.loads((out / "summary.json").read_text()) if (out / "summary.json").exists() else None
        if old is not None and old.get("settings_hash") == want and not force:
            print(
                f"[eval {i}/{total}] {name}: up to date, skipped (pass@1 {100 * old['pass@1']:.1f}%; force re-runs it)"
            )
            summaries[name] = old
            continue
        print(
            f"[eval {i}/{total}] {name}: {cfg.checkpoints[name]}, {len(tasks)} {cfg.dataset}/{cfg.split} tasks x "
            f"{cfg.n_samples} samples",
            flush=True,
        )
        summaries[name] = evaluate_checkpoint(cfg, name, tasks, out)
        s = summaries[name]
        probed = f", tampering {100 * s['tamper_frac']:.1f}% of samples" if s.get("tamper") else ""
        print(
            f"[eval {i}/{total}] {name}: pass@1 {100 * s['pass@1']:.1f}% (generate {s['generate_s']:.0f} s, "
            f"judge {s['execute_s']:.0f} s){probed}",
            flush=True,
        )

    # Paired differences are recomputed every time (cheap), so a changed baseline never leaves a stale one.
    for name, s in summaries.items():
        vs = None
        if cfg.baseline and name != cfg.baseline:
            vs = {
                "baseline": cfg.baseline,
                **compare(s, summaries[cfg.baseline], iters=cfg.bootstrap_iters, seed=cfg.seed),
            }
        if s.get("vs_baseline") != vs:
            s["vs_baseline"] = vs
            atomic_write_json(root / name / "summary.json", s)

    return write_results(cfg.profile, summaries, Path(reports) if reports is not None else results_dir(cfg, root))


def results_dir(cfg: EvalConfig, out_root: str | Path | None = None) -> Path:
    """Where evaluate(cfg) writes results.md/.csv: cfg.out_dir, or beside the summaries (checkpoints/<profile>/<out>/,
    or out_root) when it is empty, so a look (a smaller limit, another dataset) never rewrites the profile's
    reports/<profile>/results.* that the pipeline's eval stage wrote."""
    if cfg.out_dir:
        return resolve(cfg.out_dir)
    return Path(out_root) if out_root is not None else run_dir(cfg.profile, cfg.out)


def evaluate_checkpoints(checkpoints: dict[str, str], force: bool = False, **config) -> object:
    """`evaluate(EvalConfig(checkpoints=..., **config))`: a one-liner for notebooks and the command line."""
    baseline = config.pop("baseline", next(iter(checkpoints)))
    return evaluate(EvalConfig(checkpoints=dict(checkpoints), baseline=baseline, **config), force=force)


def main(argv: list[str] | None = None) -> None:
    """`python -m codelib.evaluator PARAMS.yaml [key=value ...] [--debug]`: run the eval stage and print the table."""
    import sys

    from codelib.plumbing.params import USER_ERRORS, fail

    argv = sys.argv[1:] if argv is None else argv
    cfg = main_config(EvalConfig, argv, command="python -m codelib.evaluator")
    try:
        print(evaluate(cfg).to_string(index=False))
        print(f"(results.md and results.csv in {results_dir(cfg)})")
    except (*USER_ERRORS, ValueError) as e:
        fail(e, "--debug" in argv)


if __name__ == "__main__":
    main()
