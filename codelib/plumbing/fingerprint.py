"""Hashes of the code that decides a score, so that a changed rule re-runs what it decided.

Cached evaluation summaries (`evaluator.settings_for`) and the pipeline's stage stamps include these hashes beside
their parameters: after a change to sampling, completion extraction, the sandbox's judging or the reward and scoring
code, old pass@1 numbers are not reused. The sandbox is hashed by pattern (`sandbox*.py` and every `.py` under a
`sandbox*/` package), so it does not matter whether it is one module or a package.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
from pathlib import Path

from codelib.plumbing.paths import TINY_DIR

PACKAGE = Path(__file__).resolve().parents[1]  # codelib/

# what turns a completion into a verdict and a reward: extraction, the sandbox, the rewards (and their lint)
JUDGE = ("engine/extraction.py", "engine/lint.py", "engine/rewards.py", "sandbox*.py", "sandbox*/**/*.py")
# what draws the eval samples and turns their verdicts into pass@k and its intervals (a changed sampler draws other
# samples from the same seed)
SCORE = (
    *JUDGE,
    "evaluation/evaluator.py",
    "evaluation/stats.py",
    "policy/generation.py",
    "policy/lora.py",
    "policy/vllm_backend.py",
)


def files(patterns: tuple[str, ...], root: Path = PACKAGE) -> list[Path]:
    """The files under `root` that match any pattern, sorted, each once."""
    return sorted({p for pat in patterns for p in root.glob(pat) if p.is_file() and "__pycache__" not in p.parts})


def code_hash(patterns: tuple[str, ...] = JUDGE, root: Path = PACKAGE) -> str:
    """sha256 over the names and sources of the matching files (16 hex digits)."""
    h = hashlib.sha256()
    for p in files(patterns, root):
        h.update(p.relative_to(root).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:16]


# ---------------------------------------------------------------------------------------------------------------
# the codelib modules a piece of code imports, transitively (a study run's key)


def _module_file(name: str) -> Path | None:
    """codelib.a.b -> codelib/a/b.py or codelib/a/b/__init__.py (found by path: nothing is imported)."""
    parts = name.split(".")
    if parts[0] != "codelib":
        return None
    base = PACKAGE.joinpath(*parts[1:])
    for p in (base.with_suffix(".py"), base / "__init__.py"):
        if p.is_file():
            return p
    return None


@functools.cache  # a study keys every run with its trainer's sources: parse each text once per process, not per run
def _imports(source: str, package: str) -> frozenset[str]:
    """codelib modules a source imports (absolute and relative; `from codelib import x` counts x)."""
    out = set()
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return frozenset()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.split(".")[0] == "codelib")
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                mod = ".".join(base + ([mod] if mod else []))
            if mod.split(".")[0] != "codelib":
                continue
            out.add(mod)
            out.update(f"{mod}.{a.name}" for a in node.names if _module_file(f"{mod}.{a.name}"))
    return frozenset(out)


def module_sources(source: str) -> dict[str, str]:
    """Every codelib module a piece of code imports, transitively: module name -> its source text."""
    seen: dict[str, str] = {}
    todo = sorted(_imports(source, "codelib"))
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        path = _module_file(name)
        if path is None:
            continue
        text = path.read_text()
        seen[name] = text
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        parents = [".".join(name.split(".")[:i]) for i in range(2, len(name.split(".")))]  # packages run first
        todo.extend(m for m in sorted(_imports(text, package)) + parents if m not in seen)
    return dict(sorted(seen.items()))


def checkpoint_fingerprint(source: str) -> list:
    """Names, sizes and mtimes of a local checkpoint's weight/config files (an adapter's base's too): a retrained
    checkpoint, or an adapter whose base was rebuilt, is evaluated again. Files only, no model library: the pipeline
    and the studies key their runs with it without importing torch."""
    if source == "tiny":
        source = str(TINY_DIR)
    p = Path(source)
    if not p.is_dir():
        return []
    pats = ("*.safetensors", "*.bin", "*.pt", "*config.json")
    files = sorted({f for pat in pats for f in p.glob(pat) if f.is_file()})
    out = [[f.name, f.stat().st_size, f.stat().st_mtime_ns] for f in files]
    adapter = p / "adapter_config.json"
    if adapter.is_file():
        base = json.loads(adapter.read_text()).get("base_model_name_or_path") or ""
        if base and base != source:
            out.append(["base", base, checkpoint_fingerprint(base)])
    return out
