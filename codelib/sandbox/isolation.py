"""The worker's confinement primitives: namespaces, the allow-list root, cgroups v1/v2, seccomp. Standard library only.

Linux only. Each function either does what it says or raises OSError; the worker records what it could not do in
`missing`, which the pool reports (`Sandbox.isolation`) and warns about once.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import sys

CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x02000000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWTIME = 0x10000000, 0x20000000, 0x40000000, 0x00000080
CLONE_NEW_ANY = CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID
CLONE_NEW_ANY |= CLONE_NEWNET | CLONE_NEWTIME
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = (
    1,
    2,
    4,
    8,
    32,
    4096,
    0x4000,
    1 << 18,
)
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 1024, 2048, 1 << 21
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_SECCOMP, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 1, 4, 22, 36, 38

_libc = ctypes.CDLL(None, use_errno=True)


def call(fn: str, *args) -> None:
    if getattr(_libc, fn)(*args) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{fn}: {os.strerror(err)}")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = lambda s: s.encode() if s is not None else None  # noqa: E731
    call("mount", enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data))


def prctl(option: int, value: int) -> None:
    call("prctl", option, ctypes.c_ulong(value), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))


def unshare(flags: int) -> None:
    call("unshare", flags)


# ---------------------------------------------------------------------------------------------------------------
# the root a program sees: an allow-list of read-only binds on an empty tmpfs


SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32")
ETC_FILES = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "nsswitch.conf",
    "passwd",
    "group",
    "hosts",
    "alternatives",
    "os-release",
    "mime.types",
)
DEV_FILES = ("null", "zero", "full", "random", "urandom")
_ST_TO_MS = (
    (os.ST_RDONLY, MS_RDONLY),
    (os.ST_NOSUID, MS_NOSUID),
    (os.ST_NODEV, MS_NODEV),
    (os.ST_NOEXEC, MS_NOEXEC),
    (os.ST_NOATIME, MS_NOATIME),
    (os.ST_NODIRATIME, MS_NODIRATIME),
    (os.ST_RELATIME, MS_RELATIME),
)


def _bind_readonly(source: str, target: str) -> None:
    if os.path.isdir(source):
        os.makedirs(target, 0o755, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), 0o755, exist_ok=True)
        if not os.path.exists(target):
            open(target, "w").close()
    mount(source, target, None, MS_BIND | MS_REC)
    # a remount keeps the flags the source was mounted with (a user namespace may not clear them): add read-only
    locked = os.statvfs(target).f_flag
    flags = MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV
    flags |= sum(ms for st, ms in _ST_TO_MS if locked & st)
    mount(None, target, None, flags)


def interpreter_paths(site_packages: list[str]) -> list[str]:
    """The directories the interpreter and the caller's environment live in (the /tmp refusal checks them)."""
    return [
        sys.base_prefix,
        sys.prefix,
        sys.exec_prefix,
        sys.base_exec_prefix,
        os.path.dirname(os.path.realpath(sys.executable)),
        *site_packages,
    ]


# ---------------------------------------------------------------------------------------------------------------
# code, never data: what of the Python environment a program sees


DEFAULT_PACKAGES = ("numpy",)  # importable by programs beyond the stdlib, when installed (Sandbox(packages=...))
_CODE_FILE = re.compile(r"(\.py|\.pyc|\.so(\.[\w.-]+)?)$")  # sources, bytecode, extension modules, shared libs
# benchmark data by name: a benchmark's name and a data format (HumanEval.jsonl.gz, sanitized-mbpp.json, ...)
_DATA_SUFFIX = r"\.(jsonl?|gz|parquet|arrow|csv|tsv|pkl|pickle|zip|tar|xz|bz2|zst|db|sqlite|feather|npz|txt)$"
_BENCH_NAME = re.compile(
    r"(human[-_]?eval|mbpp|evalplus|code[-_]?contests|livecodebench|leetcode|taco[-_.]|apps[-_.]"
    r"(train|test))",
    re.I,
)
_DATA_FILE = re.compile(_DATA_SUFFIX, re.I)
# benchmark data by content: the field names of the benchmarks' records, as JSON keys, and HumanEval's test
# function. Stored reversed, and joined into a pattern only in the parent that scans: the worker imports this
# module, and every program it forks would otherwise find `def check(candidate)` in its own memory.
_BENCH_MARKERS_REVERSED = (
    '"noitulos_lacinonac"',
    '"tsil_tset"',
    '"tupni_sulp"',
    '"tupni_esab"',
    '"stset_cilbup"',
    '"stset_etavirp"',
    '"tuptuo_tupni"',
    '"sesac_tset_etavirp"',
    '"edoc_putes_tset"',
    ")etadidnac(kcehc fed",
)


def _marker():
    return re.compile("|".join(re.escape(m[::-1]) for m in _BENCH_MARKERS_REVERSED).encode())


_SCANNED: dict = {}  # a view's scan, once per process (a walk of /usr takes ~0.5 s)


def _package_files(site_packages: list[str], packages) -> list[tuple[str, str, os.stat_result]]:
    """(source, path relative to site-packages, stat) of every code file of the allowed packages: the package's
    directory, a top-level module of that name, and auditwheel's `<name>.libs` (the shared libraries it loads)."""
    out = []
    for name in packages:
        for sp in site_packages:
            try:
                entries = sorted(os.listdir(sp))
            except OSError:
                continue
            mine = [
                e
                for e in entries
                if e in (name, name + ".libs", name + ".py") or (e.startswith(name + ".") and e.endswith(".so"))
            ]
            for entry in mine:
                top = os.path.join(sp, entry)
                if os.path.isfile(top):
                    out.append((top, entry, os.stat(top)))
                    continue
                for d, dirs, files in os.walk(top):
                    dirs.sort()
                    for f in sorted(files):
                        if _CODE_FILE.search(f):
                            src = os.path.join(d, f)
                            st = os.stat(src, follow_symlinks=False)
                            if not os.path.islink(src):
                                out.append((src, os.path.relpath(src, sp), st))
            if mine:
                break
    return out


def _cache_dirs() -> list[str]:
    uid = os.geteuid()
    home = os.path.expanduser("~")
    return [
        d
        for d in (
            os.environ.get("CODELIB_SANDBOX_SITE"),
            os.path.join(sys.prefix, ".codelib-sandbox"),
            os.path.join(home, ".cache", "codelib-sandbox") if home not in ("", "/", "~") else None,
            f"/var/tmp/codelib-sandbox-{uid}",
        )
        if d
    ]


def _own_dir(path: str) -> bool:
    """Create `path` (0755) if needed; whether it is ours and nobody else may write to it."""
    try:
        os.makedirs(path, 0o755, exist_ok=True)
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return False
    return (
        st.st_uid == os.geteuid() and not st.st_mode & 0o022 and os.access(path, os.W_OK) and under_tmp([path]) is None
    )


def site_view(site_packages: list[str], packages) -> str | None:
    """A directory holding the allowed packages' code files (hard links, or copies across file systems), nothing
    else: what programs see as site-packages. Built once per set of files (named by their digest), then reused."""
    import hashlib

    files = _package_files(site_packages, packages)
    digest = hashlib.sha256(repr(sorted(packages)).encode())
    for src, rel, st in files:
        digest.update(f"{rel}\t{src}\t{st.st_size}\t{st.st_mtime_ns}\n".encode())
    key = digest.hexdigest()[:20]
    for base in _cache_dirs():
        if not _own_dir(base):
            continue
        target = os.path.join(base, "site-" + key)
        if os.path.exists(os.path.join(target, ".complete")):
            return target
        build = os.path.join(base, f".build-{os.getpid()}-{os.urandom(4).hex()}")
        try:
            os.mkdir(build, 0o755)
            for src, rel, _ in files:
                dst = os.path.join(build, rel)
                os.makedirs(os.path.dirname(dst), 0o755, exist_ok=True)
                try:
                    os.link(src, dst)
                except OSError:
                    import shutil

                    shutil.copyfile(src, dst)
                os.chmod(dst, 0o644 if not os.access(src, os.X_OK) else 0o755)
            open(os.path.join(build, ".complete"), "w").close()
            try:
                os.rename(build, target)
            except OSError:  # another process built the same view first
                remove_tree(build)
            return target
        except OSError:
            remove_tree(build)
            continue
    return None


def _python_masks(roots: list[str], keep: str | None) -> list[str]:
    """Every site-packages / dist-packages directory below these roots, but `keep`: each gets an empty mount."""
    import glob

    found = set()
    for root in roots:
        for depth in range(4):
            for name in ("site-packages", "dist-packages"):
                for p in glob.glob(os.path.join(root, *["*"] * depth, name)):
                    if os.path.isdir(p) and not os.path.islink(p) and os.path.realpath(p) != keep:
                        found.add(os.path.realpath(p))
    return sorted(found)


def program_view(site_packages: list[str], packages=DEFAULT_PACKAGES) -> dict:
    """What a program's root shows of Python, as `build_root` takes it: the interpreter, the stdlib and a site view
    of the allowed packages' code at the environment's site-packages path; every other site-packages below a shown
    directory is covered by an empty mount (the base interpreter's, the system's, a pyenv's)."""
    import sysconfig

    target = os.path.realpath(site_packages[0]) if site_packages else None
    site = site_view(site_packages, packages) if site_packages else None
    binds = [
        os.path.join(sys.base_prefix, "lib"),
        os.path.join(sys.base_prefix, "bin"),
        os.path.join(sys.base_exec_prefix, "lib"),
        os.path.dirname(os.path.realpath(sys.executable)),
        os.path.dirname(sys.executable),
        os.path.join(sys.prefix, "pyvenv.cfg"),
        sysconfig.get_path("stdlib"),
        sysconfig.get_path("platstdlib"),
    ]
    binds += [p for p in sys.path if p.startswith("/") and "lib-dynload" in p]
    venv = os.path.realpath(sys.prefix) if sys.prefix != sys.base_prefix else None
    binds = sorted(
        {
            os.path.realpath(p)
            for p in binds
            if p and os.path.exists(p) and not (venv and os.path.realpath(p).startswith(venv + "/lib"))
        }
    )
    masks = _python_masks(binds + list(SYSTEM_DIRS) + ["/usr/local"], target)
    return dict(binds=binds, site=[site, target] if site and target else None, masks=masks)


def _bench_content(path: str) -> bool:
    """Whether a file's first MB (decompressed, for gzip) holds a benchmark record's field names."""
    import gzip

    try:
        with open(path, "rb") as f:
            head = f.read(1 << 20)
        if head[:2] == b"\x1f\x8b":
            with gzip.open(path, "rb") as g:
                head = g.read(1 << 20)
    except (OSError, EOFError, ValueError):
        return False
    return _marker().search(head) is not None


def benchmark_data(view: dict) -> str | None:
    """The first file a program's root would show that looks like benchmark data, with why; None if none.

    By name anywhere in the view (a benchmark's name and a data format: HumanEval.jsonl.gz, mbpp.jsonl, ...); by
    content (a benchmark record's field names in the first MB) for every data file in the Python part of the view
    and every JSON-lines / columnar file elsewhere, and for every file of the site view (code that embeds data)."""
    key = json.dumps(view, sort_keys=True)
    if key in _SCANNED:
        return _SCANNED[key]
    masks = set(view.get("masks", []))
    python = [(p, True) for p in view.get("binds", [])] + [(d, False) for d in SYSTEM_DIRS]
    if view.get("site"):
        python.append((view["site"][0], None))
    found = None
    seen = set()
    for top, py in python:
        if found:
            break
        stack = [os.path.realpath(top)] if os.path.isdir(top) and not os.path.islink(top) else []
        while stack and not found:
            d = stack.pop()
            if d in seen or d in masks:
                continue
            seen.add(d)
            try:
                it = os.scandir(d)
            except OSError:
                continue
            with it:
                for e in it:
                    try:
                        if e.is_dir(follow_symlinks=False):
                            stack.append(e.path)
                            continue
                        if not e.is_file(follow_symlinks=False):
                            continue
                    except OSError:
                        continue
                    name = e.name
                    if _DATA_FILE.search(name) and _BENCH_NAME.search(name):
                        found = f"{e.path} (a benchmark's data file, by its name)"
                        break
                    if py is None:  # the site view: code that embeds records
                        check = name.endswith(".py")
                    elif py:  # the interpreter's directories: any data file
                        check = _DATA_FILE.search(name) is not None
                    else:  # the system's: the formats datasets ship in
                        check = name.endswith((".jsonl", ".jsonl.gz", ".parquet", ".arrow"))
                    if check and _bench_content(e.path):
                        found = f"{e.path} (holds benchmark records: their field names)"
                        break
    _SCANNED[key] = found
    return found


def under_tmp(paths: list[str]) -> str | None:
    """The first of these paths that lies under /tmp (resolved), where every run's fresh tmpfs would hide it."""
    for p in paths:
        real = os.path.realpath(p)
        if real == "/tmp" or real.startswith("/tmp/"):
            return real
    return None


def build_root(new: str, python_paths: list[str]) -> None:
    """Populate `new` (an empty directory on a tmpfs) with what a program may see, read-only: the system's
    binaries and libraries, a few files of /etc, the interpreter, its stdlib and site-packages, five devices. Then
    an empty /proc (mounted by the pid namespace's init) and /tmp (the worker mounts the runs' tmpfs there).
    Nothing else: no home, no repository, no checkout, no cache."""
    for path in SYSTEM_DIRS:
        if os.path.islink(path):
            os.symlink(os.readlink(path), new + path)
        elif os.path.isdir(path):
            _bind_readonly(path, new + path)
    for name in ETC_FILES:
        path = "/etc/" + name
        if os.path.exists(path):
            _bind_readonly(os.path.realpath(path) if not os.path.isdir(path) else path, new + path)
    view = python_paths if isinstance(python_paths, dict) else dict(binds=list(python_paths))
    keep = sorted({os.path.realpath(p) for p in view["binds"] if os.path.exists(p)})
    for path in keep:  # the outermost of nested paths: a recursive bind brings the rest
        if not any(path != q and path.startswith(q + "/") for q in keep) and not _covered(new, path):
            _bind_readonly(path, new + path)
    for mask in view.get("masks", []):  # other site-packages (the base interpreter's, the system's): empty
        if os.path.isdir(new + mask):
            mount("tmpfs", new + mask, "tmpfs", MS_NOSUID | MS_NODEV | MS_RDONLY, "size=4k,mode=755")
    if view.get("site"):  # the allowed packages' code, at the environment's site-packages path
        source, target = view["site"]
        _bind_readonly(source, new + target)
    os.makedirs(new + "/dev", 0o755)
    for name in DEV_FILES:
        if os.path.exists("/dev/" + name):
            open(new + "/dev/" + name, "w").close()
            mount("/dev/" + name, new + "/dev/" + name, None, MS_BIND)
    for name, target in (
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ):
        os.symlink(target, new + "/dev/" + name)
    os.makedirs(new + "/proc", 0o555)
    os.makedirs(new + "/tmp", 0o755)


def _covered(new: str, path: str) -> bool:
    """Whether `path` is already visible in `new` through a system bind (e.g. /usr/lib/python3.11)."""
    return any(path == d or path.startswith(d + "/") for d in SYSTEM_DIRS if os.path.isdir(new + d))


def map_user(uid: int, gid: int) -> None:
    """In a fresh user namespace: be root there, as `uid` outside (the only mapping an unprivileged user may write)."""
    with open("/proc/self/setgroups", "w") as f:
        f.write("deny")
    with open("/proc/self/uid_map", "w") as f:
        f.write(f"0 {uid} 1")
    with open("/proc/self/gid_map", "w") as f:
        f.write(f"0 {gid} 1")


# ---------------------------------------------------------------------------------------------------------------
# cgroups: a memory and pids bound per worker, v2 (unified) first, then v1


def cgroup_v2(mountpoint: str, path: str, name: str, memory_bytes: int, max_pids: int) -> list[str]:
    """A child group `name` of the worker's cgroup `path` under a cgroup2 mount, with memory.max and pids.max.

    Needs the memory and pids controllers enabled for the children of `path` (they are, or we may enable them:
    root, or a delegated subtree). Returns [group dir]; raises OSError naming what is missing."""
    parent = os.path.join(mountpoint, path.lstrip("/"))
    with open(os.path.join(parent, "cgroup.controllers")) as f:
        available = set(f.read().split())
    if not {"memory", "pids"} <= available:
        raise OSError(f"cgroup v2 at {parent} lacks the memory/pids controllers ({' '.join(sorted(available))})")
    with open(os.path.join(parent, "cgroup.subtree_control")) as f:
        enabled = set(f.read().split())
    if not {"memory", "pids"} <= enabled:
        with open(os.path.join(parent, "cgroup.subtree_control"), "w") as f:
            f.write("+memory +pids")  # EBUSY when processes live in `parent` (the no-internal-process rule)
    group = os.path.join(parent, name)
    os.mkdir(group)
    try:
        for file, value in (("memory.max", memory_bytes), ("memory.swap.max", 0), ("pids.max", max_pids)):
            if file != "memory.swap.max" or os.path.exists(os.path.join(group, file)):
                with open(os.path.join(group, file), "w") as f:
                    f.write(str(value))
    except OSError:
        os.rmdir(group)
        raise
    return [group]


def cgroup_v1(root: str, lines: list[str], name: str, memory_bytes: int, max_pids: int) -> list[str]:
    """A group `name` in the v1 memory and pids hierarchies below the worker's own."""
    groups = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        for ctl in controllers.split(","):
            if ctl not in ("memory", "pids"):
                continue
            group = os.path.join(root, ctl, path.lstrip("/"), name)
            os.mkdir(group)
            try:
                file, value = ("memory.limit_in_bytes", memory_bytes) if ctl == "memory" else ("pids.max", max_pids)
                with open(os.path.join(group, file), "w") as f:
                    f.write(str(value))
            except OSError:
                os.rmdir(group)
                raise
            groups.append(group)
    if len(groups) < 2:
        for g in groups:
            os.rmdir(g)
        raise OSError("no writable v1 memory and pids hierarchies")
    return groups


def cgroups(name: str, memory_bytes: int, max_pids: int) -> tuple[list[str], str]:
    """Groups bounding a worker's programs: (dirs, "") or ([], why not)."""
    lines = open("/proc/self/cgroup").read().splitlines()
    why = []
    v2 = [line.split("::", 1)[1] for line in lines if line.startswith("0::")]
    for mnt in _cgroup2_mounts():
        if v2:
            try:
                return cgroup_v2(mnt, v2[0], name, memory_bytes, max_pids), ""
            except OSError as e:
                why.append(f"v2: {e.strerror or e}")
    try:
        return cgroup_v1(
            "/sys/fs/cgroup", [x for x in lines if not x.startswith("0::")], name, memory_bytes, max_pids
        ), ""
    except OSError as e:
        why.append(f"v1: {e.strerror or e}")
    return [], "; ".join(why)


def _cgroup2_mounts() -> list[str]:
    try:
        with open("/proc/self/mountinfo") as f:
            return [line.split()[4] for line in f if " - cgroup2 " in line]
    except OSError:
        return []


# ---------------------------------------------------------------------------------------------------------------
# seccomp: the system calls a program never needs and an attacker would use


_DENY = {
    "x86_64": dict(
        msgget=68,
        msgsnd=69,
        msgrcv=70,
        msgctl=71,
        semget=64,
        semop=65,
        semctl=66,
        semtimedop=220,
        shmget=29,
        shmat=30,
        shmctl=31,
        shmdt=67,
        mq_open=240,
        mq_unlink=241,
        mq_timedsend=242,
        mq_timedreceive=243,
        mq_notify=244,
        mq_getsetattr=245,
        add_key=248,
        request_key=249,
        keyctl=250,
        ptrace=101,
        process_vm_readv=310,
        process_vm_writev=311,
        unshare=272,
        setns=308,
        pivot_root=155,
        chroot=161,
        bpf=321,
        perf_event_open=298,
        userfaultfd=323,
        io_uring_setup=425,
        io_uring_enter=426,
        io_uring_register=427,
        kexec_load=246,
        init_module=175,
        finit_module=313,
        delete_module=176,
        reboot=169,
        swapon=167,
        swapoff=168,
        open_by_handle_at=304,
        name_to_handle_at=303,
        open_tree=428,
        move_mount=429,
        fsopen=430,
        fsmount=432,
        fspick=433,
        mount_setattr=442,
        pidfd_getfd=438,
        kcmp=312,
        acct=163,
        syslog=103,
        quotactl=179,
    ),
    "aarch64": dict(
        msgget=186,
        msgctl=187,
        msgrcv=188,
        msgsnd=189,
        semget=190,
        semctl=191,
        semtimedop=192,
        semop=193,
        shmget=194,
        shmctl=195,
        shmat=196,
        shmdt=197,
        mq_open=180,
        mq_unlink=181,
        mq_timedsend=182,
        mq_timedreceive=183,
        mq_notify=184,
        mq_getsetattr=185,
        add_key=217,
        request_key=218,
        keyctl=219,
        ptrace=117,
        process_vm_readv=270,
        process_vm_writev=271,
        unshare=97,
        setns=268,
        pivot_root=41,
        chroot=51,
        bpf=280,
        perf_event_open=241,
        userfaultfd=282,
        io_uring_setup=425,
        io_uring_enter=426,
        io_uring_register=427,
        kexec_load=104,
        init_module=105,
        finit_module=273,
        delete_module=106,
        reboot=142,
        swapon=224,
        swapoff=225,
        open_by_handle_at=265,
        name_to_handle_at=264,
        open_tree=428,
        move_mount=429,
        fsopen=430,
        fsmount=432,
        fspick=433,
        mount_setattr=442,
        pidfd_getfd=438,
        kcmp=272,
        acct=89,
        syslog=116,
        quotactl=60,
    ),
}
_ARCH = {"x86_64": (0xC000003E, 56, 435), "aarch64": (0xC00000B7, 220, 435)}  # audit arch, clone, clone3
_ENOSYS = 38
_RET_ALLOW, _RET_ERRNO, _RET_KILL = 0x7FFF0000, 0x00050000, 0x80000000


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def seccomp_program():
    """The worker installs it once after its set-up; every program and judge inherits it. (mount and umount2 are
    not in it: they need CAP_SYS_ADMIN, which no program has, in a namespace it cannot create; the worker uses them
    to replace a dirty /tmp.) A BPF filter (as the ctypes struct prctl takes): a `_DENY` call, or clone with a
    CLONE_NEW* flag, kills the calling process with SIGSYS, so the parent sees the attempt (the verdict's `seccomp`
    tamper class; an error code would be invisible outside the program); clone3 fails with ENOSYS (libc then uses
    clone, whose flags a filter can read); a foreign architecture (x32, 32-bit compat calls) kills the process
    too. None on an architecture without a table."""
    machine = os.uname().machine
    if machine not in _DENY:
        return None
    arch, clone, clone3 = _ARCH[machine]
    body: list[tuple] = []  # (code, jt target or 0, jf, k); targets: "allow", "eperm", "enosys", "kill"
    body.append((0x20, 0, 0, 4))  # ld arch
    body.append((0x15, 0, "kill", arch))  # jeq arch, else kill
    body.append((0x20, 0, 0, 0))  # ld nr
    if machine == "x86_64":
        body.append((0x35, "kill", 0, 0x40000000))  # jge x32
    for nr in sorted(set(_DENY[machine].values())):
        body.append((0x15, "kill", 0, nr))
    body.append((0x15, "enosys", 0, clone3))
    body.append((0x15, 0, "allow", clone))  # not clone: allow
    body.append((0x20, 0, 0, 16))  # ld args[0] (low word)
    body.append((0x45, "kill", "allow", CLONE_NEW_ANY))  # jset
    ends = {"allow": _RET_ALLOW, "enosys": _RET_ERRNO | _ENOSYS, "kill": _RET_KILL}
    at = {name: len(body) + i for i, name in enumerate(ends)}
    insns = []
    for i, (code, jt, jf, k) in enumerate(body):
        jt = at[jt] - i - 1 if isinstance(jt, str) else jt
        jf = at[jf] - i - 1 if isinstance(jf, str) else jf
        insns.append((code, jt, jf, k))
    insns += [(0x06, 0, 0, v) for v in ends.values()]
    arr = (_SockFilter * len(insns))(*[_SockFilter(*x) for x in insns])
    prog = _SockFprog(len(insns), arr)
    prog._keep = arr
    return prog


def install_seccomp(prog) -> None:
    """Install `prog` in this process (needs no_new_privs); inherited by every child, irrevocable."""
    call("prctl", PR_SET_SECCOMP, ctypes.c_ulong(2), ctypes.byref(prog), ctypes.c_ulong(0), ctypes.c_ulong(0))


# ---------------------------------------------------------------------------------------------------------------
# capabilities


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_capabilities() -> None:
    """capset(2) with empty sets: no capability left, in any namespace."""
    header, data = _CapHeader(0x20080522, 0), (_CapData * 2)()  # _LINUX_CAPABILITY_VERSION_3: two 32-bit words
    call("capset", ctypes.byref(header), data)


# ---------------------------------------------------------------------------------------------------------------
# the fallback without namespaces: a program's directory and processes, found and removed by walking them


def remove_tree(top: str) -> None:
    """Remove a program's directory however deep it nested it or whatever modes it set (no recursion: an explicit
    stack, so a 100,000-level nest goes too)."""
    stack, stuck = [top], set()
    while stack:
        path = stack[-1]
        try:
            os.chmod(path, 0o700, follow_symlinks=False)
            entries = list(os.scandir(path))
        except FileNotFoundError:
            stack.pop()
            continue
        except OSError:
            entries = []
        dirs = [e.path for e in entries if e.is_dir(follow_symlinks=False) and e.path not in stuck]
        for e in entries:
            if not e.is_dir(follow_symlinks=False):
                try:
                    os.unlink(e.path)
                except OSError:
                    pass
        if dirs:
            stack += dirs
            continue
        try:
            os.rmdir(path)
        except OSError:
            stuck.add(path)
        stack.pop()


def descendants(pid: int) -> list[int]:
    """Process ids below `pid` (the fallback without namespaces)."""
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                kids = [int(c) for c in open(f"/proc/{p}/task/{tid}/children").read().split()]
            except OSError:
                continue
            found += kids
            todo += kids
    return found
