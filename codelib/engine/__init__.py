"""The RL engine around the trainers: completions -> extracted programs (`extraction`) -> sandbox verdicts ->
rewards (`rewards`, `lint`; verdict classes in `verdicts`), the rollouts of every online trainer (`rollout`), run logs
(`metrics`), offline candidates and preference pairs (`candidates`), multi-turn repair episodes and their SFT data
(`repair`, `repair_data`). The algorithms' registries are `codelib.algorithms`; the trainers that drive all this are
`codelib.trainers`.

In: Tasks, a policy, the sandbox. Out: rewards, rollouts, metrics.jsonl / samples.jsonl rows, candidate manifests.
"""
