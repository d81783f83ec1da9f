"""The pipeline: strict params before anything runs, --only / --from, skip when up to date, a failing stage's
message."""

import json
from pathlib import Path

import nbformat
import pytest

from codelib.plumbing.params import ParamsError
from codelib.runner import pipeline

TASKS_YAML = "profile: fake\ndataset: synthetic\nsplit: test\nshow: 0\ninteractive: false\n"
PLOTS_YAML = "profile: fake\nstages: [sft]\ncheckpoints: []\nsmoothing: 1\nheatmap_tasks: 5\nout_dir: ''\n"


def make_root(tmp_path: Path, body_00: str = "", body_07: str = "") -> Path:
    """A repo-shaped folder with two tiny notebooks (stages 00_tasks and 07_plots) that log that they ran."""
    (tmp_path / "params" / "fake").mkdir(parents=True)
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "params" / "fake" / "00_tasks.yaml").write_text(TASKS_YAML)
    (tmp_path / "params" / "fake" / "07_plots.yaml").write_text(PLOTS_YAML)
    log = tmp_path / "ran.log"
    for stage, body in (("00_tasks", body_00), ("07_plots", body_07)):
        nb = nbformat.v4.new_notebook()
        params = nbformat.v4.new_code_cell("profile = 'x'")
        params.metadata["tags"] = ["parameters"]
        run = nbformat.v4.new_code_cell(f"open({str(log)!r}, 'a').write({stage!r} + ' ' + profile + '\\n')")
        nb.cells = [params, run] + ([nbformat.v4.new_code_cell(body)] if body else [])
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nbformat.write(nb, tmp_path / "notebooks" / f"{stage}.ipynb")
    return tmp_path


def ran(root: Path) -> list[str]:
    log = root / "ran.log"
    return log.read_text().split("\n")[:-1] if log.exists() else []


def test_stage_times_read_as_minutes_and_seconds():
    assert pipeline._minutes(36.4) == "36 s"
    assert pipeline._minutes(91.1) == "1 min 31 s"
    assert pipeline._minutes(119.7) == "2 min 00 s"  # rounded before it is split: never "1 min 60 s"
    assert pipeline._minutes(3605) == "60 min 05 s"


def test_select_only_and_from():
    stages = ["00_tasks", "01_sft", "02_reinforce", "06_eval", "07_plots"]
    assert pipeline.select(stages, None, "02") == ["02_reinforce", "06_eval", "07_plots"]
    assert pipeline.select(stages, ["01", "eval"], None) == ["01_sft", "06_eval"]
    with pytest.raises(ValueError, match="unknown stage '09'"):
        pipeline.select(stages, ["09"], None)


def test_every_shipped_profile_has_valid_params():
    for profile in ("tiny", "smoke", "deepseek-1.3b-humaneval", "deepseek-7b-instruct", "mbpp"):
        stages = pipeline.profile_stages(profile)
        assert stages, profile
        pipeline.check_params(profile, stages)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ("stpes: 4\n", "unknown parameter 'stpes'"),
        ("show: zero\n", "parameter 'show' should be int"),
    ],
)
def test_bad_params_fail_before_anything_runs(tmp_path, edit, message):
    root = make_root(tmp_path)
    p = root / "params" / "fake" / "07_plots.yaml"
    if edit.startswith("show"):
        p = root / "params" / "fake" / "00_tasks.yaml"
        p.write_text(TASKS_YAML.replace("show: 0\n", edit))
    else:
        p.write_text(PLOTS_YAML + edit)
    with pytest.raises(ParamsError, match=rf"{p.name}.*{message}"):
        pipeline.run("fake", root=root, log=lambda *_: None)
    assert ran(root) == []  # not even the valid first stage ran


def test_missing_key_and_missing_file(tmp_path):
    root = make_root(tmp_path)
    (root / "params" / "fake" / "07_plots.yaml").write_text(PLOTS_YAML.replace("smoothing: 1\n", ""))
    with pytest.raises(ParamsError, match="07_plots.yaml.*missing parameter 'smoothing'"):
        pipeline.run("fake", root=root, log=lambda *_: None)
    with pytest.raises(FileNotFoundError, match="no params directory"):
        pipeline.run("nope", root=root, log=lambda *_: None)


@pytest.mark.slow
def test_runs_skips_when_up_to_date_and_reruns_on_change(tmp_path):
    root = make_root(tmp_path)
    rows = pipeline.run("fake", root=root, log=lambda *_: None)
    assert [(s, st) for s, st, _ in rows] == [("00_tasks", "ran"), ("07_plots", "ran")]
    assert ran(root) == ["00_tasks fake", "07_plots fake"]  # the params were injected
    assert (root / "reports" / "fake" / "00_tasks.ipynb").exists()
    # the executed copy is a report: no absolute path of this machine, parameter cells collapsed
    text = (root / "reports" / "fake" / "07_plots.ipynb").read_text()
    assert str(root) not in text
    cells = json.loads(text)["cells"]
    injected = next(c for c in cells if "injected-parameters" in c["metadata"].get("tags", []))
    assert injected["metadata"]["jupyter"]["source_hidden"]
    assert 'out_dir = "reports/fake"' in "".join(injected["source"])  # an empty out_dir: the profile's reports
    rows = pipeline.run("fake", root=root, log=lambda *_: None)
    assert [st for _, st, _ in rows] == ["skipped", "skipped"]
    # a params change reruns that stage and every stage after it
    (root / "params" / "fake" / "00_tasks.yaml").write_text(TASKS_YAML.replace("show: 0", "show: 1"))
    rows = pipeline.run("fake", root=root, log=lambda *_: None)
    assert [st for _, st, _ in rows] == ["ran", "ran"]
    # --only reruns just that stage with --force; --from starts later
    rows = pipeline.run("fake", only=["07"], force=True, root=root, log=lambda *_: None)
    assert [(s, st) for s, st, _ in rows] == [("07_plots", "ran")]
    rows = pipeline.run("fake", start="07_plots", root=root, log=lambda *_: None)
    assert [(s, st) for s, st, _ in rows] == [("07_plots", "skipped")]


@pytest.mark.slow
def test_failing_stage_names_notebook_cell_and_error(tmp_path):
    root = make_root(tmp_path, body_00="raise ValueError('the reward is broken')")
    with pytest.raises(pipeline.StageFailed) as e:
        pipeline.run("fake", root=root, log=lambda *_: None)
    msg = str(e.value)
    assert "00_tasks" in msg and "cell" in msg and "ValueError: the reward is broken" in msg
    kept = root / "reports" / "fake" / "00_tasks.ipynb"
    assert kept.exists() and str(kept) in msg
    assert ran(root) == ["00_tasks fake"]  # the next stage did not run
    assert not (root / "checkpoints" / "fake" / ".stamps" / "00_tasks.json").exists()
    nb = json.loads(kept.read_text())
    assert any(o.get("output_type") == "error" for c in nb["cells"] for o in c.get("outputs", []))


def test_cli_reports_errors_without_traceback(capsys):
    assert pipeline.main(["--profile", "nope"]) == 1
    err = capsys.readouterr().err
    assert "no params directory" in err and "Traceback" not in err
    assert pipeline.main(["--only", "99"]) == 1
    err = capsys.readouterr().err
    assert "unknown stage '99'" in err and "--list" in err and len(err.splitlines()) <= 3
    assert pipeline.main(["--profile", "nope", "--debug"]) == 1
    assert "Traceback" in capsys.readouterr().err


def test_list_marks_opt_in_stages(capsys):
    assert pipeline.main(["--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    repair = next(ln for ln in lines if ln.startswith("09_repair"))
    assert "opt-in" in repair and "--only 09_repair" in repair
    assert not any("opt-in" in ln for ln in lines if not ln.startswith("09_repair"))


def test_a_missing_notebook_fails_before_anything_runs(tmp_path):
    root = make_root(tmp_path)
    (root / "notebooks" / "07_plots.ipynb").unlink()
    with pytest.raises(FileNotFoundError, match="07_plots.*make_notebooks"):
        pipeline.run("fake", root=root, log=lambda *_: None)
    assert ran(root) == []


def test_stream_prints_whole_lines_and_tidy_report_relativises(tmp_path):
    said = []
    s = pipeline._Stream(said.append, prefix="> ")
    s.write("step 1\rstep 2\nhalf")
    s.write(" a line\n\n")
    assert said == ["> step 2", "> half a line"]
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell("x = 1")
    params.metadata["tags"] = ["parameters"]
    cfg = nbformat.v4.new_code_cell("cfg = config_from_namespace(C, globals())\ncfg")
    out = nbformat.v4.new_code_cell("print(1)")
    out.outputs = [nbformat.v4.new_output("stream", name="stdout", text=f"{pipeline.REPO_ROOT}/checkpoints/x\n")]
    nb.cells = [params, cfg, out]
    path = tmp_path / "nb.ipynb"
    nbformat.write(nb, path)
    pipeline.tidy_report(path)
    got = nbformat.read(path, as_version=4)
    assert got.cells[0].metadata.jupyter.source_hidden and got.cells[1].metadata.jupyter.outputs_hidden
    assert got.cells[2].outputs[0].text == "checkpoints/x\n"


def test_a_deleted_run_dir_reruns_its_stage(tmp_path, monkeypatch):
    """Stamps say a stage is done; the run dir it wrote is the proof. Deleting it reruns that stage, and the stages
    after it (they read what it wrote)."""
    from codelib.plumbing.params import config_to_dict
    from codelib.trainers import reinforce

    root = make_root(tmp_path)
    monkeypatch.setenv("CODELIB_CHECKPOINTS", str(root / "checkpoints"))
    run = root / "checkpoints" / "fake" / "reinforce"
    values = config_to_dict(reinforce.Config(profile="fake", init="tiny"))
    (root / "params" / "fake" / "02_reinforce.yaml").write_text(json.dumps(values))  # JSON is YAML
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("profile = 'x'"),
        nbformat.v4.new_code_cell(
            f"import os\nos.makedirs({str(run)!r}, exist_ok=True)\n"
            f"open({str(root / 'ran.log')!r}, 'a').write('02_reinforce\\n')"
        ),
    ]
    nb.cells[0].metadata["tags"] = ["parameters"]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, root / "notebooks" / "02_reinforce.ipynb")

    assert pipeline.stage_outputs("02_reinforce", values) == [run]
    rows = pipeline.run("fake", root=root, log=lambda *_: None)
    assert [st for _, st, _ in rows] == ["ran", "ran", "ran"] and run.is_dir()
    rows = pipeline.run("fake", root=root, log=lambda *_: None)
    assert [st for _, st, _ in rows] == ["skipped", "skipped", "skipped"]
    run.rmdir()
    said = []
    rows = pipeline.run("fake", root=root, log=said.append)
    assert [(s, st) for s, st, _ in rows] == [
        ("00_tasks", "skipped"),
        ("02_reinforce", "ran"),
        ("07_plots", "ran"),  # it reads the run that was trained again
    ]
    assert any("is gone" in line for line in said) and run.is_dir()
    rows = pipeline.run("fake", root=root, log=lambda *_: None)
    assert [st for _, st, _ in rows] == ["skipped", "skipped", "skipped"]


def test_eval_outputs_are_one_dir_per_checkpoint(monkeypatch, tmp_path):
    monkeypatch.setenv("CODELIB_CHECKPOINTS", str(tmp_path))
    got = pipeline.stage_outputs("06_eval", {"profile": "p", "checkpoints": {"base": "tiny", "sft": "x"}})
    assert got == [tmp_path / "p" / "eval" / "base", tmp_path / "p" / "eval" / "sft"]
    assert pipeline.stage_outputs("07_plots", {"profile": "p", "stages": ["sft"]}) == []


def test_a_stage_kernel_imports_this_checkouts_codelib(tmp_path, monkeypatch):
    """The kernel papermill starts must import the codelib whose code the stamps hashed (REPO_ROOT first on its
    PYTHONPATH), whatever the virtualenv's editable install points at; the environment is restored afterwards."""
    import os

    from codelib.plumbing.params import REPO_ROOT

    seen = {}

    def fake_execute(*a, **k):
        seen["path"] = os.environ.get("PYTHONPATH")

    monkeypatch.setattr(pipeline.pm, "execute_notebook", fake_execute)
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    pipeline.run_stage("07_plots", {}, tmp_path / "nb.ipynb", tmp_path / "out" / "nb.ipynb")
    assert seen["path"].split(os.pathsep) == [str(REPO_ROOT), "/elsewhere"]
    assert os.environ["PYTHONPATH"] == "/elsewhere"
    monkeypatch.delenv("PYTHONPATH")
    pipeline.run_stage("07_plots", {}, tmp_path / "nb.ipynb", tmp_path / "out" / "nb.ipynb")
    assert seen["path"] == str(REPO_ROOT) and "PYTHONPATH" not in os.environ


def test_kernels_started_at_once_each_run_their_own_notebook(tmp_path):
    """A study with jobs starts several kernels at once: each must get its own sockets (a shared socket name
    delivers one kernel's messages to another, 'Invalid Signature') and its own parameters."""
    import threading

    spec = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": spec})
    nb.cells = [
        nbformat.v4.new_code_cell("x = 0", metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell("import time\ntime.sleep(1.0)\nprint('x is', x)"),
    ]
    src = tmp_path / "nb.ipynb"
    nbformat.write(nb, src)
    outs: dict[int, str] = {}

    def go(i: int) -> None:
        lines: list[str] = []
        try:
            pipeline.run_stage("t", {"x": i}, src, tmp_path / f"out{i}.ipynb", log=lines.append)
            outs[i] = "".join(lines)
        except BaseException as e:  # noqa: BLE001 - reported by the assertion below
            outs[i] = f"failed: {e!r}"

    threads = [threading.Thread(target=go, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(3):
        assert f"x is {i}" in outs[i], outs
