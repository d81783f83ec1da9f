"""Supervised fine-tuning: TRL's SFTTrainer with a peft LoRA adapter (QLoRA when CUDA is present and asked for).

Data: prompt -> canonical solution of the training tasks, loss on the solution tokens only (TRL's
completion-only loss for prompt/completion datasets). Writes to checkpoints/<profile>/<stage>/: the adapter
(so the run dir loads with `models.load_policy`), `config.json`, `metrics.jsonl`; resumes from its last
`checkpoint-N` when started again.

    python -m codelib.trainers.sft params/tiny/01_sft.yaml
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from datasets import Dataset
from trl import SFTConfig, SFTTrainer

from codelib.engine.metrics import trainer_callback
from codelib.plumbing import checkpoints
from codelib.plumbing.params import atomic_write_json, config_to_dict, main_train
from codelib.plumbing.threads import set_threads
from codelib.policy.models import load_policy, lora_config
from codelib.tasks import load_tasks
from codelib.trainers.common import StageConfig, check_init, train_trl, trainer_args


@dataclass
class Config(StageConfig):
    stage: str = "sft"  # run directory name
    init: str = "tiny"  # the base model: hub name, local model dir, or "tiny" (the locally built model)
    learning_rate: float = 2e-4  # AdamW peak learning rate
    steps: int = 200  # optimizer steps
    lora_dropout: float = 0.05  # dropout on the LoRA branch
    save_every: int = 100  # a resumable checkpoint every N steps
    batch_size: int = 8  # examples per device per step
    grad_accum: int = 1  # gradient accumulation steps
    warmup_ratio: float = 0.05  # share of the steps spent warming up the learning rate
    lr_scheduler: str = "cosine"  # transformers scheduler name
    weight_decay: float = 0.0  # AdamW weight decay
    max_length: int = 1024  # tokens per example (prompt + solution)
    bf16: bool = False  # bfloat16 mixed precision (GPU)
    gradient_checkpointing: bool = False  # recompute activations in the backward pass (less memory, slower)
    logging_steps: int = 10  # a metrics.jsonl row every N steps

    def __post_init__(self):
        super().__post_init__()
        if self.batch_size <= 0 or self.grad_accum <= 0:
            raise ValueError("batch_size and grad_accum must be positive")


def build_dataset(cfg: Config, tasks: list | None = None):
    """Prompt/completion rows of the training split (a `datasets.Dataset`); `tasks` replaces the split (the repair
    stage mixes repair examples in)."""
    if tasks is None:
        tasks = load_tasks(cfg.dataset, cfg.split)
        if cfg.limit:
            tasks = tasks[: cfg.limit]
    if not tasks:
        raise ValueError(f"dataset {cfg.dataset!r} split {cfg.split!r} has no tasks")
    return Dataset.from_list([{"prompt": t.prompt, "completion": t.canonical_solution} for t in tasks])


def train(cfg: Config, tasks: list | None = None) -> Path:
    """Fine-tune `cfg.init` with LoRA on prompt -> canonical solution; return the run directory. tasks: train on
    these instead of the configured split (the repair stage's SFT with repair examples)."""
    check_init(cfg)
    set_threads(cfg.threads)  # (or CODELIB_THREADS: a shared machine)
    out = cfg.run_dir
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / "config.json", {"stage": "sft", **config_to_dict(cfg)})
    model, tokenizer = load_policy(cfg.init, load_in_4bit=cfg.load_in_4bit)
    tokenizer.padding_side = "right"  # training pads on the right; generation switches to left
    dataset = build_dataset(cfg, tasks)
    args = SFTConfig(
        **trainer_args(cfg, bf16=cfg.bf16, gradient_checkpointing=cfg.gradient_checkpointing),
        per_device_train_batch_size=cfg.batch_size,
        gradient_accumulation_steps=cfg.grad_accum,
        lr_scheduler_type=cfg.lr_scheduler,
        warmup_steps=max(1, round(cfg.warmup_ratio * cfg.steps)) if cfg.warmup_ratio else 0,
        weight_decay=cfg.weight_decay,
        max_length=cfg.max_length,
        completion_only_loss=True,
        logging_steps=cfg.logging_steps,
        disable_tqdm=False,
        dataloader_num_workers=0,
    )
    trainer = SFTTrainer(
        model=model,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=lora_config(cfg),
        callbacks=[trainer_callback(out / "metrics.jsonl")],
    )
    steps = train_trl(trainer, tokenizer, cfg, out, data=checkpoints.data_digest(dataset.to_list()))
    summary = {"stage": cfg.stage, "steps": steps, "train_tasks": len(dataset)}
    atomic_write_json(out / "train_summary.json", summary)
    print(json.dumps(summary))
    return out


if __name__ == "__main__":
    main_train(Config, train)
