"""What runs the stages: a profile's notebooks in order (`pipeline`), a trainer from a notebook (`launch`), studies
of arms x seeds (`study`, read from a study file by `study_file`, summarised by `study_report`).

In: params files, notebooks, the stage registry. Out: executed notebooks, checkpoints, evaluations, study summaries.
This box is last: it may import every other one.
"""
