"""Tasks: one record type for every benchmark, and the adapters that build it.

A `Task` is what the policy sees (`prompt`), what the sandbox checks (`tests`) and what proves the
tests are satisfiable (`canonical_solution`). Function tasks (HumanEval, MBPP, synthetic) are checked
by running `prompt + completion + tests`; stdin/stdout tasks (CodeContests) by running the completion
as a program on each input file and comparing its output.

The benchmark files ship inside the package (`codelib/data/`, with their licences in its README);
`source="hub"` loads the same datasets through `datasets.load_dataset` instead.
"""

from __future__ import annotations

import gzip
import json
import random
from dataclasses import asdict, dataclass
from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent / "data"
NAMES = ("humaneval", "mbpp", "humaneval_plus", "mbpp_plus", "codecontests", "synthetic")
SPLITS = ("train", "test", "validation", "fewshot", "rl", "all")


@dataclass(frozen=True)
class Task:
    """One problem: the prompt to continue, the tests that judge it, and a solution that passes them."""

    task_id: str
    prompt: str  # function tasks: a code prefix the completion continues; stdio: the statement
    tests: str  # function: code defining check(candidate) or bare asserts; stdio: JSON [{"input", "output"}]
    entry_point: str  # the function under test ("" for stdio)
    canonical_solution: str  # a continuation of `prompt` that passes `tests`
    kind: str = "function"  # "function" | "stdio"
    plus_inputs: str = ""  # JSON list of argument lists (HumanEval+/MBPP+ extra inputs), "" if none
    atol: float = 0.0  # float tolerance when comparing outputs on plus_inputs

    def to_dict(self) -> dict:
        return asdict(self)


class TaskError(ValueError):
    """A dataset record that cannot become a Task; the message names the record and what is missing."""


def program_for(task: Task, completion: str) -> str:
    """The program the sandbox runs to check `completion` on a function task (stdio: the completion)."""
    if task.kind == "stdio":
        return completion
    program = task.prompt + completion + "\n\n" + task.tests
    if "def check(" in task.tests:
        program += f"\n\ncheck({task.entry_point})\n"
    return program


def make_task(dataset: str, **fields) -> Task:
    """Build a Task, rejecting records without tests or without an entry point."""
    task_id = fields.get("task_id", "?")
    kind = fields.get("kind", "function")
    if kind not in ("function", "stdio"):
        raise TaskError(f"{dataset} record {task_id}: kind must be 'function' or 'stdio', not {kind!r}")
    if not str(fields.get("tests", "")).strip() or fields.get("tests") == "[]":
        raise TaskError(f"{dataset} record {task_id}: it has no tests; every task needs tests to be judged")
    if kind == "function" and not fields.get("entry_point"):
        raise TaskError(f"{dataset} record {task_id}: it has no entry_point (the function the tests call)")
    if not fields.get("prompt"):
        raise TaskError(f"{dataset} record {task_id}: it has an empty prompt")
    return Task(**fields)


# ---------------------------------------------------------------------------------------------------------------
# readers: bundled files or the hub


def _read_jsonl(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _ids(path: Path) -> list[str]:
    return path.read_text().split()


def _hub(name: str, *args, split: str) -> list[dict]:
    import datasets  # imported lazily: only the hub path needs it

    return list(datasets.load_dataset(name, *args, split=split))


# ---------------------------------------------------------------------------------------------------------------
# HumanEval (131 train / 33 test by the fixed id lists) and HumanEval+


def _humaneval_split(records: list[dict], split: str) -> list[dict]:
    if split == "all":
        return records
    if split not in ("train", "test"):
        raise ValueError(f"humaneval has splits train, test, all; not {split!r}")
    keep = set(_ids(DATA_DIR / "humaneval" / f"{split}_ids.txt"))
    return [r for r in records if r["task_id"] in keep]


def _humaneval(split: str, source: str) -> list[Task]:
    if source == "hub":
        records = _hub("openai/openai_humaneval", split="test")
    else:
        records = _read_jsonl(DATA_DIR / "humaneval" / "HumanEval.jsonl.gz")
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


def _humaneval_plus(split: str, source: str) -> list[Task]:
    if source == "hub":
        records = _hub("evalplus/humanevalplus", split="test")
    else:
        records = _read_jsonl(DATA_DIR / "evalplus" / "HumanEvalPlus-v0.1.10.jsonl.gz")
    return [
        make_task(
            "humaneval_plus",
            task_id=r["task_id"],
            prompt=r["prompt"],
            tests=r["test"],
            entry_point=r["entry_point"],
            canonical_solution=r["canonical_solution"],
            plus_inputs=json.dumps(list(r["base_input"]) + list(r["plus_input"])),
            atol=float(r.get("atol") or 0.0),
        )
        for r in _humaneval_split(records, split)
    ]


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


def _mbpp(split: str, source: str) -> list[Task]:
    records = (
        _hub("google-research-datasets/mbpp", "full", split="train+test+validation+prompt")
        if source == "hub"
        else (_read_jsonl(DATA_DIR / "mbpp" / "mbpp.jsonl"))
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


def _mbpp_plus(split: str, source: str) -> list[Task]:
    if source == "hub":
        records = _hub("evalplus/mbppplus", split="test")
    else:
        records = _read_jsonl(DATA_DIR / "evalplus" / "MbppPlus-v0.2.0.jsonl.gz")
    tasks = []
    for r in records:
        if not _mbpp_in_split(int(r["task_id"].split("/")[1]), split):
            continue
        plus = r["plus_input"] if isinstance(r["plus_input"], list) else []
        tasks.append(
            make_task(
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
        )
    return tasks


# ---------------------------------------------------------------------------------------------------------------
# CodeContests sample: stdin/stdout, the 256 verified problems, 205 train / 51 test

STDIO_INSTRUCTION = "\n\nWrite a Python 3 program that reads the input from standard input and prints the answer.\n"


def _codecontests(split: str, source: str) -> list[Task]:
    if source == "hub":
        raise ValueError(
            "codecontests from the hub is deepmind/code_contests (13k problems, a different schema); "
            "use source='bundled' for the verified 256-problem sample"
        )
    records = _read_jsonl(DATA_DIR / "codecontests" / "codecontests_sample300.jsonl.gz")
    keep = set(_ids(DATA_DIR / "codecontests" / "verified_ids.txt"))
    if split in ("train", "test"):
        keep &= set(_ids(DATA_DIR / "codecontests" / f"{split}_ids.txt"))
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


def _synthetic(split: str, source: str) -> list[Task]:
    from codelib import synthetic

    if split == "rl":  # prompts for RL that the supervised stage never saw (training rules, fresh draws)
        return synthetic.generate_rl()
    train, test = synthetic.generate()
    if split == "all":
        return train + test
    if split not in ("train", "test"):
        raise ValueError(f"synthetic has splits train, test, rl, all; not {split!r}")
    return train if split == "train" else test


_LOADERS = {
    "humaneval": _humaneval,
    "humaneval_plus": _humaneval_plus,
    "mbpp": _mbpp,
    "mbpp_plus": _mbpp_plus,
    "codecontests": _codecontests,
    "synthetic": _synthetic,
}


def load_tasks(name: str, split: str = "test", source: str = "bundled", limit: int | None = None) -> list[Task]:
    """Load a dataset's split as Tasks.

    name: humaneval | mbpp | humaneval_plus | mbpp_plus | codecontests | synthetic
    split: train | test | all (mbpp also validation, fewshot)
    source: "bundled" (files in codelib/data, offline) or "hub" (`datasets.load_dataset`)
    limit: keep the first `limit` tasks (a quick look; order is the dataset's)
    """
    if name not in _LOADERS:
        raise ValueError(f"unknown dataset {name!r}; choose one of {', '.join(NAMES)}")
    if source not in ("bundled", "hub"):
        raise ValueError(f"source must be 'bundled' or 'hub', not {source!r}")
    tasks = _LOADERS[name](split, source)
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
