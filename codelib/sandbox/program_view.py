"""Code, never data: what of the Python environment a program sees (`program_view`: the interpreter, the stdlib and
a site view of the allowed packages' code files), and the scan that refuses a view holding benchmark data
(`benchmark_data`). Standard library only; the pool computes the view, the worker's `build_root` mounts it.
"""

from __future__ import annotations

import json
import os
import re
import sys

from .cleanup import remove_tree
from .root import SYSTEM_DIRS, under_tmp

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
