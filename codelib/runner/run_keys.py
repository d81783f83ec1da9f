"""What decides a training run's result, as a key: its params, its notebook, the codelib source its trainer runs
and its start checkpoint. Studies skip a run whose key is unchanged and copy a run another study, or the profile's
pipeline, trained with the same `train` key (the key without the run's directory); the pipeline records that key in
a training stage's stamp. Here, not in the study module, because both the pipeline and the studies write these keys.
"""

from __future__ import annotations

import hashlib
import json
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
