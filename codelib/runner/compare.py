"""`make compare`: train every run of a profile's comparison that has no current run, evaluate, write the table.

    python -m codelib.comparison params/tiny/comparison.yaml   # train what has no current run, evaluate, the table
    python -m codelib.comparison params/tiny/variants/06_eval_algorithms.yaml   # evaluate, then the table

A comparison file names its runs (`runs: name -> params file`) and its eval params file (`eval:`). Each run is its
stage's notebook executed by papermill with the params file's values, as the pipeline and the studies run theirs;
its executed copy lands in reports/<profile>/comparison/<name>.ipynb, and its done.json records the run's `train`
key (`run_keys.run_key`), so a study copies the run rather than training it again, and the comparison copies a run a
study (or the pipeline) trained first. The table itself is `codelib.reports.comparison`'s (re-exported here: this
module is `codelib.comparison`).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from codelib.evaluation import evaluator
from codelib.plumbing.checkpoints import trainer_state_end, trl_checkpoints
from codelib.plumbing.params import (
    REPO_ROOT,
    USER_ERRORS,
    ParamsError,
    atomic_write_json,
    config_to_dict,
    fail,
    load_config,
    load_yaml,
    main_config,
    reports_root,
    resolve,
)
from codelib.plumbing.progress import HEADLESS_ENV
from codelib.plumbing.stages import STAGES
from codelib.reports.comparison import (  # noqa: F401  (codelib.comparison's table API, as before the move)
    algorithm_of,
    comparison_frame,
    comparison_markdown,
    paired_vs,
    run_mean,
    settings_line,
    wall_time_s,
    write_comparison,
)
from codelib.runner import pipeline, run_keys


def stage_of(params_file: Path) -> str:
    """The training stage a params file configures: from its number (variants/02_reinforce_rloo -> 02_reinforce)."""
    number = params_file.name[:2]
    for name, stage in STAGES.items():
        if name.startswith(number) and stage.kind == "train":
            return name
    raise ValueError(f"{params_file}: its name must start with a training stage's number (01-05)")


def run_fingerprint(params_file: Path) -> str:
    """A hash of the merged params of a run: a run whose done.json holds it is current."""
    import hashlib

    text = json.dumps(load_yaml(params_file), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def same_config(run: Path, params_file: Path) -> bool:
    """Whether `run` finished (its adapter and kept.json or train_summary.json exist) training exactly what
    `params_file` asks for (its config.json holds the same Config fields), e.g. a stage the pipeline trained."""
    if not (run / "config.json").exists() or not (run / "adapter_model.safetensors").exists():
        return False
    if not _finished(run):
        return False
    want = config_to_dict(load_config(STAGES[stage_of(params_file)].config_class(), params_file))
    have = json.loads((run / "config.json").read_text())
    ignore = {"workers", "threads", "report_to", "save_every", "processes"}
    return all(have.get(k) == v for k, v in want.items() if k not in ignore)


def _finished(run: Path) -> bool:
    """A run wrote its end marker (kept.json, train_summary.json), or is an HF trainer's run whose last
    checkpoint's trainer_state.json reached its max_steps (the adapter beside it is the final one)."""
    if any((run / f).exists() for f in ("kept.json", "train_summary.json", "trainer_state.json")):
        return True
    ckpts = trl_checkpoints(run)
    return bool(ckpts) and trainer_state_end(ckpts[-1]) > 0


def _forget(run: Path) -> None:
    """Before `run`'s directory is written again: its done.json and any pipeline stamp that names the directory no
    longer describe what it will hold, so neither may offer it to a study as a donor any longer."""
    (run / "done.json").unlink(missing_ok=True)
    for stamp in sorted((run.parent / ".stamps").glob("*.json")):
        if run_keys.read_stamp(stamp).get("dir") == run.name:
            stamp.unlink()  # the pipeline runs that stage again: its run directory is not what it trained


def train_missing(spec: Path, dry_run: bool = False, execute=None, log=print) -> list[str]:
    """Train every run of a comparison spec (`runs: name -> params file`) that has no current run: no done.json, or
    one written for other params, and no finished run of the same config (e.g. the pipeline's). Every params file is
    checked first (a typo in the last run fails before the first trains). A run a study or the pipeline already
    trained with the same params (but its directory), notebook, code and start (`run_keys.find_donor`) is copied;
    any other runs its stage's notebook (`execute(stage, params, notebook, out_nb)`, default
    `pipeline.run_stage`; tests replace it) and resumes from its last checkpoint if it stopped. done.json, written
    when the run finished, records its `train` key, so a study copies it in turn. Returns the names trained or
    copied (with dry_run: that would be)."""
    execute = execute or pipeline.run_stage
    cfg = load_yaml(spec)
    runs = []
    for name, rel in cfg["runs"].items():
        params_file = (spec.parent / rel).resolve()
        stage = stage_of(params_file)
        load_config(STAGES[stage].config_class(), params_file)  # a bad file fails here, before any training
        runs.append((name, rel, params_file, stage))
    trained = []
    for name, rel, params_file, stage in runs:
        merged = load_yaml(params_file)
        profile = merged.get("profile", "tiny")
        run = resolve(f"checkpoints/{profile}/{merged.get('stage', name)}")
        done = run / "done.json"
        fp = run_fingerprint(params_file)
        recorded = run_keys.read_stamp(done)
        if recorded.get("params") == fp or same_config(run, params_file):
            if recorded and recorded.get("params") != fp:  # kept as the pipeline's run: that record is stale
                done.unlink()
            log(f"[compare] {name}: current ({run}), kept")
            continue
        trained.append(name)
        notebook = REPO_ROOT / "notebooks" / f"{stage}.ipynb"
        key = run_keys.run_key(stage, merged, notebook)
        reports = reports_root() / profile
        out_nb = reports / "comparison" / f"{name}.ipynb"
        record = {"params": fp, "file": str(rel), "train": key["train"], "notebook": f"comparison/{name}.ipynb"}
        donor = run_keys.find_donor(run.parent, reports, stage, key["train"], exclude=run)
        if donor is not None:
            log(f"[compare] {name}: trained already as {donor.said}; {'to copy' if dry_run else 'copied'}")
            if not dry_run:
                _forget(run)
                run_keys.copy_run(donor, run, out_nb)
                atomic_write_json(done, {**record, "reused_from": donor.name})
            continue
        log(f"[compare] {name}: {'to train' if dry_run else 'training'} ({rel}): {notebook.name} -> {out_nb}")
        if dry_run:
            continue
        os.environ.update(HEADLESS_ENV)  # widgets print, bars print lines (codelib.plumbing.progress)
        _forget(run)
        execute(stage, merged, notebook, out_nb)
        atomic_write_json(done, record)
    return trained


def main(argv: list[str] | None = None) -> None:
    """`python -m codelib.comparison FILE.yaml`: a comparison spec's runs without a current checkpoint are trained
    first; then the checkpoints of its eval params file (or of FILE itself, an eval params file) are evaluated
    (their results table under reports/<profile>/<file stem>/, so the profile's own results.md is left alone) and
    the comparison of every evaluated checkpoint is written, reports/<profile>/comparison.md."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("-h", "--help"):
        print(
            "python -m codelib.comparison FILE.yaml: FILE is a comparison spec (runs: name -> params file, eval: an\n"
            "eval params file; params/<profile>/comparison.yaml), whose runs without a current checkpoint are "
            "trained\n"
            "first, or an eval params file. The checkpoints are evaluated, then reports/<profile>/comparison.md is\n"
            "written. key=value overrides apply to the evaluation.\n"
        )
        main_config(evaluator.EvalConfig, argv, command="python -m codelib.comparison")
    debug = "--debug" in argv
    try:
        spec = load_yaml(Path(argv[0])) if argv and argv[0].endswith(".yaml") else {}
        if "runs" in spec and "eval" not in spec:
            raise ParamsError(f"{argv[0]}: a comparison spec names its eval params file (eval: 06_eval.yaml)")
        if "runs" in spec:  # a comparison spec: train what has no current run, then evaluate its eval params file
            train_missing(Path(argv[0]))
            argv = [str((Path(argv[0]).parent / spec["eval"]).resolve()), *argv[1:]]
        cfg = main_config(evaluator.EvalConfig, argv, command="python -m codelib.comparison")
        evaluator.evaluate(cfg, reports=reports_root() / cfg.profile / Path(argv[0]).stem)
    except (*USER_ERRORS, ValueError, pipeline.StageFailed) as e:  # StageFailed: a run's notebook (its cell named)
        fail(e, debug)
    except KeyboardInterrupt:
        print("interrupted: finished runs are kept; the same command resumes", file=sys.stderr)
        raise SystemExit(130) from None
    df = write_comparison(cfg.profile, baseline=cfg.baseline or "sft")
    print(df.to_string(index=False))


if __name__ == "__main__":
    main()
