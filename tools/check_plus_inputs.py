"""Every canonical solution of HumanEval+ and MBPP+ against all of its plus inputs, through the sandbox.

The test suite runs a sample (tests/test_datasets_canonical.py); this is the whole check (a few minutes on 2 cores):

    python tools/check_plus_inputs.py      # exit status 1 if any task fails
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from codelib import sandbox  # noqa: E402
from codelib.tasks import load_tasks  # noqa: E402


def main() -> int:
    t0, failing = time.time(), 0
    with sandbox.Sandbox(workers=2, timeout_s=120, reference_timeout_s=600) as box:  # MBPP+/255: minutes
        for name in ("humaneval_plus", "mbpp_plus"):
            tasks = load_tasks(name, "all")
            verdicts = box.map([sandbox.task_job(t, t.canonical_solution, plus=True, timeout_s=120) for t in tasks])
            bad = [(t.task_id, v.status, v.detail[:300]) for t, v in zip(tasks, verdicts, strict=True) if not v.passed]
            inputs = sum(v.tests_total for v in verdicts)
            print(f"{name}: {len(tasks) - len(bad)}/{len(tasks)} pass, {inputs} tests and inputs judged, "
                  f"{time.time() - t0:.0f} s")  # fmt: skip
            for row in bad:
                print("   ", *row)
            failing += len(bad)
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
