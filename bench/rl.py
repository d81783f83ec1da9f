"""Rollout + reward + update throughput of one RL step on the tiny model, and our loops against TRL's GRPOTrainer.

Every trainer takes the same batch: 128 completions per step (GRPO: 16 tasks x 8; REINFORCE: 128 tasks x 1, and
RLOO 16 tasks x 8; PPO: 16 tasks x 8, one epoch and four), the same start policy and 48 new tokens at most. The
"shared prefix" rows run our loops with `shared_prefix: true` (each distinct prompt runs once in the update
forwards), "no KL log" with `kl_every: 0` (no start-policy forward: TRL's GRPO at beta 0 runs none either), "old from
first pass" PPO with `old_from_first_pass: true` (logp_old from the first epoch's forward). Reported per trainer:
median step time (the first step of every run dropped: it warms up the sandbox and the kernels), completions/s,
generated tokens/s, the generation and sandbox shares of a step, the pass rate it saw, and the ratio of TRL GRPO's
step time to ours (2.00x: our step takes half the time of TRL's on the same batch), with the lowest and highest
per-round ratio beside it (a drifting machine moves the ratio between rounds).

The trainers run in `--rounds` interleaved rounds (each round runs every trainer `--steps` steps, in turn), so a
change of load on a shared machine hits all of them alike; the load average is printed before and after.

TRL's GRPOTrainer is measured twice: with GRPOConfig's own defaults for precision and memory (`bf16=True`,
`gradient_checkpointing=True`: what `codelib.trainers.grpo` got before issue 14, which did not set them) and in fp32
without gradient checkpointing (the fastest TRL allows on a CPU).

    python -m bench.rl [--steps 4] [--rounds 2] [--only "reinforce|grpo"] [--threads 2]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import tempfile
import time
from pathlib import Path


def ensure_sft(root: Path) -> str:
    """The tiny SFT adapter of the pipeline if it exists, else a quick one (the bench measures speed, not skill)."""
    from codelib.plumbing.params import REPO_ROOT

    built = REPO_ROOT / "checkpoints" / "tiny" / "sft"
    if (built / "adapter_config.json").exists():
        return str(built)
    from codelib.trainers import sft

    cfg = sft.Config(
        profile="bench",
        init="tiny",
        steps=30,
        batch_size=32,
        learning_rate=2e-3,
        lora_r=32,
        lora_alpha=64,
        lora_dropout=0.0,
        modules_to_save=["norm"],
        report_to="none",
        threads=2,
    )
    return str(sft.train(cfg))


def measure(rows: list[dict]) -> dict:
    """Median step figures of the steps after the first of each run (rows: the runs' metrics rows, step-tagged)."""
    rows = [r for r in rows if r["step"] > 1] or rows
    step = statistics.median(r["time_s"] for r in rows)
    n = 128
    tokens = statistics.median(r["completion_len"] for r in rows) * n
    share = statistics.median(r.get("sandbox_share") or 0.0 for r in rows)
    gen = statistics.median(r.get("generate_share") or 0.0 for r in rows) if "generate_share" in rows[0] else None
    return {
        "step_s": step,
        "completions_per_s": n / step,
        "tokens_per_s": tokens / step,
        "sandbox_share": share,
        "generate_share": gen,
        "pass_rate": statistics.mean(r["pass_rate"] for r in rows),
        "steps": len(rows),
    }


@contextlib.contextmanager
def trl_settings(bf16: bool, checkpointing: bool):
    """GRPO on TRL with these precision and memory settings, whatever `codelib.trainers.grpo_trl` sets."""
    from codelib.trainers import grpo_trl

    original = grpo_trl.grpo_args

    def args(cfg, out, vocab: int = 0):
        a = original(cfg, out, vocab)
        a.bf16, a.gradient_checkpointing = bf16, checkpointing
        return a

    grpo_trl.grpo_args = args
    try:
        yield
    finally:
        grpo_trl.grpo_args = original


def trainers(init: str, steps: int, threads: int = 2) -> dict:
    from codelib.trainers import grpo, ppo, reinforce

    common = dict(
        profile="bench",
        init=init,
        steps=steps,
        max_new_tokens=48,
        save_every=10_000,
        report_to="none",
        threads=threads,
        learning_rate=1e-3,
        temperature=1.0,
    )
    runs = {
        "grpo (TRL, TRL defaults)": (
            lambda: trl_settings(True, True),
            lambda s: grpo.train(
                grpo.Config(stage=s, prompts_per_step=16, num_generations=8, backend="trl", **common)
            ),
        ),
        "grpo (TRL, fp32 no ckpt)": (
            lambda: trl_settings(False, False),
            lambda s: grpo.train(
                grpo.Config(stage=s, prompts_per_step=16, num_generations=8, backend="trl", **common)
            ),
        ),
        "grpo 16 x 8 (ours)": (
            contextlib.nullcontext,
            lambda s: grpo.train(grpo.Config(stage=s, prompts_per_step=16, num_generations=8, **common)),
        ),
        "reinforce (ours)": (
            contextlib.nullcontext,
            lambda s: reinforce.train(reinforce.Config(stage=s, batch_size=128, samples_per_task=1, **common)),
        ),
        "ppo, 1 epoch (ours)": (
            contextlib.nullcontext,
            lambda s: ppo.train(ppo.Config(stage=s, batch_size=16, samples_per_task=8, ppo_epochs=1, **common)),
        ),
        "ppo, 4 epochs (ours)": (
            contextlib.nullcontext,
            lambda s: ppo.train(ppo.Config(stage=s, batch_size=16, samples_per_task=8, ppo_epochs=4, **common)),
        ),
        "rloo 16 x 8 (ours)": (
            contextlib.nullcontext,
            lambda s: reinforce.train(
                reinforce.Config(stage=s, batch_size=16, samples_per_task=8, baseline="rloo", **common)
            ),
        ),
        "rloo 16 x 8 (ours, shared prefix)": (
            contextlib.nullcontext,
            lambda s: reinforce.train(
                reinforce.Config(
                    stage=s, batch_size=16, samples_per_task=8, baseline="rloo", shared_prefix=True, **common
                )
            ),
        ),
        "ppo, 1 epoch (ours, shared prefix)": (
            contextlib.nullcontext,
            lambda s: ppo.train(
                ppo.Config(stage=s, batch_size=16, samples_per_task=8, ppo_epochs=1, shared_prefix=True, **common)
            ),
        ),
        "ppo, 4 epochs (ours, shared prefix)": (
            contextlib.nullcontext,
            lambda s: ppo.train(
                ppo.Config(stage=s, batch_size=16, samples_per_task=8, ppo_epochs=4, shared_prefix=True, **common)
            ),
        ),
        "rloo 16 x 8 (ours, shared prefix, no KL log)": (
            contextlib.nullcontext,
            lambda s: reinforce.train(
                reinforce.Config(
                    stage=s,
                    batch_size=16,
                    samples_per_task=8,
                    baseline="rloo",
                    shared_prefix=True,
                    kl_every=0,
                    **common,
                )
            ),
        ),
        "ppo, 1 epoch (ours, shared prefix, no KL log)": (
            contextlib.nullcontext,
            lambda s: ppo.train(
                ppo.Config(
                    stage=s, batch_size=16, samples_per_task=8, ppo_epochs=1, shared_prefix=True, kl_every=0, **common
                )
            ),
        ),
        "ppo, 1 epoch (ours, shared prefix, no KL log, old from first pass)": (
            contextlib.nullcontext,
            lambda s: ppo.train(
                ppo.Config(
                    stage=s,
                    batch_size=16,
                    samples_per_task=8,
                    ppo_epochs=1,
                    shared_prefix=True,
                    kl_every=0,
                    old_from_first_pass=True,
                    **common,
                )
            ),
        ),
    }
    return runs


def run(steps: int, rounds: int = 1, only: tuple[str, ...] = (), threads: int = 2) -> dict:
    from codelib.engine import judging
    from codelib.plumbing.params import read_jsonl

    runs = trainers(ensure_sft(Path(".")), steps, threads)
    if only:
        runs = {k: v for k, v in runs.items() if any(k.startswith(o) for o in only)}
    rows: dict[str, list] = {name: [] for name in runs}
    per_round: dict[str, list] = {name: [] for name in runs}  # each round's median step
    wall: dict[str, float] = dict.fromkeys(runs, 0.0)
    for r in range(rounds):
        names = list(runs) if r % 2 == 0 else list(runs)[::-1]  # alternate the order: no trainer always goes first
        for k, name in enumerate(names):
            ctx, fn = runs[name]
            judging.CACHE.clear()  # no trainer judges on another's cached verdicts (the same seed draws alike)
            t0 = time.time()
            with ctx():
                run_dir = fn(f"bench{r}-{k}")
            wall[name] += time.time() - t0
            got = read_jsonl(Path(run_dir) / "metrics.jsonl")
            rows[name] += got
            per_round[name].append(measure(got)["step_s"])
    return {name: {**measure(rows[name]), "wall_s": wall[name], "round_step_s": per_round[name]} for name in runs}


def round_ratios(base: dict, ours: dict) -> tuple[float, float]:
    """(lowest, highest) over rounds of the base's step time / ours in the same round: the spread a drifting machine
    puts on the ratio of medians."""
    ratios = [b / o for b, o in zip(base["round_step_s"], ours["round_step_s"], strict=True)]
    return min(ratios), max(ratios)


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.rl", description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=4, help="steps per run (the first is dropped)")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds of every trainer")
    ap.add_argument("--only", default="", help="name prefixes of the trainers to run, separated by '|'")
    ap.add_argument(
        "--threads",
        type=int,
        default=2,
        help="torch threads (1 on a shared, loaded machine: two threads "
        "then stall on each other, measured 5x slower at load 7 on 2 cores)",
    )
    args = ap.parse_args()
    for name, least in (("steps", 2), ("rounds", 1), ("threads", 1)):
        if getattr(args, name) < least:  # steps: the first of each run is dropped, one must remain
            ap.error(f"argument --{name}: {getattr(args, name)} is less than {least} (at least {least})")
    load0 = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["CODELIB_CHECKPOINTS"] = tmp
        results = run(args.steps, args.rounds, tuple(o for o in args.only.split("|") if o), args.threads)
    load1 = os.getloadavg()
    bases = {k: v["step_s"] for k, v in results.items() if k.startswith("grpo")}
    print(
        f"\nRL step throughput, tiny model, 128 completions per step, {args.threads} torch thread(s), median of "
        f"{args.rounds} x {args.steps - 1} steps; load average {load0[0]:.1f} / {load0[1]:.1f} before, "
        f"{load1[0]:.1f} / {load1[1]:.1f} after"
    )
    head = "".join(f" {'vs ' + k.split(', ')[1].rstrip(')'):>16}" for k in bases)
    spread = next((k for k in bases if "fp32" in k), next(iter(bases), None))  # the base of the per-round spread
    tail = f" {'rounds vs ' + spread.split(', ')[1].rstrip(')'):>26}" if spread else ""
    print(
        f"{'trainer':<30} {'step s':>7} {'compl/s':>8} {'tok/s':>7} {'gen':>5} {'sandbox':>8} {'pass':>5}{head}{tail}"
    )
    for name, r in results.items():
        gen = f"{r['generate_share']:.0%}" if r["generate_share"] is not None else "-"
        ratios = "".join(f" {b / r['step_s']:>15.2f}x" for b in bases.values())
        if spread:
            lo, hi = round_ratios(results[spread], r)
            ratios += f" {f'{lo:.2f}x-{hi:.2f}x':>26}"
        print(
            f"{name:<30} {r['step_s']:>7.2f} {r['completions_per_s']:>8.1f} {r['tokens_per_s']:>7.0f} {gen:>5} "
            f"{r['sandbox_share']:>8.0%} {r['pass_rate']:>5.2f}{ratios}"
        )
    print(
        "vs X: X's step time / this trainer's (2.00x = half the time of TRL GRPOTrainer's step on the same batch); "
        "rounds: the lowest and highest of that ratio within one round (both measured in it)."
    )
    print(json.dumps({"load_before": load0, "load_after": load1, "results": results}))


if __name__ == "__main__":
    main()
