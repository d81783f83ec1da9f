"""Write notebooks/*.ipynb from one place: title, a `parameters` cell mirroring the stage's Config, calls.

The parameters cell is generated from the Config dataclass (names, comments) and the tiny profile's YAML
(values), so the three can't drift; tests/test_notebooks.py checks they are the same set.
Run: python tools/make_notebooks.py  (then commit; notebooks are stored without outputs)
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from codelib.params import load_yaml  # noqa: E402  (after the path is set)

IMPORTS = "%load_ext autoreload\n%autoreload 2\n"


def field_comments(cls) -> dict[str, str]:
    """Each field's trailing comment in its dataclass source, with the comment lines right under it that continue it
    (a field a subclass redeclares: the subclass's)."""
    out: dict[str, str] = {}
    field = re.compile(r"^    (\w+):[^#\n]*#\s*(.*)$(?P<more>(?:\n    #.*$)*)", flags=re.M)
    for klass in reversed([k for k in cls.__mro__ if dataclasses.is_dataclass(k)]):
        for m in field.finditer(inspect.getsource(klass)):
            more = [line.strip().lstrip("#").strip() for line in m.group("more").splitlines() if line.strip()]
            out[m.group(1)] = " ".join([m.group(2).strip(), *more])
    return out


# papermill reads `name: annotation = value  # help` when the annotation has only word characters, brackets and
# commas (`--help-notebook`, and its check of -p names); a union is shown by its outer type
_PAPERMILL_ANNOTATION = re.compile(r"^\w[\w\[\],\s]*$")


def annotation(f) -> str:
    hint = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
    return hint if _PAPERMILL_ANNOTATION.match(hint) else hint.split("[")[0]


def parameters_cell(cls, yaml_path: Path) -> str:
    values = load_yaml(yaml_path) if yaml_path.exists() else {}
    comments = field_comments(cls)
    lines = []
    for f in dataclasses.fields(cls):
        if f.name in values:
            v = values[f.name]
        elif f.default is not dataclasses.MISSING:
            v = f.default
        else:
            v = f.default_factory()
        if f.name not in comments:
            raise SystemExit(f"{cls.__qualname__}.{f.name} has no comment: add one where the field is declared")
        if "=" in comments[f.name]:  # papermill's parser gives up on a line with a second "="
            raise SystemExit(
                f"{cls.__qualname__}.{f.name}: its comment has '=', which papermill cannot parse; reword it"
            )
        lines.append(f"{f.name}: {annotation(f)} = {v!r}  # {comments[f.name]}")
    return "\n".join(lines)


def escape_markdown(text: str) -> str:
    """`<profile>`-style placeholders outside code spans as entities, so JupyterLab does not take them for tags."""
    parts = text.split("`")
    return "`".join(re.sub(r"<([\w-]+)>", r"&lt;\1&gt;", p) if i % 2 == 0 else p for i, p in enumerate(parts))


def notebook(title: str, intro: str, config: str, yaml_name: str, cells: list[str]) -> nbformat.NotebookNode:
    mod, cls_name = config.rsplit(".", 1)
    cls = getattr(importlib.import_module(mod), cls_name)
    nb = nbformat.v4.new_notebook()
    nb.metadata = {
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
        "language_info": {"name": "python"},
    }
    params = nbformat.v4.new_code_cell(parameters_cell(cls, ROOT / "params" / "tiny" / yaml_name))
    params.metadata["tags"] = ["parameters"]
    nb.cells = [nbformat.v4.new_markdown_cell(escape_markdown(f"# {title}\n\n{intro}")), params]
    nb.cells.append(
        nbformat.v4.new_code_cell(
            IMPORTS
            + f"from {mod} import {cls_name}\nfrom codelib.params import config_from_namespace\n\n"
            + f"cfg = config_from_namespace({cls_name}, globals())\ncfg"
        )
    )
    for c in cells:
        if c.startswith("## ") or (c.startswith("# ") and "\n" not in c.strip()):  # a heading; a comment opens code
            nb.cells.append(nbformat.v4.new_markdown_cell(escape_markdown(c)))
        else:
            nb.cells.append(nbformat.v4.new_code_cell(c))
    for i, cell in enumerate(nb.cells):
        cell["id"] = str(i)  # stable ids, the ones nbstripout (pre-commit) would give: regenerating changes nothing
    return nb


NOTEBOOKS = {}


def register(name, *args):
    NOTEBOOKS[name] = args


register(
    "00_tasks",
    "00 · Tasks",
    "Browse the benchmark tasks this repo trains and evaluates on: HumanEval (131/33 split), MBPP, HumanEval+/MBPP+, "
    "the CodeContests stdin/stdout sample and the synthetic suite of the `tiny` profile. In: the bundled data files. "
    "Out: nothing but the displays (counts per split, one rendered task, a picker in JupyterLab).",
    "codelib.explore.TasksConfig",
    "00_tasks.yaml",
    [
        "from codelib import explore\n\nexplore.counts_table()",
        "tasks = explore.load_for_browsing(cfg)\n"
        "print(f'{cfg.dataset}/{cfg.split}: {len(tasks)} tasks')\n"
        "explore.task_browser(tasks, show=cfg.show, interactive=cfg.interactive)",
    ],
)

TRAIN_INTRO = (
    "In: the starting policy `init` and the training split. Out: checkpoints/<profile>/{stage}/ (LoRA adapter, "
    "config.json, metrics.jsonl, a resumable checkpoint). Rerunning resumes from the last checkpoint."
)

register(
    "01_sft",
    "01 · Supervised fine-tuning (LoRA / QLoRA)",
    "TRL's `SFTTrainer` with a peft LoRA adapter on prompt → canonical solution of the training tasks, loss on the "
    "solution tokens only; 4-bit NF4 base (QLoRA) when `load_in_4bit` and CUDA is present. In: the base model and "
    "the training split. Out: checkpoints/<profile>/sft/ (adapter, config.json, metrics.jsonl); rerunning resumes.",
    "codelib.trainers.sft.Config",
    "01_sft.yaml",
    [
        "from codelib import launch, reports\n\n"
        "# processes > 1 starts `accelerate launch` with a live log instead of training in this kernel\n"
        'run = launch.train("codelib.trainers.sft", cfg, processes=cfg.processes)\n'
        "run",
        "fig = reports.plot_run(run, keys=['loss', 'learning_rate', 'grad_norm', 'mean_token_accuracy'])",
    ],
)
register(
    "02_reinforce",
    "02 · REINFORCE",
    "Our own loop (TRL has none): one sampled completion per task, scored by `rewards` (tiny: pass − α·tokens/100, "
    "the sandbox judging pass), "
    "loss = −(reward − baseline)·log p(completion), LoRA parameters only. " + TRAIN_INTRO.format(stage="reinforce"),
    "codelib.trainers.reinforce.Config",
    "02_reinforce.yaml",
    [
        "from codelib import launch, reports\n\n"
        "# processes > 1 starts `accelerate launch` with a live log instead of training in this kernel\n"
        'run = launch.train("codelib.trainers.reinforce", cfg, processes=cfg.processes)\n'
        "run",
        "fig = reports.plot_run(run)",
    ],
)
register(
    "03_ppo",
    "03 · PPO-Clip",
    "Our own loop (TRL 1.16 has no PPO trainer): rollouts with logp_old, batch-normalised advantages (or a value "
    "head on the last hidden state with `critic: value_head`), clipped ratio, several epochs per batch. Logs clip "
    "fraction, approximate KL, value loss and entropy. " + TRAIN_INTRO.format(stage="ppo"),
    "codelib.trainers.ppo.Config",
    "03_ppo.yaml",
    [
        "from codelib import launch, reports\n\n"
        "# processes > 1 starts `accelerate launch` with a live log instead of training in this kernel\n"
        'run = launch.train("codelib.trainers.ppo", cfg, processes=cfg.processes)\n'
        "run",
        "fig = reports.plot_run(run)",
    ],
)
register(
    "04_grpo",
    "04 · GRPO",
    "GRPO and its family (Dr. GRPO, DAPO, GSPO, CISPO) on a LoRA adapter with the project's sandbox rewards "
    "(`rewards`: name → weight, each term logged as rewards/<name>/mean): `backend: own` runs the project's online "
    "engine (the sampler, stop sequences and sandbox every algorithm shares), `backend: trl` TRL's `GRPOTrainer` on "
    "the same settings. Groups of `num_generations` completions per task, advantages within a group; the share of "
    "groups with no reward variance is logged as zero_std_frac, the clip fractions and the ratio every step. "
    + TRAIN_INTRO.format(stage="grpo"),
    "codelib.trainers.grpo.Config",
    "04_grpo.yaml",
    [
        "from codelib import launch, reports\n\n"
        "# processes > 1 starts `accelerate launch` with a live log instead of training in this kernel\n"
        'run = launch.train("codelib.trainers.grpo", cfg, processes=cfg.processes)\n'
        "run",
        "fig = reports.plot_run(run, keys=['reward_mean', 'pass_rate', 'completion_len', 'kl', 'zero_std_frac', "
        "'loss'])",
    ],
)
register(
    "05_dpo",
    "05 · Offline DPO from executed candidates",
    "baseline → candidates → annotation → preference data → DPO. The starting policy samples `n_candidates` per "
    "training task; the sandbox annotates each; passing/failing pairs (margin rule on test fraction, at most K per "
    "task) feed TRL's `DPOTrainer`, whose frozen reference is the starting adapter. In: `init`. Out: "
    "checkpoints/<profile>/dpo/ (candidates.jsonl, candidates_annotated.jsonl, nbest.jsonl, pairs.jsonl, "
    "manifest.json, the adapter, metrics.jsonl) and a merged full model under dpo/merged/.",
    "codelib.trainers.dpo.Config",
    "05_dpo.yaml",
    [
        "import pandas as pd\n"
        "from codelib import reports\n"
        "from codelib import models\n"
        "from codelib.trainers import dpo\n\n"
        "manifest = dpo.prepare(cfg)\n"
        "pd.DataFrame([manifest['counts']])",
        "## Candidate diversity and coverage",
        "pd.DataFrame([{**manifest['diversity'], 'tasks_with_no_pass': manifest['tasks_with_no_pass'], "
        "'tasks_with_no_fail': manifest['tasks_with_no_fail']}])",
        "from codelib import launch\n\n"
        'run = launch.train("codelib.trainers.dpo", cfg, processes=cfg.processes)\n'
        "fig = reports.plot_run(run, keys=['loss', 'rewards/margins', 'rewards/accuracies', 'rewards/chosen', "
        "'rewards/rejected'])",
        "## Merge the adapter into a full model (for vLLM or sharing)",
        "merged = models.merge_adapter(run)\nmerged",
    ],
)
register(
    "06_eval",
    "06 · Evaluation: pass@k with confidence intervals",
    "Every checkpoint of `checkpoints` (hub name, model dir or LoRA adapter dir) generates on the held-out split; "
    "the sandbox judges each sample; pass@k uses the unbiased estimator with a bootstrap 95% interval over tasks, "
    "and every checkpoint is compared with `baseline` on the same tasks (paired). Out: "
    "checkpoints/<profile>/eval/<name>/ (samples.jsonl, summary.json) and results.csv / .md in `out_dir` (empty: "
    "beside the summaries, so a look with a smaller `limit` never rewrites the pipeline's "
    "reports/<profile>/results.md).",
    "codelib.evaluator.EvalConfig",
    "06_eval.yaml",
    [
        "from IPython.display import Markdown, display\n"
        "from codelib import evaluator\n\n"
        "df = evaluator.evaluate(cfg)  # the table in %, below",
        "display(Markdown(evaluator.results_dir(cfg).joinpath('results.md').read_text()))",
    ],
)
register(
    "07_plots",
    "07 · Plots and tables",
    "Training curves of every stage (with the execution telemetry: verdict classes of the rollouts, zero-variance "
    "groups, the sandbox's share of a step), held-out pass@1 during training beside the training pass rate, pass@1 "
    "per checkpoint with 95% intervals, the verdict classes of the eval samples, the length–accuracy trade-off, "
    "pass@k curves, a per-task heat map, the results table and the evaluated stages side by side. "
    "In: checkpoints/<profile>/. "
    "Out: `out_dir`/figures/*.png, where `out_dir` empty is a scratch folder, checkpoints/<profile>/plots/ (the "
    "pipeline passes reports/<profile>/), so a run to look never overwrites the committed figures; the results table "
    "is the eval stage's (reports/<profile>/results.md) and the full comparison of algorithms `make compare`'s "
    "(reports/<profile>/comparison.md), both shown, neither written here.",
    "codelib.reports.PlotsConfig",
    "07_plots.yaml",
    [
        "from IPython.display import Markdown, display\nfrom codelib import reports\n\npaths = reports.make_all(cfg)",
        "display(Markdown(reports.reports_root().joinpath(cfg.profile, 'results.md').read_text()))",
        "## The stages shown here side by side (the full comparison is `make compare`'s comparison.md)",
        "from codelib import comparison\n\n"
        "summaries = reports.load_summaries(cfg.profile, cfg.checkpoints or None)\n"
        "display(Markdown(comparison.comparison_markdown(cfg.profile, comparison.comparison_frame(cfg.profile, "
        "summaries), summaries=summaries)))",
    ],
)
register(
    "08_study",
    "08 · Study: arms x seeds, intervals that include the seed spread",
    "The summary of a study (`python -m codelib.study params/<profile>/studies/<name>.yaml` trains every run and "
    "evaluates it on the same held-out tasks, then runs this notebook). Per arm: pass@1 as the mean over training "
    "seeds with a 95% interval from a two-level bootstrap (seeds, then tasks), beside the tasks-only interval a "
    "single-seed table would report; every seed as a point; paired per-task comparisons between arms; pass@k curves "
    "per arm. In: the study file and checkpoints/<profile>/studies/<name>/eval/. Out: reports/<profile>/studies/"
    "<name>/ (summary.md, summary.csv, per_seed.csv, comparisons.csv, pass_at_k.csv, figures/*.png).",
    "codelib.study.StudyReportConfig",
    "08_study.yaml",
    [
        "from IPython.display import Markdown, display\n"
        "from codelib.study import make_figures, summarise\n\n"
        "summary = summarise(cfg)\n"
        "display(Markdown(summary.study.summary_dir.joinpath('summary.md').read_text()))",
        "## Every seed, and the paired comparisons",
        "paths = make_figures(summary)",
        "summary.per_seed",
        "summary.comparisons",
    ],
)
register(
    "explore",
    "Explore completions",
    "Pick a checkpoint and a task and read the task's prompt beside its completions, with their verdicts, details "
    "and rewards; then compare two checkpoints on the same task, side by side at full width, each with its pass "
    "rate and its own picker (starting where they disagree most). In: checkpoints/<profile>/eval/. Out: nothing. "
    "Run by papermill or the pipeline (no one to click), it prints one task of each view instead.",
    "codelib.explore.ExploreConfig",
    "explore.yaml",
    [
        "from codelib import explore\n\nexplore.completions_explorer(cfg)",
        "explore.comparison_view(cfg)",
    ],
)

register(
    "09_repair",
    "09 · Multi-turn repair with execution feedback",
    "attempt → feedback from the public tests → attempt, up to `turns`. Each task's tests are split (seeded, "
    "recorded) into public ones, whose first failure the model is shown with the value the function returned, and "
    "hidden ones; every verdict that scores runs all tests. Three steps: SFT with repair examples mixed in (a "
    "mutated solution, its feedback, the fix) so the policy knows the format; RLOO over multi-turn episodes, the "
    "loss on the policy's own tokens only; then success after t turns with feedback, with an empty feedback message, "
    "and pass@t of independent samples (same budget), paired over tasks. Opt-in: `python -m codelib.pipeline --only "
    "09_repair`. In: `sft_params`' base model, the training split. Out: checkpoints/<profile>/{repair_sft, repair, "
    "repair_eval}/ and reports/<profile>/repair/ (summary.md, comparisons.csv, figures/).",
    "codelib.trainers.repair.Config",
    "09_repair.yaml",
    [
        "from IPython.display import Image, Markdown, display\n"
        "from codelib import explore, launch, reports\n"
        "from codelib.trainers import repair\n\n"
        '# SFT with repair examples mixed in (None when sft_stage is "")\n'
        "sft_run = repair.train_sft(cfg)\n"
        "sft_run",
        "## Multi-turn RL (RLOO on the last attempt's reward)",
        "# processes > 1 starts `accelerate launch` with a live log instead of training in this kernel\n"
        'run = launch.train("codelib.trainers.repair", cfg, processes=cfg.processes)\n'
        'fig = reports.plot_run(run, keys=["reward_mean", "turn1_pass_rate", "retry_share", "repaired_share", '
        '"turns_mean", "kl", "loss"])',
        "## Feedback vs empty feedback vs independent samples",
        "summaries = repair.evaluate(cfg)\n"
        'report = reports.reports_root() / cfg.profile / "repair"\n'
        'display(Markdown((report / "summary.md").read_text()))',
        'display(Image(report / "figures" / "success_by_turn.png"), Image(report / "figures" / "differences.png"))',
        "## The probe: tasks whose answer only the tests hold (`probe_eval` > 0)",
        'probe_figures = [report / "figures" / f"{name}_probe.png" for name in ("success_by_turn", "differences")]\n'
        "display(*[Image(f) for f in probe_figures if cfg.probe_eval and f.exists()])",
        "## Every turn of an episode",
        'explore.episode_explorer(repair.eval_dir(cfg, list(cfg.eval_checkpoints)[-1]) / "episodes.jsonl")',
    ],
)


def trainer_notebook(stage: str, config: str) -> tuple:
    """The notebook of a trainer stage nobody registered above: its module docstring's first paragraph, the
    parameters, a (live-logged) run and its curves. A new algorithm needs no entry here."""
    module = importlib.import_module(config.rsplit(".", 1)[0])
    doc = (module.__doc__ or stage).strip().split("\n\n")
    title = f"{stage.split('_')[0]} · {doc[0].splitlines()[0].rstrip('.')}"
    intro = " ".join(" ".join(doc[1:2]).split()) + " " + TRAIN_INTRO.format(stage=stage.split("_", 1)[-1])
    cells = [
        f"from codelib import launch, reports\n\nrun = launch.train({module.__name__!r}, cfg, "
        "processes=cfg.processes)\nrun",
        "fig = reports.plot_run(run)",
    ]
    return (title, intro, config, f"{stage}.yaml", cells)


def all_notebooks() -> dict[str, nbformat.NotebookNode]:
    """Every notebook this tool writes, by name: the registered ones and one per trainer stage nobody registered."""
    from codelib.pipeline import STAGES

    books = dict(NOTEBOOKS)
    for stage, config in STAGES.items():
        if stage not in books and config.startswith("codelib.trainers."):
            books[stage] = trainer_notebook(stage, config)
    return {name: notebook(*args) for name, args in books.items()}


def main(only: list[str] | None = None) -> None:
    out = ROOT / "notebooks"
    out.mkdir(exist_ok=True)
    for name, nb in all_notebooks().items():
        if only and name not in only:
            continue
        nbformat.write(nb, out / f"{name}.ipynb")
        print("wrote", out / f"{name}.ipynb")


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(prog="python tools/make_notebooks.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", help="only these notebooks (e.g. 07_plots explore); default: every one")
    args = ap.parse_args()
    unknown = sorted(set(args.names) - set(NOTEBOOKS) - set(__import__("codelib.pipeline").pipeline.STAGES))
    if unknown:
        raise SystemExit(f"error: no notebook named {', '.join(unknown)}; known: {', '.join(NOTEBOOKS)}")
    main(args.names or None)
