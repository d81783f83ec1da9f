"""A study file, read strictly: the grid of arms x training seeds it describes (`load_study`), each run's params
built into its stage's Config before anything runs. `codelib.runner.study` runs the grid; `codelib.runner.study_report`
summarises it.
"""

from __future__ import annotations

import dataclasses
import difflib
import itertools
import json
import re
from dataclasses import dataclass
from pathlib import Path

from codelib.evaluation.evaluator import EvalConfig
from codelib.plumbing.params import (
    REPO_ROOT,
    ParamsError,
    build_config,
    checkpoints_root,
    load_yaml,
    reports_root,
    resolve,
)
from codelib.plumbing.paths import profiles
from codelib.plumbing.stages import TRAIN_STAGES
from codelib.runner import pipeline

STUDY_KEYS = {
    "description": "one line: what the study asks",
    "profile": "the params/<profile>/ the arms start from",
    "seeds": "training seeds, e.g. [0, 1, 2]: every arm runs once per seed",
    "arms": "arm name -> {stage, params, sweep, seed_keys}",
    "stage_params": "stage -> overrides every arm of that stage starts from (an arm's params override them), e.g. "
    "{04_grpo: {learning_rate: 0.001}}",
    "eval": "overrides of params/<profile>/06_eval.yaml (not checkpoints, baseline or profile)",
    "references": "name -> checkpoint evaluated once beside the arms (e.g. base: tiny, sft: checkpoints/tiny/sft)",
    "baseline": "an arm or reference every arm is compared with, paired (every pair of arms is compared too)",
    "jobs": "how many runs train at once (default 1); on 2 cores, 2 with threads: 1 in every arm",
    "pairs": "pairs of arms summary.md shows beside each arm vs the baseline, e.g. [[grpo, grpo_trl]] (default: every "
    "pair; comparisons.csv holds every pair)",
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
    split: str = ""  # evaluate on this split instead of the eval's own (`load_study(path, split=...)`)
    jobs: int = 1  # runs trained at once (each its own notebook kernel)
    pairs: list[tuple[str, str]] | None = None  # the pairs summary.md shows (None: every pair)

    @property
    def reports(self) -> Path:
        """The study's report directory: every run's executed notebook lives here."""
        return reports_root() / self.profile / "studies" / self.name

    @property
    def summary_dir(self) -> Path:
        """Where the summary, tables and figures go: the report directory, or its <split>/ for another split."""
        return self.reports / self.split if self.split else self.reports

    @property
    def eval_dir(self) -> Path:
        """Every run's and reference's evaluation: checkpoints/<profile>/studies/<name>/eval (eval_<split>)."""
        return self.checkpoints / (f"eval_{self.split}" if self.split else "eval")

    @property
    def checkpoints(self) -> Path:
        return checkpoints_root() / self.profile / "studies" / self.name

    def run_dir(self, run: Run) -> Path:
        return self.checkpoints / run.name

    def eval_config(self, skip=()):
        """The EvalConfig that scores every run (but those named in `skip`) and reference on the same tasks."""
        ckpts = dict(self.references)
        ckpts.update(
            {
                r.name: f"checkpoints/{self.profile}/studies/{self.name}/{r.name}"
                for r in self.runs
                if r.name not in skip
            }
        )
        values = {**self.eval_values, "profile": self.profile, "checkpoints": ckpts, "baseline": ""}
        if self.split:
            values["split"] = self.split
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
        raise StudyError(
            f"{where}: unknown key {bad[0]!r}"
            + (f" (and {', '.join(map(repr, bad[1:]))})" if len(bad) > 1 else "")
            + f". Valid keys: {valid}"
        )


def _stage_fields(stage: str) -> tuple[type, set[str]]:
    cls = pipeline.config_class(stage)
    return cls, {f.name for f in dataclasses.fields(cls) if f.init}


def _check_keys(where: str, stage: str, keys, cls, fields: set[str], seed_keys: list[str]) -> None:
    for key in keys:
        if key not in fields:
            close = difflib.get_close_matches(key, sorted(fields), n=3)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise StudyError(
                f"{where}: {stage}'s {cls.__module__}.{cls.__name__} has no parameter {key!r}{hint}; "
                f"valid names are: {', '.join(sorted(fields))}"
            )
        if key in ("profile", "stage"):
            raise StudyError(f"{where}: {key!r} is set by the study (runs go to studies/<study>/<run>); remove it")
        if key in seed_keys:
            raise StudyError(f"{where}: {key!r} comes from the study's `seeds` list; remove it from the arm")


def _label(value) -> str:
    return str(value).replace(" ", "").replace("/", "_").strip("[]{}'\"") or "x"


def _stage_params(where: str, shared, trained: set) -> dict[str, dict]:
    """The study's `stage_params` (stage -> overrides its arms start from), checked: every stage is one an arm
    trains, every value a mapping. Its keys are checked against the stage's Config with each arm's."""
    if shared is None:
        return {}
    if not isinstance(shared, dict) or not all(isinstance(v, dict) for v in shared.values()):
        raise StudyError(
            f"{where}: stage_params maps a stage to the params its arms start from, e.g. "
            f"stage_params: {{04_grpo: {{learning_rate: 0.001}}}}; got {shared!r}"
        )
    for stage in shared:
        if stage not in trained:
            raise StudyError(
                f"{where}: stage_params sets {stage!r}, which no arm trains (the arms train "
                f"{', '.join(sorted(str(t) for t in trained))}); name one of those or remove it"
            )
    return shared


def load_study(path: str | Path, split: str = "") -> Study:
    """Read and validate a study file; every run's params are built into its Config before anything runs.

    split: evaluate the same runs on this split of the eval's dataset (e.g. "fresh") instead of its own; the
    evaluations and the summary then go to their own directories (`eval_dir`, `summary_dir`)."""
    path = resolve(path)
    data = load_yaml(path)
    where = str(path)
    _unknown(where, data, STUDY_KEYS)
    profile = data.get("profile")
    if not isinstance(profile, str) or profile not in profiles():
        raise StudyError(
            f"{where}: profile {profile!r} has no params/ directory; known profiles: {', '.join(profiles())}"
        )
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
    shared = _stage_params(
        where, data.get("stage_params"), {spec.get("stage") for spec in arms_in.values() if isinstance(spec, dict)}
    )
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
            raise StudyError(
                f"{aw}: seed_keys must list fields of {cls.__name__} (e.g. [seed, gen_seed]); got {seed_keys!r}"
            )
        overrides = spec.get("params") or {}
        sweep = spec.get("sweep") or {}
        if not isinstance(overrides, dict) or not isinstance(sweep, dict):
            raise StudyError(f"{aw}: params and sweep are mappings (key: value, key: [values])")
        _check_keys(f"{aw} params", stage, overrides, cls, fields, seed_keys)
        _check_keys(f"{where}: stage_params {stage}", stage, shared.get(stage, {}), cls, fields, seed_keys)
        overrides = {**shared.get(stage, {}), **overrides}  # the arm's own params win
        _check_keys(f"{aw} sweep", stage, sweep, cls, fields, seed_keys)
        both = sorted(set(spec.get("params") or {}) & set(sweep))
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
        raise StudyError(
            f"{where}: references must map a name to a checkpoint, e.g. {{sft: checkpoints/{profile}/sft}}"
        )
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
        raise StudyError(
            f"{where}: eval sets {set_here[0]!r}, which the study sets itself (runs + references); remove it"
        )
    eval_yaml = REPO_ROOT / "params" / profile / "06_eval.yaml"
    if not eval_yaml.exists():
        raise StudyError(f"{where}: profile {profile!r} has no 06_eval.yaml; the study's evaluation starts from it")
    from codelib.evaluation.evaluator import EvalConfig

    _, eval_fields = _stage_fields("06_eval")
    bad = sorted(set(eval_values) - eval_fields)
    if bad:
        raise StudyError(
            f"{where}: eval: EvalConfig has no parameter {bad[0]!r}; valid names are: "
            f"{', '.join(sorted(eval_fields - set(EVAL_SET_BY_STUDY)))}"
        )
    eval_base = {**load_yaml(eval_yaml), **eval_values}
    baseline = data.get("baseline", "")
    if baseline and baseline not in arms and baseline not in references:
        raise StudyError(
            f"{where}: baseline {baseline!r} is neither an arm ({', '.join(arms)}) nor a reference "
            f"({', '.join(references) or 'none'}); name one, or '' for none"
        )
    jobs = data.get("jobs", 1)
    if not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1:
        raise StudyError(f"{where}: jobs is how many runs train at once, an integer >= 1 (e.g. jobs: 2); got {jobs!r}")
    pairs = data.get("pairs")
    if pairs is not None:
        known = [*arms, *references]
        ok = isinstance(pairs, list) and all(isinstance(p, list) and len(p) == 2 for p in pairs)
        if not ok:
            raise StudyError(
                f"{where}: pairs is a list of two-name lists, e.g. pairs: [[grpo, grpo_trl]]; got {pairs!r}"
            )
        for a, b in pairs:
            if a not in known or b not in known or a == b:
                raise StudyError(
                    f"{where}: pairs: [{a}, {b}] must name two different arms or references ({', '.join(known)})"
                )
        pairs = [(a, b) for a, b in pairs]
    study = Study(
        name,
        path,
        profile,
        str(data.get("description", "")),
        seeds,
        arms,
        sorted(runs, key=lambda r: seeds.index(r.seed)),
        eval_base,
        dict(references),
        baseline,
        jobs=jobs,
        pairs=pairs,
    )
    checked = _build(
        EvalConfig, {**eval_base, "profile": profile, "checkpoints": {"x": "tiny"}, "baseline": ""}, f"{where}: eval"
    )
    if split:
        from codelib.tasks import load_tasks

        try:
            if not load_tasks(checked.dataset, split, limit=1):
                raise ValueError("it has no tasks")
        except (KeyError, ValueError, FileNotFoundError) as e:
            raise StudyError(
                f"{where}: --split {split!r} is not a split of {checked.dataset} ({e}); name one the "
                f"dataset has (the eval's own is {checked.split!r})"
            ) from None
        study.split = split
    return study


def finished(study: Study, run: Run) -> bool:
    """The run's stamp says finished and its run directory exists (its params and code are not re-checked here)."""
    stamp = study.checkpoints / ".stamps" / f"{run.name}.json"
    try:
        return json.loads(stamp.read_text()).get("status") == "finished" and study.run_dir(run).exists()
    except (OSError, ValueError):
        return False


def load_summaries(study: Study) -> dict[str, dict]:
    """name -> eval summary for every reference and run that has one."""
    out = {}
    for name in [*study.references, *(r.name for r in study.runs)]:
        p = study.eval_dir / name / "summary.json"
        if p.exists():
            out[name] = json.loads(p.read_text())
    return out
