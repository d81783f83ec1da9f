"""Tasks: load any benchmark's split as `Task`s (`load_tasks`), and the adapters of the bundled ones.

A `Task` (`codelib.tasks.task`) is what the policy sees (`prompt`), what the sandbox checks (`tests`) and what proves the
tests are satisfiable (`canonical_solution`). Function tasks (HumanEval, MBPP, synthetic) are checked by running
`prompt + completion + tests`; stdin/stdout tasks (CodeContests) by running the completion as a program on each
input file and comparing its output.

The benchmark files ship inside the package (`codelib/data/`, with their licences in its README);
`source="hub"` loads the same datasets through `datasets.load_dataset` instead. TACO-verified, the full
CodeContests and LiveCodeBench exist only on the hub (their adapters: `codelib.tasks.hub`, `codelib.tasks.livecodebench`).
"""

from __future__ import annotations

import json
import random

from codelib.tasks import hub as hub_tasks
from codelib.tasks import livecodebench, synthetic
from codelib.tasks import rows as task_rows
from codelib.tasks import task as base
from codelib.tasks.hub import codecontests_task, taco_task
from codelib.tasks.livecodebench import LCB_REPO, decode_lcb_tests, livecodebench_task
from codelib.tasks.task import (
    DATA_DIR,
    STDIO_INSTRUCTION,
    Task,
    TaskError,
    limits_for,
    make_task,
    program_for,
    read_ids,
    read_jsonl,
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

NAMES = ("humaneval", "mbpp", "humaneval_plus", "mbpp_plus", "codecontests", "synthetic", "taco", "livecodebench")
SPLITS = ("train", "test", "validation", "fewshot", "rl", "all")
HUB_ONLY = ("taco", "livecodebench")  # no bundled copy: source=None loads these from the hub


# ---------------------------------------------------------------------------------------------------------------
# HumanEval (131 train / 33 test by the fixed id lists) and HumanEval+


def _humaneval_split(records: list[dict], split: str) -> list[dict]:
    if split == "all":
        return records
    if split not in ("train", "test"):
        raise ValueError(f"humaneval has splits train, test, all; not {split!r}")
    keep = set(read_ids(DATA_DIR / "humaneval" / f"{split}_ids.txt"))
    return [r for r in records if r["task_id"] in keep]


def _humaneval(split: str, source: str, strict: bool = False) -> list[Task]:
    if source == "hub":
        records = base.hub_records("openai/openai_humaneval", split="test")
    else:
        records = read_jsonl(DATA_DIR / "humaneval" / "HumanEval.jsonl.gz")
    return [
        make_task(
            "humaneval",
            task_id=r["task_id"],
            prompt=r["prompt"],
            tests=r["test"],
            entry_point=r["entry_point"],
            canonical_solution=r["canonical_solution"],
        )
        for r in _humaneval_split(records, split)
    ]


def _humaneval_plus(split: str, source: str, strict: bool = False) -> list[Task]:
    if source == "hub":
        return _plus_hub("humaneval_plus", "evalplus/humanevalplus", split, strict)
    records = read_jsonl(DATA_DIR / "evalplus" / "HumanEvalPlus-v0.1.10.jsonl.gz")
    return [_humaneval_plus_release(r) for r in _humaneval_split(records, split)]


# The hub copies of HumanEval+ and MBPP+ are not EvalPlus's release files: evalplus/humanevalplus has task_id, prompt,
# canonical_solution, entry_point and `test`, a check(candidate) looping over every input (base and plus) with the
# expected results; evalplus/mbppplus has an int task_id, code, prompt (the task's text), source_file, test_imports,
# test_list (MBPP's three asserts) and `test`, the same loop calling the function by name. Their tasks run that
# `test` program as it is (its `assertion`: exact, else numpy's allclose for floats); EvalPlus's own comparison (the
# special oracles, plus inputs judged against the canonical solution's outputs) needs the bundled copy.
HUB_PLUS_HINT = "load the bundled copy instead (source='bundled', EvalPlus's release file, judged by EvalPlus's rules)"


def _plus_hub(dataset: str, repo: str, split: str, strict: bool) -> list[Task]:
    rows = task_rows.Rows(dataset, strict)
    build = _humaneval_plus_row if dataset == "humaneval_plus" else _mbpp_plus_row
    for index, r in enumerate(base.hub_records(repo, split="test")):
        rid = str(r.get("task_id", index)) if isinstance(r, dict) else str(index)
        rows.add(rid, build, r, split, none_means=None)
    return rows.done()


def _humaneval_plus_row(r: dict, split: str) -> Task | None:
    if "base_input" in r:  # EvalPlus's release schema: as the bundled file
        keep = _humaneval_split([r], split)
        return _humaneval_plus_release(r) if keep else None
    missing = [k for k in ("task_id", "prompt", "canonical_solution", "entry_point", "test") if k not in r]
    if missing or "def check(" not in str(r.get("test")):
        raise TaskError(
            f"humaneval_plus record {r.get('task_id', '?')}: neither EvalPlus's release schema nor "
            f"evalplus/humanevalplus's (missing {', '.join(missing) or 'a check(candidate) test'}); "
            f"{HUB_PLUS_HINT}"
        )
    return _humaneval_plus_release(r, plus=False) if _humaneval_split([r], split) else None


def _humaneval_plus_release(r: dict, plus: bool = True) -> Task:
    """A HumanEval+ task from an EvalPlus record; plus=False: the hub's copy, which has no plus inputs."""
    extra = {}
    if plus:
        extra = {
            "plus_inputs": json.dumps(list(r["base_input"]) + list(r["plus_input"])),
            "atol": float(r.get("atol") or 0.0),
        }
    return make_task(
        "humaneval_plus",
        task_id=r["task_id"],
        prompt=r["prompt"],
        tests=r["test"],
        entry_point=r["entry_point"],
        canonical_solution=r["canonical_solution"],
        **extra,
    )


# ---------------------------------------------------------------------------------------------------------------
# MBPP (standard split by id) and MBPP+

MBPP_RANGES = {"fewshot": (1, 10), "test": (11, 510), "validation": (511, 600), "train": (601, 974)}


def _mbpp_in_split(task_id: int, split: str) -> bool:
    if split == "all":
        return True
    if split not in MBPP_RANGES:
        raise ValueError(f"mbpp has splits {', '.join(MBPP_RANGES)}, all; not {split!r}")
    lo, hi = MBPP_RANGES[split]
    return lo <= task_id <= hi


def _mbpp_prompt(text: str, first_assert: str) -> str:
    # The same docstring-prefix format as MBPP+ so both read alike; the model writes the whole function.
    return f'"""\n{text.strip()}\n{first_assert.strip()}\n"""\n'


def _entry_point(code: str, first_assert: str) -> str:
    """The function the asserts call: the first `def` name that the first assert mentions."""
    import re

    names = re.findall(r"^def\s+(\w+)", code, flags=re.M)
    for name in names:
        if re.search(rf"\b{name}\s*\(", first_assert):
            return name
    return names[-1] if names else ""


def _mbpp(split: str, source: str, strict: bool = False) -> list[Task]:
    records = (
        base.hub_records("google-research-datasets/mbpp", "full", split="train+test+validation+prompt")
        if source == "hub"
        else (read_jsonl(DATA_DIR / "mbpp" / "mbpp.jsonl"))
    )
    records = sorted(records, key=lambda r: int(r["task_id"]))
    tasks = []
    for r in records:
        if not _mbpp_in_split(int(r["task_id"]), split):
            continue
        code = r["code"].replace("\r\n", "\n")
        if not r.get("test_list"):
            raise TaskError(f"mbpp record {r['task_id']}: it has no test_list; every task needs tests")
        # test_setup_code must run *after* the solution (tasks 367 and 927 use its classes).
        tests = (r.get("test_setup_code") or "") + "\n" + "\n".join(r["test_list"]) + "\n"
        tasks.append(
            make_task(
                "mbpp",
                task_id=f"mbpp/{r['task_id']}",
                prompt=_mbpp_prompt(r["text"], r["test_list"][0]),
                tests=tests,
                entry_point=_entry_point(code, r["test_list"][0]),
                canonical_solution=code + "\n",
            )
        )
    return tasks


# MBPP+ stores tuples as lists and complex numbers as strings (JSON has neither); these tasks convert back,
# as the EvalPlus harness does.
_MBPP_PLUS_TUPLE_ARGS = {"Mbpp/106": (1,), "Mbpp/720": (0,), "Mbpp/580": (0,)}
_MBPP_PLUS_COMPLEX_ARGS = {"Mbpp/124": (1,), "Mbpp/252": (0,)}


def _mbpp_plus_inputs(task_id: str, inputs: list) -> list:
    tuples, complexes = _MBPP_PLUS_TUPLE_ARGS.get(task_id, ()), _MBPP_PLUS_COMPLEX_ARGS.get(task_id, ())
    if not tuples and not complexes:
        return inputs
    out = []
    for args in inputs:
        args = list(args)
        for i in tuples:
            args[i] = {"__tuple__": args[i]}
        for i in complexes:
            args[i] = {"__complex__": str(args[i])}
        out.append(args)
    return out


def _mbpp_plus(split: str, source: str, strict: bool = False) -> list[Task]:
    if source == "hub":
        return _plus_hub("mbpp_plus", "evalplus/mbppplus", split, strict)
    records = read_jsonl(DATA_DIR / "evalplus" / "MbppPlus-v0.2.0.jsonl.gz")
    return [t for t in (_mbpp_plus_release(r, split) for r in records) if t is not None]


def _mbpp_plus_release(r: dict, split: str) -> Task | None:
    if not _mbpp_in_split(int(r["task_id"].split("/")[1]), split):
        return None
    plus = r["plus_input"] if isinstance(r["plus_input"], list) else []
    return make_task(
        "mbpp_plus",
        task_id=r["task_id"],
        prompt=r["prompt"],
        # Mbpp/120's assertion uses math.isclose without importing math.
        tests="import math\n" + r["assertion"],
        entry_point=r["entry_point"],
        canonical_solution=r["canonical_solution"].lstrip("\n"),
        plus_inputs=json.dumps(_mbpp_plus_inputs(r["task_id"], list(r["base_input"]) + plus)),
        atol=float(r.get("atol") or 0.0),
    )


def _mbpp_plus_row(r: dict, split: str) -> Task | None:
    if "base_input" in r and isinstance(r.get("task_id"), str):  # EvalPlus's release schema: as the bundled file
        return _mbpp_plus_release(r, split)
    missing = [k for k in ("task_id", "code", "prompt", "test_list", "test") if k not in r]
    if missing or not isinstance(r.get("test_list"), list) or not r["test_list"]:
        raise TaskError(
            f"mbpp_plus record {r.get('task_id', '?')}: neither EvalPlus's release schema nor "
            f"evalplus/mbppplus's (missing {', '.join(missing) or 'test_list'}); {HUB_PLUS_HINT}"
        )
    number = int(r["task_id"])
    if not _mbpp_in_split(number, split):
        return None
    code = str(r["code"]).replace("\r\n", "\n")
    imports = "\n".join(r.get("test_imports") or [])
    return make_task(
        "mbpp_plus",
        task_id=f"Mbpp/{number}",
        prompt=_mbpp_prompt(r["prompt"], r["test_list"][0]),
        tests=(imports + "\n" if imports else "") + r["test"],
        entry_point=_entry_point(code, r["test_list"][0]),
        canonical_solution=code.lstrip("\n") + "\n",
    )


# ---------------------------------------------------------------------------------------------------------------
# CodeContests sample: stdin/stdout, the 256 verified problems, 205 train / 51 test


def _codecontests(split: str, source: str, strict: bool = False) -> list[Task]:
    if source == "hub":
        return hub_tasks.load_codecontests(split, strict)
    records = read_jsonl(DATA_DIR / "codecontests" / "codecontests_sample300.jsonl.gz")
    keep = set(read_ids(DATA_DIR / "codecontests" / "verified_ids.txt"))
    if split in ("train", "test"):
        keep &= set(read_ids(DATA_DIR / "codecontests" / f"{split}_ids.txt"))
    elif split != "all":
        raise ValueError(f"codecontests has splits train, test, all; not {split!r}")
    return [
        make_task(
            "codecontests",
            task_id=f"codecontests/{r['problem_id']}",
            prompt=r["title"] + "\n\n" + r["description"].strip() + STDIO_INSTRUCTION,
            tests=json.dumps([{"input": t["input"], "output": t["output"]} for t in r["tests"]]),
            entry_point="",
            canonical_solution=r["solution"],
            kind="stdio",
        )
        for r in records
        if r["problem_id"] in keep
    ]


def _synthetic(split: str, source: str, strict: bool = False) -> list[Task]:
    if split == "rl":  # prompts for RL that the supervised stage never saw (training rules, fresh draws)
        return synthetic.generate_rl()
    if split == "fresh":  # a second held-out set: the test split's rules, other draws, none of its prompts
        return synthetic.generate_fresh()
    if split in ("probe", "probe_train"):  # the repair stage's probe: the answer only in the tests (held-out values)
        return synthetic.generate_probe(n=200 if split == "probe" else 2000, held_out=split == "probe")
    train, test = synthetic.generate()
    if split == "all":
        return train + test
    if split not in ("train", "test"):
        raise ValueError(f"synthetic has splits train, test, rl, fresh, probe, probe_train, all; not {split!r}")
    return train if split == "train" else test


_LOADERS = {
    "humaneval": _humaneval,
    "humaneval_plus": _humaneval_plus,
    "mbpp": _mbpp,
    "mbpp_plus": _mbpp_plus,
    "codecontests": _codecontests,
    "synthetic": _synthetic,
    "taco": hub_tasks.load_taco,
    "livecodebench": livecodebench.load_livecodebench,
}
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
