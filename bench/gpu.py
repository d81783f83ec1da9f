"""Trainer steps on real-size architectures: tokens/s, peak GPU memory and model FLOPs utilisation (MFU).

A randomly initialised model with a real model's architecture (config only: nothing is downloaded) runs a few
steps of each trainer, with LoRA and with QLoRA, on the HumanEval train prompts; the first step is dropped.

    python -m bench.gpu --arch deepseek-1.3b                       # every trainer, LoRA and QLoRA
    python -m bench.gpu --arch deepseek-7b --trainers grpo,ppo --quant lora
    python -m bench.gpu --arch deepseek-1.3b --eval                # + HF generate vs vLLM (needs vllm)
    python -m bench.gpu --arch tiny --trainers sft,reinforce --quant lora --steps 2   # the plumbing, on a CPU

With --out, the JSON is rewritten after every trainer (a later OOM or crash keeps the rows before it; a trainer that
raises gets a row with its error and the next one runs). --eval runs in a child process after the trainers: vLLM
refuses to start unless the share of GPU memory it asks for is free, and a process that trained still holds
allocator caches and whatever the trainers left referenced.

Baselines measured in the same run: the SFT step (tokens/s of plain supervised LoRA training on the same model,
the ceiling an RL step's training part can reach) for the trainers, HF generate for vLLM.

Model FLOPs are counted PaLM-style: 2N per token for a forward pass (generation, reference and old-policy
passes), 6N per token trained (forward + backward), N = parameters without the input embedding; attention
FLOPs are ignored. With LoRA the weight gradients of the frozen base are never computed, so MFU by this
definition understates what the hardware does less than it overstates the useful work. Random weights never
stop early: completions run to max_new_tokens (the worst case for generation) and never pass (GRPO then has no
advantage, but its step still runs every pass). Prompts are tokenized with the tiny BPE tokenizer (ids decode
to nothing above its 512), so prompts are ~2-3x longer in tokens than with the real tokenizer.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

ARCHS = {
    # deepseek-ai/deepseek-coder-1.3b-base config.json
    "deepseek-1.3b": dict(
        hidden_size=2048,
        intermediate_size=5504,
        num_hidden_layers=24,
        num_attention_heads=16,
        num_key_value_heads=16,
        vocab_size=32256,
        max_position_embeddings=16384,
        rope_theta=100000.0,
        rope_scaling={"type": "linear", "factor": 4.0},
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
    ),
    # deepseek-ai/deepseek-coder-7b-instruct-v1.5 config.json
    "deepseek-7b": dict(
        hidden_size=4096,
        intermediate_size=11008,
        num_hidden_layers=30,
        num_attention_heads=32,
        num_key_value_heads=32,
        vocab_size=102400,
        max_position_embeddings=4096,
        rope_theta=10000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
    ),
    "tiny": None,  # the tiny model's own config: runs on a CPU, for checking the plumbing
}
TRAINERS = ("sft", "reinforce", "ppo", "grpo", "dpo")
PEAK_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0, "A10": 125.0, "L4": 121.0, "4090": 165.0}


def build_arch(name: str, root: Path) -> Path:
    """A model dir with `name`'s architecture and random weights (bf16 on a GPU), plus the tiny tokenizer."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from codelib.policy.models import build_tiny_model

    tiny = build_tiny_model()
    if ARCHS[name] is None:
        return tiny
    out = root / f"random-{name}"
    if (out / "config.json").exists():
        return out
    tok = AutoTokenizer.from_pretrained(tiny)
    cfg = LlamaConfig(
        **ARCHS[name],
        bos_token_id=tok.bos_token_id or 0,
        eos_token_id=tok.eos_token_id or 0,
        pad_token_id=tok.pad_token_id,
    )
    cuda = torch.cuda.is_available()
    torch.manual_seed(0)
    with torch.device("cuda" if cuda else "cpu"):
        model = LlamaForCausalLM(cfg).to(torch.bfloat16 if cuda else torch.float32)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    del model
    return out


def flops_n(model_dir: Path) -> int:
    """N for model FLOPs: every parameter but the input embedding."""
    from transformers import AutoConfig

    c = AutoConfig.from_pretrained(model_dir)
    h, f, layers, v = c.hidden_size, c.intermediate_size, c.num_hidden_layers, c.vocab_size
    kv = h * getattr(c, "num_key_value_heads", c.num_attention_heads) // c.num_attention_heads
    per_layer = h * (h + 2 * kv + h) + 3 * h * f + 2 * h
    return layers * per_layer + h + (0 if c.tie_word_embeddings else h * v)


def peak_flops(override: float) -> float | None:
    import torch

    if override:
        return override * 1e12
    if not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name()
    return next((tf * 1e12 for key, tf in PEAK_TFLOPS.items() if key in name), None)


def mean_prompt_tokens(model_dir: Path, tasks) -> float:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    return statistics.mean(len(tok(t.prompt, add_special_tokens=False)["input_ids"]) for t in tasks)


def _steps(rows: list[dict], key: str = "time_s", cumulative: bool = False) -> list[float]:
    times = [r[key] for r in rows if key in r]
    if cumulative:
        times = [b - a for a, b in zip([0.0] + times[:-1], times, strict=True)]
    return times[1:] or times  # the first step warms up kernels, caches and the sandbox


def run_trainer(name: str, model_dir: Path, quant: str, a, tasks, prompt_tokens: float) -> dict:
    """Run `a.steps` steps of one trainer; returns step seconds, tokens per step and model FLOPs per step."""
    import torch

    from codelib.plumbing.params import read_jsonl
    from codelib.trainers import grpo, ppo, reinforce, sft

    q = quant == "qlora"
    common = dict(
        profile="bench",
        stage=f"{name}_{quant}",
        report_to="none",
        load_in_4bit=q,
        lora_r=16,
        lora_alpha=32,
        dataset=a.dataset,
        split="train",
        seed=0,
    )
    rl = dict(
        init=str(model_dir),
        steps=a.steps,
        max_new_tokens=a.new_tokens,
        save_every=10**6,
        workers=a.workers,
        learning_rate=1e-5,
        temperature=1.0,
    )
    n = flops_n(model_dir)
    b = a.batch
    if name == "sft":
        run = sft.train(
            sft.Config(
                **common,
                init=str(model_dir),
                steps=a.steps,
                batch_size=b,
                max_length=1024,
                logging_steps=1,
                save_every=10**6,
                bf16=torch.cuda.is_available(),
                warmup_ratio=0.0,
                learning_rate=1e-5,
            )
        )
        rows = [r for r in read_jsonl(run / "metrics.jsonl") if "loss" in r]
        tokens = (
            statistics.mean(r2["num_tokens"] - r1["num_tokens"] for r1, r2 in zip(rows, rows[1:], strict=False))
            if len(rows) > 1 and "num_tokens" in rows[0]
            else b * (prompt_tokens + 64)
        )
        step = statistics.median(_steps(rows, cumulative=True))
        return dict(step_s=step, tokens=tokens, flops=6 * n * tokens)
    if name == "dpo":
        return _run_dpo(common, rl, model_dir, a, tasks, n)
    if name == "reinforce":
        run = reinforce.train(reinforce.Config(**common, **rl, batch_size=b, samples_per_task=1))
        passes = dict(gen=1, fwd=1, train=1)  # rollout, the reference pass for the KL, one update
        seqs = b
    elif name == "ppo":
        run = ppo.train(
            ppo.Config(
                **common, **rl, batch_size=max(1, b // 4), samples_per_task=4, ppo_epochs=2, critic="value_head"
            )
        )
        passes = dict(gen=1, fwd=2, train=2)  # rollout, old-policy and reference passes, two epochs
        seqs = max(1, b // 4) * 4
    else:
        run = grpo.train(grpo.Config(**common, **rl, prompts_per_step=max(1, b // 4), num_generations=4, beta=0.0))
        passes = dict(gen=1, fwd=0, train=1)  # beta 0, one update per rollout: no reference or old-policy pass
        seqs = max(1, b // 4) * 4
    rows = read_jsonl(run / "metrics.jsonl")
    completion = statistics.mean(r["completion_len"] for r in rows if r.get("completion_len") is not None)
    tokens = seqs * (prompt_tokens + completion)
    flops = seqs * (
        2 * n * (prompt_tokens + completion) * (passes["gen"] + passes["fwd"])
        + 6 * n * (prompt_tokens + completion) * passes["train"]
    )
    return dict(step_s=statistics.median(_steps(rows)), tokens=tokens, flops=flops, completion_len=completion)


def _run_dpo(common: dict, rl: dict, model_dir: Path, a, tasks, n: int) -> dict:
    """DPO on fixed pairs (canonical solution vs a broken one): random weights would sample no passing candidate."""
    from transformers import AutoTokenizer

    from codelib.plumbing.params import read_jsonl
    from codelib.trainers import dpo

    pairs = [
        {
            "task_id": t.task_id,
            "prompt": t.prompt,
            "chosen": t.canonical_solution,
            "rejected": "    return None\n" + t.canonical_solution[: len(t.canonical_solution) // 2],
        }
        for t in tasks
    ]
    cfg = dpo.Config(
        **common,
        init=rl["init"],
        steps=a.steps,
        batch_size=max(1, a.batch // 2),
        max_length=1024,
        save_every=10**6,
        learning_rate=1e-5,
        workers=a.workers,
    )

    def prepare(c):
        c.run_dir.mkdir(parents=True, exist_ok=True)
        (c.run_dir / "pairs.jsonl").write_text("".join(json.dumps(p) + "\n" for p in pairs))
        return {"pairs": len(pairs)}

    real, dpo.prepare = dpo.prepare, prepare
    try:
        run = dpo.train(cfg)
    finally:
        dpo.prepare = real
    rows = [r for r in read_jsonl(run / "metrics.jsonl") if "loss" in r]
    tok = AutoTokenizer.from_pretrained(model_dir)
    length = statistics.mean(len(tok(p["prompt"] + p[k])["input_ids"]) for p in pairs for k in ("chosen", "rejected"))
    seqs = 2 * cfg.batch_size
    tokens = seqs * min(length, 1024)
    return dict(
        step_s=statistics.median(_steps(rows, cumulative=True)), tokens=tokens, flops=tokens * (2 * n + 6 * n)
    )  # reference forward + policy forward/backward


def bench_eval(model_dir: Path, tasks, a) -> dict:
    """HF generate (the baseline) vs vLLM on the same prompts: generated tokens per second."""
    from codelib.policy import generation
    from codelib.policy.models import load_policy

    prompts = [t.prompt for t in tasks]
    out = {}
    model, tok = load_policy(str(model_dir))
    for backend in ("hf", "vllm"):
        if backend == "vllm":
            del model
            free_memory()  # vLLM sizes itself from the free memory (vllm_backend.vllm_memory_share)
            try:
                import vllm  # noqa: F401
            except ImportError:
                out["vllm"] = None
                break
        t0 = time.time()
        comps = generation.generate(
            model if backend == "hf" else str(model_dir),
            tok if backend == "hf" else None,
            prompts,
            n=a.eval_samples,
            temperature=0.8,
            max_new_tokens=a.new_tokens,
            batch_size=64,
            backend=backend,
            progress=False,
        )
        dt = time.time() - t0
        toks = sum(c.n_tokens for cs in comps for c in cs)
        out[backend] = dict(seconds=dt, tokens_per_s=toks / dt, samples_per_s=len(prompts) * a.eval_samples / dt)
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--arch", choices=list(ARCHS), default="deepseek-1.3b")
    ap.add_argument("--trainers", default=",".join(TRAINERS))
    ap.add_argument("--quant", default="lora,qlora", help="lora, qlora or both (QLoRA needs CUDA)")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--batch", type=int, default=16, help="sequences per step (PPO/GRPO: batch/4 prompts x 4)")
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--dataset", default="humaneval")
    ap.add_argument("--workers", type=int, default=8, help="sandbox workers")
    ap.add_argument("--eval", action="store_true", help="also HF generate vs vLLM")
    ap.add_argument("--eval-samples", type=int, default=4)
    ap.add_argument(
        "--peak-tflops", type=float, default=0.0, help="the device's dense bf16 peak (default: known GPUs)"
    )
    ap.add_argument("--out", default="", help="also write the results as JSON here (after every trainer)")
    ap.add_argument("--eval-only", action="store_true", help=argparse.SUPPRESS)  # the --eval child process
    a = ap.parse_args(argv)
    if a.eval_only:
        return _eval_child(a)

    import torch

    from codelib.tasks import load_tasks

    trainers = [t for t in a.trainers.split(",") if t]
    quants = [q for q in a.quant.split(",") if q]
    unknown = sorted(set(trainers) - set(TRAINERS)) + sorted(set(quants) - {"lora", "qlora"})
    if unknown:
        ap.error(f"unknown trainer or quant {unknown}; trainers: {', '.join(TRAINERS)}; quant: lora, qlora")
    cuda = torch.cuda.is_available()
    if "qlora" in quants and not cuda:
        print("QLoRA needs CUDA: skipped on this machine")
        quants = [q for q in quants if q != "qlora"]
    peak = peak_flops(a.peak_tflops)
    results = {
        "arch": a.arch,
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "date": time.strftime("%Y-%m-%d"),
        "steps": a.steps,
        "batch": a.batch,
        "new_tokens": a.new_tokens,
        "rows": [],
        "eval": None,
    }
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["CODELIB_CHECKPOINTS"] = tmp
        model_dir = build_arch(a.arch, Path(tmp))
        tasks = load_tasks(a.dataset, "train")[: max(a.batch * (a.steps + 1), 8)]
        prompt_tokens = mean_prompt_tokens(model_dir, tasks)
        results["params_N"] = flops_n(model_dir)
        for quant in quants:
            for name in trainers:
                if cuda:
                    torch.cuda.empty_cache()
                    torch.cuda.reset_peak_memory_stats()
                t0 = time.time()
                try:
                    r = run_trainer(name, model_dir, quant, a, tasks, prompt_tokens)
                except Exception as e:  # an OOM in one trainer must not lose the others' rows
                    r = {"error": f"{type(e).__name__}: {str(e)[:500]}"}
                    print(f"{name} {quant}: {r['error']}")
                else:
                    r.update(
                        tokens_per_s=r["tokens"] / r["step_s"], mfu=r["flops"] / r["step_s"] / peak if peak else None
                    )
                r.update(
                    trainer=name,
                    quant=quant,
                    wall_s=time.time() - t0,
                    peak_gb=torch.cuda.max_memory_allocated() / 2**30 if cuda else None,
                )
                results["rows"].append(r)
                free_memory()
                write_json(a.out, results)
        if a.eval:
            results["eval"] = eval_in_child(a, Path(tmp))
            write_json(a.out, results)
    report(results)
    write_json(a.out, results)
    return results


def write_json(path: str, results: dict) -> None:
    """The results so far, atomically (a reader sees the old file or the new one)."""
    if not path:
        return
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(json.dumps(results, indent=1))
    os.replace(tmp, out)


def free_memory() -> None:
    """Drop what the last trainer left: Python garbage first (trainers and their optimizers), then torch's cache."""
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def eval_in_child(a, root: Path) -> dict:
    """HF generate vs vLLM in a fresh process (an empty GPU for vLLM); its result, or the error it printed."""
    import subprocess
    import sys

    out = root / "eval.json"
    cmd = [
        sys.executable,
        "-m",
        "bench.gpu",
        "--eval-only",
        "--arch",
        a.arch,
        "--new-tokens",
        str(a.new_tokens),
        "--eval-samples",
        str(a.eval_samples),
        "--dataset",
        a.dataset,
        "--batch",
        str(a.batch),
        "--steps",
        str(a.steps),
        "--out",
        str(out),
    ]
    proc = subprocess.run(cmd, env={**os.environ, "BENCH_GPU_ROOT": str(root)}, capture_output=True, text=True)
    if proc.returncode != 0 or not out.exists():
        return {"error": (proc.stderr or proc.stdout)[-2000:]}
    return json.loads(out.read_text())


def _eval_child(a) -> dict:
    """The --eval child: the same random-weight model dir (BENCH_GPU_ROOT, built by the parent), HF then vLLM."""
    from codelib.tasks import load_tasks

    root = Path(os.environ.get("BENCH_GPU_ROOT") or tempfile.mkdtemp())
    model_dir = build_arch(a.arch, root)
    tasks = load_tasks(a.dataset, "train")[: max(a.batch * (a.steps + 1), 8)]
    res = bench_eval(model_dir, tasks, a)
    write_json(a.out, res)
    return res


def report(res: dict) -> None:
    rows = res["rows"]
    base = {r["quant"]: r["tokens_per_s"] for r in rows if r["trainer"] == "sft" and "error" not in r}
    print(
        f"\n{res['arch']} (N = {res['params_N'] / 1e9:.2f}B for model FLOPs) on {res['device']}, {res['date']}; "
        f"{res['batch']} sequences/step, {res['new_tokens']} new tokens, median of {res['steps'] - 1} steps"
    )
    print(f"{'trainer':<10} {'quant':<6} {'step s':>8} {'tokens/s':>9} {'vs SFT':>7} {'peak GB':>8} {'MFU':>6}")
    for r in rows:
        if "error" in r:
            print(f"{r['trainer']:<10} {r['quant']:<6} failed: {r['error'][:90]}")
            continue
        vs = f"{r['tokens_per_s'] / base[r['quant']]:.2f}x" if r["quant"] in base else "-"
        peak = f"{r['peak_gb']:.1f}" if r["peak_gb"] is not None else "n/a"
        mfu = f"{r['mfu']:.1%}" if r["mfu"] is not None else "n/a"
        print(
            f"{r['trainer']:<10} {r['quant']:<6} {r['step_s']:>8.2f} {r['tokens_per_s']:>9.0f} "
            f"{vs:>7} {peak:>8} {mfu:>6}"
        )
    print("vs SFT: the trainer's tokens/s over plain LoRA SFT's on the same model (the baseline, same run).")
    ev = res.get("eval")
    if ev and "error" in ev:
        print(f"\nevaluation generate failed: {ev['error'][-300:]}")
    elif ev:
        hf = ev["hf"]
        print(
            f"\nevaluation generate: HF {hf['tokens_per_s']:.0f} tokens/s ({hf['samples_per_s']:.1f} samples/s)",
            end="",
        )
        if ev.get("vllm"):
            v = ev["vllm"]
            print(f"; vLLM {v['tokens_per_s']:.0f} tokens/s: {v['tokens_per_s'] / hf['tokens_per_s']:.2f}x HF")
        else:
            print("; vLLM not installed (pip install -r requirements-vllm.txt)")
    print(json.dumps(res))


if __name__ == "__main__":
    main()
