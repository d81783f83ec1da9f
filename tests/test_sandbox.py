"""Sandbox: honest verdicts, enforced limits, and nothing escapes or survives a program.

Each adversarial test asserts the verdict and that nothing leaked: no process of the program is left, the
workers have no children, the run directories are gone, no file appeared outside, no secret was visible.
Guards the OS does not offer here (see `Sandbox.isolation`) are skipped, not faked.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import sys
import threading
import time
import uuid
import warnings

import pytest

from codelib import sandbox
from codelib.sandbox import Job, Sandbox, SandboxError
from codelib.tasks import Task, load_tasks

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def box():
    with Sandbox(workers=2, timeout_s=2, memory_mb=512) as b:
        yield b


def missing(box) -> dict:
    return box.isolation.get("missing", {})


def program_uids(box) -> set:
    return {w.caps["uid"] for w in box._pool if w.caps.get("uid") is not None}


def processes_of(uids: set) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.stat(f"/proc/{name}").st_uid in uids:
                    found.append(int(name))
            except OSError:
                pass
    return found


def assert_clean(box) -> None:
    """Nothing a program started is alive, the workers have no children, and the run directories are gone."""
    if program_uids(box):
        assert processes_of(program_uids(box)) == []
    for w in box._pool:
        pid = w.proc.pid
        children = open(f"/proc/{pid}/task/{pid}/children").read().split()
        keep = {str(w.caps.get("init_pid")), str(w.caps.get("factory_pid"))}
        assert [c for c in children if c not in keep] == [], children  # the namespace's init, the judge factory
        factory = str(w.caps.get("factory_pid"))
        judges = open(f"/proc/{factory}/task/{factory}/children").read().split() if factory in children else []
        assert len(judges) <= 1, judges  # at most one judge server
        if judges and w.caps.get("judge_uid") is not None:
            assert os.stat(f"/proc/{judges[0]}").st_uid == w.caps["judge_uid"]
        if w.caps.get("chroot"):
            try:  # the runs' /tmp: replaced whole after any run that left something in it
                assert os.listdir(f"/proc/{pid}/root/tmp") == []
            except PermissionError:
                pass  # another user's mount namespace: not inspectable from here


def function_job(completion: str, tests: str, prompt: str = "def f(x):\n", timeout_s: float | None = None) -> Job:
    task = Task("t/0", prompt, tests, "f", "    return x\n")
    return sandbox.task_job(task, completion, timeout_s=timeout_s)


# ---------------------------------------------------------------------------------------------------------------
# verdicts


def test_statuses_distinguish_passed_failed_error(box):
    v = box.map(["assert 1 + 1 == 2", "assert 1 == 2", "def f(:\n    pass", "undefined_name()", "print('hi')"])
    assert [x.status for x in v] == ["passed", "failed", "error", "error", "passed"]
    assert v[0].passed and not any(x.passed for x in v[1:4])
    assert "SyntaxError" in v[2].detail and "NameError" in v[3].detail
    assert v[4].stdout == "hi\n"
    assert_clean(box)


def test_order_is_kept_across_workers(box):
    jobs = [f"import time\ntime.sleep({(i * 7 % 5) / 200})\nprint({i})" for i in range(24)]
    assert [v.stdout for v in box.map(jobs)] == [f"{i}\n" for i in range(24)]


def test_run_uses_a_shared_pool():
    v = sandbox.run("print(6 * 7)")
    assert v.passed and v.stdout == "42\n"
    assert sandbox.shared_pool() is sandbox.shared_pool()


def test_configure_restarts_the_shared_pool_only_on_change():
    sandbox.configure(timeout_s=4.0)
    pool = sandbox.shared_pool()
    sandbox.configure(timeout_s=4.0)  # trainers call this every step: it must not respawn the workers
    assert sandbox.shared_pool() is pool
    sandbox.configure(timeout_s=sandbox.DEFAULT_TIMEOUT_S)
    assert sandbox.shared_pool() is not pool and pool._closed


def test_stdin_is_a_regular_file(box):
    # competitive-programming fast IO reads st_size bytes: a pipe would give nothing
    v = box.map([Job("import os\nprint(os.read(0, os.fstat(0).st_size).decode().split()[1])", stdin="3 4\n")])[0]
    assert v.passed and v.stdout == "4\n"


def test_counts_asserts_one_by_one(box):
    check = (
        "def check(candidate):\n    assert candidate(1) == 1\n    assert candidate(2) == 3\n"
        "    assert candidate(3) == 3\n"
    )
    mbpp = "assert f(1) == 1\nassert f(2) == 3\nassert f(3) == 3\nassert f('x') == 'x'\n"
    raising = "assert f(1) == 1\nassert f(None) + 1 == 2\n"
    v = box.map(
        [
            function_job("    return x\n", check),
            function_job("    return x\n", mbpp),
            function_job("    return x\n", raising),
        ]
    )
    assert (v[0].status, v[0].tests_passed, v[0].tests_total) == ("failed", 2, 3)
    assert "candidate(2) == 3" in v[0].detail
    assert (v[1].status, v[1].tests_passed, v[1].tests_total) == ("failed", 3, 4)
    assert (v[2].status, v[2].tests_passed, v[2].tests_total) == ("failed", 1, 2) and "TypeError" in v[2].detail


def test_a_timeout_keeps_the_asserts_that_passed(box):
    tests = "assert f(1) == 1\nassert f(2) == 2\nassert f(-1) == -1\n"
    v = box.map([function_job("    while x < 0:\n        pass\n    return x\n", tests, timeout_s=1)])[0]
    assert (v.status, v.tests_passed, v.tests_total) == ("timeout", 2, 3)
    assert_clean(box)


# ---------------------------------------------------------------------------------------------------------------
# limits


@pytest.mark.parametrize(
    "program",
    [
        "while True:\n    pass",
        "import time\ntime.sleep(60)",
        # tampering with signals does not help: the wall-time limit is enforced from outside with SIGKILL
        "import signal\nfor s in (signal.SIGALRM, signal.SIGTERM, signal.SIGXCPU, signal.SIGINT):\n"
        "    signal.signal(s, signal.SIG_IGN)\nsignal.alarm(0)\nwhile True:\n    pass",
    ],
    ids=["busy-loop", "sleep", "ignores-signals"],
)
def test_runaway_programs_time_out(box, program):
    v = box.map([Job(program, timeout_s=1)])[0]
    assert v.status == "timeout" and not v.passed
    assert_clean(box)


def test_deep_recursion_is_an_error(box):
    v = box.map(["def f(n):\n    return f(n + 1)\nf(0)"])[0]
    assert v.status == "error" and "RecursionError" in v.detail
    assert_clean(box)


@pytest.mark.parametrize("program", ["x = bytearray(10**11)", "a = []\nwhile True:\n    a.append(bytearray(10**7))"])
def test_memory_bombs_hit_the_memory_limit(box, program):
    v = box.map([Job(program, memory_mb=256)])[0]
    assert v.status == "error" and "MemoryError" in v.detail
    assert_clean(box)


def test_fork_bomb_is_contained_and_killed(box):
    if "uid" in missing(box):
        pytest.skip("no uid of its own here: RLIMIT_NPROC would count the caller's processes")
    uids, peak, done = program_uids(box), [0], threading.Event()

    def watch():
        while not done.is_set():
            peak[0] = max(peak[0], len(processes_of(uids)))
            time.sleep(0.02)

    watcher = threading.Thread(target=watch)
    watcher.start()
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    try:
        v = box.map([Job(bomb, timeout_s=1.5)])[0]
    finally:
        done.set()
        watcher.join()
    assert v.status in ("timeout", "error") and not v.passed  # killed at the wall limit (or its CPU limit)
    # RLIMIT_NPROC of the program's uid (max_procs = 64), plus the one reaper the worker forks into that uid to
    # `kill -1` the lot (setresuid is not refused by RLIMIT_NPROC); a loaded machine may sample fewer
    assert peak[0] <= 64 + 1
    assert_clean(box)


def test_huge_output_is_capped(box):
    v = box.map(["while True:\n    print('x' * 1000)", "print('y' * 10**7)"])
    for x in v:
        assert x.status == "error" and "output limit" in x.detail
        assert len(x.stdout) <= sandbox.VERDICT_STDOUT_CHARS
    assert_clean(box)


def test_file_size_and_open_file_limits(box):
    big = "open('big', 'wb').write(b'x' * (100 << 20))"
    many = "fs = [open('f%d' % i, 'w') for i in range(1000)]"
    v = box.map([big, many])
    assert v[0].status == "error" and "File too large" in v[0].detail
    assert v[1].status == "error" and "Too many open files" in v[1].detail
    assert_clean(box)


# ---------------------------------------------------------------------------------------------------------------
# escapes


def test_cannot_write_outside_its_directory(box):
    if "filesystem" in missing(box) or "uid" in missing(box):
        pytest.skip(f"no file-system isolation here: {missing(box)}")
    name = f"codelib-escape-{uuid.uuid4().hex}"
    # its working directory is /tmp (a tmpfs of its own): everything else is read-only or absent
    targets = [
        f"/{name}",
        f"/var/tmp/{name}",
        f"/dev/shm/{name}",
        os.path.join(REPO, name),
        f"/root/{name}",
        f"/.private/{name}",
        f"/usr/{name}",
    ]
    program = (
        "import os\n"
        f"for path in {targets!r}:\n"
        "    try:\n"
        "        open(path, 'w').write('x')\n"
        "        print('wrote', path)\n"
        "    except OSError:\n"
        "        pass\n"
        "open('inside.txt', 'w').write('fine')\n"
        "os.mkdir('locked')\n"
        "os.chmod('locked', 0)\n"
        "print(sorted(os.listdir('.')), os.getcwd() == os.environ['HOME'] == os.environ['TMPDIR'])\n"
    )
    v = box.map([program])[0]
    assert v.passed and v.stdout == "['inside.txt', 'locked'] True\n"
    assert not any(os.path.exists(t) for t in targets)
    assert_clean(box)  # its own directory, with a chmod-0 subdirectory, is gone too


def test_cannot_read_secrets_or_reference_solutions():
    secret = f"codelib-secret-{uuid.uuid4().hex}"
    os.environ["CODELIB_TEST_SECRET"] = secret
    try:
        with Sandbox(workers=1) as box:  # started after the secret was set: it must not inherit it
            program = (
                "import os\n"
                "print(dict(os.environ))\n"
                f"for pid in (os.getppid(), 1, {os.getpid()}):\n"
                "    try:\n"
                "        print(open(f'/proc/{pid}/environ').read())\n"
                "    except OSError:\n"
                "        pass\n"
                "print(os.path.exists("
                f"{os.path.join(REPO, 'codelib', 'data', 'humaneval', 'HumanEval.jsonl.gz')!r}))\n"
            )
            v = box.map([program])[0]
            assert v.passed and secret not in v.stdout
            if "filesystem" not in missing(box):
                assert v.stdout.rstrip().endswith("False")  # the bundled data (canonical solutions) is hidden
            assert_clean(box)
    finally:
        del os.environ["CODELIB_TEST_SECRET"]


def test_no_network(box):
    if "network" in missing(box):
        pytest.skip(missing(box)["network"])
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.setblocking(False)
    port = server.getsockname()[1]
    program = (
        "import socket\n"
        f"for address in (('8.8.8.8', 53), ('127.0.0.1', {port})):\n"
        "    s = socket.socket()\n"
        "    s.settimeout(5)\n"
        "    try:\n"
        "        s.connect(address)\n"
        "        print('connected', address)\n"
        "    except OSError as e:\n"
        "        print(e.errno)\n"
        "u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        "try:\n"
        "    u.sendto(b'x', ('8.8.8.8', 53))\n"
        "    print('sent')\n"
        "except OSError as e:\n"
        "    print(e.errno)\n"
    )
    try:
        v = box.map([program])[0]
        with pytest.raises(BlockingIOError):
            server.accept()  # nothing reached the test's own listening socket
    finally:
        server.close()
    import errno

    assert v.passed and v.stdout.split() == [str(errno.ENETUNREACH)] * 3
    assert_clean(box)


def test_cannot_kill_its_worker(box):
    if "uid" in missing(box):
        pytest.skip("the program runs as the caller's user here and could signal it")
    before = box.worker_pids()
    program = (
        "import os, signal\n"
        "print(os.getppid())  # 0: the worker lives outside the program's pid namespace, out of reach\n"
        "for target in (1, -1):  # the namespace's init; then every process it may signal: only its own\n"
        "    try:\n"
        "        os.kill(target, signal.SIGKILL)\n"
        "    except OSError as e:\n"
        "        print(e.errno)\n"
        "print('alive')\n"
    )
    v = box.map([program])[0]
    assert v.passed and v.stdout.split() == ["0", "1", "3", "alive"]  # EPERM on init; ESRCH: nothing else to signal
    assert box.worker_pids() == before and box.map(["pass"])[0].passed
    assert_clean(box)


def test_lingering_threads_and_children_are_killed(box):
    program = (
        "import os, subprocess, threading, time\n"
        "threading.Thread(target=time.sleep, args=(100,)).start()\n"
        "subprocess.Popen(['sleep', '100'])\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        time.sleep(100)\n"
        "    os._exit(0)\n"
        "assert True\n"
    )
    v = box.map([program])[0]
    assert v.passed  # the tests ran to their end; what it left behind is killed, not waited for
    assert_clean(box)


def test_what_a_program_does_after_its_last_answer_never_reaches_the_next_run():
    # a function task's program keeps going once the judge has its answers (a thread and a forked child littering
    # /tmp): its output up to its last answer is in the verdict, and the next run of the same worker finds no file
    # and no process of it
    tests = "assert f(1) == 1\nassert f(2) == 2\n"
    linger = (
        "    import os, threading\n"
        "    def litter():\n"
        "        i = 0\n"
        "        while True:\n"
        "            i += 1\n"
        "            try:\n"
        "                open(f'/tmp/late{i % 50}', 'w').write('x')\n"
        "            except OSError:\n"
        "                pass\n"
        "    if x == 2:\n"
        "        threading.Thread(target=litter, daemon=True).start()\n"
        "        if os.fork() == 0:\n"
        "            litter()\n"
        "    print('call', x)\n"
        "    return x\n"
    )
    look = (
        "import json, os\nprint(json.dumps([os.listdir('/tmp'), [p for p in os.listdir('/proc') if p.isdigit()]]))\n"
    )
    with Sandbox(workers=1, timeout_s=3) as b:
        for _ in range(3):
            first = b.map([function_job(linger, tests, prompt="print('top')\ndef f(x):\n")])[0]
            assert first.passed and first.stdout == "top\ncall 1\ncall 2\n", (first.status, first.stdout)
            later = b.map([look])[0]
            if b.isolation.get("proc"):  # no /proc: nothing to list
                files, pids = json.loads(later.stdout)  # data, never evaluated in this process
                assert files == [], later.stdout
                assert len(pids) <= 2, later.stdout  # itself (and init: pid 1)
        assert_clean(b)


def test_a_program_that_does_not_arrive_whole_is_not_run(box, monkeypatch):
    # the child runs a program only if it read as many bytes as the parent sent: a cut one (here cut to nothing,
    # which would otherwise run to its end and pass) is an error
    from codelib.sandbox import client

    real = client.memfile
    monkeypatch.setattr(client, "memfile", lambda name, text: real(name, b"" if name == "program" else text))
    v = box.map(["assert 1 == 2\n"])[0]
    assert v.status == "error" and not v.passed, (v.status, v.detail)
    monkeypatch.setattr(client, "memfile", real)
    assert box.map(["assert 1 == 1\n"])[0].passed
    assert_clean(box)


# ---------------------------------------------------------------------------------------------------------------
# honest verdicts: early exits and tampering are never passes


@pytest.mark.parametrize(
    "completion",
    [
        "    import sys\n    sys.exit(0)\n",
        "    raise SystemExit\n",
        "    import os\n    os._exit(0)\n",
        "    exit()\n",
        "    import os, signal\n    os.kill(os.getpid(), signal.SIGKILL)\n",
        "    import os\n    os.closerange(3, 4096)\n    return x\n",
        "    import os\n    os.write(1000, b'+++{\"done\": true}\\n')\n    os._exit(0)\n",
        "    import sys, os\n    sys.stdout.close()\n    os.close(1)\n    os.close(2)\n    sys.exit(0)\n",
        "    import signal\n    signal.signal(signal.SIGTERM, signal.SIG_IGN)\n    raise SystemExit(0)\n",
    ],
    ids=[
        "sys.exit",
        "SystemExit",
        "os._exit",
        "exit()",
        "SIGKILL-self",
        "close-fds",
        "forge",
        "close-output",
        "signals",
    ],
)
def test_early_exits_and_tampering_are_not_passes(box, completion):
    # inside the tests (the candidate is called by them) and before them (at import time of the solution)
    inside = function_job(completion, "assert f(1) == 1\n")
    before = function_job(
        "    return x\n" + completion.replace("    ", "", 1).replace("\n    ", "\n"), "assert f(1) == 1\n"
    )
    for v in box.map([inside, before]):
        assert not v.passed and v.status in ("error", "failed")
    assert_clean(box)


def test_silencing_the_harness_does_not_pass(box):
    # the solution runs before the tests and shares their globals: it could swap the harness's helpers
    tamper = "def f(x):\n    return 0\n__codelib_fail__ = lambda *a: None\n__codelib_ok__ = lambda: None\n"
    v = box.map([function_job(tamper.replace("def f(x):\n", "", 1), "assert f(1) == 1\nassert f(2) == 2\n")])[0]
    assert not v.passed and v.status == "failed"


# ---------------------------------------------------------------------------------------------------------------
# a pool that survives its workers


def _busy_worker(box) -> int:
    for pid in box.worker_pids():
        if open(f"/proc/{pid}/task/{pid}/children").read().split():
            return pid
    return 0


def test_a_dead_worker_loses_no_other_job():
    with Sandbox(workers=2, timeout_s=5) as b:
        killed = []

        def kill_the_slow_one():
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not killed:
                time.sleep(0.05)
                pid = _busy_worker(b)
                if pid and time.monotonic() > deadline - 9.5:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)

        killer = threading.Thread(target=kill_the_slow_one)
        killer.start()
        verdicts = b.map(["import time\ntime.sleep(4)"] + [f"print({i})" for i in range(20)])
        killer.join()
        assert killed and killed[0] not in b.worker_pids()
        assert verdicts[0].status == "error" and "worker died" in verdicts[0].detail
        assert [v.stdout for v in verdicts[1:]] == [f"{i}\n" for i in range(20)]
        assert b.map(["pass"] * 4) and all(v.passed for v in b.map(["pass"] * 4))
        assert_clean(b)


def test_a_stuck_worker_is_replaced_and_the_batch_finishes():
    with Sandbox(workers=1, timeout_s=0.5, grace_s=1.0) as b:
        stuck = b.worker_pids()[0]
        threading.Timer(0.3, os.kill, (stuck, signal.SIGSTOP)).start()
        v = b.map(["import time\ntime.sleep(30)", "print('after')"])
        assert v[0].status == "timeout" and "stopped answering" in v[0].detail
        assert v[1].passed and v[1].stdout == "after\n"
        assert b.worker_pids() != [stuck]
        assert_clean(b)


def test_sixteen_idle_workers_use_under_a_gigabyte():
    with Sandbox(workers=16) as b:
        task = load_tasks("humaneval", "all", limit=1)[0]
        assert all(v.passed for v in b.map([sandbox.task_job(task, task.canonical_solution)] * 16))
        rss = 0
        pids, todo = [], list(b.worker_pids())
        while todo:  # each worker, its pid namespace's init, its judge factory and the factory's judge server
            pid = todo.pop()
            pids.append(pid)
            todo += [int(c) for c in open(f"/proc/{pid}/task/{pid}/children").read().split()]
        assert len(pids) == 64
        pss = 0
        for pid in pids:
            rss += int(open(f"/proc/{pid}/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
            pss += sum(
                int(line.split()[1]) << 10 for line in open(f"/proc/{pid}/smaps_rollup") if line.startswith("Pss:")
            )
        # RSS counts the pages a worker shares with its init, judge factory and judge once per process; PSS splits them
        assert rss < 1 << 30, f"{rss >> 20} MiB resident"
        assert pss < 400 << 20, f"{pss >> 20} MiB proportional"


def test_fallback_without_root_still_judges_and_cleans_up():
    # what a non-root CI gets: a user namespace (where allowed) instead of a uid of its own
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the once-per-process "weaker isolation" warning
        b = Sandbox(workers=1, timeout_s=1, unprivileged=True)
    with b:
        assert "uid" in b.isolation["missing"]
        leave = (
            "import os, subprocess, time\nsubprocess.Popen(['sleep', '100'])\n"
            "if os.fork() == 0:\n    os.setsid()\n    time.sleep(100)\n"
        )
        caps = "print(open('/proc/self/status').read().split('CapEff:')[1].split()[0])"
        v = b.map(["assert 1 == 1", "import sys\nsys.exit(0)", "while True:\n    pass", leave + "assert True", caps])
        assert [x.status for x in v] == ["passed", "error", "timeout", "passed", "passed"]
        assert int(v[4].stdout, 16) == 0  # no capability left, even where the worker is root of its namespace
        assert_clean(b)


def test_isolation_is_reported(box):
    assert set(box.isolation) >= {"uid", "judge_uid", "pid", "missing", "chroot", "cgroups"}
    if os.geteuid() == 0:
        assert box.isolation["uid"] is not None


# ---------------------------------------------------------------------------------------------------------------
# real tasks: canonical solutions pass, wrong ones fail


def test_function_tasks():
    he = load_tasks("humaneval", "all", limit=2)
    mbpp = load_tasks("mbpp", "test", limit=1)
    tasks = he + mbpp + he
    completions = [t.canonical_solution for t in he + mbpp] + ["    return None\n", "    return 0\n"]
    v = sandbox.check(tasks, completions, workers=2)
    assert [x.passed for x in v] == [True, True, True, False, False]
    assert v[0].tests_total > 1 and v[0].tests_passed == v[0].tests_total
    assert v[3].status == "failed" and v[3].tests_passed < v[3].tests_total


def test_stdio_tasks():
    task = load_tasks("codecontests", "all", limit=1)[0]
    cases = json.loads(task.tests)
    wrong = "print(0)"
    crash = "raise ValueError('boom')"
    v = sandbox.check([task, task, task], [task.canonical_solution, wrong, crash], workers=2, timeout_s=10)
    assert v[0].passed and v[0].tests_passed == v[0].tests_total == len(cases)
    assert v[1].status == "failed" and "case 1/" in v[1].detail and v[1].tests_passed == 0
    assert v[2].status == "error" and "ValueError" in v[2].detail


# programs that do not parse (the tiny model writes many), ones that fail only in the compiler's later stages, and
# ones the parser here cannot take (its stack, an unencodable character): every one gets the verdict its run gets
NOT_PARSING = [
    "    return a +\n",
    "    return 'abc\n",
    "    return (a]\n",
    "    return a\n  x = 1\n",
    "\treturn a\n        return b\n",
    "    return 1_\n",
    "    return a \uff0b 1\n",
    "    x = '''\n",
    "    return a\x00\n",
    "    return f'{a!}'\n",
    "    return a\ndef g(:\n",
    "    " + "(" * 300 + "\n",
    "    return '\\q' +\n",
    "    yield = 3\n",
    "    return print a\n",
    "    return [x for x in]\n",
    "    nonlocal a\n",
    "    return a\nreturn 1\n",
    "    break\n",
    "    return \ud800\n",
    "    " + "-" * 10000 + "a\n",
    "    return a + 1\n" + "#" * 20_000 + "\n  x = (\n",
]


def test_a_program_that_does_not_parse_gets_its_runs_verdict_without_a_run(monkeypatch):
    """The parent parses a function job's program first (`jobs.parse_error`); a parse error is the verdict the judge
    would give (same status, detail, counts, output), with no run; everything else runs as before."""
    from codelib.sandbox import client

    task = Task(
        task_id="t",
        prompt="def f(a):\n",
        entry_point="f",
        canonical_solution="    return a + 1\n",
        tests="def check(candidate):\n    assert candidate(1) == 2\n    assert candidate(2) == 3\n",
    )
    submitted = []
    real_submit = client.Worker.submit

    def counting_submit(self, run, *a, **k):
        submitted.append(run.job.program)
        return real_submit(self, run, *a, **k)

    monkeypatch.setattr(client.Worker, "submit", counting_submit)
    job_list = [sandbox.task_job(task, c) for c in NOT_PARSING + [task.canonical_solution]]
    with Sandbox(workers=2, timeout_s=5) as b:
        b.parse_first = False
        ran = b.map(job_list)
        assert len(submitted) == len(job_list)
        submitted.clear()
        b.parse_first = True
        parsed = b.map(job_list)
    strip = [dataclasses.replace(v, duration_s=0.0) for v in ran]
    assert [dataclasses.replace(v, duration_s=0.0) for v in parsed] == strip
    assert all(v.status == "error" for v in ran[:-1]) and ran[-1].passed
    skipped = [j.program for j in job_list if j.program not in submitted]
    assert (
        len(skipped) == 16
    )  # the parse errors; the compiler's errors, the parser's own failures and the long one ran
    assert all(v.duration_s == 0.0 for v, j in zip(parsed, job_list, strict=True) if j.program in skipped)
    assert task.prompt + "    return a +\n" in skipped and task.prompt + "    break\n" not in skipped
    assert "SyntaxError: invalid syntax (line 2)" == parsed[0].detail and parsed[0].tests_total == 2


def test_check_runs_identical_jobs_once_and_keeps_the_order(monkeypatch):
    task = load_tasks("humaneval", "test", limit=1)[0]
    wrong = "    return None\n"
    ran = []
    real_map = Sandbox.map

    def counting_map(self, jobs, *a, **k):
        ran.extend(jobs)
        return real_map(self, jobs, *a, **k)

    monkeypatch.setattr(Sandbox, "map", counting_map)
    codes = [task.canonical_solution, wrong, task.canonical_solution, wrong, wrong]
    v = sandbox.check([task] * 5, codes, workers=2)
    assert [x.passed for x in v] == [True, False, True, False, False]
    assert len(ran) == 2  # two distinct programs
    # a job differs by its limits too: the same code under another timeout is another job
    ran.clear()
    sandbox.check([task] * 2, [wrong, wrong], workers=2, timeout_s=3.0)
    assert len(ran) == 1


def test_plus_inputs_judge_against_the_canonical_solution():
    task = load_tasks("humaneval_plus", "all", limit=1)[0]  # has_close_elements
    # right on the base tests (lists of at most 6 numbers), wrong on longer plus inputs
    sneaky = (
        "    if len(numbers) > 6:\n        return False\n"
        "    return any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i + 1 :])\n"
    )
    with Sandbox(workers=2) as b:
        jobs = [sandbox.task_job(task, c, plus=p) for c in (task.canonical_solution, sneaky) for p in (False, True)]
        v = b.map(jobs)
    assert [x.passed for x in v] == [True, True, True, False]
    assert v[3].status == "failed" and "plus input" in v[3].detail
    assert v[1].tests_total > v[0].tests_total + 100 and v[1].tests_passed == v[1].tests_total


def test_plus_inputs_with_tuple_arguments():
    tasks = [t for t in load_tasks("mbpp_plus", "all") if t.task_id in ("Mbpp/106", "Mbpp/124")]
    v = sandbox.check(tasks, [t.canonical_solution for t in tasks], workers=2, plus=True)
    assert len(v) == 2 and all(x.passed for x in v), v


def test_a_program_that_plants_its_own_hashlib_forges_no_digest():
    """hashlib is imported in the child at the first digest, after the program ran: a program that plants a fake
    hashlib (every digest the same, or one that raises) before that still fails a wrong answer, and a right one
    planting nothing still passes."""
    task = Task(
        "Mbpp/9002",
        "def many(n, s):\n",
        "assert many(2, 'a') == [('a', 0), ('a', 1)]",
        "many",
        "    return [(s, i) for i in range(n)]\n",
        plus_inputs=json.dumps([[200_000, "ab"], [3, "c"]]),
    )
    plant = (
        "import sys, types\nfake = types.ModuleType('hashlib')\nclass H:\n    def __init__(self, d=b''): pass\n"
        "    def hexdigest(self): return '0' * 64\nfake.sha256 = H\nsys.modules['hashlib'] = fake\n"
    )
    wrong = "    return [(s, i) for i in range(n - (n > 1000))]\n"
    raising = wrong + "import sys\nsys.modules['hashlib'] = None\n"
    with Sandbox(workers=2) as b:
        v = b.map([sandbox.task_job(task, c, plus=True) for c in (wrong + plant, raising, task.canonical_solution)])
    assert not v[0].passed and not v[1].passed, v
    assert v[2].passed, v[2].detail


def test_large_plus_outputs_travel_as_digests_and_still_judge():
    """Outputs over DIGEST_OVER_BYTES are compared by sha256 (MBPP+/255 makes 2M tuples): right and wrong told
    apart."""
    prompt = "def many(n, s):\n"
    task = Task(
        "Mbpp/9001",
        prompt,
        "assert many(2, 'a') == [('a', 0), ('a', 1)]",
        "many",
        "    return [(s, i) for i in range(n)]\n",
        plus_inputs=json.dumps([[200_000, "ab"], [3, "c"]]),
    )
    off_by_one = "    return [(s, i) for i in range(n - (n > 1000))]\n"
    floats = "    return [(s, float(i)) for i in range(n)]\n"  # == says equal to the ints: so must the digest
    with Sandbox(workers=2) as b:
        jobs = [sandbox.task_job(task, c, plus=True) for c in (task.canonical_solution, off_by_one, floats)]
        v = b.map(jobs)
    assert v[0].passed and v[0].tests_passed == v[0].tests_total == 3
    assert v[1].status == "failed" and "plus input 0" in v[1].detail
    assert v[2].passed, v[2].detail
    from hashlib import sha256

    from codelib.sandbox import harness, wire

    assert not wire.plain(wire.encode([1.5, 2.5]), sha256) and not wire.plain(wire.encode({1, 2}), sha256)
    assert wire.plain(wire.encode([(1, "a", 2.5), None]), sha256) and wire.plain(wire.encode(10**40), sha256)
    enc = harness._outputs(lambda n: list(range(n)), "[[300000], [3]]", 1 << 20, sha256)
    assert set(enc[0]) == {"h"} and enc[1] == [0, 1, 2]
    digest = wire.digest
    assert digest(wire.encode([1, (2, True)]), sha256) == digest(wire.encode([1.0, (2, 1)]), sha256)
    assert digest(wire.encode(2**70), sha256) == digest(wire.encode(float(2**70)), sha256)
    assert digest(wire.encode([10**5000]), sha256)[0] > 4000  # past int-to-str's digit limit: still hashed
    for a, b in ((["ab", "c"], ["a", "bc"]), ([1, 2], (1, 2)), ([[1], 2], [1, [2]]), ([None], ["N;"]), ([1.5], [1])):
        assert digest(wire.encode(a), sha256) != digest(wire.encode(b), sha256), (a, b)
    # the shortcut (a value of lists, tuples, str, int, None is hashed from its repr) gives the slow path's digest
    big = [("ab", i, None, [i]) for i in range(50_000)]
    assert wire._simple(big) and not wire._simple([*big, (1.0,)]) and not wire._simple([True])
    assert wire.output(big, 1 << 10, sha256) == wire.output([(*t[:3], [float(t[1])]) for t in big], 1 << 10, sha256)
    assert {"h": digest(wire.encode(big), sha256)[1]} == wire.output(big, 1 << 10, sha256)
    loop: list = []
    loop.append(loop)
    assert not wire._simple(loop)  # a list that holds itself: no endless walk (encode then says it is too deep)
    with pytest.raises(wire.WireError):
        wire.output(loop, 1 << 10, sha256)
    h = wire.decode(enc[0], extra="h")
    assert h == wire.decode(dict(enc[0]), extra="h") and h != enc[0]["h"]


def test_a_flooded_report_channel_is_an_error_not_a_verdict(box):
    flood = "import os\nchunk = b'+' * (1 << 20)\nfor _ in range(100):\n    os.write(1000, chunk)\n"
    v = box.map([Job(flood, timeout_s=20), "assert True"])
    assert v[0].status == "error" and not v[0].passed and "limit" in v[0].detail
    assert v[1].passed  # the pool goes on
    assert_clean(box)


# ---------------------------------------------------------------------------------------------------------------
# pure helpers


def test_stdout_comparison():
    from codelib.sandbox.plus import same_stdout as same

    assert same("1 2\n3  \n\n", "1 2\n3")[0]
    assert same("0.3333333", "0.333333333")[0]  # float tolerance 1e-6
    assert not same("1000001", "1000000")[0]  # integers are exact
    assert not same("1 2", "1 2\n3")[0]  # every expected line must be there
    assert not same("yes", "YES")[0]


def test_values_cross_the_process_boundary_as_data():
    from codelib.sandbox import wire

    values = [
        (1, [2, (3,)]),
        {1, 2},
        frozenset({3}),
        {(1, 2): "a"},
        1 + 2j,
        10**40,
        float("inf"),
        b"ab",
        None,
        True,
        [1.5, "s"],
    ]
    for value in values:
        back = wire.decode(wire.loads(json.dumps(wire.encode(value))))
        assert back == value and type(back) is type(value)
    for not_plain in (object(), (x for x in "ab"), ValueError("x"), type("Eq", (), {"__eq__": lambda s, o: True})()):
        with pytest.raises(wire.WireError):
            wire.encode(not_plain)


def test_a_flat_list_is_encoded_at_c_speed_into_the_same_tree():
    """`wire.encode` takes flat lists of None/bool/str/int/float in C-speed passes (`_flat`): the tree must be the
    item-by-item one on every edge (ints at the 64-bit bounds, nan and inf, bools beside ints, an int past a float's
    range beside a float, subclasses), and an answer of 10M ints no longer costs seconds of the program's limit."""
    from codelib.sandbox import wire

    class IntSub(int):
        pass

    lists = [
        [],
        [0] * 5,
        [1 << 63, 1],
        [-(1 << 63), 1],
        [(1 << 63) - 1, True, False],
        [1.5, float("nan")],
        [2.0, float("-inf"), 3],
        [10**400, 1.5],
        [1.0e300, 5],
        ["a", None, 7, 2.5, True],
        ["a", 1 << 70],
        ["a", float("inf")],
        [IntSub(3), 4],
        [[1], 2],
        [(1, 2)],
    ]

    def item_by_item(x):  # the recursive path, `_flat` switched off
        return [wire.encode(v) if type(v) is not list else item_by_item(v) for v in x]

    for x in (edge * 40 for edge in lists):  # past `_FLAT_FROM`, where the fast path takes over
        fast = wire.encode(x)
        assert fast == item_by_item(x) and json.dumps(fast) == json.dumps(item_by_item(x)), x
        assert fast is not x  # a copy: the program's later mutations of its list are not the answer's
        back = wire.decode(wire.loads(json.dumps(fast)))
        assert repr(back) == repr([int(v) if type(v) is IntSub else v for v in x]), x  # repr: nan != nan
    for untagged in ([1 << 63] * 40, [1, -(1 << 63) - 1] * 20, ["a", 1 << 64] * 20):  # hex only: refused, not flat
        with pytest.raises(wire.WireError, match="64 bits"):
            wire.decode(untagged)
    assert wire._flat([1 << 63]) is None and wire._flat([float("nan")]) is None and wire._flat([IntSub(1)]) is None
    assert wire._flat([1, "a", None, True, 2.5]) == [1, "a", None, True, 2.5]
    big = [0] * 10_000_000
    assert wire._flat(big) is not None  # the fast path takes it (the item-by-item path took ~3 s here)


# ---------------------------------------------------------------------------------------------------------------
# the judge outside, cgroups v2, checked replies


def test_which_judge_each_dataset_gets():
    from codelib.sandbox.jobs import judge_plan

    def kinds(name):
        return [sandbox.task_job(t, t.canonical_solution).kind for t in load_tasks(name, "all")]

    for name in ("humaneval", "humaneval_plus", "synthetic"):
        assert set(kinds(name)) == {"function"}, name  # every task's tests run in the judge
    assert kinds("mbpp").count("function") >= 970 and set(kinds("mbpp_plus")) == {"function"}  # MBPP+ all outside
    assert judge_plan("def f(x):\n", "assert f(Node(1)) == 1\n", "f")[0] == "inside"  # a class the solution defines
    assert judge_plan("def f(g):\n", "assert f(lambda x: x) == 1\n", "f")[0] == "inside"
    assert judge_plan("def f(x):\n", "assert math.isclose(f(1), 1.0)\n", "f")[2] == ("math",)  # imported by the judge


def test_judge_plan_on_hand_written_tasks():
    """Each reason that sends a task's tests inside, on a minimal task (a class in the prompt, also nested; a lambda,
    generator or builtin function passed to the entry point or to `candidate`, also as a keyword), and what stays
    outside: names the tests bind themselves (imports, `except ... as e`) and a bare `def` prompt, whose prelude gets
    a `pass` so the judge can run it."""
    from codelib.sandbox.jobs import judge_plan

    inside = [
        ("class A:\n    pass\n\n\ndef f(x):\n", "assert f(1) == 1\n"),
        ("def f(x):\n    class A:\n        pass\n\n    return A\n", "assert f(1)\n"),
        ("def f(g):\n", "def check(candidate):\n    assert candidate(lambda x: x) == 1\n\n\ncheck(f)\n"),
        ("def f(xs):\n", "assert f(x * x for x in range(3)) == 5\n"),
        ("def f(g):\n", "assert f(len) == 1\n"),
        ("def f(xs, key=None):\n", "assert f([2, 1], key=lambda x: -x) == 2\n"),
    ]
    for prompt, tests in inside:
        assert judge_plan(prompt, tests, "f")[0] == "inside", (prompt, tests)
    outside = [
        "from collections import Counter\nassert f(Counter('aab')) == 2\n",
        "try:\n    f(-1)\nexcept ValueError as e:\n    assert 'neg' in str(e)\n",
        "import math\nassert math.isclose(f(1.0), 1.0)\n",
    ]
    for tests in outside:
        assert judge_plan("def f(x):\n    return x\n", tests, "f")[:3] == ("outside", ("f",), ()), tests
    assert judge_plan("def f(x):\n", "assert f(1) == 1\n", "f") == ("outside", ("f",), (), "def f(x):\n    pass\n")


def test_task_job_scales_the_limits_for_every_kind_of_task():
    """A task's own limits scale the given limits and, as `limit_scale`, the pool's, for stdio, calls and function
    tasks (judged outside or inside); one limit of its own is enough; a plus reference gets at least
    PLUS_MEMORY_MB."""
    from types import SimpleNamespace

    from codelib.sandbox.plan import reference_job

    cases = {
        "stdio": ("p", '[{"input": "", "output": "1"}]', ""),
        "calls": ("def f(x):\n", '[{"input": "1", "output": "1"}]', "f"),
        "function": ("def f(x):\n", "assert f(1) == 1\n", "f"),
        "program": ("class A:\n    pass\n\n\ndef f(x):\n", "assert f(1) == 1\n", "f"),  # judged inside
    }
    for kind, (prompt, tests, entry) in cases.items():
        task = Task(
            "t/1",
            prompt,
            tests,
            entry,
            "    return x\n",
            "function" if kind == "program" else kind,
            time_limit_s=2.0,
            memory_limit_mb=512,
        )
        job = sandbox.task_job(task, "    return x\n")
        assert job.kind == kind and job.limit_scale == (2.0, 2.0) and (job.timeout_s, job.memory_mb) == (None, None)
        given = sandbox.task_job(task, "    return x\n", timeout_s=5.0, memory_mb=1024)
        assert (given.timeout_s, given.memory_mb, given.limit_scale) == (10.0, 2048, (2.0, 2.0)), kind
    only_time = Task("t/2", "p", cases["stdio"][1], "", "print(1)", "stdio", time_limit_s=3.0)
    job = sandbox.task_job(only_time, "print(1)", timeout_s=5.0, memory_mb=1024)
    assert (job.timeout_s, job.memory_mb, job.limit_scale) == (15.0, 1024, (3.0, 1.0))
    plus = Task("t/3", "def f(x):\n", "assert f(1) == 1\n", "f", "    return x\n", plus_inputs="[[2]]", atol=1e-6)
    job = sandbox.task_job(plus, "    return 1\n", plus=True, memory_mb=512)
    assert job.reference.program == plus.prompt + plus.canonical_solution and job.atol == 1e-6
    ref = reference_job(job, SimpleNamespace(reference_timeout_s=120.0, memory_mb=512))
    assert (ref.memory_mb, ref.timeout_s, ref.atol) == (sandbox.PLUS_MEMORY_MB, 120.0, 1e-6)


def test_a_returned_object_crosses_as_its_truth_value_only_on_truthy_tasks(box):
    """Only TRUTHY_TASKS (MBPP+'s "not None" oracle) let a returned object that is not plain data cross as
    bool(it): elsewhere `return object()` would cross as True and pass `assert f(1) == 1`."""
    truthy = sandbox.task_job(Task("Mbpp/737", "", "assert f(1)\n", "f", "def f(x):\n    return x\n"), "")
    assert truthy.kind == "function" and truthy.truthy
    v = box.map([function_job("    return object()\n", "assert f(1) == 1\n")])[0]
    assert v.status == "failed" and "not plain data" in v.detail, v


def test_inside_tasks_count_the_tasks_asserts_and_judge_plus_against_the_canonical_solution(box):
    """A task judged inside (its prompt defines a class): asserts are counted from the tests' first line, so a
    partial solution keeps the asserts it passed and a completion's own asserts are not tests; on plus inputs its
    outputs are compared with the canonical solution's, not with its own."""
    tests = "assert f(1) == 1\nassert f(2) == 2\nassert f(3) == 3\n"
    task = Task("t/in", "class P:\n    pass\n\n\n", tests, "f", "def f(x):\n    return x\n", plus_inputs="[[4], [5]]")
    partial = "def f(x):\n    return min(x, 2)\n" + "assert 1 + 1 == 2\n" * 5
    overfit = "def f(x):\n    return x if x < 4 else 0\n"
    pairs = ((partial, False), (overfit, False), (overfit, True), (task.canonical_solution, True))
    jobs = [sandbox.task_job(task, c, plus=p) for c, p in pairs]
    assert {j.kind for j in jobs} == {"program"}
    v = box.map(jobs)
    assert (v[0].status, v[0].tests_passed, v[0].tests_total) == ("failed", 2, 3), v[0]
    assert v[1].passed and v[2].status == "failed" and v[3].passed, v


def test_arguments_mutated_in_place_travel_back_and_non_plain_results_fail(box):
    tests = "a = [3, 1, 2]\nassert f(a) is None\nassert a == [1, 2, 3]\nd = {}\nf(d)\nassert d == {'k': 1}\n"
    prompt = "def f(x):\n"
    ok = "    if isinstance(x, list):\n        x.sort()\n    else:\n        x['k'] = 1\n"
    gen = "    return (i for i in x)\n"
    v = box.map([function_job(ok, tests, prompt), function_job(gen, "assert list(f([1])) == [1]\n", prompt)])
    assert v[0].passed and v[0].judge == "outside", v[0]
    assert v[1].status == "failed" and "not plain data" in v[1].detail and "generator" in v[1].detail


def test_exceptions_cross_as_their_builtin_type(box):
    tests = (
        "try:\n    f(-1)\n    assert False\nexcept ValueError as e:\n    assert 'neg' in str(e)\nassert f(2) == 2\n"
    )
    v = box.map([function_job("    if x < 0:\n        raise ValueError('negative')\n    return x\n", tests)])[0]
    assert v.passed, v


def test_cgroup_v2_on_a_delegated_tree(tmp_path):
    from codelib.sandbox import isolation

    parent = tmp_path / "user.slice"
    parent.mkdir()
    (parent / "cgroup.controllers").write_text("cpu memory pids\n")
    (parent / "cgroup.subtree_control").write_text("")
    groups = isolation.cgroup_v2(str(tmp_path), "/user.slice", "codelib-sandbox-1", 5 << 30, 72)
    assert groups == [str(parent / "codelib-sandbox-1")]
    assert (parent / "cgroup.subtree_control").read_text() == "+memory +pids"
    assert (parent / "codelib-sandbox-1" / "memory.max").read_text() == str(5 << 30)
    assert (parent / "codelib-sandbox-1" / "pids.max").read_text() == "72"
    (parent / "cgroup.controllers").write_text("cpu io\n")  # a tree without the controllers: said, not faked
    with pytest.raises(OSError, match="lacks the memory/pids controllers"):
        isolation.cgroup_v2(str(tmp_path), "/user.slice", "codelib-sandbox-2", 1 << 30, 72)


@pytest.mark.parametrize(
    "reply",
    [
        {"status": "passed", "tests_total": "x", "tests_passed": 1, "duration_s": 0.1, "stdout": ""},
        {"status": "passed", "tests_total": 2, "tests_passed": 2, "duration_s": float("nan"), "stdout": ""},
        {"status": "passed", "tests_total": 2, "tests_passed": 2, "duration_s": 0.1, "stdout": {"a": 1}},
        {"status": "won", "tests_total": 2, "tests_passed": 2, "duration_s": 0.1, "stdout": ""},
        {"status": "passed", "tests_total": -3, "tests_passed": 2, "duration_s": 0.1, "stdout": ""},
        {
            "status": "passed",
            "tests_total": 1,
            "tests_passed": 1,
            "duration_s": 0.1,
            "stdout": "",
            "done": True,
            "outputs": "abc",
        },
    ],
)
def test_malformed_replies_are_error_verdicts(box, reply):
    from codelib.sandbox.jobs import Run

    task = Task("t/0", "def f(x):\n", "assert f(1) == 1\n", "f", "    return x\n", plus_inputs="[[1]]")
    job = sandbox.task_job(task, "    return x\n", plus=True)
    run = Run(sandbox.Job("pass", plus_inputs="[[1]]"), box, {})
    run.feed(reply, None)
    v = run.verdict()
    assert v.status == "error" and not v.passed and "malformed" in v.detail
    for result in (b"not json", b'{"done": true, "passed": "x", "total": 1}', b"[1, 2]", b'{"done": "yes"}'):
        run = Run(job, box, {})
        run.ref = ([1], 0.1)
        run.feed({"kind": "function", "duration_s": 0.1, "stdout": "", "stderr": "", "ended": {"exit": 0}}, result)
        assert not run.verdict().passed


def test_forged_judge_results_are_never_passes(box):
    """What a judge result may hold, field by field: counts in range, `done` only as true, `plus` only as three ints
    with good <= judged; a forged result outside that is refused (the run is an error or failed, never passed, and
    never an exception), and a result of the honest shape still passes."""
    from codelib.sandbox import replies as R
    from codelib.sandbox.jobs import Run
    from codelib.sandbox.plan import reference_key

    assert R.judge_result(json.dumps({"passed": -1, "total": 1 << 31, "calls": 3}).encode()) == {"calls": 3}
    for done in (1, "yes", [1]):
        assert "done" not in R.judge_result(json.dumps({"done": done}).encode()), done
    for p in ([3, 2, -1], [1, 1], [1, 1, -1, 0], [1, 1, "x"], [1.0, 1, -1], [1, 1, -2], [1, 1 << 31, -1]):
        assert "plus" not in R.judge_result(json.dumps({"done": True, "plus": p}).encode()), p
    assert R.judge_result(b'{"done": true, "plus": [2, 2, -1]}')["plus"] == [2, 2, -1]

    task = Task("t/0", "def f(x):\n", "assert f(1) == 1\n", "f", "    return x\n", plus_inputs="[[1], [2]]")
    base, with_plus = sandbox.task_job(task, "    return x\n"), sandbox.task_job(task, "    return x\n", plus=True)
    expected = {reference_key(with_plus): ([1, 2], 0.1, [1, 2])}
    reply = {"kind": "function", "duration_s": 0.1, "stdout": "", "stderr": "", "ended": {"exit": 0}}

    def verdict(job, result):
        run = Run(job, box, expected)
        run.feed(dict(reply), json.dumps(result).encode())
        return run.verdict()

    honest = {"done": True, "passed": 1, "total": 1, "calls": 1}
    assert verdict(base, honest).passed and verdict(with_plus, {**honest, "plus": [2, 2, -1]}).passed
    for forged in ({"done": "yes", "passed": 1, "total": 1}, {"done": 1, "passed": 1, "total": 1}):
        assert not verdict(base, forged).passed, forged
    for p in ([5, 2, -1], [2, 2, "x"], [2, 2, -1, 0], [2, 2]):
        v = verdict(with_plus, {**honest, "plus": p})
        assert v.status == "error" and "did not compare" in v.detail, (p, v)
    v = verdict(base, {"done": True, "passed": -5, "total": -5})
    assert 0 <= v.tests_passed <= v.tests_total, v


def test_a_finished_judge_result_must_be_complete(box):
    """A result that says the judge finished carries what the honest judge always writes: its three counts, the
    test total the parent counts from the task itself, and every plus input the reference answered. A bare
    {"done": true}, a total that is not the task's, or a plus comparison over fewer inputs is a malformed reply (an
    error verdict), never a pass; the honest shapes still pass, and an unfinished result is judged as before."""
    from codelib.sandbox.jobs import Run
    from codelib.sandbox.plan import reference_key
    from codelib.sandbox.wire import Raised

    task = Task(
        "t/0",
        "def f(x):\n",
        "assert f(1) == 1\nassert f(2) == 2\n",
        "f",
        "    return x\n",
        plus_inputs="[[1], [2], [3]]",
    )
    base, with_plus = sandbox.task_job(task, "    return x\n"), sandbox.task_job(task, "    return x\n", plus=True)
    raw = [1, {"e": "ValueError"}, 3]  # the reference raised on the second plus input: EvalPlus skips it
    expected = {reference_key(with_plus): ([1, Raised("ValueError"), 3], 0.1, raw)}
    reply = {"kind": "function", "duration_s": 0.1, "stdout": "", "stderr": "", "ended": {"exit": 0}}

    def verdict(job, result):
        run = Run(job, box, expected)
        run.feed(dict(reply), json.dumps(result).encode())
        return run.verdict()

    honest = {"done": True, "passed": 2, "total": 2, "calls": 2, "first": None}
    assert verdict(base, honest).passed
    assert verdict(with_plus, {**honest, "plus": [2, 2, -1]}).passed
    for forged, why in (
        ({"done": True}, "lacks its counts"),
        ({"done": True, "passed": 2, "total": 2}, "lacks its counts"),
        ({**honest, "passed": 1, "total": 1}, "counted 1 tests where the task has 2"),
        ({**honest, "passed": 0, "total": 0}, "counted 0 tests"),
        ({**honest, "passed": 3, "total": 3}, "counted 3 tests"),
    ):
        v = verdict(base, forged)
        assert v.status == "error" and "malformed" in v.detail and why in v.detail, (forged, v)
    for p in ([0, 0, -1], [1, 1, -1], [3, 3, -1]):
        v = verdict(with_plus, {**honest, "plus": p})
        assert v.status == "error" and "plus inputs where the reference answered 2" in v.detail, (p, v)
    v = verdict(base, {"done": False, "passed": 1, "total": 2, "calls": 1, "first": None, "died": "gone"})
    assert v.status == "error" and "malformed" not in v.detail, v  # unfinished: judged as the program's end
    calls = sandbox.Job(
        "def f(x):\n    return x\n",
        kind="calls",
        entry_point="f",
        tests=json.dumps([{"input": "1", "output": "1"}, {"input": "2", "output": "2"}]),
    )
    assert verdict(calls, {**honest, "passed": 2, "total": 2}).passed
    v = verdict(calls, {**honest, "passed": 1, "total": 1})
    assert v.status == "error" and "where the task has 2" in v.detail, v


def test_replies_out_of_range_are_malformed():
    """The worker reply's numbers: a negative or infinite duration and a count of 2**31 or more are malformed; so is
    an output that is not plain data (only digests and raised calls are extra), and a non-list of outputs."""
    from codelib.sandbox import replies as R

    for d in ({"duration_s": -1.0}, {"duration_s": float("inf")}, {"duration_s": "1"}):
        with pytest.raises(R.Malformed):
            R.number(d, "duration_s")
    assert R.number({"duration_s": 0}, "duration_s") == 0.0
    for d in ({"n": 1 << 31}, {"n": -1}, {"n": 1.0}, {"n": True}):
        with pytest.raises(R.Malformed):
            R.count(d, "n")
    assert R.count({"n": (1 << 31) - 1}, "n") == (1 << 31) - 1 and R.count({}, "n") == 0
    for outputs in ("abc", {"a": 1}, [{"x": 1}], [{"h": "not-a-sha"}], [{"set": [1]}]):
        with pytest.raises(R.Malformed):
            R.decode_outputs(outputs)
    sha = "0" * 64
    assert R.decode_outputs([1, {"t": [1, 2]}, {"h": sha}, {"e": "ValueError"}])[:2] == [1, (1, 2)]
    for status in ("won", "PASSED", None, 1):
        with pytest.raises(R.Malformed):
            R.status({"status": status})
    assert R.died({"signal": 24}, "", "x")[0] == "timeout"
    for ended in ({"signal": 9}, {"exit": 1}, {}):
        status, detail = R.died(ended, "boom\n", "it left")
        assert status == "error" and "it left" in detail, ended


def test_without_namespaces_it_warns_judges_and_removes_any_nest():
    nest = "import os\nfor _ in range(1100):\n    os.mkdir('d')\n    os.chdir('d')\nopen('x', 'w').write('y' * 1000)\n"
    look = "import os\nprint(sorted(os.listdir('..')))\n"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        b = Sandbox(workers=1, timeout_s=5, namespaces=False)
    with b:
        assert "namespaces" in b.isolation["missing"] and "filesystem" in b.isolation["missing"]
        v = b.map([nest, look, "assert 1 == 1"])
        assert [x.status for x in v] == ["passed", "passed", "passed"]
        assert v[1].stdout == "['run2']\n"  # run1's 1,100-level nest is gone (no recursion limit)


def test_an_environment_under_tmp_gets_an_error_that_says_where_to_install(monkeypatch):
    """Every run gets a fresh, empty /tmp, so an interpreter or site-packages under /tmp would vanish from the
    programs' view: the pool refuses before starting a worker, naming the path and the fix."""
    monkeypatch.setattr(sys, "path", [*sys.path, "/tmp/somewhere/.venv/lib/python3.11/site-packages"])
    with pytest.raises(SandboxError, match=r"/tmp/somewhere/\.venv.*outside /tmp"):
        Sandbox(workers=1)
    Sandbox(workers=1, namespaces=False).close()  # no private root there: the host's /tmp stays visible
