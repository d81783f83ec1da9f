"""Strict params: unknown, missing and mistyped keys fail naming the key and the file; atomic writes."""

import dataclasses
from dataclasses import dataclass, field

import pytest
import yaml

from codelib.plumbing.params import (
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
    from codelib.plumbing.params import ParamsError, base_values, load_config, load_yaml
    from codelib.trainers import reinforce

    base = tmp_path / "base.yaml"
    base.write_text(yaml.safe_dump(load_yaml(REPO_ROOT / "params" / "tiny" / "02_reinforce.yaml")))  # merged: no chain
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
    from codelib.plumbing.params import base_values, load_yaml

    for path in sorted((REPO_ROOT / "params").glob("*/**/*.yaml")):
        own = yaml.safe_load(path.read_text())
        if "extends" not in own:
            continue
        base = base_values(path)
        same = [k for k, v in own.items() if k != "extends" and base.get(k) == v]
        assert not same, f"{path.relative_to(REPO_ROOT)} repeats its base's {same}"
        assert load_yaml(path)  # the chain resolves


# ---------------------------------------------------------------------------------------------------------------
# messages: every problem at once, each blamed on where it came from; the command line without tracebacks


def test_every_problem_of_a_file_is_reported_at_once(tmp_path):
    p = tmp_path / "all.yaml"
    p.write_text("lr: fast\nsteps: 3\nname: a\nmodules: [q]\ntable: {}\nstpes: 4\n")
    with pytest.raises(ParamsError) as e:
        load_config(Demo, p)
    lines = str(e.value).splitlines()
    assert len(lines) == 3 and all(line.startswith(f"{p}: ") for line in lines)
    assert "unknown parameter 'stpes' for Demo; did you mean 'steps'?" in lines[0]
    assert "missing parameter 'flag'" in lines[1] and "parameter 'lr' should be float, got 'fast'" in lines[2]


def test_a_bad_override_is_blamed_on_the_override_not_the_file(tmp_path):
    p = tmp_path / "ok.yaml"
    p.write_text(yaml.safe_dump(FULL))
    with pytest.raises(ParamsError) as e:
        load_config(Demo, p, steps="many", stpes=2)
    assert str(e.value).splitlines() == [
        "override stpes=2: unknown parameter 'stpes' for Demo; did you mean 'steps'?",
        "override steps=many: parameter 'steps' should be int, got 'many' (str)",
    ]
    with pytest.raises(ParamsError, match=r"ok\.yaml with override steps=-1: steps must be >= 0"):
        load_config(Demo, p, steps=-1)  # a cross-field check names the file and the override it was given


def test_a_bad_value_in_a_base_file_is_blamed_on_that_file(tmp_path):
    (tmp_path / "base.yaml").write_text(yaml.safe_dump({**FULL, "steps": "3"}))
    (tmp_path / "leaf.yaml").write_text("extends: base.yaml\nname: b\n")
    with pytest.raises(ParamsError, match=rf"^{tmp_path / 'base.yaml'}: parameter 'steps' should be int"):
        load_config(Demo, tmp_path / "leaf.yaml")


def test_command_line_help_errors_and_debug(tmp_path, capsys):
    from codelib.plumbing.params import main_config

    with pytest.raises(SystemExit) as e:
        main_config(Demo, ["--help"], command="python -m demo")
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m demo PARAMS.yaml [key=value ...] [--debug]")
    assert "  lr       float" in out and "  table    dict" in out
    p = tmp_path / "ok.yaml"
    p.write_text(yaml.safe_dump(FULL))
    assert main_config(Demo, [str(p), "steps=7", "modules=[a, b]"]).modules == ["a", "b"]
    with pytest.raises(SystemExit) as e:  # a user's error: one message, no traceback
        main_config(Demo, [str(p), "steps=x"])
    assert str(e.value).startswith("error: override steps=x: parameter 'steps' should be int")
    with pytest.raises(SystemExit, match="override 'steps' should look like key=value"):
        main_config(Demo, [str(p), "steps"])
    with pytest.raises(ParamsError):  # --debug: the exception itself, with its traceback
        main_config(Demo, [str(p), "steps=x", "--debug"])


def test_params_command_help_and_merge():
    import subprocess
    import sys

    def run(*args):
        command = [sys.executable, "-m", "codelib.plumbing.params", *args]
        return subprocess.run(command, capture_output=True, text=True, cwd=REPO_ROOT, timeout=120)

    helped = run("--help")
    assert helped.returncode == 0 and helped.stdout.startswith("usage: python -m codelib.params PARAMS.yaml")
    bad = run("params/nowhere/04_grpo.yaml")
    assert bad.returncode == 1 and bad.stderr.startswith("error: params file not found")
    assert "Traceback" not in bad.stderr


def test_jsonl_run_logs_forgive_data_files_do_not(tmp_path):
    import gzip

    from codelib.plumbing import jsonl
    from codelib.tasks import task

    assert jsonl.read_jsonl(tmp_path / "none.jsonl") == []  # a run that has not started
    with pytest.raises(FileNotFoundError):
        jsonl.read_jsonl(tmp_path / "none.jsonl", strict=True)
    data = tmp_path / "d.jsonl.gz"
    with gzip.open(data, "wt") as f:
        f.write('{"a": 1}\n\n{"a": 2}\n{"a": \n{"a": 3}\n')
    assert jsonl.read_jsonl(data) == [{"a": 1}, {"a": 2}]
    with pytest.raises(jsonl.JsonlError, match=r"d\.jsonl\.gz:4: not a JSON line"):
        task.read_jsonl(data)  # the benchmarks' reader is the same one, strict
    assert task.read_jsonl is not jsonl.read_jsonl and read_jsonl is jsonl.read_jsonl


# ---------------------------------------------------------------------------------------------------------------
# profiles: every one extends params/base/; a real profile never reaches tiny

TOY = {"tiny", "smoke"}  # the embedded default and "the tiny pipeline shrunk" (smoke extends tiny on purpose)


def chain(path) -> list:
    """The files a params file's `extends:` chain reads, itself first."""
    out = [path.resolve()]
    while (base := yaml.safe_load(out[-1].read_text()).get("extends")) is not None:
        out.append((out[-1].parent / base).resolve())
    return out


def real_profile_files():
    from codelib.plumbing.paths import profiles

    real = [prof for prof in profiles() if prof not in TOY]
    return [
        p for prof in real for p in sorted((REPO_ROOT / "params" / prof).rglob("*.yaml")) if "studies" not in p.parts
    ]


def test_real_profiles_extend_base_and_never_tiny():
    base, tiny = REPO_ROOT / "params" / "base", REPO_ROOT / "params" / "tiny"
    files = real_profile_files()
    assert len(files) >= 25
    for path in files:
        files_read = chain(path)
        assert not [f for f in files_read if f.is_relative_to(tiny)], f"{path} reaches tiny: {files_read}"
        assert files_read[-1].is_relative_to(base), f"{path} does not extend params/base/"


def test_every_profile_stage_file_extends_base():
    """tiny's and every real profile's stage files read params/base/ (smoke through tiny)."""
    from codelib.plumbing.paths import profiles
    from codelib.plumbing.stages import STAGES

    base = REPO_ROOT / "params" / "base"
    for prof in profiles():
        for stage in STAGES:
            path = REPO_ROOT / "params" / prof / f"{stage}.yaml"
            if path.exists():
                assert any(f.is_relative_to(base) for f in chain(path)), f"{path} does not reach params/base/"


def test_editing_tiny_changes_no_real_profile(tmp_path):
    """Every tiny file rewritten (each value replaced) in a copy of params/: every real profile merges the same."""
    import shutil

    from codelib.plumbing.params import load_yaml

    copy = tmp_path / "params"
    shutil.copytree(REPO_ROOT / "params", copy)
    for path in (copy / "tiny").rglob("*.yaml"):
        values = yaml.safe_load(path.read_text())
        path.write_text(yaml.safe_dump({k: (v if k == "extends" else "edited in tiny") for k, v in values.items()}))
    for path in real_profile_files():
        edited = copy / path.relative_to(REPO_ROOT / "params")
        assert load_yaml(edited) == load_yaml(path), f"{path.relative_to(REPO_ROOT)} follows a tiny file"


def test_papermill_given_a_file_with_a_base_builds_what_the_pipeline_builds():
    """papermill -f params/<profile>/07_plots.yaml injects the file's own keys and `extends`; the Config the notebook
    builds is the merged file's, whatever the notebook's own defaults say."""
    from codelib.reports import PlotsConfig

    path = REPO_ROOT / "params" / "deepseek-7b-instruct" / "07_plots.yaml"
    own = yaml.safe_load(path.read_text())
    cell = "# Parameters\n" + "".join(f"{k} = {v!r}\n" for k, v in own.items())
    notebook = {f.name: getattr(PlotsConfig(), f.name) for f in dataclasses.fields(PlotsConfig)}
    namespace = {**notebook, **own, "In": [cell]}
    assert config_from_namespace(PlotsConfig, namespace) == load_config(PlotsConfig, path)
    with pytest.raises(ParamsError, match="unknown parameter 'smoothng'"):
        config_from_namespace(PlotsConfig, {**namespace, "smoothng": 5, "In": [cell + "smoothng = 5\n"]})
    variant = {k: v for k, v in own.items() if k != "profile"}  # a file without `profile`: its base is unknowable
    cell = "# Parameters\n" + "".join(f"{k} = {v!r}\n" for k, v in variant.items())
    with pytest.raises(ParamsError, match="cannot be told from the file alone"):
        config_from_namespace(PlotsConfig, {**notebook, **variant, "In": [cell]})
