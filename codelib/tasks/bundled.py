"""The bundled benchmarks' adapters (files in codelib/data/, or the same datasets from the hub): HumanEval and
HumanEval+ (131 train / 33 test by the fixed id lists), MBPP and MBPP+ (the standard split by id), the verified
CodeContests sample, the synthetic suite. `codelib.tasks.load_tasks` is the way in.
"""

from __future__ import annotations

import json

from codelib.tasks import hub as hub_tasks
from codelib.tasks import rows as task_rows
from codelib.tasks import synthetic
from codelib.tasks import task as base
from codelib.tasks.task import (
    DATA_DIR,
    STDIO_INSTRUCTION,
    Task,
    TaskError,
    make_task,
    read_ids,
    read_jsonl,
)

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
