"""Several processes: where each rank's model goes, how a sharded adapter is gathered for saving, and what a sharded
run refuses. The trainers call these at a few places; everything here is a no-op in one process.

- `rank_device_map()` (from `codelib.policy.models`, where placement lives): the `device_map` of a model that
  places itself (4-bit QLoRA): this rank's own GPU, read from accelerate's state
  (`PartialState().local_process_index`), never `torch.cuda.current_device()` (GPU 0 on every rank before accelerate
  has set the device).
- `sharding(model)`: "" (one process, DDP), "fsdp1", "fsdp2" or "deepspeed"; `gathered_trainable_state(model)`: the
  full trainable tensors (the LoRA adapter, modules_to_save) of an FSDP-sharded model, a collective every rank
  calls; `save_gathered(accelerator, model, tokenizer, out)`: every rank gathers, the main process writes.
- `refuse_rank0_work(accelerator, cfg)` and `refuse_sharded_loop(accelerator)`: what would hang or break under
  sharding is stopped at the start of a run with a message naming the fix.

DeepSpeed is not supported: its accelerate configs were removed (deepspeed is neither pinned nor installed, and
`accelerator.prepare` refuses a policy and a value head together under it). FSDP means torch's FSDP (1 or 2)
through accelerate, for the TRL stages (SFT, DPO, GRPO with `backend: trl`); our own loops run DDP.
"""

from __future__ import annotations

import torch

from codelib.policy.models import rank_device_map, save_adapter

__all__ = [
    "check_update_fits",
    "gathered_trainable_state",
    "grpo_batches",
    "rank_device_map",
    "refuse_rank0_work",
    "refuse_sharded_loop",
    "save_gathered",
    "sharding",
]

SHARDED_LOOP = (
    "{kind} shards the weights across processes; our own loops (REINFORCE, PPO, the own-engine GRPO) sample from "
    "the unwrapped policy on each rank, which needs every weight there. Run them with DDP "
    "(params/accelerate/multi_gpu.yaml); FSDP is for the TRL stages (SFT, DPO, GRPO with backend: trl)."
)
SHARDED_EVAL = (
    "eval_every > 0 under {kind}: the held-out evaluation runs on the main process alone, and a sharded forward "
    "needs every process, so the run would hang. Set eval_every: 0 (and keep: last) and evaluate the saved adapter "
    "with the eval stage afterwards, or train with DDP (params/accelerate/multi_gpu.yaml)."
)
DEEPSPEED = (
    "DeepSpeed is not supported (not pinned, not installed, its accelerate configs were removed; see docs/gpu.md): "
    "use params/accelerate/multi_gpu.yaml (DDP) or params/accelerate/fsdp.yaml (torch FSDP, TRL stages)."
)


def _kind(accelerator) -> str:
    """The sharding an Accelerator (anything with `distributed_type`) runs: "FSDP", "DeepSpeed" or ""."""
    t = str(getattr(accelerator, "distributed_type", "")).split(".")[-1]
    return {"FSDP": "FSDP", "DEEPSPEED": "DeepSpeed"}.get(t, "")


def refuse_sharded_loop(accelerator) -> None:
    """Our own loops: DDP or one process only (raises under FSDP / DeepSpeed)."""
    kind = _kind(accelerator)
    if kind == "DeepSpeed":
        raise RuntimeError(DEEPSPEED)
    if kind:
        raise RuntimeError(SHARDED_LOOP.format(kind=kind))


def refuse_rank0_work(accelerator, cfg) -> None:
    """TRL stages: refuse what runs on the main process alone (held-out eval, keep: best) under sharding."""
    kind = _kind(accelerator)
    if kind == "DeepSpeed":
        raise RuntimeError(DEEPSPEED)
    if kind and getattr(cfg, "eval_every", 0) > 0:
        raise RuntimeError(SHARDED_EVAL.format(kind=kind))


def sharding(model) -> str:
    """How `model`'s parameters are split over processes: "" (not at all), "fsdp1", "fsdp2" or "deepspeed"."""
    from torch.distributed.fsdp import FullyShardedDataParallel

    if any(isinstance(m, FullyShardedDataParallel) for m in model.modules()):
        return "fsdp1"
    params = list(model.parameters())
    if any(hasattr(p, "ds_id") for p in params):
        return "deepspeed"
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # pragma: no cover - torch without DTensor
        return ""
    return "fsdp2" if any(isinstance(p, DTensor) for p in params) else ""


WRAPPED = "_fsdp_wrapped_module."  # FSDP1's name for the module it wraps (nested units keep it inside names)


def _clean(name: str) -> str:
    """A parameter name as `accelerator.unwrap_model(model)` gives it: the root wrapper's prefix off. Nested FSDP1
    units keep theirs (peft looks its modules_to_save up by those names); `models.save_adapter` strips them from
    the file it writes."""
    return name.removeprefix(WRAPPED)


def gathered_trainable_state(model) -> dict[str, torch.Tensor] | None:
    """{name: full tensor on the CPU} of every trainable parameter of a sharded model, names as the unwrapped model
    gives them; None when `model` is not sharded (each process then holds the whole adapter).

    A collective: every rank must call it, in the same order. FSDP1 (accelerate's `fsdp_version: 1`, which needs
    `use_orig_params: true` to keep LoRA's frozen/trainable split) gathers under `summon_full_params`; FSDP2 gathers
    each trainable DTensor with `full_tensor()`. Only the trainable tensors are kept (the adapter is megabytes; the
    frozen base is never kept). Under FSDP1 only rank 0's dict is filled (the one that writes)."""
    kind = sharding(model)
    if not kind:
        return None
    if kind == "deepspeed":
        raise RuntimeError(DEEPSPEED)
    out: dict[str, torch.Tensor] = {}
    if kind == "fsdp1":
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

        main = not torch.distributed.is_initialized() or torch.distributed.get_rank() == 0
        # rank 0 gets the full tensors (a GPU's offloaded to CPU memory: offload_to_cpu on CPU-resident shards
        # crashed torch 2.13 with nested FSDP units); the other ranks' views stay sharded and are not read
        offload = any(p.is_cuda for p in model.parameters())
        # names from outside the context: inside it FSDP drops every wrapper prefix, nested ones too
        names = [_clean(n) for n, p in model.named_parameters() if p.requires_grad]
        with FSDP.summon_full_params(model, writeback=False, rank0_only=True, offload_to_cpu=offload):
            if main:
                full = [p for _, p in model.named_parameters() if p.requires_grad]
                assert len(full) == len(names), "FSDP changed the trainable parameters while gathering"
                out = {n: p.detach().clone().cpu() for n, p in zip(names, full, strict=True)}
        return out
    from torch.distributed.tensor import DTensor

    for name, p in model.named_parameters():
        if p.requires_grad:
            full = p.full_tensor() if isinstance(p, DTensor) else p
            out[_clean(name)] = full.detach().clone().cpu()
    return out


def save_gathered(accelerator, model, tokenizer, out, save=None) -> None:
    """Every rank calls this: a sharded model's trainable tensors are gathered (a collective), then the main process
    writes the adapter through `save(unwrapped_model, tokenizer, out, state_dict)` (default:
    `models.save_adapter`). Unsharded, the main process saves its own copy."""
    save = save or (lambda m, tok, o, sd: save_adapter(m, tok, o, state_dict=sd))
    state = gathered_trainable_state(model)
    if accelerator.is_main_process:
        save(accelerator.unwrap_model(model), tokenizer, out, state)
    accelerator.wait_for_everyone()


LOGITS_BUDGET_GB = 8.0  # what one GRPO micro-batch's logits may take on a GPU (bf16 logits, their gradient, temps)
LOGIT_BYTES = 8  # bytes per (token, vocab) entry in TRL's GRPO loss: bf16 logits + bf16 gradient + fp32 row temps


def grpo_batches(
    completions: int, processes: int, tokens: int = 0, vocab: int = 0, budget_gb: float = LOGITS_BUDGET_GB
) -> tuple[int, int]:
    """(per-device micro-batch, gradient accumulation steps) for TRL's GRPOTrainer, so that one optimizer step is
    `completions` completions in all, however many processes share it (as our loops split a fixed batch), and one
    micro-batch's logits stay under `budget_gb`.

    TRL sizes its generation batch as per_device_train_batch_size x processes x steps_per_generation: passing the
    whole step as the per-device batch (as one process needs) would make a step N times larger under N processes.
    A long-context, large-vocabulary run needs micro-batches: mbpp-taco's 64 completions of up to 2048 tokens over
    Qwen2.5's 151,936-token vocabulary are ~160 GB of logits in one forward; at the 8 GB budget they run as 32
    micro-batches of 2 (tokens: prompt + completion budget; vocab 0: no cap)."""
    if processes < 1 or completions % processes:
        raise ValueError(
            f"GRPO's step of {completions} completions (prompts_per_step x num_generations) does not split over "
            f"{processes} processes: choose prompts_per_step so that the product is a multiple of the process count "
            f"(or launch {'/'.join(str(d) for d in range(1, completions + 1) if completions % d == 0)} processes)"
        )
    per_rank = completions // processes
    cap = per_rank
    if tokens and vocab:
        cap = max(1, int(budget_gb * 2**30 // (tokens * vocab * LOGIT_BYTES)))
    micro = max(d for d in range(1, per_rank + 1) if per_rank % d == 0 and d <= cap)
    return micro, per_rank // micro


def check_update_fits(rows: int, tokens: int, vocab: int, budget_gb: float = LOGITS_BUDGET_GB) -> None:
    """Refuse an update forward whose logits alone would not fit: `rows` sequences of up to `tokens` tokens over a
    `vocab`-token vocabulary in one forward/backward (the own engine's minibatch), with the fix in the message."""
    need = rows * tokens * vocab * LOGIT_BYTES / 2**30
    if need > budget_gb:
        micro, _ = grpo_batches(rows, 1, tokens, vocab, budget_gb)
        raise RuntimeError(
            f"one update forward of {rows} sequences x {tokens} tokens x {vocab} vocabulary needs ~{need:.0f} GB for "
            f"its logits alone (budget {budget_gb:.0f} GB): it will not fit a GPU. Run it in micro-batches of "
            f"{micro} (backend: trl does: distributed.grpo_batches), or lower prompts_per_step x num_generations, "
            "max_prompt_tokens or max_new_tokens."
        )
