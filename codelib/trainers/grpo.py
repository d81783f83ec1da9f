"""GRPO and its family (Dr. GRPO, DAPO, GSPO, CISPO): one Config in TRL's vocabulary, two backends.

`backend: own` (the default) runs the one online engine (`codelib.trainers.online`): the same sampler, stop
sequences, sandbox call and masking rule as REINFORCE and PPO, with the parts these settings name (`engine_config`
maps them: `scale_rewards` -> the advantage, `loss_type` -> the aggregation, `importance_sampling_level: sequence`
-> GSPO's loss, `loss_type: cispo` -> CISPO's). `backend: trl` runs TRL's GRPOTrainer on the same settings, rewards
and stop sequences (`codelib.trainers.grpo_trl`): the backends are checked against each other over seeds.

Per step: P prompts (`prompts_per_step`), G completions each (`num_generations`), advantages within each prompt's
group, `num_iterations` passes of `steps_per_generation` minibatch updates over the batch: with more than one update
per rollout the ratio leaves 1 and the clip acts (DAPO's paper: 16 updates per rollout). DAPO as its paper runs it:
`loss_type: dapo` (token-mean), `clip_eps_high: 0.28`, `dynamic_sampling: true` (keeps groups with 0 < #passed < G),
`mask_truncated_completions` or the soft overlong penalty (`rewards: {overlong: ...}`), several minibatches.

    python -m codelib.trainers.grpo params/tiny/04_grpo.yaml
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from codelib.algorithms import ALGORITHMS
from codelib.engine.rollout import TASK_ORDERS
from codelib.plumbing.params import config_to_dict, main_train
from codelib.trainers import online
from codelib.trainers.common import TrainEvalConfig

LOSS_TYPES = ("grpo", "dapo", "dr_grpo", "bnpo", "cispo", "sapo", "luspo", "vespo")  # TRL 1.16's GRPOConfig.loss_type
OWN_LOSS_TYPES = ("grpo", "dapo", "dr_grpo", "bnpo", "cispo")  # what the own engine runs
AGGREGATION = {
    "grpo": "seq-mean-token-mean",
    "dapo": "token-mean",
    "bnpo": "token-mean",
    "cispo": "token-mean",
    "dr_grpo": "seq-mean-token-sum-norm",
}
ADVANTAGE = {"group": "grpo", "none": "dr_grpo", "batch": "grpo_batch_std"}  # scale_rewards -> estimator


@dataclass
class Config(TrainEvalConfig):
    stage: str = "grpo"  # run directory name
    backend: str = "own"  # own: the project's online engine | trl: TRL's GRPOTrainer
    prompts_per_step: int = 16  # P: distinct tasks per step
    num_generations: int = 8  # G: completions per task (the group)
    beta: float = 0.0  # KL coefficient to the start policy (0: no KL term)
    kl_estimator: str = "k3"  # own backend: k1 | k2 | k3 (TRL's is k3 in the loss)
    kl_placement: str = "loss"  # own backend: loss | reward (k1 in the reward: the unbiased reverse-KL gradient)
    kl_every: int = 5  # own backend, beta 0: the KL to the start policy is logged every N steps (0: never)
    loss_type: str = "dapo"  # grpo | dapo | dr_grpo | bnpo | cispo (| sapo | luspo | vespo: backend trl only)
    clip_eps: float = 0.2  # ratio clip range (TRL's epsilon)
    clip_eps_high: float = 0.0  # upper clip 1 + this (cispo: the cap on the weight itself, e.g. 5.0); 0 for clip_eps
    importance_sampling_level: str = "token"  # token | sequence (GSPO: one length-normalised ratio per sequence)
    mask_truncated_completions: bool = False  # DAPO's overlong filtering: no loss on completions cut at the cap
    num_iterations: int = 1  # passes over each generation batch
    steps_per_generation: int = 1  # optimizer steps (minibatches) per pass: > 1 lets the ratio leave 1
    scale_rewards: str = "group"  # group | batch | none (std normalisation of advantages)
    dynamic_sampling: bool = False  # own backend: drop groups of uniform accuracy (all pass / all fail), refill
    max_refills: int = 4  # dynamic sampling: at most this many extra rollout batches per step
    entropy_coef: float = 0.0  # own backend: entropy bonus weight
    shared_prefix: bool = False  # own backend: update forwards run each distinct prompt once (floats move ~1e-5)
    task_order: str = "independent"  # own backend: independent (each step draws its tasks) | epoch (TRL's order)
    old_logprobs: str = "recompute"  # own backend, several updates per rollout: recompute (a forward) | sampler
    minibatch_order: str = "rows"  # own backend: rows (shuffled completions) | groups (whole groups per minibatch)
    max_prompt_tokens: int = 512  # backend trl: prompts longer than this keep their last tokens
    use_vllm: bool = False  # backend trl: generation on vLLM (GPU; pip install -r requirements-vllm.txt)
    vllm_mode: str = "colocate"  # colocate | server (trl vllm-serve)
    vllm_server_url: str = "http://localhost:8000"  # server mode: where `trl vllm-serve --model ...` listens
    vllm_gpu_memory_utilization: float = 0.3  # colocate mode: the share of GPU memory vLLM takes beside training

    def __post_init__(self):
        super().__post_init__()
        if self.backend not in ("own", "trl"):
            raise ValueError(f"backend must be own or trl; you gave {self.backend!r}")
        if self.num_generations < 2:
            raise ValueError(
                "GRPO needs at least 2 generations per prompt to compare within a group: set num_generations >= 2 "
                f"(you gave {self.num_generations})"
            )
        if self.loss_type not in LOSS_TYPES:
            raise ValueError(f"unknown loss_type {self.loss_type!r}; TRL 1.16 has {', '.join(LOSS_TYPES)}")
        if self.importance_sampling_level not in ("token", "sequence"):
            raise ValueError(
                f"importance_sampling_level must be token or sequence (GSPO), not {self.importance_sampling_level!r}"
            )
        if self.loss_type == "luspo" and self.importance_sampling_level != "sequence":
            raise ValueError("loss_type: luspo needs importance_sampling_level: sequence")
        if self.scale_rewards not in ADVANTAGE:
            raise ValueError(f"scale_rewards must be one of {', '.join(ADVANTAGE)}; you gave {self.scale_rewards!r}")
        if self.clip_eps_high < 0 or self.steps_per_generation < 1 or self.num_iterations < 1:
            raise ValueError("clip_eps_high must be >= 0, steps_per_generation and num_iterations >= 1")
        if (self.prompts_per_step * self.num_generations) % self.steps_per_generation:
            raise ValueError(
                "prompts_per_step x num_generations must split evenly into steps_per_generation minibatches"
            )
        if self.task_order not in TASK_ORDERS:
            raise ValueError(f"task_order must be one of {', '.join(TASK_ORDERS)}; you gave {self.task_order!r}")
        if self.vllm_mode not in ("colocate", "server"):
            raise ValueError(f"vllm_mode must be colocate or server; you gave {self.vllm_mode!r}")
        if not 0 < self.vllm_gpu_memory_utilization < 1:
            raise ValueError(f"vllm_gpu_memory_utilization must be in (0, 1), got {self.vllm_gpu_memory_utilization}")
        if self.use_vllm and self.load_in_4bit:  # (#32)
            raise ValueError(
                "use_vllm with load_in_4bit: TRL copies the trained weights into vLLM, whose copy of the "
                "base is bf16, not bitsandbytes' 4-bit tensors. Set load_in_4bit: false (1.3B and 7B LoRA "
                "fit one 80 GB GPU in bf16; docs/gpu.md) or use_vllm: false"
            )
        if self.loss_type == "cispo":
            self.clip_eps_high = self.clip_eps_high or 5.0  # TRL would cap at epsilon (0.2): both backends get 5.0
            if self.clip_eps_high <= 1:
                raise ValueError(
                    f"loss_type cispo: clip_eps_high is the cap on the importance weight itself (e.g. "
                    f"5.0), so it must be > 1; you gave {self.clip_eps_high}"
                )
        if self.backend == "own":
            if self.loss_type == "cispo" and self.importance_sampling_level == "sequence":
                raise ValueError(
                    "loss_type cispo with importance_sampling_level sequence runs on TRL only: set "
                    "backend: trl, or importance_sampling_level: token"
                )
            if self.loss_type not in OWN_LOSS_TYPES:
                raise ValueError(
                    f"loss_type {self.loss_type} runs on TRL only: set backend: trl (or use one of "
                    f"{', '.join(OWN_LOSS_TYPES)})"
                )
            if self.use_vllm:
                raise ValueError("use_vllm samples through TRL's vLLM integration: set backend: trl")
            engine_config(self)  # every engine check (KL placement, top_p, ...) fails here, naming the key
        else:
            if (
                self.dynamic_sampling
                or self.kl_estimator != "k3"
                or self.kl_placement != "loss"
                or self.entropy_coef
                or self.old_logprobs != "recompute"
                or self.minibatch_order != "rows"
            ):
                raise ValueError(
                    "dynamic_sampling, kl_estimator, kl_placement, entropy_coef, old_logprobs and minibatch_order are "
                    "own-engine options: set backend: own, or leave them at their defaults for TRL"
                )
            if self.mask_truncated_completions:
                raise ValueError(
                    "backend: trl with mask_truncated_completions would also mask every completion cut at a stop "
                    "sequence (TRL reads a last token other than EOS as truncation): use backend: own"
                )

    @property
    def algorithm(self) -> str:
        """The registered name these settings run (codelib.algorithms.ALGORITHMS)."""
        if self.importance_sampling_level == "sequence":
            return "gspo"
        if self.loss_type in ("cispo", "dr_grpo"):
            return self.loss_type
        if self.loss_type == "dapo" and (self.clip_eps_high or self.dynamic_sampling):
            return "dapo"
        return "grpo"

    @property
    def label(self) -> str:
        eng = engine_config(self) if self.backend == "own" else None
        label = eng.label if eng is not None else ALGORITHMS[self.algorithm].label + f" ({self.loss_type} loss)"
        return label + (" [TRL]" if self.backend == "trl" else "")


def engine_config(cfg: Config) -> online.Config:
    """The own engine's Config for these GRPO settings: the same run directory, sampling, reward and schedule."""
    shared = {k: getattr(cfg, k) for k in TrainEvalConfig.__dataclass_fields__}
    cispo = cfg.loss_type == "cispo"
    return online.Config(
        **shared,
        algorithm=cfg.algorithm,
        advantage=ADVANTAGE[cfg.scale_rewards],
        policy_loss="gspo" if cfg.importance_sampling_level == "sequence" else "cispo" if cispo else "clip",
        loss_agg=AGGREGATION[cfg.loss_type],
        batch_size=cfg.prompts_per_step,
        samples_per_task=cfg.num_generations,
        ppo_epochs=cfg.num_iterations,
        minibatch_size=cfg.prompts_per_step * cfg.num_generations // cfg.steps_per_generation,
        clip_eps=1.0 if cispo else cfg.clip_eps,  # TRL's CISPO bounds the weight above only
        clip_eps_high=cfg.clip_eps_high - 1 if cispo else cfg.clip_eps_high,  # CISPO: the cap is 1 + this
        kl_coef=cfg.beta,
        kl_estimator=cfg.kl_estimator,
        kl_placement=cfg.kl_placement,
        kl_every=cfg.kl_every,
        entropy_coef=cfg.entropy_coef,
        dynamic_sampling=cfg.dynamic_sampling,
        max_refills=cfg.max_refills,
        mask_truncated=cfg.mask_truncated_completions,
        shared_prefix=cfg.shared_prefix,
        task_order=cfg.task_order,
        adv_eps=1e-4,  # TRL's std floor
        old_from_first_pass=True,  # one update per rollout: the update's own forward gives the old log-probs, as TRL
        old_logprobs=cfg.old_logprobs,
        minibatch_order=cfg.minibatch_order,
    )


def train(cfg: Config) -> Path:
    """Run the configured GRPO variant on its backend; returns the run directory."""
    if cfg.backend == "trl":
        from codelib.trainers import grpo_trl  # TRL's trainer is imported only where it runs

        return grpo_trl.train(cfg)
    return online.train(engine_config(cfg), label=cfg.label, record={"backend": "own", **config_to_dict(cfg)})


if __name__ == "__main__":
    main_train(Config, train)
