"""The worker's one-time confinement (`isolate`): new mount, network and IPC namespaces (as root; otherwise inside a
user namespace of its own), a memory and pids cgroup, the allow-list root and chroot, the pid namespace's init, the
programs' /tmp, the seccomp filter; `fallback` where there are no namespaces. Functions of the worker (`server`),
called once at its start, and `mount_tmp` / `tmp_dirty` after each run. Standard library only.
"""

from __future__ import annotations

import json
import os
import signal

from . import isolation, spawn
from .isolation import PR_SET_NO_NEW_PRIVS, PR_SET_PDEATHSIG, prctl

UID_BASE = 1_500_000_000  # program uid = base + 2 * worker pid, judge uid = that + 1: owned by no user
ROOT = "/tmp/codelib-root"  # where the allow-list root is built, in the worker's own mount namespace


def isolate(server) -> None:
    root = os.geteuid() == 0 and not server.config.get("unprivileged")
    # the pid namespace comes last, after the judge factory is forked: the factory and every judge it forks live
    # in the worker's own pid namespace, where no program can name them (kill, pidfd_open, F_SETOWN, /proc)
    ns = isolation.CLONE_NEWNS | isolation.CLONE_NEWNET | isolation.CLONE_NEWIPC
    uid, gid = os.getuid(), os.getgid()
    try:
        if not server.config.get("namespaces", True):
            raise OSError(1, "turned off (Sandbox(namespaces=False))")
        isolation.unshare(ns if root else ns | isolation.CLONE_NEWUSER)
        if not root:
            isolation.map_user(uid, gid)
    except OSError as e:
        server.missing["namespaces"] = (
            f"no {'user ' if not root else ''}namespaces ({e.strerror}): programs see "
            "the host's files, processes and network"
        )
        return fallback(server, root)
    if root:
        server.uid, server.judge_uid = UID_BASE + 2 * os.getpid(), UID_BASE + 2 * os.getpid() + 1
    else:
        server.missing["uid"] = (
            "not root: programs and the judge share the caller's uid (in a user namespace, "
            "without capabilities; the judge lives in a pid namespace above the programs' "
            "and is not dumpable)"
        )
    # the worker joins its group once and every process it forks starts there: moving each program in would
    # cost a cgroup migration per run (milliseconds: the kernel waits for an RCU grace period). The bound counts
    # the worker, its init and its judge too (+256 MB); a program raises its own OOM score, so it goes first.
    memory = (max(2 * int(server.config["memory_mb"]) + 256, int(server.config["plus_memory_mb"]) + 512) + 256) << 20
    try:
        server.cgroups, why = isolation.cgroups(
            f"codelib-sandbox-{os.getpid()}", memory, int(server.config["max_procs"]) + 8
        )
        if why:
            server.missing["cgroup"] = f"no memory/pids cgroup ({why}): only rlimits bound a program's tree"
        for group in server.cgroups:
            with open(os.path.join(group, "cgroup.procs"), "w") as f:
                f.write("0")
    except OSError as e:
        server.missing["cgroup"] = f"no memory/pids cgroup ({e}): only rlimits bound a program's tree"
    isolation.mount(None, "/", None, isolation.MS_REC | isolation.MS_PRIVATE)
    os.makedirs(ROOT, 0o755, exist_ok=True)
    isolation.mount("tmpfs", ROOT, "tmpfs", isolation.MS_NOSUID | isolation.MS_NODEV, "size=16m,mode=755")
    isolation.build_root(ROOT, server.config["view"])  # the pool's `isolation.program_view`
    server._start_factory(ROOT)
    isolation.unshare(isolation.CLONE_NEWPID)  # allowed wherever the other namespaces were
    start_init(server)
    isolation.mount(
        None, ROOT, None, isolation.MS_REMOUNT | isolation.MS_RDONLY | isolation.MS_NOSUID | isolation.MS_NODEV
    )
    os.chroot(ROOT)
    os.chdir("/")
    server.chrooted = server.fresh_tmp = True
    if server.uid is not None and not uid_runs_python(server):
        server.missing["uid"] = "the interpreter is not readable by another uid here: programs run as root"
        server.uid = server.judge_uid = None
    if server.uid is None:
        # RLIMIT_NPROC counts a uid's processes per user namespace (Linux >= 5.14): ours holds the worker, its
        # init and a judge at most, besides the program's tree
        server.nproc = int(server.config["max_procs"]) + 4
    mount_tmp(server)
    if server.seccomp is not None:  # once, here: every child inherits it for free (none needs what it denies)
        prctl(PR_SET_NO_NEW_PRIVS, 1)
        isolation.install_seccomp(server.seccomp)


def mount_tmp(server) -> None:
    """An empty tmpfs on /tmp, owned by the program's uid: each run's working directory. After a run that left
    anything there, it is unmounted whole (however deep a nest, whatever its modes) and a new one mounted."""
    owner = f",uid={server.uid},gid={server.uid}" if server.uid is not None else ""
    isolation.mount(
        "tmpfs",
        "/tmp",
        "tmpfs",
        isolation.MS_NOSUID | isolation.MS_NODEV,
        f"size={int(server.config['tmpfs_mb'])}m,mode=700{owner}",
    )
    server.tmp_clean = tmp_state()


def tmp_state() -> tuple:
    # free inodes and blocks, and the root's change time: any file, link or directory a run made (even removed
    # again), and any chmod, utime or xattr on /tmp itself (bits a run could leave for the next), changes it
    fs, st = os.statvfs("/tmp"), os.stat("/tmp")
    return fs.f_ffree, fs.f_bfree, st.st_ctime_ns, st.st_mtime_ns


def tmp_dirty(server) -> bool:
    return tmp_state() != server.tmp_clean


def start_init(server) -> None:
    """Fork pid 1 of the new pid namespace: it mounts /proc for that namespace, then reaps orphans forever."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            try:
                isolation.mount(
                    "proc",
                    ROOT + "/proc",
                    "proc",
                    isolation.MS_NOSUID | isolation.MS_NODEV | isolation.MS_NOEXEC,
                    "hidepid=2",
                )
                os.write(w, b"p")
            except OSError as e:
                os.write(w, f"e{e.strerror}".encode())
            os.close(w)
            os.chroot(ROOT)
            os.chdir("/")
            spawn.reap_forever()
        finally:
            os._exit(0)
    os.close(w)
    answer = os.read(r, 200).decode()
    os.close(r)
    server.init_pid = pid
    server.proc = answer == "p"
    if not server.proc:
        server.missing["proc"] = f"no /proc for the pid namespace ({answer[1:]}): programs see no /proc"


def uid_runs_python(server) -> bool:
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setresgid(server.uid, server.uid, server.uid)
            os.setresuid(server.uid, server.uid, server.uid)
            os.listdir(os.path.dirname(os.__file__))
            os.listdir(os.path.dirname(json.__file__))
            os._exit(0)
        except BaseException:
            os._exit(1)
    return os.waitpid(pid, 0)[1] == 0


def fallback(server, root: bool) -> None:
    """No namespaces: programs run in a private directory as the caller (or a uid of their own, as root)."""
    import tempfile

    server._start_factory(None)

    server.private = tempfile.mkdtemp(prefix="codelib-sandbox-")
    server.uid = server.judge_uid = None
    server.nproc = sum(1 for p in os.listdir("/proc") if p.isdigit()) + int(server.config["max_procs"]) + 256
    server.missing["filesystem"] = "no private root: programs can read the host's files and write to /tmp"
