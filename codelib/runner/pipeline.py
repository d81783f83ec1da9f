"""Run a profile's notebooks in order with papermill: `python -m codelib.pipeline --profile tiny`.

Opt-in stages (`OPT_IN`: the multi-turn repair stage) run only when named: `python -m codelib.pipeline --only
09_repair`.

Each stage is `notebooks/NN_name.ipynb` run with `params/<profile>/NN_name.yaml`; the executed copy lands in
`reports/<profile>/`. All params files are checked against their Config before anything runs (unknown, missing
or mistyped key -> error naming the key and the file). A stage whose params (with their `extends:` bases),
notebook and upstream stages are unchanged since its last successful run, whose judging code (extraction, sandbox,
rewards: `codelib.plumbing.fingerprint`) is unchanged if it judges completions, and whose run directories still
exist, is skipped unless `--force`; a stage that ran again makes every stage after it run again (they read what it
wrote). A training stage that runs again over a finished run of the same settings keeps it (the trainers resume).
A failing stage stops the run, naming the notebook, the cell and the error; its executed notebook is kept for
inspection.

What a stage prints (its progress lines, one every 20 s or so) streams to this terminal as it runs, indented under
the stage's name. The tiny profile's base model is pretrained first, as its own step with its own time (once: it is
cached under checkpoints/tiny/base/). Executed notebooks are written with paths relative to the repository and
their parameter cells collapsed, so a report opens on its results. A stage whose Config has an `out_dir` left empty
writes into reports/<profile>/ when the pipeline runs it (and into a scratch folder when papermill runs it alone).

    python -m codelib.pipeline --list            # the stages of a profile, opt-in ones marked
    python -m codelib.pipeline --only 04 06 07   # just these (names or numbers)
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import importlib
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
import uuid
from pathlib import Path

import papermill as pm

from codelib.plumbing import stages as stage_registry
from codelib.plumbing.fingerprint import JUDGE, SCORE, code_hash
from codelib.plumbing.params import (
    REPO_ROOT,
    ParamsError,
    atomic_write_json,
    build_config,
    checkpoints_root,
    load_yaml,
    run_dir,
)
from codelib.plumbing.paths import profiles
from codelib.plumbing.progress import HEADLESS_ENV
from codelib.runner.run_keys import read_stamp, train_key

# stage -> Config class its params mirror (the order is the run order), from the one stage registry
STAGES = {name: stage.config for name, stage in stage_registry.STAGES.items()}
OPT_IN = stage_registry.OPT_IN  # stages a profile runs only when --only names them: they would lengthen `make demo`


class StageFailed(RuntimeError):
    """A notebook raised; the message names the stage, the cell and the error."""


def config_class(stage: str):
    mod, name = STAGES[stage].rsplit(".", 1)
    return getattr(importlib.import_module(mod), name)


def profile_stages(profile: str, root: Path = REPO_ROOT) -> list[str]:
    """The stages that have a params file in params/<profile>/, in run order."""
    pdir = root / "params" / profile
    if profile not in profiles(root):  # params/base/ and params/accelerate/ are no profiles
        raise FileNotFoundError(f"no params directory {pdir}; known profiles: {', '.join(profiles(root))}")
    return [s for s in STAGES if (pdir / f"{s}.yaml").exists()]


def select(stages: list[str], only: list[str] | None, start: str | None) -> list[str]:
    """Apply --only (names or NN prefixes) and --from (a name or NN prefix) to the profile's stages."""

    def match(key: str) -> str:
        hits = [s for s in stages if s == key or s.split("_")[0] == key or s.split("_", 1)[-1] == key]
        if not hits:
            raise ValueError(
                f"unknown stage {key!r}; this profile has: {', '.join(stages)} (python -m codelib.pipeline --list)"
            )
        return hits[0]

    if start:
        stages = stages[stages.index(match(start)) :]
    if only:
        wanted = {match(k) for k in only}
        stages = [s for s in stages if s in wanted]
    else:
        stages = [s for s in stages if s not in OPT_IN]
    return stages


def check_params(profile: str, stages: list[str], root: Path = REPO_ROOT) -> dict[str, dict]:
    """Load and strictly check every stage's params before running anything."""
    out = {}
    for stage in stages:
        path = root / "params" / profile / f"{stage}.yaml"
        values = load_yaml(path)
        build_config(config_class(stage), values, source=str(path))
        out[stage] = values
    return out


def stage_outputs(stage: str, values: dict) -> list[Path]:
    """The directories a stage writes: checkpoints/<profile>/<stage>/ for a trainer, eval/<name>/ per evaluated
    checkpoint. A stage is only skipped while they all still exist (a deleted run is trained again)."""
    profile = values.get("profile")
    if not profile:
        return []
    if values.get("stage"):
        return [run_dir(profile, values["stage"])]
    if stage == "06_eval":
        return [run_dir(profile, values.get("out") or "eval") / name for name in values.get("checkpoints") or {}]
    return []


def _digest(*parts: str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


def code_key(stage: str) -> str:
    """The hash of the code that judges (and, for the eval stage, scores) a stage's completions; "" for a stage
    that judges nothing (its Config has no sandbox `workers`)."""
    fields = {f.name for f in dataclasses.fields(config_class(stage))}
    if "workers" not in fields:
        return ""
    return code_hash(SCORE if stage == "06_eval" else JUDGE)


class _Stream:
    """Where a stage's printed output goes while it runs: this terminal, each line indented under the stage, a
    carriage-return redraw kept as its last state only."""

    def __init__(self, log=print, prefix: str = "    "):
        self.log, self.prefix, self.buf = log, prefix, ""

    def write(self, text: str) -> None:
        self.buf += text
        while "\n" in self.buf:
            line, self.buf = self.buf.split("\n", 1)
            line = line.rsplit("\r", 1)[-1].rstrip()
            if line.strip():
                self.log(self.prefix + line)

    def flush(self) -> None:
        pass


def _kernel_config(sockets: str):
    """Local kernels talk over IPC sockets where the OS has them: no TCP ports, and no "Kernel is running over TCP
    without encryption" warning from every kernel the pipeline starts. Each kernel's sockets live in their own
    directory `sockets`: two kernels started at once (a study's jobs) would otherwise pick the same socket names."""
    from traitlets.config import Config

    c = Config()
    if os.name == "posix":
        c.KernelManager.transport = "ipc"
        c.KernelManager.ip = os.path.join(sockets, "kernel")
    return c


def tidy_report(out_nb: Path, root: Path = REPO_ROOT) -> None:
    """Make an executed notebook a report: paths relative to the repository (no machine's absolute paths in a
    committed file), the parameter cells (the default one and papermill's injected one) collapsed, and the printed
    Config folded away, so the results come first when it is opened."""
    if not out_nb.exists():
        return
    text = out_nb.read_text(encoding="utf-8")
    for prefix in {str(root), str(REPO_ROOT)}:
        text = text.replace(prefix + "/", "").replace(prefix, ".")
    nb = json.loads(text)
    for cell in nb.get("cells", []):
        tags = cell.get("metadata", {}).get("tags", [])
        src = "".join(cell.get("source", ""))
        if "parameters" in tags or "injected-parameters" in tags:
            cell["metadata"].setdefault("jupyter", {})["source_hidden"] = True
        elif "config_from_namespace(" in src:
            cell["metadata"].setdefault("jupyter", {})["outputs_hidden"] = True
    out_nb.write_text(json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")


def run_stage(stage: str, params: dict, notebook: Path, out_nb: Path, kernel: str | None = None, log=None) -> None:
    """Execute a stage's notebook with papermill, its printed output streamed to `log` (default: stdout) as it runs.

    Its kernel imports the `codelib` this process runs (REPO_ROOT leads the kernel's PYTHONPATH): a clone that shares
    another clone's virtualenv would otherwise run that clone's code (its editable install) under this clone's code
    hashes."""
    out_nb.parent.mkdir(parents=True, exist_ok=True)
    before = os.environ.get("PYTHONPATH")
    if not (before or "").split(os.pathsep)[0] == str(REPO_ROOT):  # a study with jobs sets it once, before its threads
        os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), before] if before else [str(REPO_ROOT)])
    stream = _Stream(log or (lambda line: print(line, flush=True)))
    sockets = tempfile.mkdtemp(prefix="codelib-kernel-")
    try:
        pm.execute_notebook(
            str(notebook),
            str(out_nb),
            parameters=params,
            kernel_name=kernel,
            cwd=str(notebook.parent),
            progress_bar=False,
            log_output=False,
            stdout_file=stream,
            stderr_file=stream,
            request_save_on_cell_execute=True,
            config=_kernel_config(sockets),
        )
    except pm.PapermillExecutionError as e:
        raise StageFailed(
            f"stage {stage} failed: {_rel(notebook)} cell {e.exec_count} raised {e.ename}: {e.evalue}\n"
            f"the executed notebook is kept for inspection: {out_nb}"
        ) from None
    finally:
        stream.write("\n")
        tidy_report(out_nb)
        shutil.rmtree(sockets, ignore_errors=True)
        if before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = before


def _rel(path: Path, root: Path = REPO_ROOT) -> str:
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


def _minutes(seconds: float) -> str:
    """90 s and longer as minutes and seconds, rounded to the second first (119.7 s is 2 min 00 s, not 1 min 60 s)."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    m, s = divmod(round(seconds), 60)
    return f"{m} min {s:02d} s"


def uses_tiny(params: dict[str, dict]) -> bool:
    """Whether a stage starts from (or evaluates) the tiny model built on demand (`init: tiny`, `base: tiny`)."""
    return any(v.get("init") == "tiny" or "tiny" in (v.get("checkpoints") or {}).values() for v in params.values())


def build_tiny(log=print) -> float:
    """Pretrain the tiny base model now, as its own step, when the cached one is missing or stale; its seconds."""
    from dataclasses import asdict

    from codelib.policy import tiny

    if tiny._read_build(tiny.TINY_DIR) == asdict(tiny.TinyBuild()):
        return 0.0
    log(f"[tiny] base model: pretraining a tiny Llama on the synthetic training split -> {_rel(tiny.TINY_DIR)}")
    t0 = time.time()
    tiny.build_tiny_model(verbose=True)
    dt = time.time() - t0
    log(f"[tiny] base model: done in {_minutes(dt)} (cached: later runs reuse it)")
    return dt


def run(
    profile: str = "tiny",
    only: list[str] | None = None,
    start: str | None = None,
    force: bool = False,
    root: Path = REPO_ROOT,
    reports: Path | None = None,
    kernel: str | None = None,
    log=print,
) -> list[tuple[str, str, float]]:
    """Run (or skip) the selected stages; return (stage, "ran" | "skipped", seconds) rows."""
    stages = select(profile_stages(profile, root), only, start)
    params = check_params(profile, stages, root)
    missing = [s for s in stages if not (root / "notebooks" / f"{s}.ipynb").exists()]
    if missing:
        raise FileNotFoundError(
            f"no notebook for stage(s) {', '.join(missing)} in {_rel(root / 'notebooks', root)}/: "
            "regenerate them with python tools/make_notebooks.py"
        )
    reports = reports or root / "reports" / profile
    for stage in stages:  # a stage that writes figures and tables writes them into the profile's reports
        if params[stage].get("out_dir") == "" and "out_dir" in {
            f.name for f in dataclasses.fields(config_class(stage))
        }:
            params[stage] = {**params[stage], "out_dir": _rel(reports, root) if root == REPO_ROOT else str(reports)}
    # stamps live beside the checkpoints: wiping checkpoints/ (or a fresh clone with committed reports) reruns all
    stamps = (checkpoints_root() if root == REPO_ROOT else root / "checkpoints") / profile / ".stamps"
    os.environ.update(HEADLESS_ENV)  # widgets print, bars print lines (codelib.plumbing.progress)
    all_stages = profile_stages(profile, root)
    results = []
    if root == REPO_ROOT and uses_tiny(params):
        dt = build_tiny(log)
        if dt:
            results.append(("tiny base model", "ran", dt))
    upstream = ""
    for stage in all_stages:
        notebook = root / "notebooks" / f"{stage}.ipynb"
        if not notebook.exists():
            raise FileNotFoundError(f"stage {stage}: notebook {_rel(notebook, root)} is missing")
        values = params[stage] if stage in params else load_yaml(root / "params" / profile / f"{stage}.yaml")
        key = _digest(stage, json.dumps(values, sort_keys=True), notebook.read_text(), code_key(stage), upstream)
        stamp = stamps / f"{stage}.json"
        last = read_stamp(stamp)
        current = last.get("key") == key
        # a change upstream invalidates every stage after it, and so does a rerun of it (its outputs were rewritten:
        # a run directory deleted and trained again): the chain carries each stage's last run
        upstream = _digest(key, last.get("run", last.get("finished", "")) if current else "")
        if stage not in stages:
            continue
        out_nb = reports / f"{stage}.ipynb"
        gone = [p for p in stage_outputs(stage, params[stage]) if not p.exists()]
        if not force and out_nb.exists() and current:
            if not gone:
                log(f"[{profile}] {stage}: up to date, skipped (use --force to rerun)")
                results.append((stage, "skipped", 0.0))
                continue
            log(f"[{profile}] {stage}: its output {gone[0]} is gone; running it again")
        log(f"[{profile}] {stage}: running {notebook.name} -> {_rel(out_nb, root)}")
        stamp.unlink(missing_ok=True)
        if run_dir := trained_dir(stage, params[stage]):  # the comparison's record of this directory goes stale too
            (stamps.parent / run_dir / "done.json").unlink(missing_ok=True)
        t0 = time.time()
        try:
            run_stage(stage, params[stage], notebook, out_nb, kernel=kernel, log=log)
        finally:
            if root != REPO_ROOT:
                tidy_report(out_nb, root)
        dt = time.time() - t0
        run_id = uuid.uuid4().hex[:16]  # this run of the stage: the stages after it see a new upstream
        finished = time.strftime("%Y-%m-%d %H:%M:%S")
        record = {"key": key, "seconds": round(dt, 1), "finished": finished, "run": run_id}
        atomic_write_json(stamp, {**record, **donor_key(stage, params[stage], notebook)})
        upstream = _digest(key, run_id)
        log(f"[{profile}] {stage}: done in {_minutes(dt)}")
        results.append((stage, "ran", dt))
    return results


def donor_key(stage: str, values: dict, notebook: Path) -> dict:
    """For a training stage's stamp: its run directory and the study's `train` key of what it trained (params but
    the directory, notebook, code, start checkpoint), so a study copies this run rather than training the same
    again (`codelib.runner.run_keys.find_donor`: the demo's GRPO is the algorithm study's `grpo-seed0`); {} for a
    stage that trains nothing."""
    run_dir = trained_dir(stage, values)
    return {"dir": run_dir, "train": train_key(stage, values, notebook)} if run_dir else {}


def trained_dir(stage: str, values: dict) -> str | None:
    """The run directory (under checkpoints/<profile>/) a training stage writes with these params; None for a stage
    that trains nothing."""
    run_dir = values.get("stage")
    return run_dir if stage_registry.STAGES[stage].kind == "train" and isinstance(run_dir, str) else None


def list_stages(profile: str) -> str:
    """The profile's stages in run order, each with what it is; opt-in ones marked with the command that runs them."""
    lines = []
    for name in profile_stages(profile):
        st = stage_registry.STAGES[name]
        note = f"  (opt-in: python -m codelib.pipeline --profile {profile} --only {name})" if st.opt_in else ""
        note += "  (run by python -m codelib.study, not by the pipeline)" if not st.in_profile else ""
        lines.append(f"{name:14s} {st.kind:6s} {st.label}{note}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m codelib.pipeline",
        description="Run a profile's notebooks in order with papermill; executed copies, tables and figures land in "
        "reports/<profile>/. Up-to-date stages are skipped.",
        epilog="examples: python -m codelib.pipeline --list | --only 06_eval 07_plots | --from 04 --force",
    )
    ap.add_argument("--profile", default="tiny", help="a folder of params/ (default: tiny)")
    ap.add_argument(
        "--only", nargs="+", metavar="STAGE", help="run just these stages (names or numbers, e.g. 01 06_eval)"
    )
    ap.add_argument("--from", dest="start", metavar="STAGE", help="run from this stage on")
    ap.add_argument("--force", action="store_true", help="rerun stages that are up to date")
    ap.add_argument("--list", action="store_true", help="list the profile's stages (opt-in ones marked) and exit")
    ap.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    args = ap.parse_args(argv)
    try:
        if args.list:
            print(list_stages(args.profile))
            return 0
        t0 = time.time()
        rows = run(args.profile, args.only, args.start, args.force)
        ran = sum(1 for _, s, _ in rows if s == "ran")
        print(f"[{args.profile}] {ran} step(s) ran, {len(rows) - ran} skipped, {_minutes(time.time() - t0)} in all")
        return 0
    except KeyboardInterrupt:
        print("interrupted: finished stages are kept; the same command resumes", file=sys.stderr)
        return 130
    except (ParamsError, FileNotFoundError, ValueError, StageFailed) as e:
        if args.debug:
            traceback.print_exc()
        print(f"error: {e}", file=sys.stderr)
        if not args.debug and not isinstance(e, StageFailed):
            print("(add --debug for the traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
