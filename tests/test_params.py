"""Strict params: unknown, missing and mistyped keys fail naming the key and the file; atomic writes."""

from dataclasses import dataclass, field

import pytest
import yaml

from codelib.params import (
    REPO_ROOT,
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


def test_overlay_extends_its_base_and_is_checked_as_strictly(tmp_path):
    from codelib.params import ParamsError, base_values, load_config, load_yaml
    from codelib.trainers import reinforce

    base = tmp_path / "base.yaml"
    base.write_text((REPO_ROOT / "params" / "tiny" / "02_reinforce.yaml").read_text())
    (tmp_path / "variants").mkdir()
    variant = tmp_path / "variants" / "v.yaml"
    variant.write_text("extends: ../base.yaml\nstage: v\nrewards: {pass: 1.0, length: {alpha: 0.03}}\n")
    cfg = load_config(reinforce.Config, variant)
    assert cfg.stage == "v" and cfg.rewards == {"pass": 1.0, "length": {"alpha": 0.03}} and cfg.batch_size == 128
    assert base_values(variant)["stage"] == "reinforce" and "extends" not in load_yaml(variant)
    variant.write_text("extends: ../base.yaml\nlearning_rat: 0.1\n")
    with pytest.raises(ParamsError, match="unknown parameter 'learning_rat'"):
        load_config(reinforce.Config, variant)
    variant.write_text("extends: ../base.yaml\nrewards: {pass: 1.0, length: {alfa: 0.03}}\n")
    with pytest.raises(ParamsError, match="alfa"):
        load_config(reinforce.Config, variant)
    base.write_text("extends: variants/v.yaml\n")
    with pytest.raises(ParamsError, match="loop"):
        load_yaml(variant)


def test_shipped_overlays_hold_only_what_they_change():
    from codelib.params import base_values, load_yaml

    for path in sorted((REPO_ROOT / "params").glob("*/**/*.yaml")):
        own = yaml.safe_load(path.read_text())
        if "extends" not in own:
            continue
        base = base_values(path)
        same = [k for k, v in own.items() if k != "extends" and base.get(k) == v]
        assert not same, f"{path.relative_to(REPO_ROOT)} repeats its base's {same}"
        assert load_yaml(path)  # the chain resolves
