"""Evaluation and its statistics: checkpoints sampled and judged on held-out tasks (`evaluator`, with the one
sampling setting in `eval_sampling`), pass@k and its intervals (`stats`), pass@k curves (`passk`), multi-turn repair's
evaluation (`repair_eval`).

In: checkpoints, Tasks, the sandbox, the rewards' verdicts. Out: eval records (summary.json, samples.jsonl), pass@k
with confidence intervals, paired comparisons.
"""
