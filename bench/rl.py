"""Rollout + reward + update throughput of one RL step on the tiny model, and our loops against TRL's GRPOTrainer.

Every trainer takes the same batch: 128 completions per step (GRPO: 16 tasks x 8; REINFORCE: 128 tasks x 1;
PPO: 16 tasks x 8, one epoch and four), the same start policy and 48 new tokens at most. Reported per trainer:
median step time (first step dropped: it warms up the sandbox and the kernels), completions/s, generated tokens/s,
the sandbox's share of a step, and the ratio of TRL GRPO's step time to ours (>= 1: ours is no slower).

    python -m bench.rl [--steps 6]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path


def ensure_sft(root: Path) -> str:
    """The tiny SFT adapter of the pipeline if it exists, else a quick one (the bench measures speed, not skill)."""
    from codelib.params import REPO_ROOT

    built = REPO_ROOT / "checkpoints" / "tiny" / "sft"
    if (built / "adapter_config.json").exists():
        return str(built)
    from codelib.trainers import sft

    cfg = sft.Config(profile="bench", init="tiny", steps=30, batch_size=32, learning_rate=2e-3, lora_r=32,
                     lora_alpha=64, lora_dropout=0.0, modules_to_save=["norm"], report_to="none", threads=2)  # fmt: skip
    return str(sft.train(cfg))


def measure(rows: list[dict]) -> dict:
    rows = rows[1:] or rows
    step = statistics.median(r["time_s"] for r in rows)
    n = 128
    tokens = statistics.median(r["completion_len"] for r in rows) * n
    share = statistics.median(r.get("sandbox_share") or 0.0 for r in rows)
    return {"step_s": step, "completions_per_s": n / step, "tokens_per_s": tokens / step, "sandbox_share": share}


def run(steps: int) -> dict:
    from codelib.params import read_jsonl
    from codelib.trainers import grpo, ppo, reinforce

    init = ensure_sft(Path("."))
    common = dict(profile="bench", init=init, steps=steps, max_new_tokens=48, save_every=10_000, report_to="none",
                  threads=2, learning_rate=1e-3, temperature=1.0)  # fmt: skip
    runs = {
        "grpo (TRL GRPOTrainer)": lambda: grpo.train(
            grpo.Config(stage="grpo", prompts_per_step=16, num_generations=8, **common)
        ),
        "reinforce (ours)": lambda: reinforce.train(
            reinforce.Config(stage="reinforce", batch_size=128, samples_per_task=1, **common)
        ),
        "ppo, 1 epoch (ours)": lambda: ppo.train(
            ppo.Config(stage="ppo1", batch_size=16, samples_per_task=8, ppo_epochs=1, **common)
        ),
        "ppo, 4 epochs (ours)": lambda: ppo.train(
            ppo.Config(stage="ppo4", batch_size=16, samples_per_task=8, ppo_epochs=4, **common)
        ),
    }
    out = {}
    for name, fn in runs.items():
        t0 = time.time()
        run_dir = fn()
        out[name] = measure(read_jsonl(Path(run_dir) / "metrics.jsonl"))
        out[name]["wall_s"] = time.time() - t0
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=6)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["CODELIB_CHECKPOINTS"] = tmp
        results = run(args.steps)
    base = results["grpo (TRL GRPOTrainer)"]["step_s"]
    print(f"\nRL step throughput, tiny model, 128 completions per step, median of {args.steps - 1} steps")
    print(f"{'trainer':<24} {'step s':>7} {'compl/s':>8} {'tok/s':>8} {'sandbox':>8} {'TRL/ours':>9}")
    for name, r in results.items():
        print(f"{name:<24} {r['step_s']:>7.2f} {r['completions_per_s']:>8.1f} {r['tokens_per_s']:>8.0f} "
              f"{r['sandbox_share']:>8.0%} {base / r['step_s']:>8.2f}x")  # fmt: skip
    print("TRL/ours >= 1.00x means our loop's step is no slower than TRL's GRPOTrainer step on the same batch.")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
