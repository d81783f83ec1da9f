"""Rewards: TRL-signature reward functions, judged by the sandbox. The one place completions become rewards.

Every reward is `fn(completions, **columns) -> list[float | None]`, the contract of TRL's `GRPOTrainer`, so
the same functions serve TRL, our REINFORCE/PPO rollouts (`codelib.engine.rollout`), DPO's candidate ranking and the
explorer. `columns` are the Task fields as lists, one entry per completion (`task_id, prompt, tests,
entry_point, canonical_solution, kind, plus_inputs, atol`); TRL passes the prompt column as `prompts` and adds
`completion_ids`, `trainer_state`, which are used or ignored. Two optional columns skip work already done:
`verdicts` (one sandbox Verdict, or an annotated row with `passed` / `test_fraction`, per completion) and
`tokens` (generated token counts). A completion is a string or TRL's conversational form
(`[{"role": "assistant", "content": ...}]`). `None` means "not applicable" (a row without tests).

All sandbox rewards of a batch go through one `Sandbox.map` of the shared pool, and verdicts are cached, so
`pass_reward` and `test_fraction_reward` on the same batch run each program once. Size the pool and its limits
with `configure_sandbox(workers=..., timeout_s=..., memory_mb=...)`.

A params file names rewards as `rewards: {pass: 1.0, length: {alpha: 0.01}}`: a number is a weight, a mapping
holds the factory's arguments (and `weight`, default 1). `make_rewards(spec)` turns that into one callable whose
`score` gives the weighted sum and every term (summed in float32, the dtype every trainer holds rewards in).
`REWARDS` maps those names to factories: `REWARDS["length"](alpha=0.01)`.
"""

from __future__ import annotations

import re

import numpy as np

from codelib import sandbox
from codelib.engine.extraction import FENCE, compiles, extract_completion, message_text
from codelib.engine.judging import _tasks, passed_of, test_fraction_of, verdicts  # noqa: F401  (rewards.verdicts)
from codelib.engine.lint import lint
from codelib.tasks import Task

configure_sandbox = sandbox.configure
# the REINFORCE experiment's reward, REINFORCE's and PPO's default: pass - alpha * tokens / 100 with alpha 0.01
PASS_MINUS_LENGTH = {"pass": 1.0, "length": {"alpha": 0.01}}
_TOKEN = re.compile(r"\w+|[^\w\s]")


# ---------------------------------------------------------------------------------------------------------------
# built-in rewards


class _PassReward:
    """1.0 when all tests pass, else 0.0 (plus=True: also HumanEval+/MBPP+ extra inputs)."""

    def __init__(self, plus: bool = False):
        self.plus = plus
        self.__name__ = "pass_plus_reward" if plus else "pass_reward"

    def __call__(self, completions, **columns) -> list[float | None]:
        return [None if v is None else float(passed_of(v)) for v in verdicts(completions, plus=self.plus, **columns)]


class _TestFractionReward:
    """The share of asserts (stdio: test cases) that pass."""

    def __init__(self, plus: bool = False):
        self.plus = plus
        self.__name__ = "test_fraction_plus_reward" if plus else "test_fraction_reward"

    def __call__(self, completions, **columns) -> list[float | None]:
        return [None if v is None else test_fraction_of(v) for v in verdicts(completions, plus=self.plus, **columns)]


def pass_reward(completions, **columns) -> list[float | None]:
    """1.0 when the completion passes all the task's tests in the sandbox, else 0.0.

    >>> pass_reward(
    ...     ["    return a + b\\n"], prompt=["def add(a, b):\\n"], tests=["assert add(1, 2) == 3"], entry_point=["add"]
    ... )
    [1.0]
    """
    return _PassReward()(completions, **columns)


def test_fraction_reward(completions, **columns) -> list[float | None]:
    """The share of the task's asserts (stdio: test cases, in order, up to the first failure) that pass.

    >>> test_fraction_reward(
    ...     ["    return 3\\n"], prompt=["def f():\\n"], tests=["assert f() == 3\\nassert f() == 4"], entry_point=["f"]
    ... )
    [0.5]
    """
    return _TestFractionReward()(completions, **columns)


test_fraction_reward.__test__ = False  # not a pytest test, though its name starts with "test_"


class _LengthPenalty:
    """-alpha * tokens / 100 (the REINFORCE experiment's length term), computed in float32."""

    def __init__(self, alpha: float = 0.01, tokenizer=None):
        self.alpha, self.tokenizer = float(alpha), tokenizer
        self.__name__ = "length_penalty"

    def count(self, text: str, ids=None) -> int:
        if ids is not None:
            return ids if isinstance(ids, int) else len(ids)
        if self.tokenizer is not None:
            return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        return len(_TOKEN.findall(text))

    def __call__(self, completions, completion_ids=None, tokens=None, **columns) -> list[float | None]:
        ids = tokens if tokens is not None else completion_ids
        ids = ids if ids is not None else [None] * len(completions)
        counts = np.array([self.count(message_text(c), i) for c, i in zip(completions, ids, strict=True)], np.float32)
        # float32, operation by operation, as a trainer's tensor would compute it: one value in every trainer
        return (np.float32(-self.alpha) * counts / np.float32(100)).tolist()


class _OverlongPenalty(_LengthPenalty):
    """DAPO's soft overlong punishment: 0 up to max_tokens - cache tokens, then falling linearly to -1 at max_tokens,
    -1 beyond (Yu et al. 2025, eq. 13)."""

    def __init__(self, max_tokens: int, cache: int, tokenizer=None):
        if not 0 < cache <= max_tokens:
            raise ValueError(
                f"overlong needs 0 < cache <= max_tokens; you gave cache={cache}, max_tokens={max_tokens}"
            )
        super().__init__(1.0, tokenizer)
        self.max_tokens, self.cache = int(max_tokens), int(cache)
        self.__name__ = "overlong_penalty"

    def __call__(self, completions, completion_ids=None, tokens=None, **columns) -> list[float | None]:
        ids = tokens if tokens is not None else completion_ids
        ids = ids if ids is not None else [None] * len(completions)
        start = self.max_tokens - self.cache
        out = []
        for c, i in zip(completions, ids, strict=True):
            n = self.count(message_text(c), i)
            out.append(0.0 if n <= start else -1.0 if n > self.max_tokens else (start - n) / self.cache)
        return out


def overlong_penalty(max_tokens: int = 48, cache: int = 12, tokenizer=None) -> _OverlongPenalty:
    """DAPO's soft overlong penalty: 0 for completions of at most max_tokens - cache tokens, linearly down to -1 at
    max_tokens (set it to the generation budget, max_new_tokens), -1 past it.

    >>> overlong_penalty(max_tokens=4, cache=2)([""], tokens=[3])
    [-0.5]
    """
    return _OverlongPenalty(max_tokens, cache, tokenizer)


def length_penalty(alpha: float = 0.01, tokenizer=None) -> _LengthPenalty:
    """A reward of -alpha * tokens / 100 per completion.

    Tokens are, in order of preference: the `tokens` column (counts), the policy's own `completion_ids` (TRL
    passes them), the given tokenizer's count, else a regex count of words and punctuation marks (`\\w+|[^\\w\\s]`).

    >>> [round(r, 6) for r in length_penalty(alpha=0.5)(["return a + b"])]
    [-0.02]
    """
    return _LengthPenalty(alpha, tokenizer)


def compile_reward(completions, **columns) -> list[float | None]:
    """1.0 when prompt + extracted completion compiles (stdio: the program), else 0.0; nothing is run.

    >>> compile_reward(["    return a +\\n"], prompt=["def add(a, b):\\n"])
    [0.0]
    """
    out = []
    for task, text in _rows_or_prompts(completions, columns):
        code = extract_completion(text, task)
        out.append(float(compiles(code if task.kind == "stdio" else task.prompt + code)))
    return out


def format_reward(completions, **columns) -> list[float | None]:
    """1.0 for exactly one fenced code block, or for a bare body with no fences that compiles after the prompt.

    >>> format_reward(["```python\\nreturn 1\\n```", "```\\nx\\n``` and ```\\ny\\n```"], prompt=["def f():\\n"] * 2)
    [1.0, 0.0]
    """
    out = []
    for task, text in _rows_or_prompts(completions, columns):
        text = message_text(text)
        fences = len(re.findall(r"^[ \t]*```", text, flags=re.M))
        if fences:
            out.append(1.0 if fences == 2 and len(FENCE.findall(text)) == 1 else 0.0)
        else:
            code = extract_completion(text, task)
            out.append(float(bool(text.strip()) and compiles(code if task.kind == "stdio" else task.prompt + code)))
    return out


def quality_reward(completions, **columns) -> list[float | None]:
    """1 - 0.2 per lint finding in the completion's own lines (see `lint`), floored at 0; 0.0 if it does not parse.

    >>> quality_reward(["    import os\\n    return a\\n"], prompt=["def f(a):\\n"])
    [0.8]
    """
    out = []
    for task, text in _rows_or_prompts(completions, columns):
        code = extract_completion(text, task)
        head = "" if task.kind == "stdio" else task.prompt
        findings = lint(head + code, first_line=head.count("\n") + 1)
        out.append(0.0 if any(f.startswith("syntax error") for f in findings) else max(0.0, 1.0 - 0.2 * len(findings)))
    return out


def _rows_or_prompts(completions, columns) -> list[tuple[Task, object]]:
    """(task, completion) pairs; rewards that run nothing need only the prompt column."""
    cols = dict(columns)
    tests = cols.get("tests")
    cols["tests"] = [t or "-" for t in tests] if isinstance(tests, (list, tuple)) else ["-"] * len(completions)
    return [(t, c) for t, c in zip(_tasks(len(completions), cols), completions, strict=True)]


# ---------------------------------------------------------------------------------------------------------------
# the multi-criteria sum and the name -> factory table


class _Weighted:
    """sum_k w_k * reward_k, skipping a component where it returns None (None if every one does)."""

    def __init__(self, parts: list[tuple[float, object]]):
        self.parts = parts
        self.__name__ = "weighted"
        names = self.names
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:  # the terms are logged and summed by name: two of one name would merge into one
            raise ValueError(
                f"two reward terms share the name {twice[0]!r} (their __name__): give each of your own functions a "
                "name of its own (a def, not a lambda)"
            )

    @property
    def names(self) -> list[str]:
        return [getattr(fn, "__name__", type(fn).__name__) for _, fn in self.parts]

    @property
    def weights(self) -> list[float]:
        return [w for w, _ in self.parts]

    def score(self, completions, **columns) -> tuple[list[float], dict[str, list[float | None]]]:
        """(weighted sum per completion, each term's values by name); a None term counts 0 in the sum.

        The sum runs in float32, term by term in order, as a trainer's tensors would: the same rewards bit for bit
        whichever trainer asks."""
        terms = {name: fn(completions, **columns) for name, (_, fn) in zip(self.names, self.parts, strict=True)}
        total = np.zeros(len(completions), np.float32)
        for (weight, _), values in zip(self.parts, terms.values(), strict=True):
            total += np.float32(weight) * np.array([0.0 if v is None else v for v in values], np.float32)
        return total.tolist(), terms

    def __call__(self, completions, **columns) -> list[float | None]:
        totals, terms = self.score(completions, **columns)
        applies = [any(values[i] is not None for values in terms.values()) for i in range(len(completions))]
        return [t if ok else None for t, ok in zip(totals, applies, strict=True)]


def weighted(**weights_or_fns) -> _Weighted:
    """The multi-criteria reward `w_c*compile + w_f*functional + w_q*quality + ...`.

    Each keyword names a reward in REWARDS (with or without `_reward`) and gives its weight, or a dict with
    `weight` and the factory's arguments, or a (weight, callable) pair for a reward of your own.

    >>> weighted(compile=0.5, quality=0.5)(["    return a\\n"], prompt=["def f(a):\\n"])
    [1.0]
    """
    parts = []
    for name, spec in weights_or_fns.items():
        if isinstance(spec, (int, float)):
            parts.append((float(spec), make_reward(name)))
        elif isinstance(spec, dict):
            spec = dict(spec)
            weight = float(spec.pop("weight", 1.0))
            parts.append((weight, make_reward(spec.pop("reward", name), **spec)))
        elif isinstance(spec, (tuple, list)) and len(spec) == 2 and callable(spec[1]):
            parts.append((float(spec[0]), spec[1]))
        elif callable(spec):
            parts.append((1.0, spec))
        else:
            raise ValueError(f"weighted: {name}={spec!r} is not a weight, a dict with 'weight', or (weight, fn)")
    if not parts:
        raise ValueError(
            "weighted needs at least one component, e.g. weighted(pass=1.0, length={'weight': 1, 'alpha': 0.01})"
        )
    return _Weighted(parts)


REWARDS = {
    "pass": lambda plus=False: _PassReward(plus) if plus else pass_reward,
    "test_fraction": lambda plus=False: _TestFractionReward(plus) if plus else test_fraction_reward,
    "length": length_penalty,
    "overlong": overlong_penalty,
    "compile": lambda: compile_reward,
    "format": lambda: format_reward,
    "quality": lambda: quality_reward,
    "weighted": weighted,
}


def make_reward(name: str, **kwargs):
    """REWARDS[name](**kwargs), accepting `pass_reward`-style names and `length_penalty`; errors list the names."""
    key = name.removesuffix("_reward").removesuffix("_penalty")
    if key not in REWARDS:
        raise ValueError(f"unknown reward {name!r}; choose one of {', '.join(REWARDS)}")
    return REWARDS[key](**kwargs)


def make_rewards(spec: dict) -> _Weighted:
    """A params file's `rewards:` mapping -> one weighted reward (`.score`, `.names`, `.weights`, `.parts`).

    `{pass: 1.0, length: {alpha: 0.01}}`: a number is the term's weight; a mapping holds the factory's arguments and
    optionally `weight` (default 1.0). Errors name the term and the valid names.

    >>> reward = make_rewards({"compile": 1.0, "length": {"alpha": 10}})
    >>> total, terms = reward.score(["    return 1\\n"], prompt=["def f():\\n"])
    >>> [round(t, 6) for t in total], list(terms)
    ([0.8], ['compile_reward', 'length_penalty'])
    """
    if not isinstance(spec, dict) or not spec:
        raise ValueError(f"rewards must name at least one reward, e.g. {{pass: 1.0}}; got {spec!r}")
    try:
        return weighted(**spec)
    except TypeError as e:  # a factory argument it does not take
        raise ValueError(f"rewards {spec}: {e}") from e
