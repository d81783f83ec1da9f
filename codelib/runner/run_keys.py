"""What decides a training run's result, as a key: its params, its notebook, the codelib source its trainer runs
and its start checkpoint; and where a run of the same `train` key (the key without the run's directory) was already
trained. Studies skip a run whose key is unchanged; a study or the comparison copies a run the pipeline (its stage's
stamp), the comparison (a run's done.json) or a study (its stamp) trained with the same `train` key (`find_donor`,
`copy_run`). Here, not in the study module, because the pipeline, the comparison and the studies all write them.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from codelib.plumbing import stages as stage_registry
from codelib.plumbing.fingerprint import checkpoint_fingerprint, module_sources
from codelib.plumbing.params import resolve


def stage_sources(stage: str) -> dict[str, str]:
    """The codelib source a training stage runs: its trainer and launch, transitively; the whole sandbox package
    when any of it is used (its worker, judge and harness run as separate programs, not imports). The evaluator is in
    it (evaluation during training and `keep: best` score through it); the study's own code and other trainers are
    not: a change there does not retrain a study."""
    config_module = stage_registry.STAGES[stage].config.rsplit(".", 1)[0]
    sources = module_sources(f"import {config_module}\nimport codelib.runner.launch\n")
    if any(m.startswith("codelib.sandbox") for m in sources):
        pkg = Path(__file__).resolve().parents[1] / "sandbox"
        sources.update(
            {f"codelib.sandbox.{p.stem}": p.read_text() for p in sorted(pkg.glob("*.py")) if p.stem != "__init__"}
        )
    return dict(sorted(sources.items()))


def run_key(stage: str, params: dict, notebook: Path) -> dict:
    """What decides a run's result: its params, its notebook, the codelib source it runs, the start checkpoint."""
    sources = stage_sources(stage)
    init = params.get("init") or params.get("model") or ""
    start = checkpoint_fingerprint(str(resolve(init))) if init and init != "tiny" and resolve(init).exists() else init
    parts = {
        "params": json.dumps(params, sort_keys=True, default=str),
        "notebook": notebook.read_text(),
        "code": json.dumps({m: hashlib.sha256(t.encode()).hexdigest() for m, t in sources.items()}),
        "start": json.dumps(start, default=str),
    }

    def digest(d: dict) -> str:
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]

    # `train`: the same without the run's directory name (`stage`): two runs with equal `train` train the same
    # weights, so a run another study (or the pipeline) finished with it is copied rather than trained again
    rest = {k: v for k, v in params.items() if k != "stage"}
    return {
        "key": digest(parts),
        "train": digest({**parts, "params": json.dumps(rest, sort_keys=True, default=str)}),
        "modules": sorted(sources),
        **{k: hashlib.sha256(v.encode()).hexdigest()[:12] for k, v in parts.items()},
    }


def train_key(stage: str, params: dict, notebook: Path) -> str:
    """`run_key(...)["train"]` of a run of `stage` with `params` (any run directory): what the pipeline records in
    a training stage's stamp, so that a study can copy a run `make demo` trained instead of training it again."""
    return run_key(stage, params, notebook)["train"]


def read_stamp(path: Path) -> dict:
    """A JSON record (a stage's or a study run's stamp, a comparison run's done.json), or {} if it has none."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


@dataclass(frozen=True)
class Donor:
    """A finished run that trained what another would (the same `train` key): its run directory, its executed
    notebook, and its name as a stamp's `reused_from` keeps it (`pipeline/<dir>`, `comparison/<name>`,
    `<study>/<run>`) and as a log line says it."""

    run_dir: Path
    notebook: Path
    name: str
    said: str


def find_donor(checkpoints: Path, reports: Path, stage: str, train: str, exclude: Path | None = None) -> Donor | None:
    """A finished run of `stage` in the profile (checkpoints/<profile>, reports/<profile>) whose `train` key is
    `train`: a pipeline stage (`make demo`: its stamp in .stamps/), a comparison run (`make compare`: its done.json),
    a study's run (its stamp in studies/<study>/.stamps/); `exclude`: the asking run's own directory. None if none."""
    found = []  # (run directory, executed notebook, name, as a log line says it)
    for path in sorted((checkpoints / ".stamps").glob("*.json")):  # the pipeline's stages
        stamp = read_stamp(path)
        if stamp.get("train") == train and isinstance(d := stamp.get("dir"), str):
            found.append((checkpoints / d, reports / f"{path.stem}.ipynb", f"pipeline/{d}", f"the pipeline's {d}"))
    for path in sorted(checkpoints.glob("*/done.json")):  # the comparison's runs (copies carry no done.json)
        done, d = read_stamp(path), path.parent.name
        if done.get("train") == train and isinstance(nb := done.get("notebook"), str):
            found.append((path.parent, reports / nb, f"comparison/{d}", f"the comparison's {d}"))
    for path in sorted(checkpoints.glob("studies/*/.stamps/*.json")):  # the studies' runs
        name = f"{path.parent.parent.name}/{path.stem}"
        stamp = read_stamp(path)
        if stamp.get("train") == train and stamp.get("status") == "finished":
            found.append(
                (
                    checkpoints / "studies" / name,
                    reports / "studies" / name / f"{stage}.ipynb",
                    name,
                    f"studies/{name}",
                )
            )
    for run_dir, notebook, name, said in found:
        if (exclude is None or run_dir.resolve() != exclude.resolve()) and run_dir.is_dir() and notebook.is_file():
            return Donor(run_dir, notebook, name, said)
    return None


def copy_run(donor: Donor, run_dir: Path, notebook: Path) -> None:
    """Copy a donor's run directory to `run_dir` (atomically: a copy stopped halfway is not a run) and its executed
    notebook to `notebook`; its config.json and notebook still name the donor's directory."""
    import shutil

    from codelib.plumbing.paths import atomic_write_text

    tmp = run_dir.with_name(run_dir.name + ".copying")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(donor.run_dir, tmp, ignore=shutil.ignore_patterns("done.json"))  # the copier writes its own
    if run_dir.exists():
        shutil.rmtree(run_dir)
    tmp.rename(run_dir)
    notebook.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(notebook, donor.notebook.read_text())
