"""The stage registry: every notebook stage once, with its Config class, kind, label and plot colour.

The pipeline (run order, opt-in stages), the study file (which stages an arm may train), the plots (one colour per
stage in every figure) and the comparison table derive from `STAGES`; nothing else lists stages. A stage's Config is
named by import path, so this module imports nothing of the package (every module may import it).

Checkpoint names map to stages by their run directory (`stage:` in the params): `grpo_dapo` is a variant of `grpo`
and takes its colour (`stage_of`).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Stage:
    name: str  # the notebook / params file stem, e.g. "04_grpo"
    config: str  # import path of the Config class its params mirror
    kind: str  # "data" | "train" | "eval" | "report"
    label: str  # how figures and tables name it
    color: str  # its colour in every figure
    run: str = ""  # its run directory under checkpoints/<profile>/ (train stages)
    opt_in: bool = False  # runs only when `--only` names it (it would lengthen `make demo`)
    in_profile: bool = True  # False: run by its own command, not by a profile's pipeline (the study)

    def config_class(self):
        module, name = self.config.rsplit(".", 1)
        return getattr(importlib.import_module(module), name)


# The run order. Colours: one per training stage, the same in every figure (base and SFT are the references).
STAGES: dict[str, Stage] = {
    s.name: s
    for s in (
        Stage("00_tasks", "codelib.reports.explore.TasksConfig", "data", "tasks", "#999999"),
        Stage("01_sft", "codelib.trainers.sft.Config", "train", "SFT", "#4C72B0", run="sft"),
        Stage("02_reinforce", "codelib.trainers.reinforce.Config", "train", "REINFORCE", "#DD8452", run="reinforce"),
        Stage("03_ppo", "codelib.trainers.ppo.Config", "train", "PPO", "#55A868", run="ppo"),
        Stage("04_grpo", "codelib.trainers.grpo.Config", "train", "GRPO", "#C44E52", run="grpo"),
        Stage("05_dpo", "codelib.trainers.dpo.Config", "train", "DPO", "#8172B3", run="dpo"),
        Stage("06_eval", "codelib.evaluation.evaluator.EvalConfig", "eval", "evaluation", "#999999"),
        Stage("07_plots", "codelib.reports.PlotsConfig", "report", "plots", "#999999"),
        Stage("08_study", "codelib.runner.study.StudyReportConfig", "report", "study", "#999999", in_profile=False),
        Stage("explore", "codelib.reports.explore.ExploreConfig", "report", "explorer", "#999999"),
        Stage("09_repair", "codelib.trainers.repair.Config", "train", "repair", "#937860", run="repair", opt_in=True),
    )
}
TRAIN_STAGES = tuple(name for name, s in STAGES.items() if s.kind == "train" and not s.opt_in)
OPT_IN = tuple(name for name, s in STAGES.items() if s.opt_in)
BASE_COLOR = "#8C8C8C"  # the untrained base model in figures
RUNS = {s.run: s for s in STAGES.values() if s.run}


def stage_of(checkpoint: str) -> Stage | None:
    """The training stage a checkpoint (run directory) name belongs to: `grpo`, `grpo_dapo`, `grpo_s1` -> 04_grpo."""
    if checkpoint in RUNS:
        return RUNS[checkpoint]
    head = checkpoint.split("_")[0].split("-")[0]
    return RUNS.get(head)


def color_of(checkpoint: str) -> str:
    """The colour of a checkpoint in every figure: its stage's, grey for the base model and anything unknown."""
    stage = stage_of(checkpoint)
    return stage.color if stage else BASE_COLOR
