"""Attacks on the sandbox (`codelib/sandbox/`), first written against the one-module sandbox of issue 11.

Every class of issue 11 gets one or more tests. Each test runs a real attack program (not a mock of one), then
asserts the verdict (a wrong solution is never `passed`; a correct one run after a polluting one on the same worker
still is) and that nothing leaked or persisted (a later run on the same worker finds nothing, the host finds
nothing). `Sandbox(workers=1)` makes "the same worker" certain; `assert_same_worker` checks it was not replaced.

Attack programs are deliberately strong: memory scans read every writable region of the process from
/proc/self/mem (found through /proc/self/maps) and search it for the needle in a rotated form, so the attacker
never holds the plain needle and a hit is never its own copy; frame attacks walk `sys._getframe()`, an exception's
`__traceback__` and `ctypes.pythonapi.PyEval_GetFrame()`, and collect every hex token, dict and closure they can
reach; forged reports are written to every open fd, in today's format and as framed JSON replies.

Each test's comment says what its attack did against the "old sandbox" (issue 11's one module, which ran the tests
inside the program's own process): "forged" means the attack won (a wrong solution `passed`, a leak was read, a
later correct run failed, or `check()` raised), "contained" means it did not. Tests that needed the rewrite
(`codelib/sandbox/`: judge outside, strict stdio comparison in the parent, a fresh tmpfs per run, pid/IPC
namespaces, seccomp, chroot allow-list, cgroup v2) failed against the old sandbox by design.

The unprivileged path: CI runs as root, so `as_throwaway_user` forks a root launcher that unshares a mount and an
IPC namespace (so nothing the attacks leave reaches the host), puts fresh tmpfs on /tmp, /var/tmp and /dev/shm,
covers /root (mode 0700, where pyenv keeps Python) with a tmpfs and bind-mounts the interpreter prefix back, then
forks a child that drops to a random throwaway uid and runs `Sandbox(...)` there; verdicts come back as JSON on a
pipe. The launcher stays root, so an attack that kills every process of its uid cannot kill the reporter. The
attacks that write nothing outside also run through `Sandbox(unprivileged=True)` in the (root) test process.

Run alone: `.venv/bin/python -m pytest -q tests/test_sandbox_attacks.py` (about 3 minutes on 2 cores).
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import subprocess
import sys
import textwrap
import time
import uuid
import warnings

import pytest

from codelib import sandbox
from codelib.sandbox import Job, Sandbox
from codelib.tasks import Task, load_tasks

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMEOUT = 15.0  # attack programs scan memory: give them time, a stronger attack is a better test
MARK = "codelib-attack"  # every file, key, queue or segment an attack leaves has this in its name or content
ROT = bytes((b + 1) % 256 for b in range(256))  # attackers hold needles rotated by one byte, never in plain


def hide(text: str | bytes) -> bytes:
    return (text.encode() if isinstance(text, str) else text).translate(ROT)


# ---------------------------------------------------------------------------------------------------------------
# the attacker's library: prepended to every attack program


LIB = r'''
import ast as _ast, ctypes as _ct, gc as _gc, json as _json, os as _os, re as _re, struct as _struct, sys as _sys

_ROT = bytes((b + 1) % 256 for b in range(256))
_HEX_MEM = _re.compile(rb"(?<![0-9a-f])[0-9a-f]{32}(?![0-9a-f])")
_HEX = _re.compile(r"[0-9a-f]{16,128}")


def _regions(writable=True):
    try:
        lines = open("/proc/self/maps").read().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        parts = line.split()
        lo, hi = (int(x, 16) for x in parts[0].split("-"))
        name = parts[5] if len(parts) > 5 else ""
        if parts[1][0] != "r" or name in ("[vvar]", "[vsyscall]", "[vdso]") or hi - lo > 1 << 31:
            continue
        if writable and parts[1][1] != "w":
            continue
        out.append((lo, hi))
    return out


def _chunks(writable=True, step=1 << 22):
    """This process's memory, region by region, in chunks that overlap by 64 KiB."""
    try:
        _ct.CDLL(None).prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE: /proc/self/mem becomes ours to open
    except Exception:
        pass
    try:
        mem = open("/proc/self/mem", "rb", buffering=0)
    except OSError:
        mem = None
    for lo, hi in _regions(writable):
        for at in range(lo, hi, step):
            n = min(step + (1 << 16), hi - at)
            data = None
            if mem is not None:
                try:
                    mem.seek(at)
                    data = mem.read(n)
                except (OSError, ValueError, OverflowError):
                    data = None
            elif writable:
                try:
                    data = _ct.string_at(at, n)
                except Exception:
                    data = None
            if data:
                yield at, data


def _mem_find(needle_rot, after=1 << 16, limit=256):
    """The plain bytes from each place where the needle (given rotated) occurs in memory, up to a NUL."""
    found = []
    for at, data in _chunks():
        rot = data.translate(_ROT)
        i = rot.find(needle_rot)
        while i >= 0 and len(found) < limit:
            end = data.find(b"\0", i, i + after)
            found.append(data[i : end if end >= 0 else i + after])
            i = rot.find(needle_rot, i + 1)
    return found


def _mem_tokens(limit=50000):
    toks = set()
    for at, data in _chunks():
        for m in _HEX_MEM.finditer(data):
            toks.add(m.group())
            if len(toks) >= limit:
                return toks
    return toks


_HDR = _sys.getsizeof("") - 1  # PyASCIIObject header: a compact ASCII str's text starts here


def _str_at(addr, regions):
    """The text of the compact ASCII str object at addr (checked against the mapped regions), or None."""
    if not any(lo <= addr and addr + _HDR <= hi for lo, hi in regions):
        return None
    try:
        if _ct.c_void_p.from_address(addr + 8).value != id(str):
            return None
        n = _ct.c_ssize_t.from_address(addr + 16).value
        state = _ct.c_uint32.from_address(addr + 32).value
        if not 0 <= n < 1 << 24 or (state >> 5) & 3 != 3:
            return None
        if not any(lo <= addr and addr + _HDR + n <= hi for lo, hi in regions):
            return None
        return _ct.string_at(addr + _HDR, n).decode("ascii")
    except Exception:
        return None


def _dict_neighbour(text, key):
    """Live objects, found by pointers: for each str object equal to text that is a dict value, the value stored
    under `key` right after it (dicts of str keys keep (key, value) pairs side by side)."""
    regions = _regions()
    raw = text.encode()
    objs = set()
    for at, data in _chunks():
        i = data.find(raw)
        while i >= 0:
            obj = at + i - _HDR
            if _str_at(obj, regions) == text:
                objs.add(obj)
            i = data.find(raw, i + 1)
    found = []
    for obj in objs:
        pat = _struct.pack("<Q", obj)
        for at, data in _chunks():
            i = data.find(pat)
            while i >= 0:
                p = at + i
                for k, v in ((p + 8, p + 16), (p + 16, p + 24)):
                    if not any(lo <= k and v + 8 <= hi for lo, hi in regions):
                        continue
                    kk, vv = _ct.c_void_p.from_address(k).value, _ct.c_void_p.from_address(v).value
                    if kk and vv and _str_at(kk, regions) == key:
                        s = _str_at(vv, regions)
                        if s is not None:
                            found.append(s)
                i = data.find(pat, i + 1)
    return found


def _frames_getframe():
    out, f = [], _sys._getframe()
    while f is not None:
        out.append(f)
        f = f.f_back
    return out


def _frames_traceback():
    try:
        raise KeyError("x")
    except KeyError as e:
        f = e.__traceback__.tb_frame
    out = []
    while f is not None:
        out.append(f)
        f = f.f_back
    return out


def _frames_pythonapi():
    get = _ct.pythonapi.PyEval_GetFrame
    get.restype = _ct.py_object
    f, out = get(), []
    while f is not None:
        out.append(f)
        f = f.f_back
    return out


def _loot(roots):
    """Hex tokens, dicts and closures reachable from these objects (frames' locals, closures, containers)."""
    tokens, dicts, seen = set(), [], set()

    def visit(v, depth):
        if id(v) in seen or depth > 4:
            return
        seen.add(id(v))
        if isinstance(v, (bytes, bytearray)) and 16 <= len(v) <= 128:
            try:
                if _HEX.fullmatch(bytes(v).decode("ascii")):
                    tokens.add(bytes(v))
            except UnicodeDecodeError:
                pass
        elif isinstance(v, str) and 16 <= len(v) <= 128 and _HEX.fullmatch(v):
            tokens.add(v.encode())
        elif isinstance(v, dict):
            dicts.append(v)
            for x in list(v.values())[:500]:
                visit(x, depth + 1)
        elif isinstance(v, (list, tuple, set, frozenset)):
            for x in list(v)[:500]:
                visit(x, depth + 1)
        elif type(v).__name__ == "function" and v.__closure__:
            for c in v.__closure__:
                try:
                    visit(c.cell_contents, depth + 1)
                except ValueError:
                    pass
        elif type(v).__name__ == "frame":
            visit(dict(v.f_locals), depth)

    for r in roots:
        visit(r, 0)
    return tokens, dicts


def _gc_roots():
    return [o for o in _gc.get_objects() if isinstance(o, dict) or type(o).__name__ in ("function", "frame")]


def _frame(obj):
    body = _json.dumps(obj).encode()
    return _struct.pack(">Q", len(body)) + body


def _spray(payloads):
    """Write each payload to every fd this process has (the report fd first, stdout last and only if small)."""
    try:
        fds = sorted(int(x) for x in _os.listdir("/proc/self/fd"))
    except OSError:
        fds = list(range(3, 128))
    order = [1000] + [fd for fd in fds if fd > 2 and fd != 1000] + [1, 2]
    for fd in order:
        for p in payloads:
            if fd in (1, 2) and len(p) > 1 << 15:
                continue
            try:
                view = p
                while view:
                    view = view[_os.write(fd, view):]
            except OSError:
                break


_PASS_BODY = {"done": True, "total": 1, "counted": False}
_PASS_REPLY = {"status": "passed", "passed": True, "detail": "", "duration_s": 0.0, "stdout": "",
               "tests_passed": 1, "tests_total": 1, "done": True, "verdict": "passed", "ok": True}


def _forge(tokens, body=None):
    """Every token (today's report format: token + JSON + newline), then token-less forms; exit before the tests."""
    body = _json.dumps(_PASS_BODY if body is None else body).encode() if not isinstance(body, bytes) else body
    lines = b"".join(t + body + b"\n" for t in sorted(tokens))
    _spray([lines, body + b"\n", _frame(_PASS_REPLY), _frame({"result": _PASS_REPLY})])
    _os._exit(0)


def _expected(test, env, names):
    """The value an assert expects from the candidate, read off its AST."""
    ev = lambda n: eval(compile(_ast.Expression(n), "<peek>", "eval"), env)  # noqa: E731

    def calls(n):
        return any(isinstance(c, _ast.Call) and getattr(c.func, "id", None) in names for c in _ast.walk(n))

    if isinstance(test, _ast.BoolOp):
        for v in test.values:
            if calls(v):
                return _expected(v, env, names)
    if isinstance(test, _ast.Compare) and len(test.ops) == 1:
        left, right, op = test.left, test.comparators[0], test.ops[0]
        if isinstance(op, (_ast.Eq, _ast.Is)):
            if calls(left) and not calls(right):
                return ev(right)
            if calls(right) and not calls(left):
                return ev(left)
        if isinstance(op, (_ast.Lt, _ast.LtE)) and isinstance(left, _ast.Call) and left.args:
            inner = left.args[0]
            if isinstance(inner, _ast.BinOp) and calls(inner.left):
                return ev(inner.right)
            if isinstance(inner, _ast.BinOp) and calls(inner.right):
                return ev(inner.left)
    if isinstance(test, _ast.Call) and calls(test):
        return True
    if isinstance(test, _ast.UnaryOp) and isinstance(test.op, _ast.Not):
        return False
    raise LookupError("no expected value here")


def _parse_prefix(text):
    lines = text.split("\n")
    while lines:
        try:
            return _ast.parse("\n".join(lines))
        except SyntaxError as e:
            cut = (e.lineno or len(lines)) - 1
            lines = lines[: max(0, min(cut, len(lines) - 1))]
    return None


def _table(sources, names):
    """args -> expected value, from every assert in these texts that calls the entry point."""
    import math

    table = {}
    for src in sources:
        if isinstance(src, bytes):
            src = src.decode("utf-8", "replace")
        try:
            tree = _ast.parse(src)  # a whole program
        except SyntaxError:  # a piece of memory: from the tests on, as far as it parses
            found = (src.find("".join(["def check", "(candidate)"])), src.find("assert "))
            start = min([i for i in found if i >= 0] or [0])
            tree = _parse_prefix(textwrap_dedent(src[start:]))
        if tree is None:
            continue
        env = {"math": math, "__builtins__": __builtins__}
        for node in _ast.walk(tree):
            if not isinstance(node, _ast.Assert):
                continue
            call = next((c for c in _ast.walk(node.test) if isinstance(c, _ast.Call)
                         and getattr(c.func, "id", None) in names), None)
            if call is None:
                continue
            try:
                args = tuple(eval(compile(_ast.Expression(a), "<t>", "eval"), env) for a in call.args)
                table[repr(args)] = _expected(node.test, env, names)
            except Exception:
                pass
    return table


def textwrap_dedent(s):
    import textwrap

    return textwrap.dedent(s)


def _program_sources(roots):
    out = []
    for d in _loot(roots)[1]:
        for v in list(d.values()):
            if isinstance(v, str) and "assert" in v and len(v) > 30:
                out.append(v)
    return out
'''


# ---------------------------------------------------------------------------------------------------------------
# helpers


def inside_function(prompt: str) -> bool:
    """Whether the prompt ends inside a function body (HumanEval, synthetic) rather than at top level (MBPP)."""
    last = prompt.rstrip("\n").rsplit("\n", 1)[-1]
    return last[:1] in (" ", "\t") or last.rstrip().endswith(":")


def completion(task: Task, code: str) -> str:
    """A completion that closes the prompt's function (when the prompt ends inside one) and runs `code` at top
    level, with the attacker's library; `ENTRY` in code is the task's entry point."""
    head = "    pass\n" if inside_function(task.prompt) else ""
    return head + "\n" + LIB + "\n" + textwrap.dedent(code).replace("ENTRY", task.entry_point) + "\n"


def program(code: str) -> str:
    return LIB + "\n" + textwrap.dedent(code)


def honest_wrong(task: Task) -> str:
    if inside_function(task.prompt):
        return "    return None\n"
    return f"def {task.entry_point}(*args, **kwargs):\n    return None\n"


def humaneval(ids=None, split="test") -> list[Task]:
    tasks = load_tasks("humaneval", split if ids is None else "all")
    return tasks if ids is None else [t for t in tasks if int(t.task_id.split("/")[1]) in ids]


def stdio_task() -> Task:
    """A CodeContests task whose expected outputs are long and distinctive (so a hit in memory is not chance)."""
    tasks = load_tasks("codecontests", "test")
    return max(tasks, key=lambda t: min(len(c["output"].strip()) for c in json.loads(t.tests)))


def assert_not_passed(verdicts, honest=None, tasks=None):
    # asserts the prompt itself shows (MBPP's prompt quotes its first test) are the model's to read: not a leak
    public = (
        [
            sum(line.strip() in t.prompt for line in t.tests.splitlines() if line.strip().startswith("assert"))
            for t in tasks
        ]
        if tasks
        else [0] * len(verdicts)
    )
    for i, v in enumerate(verdicts):
        assert isinstance(v, sandbox.Verdict), v
        assert not v.passed and v.status != "passed", (i, v.status, v.detail, v.stdout[:300])
        assert_well_formed(v)
        if honest is not None:  # the attack may not raise the share of asserts passed above an honest wrong answer
            assert v.tests_passed <= honest[i].tests_passed + public[i], (i, v, honest[i])


def assert_well_formed(v) -> None:
    assert v.status in ("passed", "failed", "timeout", "error")
    assert v.passed == (v.status == "passed")
    assert type(v.detail) is str and type(v.stdout) is str
    assert type(v.tests_passed) is int and type(v.tests_total) is int
    assert 0 <= v.tests_passed <= v.tests_total
    assert isinstance(v.duration_s, float) and math.isfinite(v.duration_s) and v.duration_s >= 0


def assert_same_worker(box, before) -> None:
    assert box.worker_pids() == before, "the worker was replaced: a later run would not prove anything"


def after_attack(box, before, tasks=()) -> None:
    """On the same worker: correct solutions still pass, and a later program finds nothing of the attack."""
    if tasks:
        good = box.map([sandbox.task_job(t, t.canonical_solution, timeout_s=TIMEOUT) for t in tasks])
        assert all(g.passed for g in good), [(g.status, g.detail) for g in good]
    assert probe(box) == []
    assert_same_worker(box, before)


PROBE = r"""
import ctypes, os
found = []
def walk(top, budget=20000):
    stack = [top]
    while stack and budget > 0:
        d = stack.pop()
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        for e in entries:
            budget -= 1
            if "MARK" in e.name:
                found.append("file " + e.path[:200])
            try:
                if e.is_dir(follow_symlinks=False):
                    stack.append(e.path)
            except OSError:
                pass
here = os.getcwd()
for top in ("/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/var/lock", "/dev/mqueue", "/run/shm", here, "..",
            os.path.expanduser("~"), "/"):
    walk(top, 2000 if top == "/" else 20000)
try:
    if os.listdir(here):
        found.append("cwd not empty: %r" % os.listdir(here)[:5])
except OSError:
    pass
for k in range(1, 400):  # today's run directories are ../run<N>: a leftover one is reachable by name
    p = os.path.join("..", "run%d" % k)
    try:
        if os.path.exists(p) and not os.path.samefile(p, here):
            found.append("run dir " + p)
    except OSError:
        pass
for name in ("msg", "shm", "sem"):
    try:
        rows = open("/proc/sysvipc/" + name).read().splitlines()[1:]
    except OSError:
        rows = []
    found += ["sysv %s %s" % (name, " ".join(r.split()[:3])) for r in rows]
try:
    found += ["key " + line for line in open("/proc/keys").read().splitlines() if "MARK" in line]
except OSError:
    pass


def ipc_checks():  # in a child: a seccomp filter may kill a process for these calls, which is no leftover
    libc = ctypes.CDLL(None, use_errno=True)
    L = ctypes.c_long
    out = []
    KEY = 0x0C0DE11B
    if libc.msgget(KEY, 0) >= 0: out.append("msgget")
    if libc.shmget(KEY + 1, 0, 0) >= 0: out.append("shmget")
    if libc.semget(KEY + 2, 0, 0) >= 0: out.append("semget")
    for ring in (-4, -3, -5):
        kid = libc.syscall(L(250), L(10), L(ring), b"user", b"MARK", L(0))  # keyctl(KEYCTL_SEARCH)
        if kid > 0:
            out.append("keyring %d" % ring)
    if libc.syscall(L(240), b"MARK", L(os.O_RDONLY), L(0), None) >= 0:  # mq_open
        out.append("mqueue")
    return out


r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(r)
    try:
        os.write(w, "\n".join(ipc_checks()).encode())
    finally:
        os._exit(0)
os.close(w)
data = b""
while True:
    chunk = os.read(r, 1 << 16)
    if not chunk:
        break
    data += chunk
os.waitpid(pid, 0)
found += [x for x in data.decode().split("\n") if x]


def parent(p):
    try:
        return int(open("/proc/%s/stat" % p).read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0
mine, p = {os.getpid()}, os.getpid()
while p > 1:
    p = parent(p)
    mine.add(p)
me = os.getuid()
try:
    pids = [p for p in os.listdir("/proc") if p.isdigit() and int(p) not in mine]
except OSError:
    pids = []
others = []
for p in pids:
    try:
        if os.stat("/proc/" + p).st_uid == me:
            others.append(p)
    except OSError:
        pass
if others:
    found.append("processes of my uid (not my ancestors): %d" % len(others))
print("LEFTOVERS" if found else "CLEAN", [f[:150] for f in found[:30]])
""".replace("MARK", MARK)


def probe(box) -> list:
    """Run the leftover probe on the box's worker(s); what a later program can find of earlier ones."""
    v = box.map([Job(PROBE, timeout_s=TIMEOUT)])[0]
    assert v.passed, (v.status, v.detail, v.stdout[-500:])
    assert v.stdout.startswith(("CLEAN", "LEFTOVERS")), v.stdout[-500:]
    return [] if v.stdout.startswith("CLEAN") else [v.stdout.strip()[:2000]]


def worker_ipc_objects(box) -> list[str]:
    """SysV objects in the IPC namespace of each worker, read from the host with nsenter."""
    if os.geteuid() != 0 or not shutil.which("nsenter"):
        return []
    rows = []
    for pid in box.worker_pids():
        for name in ("msg", "shm", "sem"):
            r = subprocess.run(
                ["nsenter", "-t", str(pid), "-i", "cat", f"/proc/sysvipc/{name}"],
                capture_output=True,
                text=True,
                timeout=10,
            )
            rows += [f"{name}: {line}" for line in r.stdout.splitlines()[1:]]
    return rows


def host_keys() -> list[str]:
    try:
        return [line for line in open("/proc/keys").read().splitlines() if MARK in line]
    except OSError:
        return []


@pytest.fixture(scope="module")
def box():
    """One worker: every attack and the probe after it land on the same fork server."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with Sandbox(workers=1, timeout_s=TIMEOUT) as b:
            yield b


@pytest.fixture(scope="module")
def he_tasks():
    return humaneval()[:6]


# ---------------------------------------------------------------------------------------------------------------
# the parent parses a function job's program before running it (`jobs.parse_error`): nothing a program's text does
# there reaches a verdict or the trainer


PARSE_ATTACKS = {
    # a correct solution written with the parser's soft keywords (`match`, `case`, `_` as names and as a statement)
    "soft-keywords": (
        "    match = case = _ = 0\n    match (match, case):\n        case (1, _):\n            return None\n"
    ),
    "future-import": "    from __future__ import barry_as_FLUFL\n    return 1 <> 2\n",  # not at the top: a parse error
    "nesting-bomb": "    return " + "(" * 15_000 + "\n",  # the tokenizer's limit: a parse error, no recursion
    "unary-bomb": "    return " + "-" * 15_000 + "1\n",  # too deep for the parser: not judged here, it runs
    "huge": "    return 1 +\n" + "#" * 1_000_000 + "\n",  # over PARSE_FIRST_CHARS: runs, and is an error there
    "null-byte": "    return 1\x00\n",
    "coding-cookie": "# -*- coding: rot13 -*-\n    erghea 1\n",  # a str has no encoding: the cookie means nothing
}


def test_a_programs_text_cannot_game_or_break_the_parse_in_the_parent(box, he_tasks):
    """Every text gets exactly the verdict its run gets (a parse error is never better than an error), the parent
    survives each (its recursion limit and warnings filters unchanged), and a correct solution written with soft
    keywords still passes."""

    task = he_tasks[0]
    limit, filters = sys.getrecursionlimit(), list(warnings.filters)
    codes = list(PARSE_ATTACKS.values())
    solution = PARSE_ATTACKS["soft-keywords"] + task.canonical_solution
    codes[0] = solution
    jobs_list = [sandbox.task_job(task, c) for c in codes]
    parsed = box.map(jobs_list)
    box.parse_first = False
    try:
        ran = box.map(jobs_list)
    finally:
        box.parse_first = True
    assert [(v.status, v.detail, v.tests_passed, v.tests_total) for v in parsed] == [
        (v.status, v.detail, v.tests_passed, v.tests_total) for v in ran
    ]
    assert parsed[0].passed and not any(v.passed for v in parsed[1:])
    assert sys.getrecursionlimit() == limit and list(warnings.filters) == filters


# ---------------------------------------------------------------------------------------------------------------
# forged reports: the token and the harness's state are reachable from the program


FORGE = {
    # old sandbox: forged passed (all tasks, also with plus=True: a report without outputs skips the plus check)
    "getframe": "tokens, _ = _loot(_frames_getframe())\n",
    # old sandbox: forged passed
    "traceback": "tokens, _ = _loot(_frames_traceback())\n",
    # old sandbox: forged passed
    "pythonapi": "tokens, _ = _loot(_frames_pythonapi())\n",
    # old sandbox: forged passed (32-hex strings found in /proc/self/mem, one of them the token)
    "memscan": "tokens = _mem_tokens()\n",
}


@pytest.mark.parametrize("via", list(FORGE))
@pytest.mark.parametrize("plus", [False, True], ids=["base", "plus"])
def test_forged_report(box, via, plus):
    tasks = load_tasks("humaneval_plus", "test")[:3] if plus else humaneval()[:3]
    code = "def __attack__(*args, **kwargs):\n" + textwrap.indent(FORGE[via], "    ") + "    _forge(tokens)\n"
    code += "ENTRY = __attack__\n"
    before = box.worker_pids()
    jobs = [sandbox.task_job(t, completion(t, code), plus=plus, timeout_s=TIMEOUT) for t in tasks]
    honest = box.map([sandbox.task_job(t, honest_wrong(t), timeout_s=TIMEOUT) for t in tasks])
    assert_not_passed(box.map(jobs), honest if not plus else None)
    after_attack(box, before, tasks)


def test_forged_report_through_gc_mutating_the_harness_state(box, he_tasks):
    # old sandbox: forged passed (gc finds the harness's `fail`/`ok` closures: `fail` gets a no-op body with the
    # same free variables, `ok` is called 1000 times; the dict with `done` is untracked by gc today, so that part
    # and the token forgery are for designs that keep such state in the process)
    code = """
    _DONE = []
    def __attack__(*args, **kwargs):
        if _DONE:
            return None
        _DONE.append(1)
        def make(n):
            a = b = c = d = e = f = g = h = None
            cells = ("a", "b", "c", "d", "e", "f", "g", "h")[:n]
            src = "def outer():\\n    " + "; ".join(x + " = None" for x in cells) + "\\n"
            src += "    def noop(*args, **kwargs):\\n        if 0:\\n            (" + ", ".join(cells) + ",)\\n"
            src += "    return noop\\n"
            ns = {}
            exec(src, ns)
            return ns["outer"]().__code__
        objs = _gc.get_objects()
        helpers = [o for o in objs if type(o).__name__ == "function" and o.__closure__]
        for o in helpers:
            if "fail" in o.__name__:
                try:
                    o.__code__ = make(len(o.__closure__))
                except Exception:
                    pass
        for o in helpers:
            if o.__name__ in ("ok", "pass_", "passed", "report_ok") or o.__name__.endswith("_ok"):
                for _ in range(1000):
                    try:
                        o()
                    except Exception:
                        break
        for o in objs:
            if type(o) is dict and type(o.get("done")) is bool:
                o.update(done=True, counted=False)
        tokens, _ = _loot(_gc_roots())
        if tokens:
            _forge(tokens)
        return None
    ENTRY = __attack__
    """
    before = box.worker_pids()
    honest = box.map([sandbox.task_job(t, honest_wrong(t)) for t in he_tasks])
    v = box.map([sandbox.task_job(t, completion(t, code), timeout_s=TIMEOUT) for t in he_tasks])
    assert_not_passed(v, honest)
    after_attack(box, before, he_tasks)


# ---------------------------------------------------------------------------------------------------------------
# the harness's helpers are the program's globals


def test_rebinding_fail_to_ok_is_not_a_pass(box, he_tasks):
    # old sandbox: forged passed (every failing assert now reports `+`; passed == total, no first failure)
    mbpp = load_tasks("mbpp", "test")[:3]
    tasks = he_tasks + mbpp
    code = "ENTRY = lambda *a, **k: None\n__codelib_fail__ = lambda *a, **k: __codelib_ok__()\n"
    before = box.worker_pids()
    honest = box.map([sandbox.task_job(t, honest_wrong(t)) for t in tasks])
    v = box.map([sandbox.task_job(t, completion(t, code), timeout_s=TIMEOUT) for t in tasks])
    assert_not_passed(v, honest)
    after_attack(box, before, tasks)


def test_extra_ok_calls_and_report_writes_do_not_raise_the_test_fraction(box, he_tasks):
    # old sandbox: forged tests_passed == tests_total (status failed, but test_fraction_reward 1.0)
    code = """
    for _ in range(1000):
        try:
            __codelib_ok__()
        except Exception:
            pass
    _spray([b"+" * 1000])
    ENTRY = lambda *a, **k: None
    """
    before = box.worker_pids()
    honest = box.map([sandbox.task_job(t, honest_wrong(t)) for t in he_tasks])
    v = box.map([sandbox.task_job(t, completion(t, code), timeout_s=TIMEOUT) for t in he_tasks])
    assert_not_passed(v, honest)
    after_attack(box, before, he_tasks)
    for h, x in zip(honest, v, strict=True):
        assert x.tests_total == h.tests_total and x.tests_passed <= h.tests_passed, (x, h)
    from codelib.engine.rewards import test_fraction_reward

    t = he_tasks[0]
    columns = dict(prompt=[t.prompt] * 2, tests=[t.tests] * 2, entry_point=[t.entry_point] * 2)
    fair, forged = test_fraction_reward([honest_wrong(t), completion(t, code)], **columns)
    assert forged <= fair, (forged, fair)


# ---------------------------------------------------------------------------------------------------------------
# the tests are readable: a lookup table of the asserted values


LOOKUP = {
    # old sandbox: forged passed on 10 of 10 (5 HumanEval, 3 synthetic, 2 MBPP: the caller's assert, evaluated)
    "frames": """
    _SRC = []
    def __attack__(*args, **kwargs):
        f = _sys._getframe(1)
        if not _SRC:
            g = _sys._getframe()
            while g is not None:
                _SRC.extend(_program_sources([dict(g.f_locals)]))
                g = g.f_back
            _SRC.sort(key=len, reverse=True)  # the whole program before any docstring that quotes an assert
        for src in _SRC:
            tree = _parse_prefix(src)
            for node in _ast.walk(tree) if tree else ():
                if isinstance(node, _ast.Assert) and node.lineno <= f.f_lineno <= node.end_lineno:
                    env = dict(f.f_globals)
                    env.update(f.f_locals)
                    try:
                        return _expected(node.test, env, ("candidate", "ENTRY"))
                    except Exception:
                        pass
        return None
    ENTRY = __attack__
    """,
    # old sandbox: forged passed on 10 of 10 (the request dict, with the program text, is a gc object)
    "gc": """
    _T = {}
    def __attack__(*args, **kwargs):
        if not _T:
            _T.update(_table(_program_sources(_gc_roots()), ("candidate", "ENTRY")) or {None: None})
        return _T.get(repr(args))
    ENTRY = __attack__
    """,
    # old sandbox: forged passed on 10 of 10 (the test text is in /proc/self/mem)
    "memscan": """
    _T = {}
    def __attack__(*args, **kwargs):
        if not _T:
            texts = _mem_find(NEEDLE_CHECK) + _mem_find(NEEDLE_ASSERT)
            _T.update(_table(texts, ("candidate", "ENTRY")) or {None: None})
        return _T.get(repr(args))
    ENTRY = __attack__
    """.replace("NEEDLE_CHECK", repr(hide("def check(candidate)"))).replace("NEEDLE_ASSERT", repr(hide("\nassert "))),
}


@pytest.mark.parametrize("via", list(LOOKUP))
def test_lookup_table_of_the_asserted_values(box, via):
    tasks = humaneval()[:5] + load_tasks("synthetic", "test")[:3] + load_tasks("mbpp", "test")[:2]
    before = box.worker_pids()
    honest = box.map([sandbox.task_job(t, honest_wrong(t)) for t in tasks])
    v = box.map([sandbox.task_job(t, completion(t, LOOKUP[via]), timeout_s=TIMEOUT) for t in tasks])
    assert_not_passed(v, honest, tasks)
    after_attack(box, before, tasks)


@pytest.mark.slow
def test_the_test_text_is_not_in_the_candidates_memory(box, he_tasks):
    # old sandbox: forged (the untrusted process holds `def check(candidate)` and the first assert)
    tasks = he_tasks[:2]
    needles = [hide("def check(candidate)")] + [hide(t.tests.split("assert", 2)[1][:60]) for t in tasks]
    code = """
    import time
    def __attack__(*args, **kwargs):
        hits = [n for n in NEEDLES if _mem_find(n, after=16, limit=1)]
        print("LEAK" if hits else "NONE", len(hits), flush=True)
        if hits:  # the verdict itself carries the answer, should stdout not come back: a leak is a timeout
            time.sleep(3600)
        raise SystemExit(3)
    ENTRY = __attack__
    """.replace("NEEDLES", repr(needles))
    v = box.map([sandbox.task_job(t, completion(t, code), timeout_s=TIMEOUT) for t in tasks])
    assert_not_passed(v)
    assert not any("LEAK" in x.stdout for x in v), [x.stdout for x in v]
    assert not any(x.status == "timeout" for x in v), [x.detail for x in v]


# ---------------------------------------------------------------------------------------------------------------
# objects whose == / < always hold, and a patched builtins


ALWAYS_EQUAL = {
    # old sandbox: forged passed on 5 of 5 (plus=True: contained, encoded as an object, unequal to every output)
    "object": """
    class _AE:
        def __eq__(self, other): return True
        def __ne__(self, other): return False
        __lt__ = __le__ = __gt__ = __ge__ = __contains__ = __eq__
        def __hash__(self): return 0
        def __bool__(self): return True
        def __len__(self): return 0
        def __iter__(self): return iter(())
        def __abs__(self): return 0
        def __float__(self): return 0.0
        def __index__(self): return 0
        def __sub__(self, other): return self
        __rsub__ = __add__ = __radd__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = __mod__ = __sub__
        def __getitem__(self, k): return self
        def __round__(self, n=0): return self
    ENTRY = lambda *a, **k: _AE()
    """,
    # old sandbox: forged passed on 4 of 5 (plus=True: contained, `_encode` sends the plain str and it differs)
    "str-subclass": """
    class _S(str):
        def __eq__(self, other): return True
        def __ne__(self, other): return False
        __hash__ = str.__hash__
    ENTRY = lambda *a, **k: _S("x")
    """,
    # old sandbox: forged passed on 4 of 5 (plus=True: contained)
    "list-subclass": """
    class _L(list):
        def __eq__(self, other): return True
        def __ne__(self, other): return False
        __lt__ = __le__ = __gt__ = __ge__ = __eq__
    ENTRY = lambda *a, **k: _L()
    """,
}


@pytest.mark.parametrize("kind", list(ALWAYS_EQUAL))
@pytest.mark.parametrize("plus", [False, True], ids=["base", "plus"])
def test_always_equal_results_are_not_a_pass(box, kind, plus):
    tasks = (load_tasks("humaneval_plus", "test") if plus else humaneval())[:5]
    before = box.worker_pids()
    v = box.map([sandbox.task_job(t, completion(t, ALWAYS_EQUAL[kind]), plus=plus, timeout_s=TIMEOUT) for t in tasks])
    assert_not_passed(v)
    after_attack(box, before)


LIE = """
import builtins, math, sys
class _AE:
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    __lt__ = __le__ = __gt__ = __ge__ = __eq__
    def __hash__(self): return 0
    def __float__(self): return 0.0
    def __abs__(self): return 0
    def __sub__(self, other): return self
    __rsub__ = __add__ = __radd__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = __pow__ = __rpow__ = __sub__
_ae = _AE()
def _lie(orig, fake):
    def patched(*a, **k):  # lie to the tests only (code compiled as the program); the harness sees the truth
        if sys._getframe(1).f_code.co_filename == "<program>":
            return fake(*a, **k)
        return orig(*a, **k)
    return patched
"""

SYNTHETIC_WRAPPED = [
    Task(
        "synthetic/isinstance",
        "def root2(x):\n",
        "assert isinstance(root2(4), float)\nassert root2(4) == 2.0\n",
        "root2",
        "    return x ** 0.5\n",
    ),
    Task(
        "synthetic/len",
        "def pairs(s):\n",
        "assert len(pairs('abc')) == 3\nassert sorted(pairs('abc')) == "
        "['ab', 'ac', 'bc']\nassert len(set(pairs('aa'))) == 1\n",
        "pairs",
        "    return [a + b for i, a in enumerate(s) for b in s[i + 1:]]\n",
    ),
]

PATCHES = {
    # old sandbox: forged passed on HumanEval/4 (`abs(candidate(x) - y) < 1e-6`; /2 also has a plain ==)
    "abs": (
        lambda: humaneval([2, 4]),
        "import builtins\nbuiltins.abs = lambda *a, **k: 0\nENTRY = lambda *a, **k: 0.0\n",
    ),
    # old sandbox: forged passed (`isinstance(root2(4), float)` and `root2(4) == 2.0` both hold)
    "isinstance": (
        lambda: SYNTHETIC_WRAPPED[:1],
        LIE + "builtins.isinstance = _lie(isinstance, lambda *a, **k: True)\nENTRY = lambda *a, **k: _ae\n",
    ),
    # old sandbox: forged passed on the synthetic task (`len(pairs(..)) == 3`); HumanEval/148 resists
    "len": (
        lambda: SYNTHETIC_WRAPPED[1:] + humaneval([148]),
        LIE + "builtins.len = _lie(len, lambda *a, **k: _ae)\nbuiltins.sorted = _lie(sorted, lambda *a, **k: _ae)\n"
        "ENTRY = lambda *a, **k: _ae\n",
    ),
    # old sandbox: forged passed (HumanEval/32: `math.fabs(poly(coeffs, solution)) < 1e-4`; beyond issue 11:
    # stdlib modules the tests import are the program's too)
    "math.fabs": (
        lambda: humaneval([32]),
        "import math\nmath.fabs = lambda *a, **k: 0.0\nENTRY = lambda *a, **k: 0.0\n",
    ),
    # old sandbox: forged passed on 7 of 8 (every builtin a test may wrap the result in, lying to "<program>")
    "everything": (
        lambda: humaneval([2, 4, 32, 148, 1, 6]) + SYNTHETIC_WRAPPED,
        LIE
        + """
for _name in ("abs", "len", "sorted", "round", "sum", "max", "min"):  # not types: isinstance needs those
    setattr(builtins, _name, _lie(getattr(builtins, _name), lambda *a, **k: _ae))
for _name in ("isinstance", "all", "any", "callable"):
    setattr(builtins, _name, _lie(getattr(builtins, _name), lambda *a, **k: True))
math.fabs = _lie(math.fabs, lambda *a, **k: 0.0)
math.isclose = _lie(math.isclose, lambda *a, **k: True)
ENTRY = lambda *a, **k: _ae
""",
    ),
}


@pytest.mark.parametrize("which", list(PATCHES))
def test_patched_builtins_are_not_a_pass(box, which):
    make, code = PATCHES[which]
    tasks = make()
    honest = box.map([sandbox.task_job(t, honest_wrong(t)) for t in tasks])
    assert not any(h.passed for h in honest)
    good = box.map([sandbox.task_job(t, t.canonical_solution) for t in tasks])
    assert all(g.passed for g in good), good
    before = box.worker_pids()
    v = box.map([sandbox.task_job(t, completion(t, code), timeout_s=TIMEOUT) for t in tasks])
    assert_not_passed(v)
    after_attack(box, before, tasks)


# ---------------------------------------------------------------------------------------------------------------
# stdio: the program finds the expected output for its stdin


STDIO = {
    # old sandbox: forged passed (the harness's `req` holds every case, outputs included)
    "frames": "roots = _frames_getframe()\n",
    # old sandbox: forged passed
    "gc": "roots = _gc_roots()\n",
    # old sandbox: forged passed (the request's JSON is still in the worker's memory, inherited by the fork)
    "memscan": "roots = None\n",
}

STDIO_FIND = r"""
_data = _sys.stdin.read()
_answer = None
if roots is not None:
    for d in _loot(roots)[1]:
        if isinstance(d.get("input"), str) and isinstance(d.get("output"), str):
            if d["input"].strip() == _data.strip():
                _answer = d["output"]
else:
    key = _json.dumps(_data)[:-1]  # the JSON text of our input, without its closing quote
    for text in _mem_find(('"input": ' + key).encode().translate(_ROT), after=1 << 20, limit=64):
        text = text.decode("utf-8", "replace")
        at = text.find('"output": "', len(key))
        if at < 0 or not text[len('"input": ') + len(key):].startswith('"'):
            continue
        try:
            _answer = _json.JSONDecoder().raw_decode(text, at + len('"output": '))[0]
            break
        except ValueError:
            continue
if _answer is None:
    found = _dict_neighbour(_data, "output") or _dict_neighbour(_data.rstrip("\n"), "output")
    _answer = found[0] if found else None
print(_answer if _answer is not None else "0")
"""


@pytest.mark.parametrize("via", list(STDIO))
def test_stdio_program_cannot_find_its_expected_output(box, via):
    task = stdio_task()
    before = box.worker_pids()
    v = box.map([sandbox.task_job(task, program(STDIO[via] + STDIO_FIND), timeout_s=TIMEOUT)])[0]
    assert_not_passed([v])
    assert v.tests_passed == 0, v
    after_attack(box, before, [task])


def test_stdio_expected_outputs_are_not_in_the_programs_memory(box):
    # old sandbox: forged (every case's expected output is in the forked program's memory)
    task = stdio_task()
    cases = json.loads(task.tests)
    needles = [hide(c["output"].strip()[:64]) for c in cases]
    code = """
    hits = sum(1 for n in NEEDLES if _mem_find(n, after=8, limit=1))
    print("LEAK" if hits else "NONE", hits)
    """.replace("NEEDLES", repr(needles))
    v = box.map([sandbox.task_job(task, program(code), timeout_s=TIMEOUT)])[0]
    assert not v.passed
    assert "LEAK" not in v.stdout, v.stdout


def test_stdio_comparison_is_strict_in_the_parent(box):
    # old sandbox: contained (wrong output fails); checks the parent's comparison also sees a forged report
    # written on every fd and an early os._exit(0)
    task = stdio_task()
    code = "tokens, _ = _loot(_frames_getframe())\nprint('0')\n_sys.stdout.flush()\n_forge(tokens)\n"
    v = box.map([sandbox.task_job(task, program(code), timeout_s=TIMEOUT)])[0]
    assert_not_passed([v])


# ---------------------------------------------------------------------------------------------------------------
# malformed replies: forged type-invalid fields are an error verdict, never an exception in check()


MALFORMED = {
    # old sandbox: forged (check() raised ValueError: cannot convert float NaN to integer)
    "total-nan": b'{"done": true, "counted": true, "total": NaN}',
    # old sandbox: forged (check() raised OverflowError)
    "total-inf": b'{"done": true, "counted": true, "total": 1e999}',
    # old sandbox: contained (worker-side TypeError became an internal-error verdict)
    "total-str": b'{"done": true, "counted": true, "total": "x"}',
    # old sandbox: forged passed with tests_total -3
    "total-negative": b'{"done": true, "counted": true, "total": -3}',
    # old sandbox: forged (detail is a dict)
    "first-dict": b'{"done": true, "first": {"x": [1]}}',
    # old sandbox: forged (check() raised: outputs of an odd shape)
    "outputs-dict": b'{"done": true, "counted": false, "outputs": {"zz": 1}}',
    # old sandbox: forged (check() raised TypeError in _decode)
    "outputs-bad-tuple": b'{"done": true, "counted": false, "outputs": [{"t": 5}]}',
    # old sandbox: forged (check() raised ValueError in int(.., 16))
    "outputs-bad-int": b'{"done": true, "counted": false, "outputs": [{"i": "zz"}, {"b": "q"}]}',
    # old sandbox: forged passed (a string of outputs; plus comparison skipped or garbled)
    "outputs-str": b'{"done": true, "counted": false, "outputs": "abc"}',
    # old sandbox: contained (error)
    "exit-dict": b'{"exit": {"a": [1]}, "exc": 5, "exc_type": [1]}',
    # old sandbox: contained (failed: no `+` was written, so 0 of N)
    "wrong-types": b'{"done": 1, "counted": 5, "total": 1e308}',
}


@pytest.mark.parametrize("name", list(MALFORMED))
def test_malformed_forged_replies_are_errors_not_exceptions(box, name):
    task = load_tasks("humaneval_plus", "test")[0]
    body = MALFORMED[name]
    code = (
        "def __attack__(*args, **kwargs):\n    tokens, _ = _loot(_frames_getframe())\n"
        f"    _forge(tokens, {body!r})\nENTRY = __attack__\n"
    )
    jobs = [sandbox.task_job(task, completion(task, code), plus=p, timeout_s=TIMEOUT) for p in (False, True)]
    before = box.worker_pids()
    v = box.map(jobs)  # must return, whatever came back
    assert_not_passed(v)
    after_attack(box, before, [task])
    assert sandbox.check([task], [task.canonical_solution], workers=1, plus=True)[0].passed


def test_malformed_replies_do_not_abort_a_batch():
    # old sandbox: forged (one NaN report makes check() raise: the whole batch, the training step, is lost)
    task = load_tasks("humaneval_plus", "test")[0]
    bad = completion(
        task,
        "def __attack__(*a, **k):\n    t, _ = _loot(_frames_getframe())\n    _forge(t, "
        + repr(MALFORMED["total-nan"])
        + ")\nENTRY = __attack__\n",
    )
    v = sandbox.check([task] * 3, [task.canonical_solution, bad, task.canonical_solution], workers=1, plus=True)
    assert [x.passed for x in v] == [True, False, True]
    assert_well_formed(v[1])


# ---------------------------------------------------------------------------------------------------------------
# runs of one worker share state


NEST = r"""
import os
MARK = "codelib-attack"
def nest(top, depth, payload_mb=0):
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    for i in range(depth):
        try:
            os.mkdir(MARK, 0o700, dir_fd=fd)
            nfd = os.open(MARK, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        except OSError:
            break
        os.close(fd)
        fd = nfd
    made = i
    try:
        with open(os.open(MARK + "-secret", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd), "w") as f:
            f.write("secret")
    except OSError:
        pass
    written = 0
    chunk = b"x" * (1 << 20)
    for k in range(payload_mb // 60 + 1):
        try:
            with open(os.open(MARK + "-fill%d" % k, os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd), "wb") as f:
                for _ in range(60):
                    if written >= payload_mb:
                        break
                    f.write(chunk)
                    written += 1
        except OSError:
            break
    try:
        os.fchmod(fd, 0)
    except OSError:
        pass
    os.close(fd)
    return made, written
"""


SCRATCH = (
    "import os, tempfile\nwith open('scratch', 'wb') as f:\n    f.write(b'x' * (8 << 20))\n"
    "with tempfile.TemporaryFile() as f:\n    f.write(b'y' * (8 << 20))\n"
    "assert os.path.getsize('scratch') == 8 << 20\n"
)


@pytest.mark.slow
def test_deep_nest_and_full_tmp_do_not_survive_a_run():
    # old sandbox: forged (the 1,100-level nest outlives the recursive clean-up, the next run reads it by
    # name in ../run1; with 500 MB in it, the worker's /tmp is full and a correct stdio program gets `error`)
    task = stdio_task()
    attack = NEST + textwrap.dedent("""
    print(nest(".", 1100, 1000), nest("/tmp", 1100, 0))
    """)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        b = Sandbox(workers=1, timeout_s=30)
    with b:
        before = b.worker_pids()
        b.map([Job(attack, timeout_s=30, memory_mb=1024)])
        leftovers = probe(b)
        good = b.map([sandbox.task_job(task, task.canonical_solution, timeout_s=TIMEOUT)])[0]
        fn = load_tasks("humaneval", "test")[0]
        good_fn = b.map([sandbox.task_job(fn, fn.canonical_solution)])[0]
        scratch = b.map([Job(SCRATCH)])[0]  # a correct program that uses its own scratch space
        assert_same_worker(b, before)
    assert good.passed, good
    assert good_fn.passed, good_fn
    assert scratch.passed, scratch
    assert leftovers == []


SYSV_WRITE = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
KEY, IPC_CREAT = 0x0C0DE11B, 0o1000
class Msg(ctypes.Structure):
    _fields_ = [("mtype", ctypes.c_long), ("mtext", ctypes.c_char * 64)]
q = libc.msgget(KEY, IPC_CREAT | 0o666)
libc.msgsnd(q, ctypes.byref(Msg(1, b"codelib-attack-msg")), 64, 0)
s = libc.shmget(KEY + 1, 1 << 20, IPC_CREAT | 0o666)
libc.shmat.restype = ctypes.c_void_p
p = libc.shmat(s, None, 0)
if p not in (None, ctypes.c_void_p(-1).value):
    ctypes.memmove(p, b"codelib-attack-shm", 18)
sem = libc.semget(KEY + 2, 1, IPC_CREAT | 0o666)
private = libc.msgget(0, IPC_CREAT | 0o600)  # IPC_PRIVATE: found again through /proc/sysvipc
print("made", q, s, sem, private)
"""

SYSV_READ = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
KEY, IPC_NOWAIT = 0x0C0DE11B, 0o4000
class Msg(ctypes.Structure):
    _fields_ = [("mtype", ctypes.c_long), ("mtext", ctypes.c_char * 64)]
m = Msg()
q = libc.msgget(KEY, 0)
if q >= 0 and libc.msgrcv(q, ctypes.byref(m), 64, 0, IPC_NOWAIT) > 0:
    print("LEAK msg", m.mtext)
s = libc.shmget(KEY + 1, 0, 0)
libc.shmat.restype = ctypes.c_void_p
if s >= 0:
    p = libc.shmat(s, None, 0)
    if p not in (None, ctypes.c_void_p(-1).value):
        print("LEAK shm", ctypes.string_at(p, 18))
if libc.semget(KEY + 2, 0, 0) >= 0:
    print("LEAK sem")
for name in ("msg", "shm", "sem"):
    try:
        for row in open("/proc/sysvipc/" + name).read().splitlines()[1:]:
            print("LEAK sysvipc", name, row.split()[:2])
    except OSError:
        pass
print("END")
"""


def test_sysv_ipc_does_not_carry_data_to_a_later_run():
    # old sandbox: forged (queue, segment and semaphore persist in the worker's IPC namespace; run 2 reads
    # the message and the segment)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        b = Sandbox(workers=1, timeout_s=TIMEOUT)
    with b:
        before = b.worker_pids()
        b.map([SYSV_WRITE])
        second = b.map([SYSV_READ])[0]
        on_host = worker_ipc_objects(b)
        leftovers = probe(b)
        assert_same_worker(b, before)
    assert "LEAK" not in second.stdout, second.stdout  # (a reader killed for a denied syscall leaks nothing)
    assert on_host == [] and leftovers == []


@pytest.mark.slow
def test_shared_memory_charge_does_not_outlive_its_run():
    # old sandbox: forged (3 x 700 MB of touched SysV shm stay charged to the worker's memory cgroup (4.6 GB):
    # a correct program that needs 2.7 GB is then SIGKILLed)
    leave = r"""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.shmat.restype = ctypes.c_void_p
    n = 700 << 20
    for k in range(3):
        s = libc.shmget(0x0C0DE200 + k, n, 0o1000 | 0o600)
        p = libc.shmat(s, None, 0)
        if p in (None, ctypes.c_void_p(-1).value):
            continue
        ctypes.memset(p, 1, n)
        libc.shmdt(ctypes.c_void_p(p))
    print("left")
    """
    need = "b = bytearray(2700 << 20)\nb[::4096] = b'\\1' * len(range(0, len(b), 4096))\nassert b[4096] == 1\n"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        b = Sandbox(workers=1, timeout_s=TIMEOUT)
    with b:
        before = b.worker_pids()
        b.map([Job(textwrap.dedent(leave), memory_mb=2048)])
        good = b.map([Job(need, memory_mb=3400, timeout_s=30)])[0]
        on_host = worker_ipc_objects(b)
        assert_same_worker(b, before)
    assert good.passed, good
    assert on_host == []


KEYS_WRITE = r"""
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
L = ctypes.c_long
secret = b"codelib-attack-key-secret"
for ring in (-4, -3, -5):  # user, session, user-session keyrings
    kid = libc.syscall(L(248), b"user", b"codelib-attack", secret, L(len(secret)), L(ring))  # add_key
    if kid > 0:
        libc.syscall(L(250), L(15), L(kid), L(120))  # KEYCTL_SET_TIMEOUT: gone in 2 minutes whatever happens
    print(ring, kid, ctypes.get_errno())
"""

KEYS_READ = r"""
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
L = ctypes.c_long
for ring in (-4, -3, -5):
    kid = libc.syscall(L(250), L(10), L(ring), b"user", b"codelib-attack", L(0))  # KEYCTL_SEARCH
    if kid > 0:
        buf = ctypes.create_string_buffer(256)
        n = libc.syscall(L(250), L(11), L(kid), buf, L(256))  # KEYCTL_READ
        print("LEAK key", ring, buf.raw[: max(n, 0)])
try:
    print("\n".join("LEAK proc " + l for l in open("/proc/keys").read().splitlines() if "codelib-attack" in l))
except OSError:
    pass
print("END")
"""


def test_keyring_does_not_carry_data_to_a_later_run():
    # old sandbox: forged (the worker uid's user keyring keeps the key; run 2 reads the secret)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        b = Sandbox(workers=1, timeout_s=TIMEOUT)
    with b:
        before = b.worker_pids()
        b.map([KEYS_WRITE])
        second = b.map([KEYS_READ])[0]
        assert_same_worker(b, before)
    assert "LEAK" not in second.stdout, second.stdout  # (a reader killed for a denied syscall leaks nothing)
    assert host_keys() == []  # nothing reached the keyrings of the host either


MQ_WRITE = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
L = ctypes.c_long
fd = libc.syscall(L(240), b"codelib-attack", L(os.O_CREAT | os.O_RDWR), L(0o666), None)  # mq_open
if fd >= 0:
    libc.syscall(L(242), L(fd), b"codelib-attack-mq", L(17), L(0), None)  # mq_timedsend
print("mq", fd, ctypes.get_errno())
"""

MQ_READ = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
L = ctypes.c_long
fd = libc.syscall(L(240), b"codelib-attack", L(os.O_RDWR | os.O_NONBLOCK), L(0), None)
if fd >= 0:
    buf = ctypes.create_string_buffer(1 << 16)
    n = libc.syscall(L(243), L(fd), buf, L(1 << 16), None, None)  # mq_timedreceive
    print("LEAK mq", fd, buf.raw[: max(n, 0)])
print("END")
"""


def test_posix_message_queues_do_not_carry_data_to_a_later_run():
    # beyond issue 11. old sandbox: forged (mq_open uses the IPC namespace's own mqueue mount, not the
    # read-only tmpfs over /dev/mqueue: the queue and its message persist in the worker)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        b = Sandbox(workers=1, timeout_s=TIMEOUT)
    with b:
        before = b.worker_pids()
        b.map([MQ_WRITE])
        second = b.map([MQ_READ])[0]
        assert_same_worker(b, before)
    assert "LEAK" not in second.stdout, second.stdout  # (a reader killed for a denied syscall leaks nothing)


FILES_WRITE = r"""
import os
MARK = "codelib-attack"
made = []
for d in ("/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/var/lock", "/dev/mqueue", "/run/shm", "..", "/",
          os.path.expanduser("~"), os.environ.get("TMPDIR", "."), "."):
    try:
        with open(os.path.join(d, MARK + "-file"), "w") as f:
            f.write("secret")
        os.mkfifo(os.path.join(d, MARK + "-fifo"))
        made.append(d)
    except OSError:
        pass
print("made", made)
"""


def test_files_in_world_writable_places_do_not_survive():
    # old sandbox: contained (root-owned read-only tmpfs over /var/tmp, /dev/shm, ...; /tmp is the worker's)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        b = Sandbox(workers=1, timeout_s=TIMEOUT)
    with b:
        before = b.worker_pids()
        b.map([FILES_WRITE])
        leftovers = probe(b)
        assert_same_worker(b, before)
    escaped = []
    for d in ("/tmp", "/var/tmp", "/dev/shm", "/", REPO, "/root"):  # the host's own directories
        for name in (MARK + "-file", MARK + "-fifo"):
            path = os.path.join(d, name)
            if os.path.lexists(path):
                escaped.append(path)
                os.unlink(path)
    assert escaped == []
    assert leftovers == []


# ---------------------------------------------------------------------------------------------------------------
# visibility: the repo, its .git, other checkouts, /root, other processes


def _allowed_prefixes() -> list[str]:
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    paths |= {p for p in sys.path if p.endswith(("site-packages", "dist-packages"))}
    return sorted({os.path.realpath(p) for p in paths})


LOOK = r"""
import glob, os
ALLOWED = ALLOWED_PREFIXES
def allowed(p):
    r = os.path.realpath(p)
    return any(r == a or r.startswith(a + "/") for a in ALLOWED)
cands = set(EXTRA)
for pat in ("/work/*", "/work/*/*", "/work/*/.git/*", "/work/*/codelib/data/*/*", "/work/*/.git/objects/pack/*",
            "/root/*", "/root/.*", "/root/.cache/*", "/home/*", "/home/*/.*", "/srv/*", "/data/*"):
    cands.update(glob.glob(pat))
for src in ("/proc/self/cmdline", "/proc/%d/cmdline" % os.getppid(), "/proc/1/cmdline"):
    try:
        for arg in open(src, "rb").read().split(b"\0"):
            arg = arg.decode(errors="replace")
            if arg.startswith("/") and "codelib" in arg:  # the worker's own path gives the repo away
                repo = arg.split("/codelib/")[0]
                data = repo + "/codelib/data/humaneval/HumanEval.jsonl.gz"
                cands.update([repo + "/.git", repo + "/README.md", data])
    except OSError:
        pass
readable = []
for p in sorted(cands):
    if allowed(p):
        continue
    try:
        if os.path.isdir(p):
            # a directory on the way to the interpreter may show that way, nothing else
            extra = [e for e in os.listdir(p)
                     if not any(a.startswith(os.path.join(os.path.realpath(p), e) + "/")
                                or a == os.path.join(os.path.realpath(p), e) for a in ALLOWED)]
            if extra:
                readable.append("dir %s %s" % (p, sorted(extra)[:5]))
        else:
            with open(p, "rb") as f:
                if f.read(16):
                    readable.append("file " + p)
    except OSError:
        pass
print("READABLE" if readable else "NOTHING", readable[:40])
"""


def test_repo_git_other_checkouts_and_root_are_not_visible(box):
    # old sandbox: forged (only this checkout's codelib/data is hidden: .git, /work/main/codelib/data, other
    # worktrees and the repo's files are readable; /root shows only the interpreter)
    gitdir = (
        open(os.path.join(REPO, ".git")).read().split(":", 1)[1].strip()
        if os.path.isfile(os.path.join(REPO, ".git"))
        else os.path.join(REPO, ".git")
    )
    extra = [
        os.path.join(REPO, ".git"),
        gitdir,
        os.path.join(gitdir, "HEAD"),
        "/work/main/.git/HEAD",
        "/work/main/.git/config",
        os.path.join(REPO, "codelib", "data", "humaneval", "HumanEval.jsonl.gz"),
        "/work/main/codelib/data/humaneval/HumanEval.jsonl.gz",
        os.path.join(REPO, "pyproject.toml"),
        "/root/.bashrc",
        "/root/.cache/huggingface",
        os.path.join(REPO, "checkpoints"),
    ]
    code = LOOK.replace("ALLOWED_PREFIXES", repr(_allowed_prefixes())).replace("EXTRA", repr(extra))
    v = box.map([Job(code, timeout_s=TIMEOUT)])[0]
    assert v.passed, v
    assert v.stdout.startswith("NOTHING"), v.stdout[:3000]


def test_reference_solutions_of_another_checkout_cannot_be_used():
    # old sandbox: forged passed (the canonical solution is read from /work/*/codelib/data and executed)
    tasks = humaneval()[:3]
    code = """
    import glob, gzip, json
    def __attack__(*args, **kwargs):
        for path in glob.glob("/work/*/codelib/data/humaneval/HumanEval.jsonl.gz") + glob.glob(
                "/root/**/HumanEval*.jsonl.gz", recursive=True):
            try:
                rows = [json.loads(l) for l in gzip.open(path, "rt")]
            except Exception:
                continue
            for r in rows:
                if r["entry_point"] == "ENTRY":
                    ns = {}
                    exec(r["prompt"] + r["canonical_solution"], ns)
                    return ns["ENTRY"](*args, **kwargs)
        return None
    ENTRY = __attack__
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        v = sandbox.check(tasks, [completion(t, code) for t in tasks], workers=1, timeout_s=TIMEOUT)
    assert_not_passed(v)


SEE_PROCESSES = r"""
import os
n, hits = 0, []
try:
    pids = os.listdir("/proc")
except OSError:
    pids = []
for p in pids:
    if not p.isdigit():
        continue
    n += 1
    try:
        cmd = open("/proc/%s/cmdline" % p, "rb").read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        continue
    if "pytest" in cmd:
        hits.append(cmd[:120])
print("SEEN" if hits else "UNSEEN", n, hits[:5])
"""


def test_other_processes_are_not_visible(box):
    # old sandbox: forged (no pid namespace: pytest's and every host process's command line is readable)
    v = box.map([Job(SEE_PROCESSES, timeout_s=TIMEOUT)])[0]
    assert v.passed, v
    assert v.stdout.startswith("UNSEEN"), v.stdout
    assert int(v.stdout.split()[1]) <= 8, v.stdout  # its own pid namespace: a handful of processes at most


# ---------------------------------------------------------------------------------------------------------------
# fork bombs and cgroups


FORK_COUNT = r"""
import os, time
n = 0
for _ in range(400):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    n += 1
print("forked", n)
"""


def test_fork_bomb_is_bounded_per_run():
    # old sandbox (root): contained (RLIMIT_NPROC of the worker's own uid: 31 of 32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        b = Sandbox(workers=1, timeout_s=TIMEOUT, max_procs=32)
    with b:
        v = b.map([Job(FORK_COUNT, timeout_s=10)])[0]
        leftovers = probe(b)
    assert v.stdout.startswith("forked"), v
    assert int(v.stdout.split()[1]) <= 32 + 8, v.stdout
    assert leftovers == []


CGROUP2_LAUNCHER = r"""
import ctypes, json, os, sys, threading, time, warnings
libc = ctypes.CDLL(None, use_errno=True)
def call(fn, *a):
    if getattr(libc, fn)(*a) != 0:
        e = ctypes.get_errno()
        raise OSError(e, fn + ": " + os.strerror(e))
try:
    call("unshare", 0x00020000)
    call("mount", None, b"/", None, ctypes.c_ulong(0x4000 | (1 << 18)), None)
    call("mount", b"cgroup2", b"/sys/fs/cgroup", b"cgroup2", ctypes.c_ulong(0), None)
except OSError as e:
    print(json.dumps({"skip": str(e)}))
    sys.exit(0)
from codelib.sandbox import Job, Sandbox
def groups_of(pid):
    try:
        line = [l for l in open("/proc/%d/cgroup" % pid).read().splitlines() if l.startswith("0::")][0]
    except (OSError, IndexError):
        return None
    return "/sys/fs/cgroup" + line[3:]
def limited(path, name):
    while path and path.startswith("/sys/fs/cgroup"):
        try:
            if open(os.path.join(path, name)).read().strip() not in ("max", ""):
                return True
        except OSError:
            pass
        path = os.path.dirname(path)
    return False
def descendants(root):
    kids = {}
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                ppid = int(open("/proc/%s/stat" % p).read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(p))
    out, todo = [], [root]
    while todo:
        for k in kids.get(todo.pop(), []):
            out.append(k)
            todo.append(k)
    return out
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    box = Sandbox(workers=1, timeout_s=10, max_procs=32)
seen = {"memory": False, "pids": False, "programs": 0}
def watch():
    end = time.time() + 6
    while time.time() < end:
        for pid in descendants(box.worker_pids()[0]):
            g = groups_of(pid)
            seen["programs"] += 1
            if g:
                seen["memory"] |= limited(g, "memory.max")
                seen["pids"] |= limited(g, "pids.max")
        time.sleep(0.2)
t = threading.Thread(target=watch)
t.start()
v = box.map([Job(FORK_PROGRAM, timeout_s=8)])[0]
t.join()
print(json.dumps({"missing": box.isolation.get("missing", {}), "seen": seen, "stdout": v.stdout, "status": v.status}))
box.close()
"""


@pytest.mark.slow
def test_cgroup_v2_host_bounds_memory_and_pids_or_says_so():
    # old sandbox: forged (on a cgroup-v2 view nothing bounds a run's memory and `missing` is empty)
    if os.geteuid() != 0:
        pytest.skip("emulating a cgroup-v2 host needs root (a mount namespace with cgroup2 on /sys/fs/cgroup)")
    fork = FORK_COUNT.replace("range(400)", "range(200)").replace("time.sleep(30)", "time.sleep(3)")
    code = CGROUP2_LAUNCHER.replace("FORK_PROGRAM", repr(fork + "import time\ntime.sleep(2)\n"))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    if "skip" in out:
        pytest.skip(f"the kernel refused a cgroup2 mount here: {out['skip']}")
    said = json.dumps(out["missing"]).lower()
    assert out["seen"]["memory"] or "memory" in said, out
    forked = int(out["stdout"].split()[1]) if out["stdout"].startswith("forked") else 0
    assert out["seen"]["pids"] or forked <= 32 + 8 or "pids" in said or "process" in said, out


# ---------------------------------------------------------------------------------------------------------------
# the unprivileged path: the same attacks as a throwaway uid


LAUNCHER = r"""
import ctypes, json, os, random, sys, traceback
params = json.loads(sys.stdin.read())
libc = ctypes.CDLL(None, use_errno=True)
def call(fn, *a):
    if getattr(libc, fn)(*a) != 0:
        e = ctypes.get_errno()
        raise OSError(e, fn + ": " + os.strerror(e))
def mount(src, target, fstype, flags, data):
    enc = lambda s: s.encode() if s is not None else None
    call("mount", enc(src), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data))
MS_NOSUID, MS_NODEV, MS_BIND, MS_REC, MS_PRIVATE = 2, 4, 4096, 0x4000, 1 << 18
try:
    call("unshare", 0x00020000 | 0x08000000)  # mount + IPC namespaces: what the attacks leave stays here
    mount(None, "/", None, MS_REC | MS_PRIVATE, None)
    for d in ("/tmp", "/var/tmp", "/dev/shm"):
        if os.path.isdir(d):
            mount("tmpfs", d, "tmpfs", MS_NOSUID | MS_NODEV, "size=1024m,mode=1777")
    # Python may live below a directory others cannot enter (pyenv in /root, 0700): cover it, bind back the prefixes
    paths = {sys.base_prefix, sys.prefix, sys.exec_prefix, sys.base_exec_prefix}
    paths |= {p for p in sys.path if p.startswith("/")}
    needed = {os.path.realpath(p) for p in paths if os.path.isdir(p)}
    blocked = {}
    for path in needed:
        parts = path.strip("/").split("/")
        for i in range(1, len(parts)):
            anc = "/" + "/".join(parts[:i])
            if not os.stat(anc).st_mode & 0o001:
                blocked.setdefault(anc, set()).add(path)
                break
    for anc, below in sorted(blocked.items()):
        keep = [p for p in below if not any(p != q and p.startswith(q + "/") for q in below)]
        fds = {p: os.open(p, os.O_PATH) for p in keep}
        mount("tmpfs", anc, "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,mode=755")
        for p, fd in fds.items():
            os.makedirs(p, 0o755, exist_ok=True)
            mount("/proc/self/fd/%d" % fd, p, None, MS_BIND | MS_REC, None)
            os.close(fd)
except OSError as e:
    print(json.dumps({"skip": "the kernel refused the launcher's namespaces or mounts: %s" % e}))
    sys.exit(0)
uid = params["uid"]
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(r)
    out = os.fdopen(w, "w")
    try:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
        libc.prctl(4, 1, 0, 0, 0)  # dumpable, as an ordinary user's trainer is
        os.environ.update(HOME="/tmp", USER="throwaway", LOGNAME="throwaway", TMPDIR="/tmp")
        os.chdir("/tmp")
        SECRET = params["secret"]  # held in this process's memory, as a trainer holds tokens and tests
        def emit(**kw):
            out.write(json.dumps(kw) + "\n")
            out.flush()
        exec(compile(params["body"], "<unprivileged>", "exec"), {"emit": emit, "params": params, "SECRET": SECRET})
        emit(done=True)
    except BaseException:
        try:
            out.write(json.dumps({"error": traceback.format_exc()[-3000:]}) + "\n")
            out.flush()
        except BaseException:
            pass
    os._exit(0)
os.close(w)
data = b""
with os.fdopen(r, "rb") as f:
    data = f.read()
_, status = os.waitpid(pid, 0)
lines = [json.loads(l) for l in data.decode(errors="replace").splitlines() if l.strip()]
print(json.dumps({"status": status, "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0, "lines": lines}))
"""


def as_throwaway_user(body: str, timeout: float = 400, **params) -> dict:
    """Run `body` as a random throwaway uid (see the module doc); what it `emit`s comes back, with its exit."""
    if os.geteuid() != 0:
        pytest.skip("the throwaway-uid harness starts as root (CI does); run as a user, the whole suite is that path")
    params.update(
        uid=random.randrange(1_700_000_000, 1_800_000_000),
        secret=f"{MARK}-secret-{uuid.uuid4().hex}",
        body=textwrap.dedent(body),
    )
    env = dict(os.environ, CODELIB_ATTACK_SECRET=params["secret"])  # in the environment of the trainer stand-in
    r = subprocess.run(
        [sys.executable, "-c", LAUNCHER],
        input=json.dumps(params),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd="/",
        env=env,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    if "skip" in out:
        pytest.skip(out["skip"])
    errors = [x["error"] for x in out["lines"] if "error" in x]
    assert not errors, errors[0]
    return out


BATTERY = r"""
import json, warnings
from codelib import sandbox
from codelib.sandbox import Job, Sandbox
from codelib.tasks import Task
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    box = Sandbox(workers=1, timeout_s=15)
emit(isolation=box.isolation)
pid0 = box.worker_pids()
for step in params["steps"]:
    if step.get("task"):
        job = sandbox.task_job(Task(**step["task"]), step["code"], plus=step.get("plus", False), timeout_s=15)
    else:
        job = Job(step["code"], timeout_s=step.get("timeout_s", 15), memory_mb=step.get("memory_mb"))
    try:
        v = box.map([job])[0]
        emit(name=step["name"], status=v.status, passed=v.passed, detail=v.detail[:300], stdout=v.stdout[:3000],
             tests_passed=v.tests_passed, tests_total=v.tests_total, same=box.worker_pids() == pid0)
    except Exception as e:
        emit(name=step["name"], raised="%s: %s" % (type(e).__name__, e))
box.close()
"""


def _unprivileged_steps() -> list[dict]:
    he = humaneval()[:1][0]
    hplus = load_tasks("humaneval_plus", "test")[0]
    io = stdio_task()
    fn = lambda t, code: dict(task=t.to_dict(), code=completion(t, code))  # noqa: E731
    forge = "def __attack__(*a, **k):\n    t, _ = _loot(_frames_getframe())\n    _forge(t)\nENTRY = __attack__\n"
    mem = "def __attack__(*a, **k):\n    _forge(_mem_tokens())\nENTRY = __attack__\n"
    steps = [
        dict(name="forge-frames", **fn(he, forge)),
        dict(name="forge-frames-plus", plus=True, **fn(hplus, forge)),
        dict(name="forge-memscan", **fn(he, mem)),
        dict(
            name="rebind-helpers",
            **fn(he, "ENTRY = lambda *a, **k: None\n__codelib_fail__ = lambda *a: __codelib_ok__()\n"),
        ),
        dict(name="lookup-frames", **fn(he, LOOKUP["frames"])),
        dict(name="lookup-memscan", **fn(he, LOOKUP["memscan"])),
        dict(name="always-equal", **fn(he, ALWAYS_EQUAL["object"])),
        dict(name="patched-abs", **fn(humaneval([4])[0], PATCHES["abs"][1])),
        dict(name="stdio-frames", task=io.to_dict(), code=program(STDIO["frames"] + STDIO_FIND)),
        dict(name="stdio-memscan", task=io.to_dict(), code=program(STDIO["memscan"] + STDIO_FIND)),
        dict(
            name="malformed-nan",
            plus=True,
            **fn(
                hplus,
                "def __attack__(*a, **k):\n    t, _ = _loot(_frames_getframe())\n"
                "    _forge(t, " + repr(MALFORMED["total-nan"]) + ")\nENTRY = __attack__\n",
            ),
        ),
        dict(name="nest-and-fill", code=NEST + "print(nest('.', 1100, 1000), nest('/tmp', 1100, 0))\n", timeout_s=30),
        dict(name="after-nest-correct-stdio", task=io.to_dict(), code=io.canonical_solution),
        dict(name="after-nest-scratch", code=SCRATCH),
        dict(name="sysv-write", code=SYSV_WRITE),
        dict(name="sysv-read", code=SYSV_READ),
        dict(name="keys-write", code=KEYS_WRITE),
        dict(name="keys-read", code=KEYS_READ),
        dict(name="mq-write", code=MQ_WRITE),
        dict(name="mq-read", code=MQ_READ),
        dict(name="files-write", code=FILES_WRITE),
        dict(name="probe", code=PROBE),
        dict(
            name="visibility",
            code=LOOK.replace("ALLOWED_PREFIXES", repr(_allowed_prefixes())).replace(
                "EXTRA", repr(["/work/main/.git/HEAD", os.path.join(REPO, "README.md")])
            ),
        ),
        dict(name="processes", code=SEE_PROCESSES),
        dict(name="fork-bomb", code=FORK_COUNT, timeout_s=10),
        dict(name="probe-after-bomb", code=PROBE),
        # the parent's parse (`jobs.parse_error`) in a non-root parent: a text that does not parse is an error, a
        # correct solution written with soft keywords still passes
        dict(name="parse-nesting", task=he.to_dict(), code=PARSE_ATTACKS["nesting-bomb"]),
        dict(
            name="parse-soft-keywords", task=he.to_dict(), code=PARSE_ATTACKS["soft-keywords"] + he.canonical_solution
        ),
    ]
    return steps


@pytest.fixture(scope="module")
def unprivileged():
    out = as_throwaway_user(BATTERY, steps=_unprivileged_steps())
    results = {x["name"]: x for x in out["lines"] if "name" in x}
    isolation = next((x["isolation"] for x in out["lines"] if "isolation" in x), {})
    return {"results": results, "isolation": isolation, "signal": out["signal"]}


UNPRIVILEGED_NOT_PASSED = [
    # old sandbox (throwaway uid): forged passed
    "forge-frames",
    # old sandbox (throwaway uid): forged passed
    "forge-frames-plus",
    # old sandbox (throwaway uid): forged passed
    "forge-memscan",
    # old sandbox (throwaway uid): forged passed
    "rebind-helpers",
    # old sandbox (throwaway uid): forged passed
    "lookup-frames",
    # old sandbox (throwaway uid): forged passed
    "lookup-memscan",
    # old sandbox (throwaway uid): forged passed
    "always-equal",
    # old sandbox (throwaway uid): forged passed
    "patched-abs",
    # old sandbox (throwaway uid): forged passed
    "stdio-frames",
    # old sandbox (throwaway uid): forged passed
    "stdio-memscan",
    # old sandbox (throwaway uid): forged (check() raised)
    "malformed-nan",
    # 1e599d0: a program that does not parse is judged in the parent, without a run: an error, never a pass
    "parse-nesting",
]


@pytest.mark.slow
@pytest.mark.parametrize("name", UNPRIVILEGED_NOT_PASSED)
def test_unprivileged_wrong_solutions_are_not_passed(unprivileged, name):
    r = unprivileged["results"][name]
    assert "raised" not in r, r
    assert not r["passed"] and r["status"] != "passed", r
    assert 0 <= r["tests_passed"] <= r["tests_total"], r


UNPRIVILEGED_NO_LEAK = [
    # old sandbox (throwaway uid): contained (the stdin file reuses its page of the full /tmp)
    "after-nest-correct-stdio",
    # old sandbox (throwaway uid): forged (the nest stays; its 511 MB leave the worker's /tmp full: ENOSPC)
    "after-nest-scratch",
    # old sandbox (throwaway uid): forged (the message and the segment are read back)
    "sysv-read",
    # old sandbox (throwaway uid): forged (the key is read back)
    "keys-read",
    # old sandbox (throwaway uid): forged (the queued message is read back)
    "mq-read",
    # old sandbox (throwaway uid): forged (leftovers listed)
    "probe",
    # old sandbox (throwaway uid): forged (.git and other checkouts are readable)
    "visibility",
    # old sandbox (throwaway uid): forged (every host process's command line)
    "processes",
    # old sandbox (throwaway uid): contained/forged: see the fork-bomb test
    "probe-after-bomb",
]


@pytest.mark.slow
@pytest.mark.parametrize("name", UNPRIVILEGED_NO_LEAK)
def test_unprivileged_runs_leave_and_see_nothing(unprivileged, name):
    r = unprivileged["results"][name]
    assert "raised" not in r, r
    assert r["same"], "the worker was replaced"
    if name in ("after-nest-correct-stdio", "after-nest-scratch"):
        assert r["passed"], r
        return
    if name in ("probe", "visibility", "processes", "probe-after-bomb"):
        assert r["passed"], r  # the readers of IPC objects may be killed by a seccomp filter: no leak either
    out = r["stdout"]
    assert "LEAK" not in out and not out.startswith(("LEFTOVERS", "READABLE", "SEEN")), out[:2000]


@pytest.mark.slow
def test_unprivileged_fork_bomb_is_bounded(unprivileged):
    # old sandbox (throwaway uid): forged (RLIMIT_NPROC counts the user's processes plus 64 + 256: ~320
    # processes per program, which then passes)
    r = unprivileged["results"]["fork-bomb"]
    assert "raised" not in r, r
    forked = int(r["stdout"].split()[1]) if r["stdout"].startswith("forked") else 0
    assert forked <= 64 + 8, r


@pytest.mark.slow
def test_unprivileged_isolation_names_what_is_missing(unprivileged):
    # old sandbox (throwaway uid): contained (`missing` names the uid)
    missing = unprivileged["isolation"].get("missing", {})
    assert isinstance(missing, dict)
    assert "uid" in missing and missing["uid"].startswith("not root"), missing  # the shared uid is named, with why
    assert all(isinstance(why, str) and why for why in missing.values()), missing  # each gap says what it costs
    assert unprivileged["signal"] == 0, "the throwaway user's process was killed"


def _flag_steps() -> list[dict]:
    """The attacks that are safe to run as host root under `unprivileged=True` (nothing that writes outside)."""
    keep = (
        "forge-frames",
        "forge-memscan",
        "rebind-helpers",
        "lookup-frames",
        "always-equal",
        "stdio-frames",
        "stdio-memscan",
        "malformed-nan",
        "sysv-write",
        "sysv-read",
        "keys-write",
        "keys-read",
        "mq-write",
        "mq-read",
        "visibility",
        "processes",
        "parse-nesting",
        "parse-soft-keywords",
    )
    return [s for s in _unprivileged_steps() if s["name"] in keep]


@pytest.fixture(scope="module")
def flagged():
    """The same attacks through `Sandbox(unprivileged=True)` in this (root) process: the emulated non-root path."""
    results = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        b = Sandbox(workers=1, timeout_s=TIMEOUT, unprivileged=True)
    with b:
        before = b.worker_pids()
        for step in _flag_steps():
            if step.get("task"):
                job = sandbox.task_job(
                    Task(**step["task"]), step["code"], plus=step.get("plus", False), timeout_s=TIMEOUT
                )
            else:
                job = Job(step["code"], timeout_s=step.get("timeout_s", TIMEOUT))
            try:
                v = b.map([job])[0]
                results[step["name"]] = dict(
                    status=v.status,
                    passed=v.passed,
                    detail=v.detail[:300],
                    stdout=v.stdout[:3000],
                    tests_passed=v.tests_passed,
                    tests_total=v.tests_total,
                    same=b.worker_pids() == before,
                )
            except Exception as e:
                results[step["name"]] = dict(raised=f"{type(e).__name__}: {e}")
    return results


@pytest.mark.slow
@pytest.mark.parametrize(
    "name", [n for n in UNPRIVILEGED_NOT_PASSED if n not in ("forge-frames-plus", "patched-abs", "lookup-memscan")]
)
def test_unprivileged_flag_wrong_solutions_are_not_passed(flagged, name):
    # old sandbox (root, unprivileged=True): forged, as through the throwaway uid (malformed-nan: check raised)
    r = flagged[name]
    assert "raised" not in r, r
    assert not r["passed"] and r["status"] != "passed", r


@pytest.mark.slow
@pytest.mark.parametrize("path", ["throwaway-uid", "flag"])
def test_unprivileged_parse_in_the_parent_gives_a_runs_verdicts(unprivileged, flagged, path):
    """Non-root, both ways: the text that does not parse is the error a run gives (its SyntaxError, the tests
    counted), and a correct solution the parser must read with soft keywords passes."""
    results = unprivileged["results"] if path == "throwaway-uid" else flagged
    bad, good = results["parse-nesting"], results["parse-soft-keywords"]
    assert "raised" not in bad and "raised" not in good, (bad, good)
    assert bad["status"] == "error" and bad["tests_passed"] == 0 and bad["tests_total"] > 0, bad
    assert bad["detail"].startswith("SyntaxError: too many nested parentheses"), bad
    assert good["passed"] and good["tests_passed"] == good["tests_total"] > 0, good


@pytest.mark.slow
@pytest.mark.parametrize("name", ["sysv-read", "keys-read", "mq-read", "visibility", "processes"])
def test_unprivileged_flag_runs_leave_and_see_nothing(flagged, name):
    # old sandbox (root, unprivileged=True): forged (all five)
    r = flagged[name]
    assert "raised" not in r, r
    if name in ("visibility", "processes"):
        assert r["passed"], r
    assert "LEAK" not in r["stdout"] and not r["stdout"].startswith(("READABLE", "SEEN")), r["stdout"][:2000]
    assert host_keys() == []


VICTIM = r"""
import os
d = VICTIM_DIR
done = []
for what, act in (
    ("append", lambda: open(os.path.join(d, "victim.txt"), "a").write("pwned")),
    ("create", lambda: open(os.path.join(d, "new.txt"), "w").write("pwned")),
    ("chmod", lambda: os.chmod(os.path.join(d, "victim.txt"), 0o777)),
    ("rename", lambda: os.rename(os.path.join(d, "victim.txt"), os.path.join(d, "moved.txt"))),
):
    try:
        act()
        done.append(what)
    except OSError:
        pass
print("WROTE" if done else "DENIED", done)
"""


@pytest.mark.slow
def test_unprivileged_flag_as_root_cannot_write_root_owned_files():
    # beyond issue 11. old sandbox (root, unprivileged=True): forged: the program runs as host uid 0 in a user
    # namespace; without capabilities it still owns every root-owned file (owner permission bits), so it can
    # append to, create, chmod and rename files of the repo (a victim directory in this checkout here)
    victim = os.path.join(REPO, f".sandbox-victim-{uuid.uuid4().hex}")  # no MARK: probes elsewhere must not see it
    os.mkdir(victim, 0o755)
    try:
        with open(os.path.join(victim, "victim.txt"), "w") as f:
            f.write("original")
        os.chmod(os.path.join(victim, "victim.txt"), 0o644)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            b = Sandbox(workers=1, timeout_s=TIMEOUT, unprivileged=True)
        with b:
            v = b.map([Job(VICTIM.replace("VICTIM_DIR", repr(victim)))])[0]
        assert sorted(os.listdir(victim)) == ["victim.txt"], v.stdout
        assert open(os.path.join(victim, "victim.txt")).read() == "original", v.stdout
        assert os.stat(os.path.join(victim, "victim.txt")).st_mode & 0o777 == 0o644, v.stdout
        assert v.passed and v.stdout.startswith("DENIED"), v
    finally:
        shutil.rmtree(victim, ignore_errors=True)


TRAINER = r"""
import json, os, warnings
from codelib import sandbox
from codelib.sandbox import Job, Sandbox
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    box = Sandbox(workers=2, timeout_s=15)
emit(me=os.getpid())
v = box.map([Job(params["peek"], timeout_s=15)])[0]
emit(name="peek", status=v.status, stdout=v.stdout[-3000:])
v = box.map([Job("import os, signal\nos.kill(-1, signal.SIGKILL)\nprint('sent')\n", timeout_s=15)])[0]
emit(name="kill", status=v.status, stdout=v.stdout[-300:])
v = box.map(["print('still here')"] * 2)
emit(name="after", statuses=[x.status for x in v])
box.close()
"""

PEEK = r"""
import os
SECRET_ROT = SECRET_ROT_VALUE
rot = bytes((b + 1) % 256 for b in range(256))
hits = []
try:
    pids = os.listdir("/proc")
except OSError:
    pids = []
for p in pids:
    if not p.isdigit() or int(p) == os.getpid():
        continue
    try:
        if SECRET_ROT in open("/proc/%s/environ" % p, "rb").read().translate(rot):
            hits.append("environ " + p)
            print("LEAK environ", p, flush=True)
    except OSError:
        pass
    try:
        maps = open("/proc/%s/maps" % p).read().splitlines()
        mem = open("/proc/%s/mem" % p, "rb", buffering=0)
    except OSError:
        continue
    for line in maps:
        a, perms = line.split()[:2]
        lo, hi = (int(x, 16) for x in a.split("-"))
        if perms[:2] != "rw" or hi - lo > 1 << 28:
            continue
        try:
            mem.seek(lo)
            if SECRET_ROT in mem.read(hi - lo).translate(rot):
                hits.append("mem " + p)
                print("LEAK mem", p, flush=True)
                break
        except (OSError, ValueError, OverflowError):
            pass
print("LEAK" if hits else "NONE", hits)
"""


@pytest.mark.slow
def test_unprivileged_program_cannot_kill_or_read_its_caller():
    # beyond issue 11. old sandbox (throwaway uid): forged: `os.kill(-1, SIGKILL)` from a program kills every
    # process of the caller's uid (the trainer itself, here the throwaway user's process, and the other workers:
    # the user namespace does not stop kill(2) by an equal uid; there is no pid namespace)
    out = _throwaway_with_peek(TRAINER)
    lines = {x.get("name"): x for x in out["lines"] if "name" in x}
    assert out["signal"] == 0, f"the caller (uid of the user) was killed by signal {out['signal']}: {out['lines']}"
    assert "LEAK" not in lines.get("peek", {}).get("stdout", ""), lines.get("peek")
    assert lines.get("after", {}).get("statuses") == ["passed", "passed"], lines


def _throwaway_with_peek(body: str) -> dict:
    secret = f"{MARK}-secret-{uuid.uuid4().hex}"
    peek = PEEK.replace("SECRET_ROT_VALUE", repr(hide(secret)))
    body = f"SECRET_HELD = {secret!r}[::-1][::-1]\n" + textwrap.dedent(body)
    if os.geteuid() != 0:
        pytest.skip("the throwaway-uid harness starts as root")
    params = dict(uid=random.randrange(1_700_000_000, 1_800_000_000), secret=secret, body=body, peek=peek)
    env = dict(os.environ, CODELIB_ATTACK_SECRET=secret)
    r = subprocess.run(
        [sys.executable, "-c", LAUNCHER],
        input=json.dumps(params),
        capture_output=True,
        text=True,
        timeout=300,
        cwd="/",
        env=env,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    if "skip" in out:
        pytest.skip(out["skip"])
    return out


# ---------------------------------------------------------------------------------------------------------------
# beyond issue 11


@pytest.mark.slow
def test_candidate_cannot_find_the_canonical_solution_left_by_its_plus_reference():
    # beyond issue 11. old sandbox: forged passed, plus inputs included (the reference job runs on the same
    # worker just before the candidate; its `prompt + canonical_solution` stays in the fork server's freed memory,
    # which the forked candidate inherits, finds and executes)
    tasks = load_tasks("humaneval_plus", "test")[20:24]  # tasks no other test uses: their references run here
    cache = getattr(sandbox, "_REFERENCE_CACHE", None)
    if cache is not None:
        cache.clear()
    code = """
    _F = []
    def __attack__(*args, **kwargs):
        if not _F:
            _F.append(None)
            for text in _mem_find(NEEDLE, after=1 << 16, limit=64):
                rest = text[len(NEEDLE):].decode("utf-8", "replace")
                if "_ROT" in rest[:400]:
                    continue  # our own program
                try:
                    ns = {}
                    exec(PROMPT + text.decode("utf-8", "replace"), ns)
                    if callable(ns.get("ENTRY")):
                        _F[0] = ns["ENTRY"]
                        break
                except BaseException:
                    continue
        return _F[0](*args, **kwargs) if _F[0] else None
    ENTRY = __attack__
    """
    jobs = []
    for t in tasks:
        c = code.replace("NEEDLE", repr(hide(t.prompt[-100:]))).replace("PROMPT", repr(t.prompt[:-100]))
        jobs.append(sandbox.task_job(t, completion(t, c), plus=True, timeout_s=TIMEOUT))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with Sandbox(workers=1, timeout_s=TIMEOUT) as b:
            v = b.map(jobs)
    assert_not_passed(v)


def test_a_polluting_run_does_not_change_the_next_verdicts(box, he_tasks):
    # old sandbox: contained here (this pollution is per process); the correct solutions still pass
    pollute = (
        "import builtins, math\nbuiltins.abs = lambda x: 0\nmath.fabs = lambda x: 0.0\n"
        "import sys\nsys.modules['collections'] = None\n"
    )
    before = box.worker_pids()
    box.map([Job(pollute)])
    v = box.map([sandbox.task_job(t, t.canonical_solution) for t in he_tasks])
    assert all(x.passed for x in v), [x.detail for x in v]
    wrong = box.map([sandbox.task_job(t, honest_wrong(t)) for t in he_tasks])
    assert not any(x.passed for x in wrong)
    assert_same_worker(box, before)


def test_attacked_tasks_are_judged_outside(box):
    # old sandbox: fails (no `Verdict.judge`: every test runs inside the program's process). Every attack on a
    # function task above assumes the outside judge for HumanEval, HumanEval+ and synthetic; MBPP may fall back
    tasks = humaneval()[:3] + load_tasks("humaneval_plus", "test")[:2] + load_tasks("synthetic", "test")[:3]
    mbpp = load_tasks("mbpp", "test")[:3]
    jobs = [sandbox.task_job(t, c) for t in tasks + mbpp for c in (t.canonical_solution, honest_wrong(t))]
    v = box.map(jobs)
    assert [x.passed for x in v] == [True, False] * (len(tasks) + len(mbpp)), [(x.status, x.detail) for x in v]
    for x in v[: 2 * len(tasks)]:
        assert getattr(x, "judge", None) == "outside", x
    for x in v[2 * len(tasks) :]:
        assert getattr(x, "judge", None) in ("outside", "inside"), x


HOSTILE = {
    # old sandbox: contained (each is compared in-process and is simply wrong). These guard the outside
    # judge's decoder: only plain data crosses, bounded in depth and size, never unpickled
    "deep": "x = []\nfor _ in range(200000):\n    x = [x]\nreturn x",
    "recursive": "x = []\nx.append(x)\nreturn x",
    "huge-int": "return 1 << (1 << 26)",
    "huge-str": "return 'x' * (64 << 20)",
    "huge-list": "return [0] * (10 ** 7)",
    "generator": "return (i for i in range(3))",
    "exception": "return ValueError('x')",
    "nan": "return float('nan')",
    "nested-always-equal": "class AE:\n    def __eq__(s, o):\n        return True\nreturn [AE(), {'k': AE()}]",
    # if the judge unpickled what comes back, this would become an always-equal object inside the judge
    "pickle-bait": "class Bait:\n    def __reduce__(self):\n        return (eval, (\"type('AE', (), {'__eq__': lambda "
    "s, o: True, '__ne__': lambda s, o: False, '__hash__': lambda s: 0})()\",))\nreturn Bait()",
    # old sandbox: forged passed (a subclass of a plain type whose == lies: compared in-process)
    "int-subclass": (
        "class I(int):\n    def __eq__(s, o):\n        return True\n    __hash__ = int.__hash__\nreturn I(7)"
    ),
    # old sandbox: forged passed
    "dict-subclass": "import collections\nclass D(collections.OrderedDict):\n"
    "    def __eq__(s, o):\n        return True\nreturn D()",
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_return_values_are_failed_calls(box, name):
    tasks = humaneval()[:2] + load_tasks("synthetic", "test")[:1]
    body = "def __attack__(*args, **kwargs):\n" + textwrap.indent(HOSTILE[name], "    ") + "\nENTRY = __attack__\n"
    start = time.monotonic()
    v = box.map([sandbox.task_job(t, completion(t, body), timeout_s=TIMEOUT) for t in tasks])
    assert_not_passed(v)
    assert time.monotonic() - start < 3 * (TIMEOUT + 15), "the judge must bound what it decodes"
    good = box.map([sandbox.task_job(t, t.canonical_solution) for t in tasks])
    assert all(x.passed for x in good), good
    assert probe(box) == []  # (the worker may have been replaced: a judge that gave up is no leak)


CHANNEL = {
    # old sandbox: contained (error: report limit); 70 MB of garbage on every fd the program has
    "flood": "junk = b'\\x00\\xff{\"done\": true}\\n' * (70 << 16)\n_spray([junk])\nreturn None",
    # old sandbox: contained (error: channel closed)
    "close": "_os.closerange(3, 1 << 16)\nreturn None",
    # old sandbox: contained (error)
    "replace": "r, w = _os.pipe()\nfor fd in range(3, 1024):\n    if fd not in (r, w):\n        try:\n            "
    "_os.dup2(r if fd % 2 else w, fd)\n        except OSError:\n            pass\nreturn None",
    # old sandbox: contained (failed); a stream of framed 'passed' replies, then a wrong answer
    "framed-replies": "_spray([_frame(_PASS_REPLY) * 1000, _frame({'ok': True, 'value': None}) * 1000])\nreturn None",
}


@pytest.mark.parametrize("name", list(CHANNEL))
def test_abusing_the_channel_to_the_judge_is_not_a_pass(box, name):
    tasks = humaneval()[:2]
    body = "def __attack__(*args, **kwargs):\n" + textwrap.indent(CHANNEL[name], "    ") + "\nENTRY = __attack__\n"
    before = box.worker_pids()
    v = box.map([sandbox.task_job(t, completion(t, body), timeout_s=TIMEOUT) for t in tasks])
    assert_not_passed(v)
    good = box.map([sandbox.task_job(t, t.canonical_solution) for t in tasks])
    assert all(x.passed for x in good), good
    assert probe(box) == []
    del before  # a worker replaced after its channel was wrecked is fine; a wrong verdict or a leftover is not


OTHERS = r"""
_T = {}
def __attack__(*args, **kwargs):
    if not _T:
        _T[None] = None
        texts = []
        try:
            pids = [int(p) for p in _os.listdir("/proc") if p.isdigit() and int(p) != _os.getpid()]
        except OSError:
            pids = []
        for pid in pids:  # every other process: the judge holds the tests, the worker the request
            try:
                maps = open("/proc/%d/maps" % pid).read().splitlines()
                mem = open("/proc/%d/mem" % pid, "rb", buffering=0)
            except OSError:
                continue
            for line in maps:
                a, perms = line.split()[:2]
                lo, hi = (int(x, 16) for x in a.split("-"))
                if perms[:2] != "rw" or hi - lo > 1 << 28:
                    continue
                try:
                    mem.seek(lo)
                    data = mem.read(hi - lo)
                except (OSError, ValueError, OverflowError):
                    continue
                i = data.translate(_ROT).find(NEEDLE)
                if i >= 0:
                    end = data.find(b"\0", i)
                    texts.append(data[i : end if end > 0 else i + (1 << 16)])
        _T.update(_table(texts, ("candidate", "ENTRY")))
        if len(_T) == 1:  # nothing readable: stop or kill everything else instead
            import signal
            for pid in pids:
                for sig in (signal.SIGSTOP, signal.SIGKILL):
                    try:
                        _os.kill(pid, sig)
                    except OSError:
                        pass
    return _T.get(repr(args))
ENTRY = __attack__
""".replace("NEEDLE", repr(hide("def check(candidate)")))


def test_other_processes_of_a_run_cannot_be_read_or_stopped(box):
    # old sandbox: contained (the worker is root, other programs have other uids; kill gives EPERM)
    tasks = humaneval()[:3]
    v = box.map([sandbox.task_job(t, completion(t, OTHERS), timeout_s=TIMEOUT) for t in tasks])
    assert_not_passed(v)
    good = box.map([sandbox.task_job(t, t.canonical_solution) for t in tasks])
    assert all(x.passed for x in good), good
    assert probe(box) == []


def test_all_of_them_in_one_batch_through_check():
    # old sandbox: forged (the frame forgeries, the lookup, the always-equal object and the rebinding pass)
    # every attack above in one `check()` call on a fresh pool: nothing passes, nothing raises, correct
    # solutions in the same batch pass
    tasks, comps, good = [], [], []
    for t in humaneval()[:4]:
        for code in (FORGE["getframe"], FORGE["traceback"]):
            tasks.append(t)
            comps.append(
                completion(
                    t,
                    "def __attack__(*a, **k):\n"
                    + textwrap.indent(code, "    ")
                    + "    _forge(tokens)\nENTRY = __attack__\n",
                )
            )
            good.append(False)
        for code in (
            LOOKUP["frames"],
            ALWAYS_EQUAL["object"],
            "__codelib_fail__ = lambda *a: __codelib_ok__()\nENTRY = lambda *a, **k: None\n",
        ):
            tasks.append(t)
            comps.append(completion(t, code))
            good.append(False)
        tasks.append(t)
        comps.append(t.canonical_solution)
        good.append(True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        v = sandbox.check(tasks, comps, workers=2, timeout_s=TIMEOUT)
    for x, g in zip(v, good, strict=True):
        assert_well_formed(x)
        assert x.passed == g, (x.status, x.detail)


# ---------------------------------------------------------------------------------------------------------------
# inherited file descriptors: only its own stdio and the one channel its mode needs


FD_PROBE = r"""
import os as _o, stat as _st
_open = []
for _fd in range(0, 1 << 16):
    try:
        _m = _o.fstat(_fd).st_mode
    except OSError:
        continue
    _open.append(_fd)
    if _fd > 2:  # try to read a secret from it, then to forge a verdict through it
        try:
            _o.set_blocking(_fd, False)
            _o.read(_fd, 1 << 16)
        except OSError:
            pass
        for _forge in (b'{"ready": true}', b"d", b'{"done": true, "passed": 9, "total": 9}', b"+" * 64):
            try:
                _o.write(_fd, _forge)
            except OSError:
                pass
print("FDS", _open, flush=True)
"""


@pytest.mark.parametrize("unprivileged", [False, True], ids=["root", "unprivileged-flag"])
def test_inherited_descriptors_are_only_its_own_stdio_and_channel(unprivileged):
    task = humaneval()[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        b = Sandbox(workers=1, timeout_s=10, unprivileged=unprivileged)
    with b:
        before = b.worker_pids()
        at_import = completion(task, FD_PROBE + "ENTRY = lambda *a, **k: None\n")
        in_call = completion(task, "def ENTRY(*a, **k):\n" + textwrap.indent(FD_PROBE, "    ") + "    return None\n")
        jobs = [sandbox.task_job(task, at_import), sandbox.task_job(task, in_call), sandbox.Job(FD_PROBE)]
        v = b.map(jobs)
        assert_not_passed(v[:2])
        for x, channel in zip(v, (1001, 1001, 1000), strict=True):
            seen = [line for line in x.stdout.splitlines() if line.startswith("FDS")]
            # its stdio, its mode's channel and the tamper channel (writing there only adds telemetry about itself)
            want = [0, 1, 2, channel, 1002]
            assert seen and eval(seen[0][4:]) == want, x.stdout[:300]  # noqa: S307 - our own output
        honest = b.map([sandbox.task_job(task, task.canonical_solution)])[0]
        assert honest.passed and honest.judge == "outside"  # the judge and the worker survived the forgeries
        assert_same_worker(b, before)


# ---------------------------------------------------------------------------------------------------------------
# sandbox.check runs identical jobs once (session 7): a copy's verdict is the run's, never a later run's view of
# what an earlier one left behind. A program that passes only when it finds its own leftovers (in /tmp, /var/tmp,
# /dev/shm or its cwd) must fail in every copy and in every near-copy (a distinct job, which does run).


def _leftover_codes(task: Task) -> list[str]:
    tag = uuid.uuid4().hex[:12]
    body = textwrap.dedent(f"""\
        import os
        marks = ["/tmp/.lo-{tag}", "/var/tmp/.lo-{tag}", "/dev/shm/.lo-{tag}", ".lo-{tag}"]
        if not any(os.path.exists(m) for m in marks):
            for m in marks:
                try:
                    with open(m, "w") as f:
                        f.write("left")
                except OSError:
                    pass
            return None
        return any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i + 1 :])
        """)
    body = textwrap.indent(body, "    ")
    return [body, body, body, body + "    # a near-copy: another job\n", task.canonical_solution]


def _check_leftovers(passed, status, same) -> None:
    assert passed == [False, False, False, False, True], (passed, status)  # the control passes, no copy does
    assert status[:4] == ["failed"] * 4
    assert same == [True, True, False]  # copies share the one run's verdict; the near-copy ran on its own


def test_identical_jobs_share_one_run_and_no_run_sees_another_runs_leftovers():
    task = humaneval([0])[0]
    v = sandbox.check([task] * 5, _leftover_codes(task), workers=1, timeout_s=TIMEOUT)
    _check_leftovers([x.passed for x in v], [x.status for x in v], [v[1] is v[0], v[2] is v[0], v[3] is v[0]])


@pytest.mark.slow
def test_identical_jobs_share_one_run_and_see_no_leftovers_as_a_throwaway_user():
    task = humaneval([0])[0]
    body = """
    from codelib import sandbox
    from codelib.tasks import Task
    t = Task(**params["task"])
    v = sandbox.check([t] * 5, params["codes"], workers=1, timeout_s=15)
    emit(passed=[x.passed for x in v], status=[x.status for x in v], same=[v[1] is v[0], v[2] is v[0], v[3] is v[0]])
    """
    out = as_throwaway_user(body, task=task.to_dict(), codes=_leftover_codes(task))
    got = next(x for x in out["lines"] if "passed" in x)
    _check_leftovers(got["passed"], got["status"], got["same"])
