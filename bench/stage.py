"""The whole GRPO stage on the own engine against the same stage on TRL's GRPOTrainer.

Each run is `python -m codelib.trainers.grpo` on the profile's shipped `04_grpo.yaml` (tiny: 32 tasks x 4 completions
per step, 250 steps, from the pipeline's SFT adapter), in a process of its own as the pipeline starts it, with
`backend=own` or `backend=trl` (with the engine's speed options at the values TRL runs, `TRL_VALUES`). `--set
KEY=VALUE` adds an own-engine run with that override (e.g. `shared_prefix=true`; several, quoted and space-separated,
make one run with all of them); `--steps` and `--all KEY=VALUE` change every run alike. Runs write under a temporary
checkpoints root (the pipeline's runs stay untouched). Rounds alternate the order of the runs, so that a change of
load hits all of them alike.

Reported per run (summed over rounds): the training loop's time (the sum of the steps' `time_s` in metrics.jsonl:
sampling, judging and the update, checkpoints included), the process's wall time (imports and model load as well),
the median step, the sandbox's share of a step; and TRL's loop time over each run's (2.00x: half of TRL's time).
Also the CPU model, torch threads (the params' `threads`) and the load average before and after.

    python -m bench.stage [--profile tiny] [--steps N] [--rounds 1] [--set shared_prefix=false] [--all KEY=VALUE]
                          [--json out.json]

On 2 cores a round of the tiny stage takes about 8 minutes (TRL's run about 5), and each `--set` run adds about 3.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from codelib.plumbing.jsonl import read_jsonl

ROOT = Path(__file__).resolve().parents[1]


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (platform's processor string elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def summarise(rows: list[dict]) -> dict:
    """A run's figures from its metrics rows: loop time (sum of `time_s`), median step, mean sandbox share, steps."""
    steps = [r for r in rows if isinstance(r.get("time_s"), (int, float))]
    if not steps:
        raise ValueError("no step with a time_s in the run's metrics.jsonl: did the stage run?")
    shares = [r["sandbox_share"] for r in steps if isinstance(r.get("sandbox_share"), (int, float))]
    return {
        "steps": len(steps),
        "loop_s": sum(r["time_s"] for r in steps),
        "median_step_s": statistics.median(r["time_s"] for r in steps),
        "sandbox_share": statistics.mean(shares) if shares else None,
    }


def _checked(pairs: list[str], flag: str) -> list[str]:
    for s in pairs:
        if "=" not in s or s.startswith("="):
            raise ValueError(f"{flag} takes KEY=VALUE (e.g. shared_prefix=true); you gave {s!r}")
    return pairs


# the own engine's options TRL refuses or ignores, at the values TRL runs (a profile may turn them on: tiny does)
TRL_VALUES = ["old_logprobs=recompute", "minibatch_order=rows", "shared_prefix=false"]


def runs(sets: list[str]) -> dict[str, list[str]]:
    """Run label -> the overrides it passes: own, trl, and one own run per --set (several space-separated
    KEY=VALUE in one --set are one run with all of them)."""
    out = {"own": ["backend=own"], "trl": ["backend=trl", *TRL_VALUES]}
    for s in sets:
        out[f"own {s}"] = ["backend=own", *_checked(s.split() or [s], "--set")]
    return out


def run_stage(params: Path, overrides: list[str], checkpoints: Path, stage: str, log: Path) -> tuple[float, list]:
    """One stage in its own process; (wall seconds, its metrics rows). A failed run ends the bench with its log."""
    env = {**os.environ, "CODELIB_CHECKPOINTS": str(checkpoints)}
    cmd = [sys.executable, "-m", "codelib.trainers.grpo", str(params), f"stage={stage}", *overrides]
    t0 = time.time()
    with log.open("w") as out:
        rc = subprocess.call(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    wall = time.time() - t0
    if rc != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        raise SystemExit(f"error: {' '.join(cmd[2:])} ended with exit status {rc}; the end of its output:\n{tail}")
    run_dir = next(checkpoints.glob(f"*/{stage}"), None)
    if run_dir is None or not (run_dir / "metrics.jsonl").exists():
        raise SystemExit(f"error: {' '.join(cmd[2:])} finished but left no metrics.jsonl under {checkpoints}")
    return wall, read_jsonl(run_dir / "metrics.jsonl")


def bench(profile: str, steps: int, rounds: int, plan: dict[str, list[str]], init: str, every: list[str]) -> dict:
    """Every run of `plan` (label -> its overrides, see `runs`) `rounds` times, each with `every` as well."""
    params = ROOT / "params" / profile / "04_grpo.yaml"
    common = [f"init={init}"] + ([f"steps={steps}"] if steps else []) + list(every)
    got = {label: {"wall_s": 0.0, "rows": []} for label in plan}
    with tempfile.TemporaryDirectory(prefix="bench-stage-") as tmp:
        for r in range(rounds):
            order = list(plan) if r % 2 == 0 else list(plan)[::-1]
            for k, label in enumerate(order):
                stage = f"bench_stage_{r}_{k}"
                print(f"[round {r + 1}/{rounds}] {label} ...", flush=True)
                wall, rows = run_stage(params, common + plan[label], Path(tmp), stage, Path(tmp) / f"{stage}.log")
                got[label]["wall_s"] += wall
                got[label]["rows"] += rows
                print(f"    {summarise(rows)['loop_s']:.0f} s of training, {wall:.0f} s in all", flush=True)
    return {label: {**summarise(g["rows"]), "wall_s": g["wall_s"]} for label, g in got.items()}


def report(results: dict, head: str) -> str:
    trl = results["trl"]["loop_s"]
    w = max(32, *(len(label) for label in results))
    lines = [
        head,
        f"{'run':<{w}} {'steps':>6} {'loop s':>8} {'wall s':>8} {'median step s':>14} {'sandbox':>8} {'TRL / this':>11}",
    ]
    for label, r in results.items():
        share = f"{r['sandbox_share']:.0%}" if r["sandbox_share"] is not None else "-"
        lines.append(
            f"{label:<{w}} {r['steps']:>6} {r['loop_s']:>8.0f} {r['wall_s']:>8.0f} {r['median_step_s']:>14.2f} "
            f"{share:>8} {trl / r['loop_s']:>10.2f}x"
        )
    lines.append("TRL / this: TRL's training-loop time over this run's (2.00x: this run took half of TRL's time).")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m bench.stage", description=__doc__.split("\n")[0])
    ap.add_argument("--profile", default="tiny", help="params/<profile>/04_grpo.yaml (default tiny)")
    ap.add_argument("--steps", type=int, default=0, help="steps of every run (default: the params' own)")
    ap.add_argument("--rounds", type=int, default=1, help="rounds of every run, in alternating order")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="an extra own-engine run")
    ap.add_argument("--all", action="append", default=[], metavar="KEY=VALUE", help="an override of every run")
    ap.add_argument("--init", default="", help="the start adapter (default: the params' init, as it resolves now)")
    ap.add_argument("--json", default="", help="also write the figures to this file")
    args = ap.parse_args(argv)
    if args.steps < 0 or args.rounds < 1:
        ap.error("--steps must be 0 (the params' own) or more, and --rounds at least 1")
    try:
        plan, every = runs(args.set), _checked(args.all, "--all")
    except ValueError as e:
        ap.error(str(e))
    from codelib.plumbing.params import load_yaml
    from codelib.plumbing.paths import resolve

    params = ROOT / "params" / args.profile / "04_grpo.yaml"
    if not params.exists():
        ap.error(f"{params} does not exist; --profile names a folder of params/ that has a 04_grpo.yaml")
    cfg = load_yaml(params)
    cfg.update(dict(kv.split("=", 1) for kv in every))  # what every run gets, for the heading
    init = args.init or str(resolve(cfg["init"]))  # resolved before the runs' checkpoints root moves
    if not Path(init).exists():
        ap.error(f"the start adapter {init} does not exist: run `make demo` (or its SFT stage) first, or give --init")
    load0 = os.getloadavg()
    results = bench(args.profile, args.steps, args.rounds, plan, init, every)
    load1 = os.getloadavg()
    head = (
        f"\nThe GRPO stage ({args.profile}: {cfg['prompts_per_step']} tasks x {cfg['num_generations']} completions, "
        f"{args.steps or cfg['steps']} steps), {args.rounds} round(s); {cpu_model()}, {os.cpu_count()} CPUs, "
        f"{cfg.get('threads') or 'default'} torch threads; load average {load0[0]:.1f} before, {load1[0]:.1f} after"
    )
    print(report(results, head))
    if args.json:
        Path(args.json).write_text(json.dumps({"cpu": cpu_model(), "load": [load0, load1], "results": results}))
    return results


if __name__ == "__main__":
    main()
