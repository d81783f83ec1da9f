"""Tasks: load any benchmark's split as `Task`s (`load_tasks`); the adapters of the bundled ones are `bundled`.

A `Task` (`codelib.tasks.task`) is what the policy sees (`prompt`), what the sandbox checks (`tests`) and what proves
the tests are satisfiable (`canonical_solution`). Function tasks (HumanEval, MBPP, synthetic) are checked by running
`prompt + completion + tests`; stdin/stdout tasks (CodeContests) by running the completion as a program on each input
file and comparing its output.

The benchmark files ship inside the package (`codelib/data/`, with their licences in its README);
`source="hub"` loads the same datasets through `datasets.load_dataset` instead. TACO-verified, the full
CodeContests and LiveCodeBench exist only on the hub (their adapters: `codelib.tasks.hub`,
`codelib.tasks.livecodebench`)."""

from __future__ import annotations

import random

from codelib.tasks import hub as hub_tasks
from codelib.tasks import livecodebench
from codelib.tasks.bundled import _codecontests, _humaneval, _humaneval_plus, _mbpp, _mbpp_plus, _synthetic
from codelib.tasks.hub import codecontests_task, taco_task
from codelib.tasks.livecodebench import LCB_REPO, decode_lcb_tests, livecodebench_task
from codelib.tasks.task import (
    DATA_DIR,
    Task,
    TaskError,
    limits_for,
    make_task,
    program_for,
    stdin_prelude,
)

__all__ = [
    "DATA_DIR",
    "LCB_REPO",
    "NAMES",
    "SPLITS",
    "Task",
    "TaskError",
    "codecontests_task",
    "decode_lcb_tests",
    "limits_for",
    "livecodebench_task",
    "load_tasks",
    "make_task",
    "parse_dataset",
    "program_for",
    "sample_tasks",
    "stdin_prelude",
    "taco_task",
    "task_counts",
    "tasks_to_rows",
]

SPLITS = ("train", "test", "validation", "fewshot", "rl", "all")
HUB_ONLY = ("taco", "livecodebench")  # no bundled copy: source=None loads these from the hub


# the loader table: a dataset name -> its adapter `(split, source, strict=..., **options) -> list[Task]`
_LOADERS = {
    "humaneval": _humaneval,
    "mbpp": _mbpp,
    "humaneval_plus": _humaneval_plus,
    "mbpp_plus": _mbpp_plus,
    "codecontests": _codecontests,
    "synthetic": _synthetic,
    "taco": hub_tasks.load_taco,
    "livecodebench": livecodebench.load_livecodebench,
}
NAMES = tuple(_LOADERS)  # the dataset names, derived from the table (a new loader needs no second list)
# dataset parameters beyond the split
_OPTIONS = {"livecodebench": ("release_version", "start_date", "end_date", "exclude_errata"), "taco": ("path",)}


def parse_dataset(spec: str) -> tuple[str, dict]:
    """A dataset spec as params files write it: a name, optionally followed by ":key=value,key=value" options
    (`source`, and the dataset's own parameters), e.g. "codecontests:source=hub" or
    "livecodebench:release_version=release_v6,start_date=2025-02-01,end_date=2025-05-01".

    >>> parse_dataset("livecodebench:release_version=release_v5,start_date=2024-08-01")
    ('livecodebench', {'release_version': 'release_v5', 'start_date': '2024-08-01'})
    """
    name, _, rest = str(spec).partition(":")
    name = name.strip()
    if name not in _LOADERS:
        raise ValueError(f"unknown dataset {name!r}; choose one of {', '.join(NAMES)}")
    options = {}
    for item in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or key not in ("source", *_OPTIONS.get(name, ())):
            allowed = ", ".join(("source", *_OPTIONS.get(name, ())))
            raise ValueError(f"dataset spec {spec!r}: {item!r} is not an option of {name} (options: {allowed})")
        options[key] = value.strip()
    return name, options


def load_tasks(
    name: str,
    split: str = "test",
    source: str | None = None,
    limit: int | None = None,
    strict: bool = False,
    **options,
) -> list[Task]:
    """Load a dataset's split as Tasks.

    name: humaneval | mbpp | humaneval_plus | mbpp_plus | codecontests | synthetic | taco | livecodebench, or a
        spec with options, "livecodebench:release_version=release_v6,start_date=2025-02-01" (see parse_dataset)
    split: train | test | all (mbpp also validation, fewshot; codecontests from the hub also validation;
        taco: train | all; livecodebench: test | all)
    source: "bundled" (files in codelib/data, offline), "hub" (`datasets.load_dataset`), or None: bundled where
        there is a bundled copy (the CodeContests default is the verified 256-problem sample), else the hub
    limit: keep the first `limit` tasks (a quick look; order is the dataset's)
    strict: a record that cannot become a task raises TaskError naming it; by default such records are skipped,
        counted and reported in one warning per load (hub datasets; the bundled files have none)
    options: livecodebench's release_version (default "release_v6"), start_date and end_date ("YYYY-MM-DD",
        inclusive) on contest_date, exclude_errata (true: leave out LiveCodeBench's published errata);
        taco's path (a local copy of the TACO-verified JSON file, instead of the hub's)
    """
    name, spec_options = parse_dataset(name)
    options = {**spec_options, **options}
    source = options.pop("source", None) if source is None else source
    if source is None:
        source = "hub" if name in HUB_ONLY else "bundled"
    if source not in ("bundled", "hub"):
        raise ValueError(f"source must be 'bundled' or 'hub', not {source!r}")
    if source == "bundled" and name in HUB_ONLY:
        raise ValueError(f"{name} has no bundled copy; load it with source='hub'")
    unknown = set(options) - set(_OPTIONS.get(name, ()))
    if unknown:
        raise ValueError(
            f"{name} takes no option {sorted(unknown)[0]!r} (options: {', '.join(_OPTIONS.get(name, ())) or 'none'})"
        )
    tasks = _LOADERS[name](split, source, strict=strict, **options)
    return tasks[:limit] if limit else tasks


def sample_tasks(tasks: list[Task], n: int, seed: int = 0) -> list[Task]:
    """A seeded subset of n tasks, in their original order (all of them if n >= len)."""
    if n >= len(tasks):
        return list(tasks)
    keep = set(random.Random(seed).sample(range(len(tasks)), n))
    return [t for i, t in enumerate(tasks) if i in keep]


def tasks_to_rows(tasks: list[Task]) -> list[dict]:
    """Tasks as plain dicts: the columns a `datasets.Dataset` (and so TRL's reward kwargs) carries."""
    return [t.to_dict() for t in tasks]


def task_counts() -> dict[str, dict[str, int]]:
    """Number of tasks per dataset and split (bundled files)."""
    splits = {
        "humaneval": ("train", "test"),
        "humaneval_plus": ("train", "test"),
        "mbpp": ("fewshot", "train", "validation", "test"),
        "mbpp_plus": ("fewshot", "train", "validation", "test"),
        "codecontests": ("train", "test"),
        "synthetic": ("train", "test"),
    }
    return {name: {s: len(load_tasks(name, s)) for s in ss} for name, ss in splits.items()}
