"""Parameter files -> Config dataclasses, strictly.

A params YAML mirrors its stage's Config one to one: an unknown key, a missing key or a value of the wrong type
fails before anything runs, with a message naming the key and the file that holds it (papermill itself only
warns). Every problem of a file is reported at once, one line each. A profile's file names its base and holds
only the keys it changes:

    extends: ../base/02_reinforce.yaml   # a path relative to this file; the base may extend another
    learning_rate: 0.0005                # a key replaces the base's value whole (a mapping too)

The merged values are checked exactly as a complete file would be. Every profile's stage file extends
params/base/ (model-agnostic defaults); a variant extends its profile's file.

    python -m codelib.params PARAMS.yaml [key=value ...]   # the merged file as YAML, checked against its Config

Paths (`REPO_ROOT`, `resolve`, `run_dir`, ...) live in `codelib.plumbing.paths`, JSONL files in
`codelib.plumbing.jsonl`; both are importable from here as well, as they were before.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import os
import re
import sys
import typing
from pathlib import Path
from typing import Any

import yaml

from codelib.plumbing.jsonl import append_jsonl, read_jsonl
from codelib.plumbing.paths import (
    REPO_ROOT,
    atomic_write_json,
    atomic_write_text,
    checkpoints_root,
    reports_root,
    resolve,
    run_dir,
)
from codelib.plumbing.typecheck import check_type, coerce, type_name, unknown_name

__all__ = [
    "REPO_ROOT",
    "ParamsError",
    "append_jsonl",
    "atomic_write_json",
    "atomic_write_text",
    "base_values",
    "build_config",
    "checkpoints_root",
    "config_from_namespace",
    "config_to_dict",
    "injected_names",
    "load_config",
    "load_yaml",
    "main_config",
    "read_jsonl",
    "reports_root",
    "resolve",
    "run_dir",
]


class ParamsError(ValueError):
    """A params file, override or namespace that does not match its Config (every problem, one line each)."""


def build_config(
    cls: type, values: dict, source: str = "<dict>", require_all: bool = True, origins: dict[str, str] | None = None
):
    """Build `cls` from `values`: unknown keys, (optionally) missing keys and wrong types are errors, all reported
    in one ParamsError, each line naming where its key came from (`origins`: key -> file or override; else `source`).
    """
    if not isinstance(values, dict):
        raise ParamsError(f"{source}: expected a mapping of parameter names to values, got {type(values).__name__}")
    origins = origins or {}
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    problems = [f"{origins.get(k, source)}: {unknown_name(k, cls, fields)}" for k in values if k not in fields]
    if require_all:
        missing = sorted(f for f in fields if f not in values)
        if missing:
            problems.append(
                f"{source}: missing parameter {missing[0]!r} for {cls.__name__}"
                + (f" (missing: {', '.join(missing)})" if len(missing) > 1 else "")
            )
    kwargs = {}
    for name, value in values.items():
        if name not in fields:
            continue
        tp = hints[name]
        value = coerce(value, tp)
        if not check_type(value, tp):
            got = f"{value!r} ({type(value).__name__})"
            problems.append(f"{origins.get(name, source)}: parameter {name!r} should be {type_name(tp)}, got {got}")
        kwargs[name] = coerce(value, tp)
    if problems:
        raise ParamsError("\n".join(problems))
    try:
        return cls(**kwargs)
    except (ValueError, TypeError) as e:  # __post_init__ cross-field checks
        overrides = sorted({v for k, v in origins.items() if v.startswith("override ")})
        raise ParamsError(f"{source}{' with ' + ', '.join(overrides) if overrides else ''}: {e}") from e


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


def load_yaml_origins(path: str | os.PathLike, _chain: tuple[Path, ...] = ()) -> tuple[dict, dict[str, str]]:
    """A params YAML with its `extends:` chain merged (the file's own keys win), and which file gave each key."""
    p = resolve(path)
    data = _read_yaml(p)
    base = data.pop("extends", None)
    own = {k: str(p) for k in data}
    if base is None:
        return data, own
    if not isinstance(base, str) or not base:
        raise ParamsError(f"{p}: extends should name a params file (relative to this one), got {base!r}")
    base_path = (p.parent / base).resolve()
    if base_path in _chain or base_path == p.resolve():
        raise ParamsError(f"{p}: extends {base} closes a loop ({' -> '.join(str(c) for c in (*_chain, p))})")
    values, origins = load_yaml_origins(base_path, (*_chain, p.resolve()))
    return {**values, **data}, {**origins, **own}


def load_yaml(path: str | os.PathLike) -> dict:
    """Read a params YAML into a dict, with its `extends:` chain merged in (the file's own keys win)."""
    return load_yaml_origins(path)[0]


def base_values(path: str | os.PathLike) -> dict:
    """The values a file's `extends:` chain gives it, before its own keys ({} for a file with no base)."""
    p = resolve(path)
    base = _read_yaml(p).get("extends")
    return load_yaml((p.parent / base).resolve()) if base else {}


def load_config(cls: type, path: str | os.PathLike, **overrides):
    """Load a Config from a params YAML (strict: every field present, no other key, right types). A bad override
    is blamed on the override (`override steps=x`), a bad value in a base file on that file."""
    values, origins = load_yaml_origins(path)
    values.update(overrides)
    origins.update({k: f"override {k}={_show(v)}" for k, v in overrides.items()})
    return build_config(cls, values, source=str(resolve(path)), origins=origins)


def _show(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()


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
    name papermill injected that is no field (`-p smoothng 5`) fails with the pipeline's message.

    A file papermill was given (`-f params/tiny/07_plots.yaml`) may extend a base: papermill injects its own keys
    and `extends`, and the base's values replace the notebook's defaults for the keys the file does not set."""
    names = [f.name for f in dataclasses.fields(cls) if f.init]
    missing = [n for n in names if n not in namespace]
    if missing:
        raise ParamsError(f"{source}: missing parameter {missing[0]!r} for {cls.__name__}")
    injected = injected_names(namespace)
    values = {n: namespace[n] for n in names}
    if "extends" in injected:
        base = papermill_base(namespace, injected)
        if base is None:
            raise ParamsError(
                f"{source}: papermill was given a params file that extends {namespace.get('extends')!r}, and its base "
                "cannot be told from the file alone (it names no `profile`, or the path fits more than one folder). "
                "Run the stage with `python -m codelib.pipeline`, or give papermill the merged file: "
                "`python -m codelib.params FILE > merged.yaml`"
            )
        values |= {k: v for k, v in load_yaml(base).items() if k not in injected}
        injected = [n for n in injected if n != "extends"]
    values |= {n: namespace[n] for n in injected if n in namespace}
    return build_config(cls, values, source=source)


def papermill_base(namespace: dict, injected: list[str]) -> Path | None:
    """The file an injected `extends:` names. Papermill does not tell the kernel which file it read, so the path is
    resolved against params/<profile>/ and its folders, `profile` being one the file itself set; None unless exactly
    one of those holds it (`../base/04_grpo.yaml` from params/tiny/, `../04_grpo.yaml` from params/tiny/variants/)."""
    extends, profile = namespace.get("extends"), namespace.get("profile")
    if "profile" not in injected or not isinstance(extends, str) or not isinstance(profile, str) or not profile:
        return None
    root = REPO_ROOT / "params" / profile
    folders = [root, *sorted(d for d in root.rglob("*") if d.is_dir())] if root.is_dir() else []
    found = {(d / extends).resolve() for d in folders if (d / extends).is_file()}
    return found.pop() if len(found) == 1 else None


def config_to_dict(cfg) -> dict:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(cfg).items()}


# ---------------------------------------------------------------------------------------------------------------
# the command line: `python -m codelib.trainers.X PARAMS.yaml [key=value ...]`, `python -m codelib.params ...`


def field_help(cls: type) -> list[tuple[str, str, str]]:
    """(name, type, comment) of each field, the comment read from the class source (`x: int = 1  # what x is`)."""
    comments: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        try:
            source = inspect.getsource(klass)
        except (OSError, TypeError):
            continue
        for m in re.finditer(r"^\s+(\w+): [^\n]*?  # ([^\n]*)$", source, re.M):
            comments[m.group(1)] = m.group(2)
    hints = typing.get_type_hints(cls)
    return [(f.name, type_name(hints[f.name]), comments.get(f.name, "")) for f in dataclasses.fields(cls) if f.init]


def _usage(cls: type | None, command: str) -> str:
    text = (
        f"usage: {command} PARAMS.yaml [key=value ...] [--debug]\n\n"
        "PARAMS.yaml is a params file (paths relative to the repo root); each key=value overrides one parameter\n"
        "(the value read as YAML: steps=10, rewards={pass: 1.0}). --debug shows the traceback of an error.\n"
    )
    if cls is not None:
        width = max(len(n) for n, _, _ in field_help(cls))
        text += f"\n{cls.__name__} parameters:\n" + "\n".join(
            f"  {n:<{width}}  {t}" + (f"  {c}" if c else "") for n, t, c in field_help(cls)
        )
    return text


def parse_argv(argv: list[str]) -> tuple[str, dict, bool]:
    """PARAMS.yaml [key=value ...] [--debug] -> (path, overrides, debug); a malformed override is a ParamsError."""
    debug = "--debug" in argv
    args = [a for a in argv if a != "--debug"]
    if not args:
        raise ParamsError("no params file given")
    overrides = {}
    for item in args[1:]:
        key, sep, text = item.partition("=")
        if not sep or not key.isidentifier():
            raise ParamsError(f"override {item!r} should look like key=value (for example steps=10)")
        try:
            overrides[key] = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise ParamsError(f"override {item!r}: the value is not valid YAML ({e})") from e
    return args[0], overrides, debug


def fail(error: BaseException, debug: bool) -> typing.NoReturn:
    """End a command on a user's error: one message on stderr, exit status 2; the traceback only with --debug."""
    if debug:
        raise error
    raise SystemExit(f"error: {error}\n(add --debug to see where it was raised)")


USER_ERRORS = (ParamsError, FileNotFoundError)


def main_config(cls: type, argv: list[str] | None = None, command: str | None = None):
    """`python -m codelib.trainers.X PARAMS.yaml [key=value ...] [--debug]` -> Config (values parsed as YAML).

    `-h`/`--help` prints the usage and every parameter; a bad file or override ends the command with its message
    (no traceback unless --debug)."""
    argv = sys.argv[1:] if argv is None else argv
    command = command or f"python -m {_module_of_main()}"
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage(cls, command))
        raise SystemExit(0 if argv else 2)
    debug = "--debug" in argv
    try:
        path, overrides, debug = parse_argv(argv)
        return load_config(cls, path, **overrides)
    except USER_ERRORS as e:
        fail(e, debug)


def main_train(cls: type, train, argv: list[str] | None = None, command: str | None = None):
    """`python -m codelib.trainers.X PARAMS.yaml [key=value ...] [--debug]`: `train(main_config(cls))`, where a user's
    error found as the run starts (a missing init checkpoint or data file) also ends the command with its message
    and no traceback unless --debug."""
    argv = sys.argv[1:] if argv is None else argv
    cfg = main_config(cls, argv, command)
    try:
        out = train(cfg)
    except USER_ERRORS as e:
        fail(e, "--debug" in argv)
    leave_together()
    return out


def leave_together() -> None:
    """The end of a launched process: under several processes, wait for every rank, then tear the process group
    down. A rank that exits while rank 0 still writes the adapter, with the group up, can be aborted by gloo
    ("terminate called without an active exception"), failing a run that trained. Only here, at the process's end:
    a stage that trains twice in one process (repair: SFT, then RL) keeps its group between the two."""
    dist = sys.modules.get("torch.distributed")  # never imported here by a process that trained nothing
    if dist is not None and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()
        dist.destroy_process_group()


def _module_of_main() -> str:
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return spec.name if spec is not None else Path(sys.argv[0]).name


def config_class_of(path: str | os.PathLike) -> type | None:
    """The Config a params file mirrors, from its name (`04_grpo.yaml`, a variant `04_grpo_dapo.yaml`); None if
    its name names no stage."""
    from codelib.plumbing.stages import STAGES

    stem = Path(path).stem
    names = [n for n in STAGES if stem == n or stem.startswith(n + "_")]
    return STAGES[max(names, key=len)].config_class() if names else None


def main(argv: list[str] | None = None) -> None:
    """`python -m codelib.params PARAMS.yaml [key=value ...]`: the file with its `extends:` chain (and overrides)
    merged, as YAML on stdout; checked against the stage's Config when its name names a stage."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(
            _usage(None, "python -m codelib.params") + "\nPrints the file with its extends: chain merged (and the "
            "overrides applied) as YAML, after checking it against its stage's Config."
        )
        raise SystemExit(0 if argv else 2)
    debug = "--debug" in argv
    try:
        path, overrides, debug = parse_argv(argv)
        values = {**load_yaml(path), **overrides}
        cls = config_class_of(path)
        if cls is not None:
            load_config(cls, path, **overrides)
    except USER_ERRORS as e:
        fail(e, debug)
    print(yaml.safe_dump(values, sort_keys=False, default_flow_style=None), end="")


if __name__ == "__main__":
    main()
