"""The tiny policy of the `tiny` profile, built from nothing: a byte-level BPE tokenizer and a ~0.9M-parameter
Llama-architecture model pretrained here on CPU on the synthetic training split (`codelib.tasks.synthetic`), cached as
an ordinary HF model directory under `checkpoints/tiny/base`. Its pretraining is kept deliberately short: the base
model should be clearly worse than what LoRA SFT makes of it, and SFT in turn should stop where RL still has room (see
TINY.md). `codelib.policy.models.load_policy("tiny")` builds it on demand."""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
from transformers.utils import logging as hf_logging

from codelib.plumbing.paths import TINY_DIR
from codelib.plumbing.threads import set_threads
from codelib.tasks import synthetic

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

    log = print if verbose else None
    started = time.time()
    threads = torch.get_num_threads()
    set_threads(cfg.threads)  # (or CODELIB_THREADS: a shared machine)
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
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # a "Writing model shards 1/1" bar for one file: noise in the pipeline's log
    try:
        model.save_pretrained(tmp)
    finally:
        if bars:
            hf_logging.enable_progress_bar()
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
