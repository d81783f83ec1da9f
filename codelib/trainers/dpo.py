"""Offline DPO from executed candidates: baseline -> candidates -> annotation -> preference pairs -> TRL DPO.

The starting policy (an SFT adapter) samples N candidates per training task; the sandbox annotates them;
`codelib.engine.candidates` turns them into n-best lists and (passing, failing) pairs; TRL's DPOTrainer then trains a
fresh LoRA adapter on the start policy merged into its base, so DPO's frozen reference (the adapter switched
off) is exactly the starting adapter's policy.

    python -m codelib.trainers.dpo params/tiny/05_dpo.yaml
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from datasets import Dataset
from trl import DPOConfig, DPOTrainer

from codelib.engine.candidates import RANKING, PairRule, annotate, build_preferences, generate_candidates
from codelib.engine.metrics import trainer_callback
from codelib.plumbing import checkpoints
from codelib.plumbing.params import ParamsError, atomic_write_json, config_to_dict, main_train, read_jsonl, resolve
from codelib.plumbing.threads import set_threads
from codelib.policy.models import load_policy, lora_config, starting_model_dir
from codelib.tasks import load_tasks
from codelib.trainers.common import SamplingConfig, check_init, seed_everything, train_trl, trainer_args


@dataclass
class Config(SamplingConfig):
    stage: str = "dpo"  # run directory name
    rewards: dict[str, float | dict] = field(default_factory=lambda: dict(RANKING))  # ranks a task's candidates
    n_candidates: int = 8  # samples per task
    gen_seed: int = 0  # candidate sampling seed (the study's seed-0 runs draw the same: a demo run is their donor)
    gen_batch_size: int = 64  # (prompt, sample) rows per generate call
    gen_backend: str = "hf"  # candidate sampling on hf | vllm (GPU, pip install -r requirements-vllm.txt)
    min_chosen: float = 0.8  # pair rule: chosen passes with a test fraction of at least this
    min_gap: float = 0.4  # pair rule: chosen minus rejected test fraction, at least this
    max_pairs_per_task: int = 4  # K
    beta: float = 0.1  # DPO temperature
    loss_type: list[str] = field(default_factory=lambda: ["sigmoid"])  # TRL DPO losses, e.g. [sigmoid, sft] (RPO)
    loss_weights: list[float] = field(default_factory=list)  # one weight per loss; [] for all 1
    batch_size: int = 16  # pairs per step
    max_length: int = 512  # tokens per prompt + completion
    save_every: int = 50  # a resumable checkpoint every N steps

    def __post_init__(self):
        super().__post_init__()
        if self.gen_backend not in ("hf", "vllm"):
            raise ValueError(f"gen_backend must be 'hf' or 'vllm', not {self.gen_backend!r}")
        if self.n_candidates < 2:
            raise ValueError(f"pairs need at least 2 candidates per task; you gave n_candidates={self.n_candidates}")
        if self.loss_weights and len(self.loss_weights) != len(self.loss_type):
            raise ValueError(f"loss_weights needs one weight per loss in loss_type {self.loss_type}")
        if not 0 <= self.min_gap <= 1 or not 0 <= self.min_chosen <= 1:
            raise ValueError("min_chosen and min_gap are test fractions in [0, 1]")


def sampled_ids(pairs: list[dict], tokenizer, max_length: int) -> list[dict]:
    """DPO rows of token ids as they were sampled: the prompt as the sampler encoded it, each completion's sampled
    ids (ending where the sampler stopped: a stop sequence's tokens or eos), not its decoded text re-tokenised with
    an added eos. The completion is cut to fit max_length (the prompt is kept whole, as the sampler saw it). Pairs
    without ids (written by hand, or by a run before ids were kept) become text rows that TRL tokenises."""
    from codelib.policy.generation import encode_prompts

    if any(p.get("chosen_ids") is None or p.get("rejected_ids") is None for p in pairs):
        print("[dpo] pairs without sampled ids (written by hand or by an older run): TRL tokenises their text")
        return [{"prompt": p["prompt"], "chosen": p["chosen"], "rejected": p["rejected"]} for p in pairs]
    rows = []
    for p in pairs:
        prompt = encode_prompts(tokenizer, [p["prompt"]])[0]
        room = max(1, max_length - len(prompt))
        rows.append(
            {"prompt_ids": prompt, "chosen_ids": p["chosen_ids"][:room], "rejected_ids": p["rejected_ids"][:room]}
        )
    return rows


class SampledIdsDPOTrainer(DPOTrainer):
    """TRL's DPOTrainer on rows that are already token ids (`sampled_ids`): TRL's own preparation would decode-free
    tokenize text and append eos, training on tokens the policy did not sample."""

    def _prepare_dataset(self, dataset, processing_class, args, dataset_name):
        if "prompt_ids" in dataset.column_names and "chosen_ids" in dataset.column_names:
            return dataset
        return super()._prepare_dataset(dataset, processing_class, args, dataset_name)


def prepare(cfg: Config) -> dict:
    """Candidates, annotation and preference pairs in the run dir; returns the manifest. Sampled at the run's
    `threads` (the notebook calls this before `train` seeds the run and sets them)."""
    set_threads(cfg.threads)
    out = cfg.run_dir
    out.mkdir(parents=True, exist_ok=True)
    tasks = load_tasks(cfg.dataset, cfg.split)[: cfg.limit or None]
    init = str(resolve(cfg.init)) if cfg.init != "tiny" and resolve(cfg.init).exists() else cfg.init
    # vLLM loads the policy itself (an adapter unmerged where it can): nothing is loaded here then
    model, tokenizer = load_policy(init) if cfg.gen_backend == "hf" else (init, None)
    generate_candidates(
        model,
        tokenizer,
        tasks,
        out / "candidates.jsonl",
        cfg.n_candidates,
        cfg.temperature,
        cfg.top_p,
        cfg.max_new_tokens,
        cfg.gen_seed,
        batch_size=cfg.gen_batch_size,
        source=cfg.init,
        backend=cfg.gen_backend,
    )
    del model
    annotate(
        out / "candidates.jsonl",
        tasks,
        out / "candidates_annotated.jsonl",
        workers=cfg.workers,
        timeout_s=cfg.timeout_s,
    )
    rule = PairRule(cfg.min_chosen, cfg.min_gap, cfg.max_pairs_per_task)
    settings = {
        "source_policy": cfg.init,
        "n_candidates": cfg.n_candidates,
        "temperature": cfg.temperature,
        "top_p": cfg.top_p,
        "max_new_tokens": cfg.max_new_tokens,
        "gen_seed": cfg.gen_seed,
    }
    return build_preferences(out / "candidates_annotated.jsonl", tasks, out, rule, settings, cfg.seed, cfg.rewards)


def run_label(cfg: Config) -> tuple[str, str]:
    """(algorithm, label) of a run, as config.json records them and the comparison table names the row: "dpo" /
    "DPO" for sigmoid DPO alone, "rpo" / "RPO (DPO + NLL, w_dpo:w_nll)" when the NLL term (TRL's "sft") joins it,
    and "DPO (<losses>)" for any other mix of TRL's losses."""
    rpo = "sft" in cfg.loss_type
    weights = dict(zip(cfg.loss_type, cfg.loss_weights or [1.0] * len(cfg.loss_type), strict=True))
    label = f"RPO (DPO + NLL, {weights['sigmoid']:g}:{weights['sft']:g})" if rpo and "sigmoid" in weights else "DPO"
    if set(cfg.loss_type) - {"sigmoid", "sft"}:
        label = "DPO (" + ", ".join(cfg.loss_type) + ")"
    return ("rpo" if rpo else "dpo"), label


def dpo_args(cfg: Config) -> DPOConfig:
    """TRL's DPOConfig for the run: the losses and their weights, beta, pairs per step, max_length; a constant
    learning rate and a metrics row every step."""
    return DPOConfig(
        **trainer_args(cfg),
        per_device_train_batch_size=cfg.batch_size,
        lr_scheduler_type="constant",
        beta=cfg.beta,
        loss_type=list(cfg.loss_type),
        loss_weights=list(cfg.loss_weights) or None,
        max_length=cfg.max_length,
        logging_steps=1,
        dataloader_num_workers=0,
    )


def train(cfg: Config) -> Path:
    """Build the preference data (if needed) and run DPO; returns the run directory."""
    check_init(cfg)
    seed_everything(cfg.seed, cfg.threads)
    out = cfg.run_dir
    out.mkdir(parents=True, exist_ok=True)
    algorithm, label = run_label(cfg)
    atomic_write_json(
        out / "config.json", {"stage": cfg.stage, "algorithm": algorithm, "label": label, **config_to_dict(cfg)}
    )
    manifest = prepare(cfg)
    pairs = read_jsonl(out / "pairs.jsonl")
    if not pairs:  # the user's to fix (more candidates, a looser rule, a stronger start): a message, no traceback
        raise ParamsError(
            f"no preference pairs: {manifest['tasks_with_no_pass']} tasks had no passing and "
            f"{manifest['tasks_with_no_fail']} no failing candidate. Sample more (n_candidates) or loosen the rule."
        )
    model, tokenizer = load_policy(starting_model_dir(cfg.init), load_in_4bit=cfg.load_in_4bit, trainable=True)
    data = Dataset.from_list(sampled_ids(pairs, tokenizer, cfg.max_length))
    tokenizer.padding_side = "right"
    args = dpo_args(cfg)
    lora = lora_config(cfg)
    trainer = SampledIdsDPOTrainer(
        model=model,
        args=args,
        train_dataset=data,
        processing_class=tokenizer,
        peft_config=lora,
        callbacks=[trainer_callback(out / "metrics.jsonl")],
    )
    steps = train_trl(trainer, tokenizer, cfg, out, fresh_metrics=True, data=checkpoints.data_digest(pairs))
    atomic_write_json(out / "train_summary.json", {"stage": cfg.stage, "steps": steps})
    return out


if __name__ == "__main__":
    main_train(Config, train)
