"""vLLM as a generation backend (optional; GPU only): how a checkpoint is served (as LoRA on its base, or merged),
loading it, and sampling. `codelib.policy.generation.generate(..., backend="vllm")` comes here; nothing imports vLLM
until a run asks for it."""

from __future__ import annotations

import json
from pathlib import Path

from codelib.plumbing.params import resolve
from codelib.policy.models import _resolve_base, build_tiny_model, merge_adapter

VLLM_MISSING = (
    "backend='vllm' needs the vllm package, which is not installed: pip install -r requirements-vllm.txt "
    "(it needs a CUDA GPU); or use backend='hf'"
)

# vLLM 0.30.0 (vllm/v1/worker/utils.py, request_memory) refuses to start when the GPU's free memory is below
# gpu_memory_utilization x total; its default share is 0.92 (vllm/entrypoints/llm.py). We ask for what is free now,
# less a margin, and at most VLLM_MAX_SHARE.
VLLM_MAX_SHARE = 0.9
VLLM_MARGIN = 0.04  # of the card: the CUDA context, allocator slack, and what vLLM's own profiling run adds
VLLM_MIN_SHARE = 0.1


def vllm_memory_share(free: int, total: int, want: float = VLLM_MAX_SHARE) -> float:
    """The `gpu_memory_utilization` to start vLLM with when `free` of `total` bytes are free: min(want, free share -
    margin). Raises when too little is free (a model still loaded in this process, another process on the GPU)."""
    share = min(want, free / total - VLLM_MARGIN)
    if share < VLLM_MIN_SHARE:
        raise RuntimeError(
            f"vLLM needs GPU memory: only {free / 2**30:.1f} of {total / 2**30:.1f} GiB are free. Free the GPU first "
            "(del the HF model, gc.collect(), torch.cuda.empty_cache()), or run the vLLM step in its own process."
        )
    return round(share, 3)


def memory_kwargs(llm_kwargs: dict) -> dict:
    """gpu_memory_utilization sized from the GPU's free memory unless the caller set it; nothing without CUDA."""
    if "gpu_memory_utilization" in llm_kwargs:
        return {}
    import torch

    if not torch.cuda.is_available():
        return {}
    free, total = torch.cuda.mem_get_info()
    return {"gpu_memory_utilization": vllm_memory_share(free, total)}


def _vllm():
    try:
        import vllm
    except ImportError as e:
        raise ImportError(VLLM_MISSING) from e
    return vllm


# What vLLM's LoRA serving takes: low-rank deltas on the projection layers. An adapter that also trains modules in
# full (peft `modules_to_save`, e.g. our RMSNorms) or targets anything else is merged and served as a full model.
VLLM_LORA_MODULES = frozenset({"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"})


def vllm_plan(name_or_path: str) -> dict:
    """How vLLM will serve a checkpoint, without importing vLLM: {"model": dir or hub id, "lora": adapter dir or
    None, "rank": LoRA rank, "merged": whether the adapter had to be merged first (and why)}."""
    name = str(name_or_path)
    if name == "tiny":
        return {"model": str(build_tiny_model()), "lora": None, "rank": 0, "merged": ""}
    path = resolve(name)
    if not (path / "adapter_config.json").is_file():
        return {"model": str(path) if path.exists() else name, "lora": None, "rank": 0, "merged": ""}
    cfg = json.loads((path / "adapter_config.json").read_text())
    targets = cfg.get("target_modules") or []
    targets = [targets] if isinstance(targets, str) else list(targets)
    why = ""
    if cfg.get("modules_to_save"):
        why = f"modules_to_save {cfg['modules_to_save']} (trained in full) cannot be served as LoRA"
    elif cfg.get("peft_type", "LORA") != "LORA":
        why = f"peft_type {cfg.get('peft_type')} is not LoRA"
    elif not set(targets) <= VLLM_LORA_MODULES:
        why = f"target_modules {sorted(set(targets) - VLLM_LORA_MODULES)} are not LoRA-servable by vLLM"
    if why:
        return {"model": str(merge_adapter(path)), "lora": None, "rank": 0, "merged": why}
    base = _resolve_base(cfg.get("base_model_name_or_path") or "")
    if not base:
        raise ValueError(f"{path / 'adapter_config.json'} does not name its base model (base_model_name_or_path)")
    base = str(build_tiny_model()) if base == "tiny" else base
    return {"model": base, "lora": str(path.resolve()), "rank": int(cfg.get("r", 16)), "merged": ""}


def load_vllm(name_or_path: str, **llm_kwargs):
    """(vllm.LLM, LoRARequest | None) for a hub name, a model dir, "tiny" or a LoRA adapter dir.

    A plain LoRA adapter is served without merging (its base is loaded with enable_lora); one vLLM cannot serve as
    LoRA (see `vllm_plan`) is merged into its base first (cached in <adapter>/merged). gpu_memory_utilization
    defaults to what is free on the GPU now (`vllm_memory_share`); pass it to override.
    Keywords checked against vLLM 0.30.0's `LLM.__init__` / `EngineArgs` (enable_lora, max_lora_rank,
    gpu_memory_utilization) and `LoRARequest(lora_name, lora_int_id, lora_path)`.
    """
    vllm = _vllm()
    plan = vllm_plan(name_or_path)
    llm_kwargs = {**memory_kwargs(llm_kwargs), **llm_kwargs}
    if plan["merged"]:
        print(f"vLLM: serving {name_or_path} merged into its base: {plan['merged']}")
    if plan["lora"] is None:
        return vllm.LLM(model=plan["model"], **llm_kwargs), None
    from vllm.lora.request import LoRARequest

    llm = vllm.LLM(model=plan["model"], enable_lora=True, max_lora_rank=_lora_rank_slot(plan["rank"]), **llm_kwargs)
    return llm, LoRARequest(Path(plan["lora"]).name, 1, plan["lora"])


def _lora_rank_slot(rank: int) -> int:
    """vLLM's max_lora_rank takes one of a few sizes: the smallest that holds `rank`."""
    for slot in (8, 16, 32, 64, 128, 256, 320, 512):
        if rank <= slot:
            return slot
    raise ValueError(f"LoRA rank {rank} is above what vLLM serves (512); merge the adapter first")


def sample_vllm(model, prompts, n, temperature, top_p, max_new_tokens, seed, stop) -> tuple[list[list], object]:
    """n samples per prompt from vLLM: ([[token ids of each sample] per prompt], the tokenizer). `model`: a `vllm.LLM`
    or anything `load_vllm` takes."""
    vllm = _vllm()
    llm, lora = (model, None) if isinstance(model, vllm.LLM) else load_vllm(str(model))
    tokenizer = llm.get_tokenizer()
    params = vllm.SamplingParams(
        n=n,
        temperature=temperature,
        top_p=top_p if temperature > 0 else 1.0,
        max_tokens=max_new_tokens,
        seed=seed,
        stop=list(stop) or None,  # generation.trim then applies the same cut as the HF path
        include_stop_str_in_output=True,
    )
    results = llm.generate(list(prompts), params, lora_request=lora)
    return [[list(o.token_ids) for o in r.outputs] for r in results], tokenizer
