"""Strict params: unknown, missing and mistyped keys fail naming the key and the file; atomic writes."""

from dataclasses import dataclass, field

import pytest

from codelib.params import (
    ParamsError,
    append_jsonl,
    atomic_write_json,
    build_config,
    config_from_namespace,
    load_config,
    read_jsonl,
)


@dataclass
class Demo:
    lr: float = 1e-3
    steps: int = 10
    name: str = "x"
    flag: bool = False
    modules: list[str] = field(default_factory=lambda: ["q"])
    table: dict[str, str] = field(default_factory=dict)

    def __post_init__(self):
        if self.steps < 0:
            raise ValueError(f"steps must be >= 0; you gave {self.steps}")


FULL = {"lr": 1, "steps": 3, "name": "a", "flag": True, "modules": ["q", "v"], "table": {"a": "b"}}


def test_full_mapping_builds_and_coerces_int_to_float():
    cfg = build_config(Demo, FULL)
    assert cfg.lr == 1.0 and isinstance(cfg.lr, float) and cfg.modules == ["q", "v"]


def test_unknown_key_names_key_and_file(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("lr: 0.1\nsteps: 3\nname: a\nflag: true\nmodules: [q]\ntable: {}\nstpes: 4\n")
    with pytest.raises(ParamsError, match=r"s\.yaml.*unknown parameter 'stpes'"):
        load_config(Demo, p)


def test_missing_key(tmp_path):
    p = tmp_path / "m.yaml"
    p.write_text("lr: 0.1\n")
    with pytest.raises(ParamsError, match=r"m\.yaml.*missing parameter 'flag'"):
        load_config(Demo, p)


@pytest.mark.parametrize(
    ("key", "value"), [("steps", "3"), ("steps", 2.5), ("flag", "yes"), ("modules", "q"), ("lr", True)]
)
def test_wrong_type(key, value):
    with pytest.raises(ParamsError, match=f"parameter '{key}' should be"):
        build_config(Demo, {**FULL, key: value})


def test_post_init_error_is_reported_with_source():
    with pytest.raises(ParamsError, match="f.yaml: steps must be >= 0"):
        build_config(Demo, {**FULL, "steps": -1}, source="f.yaml")


def test_missing_file():
    with pytest.raises(FileNotFoundError, match="params file not found"):
        load_config(Demo, "params/none/nothing.yaml")


def test_namespace_needs_every_field():
    with pytest.raises(ParamsError, match="missing parameter"):
        config_from_namespace(Demo, {"lr": 0.1})
    assert config_from_namespace(Demo, {**FULL, "other": 1}).steps == 3


def test_atomic_json_and_torn_jsonl(tmp_path):
    atomic_write_json(tmp_path / "a.json", {"x": 1})
    assert (tmp_path / "a.json").read_text().strip().startswith("{")
    assert not list(tmp_path.glob(".*tmp"))
    append_jsonl(tmp_path / "m.jsonl", {"step": 1})
    with open(tmp_path / "m.jsonl", "a") as f:
        f.write('{"step": 2, "los')  # a stop mid-write
    assert read_jsonl(tmp_path / "m.jsonl") == [{"step": 1}]
