"""Every canonical solution of HumanEval+ and MBPP+ against all of its plus inputs, through the sandbox.

The test suite runs a sample (tests/test_datasets_canonical.py); this is the whole check (a few minutes on 2 cores):

    python tools/check_plus_inputs.py                           # exit status 1 if any task fails
    python tools/check_plus_inputs.py --datasets humaneval_plus --workers 1
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

DATASETS = ("humaneval_plus", "mbpp_plus")


def positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return int(text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python tools/check_plus_inputs.py", description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--datasets",
        nargs="+",
        choices=DATASETS,
        default=list(DATASETS),
        metavar="NAME",
        help=f"which to check (default: both of {', '.join(DATASETS)})",
    )
    ap.add_argument("--workers", type=positive, default=2, help="sandbox workers (default: 2)")
    args = ap.parse_args(argv)
    from codelib import sandbox
    from codelib.tasks import load_tasks

    t0, failing = time.time(), 0
    with sandbox.Sandbox(workers=args.workers, timeout_s=120, reference_timeout_s=600) as box:  # MBPP+/255: minutes
        for name in args.datasets:
            tasks = load_tasks(name, "all")
            verdicts = box.map([sandbox.task_job(t, t.canonical_solution, plus=True, timeout_s=120) for t in tasks])
            bad = [(t.task_id, v.status, v.detail[:300]) for t, v in zip(tasks, verdicts, strict=True) if not v.passed]
            inputs = sum(v.tests_total for v in verdicts)
            print(
                f"{name}: {len(tasks) - len(bad)}/{len(tasks)} pass, {inputs} tests and inputs judged, "
                f"{time.time() - t0:.0f} s"
            )
            for row in bad:
                print("   ", *row)
            failing += len(bad)
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
