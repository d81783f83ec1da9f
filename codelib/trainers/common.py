"""Plumbing the online RL loops (REINFORCE, PPO) share: the policy, token log-probs, rollouts, checkpoints.

The algorithms themselves (advantages, losses, the update) live in each trainer's own file.

The policy for RL is the starting checkpoint with its LoRA adapter merged into the weights, plus a fresh
LoRA adapter that RL trains (B = 0 at the start, so step 0 *is* the starting policy). The frozen reference
for the KL we log is then the same network with the adapter disabled: no second copy of the model.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from codelib.params import REPO_ROOT, resolve

# ---------------------------------------------------------------------------------------------------------------
# the policy


def merge_adapter(
    adapter_dir: str | os.PathLike, out_dir: str | os.PathLike | None = None, force: bool = False
) -> Path:
    """Write `adapter_dir`'s base with the adapter merged in as a full HF model dir (cached; atomic).

    Default out_dir: <adapter_dir>/merged. The merged model's logits equal the adapter model's.
    """
    from codelib.models import load_policy

    adapter_dir = resolve(adapter_dir)
    out = Path(out_dir) if out_dir else adapter_dir / "merged"
    stamp = out / "merged_from.json"
    src_mtime = (adapter_dir / "adapter_config.json").stat().st_mtime
    complete = (out / "config.json").exists() and any(out.glob("*.safetensors"))
    if not force and complete and stamp.exists() and json.loads(stamp.read_text()).get("mtime") == src_mtime:
        return out
    import tempfile

    model, tokenizer = load_policy(adapter_dir)
    merged = model.merge_and_unload()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}-"))  # private: concurrent merges never collide
    merged.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / "merged_from.json").write_text(json.dumps({"adapter": str(adapter_dir), "mtime": src_mtime}))
    old = out.with_name(f".{out.name}-old-{os.getpid()}")
    if out.exists():
        os.replace(out, old)  # readers see the old dir or the new one, never a half-deleted one
    os.replace(tmp, out)
    shutil.rmtree(old, ignore_errors=True)
    return out


def starting_model_dir(init: str) -> str:
    """A full model to put the RL adapter on: an adapter dir is merged first; a model dir or hub id as is."""
    path = resolve(init) if init != "tiny" else None
    if path is not None and (path / "adapter_config.json").is_file():
        from accelerate import PartialState

        # several processes: the main one merges (or finds the cached merge), the others then read it
        with PartialState().main_process_first():
            return str(merge_adapter(path))
    if path is not None and path.exists():
        return str(path)
    return init  # "tiny" or a hub id


def load_rl_policy(cfg):
    """(peft model with a fresh trainable LoRA adapter on the merged start policy, tokenizer) for a trainer Config."""
    from peft import get_peft_model

    from codelib.models import load_policy
    from codelib.trainers.sft import lora_config

    base, tokenizer = load_policy(starting_model_dir(cfg.init), load_in_4bit=cfg.load_in_4bit, trainable=True)
    lora = lora_config(cfg)
    # LoRA's A matrices are drawn from torch's RNG: seed here, so a first run (which also merges the start
    # adapter, drawing from the RNG) and a later one start from the same adapter
    torch.manual_seed(cfg.seed)
    model = get_peft_model(base, lora)
    return model, tokenizer


def trainable_state(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.named_parameters() if v.requires_grad}


# ---------------------------------------------------------------------------------------------------------------
# log-probs of completions under the policy


@dataclass
class Batch:
    """Prompt + completion token rows, right-padded, and which target positions are completion tokens."""

    input_ids: torch.Tensor  # [B, T]
    attention_mask: torch.Tensor  # [B, T]
    completion_mask: torch.Tensor  # [B, T-1]: 1 where target token t+1 belongs to the completion


def make_batch(prompt_ids: list[list[int]], completion_ids: list[list[int]], pad_id: int, device=None) -> Batch:
    rows = [p + c for p, c in zip(prompt_ids, completion_ids, strict=True)]
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    att = torch.zeros((len(rows), width), dtype=torch.long)
    comp = torch.zeros((len(rows), width - 1), dtype=torch.float)
    for i, (p, c) in enumerate(zip(prompt_ids, completion_ids, strict=True)):
        ids[i, : len(p) + len(c)] = torch.tensor(p + c)
        att[i, : len(p) + len(c)] = 1
        # logits at position t predict token t+1: completion tokens p..p+c-1 are predicted at p-1..p+c-2
        comp[i, len(p) - 1 : len(p) + len(c) - 1] = 1.0
    if device is not None:
        ids, att, comp = ids.to(device), att.to(device), comp.to(device)
    return Batch(ids, att, comp)


def token_logprobs(model, batch: Batch, with_entropy: bool = False, with_hidden: bool = False):
    """Per-token log p(token | prefix) of every target position: [B, T-1] (+ entropy [B, T-1], hidden [B, T-1, H])."""
    out = model(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask,
        output_hidden_states=with_hidden,
        use_cache=False,
    )
    logits = out.logits[:, :-1].float()  # [B, T-1, V]
    logp_all = torch.log_softmax(logits, dim=-1)  # [B, T-1, V]
    logp = logp_all.gather(-1, batch.input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)  # [B, T-1]
    extras = {}
    if with_entropy:
        extras["entropy"] = -(logp_all.exp() * logp_all).sum(-1)  # [B, T-1]
    if with_hidden:
        extras["hidden"] = out.hidden_states[-1][:, :-1]  # [B, T-1, H]: the state that predicts token t+1
    return (logp, extras) if extras else logp


@torch.no_grad()
def reference_logprobs(model, batch: Batch) -> torch.Tensor:
    """log-probs under the start policy: the same network with the RL adapter switched off."""
    with model.disable_adapter():
        return token_logprobs(model, batch)


def kl_to_start(logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor) -> float:
    """Mean per-token KL(policy || start) estimate on sampled tokens (k3: exp(r) - 1 - r, r = ref - policy)."""
    r = (ref_logp - logp).clamp(-20, 20)
    k3 = r.exp() - 1 - r  # [B, T-1], >= 0, unbiased for KL
    return float((k3 * mask).sum() / mask.sum().clamp(min=1))


# ---------------------------------------------------------------------------------------------------------------
# rollouts: sample from the policy, judge in the sandbox


@dataclass
class Rollouts:
    tasks: list  # [N] Task per completion
    prompt_ids: list[list[int]]
    completion_ids: list[list[int]]
    texts: list[str]
    passed: torch.Tensor  # [N] 1.0 / 0.0
    test_fraction: torch.Tensor  # [N]
    lengths: torch.Tensor  # [N] generated tokens
    generate_s: float
    sandbox_s: float
    columns: dict  # Task fields as lists, one entry per completion (the reward functions' kwargs)


def rollout(model, tokenizer, tasks, n_per_task, temperature, top_p, max_new_tokens, seed, workers, timeout_s):
    """n_per_task completions of each task (grouped: task i's samples are rows i*n .. i*n+n-1), judged."""
    from codelib import rewards, sandbox
    from codelib.generation import encode_prompts, generate, stops_for
    from codelib.tasks import tasks_to_rows

    t0 = time.time()
    stop = stops_for(tasks[0])
    groups = generate(
        model,
        tokenizer,
        [t.prompt for t in tasks],
        n=n_per_task,
        temperature=temperature,
        top_p=top_p,
        max_new_tokens=max_new_tokens,
        batch_size=len(tasks) * n_per_task,
        seed=seed,
        stop=stop,
        progress=False,
    )
    t1 = time.time()
    prompt_ids = encode_prompts(tokenizer, [t.prompt for t in tasks])
    flat_tasks, p_ids, c_ids, texts = [], [], [], []
    for t, p, group in zip(tasks, prompt_ids, groups, strict=True):
        for c in group:
            flat_tasks.append(t)
            p_ids.append(p)
            c_ids.append(c.ids if c.ids else [tokenizer.eos_token_id])  # an empty completion still has a token
            texts.append(c.text)
    sandbox.configure(workers=workers, timeout_s=timeout_s)
    columns = {k: [row[k] for row in tasks_to_rows(flat_tasks)] for k in tasks_to_rows(flat_tasks[:1])[0]}
    # one Sandbox.map for the batch; the verdicts are cached, so reward terms computed later reuse them
    verdicts = rewards.verdicts(texts, **columns)
    t2 = time.time()
    passed = torch.tensor([1.0 if v.passed else 0.0 for v in verdicts])
    frac = torch.tensor([v.tests_passed / v.tests_total if v.tests_total else float(v.passed) for v in verdicts])
    lengths = torch.tensor([float(len(c)) for c in c_ids])
    return Rollouts(flat_tasks, p_ids, c_ids, texts, passed, frac, lengths, t1 - t0, t2 - t1, columns)


def reward_terms(ro: Rollouts, weights: dict[str, float], alpha: float) -> tuple[torch.Tensor, dict[str, float]]:
    """reward = sum_i w_i * term_i - alpha * tokens / 100, per completion, and each term's batch mean.

    weights: reward name -> weight (names of `codelib.rewards.REWARDS`); {"pass": 1.0} is the plain
    pass/fail reward. A term that does not apply to a row (None) counts 0 there.
    """
    from codelib import rewards

    total = torch.zeros(len(ro.texts))
    means = {}
    for name, w in weights.items():
        fn = rewards.make_reward(name)
        vals = torch.tensor([0.0 if v is None else float(v) for v in fn(ro.texts, **ro.columns)])  # [N]
        total += w * vals
        means[f"rewards/{getattr(fn, '__name__', name)}/mean"] = float(vals.mean())
    length = -alpha * ro.lengths / 100.0  # [N]
    means["rewards/length_penalty/mean"] = float(length.mean())
    return total + length, means


def batch_tasks(tasks: list, batch_size: int, step: int, seed: int) -> list:
    """The tasks of one step: a function of (seed, step) alone, so a resumed run sees the same batches."""
    rng = random.Random(seed * 1_000_003 + step)
    return rng.sample(tasks, min(batch_size, len(tasks)))


# ---------------------------------------------------------------------------------------------------------------
# checkpoints that resume exactly


def save_checkpoint(run_dir: Path, model, optimizer, step: int, extra: dict | None = None, extra_modules=None,
                    fingerprint: str = ""):  # fmt: skip
    """Trainable weights, optimizer, RNG states and step into run_dir/checkpoint (replaced atomically)."""
    tmp = run_dir / "checkpoint.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    state = {
        "step": step,
        "trainable": {k: v.detach().cpu() for k, v in model.named_parameters() if v.requires_grad},
        "optimizer": optimizer.state_dict(),
        "rng": {"torch": torch.get_rng_state(), "python": random.getstate()},
        "extra": extra or {},
        "modules": {k: m.state_dict() for k, m in (extra_modules or {}).items()},
        "fingerprint": fingerprint,
    }
    torch.save(state, tmp / "state.pt")
    old = run_dir / "checkpoint.old"
    shutil.rmtree(old, ignore_errors=True)
    if (run_dir / "checkpoint").exists():
        os.replace(run_dir / "checkpoint", old)
    os.replace(tmp, run_dir / "checkpoint")
    shutil.rmtree(old, ignore_errors=True)


# settings that may change between a stop and a resume (`steps`: a run can be extended)
OPERATIONAL = {"save_every", "report_to", "threads", "processes", "workers", "timeout_s", "steps"}


def config_fingerprint(cfg) -> str:
    """A hash of the settings that shape training (not of how often it saves or how many workers judge)."""
    import dataclasses
    import hashlib

    values = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in OPERATIONAL}
    return hashlib.sha256(json.dumps(values, sort_keys=True, default=str).encode()).hexdigest()[:16]


def load_checkpoint(run_dir: Path, model, optimizer, extra_modules=None, fingerprint: str = "",
                    max_step: int | None = None) -> tuple[int, dict]:  # fmt: skip
    """Restore a checkpoint if there is one: (step to start from, extra); (0, {}) for a fresh run.

    A checkpoint written under other settings (fingerprint differs), or one already past `max_step` (the run now
    asks for fewer steps), is not resumed: it is moved to checkpoint.previous and the run starts over.
    """
    path = run_dir / "checkpoint" / "state.pt"
    if not path.exists():
        path = run_dir / "checkpoint.old" / "state.pt"  # a stop between the two renames
        if not path.exists():
            return 0, {}
    state = torch.load(path, weights_only=False)
    stale = fingerprint and state.get("fingerprint", fingerprint) != fingerprint
    if stale or (max_step is not None and state["step"] > max_step):
        print(
            f"{run_dir}: the checkpoint was written with other settings; starting over (kept as checkpoint.previous)"
        )
        shutil.rmtree(run_dir / "checkpoint.previous", ignore_errors=True)
        os.replace(path.parent, run_dir / "checkpoint.previous")
        return 0, {}
    params = dict(model.named_parameters())
    with torch.no_grad():
        for k, v in state["trainable"].items():
            params[k].copy_(v)
    optimizer.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["rng"]["torch"])
    random.setstate(state["rng"]["python"])
    for k, m in (extra_modules or {}).items():
        m.load_state_dict(state["modules"][k])
    return state["step"], state["extra"]


def truncate_metrics(path: Path, step: int) -> None:
    """Drop metric rows past `step` (written after the checkpoint a resumed run starts from)."""
    from codelib.params import atomic_write_text, read_jsonl

    if path.exists():
        rows = [r for r in read_jsonl(path) if r.get("step", 0) <= step]
        atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in rows))


def rollout_samples(acc, step: int, ro: Rollouts, rewards: torch.Tensor, advantages: torch.Tensor | None = None):
    """One samples.jsonl row per completion of the step, from every rank (gathered; the main process writes them)."""
    from accelerate.utils import gather_object

    rows = []
    for i, (task, text) in enumerate(zip(ro.tasks, ro.texts, strict=True)):
        row = {"step": step, "task_id": task.task_id, "completion": text, "reward": round(float(rewards[i]), 6),
               "passed": bool(ro.passed[i]), "test_fraction": round(float(ro.test_fraction[i]), 6),
               "tokens": int(ro.lengths[i])}  # fmt: skip
        if advantages is not None:
            row["advantage"] = round(float(advantages[i]), 6)
        rows.append(row)
    return gather_object(rows) if acc.num_processes > 1 else rows


def append_samples(run_dir: Path, rows: list[dict]) -> None:
    """Append rows to <run>/samples.jsonl (the main process only); a resumed run first drops rows past its step."""
    if rows:
        with open(run_dir / "samples.jsonl", "a", encoding="utf-8") as f:
            f.write("".join(json.dumps(r) + "\n" for r in rows))


def save_final(run_dir: Path, model, tokenizer) -> None:
    """The trained adapter + tokenizer in the run dir, so `load_policy(run_dir)` loads the RL policy."""
    from codelib.trainers.sft import save_adapter

    save_adapter(model, tokenizer, run_dir)


def check_finite(loss: torch.Tensor, step: int) -> None:
    if not math.isfinite(float(loss)):
        raise FloatingPointError(
            f"loss is {float(loss)} at step {step}: training stopped. The last good checkpoint is kept; "
            "lower learning_rate or raise max_grad_norm clipping, then rerun (it resumes from the checkpoint)."
        )


def seed_everything(seed: int, threads: int = 0) -> None:
    random.seed(seed)
    torch.manual_seed(seed)
    if threads:
        torch.set_num_threads(threads)


def relative_to_repo(path: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


class MetricsLog:
    """One row per step to metrics.jsonl (the project's record), mirrored to TensorBoard when asked."""

    def __init__(self, run_dir: Path, report_to: str = "tensorboard"):
        self.path = run_dir / "metrics.jsonl"
        self.tb = None
        if report_to == "tensorboard":
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.tb = SummaryWriter(str(run_dir / "tb"))
            except ImportError:  # tensorboard is in requirements.txt; a trimmed install just skips it
                self.tb = None
        elif report_to == "wandb":
            try:
                import wandb

                self.wandb = wandb.init(project="codelib", dir=str(run_dir), name=run_dir.name, resume="allow")
            except ImportError:
                print("report_to: wandb is not installed (pip install wandb); metrics.jsonl only")

    def log(self, row: dict) -> None:
        from codelib.params import append_jsonl

        append_jsonl(self.path, row)
        step = row.get("step", 0)
        if self.tb is not None:
            for k, v in row.items():
                if k != "step" and isinstance(v, (int, float)):
                    self.tb.add_scalar(k, v, step)
        if getattr(self, "wandb", None) is not None:
            self.wandb.log(row, step=step)

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()


# ---------------------------------------------------------------------------------------------------------------
# several processes (accelerate launch): each rank rolls out and scores its shard, gradients are averaged


def accelerator():
    """An Accelerator for our own loops: one process as is, or DDP under `accelerate launch`."""
    from accelerate import Accelerator

    return Accelerator(cpu=not torch.cuda.is_available())


def shard(items: list, acc) -> list:
    """This rank's share of a batch (every rank gets the same count when the batch divides evenly)."""
    return items[acc.process_index :: acc.num_processes]


def gather(acc, t: torch.Tensor) -> torch.Tensor:
    """Concatenate a per-rank tensor over ranks (the identity in one process)."""
    if acc.num_processes == 1:
        return t
    return acc.gather(t.to(acc.device).contiguous()).cpu()


def write_rank_checksums(model, run: Path) -> None:
    """Every rank's sum of its trainable weights into run/ranks.json: identical sums = synchronised training."""
    import torch.distributed as dist

    total = sum(float(p.detach().double().sum()) for p in model.parameters() if p.requires_grad)
    if dist.is_available() and dist.is_initialized():
        sums = [None] * dist.get_world_size()
        dist.all_gather_object(sums, total)
        main = dist.get_rank() == 0
    else:
        sums, main = [total], True
    if main:
        from codelib.params import atomic_write_json

        atomic_write_json(run / "ranks.json", {"processes": len(sums), "trainable_sums": sums})
