"""Synthetic function tasks: the offline suite the `tiny` profile trains and evaluates on.

Each task is a one-line Python function in HumanEval format: a signature and a docstring as the prompt, a
`return ...` body as the canonical solution, and six asserts in `check(candidate)`. There are 36 operations in
five families (integer op with a constant, conditionals, two-argument arithmetic, strings, lists), each with two
docstring wordings, random function and argument names, and random constants.

The held-out split shares no task with the training split, and more than that, no *rule*:
- operations with a constant: held-out (operation, constant) pairs never appear in training, and five integer
  constants never appear in training at all;
- constant-free operations: held-out (operation, wording, argument names) combinations never appear in training.
The held-out split is balanced per operation. Tests always include the boundary inputs k-1, k, k+1 where there is
a constant k: without them `min(x, 88)` passes for "never more than 86".

The suite is generated from a seed in a fraction of a second, so no data files ship with it.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from codelib.tasks.task import Task

FAMILIES = ("arith", "cond", "two_arg", "string", "list")

# Argument names per argument kind; none shadows a builtin the canonical solutions call.
INT_NAMES = ("x", "n", "a", "num", "value", "number", "m", "y", "val", "k")
PAIR_NAMES = (("a", "b"), ("x", "y"), ("m", "n"), ("p", "q"), ("first", "second"), ("left", "right"),
              ("u", "w"), ("i", "j"), ("num1", "num2"))  # fmt: skip
STR_NAMES = ("s", "text", "word", "name", "string", "line", "phrase", "t", "msg", "w")
LIST_NAMES = ("xs", "nums", "values", "items", "lst", "numbers", "arr", "data", "seq", "ys")
FUNCTION_NAMES = ("f", "g", "h", "solve", "compute", "calc", "transform", "process", "apply", "func", "helper",
                  "answer", "evaluate", "result", "work", "fn")  # fmt: skip

INT_POOL = tuple(range(2, 60))  # constants of the integer operations
UNSEEN_FROM = tuple(range(13, 60))  # the never-seen constants come from here, clear of the small pools below
N_UNSEEN = 5
LETTERS = "abcdefghijklmnopqrstuvwxyz"
# Prefixes and suffixes are any one or two letters: a pool this large makes the model learn to copy the constant
# from the docstring, not to recall a short list (with 20 fixed affixes held-out ones stayed at 0%).
AFFIXES = tuple(LETTERS) + tuple(c + d for c in LETTERS for d in LETTERS)
WORD_PAIRS = (("big", "small"), ("high", "low"), ("yes", "no"), ("hot", "cold"), ("up", "down"), ("on", "off"))


@dataclass(frozen=True)
class Op:
    """One operation: how it is worded, solved, fed and checked."""

    name: str
    family: str
    kind: str  # argument kind: "int", "pair", "str" or "list"
    wordings: tuple[str, str]  # docstring templates; {a} {b} argument names, {k} the constant, {w1} {w2} words
    body: str  # the return expression, same placeholders
    reference: Callable  # reference(args, k) -> expected value; independent of `body`, so a typo shows in tests
    consts: tuple = ()  # constant pool; empty for constant-free operations
    inputs: str = "plain"  # input recipe, see _inputs


def _ops() -> tuple[Op, ...]:
    def arith(name, w1, w2, body, ref, pool=INT_POOL):
        return Op(name, "arith", "int", (w1, w2), body, ref, pool, "boundary")

    def two(name, w1, w2, body, ref):
        return Op(name, "two_arg", "pair", (w1, w2), body, ref, (), "pairs")

    def lst(name, w1, w2, body, ref, consts=(), inputs="lists"):
        return Op(name, "list", "list", (w1, w2), body, ref, consts, inputs)

    return (
        # integer op with a constant
        arith("add", "Return {a} plus {k}.", "Add {k} to {a} and return the result.", "{a} + {k}",
              lambda a, k: a[0] + k),
        arith("sub", "Return {a} minus {k}.", "Subtract {k} from {a} and return the result.", "{a} - {k}",
              lambda a, k: a[0] - k),
        arith("mul", "Return {a} times {k}.", "Multiply {a} by {k} and return the product.", "{a} * {k}",
              lambda a, k: a[0] * k),
        arith("floordiv", "Return {a} divided by {k}, rounded down.", "Return the integer quotient of {a} and {k}.",
              "{a} // {k}", lambda a, k: a[0] // k),
        arith("mod", "Return the remainder of {a} divided by {k}.", "Return {a} modulo {k}.", "{a} % {k}",
              lambda a, k: a[0] % k),
        # conditionals
        Op("cap", "cond", "int", ("Return {a}, but never more than {k}.", "Return the smaller of {a} and {k}."),
           "min({a}, {k})", lambda a, k: min(a[0], k), INT_POOL, "boundary"),
        Op("floor", "cond", "int", ("Return {a}, but never less than {k}.", "Return the larger of {a} and {k}."),
           "max({a}, {k})", lambda a, k: max(a[0], k), INT_POOL, "boundary"),
        Op("choose", "cond", "int",
           ('Return "{w1}" if {a} is greater than {k}, otherwise "{w2}".', 'If {a} > {k} return "{w1}", else "{w2}".'),
           '"{w1}" if {a} > {k} else "{w2}"', None, INT_POOL, "boundary"),
        Op("parity", "cond", "int",
           ('Return "even" if {a} is even, otherwise "odd".', 'Return the parity of {a}: "even" or "odd".'),
           '"even" if {a} % 2 == 0 else "odd"', lambda a, k: "odd" if a[0] % 2 else "even", (), "signed"),
        Op("abs", "cond", "int", ("Return the absolute value of {a}.", "Return {a} without its sign."),
           "abs({a})", lambda a, k: abs(a[0]), (), "signed"),
        # two-argument arithmetic
        two("add2", "Return the sum of {a} and {b}.", "Add {a} and {b}.", "{a} + {b}", lambda a, k: a[0] + a[1]),
        two("sub2", "Return {a} minus {b}.", "Subtract {b} from {a}.", "{a} - {b}", lambda a, k: a[0] - a[1]),
        two("mul2", "Return the product of {a} and {b}.", "Multiply {a} by {b}.", "{a} * {b}",
            lambda a, k: a[0] * a[1]),
        two("max2", "Return the larger of {a} and {b}.", "Return the maximum of {a} and {b}.", "max({a}, {b})",
            lambda a, k: max(a)),
        two("min2", "Return the smaller of {a} and {b}.", "Return the minimum of {a} and {b}.", "min({a}, {b})",
            lambda a, k: min(a)),
        two("absdiff", "Return the absolute difference between {a} and {b}.", "Return how far apart {a} and {b} are.",
            "abs({a} - {b})", lambda a, k: abs(a[0] - a[1])),
        # strings
        Op("upper", "string", "str", ("Return {a} in upper case.", "Convert {a} to capital letters."),
           "{a}.upper()", lambda a, k: a[0].upper(), (), "strings"),
        Op("reverse_str", "string", "str", ("Return {a} reversed.", "Return the characters of {a} in reverse order."),
           "{a}[::-1]", lambda a, k: a[0][::-1], (), "strings"),
        Op("len_str", "string", "str", ("Return the length of {a}.", "Return the number of characters in {a}."),
           "len({a})", lambda a, k: len(a[0]), (), "strings"),
        Op("prefix", "string", "str", ('Return {a} with "{k}" added to the front.', 'Return "{k}" followed by {a}.'),
           '"{k}" + {a}', lambda a, k: k + a[0], AFFIXES, "strings"),
        Op("suffix", "string", "str", ('Return {a} with "{k}" added to the end.', 'Return {a} followed by "{k}".'),
           '{a} + "{k}"', lambda a, k: a[0] + k, AFFIXES, "strings"),
        Op("repeat", "string", "str", ("Return {a} repeated {k} times.", "Return {k} copies of {a} joined together."),
           "{a} * {k}", lambda a, k: a[0] * k, tuple(range(2, 10)), "short_strings"),
        Op("first", "string", "str",
           ("Return the first {k} characters of {a}.", "Return {a} cut to at most {k} characters."),
           "{a}[:{k}]", lambda a, k: a[0][:k], tuple(range(1, 13)), "lengths"),
        Op("count", "string", "str",
           ('Return how many times "{k}" occurs in {a}.', 'Count the occurrences of the letter "{k}" in {a}.'),
           '{a}.count("{k}")', lambda a, k: a[0].count(k), tuple(LETTERS), "letter"),
        Op("replace", "string", "str",
           ('Return {a} with every "{k[0]}" replaced by "{k[1]}".', 'Replace each "{k[0]}" in {a} with "{k[1]}".'),
           '{a}.replace("{k[0]}", "{k[1]}")', lambda a, k: a[0].replace(k[0], k[1]),
           tuple((c, d) for c in LETTERS for d in LETTERS if c != d), "letter"),
        # lists
        lst("sum", "Return the sum of the elements of {a}.", "Add up all the entries of {a}.", "sum({a})",
            lambda a, k: sum(a[0])),
        lst("len_list", "Return how many elements are in {a}.", "Return the length of the list {a}.", "len({a})",
            lambda a, k: len(a[0])),
        lst("sort", "Return {a} sorted in increasing order.", "Return a sorted copy of {a}.", "sorted({a})",
            lambda a, k: sorted(a[0])),
        lst("reverse_list", "Return {a} in reverse order.", "Return the list {a} reversed.", "{a}[::-1]",
            lambda a, k: a[0][::-1]),
        lst("evens", "Return the even elements of {a}.", "Keep only the even entries of {a}.",
            "[v for v in {a} if v % 2 == 0]", lambda a, k: [v for v in a[0] if v % 2 == 0]),
        lst("odds", "Return the odd elements of {a}.", "Keep only the odd entries of {a}.",
            "[v for v in {a} if v % 2 == 1]", lambda a, k: [v for v in a[0] if v % 2 == 1]),
        lst("above", "Return the elements of {a} that are greater than {k}.",
            "Keep only the entries of {a} above {k}.", "[v for v in {a} if v > {k}]",
            lambda a, k: [v for v in a[0] if v > k], INT_POOL, "boundary_lists"),
        lst("below", "Return the elements of {a} that are less than {k}.", "Keep only the entries of {a} below {k}.",
            "[v for v in {a} if v < {k}]", lambda a, k: [v for v in a[0] if v < k], INT_POOL, "boundary_lists"),
        lst("scale", "Return each element of {a} multiplied by {k}.", "Multiply every entry of {a} by {k}.",
            "[v * {k} for v in {a}]", lambda a, k: [v * k for v in a[0]], INT_POOL, "boundary_lists"),
        lst("shift", "Return each element of {a} plus {k}.", "Add {k} to every entry of {a}.",
            "[v + {k} for v in {a}]", lambda a, k: [v + k for v in a[0]], INT_POOL, "boundary_lists"),
        lst("count_above", "Return how many elements of {a} are greater than {k}.",
            "Count the entries of {a} above {k}.", "sum(1 for v in {a} if v > {k})",
            lambda a, k: sum(1 for v in a[0] if v > k), INT_POOL, "boundary_lists"),
    )  # fmt: skip


OPS: tuple[Op, ...] = _ops()
OPS_BY_NAME = {op.name: op for op in OPS}
_NAMES = {"int": INT_NAMES, "pair": PAIR_NAMES, "str": STR_NAMES, "list": LIST_NAMES}


@dataclass(frozen=True)
class Spec:
    """A generated task and the rule behind it (for held-out checks and per-family breakdowns)."""

    task: Task
    op: str
    family: str
    constant: object  # None for constant-free operations
    wording: int
    args: tuple[str, ...]


# ---------------------------------------------------------------------------------------------------------------
# inputs: six argument tuples per task


def _word(rng: random.Random, length: int, alphabet: str = LETTERS) -> str:
    return "".join(rng.choice(alphabet) for _ in range(length))


def _inputs(op: Op, k, rng: random.Random) -> list[tuple]:
    """Six argument tuples; the boundary recipes start with k-1, k, k+1 (or their string/list analogues)."""
    r = op.inputs
    if r == "boundary":
        return [(k - 1,), (k,), (k + 1,)] + [(rng.randint(0, 99),) for _ in range(3)]
    if r == "signed":
        return [
            (-rng.randint(1, 60),),
            (-rng.randint(1, 60),),
            (rng.randint(1, 99),),
            (rng.randint(1, 99),),
            (0,),
            (rng.randint(-60, 99),),
        ]
    if r == "pairs":
        # Both orders and a tie, so max/min/absdiff cannot pass by returning one argument.
        a, b = rng.randint(-20, 60), rng.randint(61, 99)
        c = rng.randint(-20, 99)
        return [(a, b), (b, a), (c, c)] + [(rng.randint(-20, 99), rng.randint(-20, 99)) for _ in range(3)]
    if r == "strings":
        return [
            (_word(rng, n),)
            for n in (0, 1, rng.randint(2, 4), rng.randint(3, 6), rng.randint(5, 9), rng.randint(5, 9))
        ]
    if r == "short_strings":
        return [(_word(rng, n),) for n in (0, 1, 2, rng.randint(1, 3), rng.randint(2, 4), rng.randint(3, 4))]
    if r == "lengths":
        lengths = [max(k - 1, 0), k, k + 1, 0, rng.randint(1, 15), rng.randint(1, 15)]
        return [(_word(rng, n),) for n in lengths]
    if r == "letter":
        # Bias towards the letter(s) in the constant so counts and replacements are not trivially zero.
        alphabet = "".join(k) * 3 + "xyzabc"
        return [(_word(rng, n, alphabet),) for n in (0, 1, 3, rng.randint(4, 8), rng.randint(4, 8), 10)]
    if r == "lists":
        return [([],)] + [([rng.randint(-9, 99) for _ in range(rng.randint(1, 7))],) for _ in range(5)]
    if r == "boundary_lists":
        mixed = [k - 1, k, k + 1, rng.randint(0, 99), rng.randint(0, 99)]
        rng.shuffle(mixed)
        return [
            ([k - 1],),
            ([k],),
            ([k + 1],),
            (mixed,),
            ([],),
            ([rng.randint(0, 99) for _ in range(rng.randint(1, 6))],),
        ]
    raise ValueError(f"unknown input recipe {r!r}")


# ---------------------------------------------------------------------------------------------------------------
# one task


def _fill(template: str, args: tuple[str, ...], k, words: tuple[str, str]) -> str:
    return template.format(a=args[0], b=args[-1], k=k, w1=words[0], w2=words[1])


def _expected(op: Op, call: tuple, k, words: tuple[str, str]):
    if op.name == "choose":
        return words[0] if call[0] > k else words[1]
    return op.reference(call, k)


def _make(op: Op, k, wording: int, args: tuple[str, ...], rng: random.Random, task_id: str) -> Spec:
    fname = rng.choice(FUNCTION_NAMES)
    words = rng.choice(WORD_PAIRS)
    doc = _fill(op.wordings[wording], args, k, words)
    prompt = f'def {fname}({", ".join(args)}):\n    """{doc}"""\n'
    solution = f"    return {_fill(op.body, args, k, words)}\n"
    calls = _inputs(op, k, rng)
    asserts = "".join(
        f"    assert candidate({', '.join(repr(v) for v in call)}) == {_expected(op, call, k, words)!r}\n"
        for call in calls
    )
    task = Task(
        task_id=task_id,
        prompt=prompt,
        tests="def check(candidate):\n" + asserts,
        entry_point=fname,
        canonical_solution=solution,
        kind="function",
    )
    return Spec(task, op.name, op.family, k if op.consts else None, wording, args)


# ---------------------------------------------------------------------------------------------------------------
# the split rules


def _held_out(rng: random.Random) -> tuple[set, dict[str, set]]:
    """Never-seen constants, and for each operation its held-out constants or (wording, args) combinations."""
    unseen = set(rng.sample(UNSEEN_FROM, N_UNSEEN))
    held: dict[str, set] = {}
    for op in OPS:
        if op.consts:
            seen = [c for c in op.consts if c not in unseen]
            # About 15% of each pool (at least 2) is held out per operation, on top of the never-seen ones.
            held[op.name] = set(rng.sample(seen, max(2, round(0.15 * len(seen))))) | (unseen & set(op.consts))
        else:
            combos = [(w, args) for w in (0, 1) for args in _arg_choices(op)]
            held[op.name] = set(rng.sample(combos, 5))
    return unseen, held


def _arg_choices(op: Op) -> list[tuple[str, ...]]:
    names = _NAMES[op.kind]
    return [tuple(n) if isinstance(n, tuple) else (n,) for n in names]


def _draw(op: Op, held: set, test: bool, rng: random.Random) -> tuple:
    """(constant, wording, args) on the chosen side of the operation's held-out rule."""
    choices = _arg_choices(op)
    if op.consts:
        pool = sorted(held, key=repr) if test else [c for c in op.consts if c not in held]
        return rng.choice(pool), rng.randrange(2), rng.choice(choices)
    if test:
        wording, args = rng.choice(sorted(held))
        return None, wording, args
    while True:
        wording, args = rng.randrange(2), rng.choice(choices)
        if (wording, args) not in held:
            return None, wording, args


def _counts(n: int, rng: random.Random) -> list[int]:
    """n split over the operations as evenly as possible; which ones get the extra task is random."""
    counts = [n // len(OPS)] * len(OPS)
    for i in rng.sample(range(len(OPS)), n % len(OPS)):
        counts[i] += 1
    return counts


def generate_specs(seed: int = 0, n_train: int = 5000, n_test: int = 300, n_rl: int = 0):
    """`generate`, with the operation, constant, wording and argument names of each task.

    n_rl > 0 adds a third list: fresh tasks under the *training* rules, drawn after train and test (so those two
    are unchanged), for RL stages that should see prompts the supervised stage never saw.
    """
    rng = random.Random(seed)
    _, held = _held_out(rng)
    splits = []
    for split, n in (("train", n_train), ("test", n_test), ("rl", n_rl)):
        if split == "rl" and not n:
            break
        drawn = []
        seen_prompts: set[str] = set()
        for op, count in zip(OPS, _counts(n, rng), strict=True):
            for _ in range(count):
                for _attempt in range(20):  # held-out prompts are kept distinct; a few redraws suffice
                    k, wording, args = _draw(op, held[op.name], split == "test", rng)
                    spec = _make(op, k, wording, args, rng, "")
                    if split == "train" or spec.task.prompt not in seen_prompts:
                        break
                seen_prompts.add(spec.task.prompt)
                drawn.append(spec)
        rng.shuffle(drawn)
        splits.append([_renumber(s, f"synthetic/{split}/{i}") for i, s in enumerate(drawn)])
    return (splits[0], splits[1]) if not n_rl else (splits[0], splits[1], splits[2])


def _renumber(spec: Spec, task_id: str) -> Spec:
    t = spec.task
    task = Task(task_id, t.prompt, t.tests, t.entry_point, t.canonical_solution, t.kind)
    return Spec(task, spec.op, spec.family, spec.constant, spec.wording, spec.args)


def generate(seed: int = 0, n_train: int = 5000, n_test: int = 300) -> tuple[list[Task], list[Task]]:
    """The synthetic suite for a seed: (train, test) lists of function Tasks.

    Deterministic for a seed. The test split is balanced over the 36 operations and shares no rule with train:
    held-out (operation, constant) pairs and five never-seen constants, or for constant-free operations unseen
    (operation, wording, argument names) combinations. Each task has six asserts; with a constant k they include
    k-1, k and k+1.

    >>> train, test = generate(seed=0, n_train=100, n_test=36)
    >>> print(test[0].prompt + test[0].canonical_solution, end="")
    def compute(x, y):
        \"\"\"Return the larger of x and y.\"\"\"
        return max(x, y)
    """
    train, test = generate_specs(seed, n_train, n_test)
    return [s.task for s in train], [s.task for s in test]


def generate_rl(seed: int = 0, n: int = 5000, n_train: int = 5000, n_test: int = 300) -> list[Task]:
    """Fresh training-rule tasks for RL (the `rl` split): same held-out rules as `generate`, other draws."""
    return [s.task for s in generate_specs(seed, n_train, n_test, n_rl=n)[2]]


def generate_fresh(seed: int = 0, n: int = 400, n_test: int = 300) -> list[Task]:
    """The `fresh` split's tasks (`fresh_specs`)."""
    return [s.task for s in fresh_specs(seed, n, n_test)]


def fresh_specs(seed: int = 0, n: int = 400, n_test: int = 300) -> list[Spec]:
    """A second held-out set (the `fresh` split): tasks under the *held-out* rules of `generate`'s test split, drawn
    by another generator, none with a prompt of the shipped test split. A lift measured on the test split (which
    stages and variants were tuned against) should hold here too."""
    rng = random.Random(seed)
    _, held = _held_out(rng)  # the same held-out rules as generate(seed)
    shipped = {s.task.prompt for s in generate_specs(seed, n_test=n_test)[1]}
    rng = random.Random(f"fresh/{seed}")
    drawn: list[Spec] = []
    for op, count in zip(OPS, _counts(n, rng), strict=True):
        for _ in range(count):
            for _attempt in range(50):
                spec = _make(op, *_draw(op, held[op.name], True, rng), rng, "")
                if spec.task.prompt not in shipped:
                    break
            else:
                raise RuntimeError(f"no fresh held-out prompt for {op.name} in 50 draws")
            shipped.add(spec.task.prompt)
            drawn.append(spec)
    rng.shuffle(drawn)
    return [_renumber(s, f"synthetic/fresh/{i}") for i, s in enumerate(drawn)]


# ---------------------------------------------------------------------------------------------------------------
# the probe family (multi-turn repair): the spec lives only in the tests

PROBE_WORDINGS = {
    "int": ("Return the number that the tests expect.", "Return the fixed number the tests check for."),
    "str": ("Return the word that the tests expect.", "Return the fixed word the tests check for."),
}
PROBE_INTS = tuple(range(10, 100))
PROBE_WORDS = tuple(c + d for c in LETTERS for d in LETTERS)


def _probe_held_out(seed: int) -> dict[str, set]:
    """The values the probe's held-out split uses and its training split never does: 20 of the 90 numbers and
    120 of the 676 two-letter words."""
    rng = random.Random(f"probe/held/{seed}")
    return {"int": set(rng.sample(PROBE_INTS, 20)), "str": set(rng.sample(PROBE_WORDS, 120))}


def probe_specs(seed: int = 0, n: int = 200, held_out: bool = True) -> list[Spec]:
    """Tasks whose answer is written nowhere but in their tests: a function of one ignored argument that returns a
    fixed number or two-letter word, its docstring saying only "the value the tests expect". The prompt alone
    cannot determine the answer, a failing public test's feedback (`assert f(3) == 17 failed, got 12`) does: a
    model that solves these at the second turn and not at the first, or not with an empty message, reads the
    feedback. Opt-in for the repair stage (`probe_examples`, `probe_eval`); the synthetic suite above does not
    change. held_out: values the training side (held_out=False) never uses."""
    held = _probe_held_out(seed)
    rng = random.Random(f"probe/{'test' if held_out else 'train'}/{seed}")
    pools = {"int": PROBE_INTS, "str": PROBE_WORDS}
    out = []
    for i in range(n):
        kind = ("int", "str")[i % 2]
        pool = sorted(held[kind]) if held_out else [v for v in pools[kind] if v not in held[kind]]
        value, wording, arg, fname = (
            rng.choice(pool),
            rng.randrange(2),
            rng.choice(INT_NAMES),
            rng.choice(FUNCTION_NAMES),
        )
        prompt = f'def {fname}({arg}):\n    """{PROBE_WORDINGS[kind][wording]}"""\n'
        calls = rng.sample(range(100), 6)
        asserts = "".join(f"    assert candidate({c}) == {value!r}\n" for c in calls)
        task = Task(
            task_id=f"synthetic/{'probe' if held_out else 'probe_train'}/{i}",
            prompt=prompt,
            tests="def check(candidate):\n" + asserts,
            entry_point=fname,
            canonical_solution=f"    return {value!r}\n",
            kind="function",
        )
        out.append(Spec(task, f"probe_{kind}", "probe", value, wording, (arg,)))
    return out


def generate_probe(seed: int = 0, n: int = 200, held_out: bool = True) -> list[Task]:
    """The `probe` (held-out values) or `probe_train` split's tasks (`probe_specs`)."""
    return [s.task for s in probe_specs(seed, n, held_out)]
