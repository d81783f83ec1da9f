"""Studies: a grid of arms x training seeds run through papermill, evaluated on the same held-out tasks, and
summarised with intervals that include the spread between training seeds.

    python -m codelib.study params/tiny/studies/algorithms.yaml            # run (or resume) the study
    python -m codelib.study params/tiny/studies/algorithms.yaml --check    # validate and list the runs only
    python -m codelib.study params/tiny/studies/algorithms.yaml --split fresh  # the same runs on another split

A study file names a profile, the training seeds, the arms (a training stage plus params overrides; `sweep`
expands a key's list of values into one arm per value; `stage_params` gives every arm of a stage the same starting
overrides), the evaluation (overrides of the profile's 06_eval.yaml) and reference checkpoints evaluated once (base,
SFT). Each run is the stage's notebook executed by papermill with the profile's params + the stage's `stage_params` +
the arm's overrides + its seed:

    reports/<profile>/studies/<name>/<run>/<stage>.ipynb     the executed notebook of one run
    checkpoints/<profile>/studies/<name>/<run>/               its checkpoints (adapter, metrics.jsonl, ...)
    checkpoints/<profile>/studies/<name>/eval/<run>/          its evaluation (samples.jsonl, summary.json)
    reports/<profile>/studies/<name>/                         summary.md/.csv, per_seed.csv, comparisons.csv,
                                                              figures/, 08_study.ipynb (executed)
    .../studies/<name>/<split>/, checkpoints/.../eval_<split>/  the same, evaluated on another split (--split)

A run is finished when its stamp holds the hash of its params, its notebook, its start checkpoint and the source of
every codelib module its trainer imports (transitively), and its run directory still exists. A killed study
resumes at the first unfinished run (the trainer itself resumes from its last checkpoint when the hash is
unchanged); a run whose params or code changed is wiped and trained again. A run that another study of the profile
finished with the same params (but its directory), notebook, code and start checkpoint is copied from it, not trained
again: training is deterministic on one machine type (`--no-reuse` trains it anyway).

Intervals: per arm, pass@1 is the mean over seeds of each seed's mean over tasks; its interval is a two-level
bootstrap (resample seeds, then tasks), so an arm whose seeds disagree gets a wider interval than one whose seeds
agree. Comparisons between arms are paired over tasks (the same task draw on both sides) with seeds resampled
within each arm.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from codelib.evaluation import evaluator
from codelib.plumbing.params import REPO_ROOT, ParamsError, atomic_write_json, resolve
from codelib.plumbing.progress import HEADLESS_ENV
from codelib.runner import pipeline, run_keys
from codelib.runner.run_keys import stage_sources
from codelib.runner.study_file import Run, Study, StudyError, finished, load_study, load_summaries
from codelib.runner.study_report import (
    StudyReportConfig,
    make_figures,
    paired_two_level,
    summarise,
    two_level_bootstrap,
)

__all__ = [
    "Run",
    "Study",
    "StudyError",
    "StudyReportConfig",
    "evaluate_study",
    "load_study",
    "load_summaries",
    "make_figures",
    "paired_two_level",
    "run_key",
    "run_study",
    "stage_sources",
    "summarise",
    "two_level_bootstrap",
]


# ---------------------------------------------------------------------------------------------------------------
# what a run depends on: params, notebook, and the source of the codelib modules it imports


def run_key(run: Run, notebook: Path) -> dict:
    """What decides a run's result: its params, its notebook, the codelib source it runs, the start checkpoint
    (`codelib.runner.run_keys`)."""
    return run_keys.run_key(run.stage, run.params, notebook)


def find_trained(study: Study, run: Run, train: str) -> run_keys.Donor | None:
    """A finished run that trained what `run` would (the same params but for its directory, the same notebook, code
    and start checkpoint: its record's `train` key): a stage of the profile's pipeline (`make demo`), a run of its
    comparison (`make compare`) or of another study; None if there is none (`run_keys.find_donor`). The pipeline's
    GRPO stage is, for instance, the algorithm study's `grpo-seed0`, the comparison's DAPO its `dapo-seed0`."""
    return run_keys.find_donor(
        study.checkpoints.parent.parent, study.reports.parent.parent, run.stage, train, exclude=study.run_dir(run)
    )


def _adopt(donor: run_keys.Donor, rdir: Path, out_nb: Path, stamp_path: Path, key: dict) -> None:
    """Copy a donor run (its directory and executed notebook) in as this run, finished; its config.json and notebook
    still name the donor's directory, and the stamp says where it came from."""
    run_keys.copy_run(donor, rdir, out_nb)
    atomic_write_json(
        stamp_path,
        {
            **key,
            "status": "finished",
            "seconds": 0.0,
            "reused_from": donor.name,
            "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
        },
    )


# ---------------------------------------------------------------------------------------------------------------
# running the grid


def _execute(stage: str, params: dict, notebook: Path, out_nb: Path) -> None:
    pipeline.run_stage(stage, params, notebook, out_nb)


def _check_starts(study: Study) -> None:
    """Every run's start checkpoint exists (a study does not train the SFT it starts from): say how to make it."""
    for run in study.runs:
        init = run.params.get("init") or run.params.get("model") or ""
        p = resolve(init) if init else None
        if p is not None and (Path(init).is_absolute() or Path(init).parts[0] == "checkpoints") and not p.exists():
            raise StudyError(
                f"{study.path}: arm {run.arm!r} starts from {init}, which does not exist; train it "
                f"first: python -m codelib.pipeline --profile {study.profile} --only 01_sft"
            )
    for ref, spec in study.references.items():
        if (Path(spec).is_absolute() or Path(spec).parts[0] == "checkpoints") and not resolve(spec).exists():
            raise StudyError(
                f"{study.path}: reference {ref!r} is {spec}, which does not exist; train it first "
                f"(python -m codelib.pipeline --profile {study.profile}) or remove it"
            )


def run_study(
    path: str | Path,
    force: Sequence[str] = (),
    evaluate: bool = True,
    summarise: bool = True,
    root: Path = REPO_ROOT,
    execute: Callable[[str, dict, Path, Path], None] = _execute,
    log=print,
    split: str = "",
    jobs: int = 0,
    only: Sequence[str] = (),
    reuse: bool = True,
) -> list[tuple[str, str, float]]:
    """Run every unfinished run of the study, evaluate every run, summarise; (run, "ran" | "skipped" | "reused", s)
    rows.

    `force` names runs (or arms) to train again even if finished. `execute(stage, params, notebook, out_nb)`
    runs one notebook (papermill; tests replace it). `split` evaluates and summarises on that split of the eval's
    dataset instead of its own, into their own directories (training is the same: finished runs are reused).
    `jobs` runs that many trainings at once (0: the study file's `jobs`, default 1). `only` names runs or arms:
    train just those now, in that order (the others are left as they are); the evaluation and the summary cover
    every finished run. `reuse`: an unfinished run that another study of the profile finished with the same params
    (but its directory), notebook, code and start checkpoint is copied from it instead of trained (not when forced).
    """
    study = load_study(path, split)
    for flag, names in (("--force", force), ("--only", only)):
        unknown = sorted(set(names) - {r.name for r in study.runs} - set(study.arms))
        if unknown:
            raise StudyError(
                f"{flag} {unknown[0]!r} is neither a run nor an arm of {study.name}; arms: {', '.join(study.arms)}"
            )
    _check_starts(study)
    os.environ.update(HEADLESS_ENV)  # widgets print, bars print lines (codelib.plumbing.progress)
    stamps = study.checkpoints / ".stamps"
    rows = []
    todo = []  # (tag, run, notebook, out_nb, key, stamp_path): the runs to train, in the study's order
    for i, run in enumerate(study.runs):
        notebook = root / "notebooks" / f"{run.stage}.ipynb"
        out_nb = study.reports / run.name / f"{run.stage}.ipynb"
        rdir = study.run_dir(run)
        stamp_path = stamps / f"{run.name}.json"
        key = run_key(run, notebook)
        stamp = json.loads(stamp_path.read_text()) if stamp_path.exists() else {}
        tag = f"[{study.name} {i + 1}/{len(study.runs)}] {run.name}"
        forced = run.name in force or run.arm in force
        if only and run.name not in only and run.arm not in only:
            continue
        if stamp.get("key") == key["key"] and stamp.get("status") == "finished" and not forced:
            if out_nb.exists() and rdir.exists():
                log(f"{tag}: finished, skipped")
                rows.append((run.name, "skipped", 0.0))
                if stamp.get("train") != key["train"]:  # a stamp from before `train`: a donor from now on
                    atomic_write_json(stamp_path, {**stamp, "train": key["train"]})
                continue
        donor = find_trained(study, run, key["train"]) if reuse and not forced else None
        if donor is not None:
            _adopt(donor, rdir, out_nb, stamp_path, key)
            log(f"{tag}: trained already as {donor.said}; copied, not trained again")
            rows.append((run.name, "reused", 0.0))
            continue
        if stamp.get("key") != key["key"] or stamp.get("status") == "finished" or forced:
            # changed params or code (or a forced rerun): the trainer must not resume the old run's checkpoint
            if rdir.exists():
                if forced:
                    why = "forced"
                elif stamp.get("key") != key["key"]:
                    why = "its params, code or start changed"
                else:
                    why = "its notebook or run directory is gone" if stamp else "no record of it"
                log(f"{tag}: {why}; removing its old run directory")
                shutil.rmtree(rdir)
        else:
            log(f"{tag}: resuming an unfinished run")
        todo.append((tag, run, notebook, out_nb, key, stamp_path))

    def train(item) -> tuple[str, str, float]:
        tag, run, notebook, out_nb, key, stamp_path = item
        atomic_write_json(stamp_path, {**key, "status": "started", "started": time.strftime("%Y-%m-%d %H:%M:%S")})
        log(f"{tag}: running {notebook.name} (seed {run.seed}) -> {out_nb}")
        t0 = time.time()
        execute(run.stage, run.params, notebook, out_nb)
        dt = time.time() - t0
        atomic_write_json(
            stamp_path,
            {**key, "status": "finished", "seconds": round(dt, 1), "finished": time.strftime("%Y-%m-%d %H:%M:%S")},
        )
        log(f"{tag}: done in {dt:.0f} s")
        return run.name, "ran", dt

    if only:  # in the order they are named (then the study's order)
        todo.sort(key=lambda item: min(i for i, n in enumerate(only) if n in (item[1].name, item[1].arm)))
    jobs = max(1, jobs or study.jobs)
    if jobs == 1 or len(todo) < 2:
        rows += [train(item) for item in todo]
    else:  # each run is its own kernel process: threads only wait on them; a failure stops no other run
        pythonpath = os.environ.get("PYTHONPATH")  # set once here, not by each thread (pipeline.run_stage)
        if (pythonpath or "").split(os.pathsep)[0] != str(REPO_ROOT):
            os.environ["PYTHONPATH"] = os.pathsep.join(
                [str(REPO_ROOT), pythonpath] if pythonpath else [str(REPO_ROOT)]
            )
        # N runs' torch threads share the cores: threads that spin while waiting for work (OpenMP's default) take
        # the cores the other runs need, threads that sleep do not. The thread count, and so every float, is unchanged.
        ours = "OMP_WAIT_POLICY" not in os.environ  # a policy the user set stays theirs
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        try:
            with ThreadPoolExecutor(max_workers=jobs) as pool:
                futures = [pool.submit(train, item) for item in todo]
                errors = [f.exception() for f in futures if f.exception() is not None]
        finally:
            if ours:
                del os.environ["OMP_WAIT_POLICY"]
        if errors:
            raise errors[0]
        rows += [f.result() for f in futures]
    if evaluate:
        evaluate_study(study, log=log)
    if summarise:
        nb = root / "notebooks" / "08_study.ipynb"
        out = study.summary_dir / "08_study.ipynb"
        log(f"[{study.name}] summary: running {nb.name} -> {out}")
        execute("08_study", {"study": str(study.path), "split": split}, nb, out)
    return rows


def evaluate_study(study: Study, log=print) -> dict[str, dict]:
    """Every finished run and every reference on the same held-out tasks (up-to-date evaluations are reused); a
    run not trained yet (`--only` left it, or it was stopped) is named and left out."""
    unfinished = [r.name for r in study.runs if not finished(study, r)]
    if unfinished:
        log(f"[{study.name}] not trained yet, left out of the evaluation: {', '.join(unfinished)}")
    cfg = study.eval_config(skip=unfinished)
    evaluator.evaluate(cfg, out_root=study.eval_dir, reports=study.summary_dir)
    return load_summaries(study)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m codelib.study",
        description=__doc__.split("\n\n")[0],
        epilog="examples:\n" + __doc__.split("\n\n")[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("study", help="a study file, e.g. params/tiny/studies/algorithms.yaml")
    ap.add_argument("--check", action="store_true", help="validate the file and list its runs; run nothing")
    ap.add_argument("--force", nargs="+", default=[], help="train these runs or arms again even if finished")
    ap.add_argument(
        "--split",
        default="",
        help="evaluate and summarise on this split instead of the eval's own "
        "(e.g. fresh): reports/<profile>/studies/<name>/<split>/",
    )
    ap.add_argument(
        "--only",
        nargs="+",
        default=[],
        help="train only these runs or arms now, in this order (the evaluation and summary cover every finished run)",
    )
    ap.add_argument(
        "--jobs",
        type=int,
        default=0,
        help="train this many runs at once (default: the study file's "
        "jobs, else 1); on 2 cores, 2 with threads: 1 in every arm",
    )
    ap.add_argument(
        "--no-reuse",
        action="store_true",
        help="train every unfinished run here, even one another study of the profile finished with the same "
        "params, notebook, code and start (by default it is copied)",
    )
    args = ap.parse_args(argv)
    try:
        if args.check:
            study = load_study(args.study, args.split)
            for run in study.runs:
                print(f"{run.name}: {run.stage} seed {run.seed} {json.dumps(study.arms[run.arm]['overrides'])}")
            print(f"{len(study.runs)} runs ({len(study.arms)} arms x {len(study.seeds)} seeds); file is valid")
            return 0
        t0 = time.time()
        rows = run_study(
            args.study, force=args.force, split=args.split, jobs=args.jobs, only=args.only, reuse=not args.no_reuse
        )
        ran, reused = (sum(1 for _, st, _ in rows if st == s) for s in ("ran", "reused"))
        print(
            f"{ran} run(s) trained, {reused} copied (trained already by the pipeline, the comparison or a study), "
            f"{len(rows) - ran - reused} skipped, {time.time() - t0:.0f} s in all"
        )
        return 0
    except (ParamsError, FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # a failing notebook: pipeline.StageFailed names the cell
        if isinstance(e, pipeline.StageFailed):
            print(f"error: {e}", file=sys.stderr)
            return 1
        raise


if __name__ == "__main__":
    sys.exit(main())
