"""Offline preference data from executed candidates: generate -> annotate -> n-best -> pairs -> manifest.

1. `generate_candidates`: N samples per training task from a policy -> candidates.jsonl
2. `annotate`: every candidate through the sandbox -> candidates_annotated.jsonl (verdict, detail, test
   fraction, tokens); appended batch by batch, so a stop loses at most the batch in flight and a rerun skips
   what is already annotated
3. `build_preferences`: nbest.jsonl (candidates ranked per task by a reward of `codelib.engine.rewards`, by default
   `RANKING` = pass + 0.5 * test fraction, ties to the shorter), pairs.jsonl
   (chosen passes, rejected fails, kept when chosen test fraction >= min_chosen and the gap >= min_gap, in the
   spirit of AceCoder's margin rule; at most K pairs per task; completions deduplicated) and manifest.json
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from dataclasses import dataclass
from difflib import SequenceMatcher
from pathlib import Path

from codelib import sandbox
from codelib.engine import rewards
from codelib.plumbing.params import atomic_write_json, atomic_write_text, read_jsonl
from codelib.policy.generation import generate, stops_for
from codelib.tasks import Task

RANKING = {"pass": 1.0, "test_fraction": 0.5}  # pass counts most, then the share of tests passed


@dataclass
class PairRule:
    min_chosen: float = 0.8  # chosen's test fraction at least this (and it must pass)
    min_gap: float = 0.4  # chosen fraction - rejected fraction at least this
    max_pairs_per_task: int = 4  # K


def generate_candidates(
    model,
    tokenizer,
    tasks: list[Task],
    path: Path,
    n: int,
    temperature: float,
    top_p: float,
    max_new_tokens: int,
    seed: int,
    batch_size: int = 64,
    source: str = "",
    backend: str = "hf",
) -> Path:
    """Sample n completions per task and write candidates.jsonl (skipped if it exists for the same settings).

    backend "vllm": `model` is what vLLM loads (hub id, model dir or adapter dir) and tokenizer may be None.
    """
    settings = {
        "n": n,
        "temperature": temperature,
        "top_p": top_p,
        "max_new_tokens": max_new_tokens,
        "seed": seed,
        "source": source,
        "tasks": len(tasks),
        "ids": True,
    }
    if backend != "hf":
        settings["backend"] = backend  # (absent for hf, so candidates written before this key stay valid)
    meta = path.with_suffix(".settings.json")
    if path.exists() and meta.exists() and json.loads(meta.read_text()) == settings:
        return path
    groups = generate(
        model,
        tokenizer,
        [t.prompt for t in tasks],
        n=n,
        temperature=temperature,
        top_p=top_p,
        max_new_tokens=max_new_tokens,
        batch_size=batch_size,
        seed=seed,
        stop=stops_for(tasks[0]),
        backend=backend,
    )
    lines = []
    for t, group in zip(tasks, groups, strict=True):
        for j, c in enumerate(group):
            row = {
                "task_id": t.task_id,
                "index": j,
                "raw": c.text,
                "completion": rewards.extract_completion(c.text, t),
                "tokens": c.n_tokens,
                "finished": c.finished,
                "ids": list(c.ids),
            }
            lines.append(json.dumps(row) + "\n")
    atomic_write_text(path, "".join(lines))
    atomic_write_json(meta, settings)
    return path


def annotate(
    candidates: Path, tasks: list[Task], out: Path, batch_size: int = 256, workers: int = 2, timeout_s: float = 5.0
) -> Path:
    """Run every candidate not yet in `out` through the sandbox, appending its verdict batch by batch."""
    by_id = {t.task_id: t for t in tasks}
    done = {(r["task_id"], r["index"]) for r in read_jsonl(out)}
    todo = [r for r in read_jsonl(candidates) if (r["task_id"], r["index"]) not in done]
    for i in range(0, len(todo), batch_size):
        rows = todo[i : i + batch_size]
        verdicts = sandbox.check(
            [by_id[r["task_id"]] for r in rows], [r["completion"] for r in rows], workers=workers, timeout_s=timeout_s
        )
        with open(out, "a", encoding="utf-8") as f:
            for r, v in zip(rows, verdicts, strict=True):
                row = {
                    **r,
                    "status": v.status,
                    "passed": v.passed,
                    "detail": v.detail,
                    "test_fraction": rewards.test_fraction_of(v),
                }
                f.write(json.dumps(row) + "\n")
            f.flush()
    return out


def rank(
    annotated: list[dict], reward: dict | None = None, prompts: dict[str, str] | None = None
) -> dict[str, list[dict]]:
    """Per task: distinct completions, best `reward` first (a `rewards:` spec, default RANKING, scored from the
    annotated verdicts), ties to the shorter one. prompts: task id -> prompt, for rewards that read the code."""
    by_task: dict[str, dict[str, dict]] = defaultdict(dict)
    for r in annotated:
        by_task[r["task_id"]].setdefault(r["completion"], r)  # dedup identical completions
    rows = [r for group in by_task.values() for r in group.values()]
    prompts = prompts or {}
    scores, _ = rewards.make_rewards(reward or RANKING).score(
        [r["completion"] for r in rows],
        verdicts=rows,
        tokens=[r["tokens"] for r in rows],
        prompt=[prompts.get(r["task_id"], "") for r in rows],
    )
    score = {id(r): s for r, s in zip(rows, scores, strict=True)}
    return {
        tid: sorted(group.values(), key=lambda r: (-score[id(r)], r["tokens"], r["index"]))
        for tid, group in by_task.items()
    }


def make_pairs(ranked: dict[str, list[dict]], rule: PairRule, seed: int = 0) -> list[dict]:
    """(chosen passes, rejected fails) pairs that meet the margin rule, at most K per task."""
    rng = random.Random(seed)
    pairs = []
    for tid, rows in ranked.items():
        chosen = [r for r in rows if r["passed"] and r["test_fraction"] >= rule.min_chosen]
        rejected = [r for r in rows if not r["passed"]]
        cands = [(c, r) for c in chosen for r in rejected if c["test_fraction"] - r["test_fraction"] >= rule.min_gap]
        rng.shuffle(cands)
        # spread the K pairs over distinct chosen and rejected completions before reusing any
        picked, used = [], set()
        for c, r in cands:
            if id(c) not in used and id(r) not in used:
                picked.append((c, r))
                used.update((id(c), id(r)))
        picked += [cr for cr in cands if cr not in picked]
        for c, r in picked[: rule.max_pairs_per_task]:
            pairs.append(
                {
                    "task_id": tid,
                    "chosen": c["completion"],
                    "rejected": r["completion"],
                    "chosen_fraction": c["test_fraction"],
                    "rejected_fraction": r["test_fraction"],
                    "chosen_ids": c.get("ids"),
                    "rejected_ids": r.get("ids"),
                }
            )
    return pairs


def diversity(annotated: list[dict]) -> dict:
    """Distinct completions per task and mean pairwise similarity (difflib ratio) within a task."""
    by_task: dict[str, list[str]] = defaultdict(list)
    for r in annotated:
        by_task[r["task_id"]].append(r["completion"])
    distinct = [len(set(v)) for v in by_task.values()]
    sims = []
    for v in by_task.values():
        u = sorted(set(v))[:8]  # cap the quadratic cost
        for i in range(len(u)):
            for j in range(i + 1, len(u)):
                sims.append(SequenceMatcher(None, u[i], u[j]).ratio())
    return {
        "tasks": len(by_task),
        "distinct_per_task": sum(distinct) / max(1, len(distinct)),
        "mean_pairwise_similarity": sum(sims) / len(sims) if sims else 1.0,
    }


def build_preferences(
    annotated_path: Path,
    tasks: list[Task],
    out_dir: Path,
    rule: PairRule,
    settings: dict,
    seed: int = 0,
    reward: dict | None = None,
) -> dict:
    """Write nbest.jsonl, pairs.jsonl (with the prompt) and manifest.json; return the manifest."""
    annotated = read_jsonl(annotated_path)
    ranked = rank(annotated, reward, {t.task_id: t.prompt for t in tasks})
    atomic_write_text(
        out_dir / "nbest.jsonl",
        "".join(json.dumps({"task_id": t, "ranked": rows}) + "\n" for t, rows in ranked.items()),
    )
    prompts = {t.task_id: t.prompt for t in tasks}
    pairs = make_pairs(ranked, rule, seed)
    for p in pairs:
        p["prompt"] = prompts[p["task_id"]]
    atomic_write_text(out_dir / "pairs.jsonl", "".join(json.dumps(p) + "\n" for p in pairs))
    no_pass = sorted(t for t, rows in ranked.items() if not any(r["passed"] for r in rows))
    no_fail = sorted(t for t, rows in ranked.items() if all(r["passed"] for r in rows))
    manifest = {
        "counts": {
            "tasks": len({t.task_id for t in tasks}),
            "candidates": len(annotated),
            "passed": sum(1 for r in annotated if r["passed"]),
            "distinct": sum(len(v) for v in ranked.values()),
            "pairs": len(pairs),
            "tasks_with_pairs": len({p["task_id"] for p in pairs}),
        },
        "tasks_with_no_pass": len(no_pass),
        "tasks_with_no_fail": len(no_fail),
        "no_pass_ids": no_pass[:50],
        "no_fail_ids": no_fail[:50],
        "rule": {
            "min_chosen": rule.min_chosen,
            "min_gap": rule.min_gap,
            "max_pairs_per_task": rule.max_pairs_per_task,
        },
        "diversity": diversity(annotated),
        **settings,
    }
    atomic_write_json(out_dir / "manifest.json", manifest)
    return manifest
