"""Studies: a grid of arms x training seeds run through papermill, evaluated on the same held-out tasks, and
summarised with intervals that include the spread between training seeds.

    python -m codelib.study params/tiny/studies/algorithms.yaml            # run (or resume) the study
    python -m codelib.study params/tiny/studies/algorithms.yaml --check    # validate and list the runs only

A study file names a profile, the training seeds, the arms (a training stage plus params overrides; `sweep`
expands a key's list of values into one arm per value), the evaluation (overrides of the profile's 06_eval.yaml)
and reference checkpoints evaluated once (base, SFT). Each run is the stage's notebook executed by papermill with
the profile's params + the arm's overrides + its seed:

    reports/<profile>/studies/<name>/<run>/<stage>.ipynb     the executed notebook of one run
    checkpoints/<profile>/studies/<name>/<run>/               its checkpoints (adapter, metrics.jsonl, ...)
    checkpoints/<profile>/studies/<name>/eval/<run>/          its evaluation (samples.jsonl, summary.json)
    reports/<profile>/studies/<name>/                         summary.md/.csv, per_seed.csv, comparisons.csv,
                                                              figures/, 08_study.ipynb (executed)

A run is finished when its stamp holds the hash of its params, its notebook, its start checkpoint and the source of
every codelib module its trainer imports (transitively), and its run directory still exists. A killed study resumes at the first
unfinished run (the trainer itself resumes from its last checkpoint when the hash is unchanged); a run whose params
or code changed is wiped and trained again.

Intervals: per arm, pass@1 is the mean over seeds of each seed's mean over tasks; its interval is a two-level
bootstrap (resample seeds, then tasks), so an arm whose seeds disagree gets a wider interval than one whose seeds
agree. Comparisons between arms are paired over tasks (the same task draw on both sides) with seeds resampled
within each arm.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import difflib
import hashlib
import itertools
import json
import math
import re
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from codelib.params import (
    REPO_ROOT,
    ParamsError,
    atomic_write_json,
    atomic_write_text,
    build_config,
    checkpoints_root,
    load_yaml,
    reports_root,
    resolve,
)

TRAIN_STAGES = ("01_sft", "02_reinforce", "03_ppo", "04_grpo", "05_dpo")
STUDY_KEYS = {
    "description": "one line: what the study asks",
    "profile": "the params/<profile>/ the arms start from",
    "seeds": "training seeds, e.g. [0, 1, 2]: every arm runs once per seed",
    "arms": "arm name -> {stage, params, sweep, seed_keys}",
    "eval": "overrides of params/<profile>/06_eval.yaml (not checkpoints, baseline or profile)",
    "references": "name -> checkpoint evaluated once beside the arms (e.g. base: tiny, sft: checkpoints/tiny/sft)",
    "baseline": "an arm or reference every arm is compared with, paired (every pair of arms is compared too)",
}
ARM_KEYS = {
    "stage": "a training stage: " + ", ".join(TRAIN_STAGES),
    "params": "overrides of params/<profile>/<stage>.yaml (keys of the stage's Config)",
    "sweep": "key -> list of values: one arm per combination",
    "seed_keys": "the Config fields the run's seed is written to (default [seed])",
}
EVAL_SET_BY_STUDY = ("checkpoints", "baseline", "profile")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.=+]*$")


class StudyError(ParamsError):
    """A study file that does not describe a valid grid; the message names the key and the fix."""


@dataclass
class Run:
    """One training run: an arm's stage with its params at one seed."""

    name: str  # <arm>-seed<seed>: its directory name under studies/<study>/
    arm: str
    stage: str
    seed: int
    params: dict  # the notebook's parameters: the profile's YAML + overrides + seed + run directory


@dataclass
class Study:
    name: str
    path: Path
    profile: str
    description: str
    seeds: list[int]
    arms: dict[str, dict]  # arm -> {"stage", "overrides"} (a sweep already expanded)
    runs: list[Run]
    eval_values: dict  # 06_eval params (checkpoints and baseline left to the study)
    references: dict[str, str]
    baseline: str

    @property
    def reports(self) -> Path:
        return reports_root() / self.profile / "studies" / self.name

    @property
    def checkpoints(self) -> Path:
        return checkpoints_root() / self.profile / "studies" / self.name

    def run_dir(self, run: Run) -> Path:
        return self.checkpoints / run.name

    def eval_config(self):
        """The EvalConfig that scores every run and reference on the same tasks."""
        from codelib.evaluator import EvalConfig

        ckpts = dict(self.references)
        ckpts.update({r.name: f"checkpoints/{self.profile}/studies/{self.name}/{r.name}" for r in self.runs})
        values = {**self.eval_values, "profile": self.profile, "checkpoints": ckpts, "baseline": ""}
        return build_config(EvalConfig, values, source=f"{self.path}: eval")


# ---------------------------------------------------------------------------------------------------------------
# the study file, strictly


def _build(cls: type, values: dict, source: str):
    """build_config, with its errors as StudyError (the study file is what needs fixing)."""
    try:
        return build_config(cls, values, source=source)
    except StudyError:
        raise
    except ParamsError as e:
        raise StudyError(str(e)) from None


def _unknown(where: str, keys, known: dict) -> None:
    bad = sorted(set(keys) - set(known))
    if bad:
        valid = "; ".join(f"{k}: {v}" for k, v in known.items())
        raise StudyError(f"{where}: unknown key {bad[0]!r}" + (f" (and {', '.join(map(repr, bad[1:]))})" if len(bad) > 1 else "") + f". Valid keys: {valid}")  # fmt: skip


def _stage_fields(stage: str) -> tuple[type, set[str]]:
    from codelib import pipeline

    cls = pipeline.config_class(stage)
    return cls, {f.name for f in dataclasses.fields(cls) if f.init}


def _check_keys(where: str, stage: str, keys, cls, fields: set[str], seed_keys: list[str]) -> None:
    for key in keys:
        if key not in fields:
            close = difflib.get_close_matches(key, sorted(fields), n=3)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise StudyError(f"{where}: {stage}'s {cls.__module__}.{cls.__name__} has no parameter {key!r}{hint}; "
                             f"valid names are: {', '.join(sorted(fields))}")  # fmt: skip
        if key in ("profile", "stage"):
            raise StudyError(f"{where}: {key!r} is set by the study (runs go to studies/<study>/<run>); remove it")
        if key in seed_keys:
            raise StudyError(f"{where}: {key!r} comes from the study's `seeds` list; remove it from the arm")


def _label(value) -> str:
    return str(value).replace(" ", "").replace("/", "_").strip("[]{}'\"") or "x"


def load_study(path: str | Path) -> Study:
    """Read and validate a study file; every run's params are built into its Config before anything runs."""
    path = resolve(path)
    data = load_yaml(path)
    where = str(path)
    _unknown(where, data, STUDY_KEYS)
    profile = data.get("profile")
    if not isinstance(profile, str) or not (REPO_ROOT / "params" / profile).is_dir():
        known = sorted(p.name for p in (REPO_ROOT / "params").iterdir() if p.is_dir() and p.name != "accelerate")
        raise StudyError(f"{where}: profile {profile!r} has no params/ directory; known profiles: {', '.join(known)}")
    seeds = data.get("seeds")
    if (
        not isinstance(seeds, list)
        or not seeds
        or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds)
    ):
        raise StudyError(f"{where}: seeds must be a non-empty list of integers, e.g. seeds: [0, 1, 2]; got {seeds!r}")
    if len(set(seeds)) != len(seeds):
        raise StudyError(f"{where}: seeds repeat ({seeds}); each seed once")
    arms_in = data.get("arms")
    if not isinstance(arms_in, dict) or not arms_in:
        raise StudyError(f"{where}: arms must be a mapping of arm name -> {{stage: 02_reinforce, params: {{...}}}}")
    name = path.stem
    arms: dict[str, dict] = {}
    runs: list[Run] = []
    for arm, spec in arms_in.items():
        aw = f"{where}: arm {arm!r}"
        if not isinstance(arm, str) or not NAME_RE.match(arm):
            raise StudyError(f"{aw}: an arm name is a plain name (letters, digits, _ . = +); it names directories")
        if not isinstance(spec, dict):
            raise StudyError(f"{aw}: expected a mapping with a stage, e.g. {{stage: 02_reinforce}}, got {spec!r}")
        _unknown(aw, spec, ARM_KEYS)
        stage = spec.get("stage")
        if stage not in TRAIN_STAGES:
            raise StudyError(f"{aw}: unknown stage {stage!r}; an arm trains one of: {', '.join(TRAIN_STAGES)}")
        yaml_path = REPO_ROOT / "params" / profile / f"{stage}.yaml"
        if not yaml_path.exists():
            raise StudyError(f"{aw}: profile {profile!r} has no {yaml_path.name}; the arm's params start from it")
        cls, fields = _stage_fields(stage)
        seed_keys = spec.get("seed_keys", ["seed"])
        if not isinstance(seed_keys, list) or not seed_keys or not all(k in fields for k in seed_keys):
            raise StudyError(f"{aw}: seed_keys must list fields of {cls.__name__} (e.g. [seed, gen_seed]); got {seed_keys!r}")  # fmt: skip
        overrides = spec.get("params") or {}
        sweep = spec.get("sweep") or {}
        if not isinstance(overrides, dict) or not isinstance(sweep, dict):
            raise StudyError(f"{aw}: params and sweep are mappings (key: value, key: [values])")
        _check_keys(f"{aw} params", stage, overrides, cls, fields, seed_keys)
        _check_keys(f"{aw} sweep", stage, sweep, cls, fields, seed_keys)
        both = sorted(set(overrides) & set(sweep))
        if both:
            raise StudyError(f"{aw}: {both[0]!r} is in both params and sweep; keep it in one")
        for key, values in sweep.items():
            if not isinstance(values, list) or not values:
                raise StudyError(f"{aw} sweep: {key!r} needs a non-empty list of values, e.g. {key}: [a, b]")
        base = load_yaml(yaml_path)
        combos = list(itertools.product(*sweep.values())) if sweep else [()]
        for combo in combos:
            swept = dict(zip(sweep, combo, strict=True))
            arm_name = "-".join([arm, *(f"{k}={_label(v)}" for k, v in swept.items())])
            if arm_name in arms:
                raise StudyError(f"{aw}: arm {arm_name!r} appears twice; rename one")
            arms[arm_name] = {"stage": stage, "overrides": {**overrides, **swept}, "seed_keys": seed_keys}
            for seed in seeds:
                run = f"{arm_name}-seed{seed}"
                values = {**base, **overrides, **swept, **dict.fromkeys(seed_keys, seed)}
                values.update(profile=profile, stage=f"studies/{name}/{run}")
                _build(cls, values, f"{aw}, seed {seed}")  # types and cross-field checks, now
                runs.append(Run(run, arm_name, stage, seed, values))
    references = data.get("references") or {}
    if not isinstance(references, dict) or not all(isinstance(v, str) for v in references.values()):
        raise StudyError(f"{where}: references must map a name to a checkpoint, e.g. {{sft: checkpoints/{profile}/sft}}")  # fmt: skip
    clash = sorted(set(references) & set(arms))
    if clash:
        raise StudyError(f"{where}: {clash[0]!r} is both an arm and a reference; rename one")
    for ref in references:
        if not isinstance(ref, str) or not NAME_RE.match(ref):
            raise StudyError(f"{where}: reference name {ref!r} must be a plain name (it names a directory)")
    eval_values = data.get("eval") or {}
    if not isinstance(eval_values, dict):
        raise StudyError(f"{where}: eval must be a mapping of 06_eval parameters, e.g. {{n_samples: 8}}")
    set_here = [k for k in EVAL_SET_BY_STUDY if k in eval_values]
    if set_here:
        raise StudyError(f"{where}: eval sets {set_here[0]!r}, which the study sets itself (runs + references); remove it")  # fmt: skip
    eval_yaml = REPO_ROOT / "params" / profile / "06_eval.yaml"
    if not eval_yaml.exists():
        raise StudyError(f"{where}: profile {profile!r} has no 06_eval.yaml; the study's evaluation starts from it")
    from codelib.evaluator import EvalConfig

    _, eval_fields = _stage_fields("06_eval")
    bad = sorted(set(eval_values) - eval_fields)
    if bad:
        raise StudyError(f"{where}: eval: EvalConfig has no parameter {bad[0]!r}; valid names are: {', '.join(sorted(eval_fields - set(EVAL_SET_BY_STUDY)))}")  # fmt: skip
    eval_base = {**load_yaml(eval_yaml), **eval_values}
    baseline = data.get("baseline", "")
    if baseline and baseline not in arms and baseline not in references:
        raise StudyError(f"{where}: baseline {baseline!r} is neither an arm ({', '.join(arms)}) nor a reference "
                         f"({', '.join(references) or 'none'}); name one, or '' for none")  # fmt: skip
    study = Study(name, path, profile, str(data.get("description", "")), seeds, arms,
                  sorted(runs, key=lambda r: seeds.index(r.seed)), eval_base, dict(references), baseline)  # fmt: skip
    _build(
        EvalConfig, {**eval_base, "profile": profile, "checkpoints": {"x": "tiny"}, "baseline": ""}, f"{where}: eval"
    )
    return study


# ---------------------------------------------------------------------------------------------------------------
# what a run depends on: params, notebook, and the source of the codelib modules it imports


def _module_file(name: str) -> Path | None:
    """codelib.a.b -> codelib/a/b.py or codelib/a/b/__init__.py (found by path: nothing is imported)."""
    parts = name.split(".")
    if parts[0] != "codelib":
        return None
    base = Path(__file__).resolve().parent.joinpath(*parts[1:])
    for p in (base.with_suffix(".py"), base / "__init__.py"):
        if p.is_file():
            return p
    return None


def _imports(source: str, package: str) -> set[str]:
    """codelib modules a source imports (absolute and relative; `from codelib import x` counts x)."""
    out = set()
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return out
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.split(".")[0] == "codelib")
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                mod = ".".join(base + ([mod] if mod else []))
            if mod.split(".")[0] != "codelib":
                continue
            out.add(mod)
            out.update(f"{mod}.{a.name}" for a in node.names if _module_file(f"{mod}.{a.name}"))
    return out


def module_sources(source: str) -> dict[str, str]:
    """Every codelib module a piece of code imports, transitively: module name -> its source text."""
    seen: dict[str, str] = {}
    todo = sorted(_imports(source, "codelib"))
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        path = _module_file(name)
        if path is None:
            continue
        text = path.read_text()
        seen[name] = text
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        parents = [".".join(name.split(".")[:i]) for i in range(2, len(name.split(".")))]  # packages run first
        todo.extend(m for m in sorted(_imports(text, package)) + parents if m not in seen)
    return dict(sorted(seen.items()))


def stage_sources(stage: str) -> dict[str, str]:
    """The codelib source a training stage runs: its trainer and launch, transitively; the whole sandbox package
    when any of it is used (its worker, judge and harness run as separate programs, not imports). Plotting and
    evaluation code is not in it: a change there does not retrain a study."""
    sources = module_sources(f"import {_config_module(stage)}\nimport codelib.launch\n")
    if any(m.startswith("codelib.sandbox") for m in sources):
        pkg = Path(__file__).resolve().parent / "sandbox"
        sources.update({f"codelib.sandbox.{p.stem}": p.read_text() for p in sorted(pkg.glob("*.py")) if p.stem != "__init__"})  # fmt: skip
    return dict(sorted(sources.items()))


def run_key(run: Run, notebook: Path) -> dict:
    """What decides a run's result: its params, its notebook, the codelib source it runs, the start checkpoint."""
    from codelib.models import checkpoint_fingerprint as _fingerprint

    sources = stage_sources(run.stage)
    init = run.params.get("init") or run.params.get("model") or ""
    start = _fingerprint(str(resolve(init))) if init and init != "tiny" and resolve(init).exists() else init
    parts = {
        "params": json.dumps(run.params, sort_keys=True, default=str),
        "notebook": notebook.read_text(),
        "code": json.dumps({m: hashlib.sha256(t.encode()).hexdigest() for m, t in sources.items()}),
        "start": json.dumps(start, default=str),
    }
    digest = hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]
    return {"key": digest, "modules": sorted(sources), **{k: hashlib.sha256(v.encode()).hexdigest()[:12] for k, v in parts.items()}}  # fmt: skip


def _config_module(stage: str) -> str:
    from codelib import pipeline

    return pipeline.STAGES[stage].rsplit(".", 1)[0]


# ---------------------------------------------------------------------------------------------------------------
# running the grid


def _execute(stage: str, params: dict, notebook: Path, out_nb: Path) -> None:
    from codelib import pipeline

    pipeline.run_stage(stage, params, notebook, out_nb)


def _check_starts(study: Study) -> None:
    """Every run's start checkpoint exists (a study does not train the SFT it starts from): say how to make it."""
    for run in study.runs:
        init = run.params.get("init") or run.params.get("model") or ""
        p = resolve(init) if init else None
        if p is not None and (Path(init).is_absolute() or Path(init).parts[0] == "checkpoints") and not p.exists():
            raise StudyError(f"{study.path}: arm {run.arm!r} starts from {init}, which does not exist; train it "
                             f"first: python -m codelib.pipeline --profile {study.profile} --only 01_sft")  # fmt: skip
    for ref, spec in study.references.items():
        if (Path(spec).is_absolute() or Path(spec).parts[0] == "checkpoints") and not resolve(spec).exists():
            raise StudyError(f"{study.path}: reference {ref!r} is {spec}, which does not exist; train it first "
                             f"(python -m codelib.pipeline --profile {study.profile}) or remove it")  # fmt: skip


def run_study(
    path: str | Path,
    force: Sequence[str] = (),
    evaluate: bool = True,
    summarise: bool = True,
    root: Path = REPO_ROOT,
    execute: Callable[[str, dict, Path, Path], None] = _execute,
    log=print,
) -> list[tuple[str, str, float]]:
    """Run every unfinished run of the study, evaluate every run, summarise; (run, "ran" | "skipped", s) rows.

    `force` names runs (or arms) to train again even if finished. `execute(stage, params, notebook, out_nb)`
    runs one notebook (papermill; tests replace it).
    """
    import os

    study = load_study(path)
    unknown = sorted(set(force) - {r.name for r in study.runs} - set(study.arms))
    if unknown:
        raise StudyError(f"--force {unknown[0]!r} is neither a run nor an arm of {study.name}; arms: {', '.join(study.arms)}")  # fmt: skip
    _check_starts(study)
    os.environ["CODELIB_HEADLESS"] = "1"
    stamps = study.checkpoints / ".stamps"
    rows = []
    for i, run in enumerate(study.runs):
        notebook = root / "notebooks" / f"{run.stage}.ipynb"
        out_nb = study.reports / run.name / f"{run.stage}.ipynb"
        rdir = study.run_dir(run)
        stamp_path = stamps / f"{run.name}.json"
        key = run_key(run, notebook)
        stamp = json.loads(stamp_path.read_text()) if stamp_path.exists() else {}
        tag = f"[{study.name} {i + 1}/{len(study.runs)}] {run.name}"
        forced = run.name in force or run.arm in force
        if stamp.get("key") == key["key"] and stamp.get("status") == "finished" and not forced:
            if out_nb.exists() and rdir.exists():
                log(f"{tag}: finished, skipped")
                rows.append((run.name, "skipped", 0.0))
                continue
        if stamp.get("key") != key["key"] or stamp.get("status") == "finished" or forced:
            # changed params or code (or a forced rerun): the trainer must not resume the old run's checkpoint
            if rdir.exists():
                why = ("forced" if forced else "its params, code or start changed" if stamp.get("key") != key["key"]
                       else "its notebook or run directory is gone" if stamp else "no record of it")  # fmt: skip
                log(f"{tag}: {why}; removing its old run directory")
                shutil.rmtree(rdir)
        else:
            log(f"{tag}: resuming an unfinished run")
        atomic_write_json(stamp_path, {**key, "status": "started", "started": time.strftime("%Y-%m-%d %H:%M:%S")})
        log(f"{tag}: running {notebook.name} (seed {run.seed}) -> {out_nb}")
        t0 = time.time()
        execute(run.stage, run.params, notebook, out_nb)
        dt = time.time() - t0
        atomic_write_json(stamp_path, {**key, "status": "finished", "seconds": round(dt, 1),
                                       "finished": time.strftime("%Y-%m-%d %H:%M:%S")})  # fmt: skip
        log(f"{tag}: done in {dt:.0f} s")
        rows.append((run.name, "ran", dt))
    if evaluate:
        evaluate_study(study)
    if summarise:
        nb = root / "notebooks" / "08_study.ipynb"
        out = study.reports / "08_study.ipynb"
        log(f"[{study.name}] summary: running {nb.name} -> {out}")
        execute("08_study", {"study": str(study.path)}, nb, out)
    return rows


def evaluate_study(study: Study) -> dict[str, dict]:
    """Every run and reference on the same held-out tasks (up-to-date evaluations are reused)."""
    from codelib import evaluator

    cfg = study.eval_config()
    evaluator.evaluate(cfg, out_root=study.checkpoints / "eval", reports=study.reports)
    return load_summaries(study)


def load_summaries(study: Study) -> dict[str, dict]:
    """name -> eval summary for every reference and run that has one."""
    out = {}
    for name in [*study.references, *(r.name for r in study.runs)]:
        p = study.checkpoints / "eval" / name / "summary.json"
        if p.exists():
            out[name] = json.loads(p.read_text())
    return out


# ---------------------------------------------------------------------------------------------------------------
# statistics: seeds and tasks


def two_level_bootstrap(
    x, iters: int = 1000, seed: int = 0, alpha: float = 0.05, nested: bool = False
) -> tuple[float, float, float]:
    """Mean of x [seeds, tasks] with a two-level percentile bootstrap: resample seeds, then tasks.

    Each replicate draws S seeds with replacement, then T tasks with replacement: one task draw shared by every
    drawn seed (the seeds ran the same tasks; default) or, with nested=True, a fresh task draw within each drawn
    seed. With one seed this is the usual bootstrap over tasks. Returns (mean, lo, hi).
    """
    x = np.asarray(x, dtype=float)
    if x.ndim != 2 or x.size == 0:
        raise ValueError(f"need a [seeds, tasks] array with at least one value, got shape {x.shape}")
    s, t = x.shape
    rng = np.random.default_rng(seed)
    seeds_idx = rng.integers(0, s, size=(iters, s))  # [iters, S]
    if nested:
        tasks_idx = rng.integers(0, t, size=(iters, s, t))  # [iters, S, T]
        est = x[seeds_idx[..., None], tasks_idx].mean(axis=(1, 2))  # [iters]
    else:
        tasks_idx = rng.integers(0, t, size=(iters, t))  # [iters, T]
        per_seed = x[:, tasks_idx].mean(axis=2)  # [S, iters]: each seed's mean over the replicate's tasks
        est = np.take_along_axis(per_seed.T, seeds_idx, axis=1).mean(axis=1)  # [iters]
    lo, hi = np.quantile(est, [alpha / 2, 1 - alpha / 2])
    return float(x.mean()), float(lo), float(hi)


def paired_two_level(a, b, iters: int = 1000, seed: int = 0, alpha: float = 0.05) -> dict:
    """mean(a) - mean(b) for a [seeds_a, tasks], b [seeds_b, tasks] on the same tasks, two-level bootstrap.

    Seeds are resampled within each arm (different arms' seeds are different runs); tasks are drawn once per
    replicate for both arms, so the task difficulty both share cancels (a paired comparison).
    """
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"paired comparison needs [seeds, tasks] arrays on the same tasks, got {a.shape}, {b.shape}")
    rng = np.random.default_rng(seed)
    t = a.shape[1]
    tasks_idx = rng.integers(0, t, size=(iters, t))  # [iters, T], shared by both arms
    sa = rng.integers(0, a.shape[0], size=(iters, a.shape[0]))  # [iters, Sa]
    sb = rng.integers(0, b.shape[0], size=(iters, b.shape[0]))  # [iters, Sb]
    ma = np.take_along_axis(a[:, tasks_idx].mean(axis=2).T, sa, axis=1).mean(axis=1)  # [iters]
    mb = np.take_along_axis(b[:, tasks_idx].mean(axis=2).T, sb, axis=1).mean(axis=1)  # [iters]
    d = ma - mb
    lo, hi = np.quantile(d, [alpha / 2, 1 - alpha / 2])
    return {"diff": float(a.mean() - b.mean()), "ci_low": float(lo), "ci_high": float(hi),
            "p_better": float((d > 0).mean()), "tasks": int(t), "seeds_a": int(a.shape[0]), "seeds_b": int(b.shape[0])}  # fmt: skip


def _rates(summaries: Sequence[dict], task_ids: list[str], k: int = 1):
    """[seeds, tasks] per-task pass@k of several eval summaries on the given tasks."""
    from codelib.passk import pass_at_k_matrix

    rows = []
    for s in summaries:
        by_id = {r["task_id"]: r for r in s["per_task"]}
        n = [by_id[t]["n"] for t in task_ids]
        c = [by_id[t]["c"] for t in task_ids]
        rows.append(pass_at_k_matrix(n, c, k)[:, k - 1])
    return np.asarray(rows)


# ---------------------------------------------------------------------------------------------------------------
# the summary: tables and figures


@dataclass
class StudyReportConfig:
    """Parameters of 08_study: which study to summarise (its runs must be trained and evaluated)."""

    study: str = "params/tiny/studies/algorithms.yaml"  # the study file
    bootstrap_iters: int = 1000  # resamples for every interval
    seed: int = 0  # bootstrap seed
    nested: bool = False  # True draws tasks afresh within each resampled seed (default: one draw shared by all)
    curve_iters: int = 200  # resamples per k for the pass@k bands

    def __post_init__(self):
        if self.bootstrap_iters < 10 or self.curve_iters < 10:
            raise ValueError("bootstrap_iters and curve_iters need at least 10 resamples (1000 for a report)")


@dataclass
class StudySummary:
    study: Study
    arms: object  # DataFrame: one row per arm (and reference)
    per_seed: object  # DataFrame: one row per run
    comparisons: object  # DataFrame: paired differences
    curves: dict = field(default_factory=dict)  # name -> {"k", "pass@k", "ci_low", "ci_high", "per_seed"}
    task_ids: list = field(default_factory=list)


def summarise(cfg: StudyReportConfig, write: bool = True) -> StudySummary:
    """Arm table (mean over seeds, two-level CI), per-seed table, paired comparisons, pass@k curves."""
    import pandas as pd

    study = load_study(cfg.study)
    summaries = load_summaries(study)
    missing = [r.name for r in study.runs if r.name not in summaries]
    if missing:
        raise FileNotFoundError(f"{len(missing)} run(s) of study {study.name} have no evaluation yet (first: "
                                f"{missing[0]}); run: python -m codelib.study {study.path}")  # fmt: skip
    groups: dict[str, list[str]] = {ref: [ref] for ref in study.references if ref in summaries}
    for run in study.runs:
        groups.setdefault(run.arm, []).append(run.name)
    task_sets = [{r["task_id"] for r in summaries[n]["per_task"]} for names in groups.values() for n in names]
    task_ids = sorted(set.intersection(*task_sets))
    if not task_ids:
        raise ValueError(f"study {study.name}: the runs share no evaluated task")
    it, sd = cfg.bootstrap_iters, cfg.seed
    data = {g: _rates([summaries[n] for n in names], task_ids) for g, names in groups.items()}  # g -> [S, T]

    per_seed = []
    for run in study.runs:
        s = summaries[run.name]
        per_seed.append({"run": run.name, "arm": run.arm, "stage": run.stage, "seed": run.seed,
                         "pass@1": s["pass@1"], "ci_low": s["ci_low"], "ci_high": s["ci_high"],
                         "avg_tokens": s["avg_tokens"]})  # fmt: skip
    arms = []
    for g, x in data.items():
        mean, lo, hi = two_level_bootstrap(x, it, sd, nested=cfg.nested)
        _, tlo, thi = two_level_bootstrap(x.mean(axis=0, keepdims=True), it, sd)  # tasks only, seeds held fixed
        seed_means = x.mean(axis=1)
        ref = g in study.references
        arms.append({"arm": g, "kind": "reference" if ref else "arm",
                     "stage": "" if ref else study.arms[g]["stage"],
                     "overrides": "" if ref else json.dumps(study.arms[g]["overrides"], sort_keys=True),
                     "seeds": x.shape[0], "pass@1": mean, "ci_low": lo, "ci_high": hi,
                     "task_ci_low": tlo, "task_ci_high": thi,
                     "seed_sd": float(seed_means.std(ddof=1)) if len(seed_means) > 1 else math.nan,
                     "per_seed": " ".join(f"{100 * v:.1f}" for v in seed_means),
                     "avg_tokens": float(np.mean([summaries[n]["avg_tokens"] for n in groups[g]]))})  # fmt: skip
    arm_names = [g for g in groups if g not in study.references]
    pairs = [(g, study.baseline) for g in arm_names if study.baseline and g != study.baseline]
    pairs += [p for p in itertools.combinations(arm_names, 2) if p not in pairs and p[::-1] not in pairs]
    comparisons = [{"a": a, "b": b, **paired_two_level(data[a], data[b], it, sd)} for a, b in pairs]

    curves = {}
    k_max = min(min(r["n"] for r in summaries[n]["per_task"]) for names in groups.values() for n in names)
    for g, names in groups.items():
        rates = [_rates([summaries[n] for n in names], task_ids, k) for k in range(1, k_max + 1)]  # K x [S, T]
        boots = [two_level_bootstrap(x, cfg.curve_iters, sd, nested=cfg.nested) for x in rates]
        curves[g] = {"k": list(range(1, k_max + 1)), "pass@k": [b[0] for b in boots],
                     "ci_low": [b[1] for b in boots], "ci_high": [b[2] for b in boots],
                     "per_seed": [[float(x[i].mean()) for x in rates] for i in range(len(names))]}  # fmt: skip
    out = StudySummary(study, pd.DataFrame(arms), pd.DataFrame(per_seed), pd.DataFrame(comparisons), curves, task_ids)
    if write:
        write_summary(out, cfg)
    return out


def _pct(x) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}"


def summary_markdown(s: StudySummary, cfg: StudyReportConfig) -> str:
    st = s.study
    ev = st.eval_values
    seeds = ", ".join(map(str, st.seeds))
    lines = [
        f"# Study `{st.name}` ({st.profile})",
        "",
        st.description,
        "",
        f"{len(s.task_ids)} held-out tasks ({ev['dataset']}/{ev['split']}), {ev['n_samples']} samples/task at "
        f"T={ev['temperature']}, eval seed {ev['seed']}; training seeds {seeds}. pass@1 is the mean over seeds; "
        f"[95% CI] is a {cfg.bootstrap_iters}-resample two-level bootstrap (seeds, then tasks); `tasks only` holds "
        "the seeds fixed (what a single-seed table reports); `seed sd` is the standard deviation of the per-seed "
        "pass@1. Percentages.",
        "",
        "| arm | stage | seeds | pass@1 [95% CI, seeds+tasks] | tasks only | seed sd | per seed | avg tokens |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in s.arms.to_dict("records"):
        stage = r["stage"] + (f" {r['overrides']}" if r["overrides"] not in ("", "{}") else "")
        lines.append(f"| {r['arm']} | {stage or 'reference'} | {r['seeds']} | {_pct(r['pass@1'])} "
                     f"[{_pct(r['ci_low'])}, {_pct(r['ci_high'])}] | [{_pct(r['task_ci_low'])}, "
                     f"{_pct(r['task_ci_high'])}] | {_pct(r['seed_sd'])} | {r['per_seed']} | {r['avg_tokens']:.1f} |")  # fmt: skip
    if len(s.comparisons):
        lines += ["", "Paired over the same tasks, seeds resampled within each arm; `P(a > b)` is the share of "
                  "bootstrap replicates where a is ahead.", "",
                  "| a | b | Δ pass@1 (a - b) [95% CI] | P(a > b) |", "|---|---|---|---|"]  # fmt: skip
        for r in s.comparisons.to_dict("records"):
            lines.append(f"| {r['a']} | {r['b']} | {100 * r['diff']:+.1f} [{100 * r['ci_low']:+.1f}, "
                         f"{100 * r['ci_high']:+.1f}] | {r['p_better']:.2f} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def write_summary(s: StudySummary, cfg: StudyReportConfig) -> dict[str, Path]:
    out = s.study.reports
    paths = {"summary.md": out / "summary.md", "summary.csv": out / "summary.csv",
             "per_seed.csv": out / "per_seed.csv", "comparisons.csv": out / "comparisons.csv"}  # fmt: skip
    atomic_write_text(paths["summary.md"], summary_markdown(s, cfg))
    atomic_write_text(paths["summary.csv"], s.arms.to_csv(index=False))
    atomic_write_text(paths["per_seed.csv"], s.per_seed.to_csv(index=False))
    atomic_write_text(paths["comparisons.csv"], s.comparisons.to_csv(index=False))
    from codelib.passk import curves_frame

    atomic_write_text(out / "pass_at_k.csv", curves_frame(s.curves).to_csv(index=False))
    return paths


def plot_arms(s: StudySummary):
    """pass@1 per arm: the mean over seeds with its two-level 95% interval, and every seed as a point."""
    import matplotlib.pyplot as plt

    df = s.arms
    fig, ax = plt.subplots(figsize=(max(5.5, 1.2 * len(df) + 2), 4.2))
    rng = np.random.default_rng(0)
    for i, r in enumerate(df.to_dict("records")):
        color = "0.45" if r["kind"] == "reference" else f"C{i}"
        ax.errorbar(i, 100 * r["pass@1"], yerr=[[100 * (r["pass@1"] - r["ci_low"])], [100 * (r["ci_high"] - r["pass@1"])]],
                    fmt="D", color=color, capsize=6, markersize=7, zorder=3)  # fmt: skip
        ax.errorbar(i + 0.22, 100 * r["pass@1"], yerr=[[100 * (r["pass@1"] - r["task_ci_low"])], [100 * (r["task_ci_high"] - r["pass@1"])]],
                    fmt="none", ecolor=color, alpha=0.4, capsize=3)  # fmt: skip
        seeds = s.per_seed[s.per_seed["arm"] == r["arm"]]
        if len(seeds):
            ax.scatter(i - 0.18 + rng.uniform(-0.06, 0.06, len(seeds)), 100 * seeds["pass@1"], color=color,
                       alpha=0.8, s=22, zorder=4)  # fmt: skip
    ax.set_xticks(range(len(df)), df["arm"], rotation=20, ha="right")
    ax.set_ylabel("held-out pass@1 (%)")
    ax.set_title(
        "mean over seeds ◆ with 95% CI (seeds + tasks); dots: one per seed; faint bar: tasks only", fontsize=9
    )
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return fig


def plot_comparisons(s: StudySummary):
    """Paired differences of pass@1 with their two-level intervals (a forest plot); 0 = no difference."""
    import matplotlib.pyplot as plt

    df = s.comparisons
    fig, ax = plt.subplots(figsize=(6.5, 0.5 * max(len(df), 1) + 1.5))
    for i, r in enumerate(df.to_dict("records")):
        ax.errorbar(100 * r["diff"], i, xerr=[[100 * (r["diff"] - r["ci_low"])], [100 * (r["ci_high"] - r["diff"])]],
                    fmt="o", color="C0" if r["ci_low"] > 0 else ("C3" if r["ci_high"] < 0 else "0.4"), capsize=4)  # fmt: skip
    ax.axvline(0, color="k", lw=0.8)
    ax.set_yticks(range(len(df)), [f"{r['a']} − {r['b']}" for r in df.to_dict("records")])
    ax.invert_yaxis()
    ax.set_xlabel("Δ pass@1 (points), paired over tasks, 95% CI over seeds and tasks")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


def plot_curves(s: StudySummary):
    """pass@k per arm (mean over seeds, two-level band) with each seed's curve as a thin line."""
    from codelib import passk

    fig = passk.plot_curves({g: c for g, c in s.curves.items()}, title="pass@k: mean over seeds, 95% CI (seeds + tasks)")  # fmt: skip
    ax = fig.axes[0]
    for i, c in enumerate(s.curves.values()):
        for ys in c["per_seed"] if len(c["per_seed"]) > 1 else []:
            ax.plot(c["k"], 100 * np.asarray(ys), color=f"C{i}", lw=0.6, alpha=0.5)
    return fig


def make_figures(s: StudySummary, show: bool = True) -> dict[str, Path]:
    import matplotlib

    if not show:
        matplotlib.use("Agg")

    from codelib.reports import save_figures

    figs = {"pass_at_1_seeds": plot_arms(s), "pass_at_k": plot_curves(s)}
    if len(s.comparisons):
        figs["comparisons"] = plot_comparisons(s)
    return save_figures(figs, s.study.reports / "figures", show)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m codelib.study", description=__doc__.split("\n")[0])
    ap.add_argument("study", help="a study file, e.g. params/tiny/studies/algorithms.yaml")
    ap.add_argument("--check", action="store_true", help="validate the file and list its runs; run nothing")
    ap.add_argument("--force", nargs="+", default=[], help="train these runs or arms again even if finished")
    args = ap.parse_args(argv)
    try:
        if args.check:
            study = load_study(args.study)
            for run in study.runs:
                print(f"{run.name}: {run.stage} seed {run.seed} {json.dumps(study.arms[run.arm]['overrides'])}")
            print(f"{len(study.runs)} runs ({len(study.arms)} arms x {len(study.seeds)} seeds); file is valid")
            return 0
        t0 = time.time()
        rows = run_study(args.study, force=args.force)
        ran = sum(1 for _, st, _ in rows if st == "ran")
        print(f"{ran} run(s) trained, {len(rows) - ran} skipped, {time.time() - t0:.0f} s in all")
        return 0
    except (ParamsError, FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # a failing notebook: pipeline.StageFailed names the cell
        from codelib.pipeline import StageFailed

        if isinstance(e, StageFailed):
            print(f"error: {e}", file=sys.stderr)
            return 1
        raise


if __name__ == "__main__":
    sys.exit(main())
