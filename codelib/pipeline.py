"""Run a profile's notebooks in order with papermill: `python -m codelib.pipeline --profile tiny`.

Opt-in stages (`OPT_IN`: the multi-turn repair stage) run only when named: `python -m codelib.pipeline --only
09_repair`.

Each stage is `notebooks/NN_name.ipynb` run with `params/<profile>/NN_name.yaml`; the executed copy lands in
`reports/<profile>/`. All params files are checked against their Config before anything runs (unknown, missing
or mistyped key -> error naming the key and the file). A stage whose params (with their `extends:` bases), notebook and upstream stages are
unchanged since its last successful run, whose judging code (extraction, sandbox, rewards: `codelib.fingerprint`)
is unchanged if it judges completions, and whose run directories still exist, is skipped unless `--force`.
A failing stage stops the run, naming the notebook, the cell and the error; its executed notebook is kept for
inspection.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import importlib
import json
import os
import sys
import time
from pathlib import Path

import papermill as pm

from codelib.fingerprint import JUDGE, SCORE, code_hash
from codelib import stages as stage_registry
from codelib.params import (
    REPO_ROOT,
    ParamsError,
    atomic_write_json,
    build_config,
    checkpoints_root,
    load_yaml,
    run_dir,
)

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
    if not pdir.is_dir():
        known = sorted(p.name for p in (root / "params").iterdir() if p.is_dir() and p.name != "accelerate")
        raise FileNotFoundError(f"no params directory {pdir}; known profiles: {', '.join(known)}")
    return [s for s in STAGES if (pdir / f"{s}.yaml").exists()]


def select(stages: list[str], only: list[str] | None, start: str | None) -> list[str]:
    """Apply --only (names or NN prefixes) and --from (a name or NN prefix) to the profile's stages."""

    def match(key: str) -> str:
        hits = [s for s in stages if s == key or s.split("_")[0] == key or s.split("_", 1)[-1] == key]
        if not hits:
            raise ValueError(f"unknown stage {key!r}; this profile has: {', '.join(stages)}")
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


def run_stage(stage: str, params: dict, notebook: Path, out_nb: Path, kernel: str | None = None) -> None:
    """Execute a stage's notebook with papermill. Its kernel imports the `codelib` this process runs (REPO_ROOT leads
    the kernel's PYTHONPATH): a clone that shares another clone's virtualenv would otherwise run that clone's code
    (its editable install) under this clone's code hashes."""
    out_nb.parent.mkdir(parents=True, exist_ok=True)
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), before] if before else [str(REPO_ROOT)])
    try:
        pm.execute_notebook(
            str(notebook),
            str(out_nb),
            parameters=params,
            kernel_name=kernel,
            cwd=str(notebook.parent),
            progress_bar=False,
            log_output=False,
            request_save_on_cell_execute=True,
        )
    except pm.PapermillExecutionError as e:
        raise StageFailed(
            f"stage {stage} failed: {notebook.relative_to(REPO_ROOT) if notebook.is_relative_to(REPO_ROOT) else notebook}"
            f" cell {e.exec_count} raised {e.ename}: {e.evalue}\n"
            f"the executed notebook is kept for inspection: {out_nb}"
        ) from None
    finally:
        if before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = before


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
    reports = reports or root / "reports" / profile
    # stamps live beside the checkpoints: wiping checkpoints/ (or a fresh clone with committed reports) reruns all
    stamps = (checkpoints_root() if root == REPO_ROOT else root / "checkpoints") / profile / ".stamps"
    os.environ["CODELIB_HEADLESS"] = "1"  # widgets print instead of rendering (read by codelib.explore)
    all_stages = profile_stages(profile, root)
    results = []
    upstream = ""
    for stage in all_stages:
        notebook = root / "notebooks" / f"{stage}.ipynb"
        if not notebook.exists():
            raise FileNotFoundError(f"stage {stage}: notebook {notebook} is missing")
        values = params[stage] if stage in params else load_yaml(root / "params" / profile / f"{stage}.yaml")
        key = _digest(stage, json.dumps(values, sort_keys=True), notebook.read_text(), code_key(stage), upstream)
        upstream = key  # a change upstream invalidates every stage after it
        if stage not in stages:
            continue
        out_nb = reports / f"{stage}.ipynb"
        stamp = stamps / f"{stage}.json"
        gone = [p for p in stage_outputs(stage, params[stage]) if not p.exists()]
        if not force and out_nb.exists() and stamp.exists() and json.loads(stamp.read_text()).get("key") == key:
            if not gone:
                log(f"[{profile}] {stage}: up to date, skipped (use --force to rerun)")
                results.append((stage, "skipped", 0.0))
                continue
            log(f"[{profile}] {stage}: its output {gone[0]} is gone; running it again")
        log(
            f"[{profile}] {stage}: running {notebook.name} -> {out_nb.relative_to(root) if out_nb.is_relative_to(root) else out_nb}"
        )
        stamp.unlink(missing_ok=True)
        t0 = time.time()
        run_stage(stage, params[stage], notebook, out_nb, kernel=kernel)
        dt = time.time() - t0
        atomic_write_json(stamp, {"key": key, "seconds": round(dt, 1), "finished": time.strftime("%Y-%m-%d %H:%M:%S")})
        log(f"[{profile}] {stage}: done in {dt:.0f} s")
        results.append((stage, "ran", dt))
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m codelib.pipeline", description=__doc__.split("\n")[0])
    ap.add_argument("--profile", default="tiny", help="a folder of params/ (default: tiny)")
    ap.add_argument("--only", nargs="+", help="run just these stages (names or numbers, e.g. 01 06_eval)")
    ap.add_argument("--from", dest="start", help="run from this stage on")
    ap.add_argument("--force", action="store_true", help="rerun stages that are up to date")
    ap.add_argument("--list", action="store_true", help="list the profile's stages and exit")
    args = ap.parse_args(argv)
    try:
        if args.list:
            print("\n".join(profile_stages(args.profile)))
            return 0
        t0 = time.time()
        rows = run(args.profile, args.only, args.start, args.force)
        ran = sum(1 for _, s, _ in rows if s == "ran")
        print(f"[{args.profile}] {ran} stage(s) ran, {len(rows) - ran} skipped, {time.time() - t0:.0f} s in all")
        return 0
    except (ParamsError, FileNotFoundError, ValueError, StageFailed) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
