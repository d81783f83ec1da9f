"""Repair examples for SFT (synthetic tasks): a plausible wrong attempt, the feedback the sandbox would give, the fix.

SFT on these teaches the format of a repair turn (attempt, `# feedback:` comment, the prompt again) before the RL
stage (`codelib.trainers.repair.train_sft`); a share shows an empty feedback message, so the evaluation's
empty-feedback arm is a format the model knows too.
"""

from __future__ import annotations

import ast
import random
import re
from dataclasses import replace

from codelib.engine.repair import FEEDBACK_CHARS, TestSplit, feedback_from_detail, split_tests, test_units, turn_prompt
from codelib.tasks import Task


def _mutations(body: str, rng: random.Random) -> list[str]:
    """Wrong variants of a one-line `return ...` body, most plausible first: a changed constant, a swapped
    operator or builtin, a changed string. A bare constant (the probe family, `synthetic.probe_specs`) gets guesses:
    other constants of its kind, unrelated to it, so only the feedback can tell the fix."""
    bare = re.fullmatch(r"(\s*return )(\d+|'[a-z]+')\n?", body)
    if bare:
        from codelib.tasks.synthetic import LETTERS, PROBE_INTS

        value = ast.literal_eval(bare[2])
        number = isinstance(value, int)
        draws = (rng.choice(PROBE_INTS) if number else rng.choice(LETTERS) + rng.choice(LETTERS) for _ in range(8))
        guesses = [g for g in draws if g != value]
        return [f"{bare[1]}{g!r}\n" for g in guesses]
    out = []
    for m in re.finditer(r"(?<![\w.])\d+(?![\w.])", body):
        v = int(m.group())
        for d in rng.sample([1, -1, 2, -2, 3, 10], 3):
            if v + d >= 0:
                out.append(body[: m.start()] + str(v + d) + body[m.end() :])
    swaps = [
        (" + ", " - "),
        (" - ", " + "),
        (" * ", " + "),
        (" // ", " % "),
        (" % ", " // "),
        (" > ", " >= "),
        (" < ", " <= "),
        (" > ", " < "),
        ("min(", "max("),
        ("max(", "min("),
        (".upper()", ".lower()"),
        ("[::-1]", ""),
        ("len(", "sum(1 for _ in "),
        ("sorted(", "list("),
    ]
    for a, b in swaps:
        if a in body:
            out.append(body.replace(a, b, 1))
    for m in re.finditer(r'"([a-z]{1,2})"', body):
        out.append(body[: m.start(1)] + m.group(1)[::-1] + "x" + body[m.end(1) :])
    return out


def _local_feedback(task: Task, body: str, split: TestSplit) -> tuple[str, str] | None:
    """(status, detail) of our own (trusted, generated) body on the public tests, worded as the judge words it;
    None when it passes them. Runs in this process: the code is the generator's, never a model's."""
    from codelib.sandbox.judge import _short_repr

    ns: dict = {}
    try:
        exec(task.prompt + body, ns)  # noqa: S102 - our own generated code
    except Exception as e:
        return "failed", f"{type(e).__name__}: {e}"
    fn = ns[task.entry_point]
    units, lines = test_units(task), task.tests.split("\n")
    for i in split.public:
        first, _ = units[i]
        src = lines[first - 1].strip()
        m = re.match(r"assert candidate\((.*)\) == (.*)$", src)
        if not m:
            return None
        args, expected = ast.literal_eval(f"({m[1]},)"), ast.literal_eval(m[2])
        try:
            got = fn(*args)
        except Exception as e:
            return "failed", f"line {first}: {src[:120]}: {type(e).__name__}: {e}"
        if got != expected:
            return "failed", f"line {first}: {src[:120]}: AssertionError (got {_short_repr(got)})"
    return None


def repair_examples(
    tasks: list[Task],
    n: int,
    seed: int = 0,
    public_rule: str = "auto",
    split_seed: int = 0,
    empty_share: float = 0.2,
    feedback_chars: int = FEEDBACK_CHARS,
) -> list[Task]:
    """n repair examples from synthetic tasks, as Tasks SFT trains on: the prompt is the task's prompt, a wrong
    attempt (a mutated canonical solution that fails a public test), the feedback the sandbox would give, and the
    prompt again; the solution is the canonical one. A share `empty_share` shows an empty feedback message instead,
    so the empty-feedback arm of the evaluation is a format the model knows."""
    rng = random.Random(seed)
    out = []
    order = list(range(len(tasks)))
    rng.shuffle(order)
    for i in order:
        if len(out) >= n:
            break
        task = tasks[i]
        split = split_tests(task, public_rule, split_seed)
        for wrong in _mutations(task.canonical_solution, rng)[:6]:
            found = _local_feedback(task, wrong, split)
            if found is None:
                continue
            empty = rng.random() < empty_share
            fb = "" if empty else feedback_from_detail(found[1], found[0], task, feedback_chars)
            prompt = turn_prompt(task, [(wrong, fb)])
            out.append(replace(task, task_id=f"{task.task_id}/repair", prompt=prompt))
            break
    return out


def sft_tasks(train: list[Task], repair: int, seed: int = 0, probe: list[Task] = (), **kwargs) -> list[Task]:
    """The training split with `repair` repair examples mixed in (seeded), for `codelib.trainers.sft.train`; `probe`
    tasks (`synthetic.probe_specs`, the answer only in the tests) join as they are and as one repair example each."""
    mixed = list(train) + repair_examples(train, repair, seed=seed, **kwargs)
    if probe:
        mixed += list(probe) + repair_examples(probe, len(probe), seed=seed, **kwargs)
    random.Random(seed).shuffle(mixed)
    return mixed
