"""Notebooks: committed without outputs, a `parameters` cell whose names are the Config's fields and every
profile's YAML keys; and the whole smoke pipeline run headless with papermill."""

import ast
import dataclasses
import json
from pathlib import Path

import nbformat
import pytest

from codelib.plumbing.params import REPO_ROOT, ParamsError, build_config, load_yaml
from codelib.plumbing.paths import profiles
from codelib.runner import pipeline

NOTEBOOKS = sorted((REPO_ROOT / "notebooks").glob("*.ipynb"))
PROFILES = profiles()  # params/base/ holds shared defaults, no profile


def parameters_cell(nb: dict) -> str:
    cells = [c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(cells) == 1, "exactly one cell tagged `parameters`"
    return "".join(cells[0]["source"])


def test_every_stage_has_a_notebook():
    assert {p.stem for p in NOTEBOOKS} == set(pipeline.STAGES)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_stripped_and_parameters_mirror_config(path):
    nb = json.loads(path.read_text())
    for c in nb["cells"]:
        if c["cell_type"] == "code":
            assert not c.get("outputs") and not c.get("execution_count"), f"{path.name}: outputs committed"
    source = parameters_cell(nb)
    names = []
    for node in ast.parse(source).body:
        assert isinstance(node, ast.AnnAssign) and isinstance(
            node.value, ast.Constant | ast.List | ast.Dict | ast.UnaryOp
        ), f"{path.name}: the parameters cell holds annotated flat literals only"
        names.append(node.target.id)
    lines = [ln for ln in source.splitlines() if ln.strip()]
    assert all("  # " in ln for ln in lines), f"{path.name}: every parameter carries a comment"
    fields = [f.name for f in dataclasses.fields(pipeline.config_class(path.stem))]
    assert names == fields
    # papermill reads every line too (`--help-notebook`, its check of -p names): name, type and help
    from papermill.translators import PythonTranslator

    seen = PythonTranslator.inspect(nbformat.from_dict({"source": source}))
    assert [p.name for p in seen] == fields, f"{path.name}: papermill cannot parse some parameter lines"
    assert all(p.help for p in seen)
    cut = [p.name for p in seen if p.help.rstrip().endswith(("|", ",", "(", ":", ";"))]
    assert not cut, f"{path.name}: {cut}'s help stops mid-sentence (a comment continued under the field was dropped)"


@pytest.mark.parametrize("profile", PROFILES)
def test_profile_yaml_keys_are_config_fields(profile):
    for stage in pipeline.profile_stages(profile):
        keys = set(load_yaml(REPO_ROOT / "params" / profile / f"{stage}.yaml"))  # with its `extends:` chain
        fields = {f.name for f in dataclasses.fields(pipeline.config_class(stage))}
        assert keys == fields, f"{profile}/{stage}: {sorted(keys ^ fields)}"


@pytest.mark.slow
def test_smoke_pipeline_end_to_end(tmp_path, monkeypatch):
    """Every notebook of the smoke profile runs headless; the table, figures and executed notebooks exist."""
    monkeypatch.setenv("CODELIB_CHECKPOINTS", str(tmp_path / "checkpoints"))
    monkeypatch.setenv("CODELIB_REPORTS", str(tmp_path / "reports"))
    reports = tmp_path / "reports" / "smoke"
    rows = pipeline.run("smoke", reports=reports, log=print)
    # (the tiny base model is pretrained first, as its own step, when the cached one is missing)
    assert [s for s, st, _ in rows if st == "ran" and s != "tiny base model"] == pipeline.profile_stages("smoke")
    for stage in pipeline.profile_stages("smoke"):
        nb = json.loads((reports / f"{stage}.ipynb").read_text())
        errors = [o for c in nb["cells"] for o in c.get("outputs", []) if o.get("output_type") == "error"]
        assert not errors, f"{stage}: {errors[:1]}"
    import pandas as pd

    df = pd.read_csv(reports / "results.csv")
    assert {"checkpoint", "method", "pass@1", "ci_low", "ci_high", "passed", "tasks", "avg_tokens"} <= set(df.columns)
    assert set(df["checkpoint"]) == {"base", "sft", "reinforce", "ppo", "grpo", "dpo"}
    assert df["pass@1"].between(0, 1).all() and (df["ci_low"] <= df["pass@1"]).all()
    for fig in ("training_curves", "pass_at_1", "length_accuracy", "pass_at_k", "task_heatmap"):
        assert (reports / "figures" / f"{fig}.png").stat().st_size > 1000
    assert Path(tmp_path / "checkpoints" / "smoke" / "dpo" / "merged" / "config.json").exists()
    # no library noise and no warning about our own code in what a researcher reads
    for stage in pipeline.profile_stages("smoke"):
        nb = json.loads((reports / f"{stage}.ipynb").read_text())
        text = "".join("".join(o.get("text", "")) for c in nb["cells"] for o in c.get("outputs", []))
        for noise in NOISE:
            assert noise not in text, f"{stage}: {noise!r} in its output"


NOISE = ("Warning:", "Failed to load CPU gemm_4bit_forward", "requires_grad=True to a scalar", "is deprecated")


@pytest.mark.slow
def test_papermill_with_a_misspelt_parameter_stops_with_the_pipelines_message(tmp_path):
    """`papermill ... -p smoothng 5` (the documented way to run one notebook) fails, naming the key as the pipeline
    does, instead of running to the end with papermill's warning."""
    import subprocess
    import sys

    nb = REPO_ROOT / "notebooks" / "07_plots.ipynb"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "papermill",
            str(nb),
            str(tmp_path / "out.ipynb"),
            "-f",
            str(REPO_ROOT / "params" / "tiny" / "07_plots.yaml"),
            "-p",
            "smoothng",
            "5",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert proc.returncode != 0
    assert "unknown parameter 'smoothng' for PlotsConfig" in proc.stdout + proc.stderr
    with pytest.raises(ParamsError, match="unknown parameter 'smoothng' for PlotsConfig"):
        values = {**load_yaml(REPO_ROOT / "params/tiny/07_plots.yaml"), "smoothng": 5}
        build_config(pipeline.config_class("07_plots"), values, source="params/tiny/07_plots.yaml")


def test_nbstripout_would_change_nothing():
    """The pre-commit hook (nbstripout) and tools/make_notebooks.py agree: committing rewrites no notebook."""
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "nbstripout", "--verify", *map(str, NOTEBOOKS)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_committed_notebooks_are_what_make_notebooks_writes():
    """A notebook's parameters cell shows its profile's values (what it trains when run by hand in JupyterLab), so a
    changed default or params file must reach the committed notebooks: `python tools/make_notebooks.py` rewrites
    them; here each is built in memory and compared with the committed file."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_notebooks", REPO_ROOT / "tools/make_notebooks.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    stale = [
        name
        for name, nb in tool.all_notebooks().items()
        if json.loads(nbformat.writes(nb)) != json.loads((REPO_ROOT / "notebooks" / f"{name}.ipynb").read_text())
    ]
    assert not stale, f"stale notebooks {stale}: run python tools/make_notebooks.py"
