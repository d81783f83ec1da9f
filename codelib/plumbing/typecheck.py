"""Type checking of plain YAML values against dataclass annotations: whether a value fits a field's type
(`check_type`), the few conversions YAML needs (`coerce`), and the names a message shows (`type_name`,
`unknown_name`).
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from typing import Any


def type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def check_type(value: Any, tp: Any) -> bool:
    if tp is Any:
        return True
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return any(check_type(value, arg) for arg in typing.get_args(tp))
    if origin is typing.Literal:
        return value in typing.get_args(tp)
    if origin in (list, tuple):
        args = typing.get_args(tp)
        return isinstance(value, (list, tuple)) and all(check_type(v, args[0]) for v in value) if args else True
    if origin is dict:
        args = typing.get_args(tp)
        if not isinstance(value, dict):
            return False
        return all(check_type(k, args[0]) and check_type(v, args[1]) for k, v in value.items()) if args else True
    if tp is type(None):
        return value is None
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(tp, type):
        return isinstance(value, tp)
    return True


_EXPONENT = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)[eE][+-]?\d+$")


def coerce(value: Any, tp: Any) -> Any:
    """YAML gives ints where floats are meant (lr: 1), text for a float written without a dot (YAML 1.1 reads
    `1e-06`, what json.dumps writes, as a string) and lists where tuples are meant."""
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if tp is float and isinstance(value, str) and _EXPONENT.match(value.strip()):
        return float(value)
    if typing.get_origin(tp) is tuple and isinstance(value, list):
        return tuple(value)
    return value


def unknown_name(name: str, cls: type, fields: dict) -> str:
    close = difflib.get_close_matches(name, fields, n=1)
    hint = f"did you mean {close[0]!r}?" if close else f"valid names are: {', '.join(sorted(fields))}"
    return f"unknown parameter {name!r} for {cls.__name__}; {hint}"
