"""Parameter files -> Config dataclasses, strictly; paths from the repo root; atomic writes.

A params YAML mirrors its stage's Config one to one: an unknown key, a missing key or a value of the wrong
type fails before anything runs, with a message naming the key and the file (papermill itself only warns).
A variant or another profile's file names its base and holds only the keys it changes:

    extends: ../tiny/02_reinforce.yaml   # a path relative to this file; the base may extend another
    learning_rate: 0.0005                # a key replaces the base's value whole (a mapping too)

The merged values are checked exactly as a complete file would be.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import sys
import tempfile
import types
import typing
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent


class ParamsError(ValueError):
    """A params file or namespace that does not match its Config."""


def resolve(path: str | os.PathLike) -> Path:
    """A path as written in a params file: absolute, or relative to the repo root (not the cwd).

    `checkpoints/...` and `reports/...` follow $CODELIB_CHECKPOINTS / $CODELIB_REPORTS when those are set.
    """
    p = Path(path).expanduser()
    if p.is_absolute():
        return p
    if p.parts and p.parts[0] == "checkpoints":
        return checkpoints_root().joinpath(*p.parts[1:])
    if p.parts and p.parts[0] == "reports":
        return reports_root().joinpath(*p.parts[1:])
    return REPO_ROOT / p


def checkpoints_root() -> Path:
    """checkpoints/ under the repo root, or $CODELIB_CHECKPOINTS (tests point it at a temporary directory)."""
    return Path(os.environ.get("CODELIB_CHECKPOINTS") or REPO_ROOT / "checkpoints")


def reports_root() -> Path:
    """reports/ under the repo root, or $CODELIB_REPORTS."""
    return Path(os.environ.get("CODELIB_REPORTS") or REPO_ROOT / "reports")


def run_dir(profile: str, stage: str) -> Path:
    """Where a stage of a profile writes: checkpoints/<profile>/<stage>/."""
    return checkpoints_root() / profile / stage


# ---------------------------------------------------------------------------------------------------------------
# type checking of plain YAML values against dataclass annotations


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _check_type(value: Any, tp: Any) -> bool:
    if tp is Any:
        return True
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return any(_check_type(value, arg) for arg in typing.get_args(tp))
    if origin is typing.Literal:
        return value in typing.get_args(tp)
    if origin in (list, tuple):
        args = typing.get_args(tp)
        return isinstance(value, (list, tuple)) and all(_check_type(v, args[0]) for v in value) if args else True
    if origin is dict:
        args = typing.get_args(tp)
        if not isinstance(value, dict):
            return False
        return all(_check_type(k, args[0]) and _check_type(v, args[1]) for k, v in value.items()) if args else True
    if tp is type(None):
        return value is None
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(tp, type):
        return isinstance(value, tp)
    return True


def _coerce(value: Any, tp: Any) -> Any:
    """YAML gives ints where floats are meant (lr: 1) and lists where tuples are meant."""
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if typing.get_origin(tp) is tuple and isinstance(value, list):
        return tuple(value)
    return value


def build_config(cls: type, values: dict, source: str = "<dict>", require_all: bool = True):
    """Build `cls` from `values`: unknown keys, (optionally) missing keys and wrong types are errors."""
    if not isinstance(values, dict):
        raise ParamsError(f"{source}: expected a mapping of parameter names to values, got {type(values).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ParamsError(
            f"{source}: unknown parameter {unknown[0]!r} for {cls.__name__}"
            + (f" (and {', '.join(map(repr, unknown[1:]))})" if len(unknown) > 1 else "")
            + f"; valid names are: {', '.join(sorted(fields))}"
        )
    if require_all:
        missing = sorted(set(fields) - set(values))
        if missing:
            raise ParamsError(
                f"{source}: missing parameter {missing[0]!r} for {cls.__name__} (missing: {', '.join(missing)})"
            )
    kwargs = {}
    for name, value in values.items():
        tp = hints[name]
        if not _check_type(value, tp):
            raise ParamsError(
                f"{source}: parameter {name!r} should be {_type_name(tp)}, got {value!r} ({type(value).__name__})"
            )
        kwargs[name] = _coerce(value, tp)
    try:
        return cls(**kwargs)
    except (ValueError, TypeError) as e:  # __post_init__ cross-field checks
        raise ParamsError(f"{source}: {e}") from e


def _read_yaml(p: Path) -> dict:
    if not p.is_file():
        raise FileNotFoundError(f"params file not found: {p} (paths are relative to the repo root {REPO_ROOT})")
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as e:
        raise ParamsError(f"{p}: not valid YAML: {e}") from e
    if not isinstance(data, dict):
        raise ParamsError(f"{p}: expected a mapping of parameter names to values")
    return data


def load_yaml(path: str | os.PathLike, _chain: tuple[Path, ...] = ()) -> dict:
    """Read a params YAML into a dict, with its `extends:` chain merged in (the file's own keys win)."""
    p = resolve(path)
    data = _read_yaml(p)
    base = data.pop("extends", None)
    if base is None:
        return data
    if not isinstance(base, str) or not base:
        raise ParamsError(f"{p}: extends should name a params file (relative to this one), got {base!r}")
    base_path = (p.parent / base).resolve()
    if base_path in _chain or base_path == p.resolve():
        raise ParamsError(f"{p}: extends {base} closes a loop ({' -> '.join(str(c) for c in (*_chain, p))})")
    return {**load_yaml(base_path, (*_chain, p.resolve())), **data}


def base_values(path: str | os.PathLike) -> dict:
    """The values a file's `extends:` chain gives it, before its own keys ({} for a file with no base)."""
    p = resolve(path)
    base = _read_yaml(p).get("extends")
    return load_yaml((p.parent / base).resolve()) if base else {}


def load_config(cls: type, path: str | os.PathLike, **overrides):
    """Load a Config from a params YAML (strict: every field present, no other key, right types)."""
    values = load_yaml(path)
    values.update(overrides)
    return build_config(cls, values, source=str(resolve(path)))


def injected_names(namespace: dict) -> list[str]:
    """The names papermill injected into a kernel: the assignments of its `# Parameters` cell, read from IPython's
    input history (`In`). [] outside papermill (a live JupyterLab kernel runs the parameters cell as it is)."""
    names: list[str] = []
    for source in namespace.get("In") or []:
        if isinstance(source, str) and source.startswith("# Parameters\n"):
            for node in ast.parse(source).body:
                if isinstance(node, ast.Assign):
                    names += [t.id for t in node.targets if isinstance(t, ast.Name)]
    return names


def config_from_namespace(cls: type, namespace: dict, source: str = "notebook parameters"):
    """Build a Config from a notebook's globals: every field must be defined there (papermill injects them), and a
    name papermill injected that is no field (`-p smoothng 5`) fails with the pipeline's message."""
    names = [f.name for f in dataclasses.fields(cls) if f.init]
    missing = [n for n in names if n not in namespace]
    if missing:
        raise ParamsError(f"{source}: missing parameter {missing[0]!r} for {cls.__name__}")
    injected = injected_names(namespace)
    if "extends" in injected:
        raise ParamsError(
            f"{source}: papermill was given a params file that extends {namespace.get('extends')!r}; papermill does "
            "not follow `extends:`. Run the stage with `python -m codelib.pipeline`, or give papermill the merged "
            "file: `python -m codelib.params FILE > merged.yaml`"
        )
    values = {n: namespace[n] for n in [*names, *injected] if n in namespace}
    return build_config(cls, values, source=source)


def config_to_dict(cfg) -> dict:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(cfg).items()}


def main_config(cls: type, argv: list[str] | None = None):
    """`python -m codelib.trainers.X PARAMS.yaml [key=value ...]` -> Config (values parsed as YAML scalars)."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        fields = ", ".join(f.name for f in dataclasses.fields(cls))
        raise SystemExit(f"usage: python -m <module> PARAMS.yaml [key=value ...]\n{cls.__name__} fields: {fields}")
    overrides = {}
    for item in argv[1:]:
        if "=" not in item:
            raise SystemExit(f"override {item!r} should look like key=value")
        k, v = item.split("=", 1)
        overrides[k] = yaml.safe_load(v)
    return load_config(cls, argv[0], **overrides)


# ---------------------------------------------------------------------------------------------------------------
# atomic writes: a reader never sees half a file, a crash never leaves one


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_json(path: str | os.PathLike, obj: Any) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")


def append_jsonl(path: str | os.PathLike, row: dict) -> None:
    """Append one row and flush it to disk (metrics logs: a stop loses at most the row being written)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(row, default=float) + "\n")
        f.flush()
        os.fsync(f.fileno())


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    """Rows of a JSONL file; a torn last line (a stop mid-write) is dropped, not an error."""
    path = Path(path)
    if not path.exists():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return rows


if __name__ == "__main__":  # python -m codelib.params FILE: the file with its `extends:` chain merged, as YAML
    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m codelib.params PARAMS.yaml  (prints it with its extends: chain merged)")
    print(yaml.safe_dump(load_yaml(sys.argv[1]), sort_keys=False, default_flow_style=None), end="")
