"""Policies: load one by hub name, local directory or LoRA adapter directory; LoRA adapters on it, saved and merged.

Everything downstream calls `load_policy`, so a stage does not care whether its policy is
`deepseek-ai/deepseek-coder-1.3b-base`, a merged checkpoint on disk, an SFT adapter, or `"tiny"` (built on demand
by `codelib.policy.tiny`). The adapter plumbing every trainer shares lives here too: `lora_config(cfg)`, `add_lora`
(a fresh adapter on a merged start policy), `save_adapter` (atomic) and `merge_adapter` (cached).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path

import torch
from accelerate import PartialState
from peft import LoraConfig, PeftModel, get_peft_model, prepare_model_for_kbit_training
from transformers import AutoModelForCausalLM, AutoTokenizer, BitsAndBytesConfig

from codelib.plumbing.params import resolve
from codelib.plumbing.paths import REPO_ROOT
from codelib.policy.logprobs import activations_checkpointed
from codelib.policy.tiny import (
    BOS,
    BUILD_FILE,
    EOS,
    PAD,
    TINY_DIR,
    TinyBuild,
    build_tiny_model,
    tiny_texts,
    train_tokenizer,
)

__all__ = [
    "BOS",
    "BUILD_FILE",
    "EOS",
    "PAD",
    "TINY_DIR",
    "TinyBuild",
    "build_tiny_model",
    "tiny_texts",
    "train_tokenizer",
    "DEFAULT_TARGETS",
    "adapters_fp32",
    "add_lora",
    "load_policy",
    "lora_config",
    "merge_adapter",
    "placement",
    "rank_device_map",
    "save_adapter",
    "starting_model_dir",
]

# ---------------------------------------------------------------------------------------------------------------
# loading a policy

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")


def _resolve_base(name: str) -> str:
    """An adapter's base model: as recorded, or the same checkpoint under this repo if the repo has moved."""
    if name == "tiny" or Path(name).exists() or not Path(name).is_absolute():
        return name
    parts = Path(name).parts
    if "checkpoints" in parts:
        moved = REPO_ROOT.joinpath(*parts[len(parts) - parts[::-1].index("checkpoints") - 1 :])
        if moved.exists():
            return str(moved)
    return name


def _load_tokenizer(source: str | Path):
    tokenizer = AutoTokenizer.from_pretrained(source)
    tokenizer.padding_side = "left"  # decoder-only generation pads on the left
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def _load_model(source: str | Path, load_in_4bit: bool, dtype, device_map):
    kwargs = {}
    if dtype is not None:
        kwargs["dtype"] = getattr(torch, dtype) if isinstance(dtype, str) and dtype != "auto" else dtype
    if device_map is not None:
        kwargs["device_map"] = device_map
    if load_in_4bit:
        compute = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type="nf4",
            bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=compute,
        )
        kwargs.setdefault("dtype", compute)
        # this rank's own GPU (accelerate's state reads LOCAL_RANK); torch.cuda.current_device() is 0 on every rank
        # until accelerate sets the device, which it has not yet when the policy loads
        kwargs.setdefault("device_map", rank_device_map())
    try:
        return AutoModelForCausalLM.from_pretrained(source, **kwargs)
    except OSError as e:
        if Path(str(source)).exists():
            raise
        raise FileNotFoundError(
            f"{source!r} is not a local directory and could not be loaded from the Hugging Face Hub: {e}"
        ) from e


def load_policy(name_or_path, load_in_4bit: bool = False, dtype=None, device_map=None, trainable: bool = False):
    """Load a causal-LM policy and its tokenizer: `(model, tokenizer)`.

    name_or_path: a hub id ("deepseek-ai/deepseek-coder-1.3b-base"), a local HF model directory, a LoRA adapter
        directory (its `adapter_config.json` names the base, which is loaded first), or "tiny" (built on demand)
    load_in_4bit: QLoRA-style NF4 weights via bitsandbytes; needs CUDA
    dtype: torch dtype or its name ("bfloat16"); None: bf16 on a GPU that has it, else transformers' default (fp32)
    device_map: passed to `from_pretrained` (e.g. "auto")
    trainable: keep an adapter's weights trainable (and prepare a 4-bit model for training); otherwise the model
        is returned in eval mode

    The tokenizer pads on the left and always has a pad token. On a GPU a model loaded for inference
    (trainable=False) is moved there; see `placement`.
    """
    if load_in_4bit and not torch.cuda.is_available():
        raise RuntimeError(
            "load_in_4bit=True needs CUDA: QLoRA's 4-bit weights (bitsandbytes NF4) only run on a GPU. "
            "Set load_in_4bit to false on this machine."
        )
    dtype, move_to = placement(load_in_4bit, dtype, device_map, trainable)
    model, tokenizer = _load_policy(name_or_path, load_in_4bit, dtype, device_map, trainable)
    if move_to:
        model.to(move_to)
    return model, tokenizer


def rank_device_map(cuda: bool | None = None) -> dict:
    """`device_map` for a model that places itself at load (bitsandbytes 4-bit): the whole model on this rank's
    local device. accelerate's state reads the launcher's LOCAL_RANK, so rank 3 of a node loads onto cuda:3."""
    cuda = torch.cuda.is_available() if cuda is None else cuda
    if not cuda:
        return {"": "cpu"}
    return {"": PartialState().local_process_index}


def placement(
    load_in_4bit: bool, dtype, device_map, trainable: bool, cuda: bool | None = None, bf16: bool | None = None
):
    """(dtype, device to move to or None) for load_policy. On a GPU, weights load in bf16 unless asked otherwise
    (peft keeps LoRA weights in fp32), and a model for inference goes to the GPU; trainers leave placement to
    accelerate / TRL. On a CPU nothing changes: fp32, where it was loaded."""
    cuda = torch.cuda.is_available() if cuda is None else cuda
    if not cuda:
        return dtype, None
    bf16 = torch.cuda.is_bf16_supported() if bf16 is None else bf16
    if dtype is None and not load_in_4bit and bf16:
        dtype = "bfloat16"
    move = "cuda" if not trainable and not load_in_4bit and device_map is None else None
    return dtype, move


def _load_policy(name_or_path, load_in_4bit: bool, dtype, device_map, trainable: bool):
    name = str(name_or_path)
    path = build_tiny_model() if name == "tiny" else Path(name).expanduser()
    if path.exists():
        if (path / "adapter_config.json").is_file():
            return _load_adapter(path, load_in_4bit, dtype, device_map, trainable)
        if not (path / "config.json").is_file():
            raise FileNotFoundError(
                f"{path} holds neither a model (config.json) nor a LoRA adapter (adapter_config.json)"
            )
        source = path
    elif _HUB_ID.match(name) and ".." not in name:
        source = name
    else:
        raise FileNotFoundError(f"no model directory at {path} (and {name!r} is not a hub id like 'owner/name')")
    model = _load_model(source, load_in_4bit, dtype, device_map)
    tokenizer = _load_tokenizer(source)
    return _finish(model, tokenizer, load_in_4bit, trainable)


def _load_adapter(path: Path, load_in_4bit: bool, dtype, device_map, trainable: bool):
    adapter = json.loads((path / "adapter_config.json").read_text())
    base_name = adapter.get("base_model_name_or_path")
    if not base_name:
        raise ValueError(f"{path / 'adapter_config.json'} does not name its base model (base_model_name_or_path)")
    base_name = _resolve_base(base_name)
    base_source = build_tiny_model() if base_name == "tiny" else base_name
    base = _load_model(base_source, load_in_4bit, dtype, device_map)
    # The adapter directory carries a tokenizer when the trainer saved one (TRL does); else use the base's.
    has_tokenizer = any((path / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json"))
    tokenizer = _load_tokenizer(path if has_tokenizer else base_source)
    if trainable and load_in_4bit:
        base = prepare_kbit(base)
    model = PeftModel.from_pretrained(base, path, is_trainable=trainable)
    return _finish(model, tokenizer, load_in_4bit=False, trainable=trainable)


def prepare_kbit(model):
    """peft's preparation of a 4-bit model for training (fp32 norms, activation checkpointing), non-reentrant: the
    reentrant default warns "None of the inputs have requires_grad=True" on every no-grad forward in training mode
    (the engine's old-policy pass) and needs the embeddings' outputs to require grad."""
    return prepare_model_for_kbit_training(model, gradient_checkpointing_kwargs={"use_reentrant": False})


def _finish(model, tokenizer, load_in_4bit: bool, trainable: bool):
    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    if trainable:
        if load_in_4bit:
            model = prepare_kbit(model)
        model.train()
    else:
        model.eval()
    return model, tokenizer


# ---------------------------------------------------------------------------------------------------------------
# LoRA adapters: the configuration every trainer uses, a fresh one on a start policy, saving, merging

DEFAULT_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def lora_config(cfg) -> LoraConfig:
    """peft's LoraConfig from a trainer Config's lora_r, lora_alpha, lora_dropout, target_modules, modules_to_save."""
    return LoraConfig(
        r=cfg.lora_r,
        lora_alpha=cfg.lora_alpha,
        lora_dropout=cfg.lora_dropout,
        target_modules=list(cfg.target_modules),
        modules_to_save=list(cfg.modules_to_save) or None,
        bias="none",
        task_type="CAUSAL_LM",
    )


def policy_problem(spec: str, profile: str = "tiny") -> str | None:
    """Why `spec` cannot be loaded as a policy, known before any work starts: a local path that does not exist (with
    the command that trains it, when its name names a stage) or that holds no model. None for "tiny", an existing
    model or adapter directory, and a hub id (the loader downloads it, or says it is not there)."""
    if spec == "tiny":
        return None
    path = resolve(spec)
    if path.exists():
        if path.is_dir() and not any((path / f).exists() for f in ("config.json", "adapter_config.json")):
            return f"{spec} holds no model (no config.json or adapter_config.json)"
        return None
    if not (spec.startswith((".", "/", "~", "checkpoints/", "reports/")) or not _HUB_ID.match(spec)):
        return None  # a hub id
    from codelib.plumbing.stages import stage_of

    stage = stage_of(path.name)
    fix = (
        f"train it first: python -m codelib.pipeline --profile {profile} --only {stage.name}"
        if stage
        else "give an existing directory, a hub id or 'tiny'"
    )
    return f"{spec} does not exist; {fix}"


def starting_model_dir(init: str) -> str:
    """A full model to put a fresh adapter on: an adapter dir is merged first; a model dir or hub id as is."""
    path = resolve(init) if init != "tiny" else None
    if path is not None and (path / "adapter_config.json").is_file():
        # several processes: the main one merges (or finds the cached merge), the others then read it
        with PartialState().main_process_first():
            return str(merge_adapter(path))
    if path is not None and path.exists():
        return str(path)
    return init  # "tiny" or a hub id


def add_lora(cfg):
    """(peft model with a fresh trainable LoRA adapter on the merged start policy `cfg.init`, tokenizer).

    B = 0 at the start, so step 0 *is* the start policy, and the frozen reference is the same network with the
    adapter switched off: no second copy of the model."""
    base, tokenizer = load_policy(starting_model_dir(cfg.init), load_in_4bit=cfg.load_in_4bit, trainable=True)
    checkpoint_activations(base, on=torch.cuda.is_available() and not cfg.load_in_4bit)
    lora = lora_config(cfg)
    # LoRA's A matrices are drawn from torch's RNG: seed here, so a first run (which also merges the start
    # adapter, drawing from the RNG) and a later one start from the same adapter
    torch.manual_seed(cfg.seed)
    return get_peft_model(base, lora), tokenizer


def checkpoint_activations(model, on: bool) -> bool:
    """Recompute the activations in the backward pass instead of holding them (`on`: where CUDA is, as TRL's stages
    do through `trainer_args`; a 4-bit model has it from peft's `prepare_model_for_kbit_training`). A 7B LoRA
    update of 16 sequences x ~470 tokens holds ~100 GB of activations without it. Off on a CPU, where it only costs
    time. Sampling runs in eval mode, where it never acts (the KV cache stays on). Returns whether it is on."""
    if on and not activations_checkpointed(model):
        # transformers 5.2x names it activation_checkpointing_enable; non-reentrant: the frozen embeddings' outputs
        # need no requires_grad for the adapters' gradients to flow
        if hasattr(model, "activation_checkpointing_enable"):
            model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return activations_checkpointed(model)


def adapters_fp32(model) -> int:
    """Cast every trainable floating-point parameter (LoRA A/B, modules_to_save) back to fp32; returns how many moved.

    TRL 1.16's SFT, DPO and GRPO trainers cast a quantized model's trainable adapter weights to bf16 in their
    constructors (sft_trainer.py:908, dpo_trainer.py:726, grpo_trainer.py:538, following the QLoRA paper), while peft
    and our own loops keep them in fp32. bf16 holds 8 significant bits: an AdamW step of lr 1e-5 on a weight of
    ~1e-2 is below half its spacing and rounds away, so QLoRA under TRL trained 10-20x less (lora_A over 300 steps)
    than the same run in fp32: a confound between algorithms. Called after a TRL trainer is built and before it
    trains (its optimizer is created in `train()`); the forward still runs under bf16 autocast."""
    moved = 0
    for p in model.parameters():
        if p.requires_grad and p.is_floating_point() and p.dtype != torch.float32:
            p.data = p.data.float()
            moved += 1
    return moved


def save_adapter(model, tokenizer, out: Path, state_dict: dict | None = None) -> None:
    """Write the adapter and tokenizer into `out` file by file through a temp dir (no half-written adapter).

    state_dict: the adapter's tensors when the model's own are shards (FSDP; `distributed.save_gathered` gathers
    them); None: the model's own."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out, prefix=".save-"))
    try:
        if state_dict is None:
            model.save_pretrained(tmp)
        else:
            model.save_pretrained(tmp, state_dict=state_dict)
            _strip_wrapper_names(tmp / "adapter_model.safetensors")
        tokenizer.save_pretrained(tmp)
        # adapter_config.json last: its presence is what marks the directory as a finished adapter
        names = sorted(p.name for p in tmp.iterdir())
        names.sort(key=lambda n: n == "adapter_config.json")
        for name in names:
            os.replace(tmp / name, out / name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _strip_wrapper_names(path: Path) -> None:
    """Rewrite an adapter file whose tensor names carry FSDP1's nested `_fsdp_wrapped_module.` (an adapter gathered
    from shards) under the names an unsharded model saves, which is what loading it expects."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    if not path.is_file():
        return
    with safe_open(str(path), "pt") as f:
        metadata = f.metadata()
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    wrappers = ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "_orig_mod.")  # FSDP, activation ckpt, compile

    def clean(k: str) -> str:
        for w in wrappers:
            k = k.replace(w, "")
        return k

    if any(w in k for k in tensors for w in wrappers):
        save_file({clean(k): v for k, v in tensors.items()}, str(path), metadata)


def merge_adapter(
    adapter_dir: str | os.PathLike, out_dir: str | os.PathLike | None = None, force: bool = False
) -> Path:
    """Write `adapter_dir`'s base with the adapter merged in as a full HF model dir (cached; atomic).

    Default out_dir: <adapter_dir>/merged. The merged model's logits equal the adapter model's.
    """
    adapter_dir = resolve(adapter_dir)
    out = Path(out_dir) if out_dir else adapter_dir / "merged"
    stamp = out / "merged_from.json"
    src_mtime = (adapter_dir / "adapter_config.json").stat().st_mtime
    complete = (out / "config.json").exists() and any(out.glob("*.safetensors"))
    if not force and complete and stamp.exists() and json.loads(stamp.read_text()).get("mtime") == src_mtime:
        return out
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
