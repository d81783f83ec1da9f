"""Multi-turn repair with execution feedback: public and hidden tests, feedback text, episodes, their evaluation.

A task's tests are split, seeded and recorded, into **public** ones (their failures may be shown to the model) and
**hidden** ones; the verdict that scores an attempt always runs all of them. An *episode* is attempt -> feedback ->
attempt, up to `turns` attempts: each attempt is judged twice in one sandbox call, on a copy of the task whose tests
are only the public ones (its verdict's `detail` is the feedback: the first failing public assert with the value
the function returned, or the error's last line) and on the whole task (the attempt's real verdict). The episode
stops when the public tests pass or the turns run out; its result is its last attempt's verdict on all tests.

The model sees the feedback as a Python comment between its attempt and the prompt again, so any tokenizer carries
it and a completion-style model continues it like any other prompt (this project prompts every model in completion
mode, without a chat template):

    def f(x):
        \"\"\"Return x plus 5.\"\"\"
        return x + 6
    # feedback: assert f(1) == 6 failed, got 7
    def f(x):
        \"\"\"Return x plus 5.\"\"\"

Rules for the split (`public_rule`): "half" (synthetic tasks: half of the asserts, at least one, chosen with a seed
per task), "first" (HumanEval, MBPP, stdio: the first assert statement of the tests, or the first case, is public),
"auto" (half for synthetic tasks, first for the others). A test is one top-level statement that holds an assert
(in `check()` or at module level, as the judge counts them); for stdio and calls tasks one case.

Beside this module: `codelib.engine.repair_data` (repair examples for SFT), `codelib.evaluation.repair_eval` (the
three-way comparison of Olausson et al. (2023): success after t turns with feedback, with an empty message, and pass@t
of independent samples, paired over tasks), `codelib.reports.repair` (its tables and figures),
`codelib.trainers.repair` (the RL stage)."""

from __future__ import annotations

import ast
import json
import random
import re
import time
from dataclasses import asdict, dataclass, field, replace

from codelib import sandbox
from codelib.engine.extraction import extract_completion
from codelib.policy.generation import encode_prompts, generate, stops_for
from codelib.tasks import Task

FEEDBACK_PREFIX = "# feedback:"
FEEDBACK_CHARS = 160  # a feedback message is cut to this many characters
RULES = ("auto", "half", "first")
CASE_KINDS = ("stdio", "calls")  # tasks whose tests are JSON cases: one test per case
MODES = ("tests", "empty")  # what the model is shown between turns: the public tests' feedback, or nothing


# ---------------------------------------------------------------------------------------------------------------
# public and hidden tests


@dataclass(frozen=True)
class TestSplit:
    """Which of a task's tests are public (indices into `test_units`), seeded and recorded."""

    task_id: str
    public: tuple[int, ...]
    hidden: tuple[int, ...]
    rule: str
    seed: int


def test_units(task: Task) -> list[tuple[int, int]]:
    """The task's tests as (first line, last line), 1-based, of each statement that holds an assert (function tasks:
    top-level statements of `check()` and of the module, as the judge counts them); stdio, calls: (i, i) per case."""
    if task.kind in CASE_KINDS:
        return [(i, i) for i in range(len(json.loads(task.tests)))]
    tree = ast.parse(task.tests)
    units = []

    def holds_assert(node) -> bool:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return False
        return any(isinstance(n, ast.Assert) for n in ast.walk(node))

    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "check":
            units += [(s.lineno, s.end_lineno) for s in node.body if holds_assert(s)]
        elif holds_assert(node):
            units.append((node.lineno, node.end_lineno))
    return units


def resolve_rule(task: Task, rule: str) -> str:
    if rule not in RULES:
        raise ValueError(f"public_rule must be one of {', '.join(RULES)}; you gave {rule!r}")
    if rule == "auto":
        return "half" if task.task_id.startswith("synthetic/") else "first"
    return rule


def split_tests(task: Task, rule: str = "auto", seed: int = 0) -> TestSplit:
    """The public/hidden split of one task: a function of (task id, rule, seed) alone."""
    rule = resolve_rule(task, rule)
    n = len(test_units(task))
    if n == 0:
        return TestSplit(task.task_id, (), (), rule, seed)
    if rule == "first":
        public = [0]
    else:  # half, at least one; a task with 2+ tests keeps at least one hidden
        k = max(1, n // 2)
        public = sorted(random.Random(f"{seed}:{task.task_id}").sample(range(n), k))
    hidden = [i for i in range(n) if i not in public]
    return TestSplit(task.task_id, tuple(public), tuple(hidden), rule, seed)


def public_task(task: Task, split: TestSplit) -> Task:
    """A copy of the task whose tests are only its public ones (what the feedback is built from)."""
    if task.kind in CASE_KINDS:
        cases = json.loads(task.tests)
        return replace(task, tests=json.dumps([cases[i] for i in split.public]), plus_inputs="")
    units = test_units(task)
    drop = {ln for i in split.hidden for ln in range(units[i][0], units[i][1] + 1)}
    lines = task.tests.split("\n")
    kept = [ln for i, ln in enumerate(lines, start=1) if i not in drop]
    return replace(task, tests="\n".join(kept), plus_inputs="")


def hidden_sources(task: Task, split: TestSplit) -> list[str]:
    """The source text of each hidden test (what feedback must never show)."""
    if task.kind in CASE_KINDS:
        cases = json.loads(task.tests)
        return [json.dumps(cases[i]) for i in split.hidden]
    units, lines = test_units(task), task.tests.split("\n")
    return ["\n".join(lines[units[i][0] - 1 : units[i][1]]).strip() for i in split.hidden]


# ---------------------------------------------------------------------------------------------------------------
# feedback


_ASSERT = re.compile(r"^line \d+: (?P<src>.*): AssertionError(?P<msg>: .*?)?(?: \(got (?P<got>.*)\))?$", re.S)
_RAISED = re.compile(r"^line \d+: (?P<src>.*?): (?P<err>[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)\b.*)$", re.S)


def sanitize(text: str, limit: int = FEEDBACK_CHARS) -> str:
    """One line of printable ASCII, whitespace collapsed, at most `limit` characters."""
    text = "".join(c if c.isascii() and c.isprintable() else " " for c in str(text))
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


def feedback_from_detail(detail: str, status: str, task: Task, limit: int = FEEDBACK_CHARS) -> str:
    """Feedback text from a verdict's detail on the *public* tests: the failing assert with the value the function
    returned, the exception a call raised, or the error's last line."""
    if status == "passed":
        return ""
    if status == "timeout":
        return sanitize(f"timed out ({detail})", limit) if detail else "timed out"
    entry = task.entry_point or "candidate"
    detail = str(detail).strip()

    def named(src: str) -> str:
        return re.sub(r"\bcandidate\(", f"{entry}(", src.strip())

    m = _ASSERT.match(detail)
    if m:
        text = f"{named(m['src'])} failed"
        if m["got"] is not None:
            text += f", got {m['got']}"
        return sanitize(text, limit)
    m = _RAISED.match(detail)
    if m:
        return sanitize(f"{named(m['src'])} raised {m['err']}", limit)
    last = detail.splitlines()[-1] if detail else status
    return sanitize(last, limit)


def feedback_block(text: str) -> str:
    """The comment line the model reads between two attempts ("# feedback:" alone for an empty message)."""
    return f"{FEEDBACK_PREFIX} {text}\n" if text else f"{FEEDBACK_PREFIX}\n"


def _ends_line(text: str) -> str:
    return text if text.endswith("\n") else text + "\n"


def turn_prompt(task: Task, history: list[tuple[str, str]]) -> str:
    """What the policy sees at the next turn: the prompt, then per earlier turn its attempt, the feedback comment and
    the prompt again. history: [(attempt text, feedback text), ...]."""
    out = task.prompt
    for attempt, fb in history:
        out += _ends_line(attempt) + feedback_block(fb) + task.prompt
    return out


# ---------------------------------------------------------------------------------------------------------------
# episodes


@dataclass
class Turn:
    """One attempt of an episode."""

    prompt: str  # the context the policy continued (the task's prompt, earlier attempts and feedback)
    completion: str  # the policy's text
    ids: list[int]  # its tokens (what the loss covers)
    public: sandbox.Verdict  # on the public tests
    full: sandbox.Verdict  # on all tests
    feedback: str = ""  # what the next turn shows ("" when the public tests passed)


@dataclass
class Episode:
    task: Task
    split: TestSplit
    mode: str
    turns: list[Turn] = field(default_factory=list)
    done: bool = False

    @property
    def passed(self) -> bool:
        """The last attempt passed every test (public and hidden)."""
        return bool(self.turns and self.turns[-1].full.passed)

    def passed_by(self, t: int) -> bool:
        """Success after t turns: the last attempt made by turn t passes every test."""
        return bool(self.turns) and self.turns[min(t, len(self.turns)) - 1].full.passed

    def to_row(self, **extra) -> dict:
        """A JSON row with every turn: context, attempt, both verdicts and the feedback shown."""
        turns = [
            {
                "turn": i + 1,
                "prompt": t.prompt,
                "completion": t.completion,
                "tokens": len(t.ids),
                "public": {"status": t.public.status, "passed": t.public.passed, "detail": t.public.detail},
                "full": {
                    "status": t.full.status,
                    "passed": t.full.passed,
                    "detail": t.full.detail,
                    "tests_passed": t.full.tests_passed,
                    "tests_total": t.full.tests_total,
                },
                "feedback": t.feedback,
            }
            for i, t in enumerate(self.turns)
        ]
        return {
            **extra,
            "task_id": self.task.task_id,
            "mode": self.mode,
            "public_tests": list(self.split.public),
            "hidden_tests": list(self.split.hidden),
            "turns_used": len(self.turns),
            "passed": self.passed,
            "turns": turns,
        }


def judge_attempts(episodes: list[Episode], texts: list[str], workers: int | None, timeout_s: float):
    """Verdicts of one attempt per episode on the public tests and on all tests, in one sandbox call."""
    tasks = [public_task(e.task, e.split) for e in episodes] + [e.task for e in episodes]
    codes = [extract_completion(t, e.task) for e, t in zip(episodes, texts, strict=True)] * 2
    verdicts = sandbox.check(tasks, codes, workers=workers, timeout_s=timeout_s)
    return verdicts[: len(episodes)], verdicts[len(episodes) :]


def run_episodes(
    model,
    tokenizer,
    tasks: list[Task],
    n_per_task: int,
    turns: int,
    mode: str = "tests",
    public_rule: str = "auto",
    split_seed: int = 0,
    temperature: float = 1.0,
    top_p: float = 1.0,
    max_new_tokens: int = 64,
    batch_size: int = 256,
    seed: int = 0,
    workers: int | None = None,
    timeout_s: float = 5.0,
    feedback_chars: int = FEEDBACK_CHARS,
    backend: str = "hf",
) -> tuple[list[Episode], dict]:
    """n_per_task episodes of each task (task i's are rows i*n .. i*n+n-1), up to `turns` attempts each; returns
    the episodes and timings {"generate_s", "sandbox_s"}."""
    if mode not in MODES:
        raise ValueError(f"feedback mode must be one of {', '.join(MODES)}; you gave {mode!r}")
    episodes = [Episode(t, split_tests(t, public_rule, split_seed), mode) for t in tasks for _ in range(n_per_task)]
    timing = {"generate_s": 0.0, "sandbox_s": 0.0}
    for turn in range(1, turns + 1):
        active = [e for e in episodes if not e.done]
        if not active:
            break
        prompts = [turn_prompt(e.task, [(t.completion, t.feedback) for t in e.turns]) for e in active]
        t0 = time.time()
        groups = generate(
            model,
            tokenizer,
            prompts,
            n=1,
            temperature=temperature,
            top_p=top_p,
            max_new_tokens=max_new_tokens,
            batch_size=batch_size,
            seed=seed + 7919 * turn,
            stop=stops_for(tasks[0]),
            progress=False,
            backend=backend,
        )
        t1 = time.time()
        texts = [g[0].text for g in groups]
        public, full = judge_attempts(active, texts, workers, timeout_s)
        timing["generate_s"] += t1 - t0
        timing["sandbox_s"] += time.time() - t1
        for e, p, (c,), pv, fv in zip(active, prompts, groups, public, full, strict=True):
            ids = list(c.ids) if c.ids else [tokenizer.eos_token_id]  # an empty completion still has a token
            fb = "" if mode == "empty" else feedback_from_detail(pv.detail, pv.status, e.task, feedback_chars)
            e.turns.append(Turn(p, c.text, ids, pv, fv, fb))
            e.done = pv.passed or turn == turns
    return episodes, timing


def episode_rows(episodes: list[Episode], tokenizer) -> tuple[list[list[int]], list[list[int]], list[int]]:
    """One training row per turn: (context ids, attempt ids) exactly as sampled, and the episode index of each row.

    Each attempt's tokens are trained once, in the row of their own turn; that row's context (the prompt, earlier
    attempts and the feedback) is masked, so the loss covers the policy's own tokens only."""
    contexts, completions, owner = [], [], []
    for i, e in enumerate(episodes):
        for t in e.turns:
            contexts.append(t.prompt)
            completions.append(t.ids)
            owner.append(i)
    return encode_prompts(tokenizer, contexts), completions, owner


def episode_reward(passed_reward: float, turns_used: int, discount: float, cost: float) -> float:
    """The final attempt's reward, discounted per extra turn and charged a cost per extra turn."""
    return passed_reward * discount ** (turns_used - 1) - cost * (turns_used - 1)


def splits_record(tasks: list[Task], rule: str, seed: int) -> list[dict]:
    """The split of every task as rows (written beside a run: which tests were public)."""
    return [asdict(split_tests(t, rule, seed)) for t in tasks]
