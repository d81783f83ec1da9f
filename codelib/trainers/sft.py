"""Supervised fine-tuning: TRL's SFTTrainer with a peft LoRA adapter (QLoRA when CUDA is present and asked for).

Data: prompt -> canonical solution of the training tasks, loss on the solution tokens only (TRL's
completion-only loss for prompt/completion datasets). Writes to checkpoints/<profile>/<stage>/: the adapter
(so the run dir loads with `models.load_policy`), `config.json`, `metrics.jsonl`; resumes from its last
`checkpoint-N` when started again.

    python -m codelib.trainers.sft params/tiny/01_sft.yaml
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from codelib.params import append_jsonl, atomic_write_json, config_to_dict, main_config, run_dir

DEFAULT_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@dataclass
class Config:
    profile: str = "tiny"  # checkpoints/<profile>/<stage>/
    stage: str = "sft"  # run directory name
    model: str = "tiny"  # hub name, local model dir, or "tiny" (the locally built model)
    dataset: str = "synthetic"  # a codelib.tasks dataset name
    split: str = "train"
    limit: int = 0  # 0 = every task of the split
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.05
    target_modules: list[str] = field(default_factory=lambda: list(DEFAULT_TARGETS))
    modules_to_save: list[str] = field(default_factory=list)  # also trained in full, e.g. ["norm"]: every RMSNorm
    learning_rate: float = 2e-4
    max_steps: int = 200
    batch_size: int = 8
    grad_accum: int = 1
    warmup_ratio: float = 0.05
    lr_scheduler: str = "cosine"
    weight_decay: float = 0.0
    max_length: int = 1024
    load_in_4bit: bool = False  # QLoRA: 4-bit NF4 base (needs CUDA)
    bf16: bool = False
    gradient_checkpointing: bool = False
    logging_steps: int = 10
    save_steps: int = 100  # a resumable checkpoint every N steps
    seed: int = 0
    report_to: str = "tensorboard"  # "none" | "tensorboard" | "wandb"
    processes: int = 1  # >1: the notebook starts `accelerate launch` with this many processes (live log)
    threads: int = 0  # torch CPU threads; 0 = leave torch's default

    def __post_init__(self):
        if self.lora_r <= 0:
            raise ValueError(f"lora_r must be positive; you gave {self.lora_r}")
        if self.max_steps <= 0:
            raise ValueError(f"max_steps must be positive; you gave {self.max_steps}")
        if self.batch_size <= 0 or self.grad_accum <= 0:
            raise ValueError("batch_size and grad_accum must be positive")
        if self.report_to not in ("none", "tensorboard", "wandb"):
            raise ValueError(f"report_to must be none, tensorboard or wandb; you gave {self.report_to!r}")

    @property
    def run_dir(self) -> Path:
        return run_dir(self.profile, self.stage)


def build_dataset(cfg: Config):
    """Prompt/completion rows of the training split (a `datasets.Dataset`)."""
    from datasets import Dataset

    from codelib.tasks import load_tasks

    tasks = load_tasks(cfg.dataset, cfg.split)
    if cfg.limit:
        tasks = tasks[: cfg.limit]
    if not tasks:
        raise ValueError(f"dataset {cfg.dataset!r} split {cfg.split!r} has no tasks")
    return Dataset.from_list([{"prompt": t.prompt, "completion": t.canonical_solution} for t in tasks])


def lora_config(cfg: Config):
    from peft import LoraConfig

    return LoraConfig(
        r=cfg.lora_r,
        lora_alpha=cfg.lora_alpha,
        lora_dropout=cfg.lora_dropout,
        target_modules=list(cfg.target_modules),
        modules_to_save=list(cfg.modules_to_save) or None,
        bias="none",
        task_type="CAUSAL_LM",
    )


def report_to(name: str) -> list[str]:
    """TensorBoard by default; W&B only when it is installed (a clear fallback otherwise)."""
    if name == "none":
        return []
    if name == "wandb":
        try:
            import wandb  # noqa: F401
        except ImportError:
            print("report_to: wandb is not installed (pip install wandb); logging to TensorBoard instead")
            return ["tensorboard"]
    return [name]


def metrics_callback(path: Path):
    """A TrainerCallback appending every log row (loss, lr, grad norm, step, time) to metrics.jsonl."""
    from transformers import TrainerCallback

    class MetricsCallback(TrainerCallback):
        def __init__(self):
            self.t0 = time.time()

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and state.is_world_process_zero:
                append_jsonl(path, {"step": state.global_step, **logs, "time_s": round(time.time() - self.t0, 3)})

    return MetricsCallback()


def save_adapter(model, tokenizer, out: Path) -> None:
    """Write the adapter and tokenizer into `out` file by file through a temp dir (no half-written adapter)."""
    import os
    import shutil
    import tempfile

    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out, prefix=".save-"))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        # adapter_config.json last: its presence is what marks the directory as a finished adapter
        names = sorted(p.name for p in tmp.iterdir())
        names.sort(key=lambda n: n == "adapter_config.json")
        for name in names:
            os.replace(tmp / name, out / name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def train(cfg: Config) -> Path:
    """Fine-tune `cfg.model` with LoRA on prompt -> canonical solution; return the run directory."""
    import torch
    from transformers.trainer_utils import get_last_checkpoint
    from trl import SFTConfig, SFTTrainer

    from codelib.models import load_policy

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    out = cfg.run_dir
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / "config.json", {"stage": "sft", **config_to_dict(cfg)})
    model, tokenizer = load_policy(cfg.model, load_in_4bit=cfg.load_in_4bit)
    tokenizer.padding_side = "right"  # training pads on the right; generation switches to left
    dataset = build_dataset(cfg)
    args = SFTConfig(
        output_dir=str(out),
        max_steps=cfg.max_steps,
        per_device_train_batch_size=cfg.batch_size,
        gradient_accumulation_steps=cfg.grad_accum,
        learning_rate=cfg.learning_rate,
        lr_scheduler_type=cfg.lr_scheduler,
        warmup_steps=max(1, round(cfg.warmup_ratio * cfg.max_steps)) if cfg.warmup_ratio else 0,
        weight_decay=cfg.weight_decay,
        max_length=cfg.max_length,
        completion_only_loss=True,
        logging_steps=cfg.logging_steps,
        save_steps=cfg.save_steps,
        save_total_limit=2,
        seed=cfg.seed,
        data_seed=cfg.seed,
        bf16=cfg.bf16,
        gradient_checkpointing=cfg.gradient_checkpointing,
        report_to=report_to(cfg.report_to),
        disable_tqdm=False,
        dataloader_num_workers=0,
        use_cpu=not torch.cuda.is_available(),
    )
    trainer = SFTTrainer(
        model=model,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=lora_config(cfg),
        callbacks=[metrics_callback(out / "metrics.jsonl")],
    )
    last = get_last_checkpoint(str(out)) if any(out.glob("checkpoint-*")) else None
    if last:
        print(f"resuming from {last}")
    trainer.train(resume_from_checkpoint=last)
    tokenizer.padding_side = "left"
    save_adapter(trainer.model, tokenizer, out)
    summary = {"stage": "sft", "steps": trainer.state.global_step, "train_tasks": len(dataset)}
    atomic_write_json(out / "train_summary.json", summary)
    print(json.dumps(summary))
    return out


if __name__ == "__main__":
    train(main_config(Config))
