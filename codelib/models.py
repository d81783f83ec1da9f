"""Policies: load one by hub name, local directory or LoRA adapter directory; build the tiny one from nothing.

Everything downstream calls `load_policy`, so a stage does not care whether its policy is
`deepseek-ai/deepseek-coder-1.3b-base`, a merged checkpoint on disk, an SFT adapter, or `"tiny"`.

`"tiny"` is a ~0.9M-parameter Llama-architecture model with a 512-token byte-level BPE tokenizer, pretrained
here on CPU on the synthetic training split (`codelib.synthetic`) and cached as an ordinary HF model directory
under `checkpoints/tiny/base`. Its pretraining is kept deliberately short: the base model should be clearly
worse than what LoRA SFT makes of it, and SFT in turn should stop where RL still has room (see TINY.md).
"""

from __future__ import annotations

import json
import math
import os
import random
import re
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
TINY_DIR = REPO_ROOT / "checkpoints" / "tiny" / "base"
BUILD_FILE = "tiny_build.json"  # the settings a cached tiny model was built with

PAD, BOS, EOS = "<pad>", "<s>", "</s>"


# ---------------------------------------------------------------------------------------------------------------
# tokenizer


def train_tokenizer(texts, vocab_size: int = 512):
    """A byte-level BPE tokenizer trained on `texts`, one token per digit, as a `PreTrainedTokenizerFast`.

    Digits are split one per token so that numbers the model has never seen (the held-out constants) are
    spelled with tokens it has. BOS/EOS/PAD exist but nothing is added automatically: every consumer (our
    pretraining, TRL's SFT and GRPO, HF generate) then tokenizes a prompt the same way.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    # A newline is always a token of its own: a prompt ends with "\n" and the solution starts with indentation,
    # so a merged "\n    " token would make the prompt's last token one that training never shows there.
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split("\n", behavior="isolated"),
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[PAD, BOS, EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=BOS, eos_token=EOS, pad_token=PAD, padding_side="left"
    )


# ---------------------------------------------------------------------------------------------------------------
# the tiny model


@dataclass(frozen=True)
class TinyBuild:
    """Everything that determines the tiny base model; stored beside it so a cache hit is a true match."""

    seed: int = 0
    steps: int = 200  # full-LM-loss steps: short on purpose, so LoRA SFT has a clear gain to show (TINY.md)
    batch_size: int = 32
    lr: float = 2e-3
    warmup_frac: float = 0.05
    weight_decay: float = 0.0
    n_train: int = 5000  # synthetic train tasks (the generator's seed is `seed`)
    vocab_size: int = 512
    hidden_size: int = 128
    num_layers: int = 4
    num_heads: int = 4
    intermediate_size: int = 384
    max_positions: int = 256
    threads: int = 2  # float sums depend on the thread count; fixing it makes the build reproducible
    version: int = 1  # bump when the recipe changes in a way the fields above do not show


def tiny_texts(tasks, eos: str = EOS) -> list[str]:
    """Pretraining documents: each task's prompt, its canonical solution, then EOS (where generation stops)."""
    return [t.prompt + t.canonical_solution + eos for t in tasks]


def _lr_at(step: int, total: int, peak: float, warmup_frac: float) -> float:
    """Linear warm-up then cosine decay to zero."""
    warmup = max(1, int(warmup_frac * total))
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return peak * 0.5 * (1.0 + math.cos(math.pi * progress))


def _pretrain(model, tokenizer, texts: list[str], cfg: TinyBuild, log=None) -> list[float]:
    """Full language-model loss over whole documents, AdamW, warm-up + cosine; returns the loss per step."""
    import torch

    rng = random.Random(cfg.seed)
    encoded = [tokenizer(t, add_special_tokens=False)["input_ids"][: cfg.max_positions] for t in texts]
    order: list[int] = []
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.95))
    model.train()
    losses = []
    for step in range(cfg.steps):
        if len(order) < cfg.batch_size:  # epochs reshuffle; a batch never straddles two orders
            order = list(range(len(encoded)))
            rng.shuffle(order)
        batch = [encoded[order.pop()] for _ in range(cfg.batch_size)]
        width = max(len(ids) for ids in batch)
        # Right padding for training; pad positions are masked out of attention and loss.
        ids = torch.full((len(batch), width), tokenizer.pad_token_id)  # [B, T]
        mask = torch.zeros((len(batch), width), dtype=torch.long)  # [B, T]
        for i, seq in enumerate(batch):
            ids[i, : len(seq)] = torch.tensor(seq)
            mask[i, : len(seq)] = 1
        labels = ids.masked_fill(mask == 0, -100)  # [B, T]
        for group in opt.param_groups:
            group["lr"] = _lr_at(step, cfg.steps, cfg.lr, cfg.warmup_frac)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        if log and (step % 25 == 0 or step == cfg.steps - 1):
            log(f"step {step:4d}  loss {loss.item():.3f}")
    model.eval()
    return losses


def _read_build(path: Path) -> dict | None:
    try:
        return json.loads((path / BUILD_FILE).read_text())["settings"]
    except (OSError, ValueError, KeyError):
        return None


def build_tiny_model(
    out_dir: str | Path | None = None,
    seed: int = 0,
    steps: int = TinyBuild.steps,
    force: bool = False,
    verbose: bool = False,
    **settings,
) -> Path:
    """Build (or reuse) the tiny base model and its tokenizer; returns the HF model directory.

    out_dir: where to put it (default `<repo>/checkpoints/tiny/base`)
    seed, steps and any other `TinyBuild` field (batch_size, lr, n_train, hidden_size, ...): the recipe
    force: rebuild even if `out_dir` holds a model built with the same settings

    The directory is written atomically (a temporary sibling renamed into place) and loads with
    `AutoModelForCausalLM.from_pretrained` / `AutoTokenizer.from_pretrained` like any hub model. With the
    default settings it takes about a minute on 2 CPU cores.
    """
    cfg = TinyBuild(seed=seed, steps=steps, **settings)
    out = Path(out_dir) if out_dir is not None else TINY_DIR
    if not force and _read_build(out) == asdict(cfg):
        return out

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from codelib import synthetic

    log = print if verbose else None
    started = time.time()
    threads = torch.get_num_threads()
    torch.set_num_threads(cfg.threads)
    try:
        train, _ = synthetic.generate(seed=cfg.seed, n_train=cfg.n_train, n_test=0)
        texts = tiny_texts(train)
        tokenizer = train_tokenizer(texts, vocab_size=cfg.vocab_size)
        torch.manual_seed(cfg.seed)
        config = LlamaConfig(
            vocab_size=len(tokenizer),
            hidden_size=cfg.hidden_size,
            intermediate_size=cfg.intermediate_size,
            num_hidden_layers=cfg.num_layers,
            num_attention_heads=cfg.num_heads,
            num_key_value_heads=cfg.num_heads,
            max_position_embeddings=cfg.max_positions,
            tie_word_embeddings=True,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
        )
        model = LlamaForCausalLM(config)
        losses = _pretrain(model, tokenizer, texts, cfg, log=log)
    finally:
        torch.set_num_threads(threads)

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    record = {
        "settings": asdict(cfg),
        "parameters": sum(p.numel() for p in model.parameters()),
        "final_loss": losses[-1] if losses else None,
        "seconds": round(time.time() - started, 1),
    }
    (tmp / BUILD_FILE).write_text(json.dumps(record, indent=2) + "\n")
    _swap_into_place(tmp, out)
    if log:
        log(f"tiny model: {record['parameters']:,} parameters, {record['seconds']} s -> {out}")
    return out


def _swap_into_place(tmp: Path, out: Path) -> None:
    """Rename `tmp` to `out`, replacing an old `out`; readers never see a half-written directory."""
    old = out.parent / f".{out.name}.old-{os.getpid()}"
    if out.exists():
        out.rename(old)
    try:
        tmp.rename(out)
    except OSError:
        # Another process finished the same build first; keep theirs.
        shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(old, ignore_errors=True)


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
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(source)
    tokenizer.padding_side = "left"  # decoder-only generation pads on the left
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def _load_model(source: str | Path, load_in_4bit: bool, dtype, device_map):
    import torch
    from transformers import AutoModelForCausalLM

    kwargs = {}
    if dtype is not None:
        kwargs["dtype"] = getattr(torch, dtype) if isinstance(dtype, str) and dtype != "auto" else dtype
    if device_map is not None:
        kwargs["device_map"] = device_map
    if load_in_4bit:
        from transformers import BitsAndBytesConfig

        compute = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type="nf4",
            bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=compute,
        )
        kwargs.setdefault("dtype", compute)
        kwargs.setdefault("device_map", {"": torch.cuda.current_device()})
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
    import torch

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


def placement(
    load_in_4bit: bool, dtype, device_map, trainable: bool, cuda: bool | None = None, bf16: bool | None = None
):
    """(dtype, device to move to or None) for load_policy. On a GPU, weights load in bf16 unless asked otherwise
    (peft keeps LoRA weights in fp32), and a model for inference goes to the GPU; trainers leave placement to
    accelerate / TRL. On a CPU nothing changes: fp32, where it was loaded."""
    import torch

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
            raise FileNotFoundError(f"{path} holds neither a model (config.json) nor a LoRA adapter "
                                    "(adapter_config.json)")  # fmt: skip
        source = path
    elif _HUB_ID.match(name) and ".." not in name:
        source = name
    else:
        raise FileNotFoundError(f"no model directory at {path} (and {name!r} is not a hub id like 'owner/name')")
    model = _load_model(source, load_in_4bit, dtype, device_map)
    tokenizer = _load_tokenizer(source)
    return _finish(model, tokenizer, load_in_4bit, trainable)


def _load_adapter(path: Path, load_in_4bit: bool, dtype, device_map, trainable: bool):
    from peft import PeftModel

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
        from peft import prepare_model_for_kbit_training

        base = prepare_model_for_kbit_training(base)
    model = PeftModel.from_pretrained(base, path, is_trainable=trainable)
    return _finish(model, tokenizer, load_in_4bit=False, trainable=trainable)


def _finish(model, tokenizer, load_in_4bit: bool, trainable: bool):
    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    if trainable:
        if load_in_4bit:
            from peft import prepare_model_for_kbit_training

            model = prepare_model_for_kbit_training(model)
        model.train()
    else:
        model.eval()
    return model, tokenizer
