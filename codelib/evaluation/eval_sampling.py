"""How every evaluation samples, in one place: the eval stage (`EvalConfig`'s defaults), the held-out pass@1 during
training (`trainers.common.heldout_eval`) and repair's comparison (`trainers.repair.Config`'s defaults) all read
`EVAL_SAMPLING`, so two evaluations of one checkpoint draw the same samples and agree.

The seed is apart from every training seed: an evaluation does not change when a run's seed does.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EvalSampling:
    temperature: float = 0.8  # sampled, not greedy: pass@k for k > 1 needs distinct samples
    top_p: float = 1.0  # nucleus sampling off by default (a real profile's 06_eval may set 0.95)
    seed: int = 1234  # sampling seed of every evaluation


EVAL_SAMPLING = EvalSampling()
