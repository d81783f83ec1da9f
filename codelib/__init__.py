"""codelib: RL fine-tuning of code LLMs with unit-test rewards (README.md: what it is, how to run and extend it).

One folder per box of the data flow, tasks -> policy -> completions -> sandbox -> rewards -> trainer -> checkpoint ->
evaluator -> reports; a module imports its own box and the boxes above it in this list (tests/test_imports.py):
- plumbing/    paths, params files -> Configs, the stage registry, JSON Lines, progress, checkpoints, code hashes
- tasks/       the Task record and `load_tasks`: bundled and hub benchmarks, the synthetic suite
- policy/      models, the tiny model, sampling (`generation`, vLLM), token log-probs, several processes
- sandbox/     runs untrusted programs and judges them: Verdicts
- engine/      completions -> programs -> verdicts -> rewards; rollouts, run logs, DPO candidates, repair episodes
  algorithms/  (beside it) the registries of advantage estimators, policy losses, aggregations, KL estimators
- evaluation/  checkpoints -> pass@k with intervals, paired comparisons, pass@k curves, repair's evaluation
- trainers/    a Config + train(cfg) per stage
- reports/     the results table and figures, the comparison table of algorithms, the explorers
- runner/      the papermill pipeline, launching trainers from notebooks, the comparison's runs (`make compare`),
               studies of arms x seeds, and which run already trained what another would (`run_keys`)

Importing the package silences three messages that libraries print on every run and that say nothing about ours,
so an executed notebook's output is the run's own (tests/test_notebooks.py's smoke run checks it: `NOISE`):
- bitsandbytes' "Failed to load CPU gemm_4bit_forward" (an optional CPU kernel; 4-bit here needs CUDA anyway);
- transformers' FutureWarnings that `gradient_checkpointing*` is renamed (raised inside TRL and peft's calls).
Warnings about our own code are not filtered: a `float()` of a tensor that requires grad, or a SyntaxWarning from
compiling a completion, is fixed where it happens (`.detach()`, `codelib.engine.extraction.parse`).
"""

import importlib
import importlib.abc
import importlib.util
import logging
import sys
import warnings


class _DropMessage(logging.Filter):
    def __init__(self, prefix: str):
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.prefix)


logging.getLogger("bitsandbytes.backends.cpu.ops").addFilter(_DropMessage("Failed to load CPU gemm_4bit_forward"))
warnings.filterwarnings("ignore", message=r"`\w*gradient_checkpointing\w*` is deprecated", category=FutureWarning)


# ---------------------------------------------------------------------------------------------------------------
# Old import paths. The package's modules stood side by side in codelib/ until they were grouped into one folder per
# box of the data flow; every old path still imports, as the very module object of the new one (a monkeypatch, an
# isinstance or a pickle sees one module), and `python -m codelib.<old>` runs the new module. In-repo code uses the
# new paths (tests/test_imports.py checks both).
MOVED = {
    "codelib.paths": "codelib.plumbing.paths",
    "codelib.jsonl": "codelib.plumbing.jsonl",
    "codelib.params": "codelib.plumbing.params",
    "codelib.stages": "codelib.plumbing.stages",
    "codelib.progress": "codelib.plumbing.progress",
    "codelib.checkpoints": "codelib.plumbing.checkpoints",
    "codelib.fingerprint": "codelib.plumbing.fingerprint",
    "codelib.task": "codelib.tasks.task",
    "codelib.hub_tasks": "codelib.tasks.hub",
    "codelib.synthetic": "codelib.tasks.synthetic",
    "codelib.models": "codelib.policy.models",
    "codelib.generation": "codelib.policy.generation",
    "codelib.logprobs": "codelib.policy.logprobs",
    "codelib.tiny": "codelib.policy.tiny",
    "codelib.vllm_backend": "codelib.policy.vllm_backend",
    "codelib.distributed": "codelib.policy.distributed",
    "codelib.rewards": "codelib.engine.rewards",
    "codelib.rollout": "codelib.engine.rollout",
    "codelib.extraction": "codelib.engine.extraction",
    "codelib.lint": "codelib.engine.lint",
    "codelib.verdicts": "codelib.engine.verdicts",
    "codelib.metrics": "codelib.engine.metrics",
    "codelib.candidates": "codelib.engine.candidates",
    "codelib.repair": "codelib.engine.repair",
    "codelib.repair_data": "codelib.engine.repair_data",
    "codelib.advantages": "codelib.algorithms.formulas",
    "codelib.evaluator": "codelib.evaluation.evaluator",
    "codelib.passk": "codelib.evaluation.passk",
    "codelib.stats": "codelib.evaluation.stats",
    "codelib.eval_sampling": "codelib.evaluation.eval_sampling",
    "codelib.repair_eval": "codelib.evaluation.repair_eval",
    "codelib.comparison": "codelib.runner.compare",
    "codelib.repair_report": "codelib.reports.repair",
    "codelib.explore": "codelib.reports.explore",
    "codelib.pipeline": "codelib.runner.pipeline",
    "codelib.launch": "codelib.runner.launch",
    "codelib.study": "codelib.runner.study",
    "codelib.study_file": "codelib.runner.study_file",
    "codelib.study_report": "codelib.runner.study_report",
}


class _Moved(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports an old path (`MOVED`) as the module at its new one."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in MOVED:
            return None
        # the new module's file as origin: `python -m codelib.<old>` runs its code with that `__file__`
        return importlib.util.spec_from_loader(fullname, self, origin=importlib.util.find_spec(MOVED[fullname]).origin)

    def create_module(self, spec):
        module = importlib.import_module(MOVED[spec.name])
        spec.loader_state = module.__spec__  # importlib sets the old path's spec on it: exec_module puts this back
        return module

    def exec_module(self, module):
        module.__spec__ = module.__spec__.loader_state

    def get_code(self, fullname):  # runpy: `python -m codelib.<old>` runs the new module's code as __main__
        new = MOVED[fullname]
        return importlib.util.find_spec(new).loader.get_code(new)


sys.meta_path.append(_Moved())
