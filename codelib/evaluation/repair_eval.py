"""Evaluation of multi-turn repair: success after t turns with the public tests' feedback, with an empty message, and
pass@t of independent samples at the same sample budget, paired over tasks with intervals (`evaluate_repair`), for
every checkpoint of the repair stage's `eval_checkpoints`, cached per checkpoint (`evaluate`). `cfg` is the repair
stage's Config (`codelib.trainers.repair.Config`). The episodes are `codelib.engine.repair`'s, the report
`codelib.reports.repair`'s.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from codelib.engine.repair import MODES, run_episodes
from codelib.evaluation.eval_sampling import EVAL_SAMPLING
from codelib.evaluation.stats import bootstrap_ci, paired_difference, pass_at_k
from codelib.plumbing.paths import run_dir
from codelib.plumbing.threads import set_threads
from codelib.reports.repair import PROBE, write_report
from codelib.tasks import Task, load_tasks


def evaluate_repair(model, tokenizer, tasks: list[Task], cfg, out: Path | None = None) -> dict:
    """The three-way comparison on `tasks`. cfg: turns, eval_samples (episodes per task and arm), eval_independent
    (independent samples per task, >= turns), eval_temperature, eval_seed, max_new_tokens, public_rule, split_seed,
    workers, timeout_s, feedback_chars, bootstrap_iters.

    Per task and turn t: success with feedback and with empty feedback (share of its episodes whose last attempt by
    turn t passes all tests) and pass@t of independent samples (unbiased estimator); paired differences over tasks.
    Writes out/episodes.jsonl (every turn of every episode) and out/summary.json when `out` is given."""
    T, n, m = cfg.turns, cfg.eval_samples, max(cfg.eval_independent, cfg.turns)
    common = dict(
        public_rule=cfg.public_rule,
        split_seed=cfg.split_seed,
        temperature=cfg.eval_temperature,
        top_p=EVAL_SAMPLING.top_p,
        max_new_tokens=cfg.max_new_tokens,
        seed=cfg.eval_seed,
        workers=cfg.workers,
        timeout_s=cfg.timeout_s,
        feedback_chars=cfg.feedback_chars,
    )
    arms = {}
    for mode in MODES:
        arms[mode], _ = run_episodes(model, tokenizer, tasks, n, T, mode=mode, **common)
    # independent samples: m first attempts per task (one-turn episodes; same seed, so sample j of a task is the
    # first attempt of its episode j in the other arms when m >= n)
    indep, _ = run_episodes(model, tokenizer, tasks, m, 1, mode="tests", **common)
    per_task = []
    for i, task in enumerate(tasks):
        row = {"task_id": task.task_id}
        for mode in MODES:
            eps = arms[mode][i * n : (i + 1) * n]
            row[mode] = [float(np.mean([e.passed_by(t) for e in eps])) for t in range(1, T + 1)]
            row[f"{mode}_turns_used"] = float(np.mean([len(e.turns) for e in eps]))
        c = sum(e.passed for e in indep[i * m : (i + 1) * m])
        row["independent"] = [pass_at_k(m, c, t) for t in range(1, T + 1)]
        per_task.append(row)
    iters = cfg.bootstrap_iters
    arms_out = {}
    for arm in (*MODES, "independent"):
        curve = []
        for t in range(T):
            values = [r[arm][t] for r in per_task]
            lo, hi = bootstrap_ci(values, iters=iters, seed=0)
            curve.append({"turn": t + 1, "success": float(np.mean(values)), "ci_low": lo, "ci_high": hi})
        arms_out[arm] = curve
    comparisons = []
    for a, b in (("tests", "empty"), ("tests", "independent"), ("empty", "independent")):
        for t in range(T):
            d = paired_difference([r[a][t] for r in per_task], [r[b][t] for r in per_task], iters=iters, seed=0)
            comparisons.append({"a": a, "b": b, "turn": t + 1, **d})
    summary = {
        "tasks": len(tasks),
        "turns": T,
        "episodes_per_task": n,
        "independent_per_task": m,
        "temperature": cfg.eval_temperature,
        "seed": cfg.eval_seed,
        "public_rule": cfg.public_rule,
        "arms": arms_out,
        "comparisons": comparisons,
        "turns_used": {mode: float(np.mean([r[f"{mode}_turns_used"] for r in per_task])) for mode in MODES},
        "per_task": per_task,
    }
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        with open(out / "episodes.jsonl", "w") as f:
            for mode in MODES:
                for j, e in enumerate(arms[mode]):
                    f.write(json.dumps(e.to_row(episode=j % n)) + "\n")
        (out / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary


# what a cached comparison must have been run with to be reused (beside the checkpoint and its task set)
CACHE_KEYS = (
    "turns eval_samples eval_independent eval_temperature eval_seed max_new_tokens public_rule split_seed "
    "feedback_chars bootstrap_iters"
).split()


def eval_dir(cfg, name: str, tasks: str = "") -> Path:
    """Where a checkpoint's comparison is cached: repair_eval/<name>/ (held-out split), repair_eval/probe/<name>/."""
    return run_dir(cfg.profile, "repair_eval") / tasks / name


def eval_sets(cfg) -> dict[str, tuple[str, str, int]]:
    """The task sets the comparison runs on: "" -> (dataset, eval_split, limit), and "probe" when probe_eval > 0."""
    sets = {"": (cfg.dataset, cfg.eval_split, cfg.eval_limit)}
    if cfg.probe_eval:
        sets[PROBE] = ("synthetic", "probe", cfg.probe_eval)
    return sets


def evaluate(cfg, force: bool = False) -> dict[str, dict]:
    """The three-way comparison for every checkpoint of `eval_checkpoints` (cached in checkpoints/<profile>/
    repair_eval/<name>/ unless `force`), and on the held-out probe tasks when `probe_eval` (repair_eval/probe/<name>/);
    writes reports/<profile>/repair/summary.md and figures/. Returns {name: summary} of the held-out split (the
    probe's are in its cache directories and the report)."""
    from codelib.evaluation.evaluator import checkpoint_source
    from codelib.policy.models import load_policy

    set_threads(cfg.threads)  # (or CODELIB_THREADS: a shared machine)
    results: dict[str, dict] = {}
    total, k = len(eval_sets(cfg)) * len(cfg.eval_checkpoints), 0
    for which, (dataset, split, limit) in eval_sets(cfg).items():
        tasks = load_tasks(dataset, split)[: limit or None]
        summaries = results.setdefault(which, {})
        for name, path in cfg.eval_checkpoints.items():
            k += 1
            tag = f"[repair eval {k}/{total}] {name}" + (f" ({which})" if which else "")
            out = eval_dir(cfg, name, which)
            source = checkpoint_source(path)  # params-file paths are the repo's, whatever the cwd (a notebook's)
            settings = {"checkpoint": source, "tasks": len(tasks), "dataset": dataset, "eval_split": split}
            settings |= {k: getattr(cfg, k) for k in CACHE_KEYS}
            done = out / "summary.json"
            if not force and done.exists() and (out / "settings.json").exists():
                if json.loads((out / "settings.json").read_text()) == settings:
                    summaries[name] = json.loads(done.read_text())
                    print(f"{tag}: up to date, skipped (force re-runs it)", flush=True)
                    continue
            print(
                f"{tag}: {len(tasks)} {dataset}/{split} tasks x {cfg.eval_samples} episodes x 3 arms, "
                f"{cfg.turns} turns",
                flush=True,
            )
            t0 = time.time()
            model, tokenizer = load_policy(source)
            summaries[name] = evaluate_repair(model, tokenizer, tasks, cfg, out)
            print(f"{tag}: done in {time.time() - t0:.0f} s", flush=True)
            (out / "settings.json").write_text(json.dumps(settings, indent=1))
            del model
    write_report(cfg, results[""], results.get(PROBE))
    return results[""]
