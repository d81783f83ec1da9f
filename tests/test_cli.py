"""Every command-line entry point: `--help` prints its usage and exits 0, and wrong input ends it with a short
message that names the fix (exit status non-zero, no traceback).

The commands run in this process (runpy, with sys.argv set as the shell would set it), so the whole list takes
seconds: torch and the trainers are imported once. A command that raised anything but SystemExit would print a
traceback to its user; here that exception fails the test. `test_every_entry_point_is_listed` keeps the list
complete: a new `if __name__ == "__main__":` in codelib/, tools/ or bench/ must be added to COMMANDS.
"""

from __future__ import annotations

import runpy
import sys
import warnings

import pytest

from codelib import MOVED
from codelib.plumbing.params import REPO_ROOT

G = "params/tiny/04_grpo.yaml"
E = "params/tiny/06_eval.yaml"
MISSING = "params/tiny/nowhere.yaml"

# command -> three wrong inputs (each a list of arguments) and, for each, words its message must contain
TRAINER_ERRORS = [
    ([MISSING], "not found"),
    ([G, "steps"], "key=value"),
    ([G, "steps=many"], "should be int"),
    ([G, "init=checkpoints/tiny/sft_nowhere"], "train it first"),  # found before the run writes anything
]
COMMANDS: dict[str, list[tuple[list[str], str]]] = {
    "codelib.pipeline": [
        (["--profile", "nosuch"], "nosuch"),
        (["--only", "99_nothing"], "99_nothing"),
        (["--frm", "03"], "unrecognized arguments"),
    ],
    "codelib.params": [([MISSING], "not found"), ([E, "limit"], "key=value"), ([E, "nosuch=1"], "nosuch")],
    "codelib.evaluator": [([MISSING], "not found"), ([E, "limit=some"], "should be int"), ([E, "nosuch=1"], "nosuch")],
    "codelib.comparison": [([MISSING], "not found"), ([E, "limit"], "key=value"), ([E, "nosuch=1"], "nosuch")],
    "codelib.passk": [([MISSING], "not found"), ([E, "limit"], "key=value"), ([E, "n_samples=x"], "should be int")],
    "codelib.study": [
        (["params/tiny/studies/nowhere.yaml"], "not found"),
        (["params/tiny/studies/algorithms.yaml", "--jobs", "two"], "invalid int value"),
        ([], "required: study"),
    ],
    "codelib.trainers.sft": [
        ([MISSING], "not found"),
        (["params/tiny/01_sft.yaml", "lr"], "key=value"),
        (["params/tiny/01_sft.yaml", "nosuch=1"], "nosuch"),
        (["params/tiny/01_sft.yaml", "init=./nowhere"], "does not exist"),
    ],
    "codelib.trainers.reinforce": [
        ([MISSING], "not found"),
        (["params/tiny/02_reinforce.yaml", "steps"], "key=value"),
        (["params/tiny/02_reinforce.yaml", "steps=x"], "should be int"),
    ],
    "codelib.trainers.ppo": [
        ([MISSING], "not found"),
        (["params/tiny/03_ppo.yaml", "steps"], "key=value"),
        (["params/tiny/03_ppo.yaml", "steps=x"], "should be int"),
    ],
    "codelib.trainers.grpo": TRAINER_ERRORS,
    "codelib.trainers.online": [
        ([MISSING], "not found"),
        (["params/tiny/02_reinforce.yaml", "steps"], "key=value"),
        (["params/tiny/02_reinforce.yaml", "steps=many"], "should be int"),
    ],
    "codelib.trainers.dpo": [
        ([MISSING], "not found"),
        (["params/tiny/05_dpo.yaml", "beta"], "key=value"),
        (["params/tiny/05_dpo.yaml", "beta=strong"], "should be float"),
    ],
    "codelib.trainers.repair": [
        ([MISSING], "not found"),
        (["params/tiny/09_repair.yaml", "turns"], "key=value"),
        (["params/tiny/09_repair.yaml", "nosuch=1"], "nosuch"),
    ],
    "tools/install.py": [
        (["--installer", "conda"], "invalid choice"),
        (["--bogus"], "unrecognized"),
        (["now"], "unrecognized"),
    ],
    "tools/judge_counts.py": [
        (["--datasets", "nosuch"], "invalid choice"),
        (["--bogus"], "unrecognized"),
        (["humaneval"], "unrecognized"),
    ],
    "tools/check_plus_inputs.py": [
        (["--datasets", "mbpp"], "invalid choice"),
        (["--workers", "0"], "at least 1"),
        (["--bogus"], "unrecognized"),
    ],
    "tools/agree.py": [
        (["--datasets", "nosuch"], "invalid choice"),
        (["--per-task", "x"], "whole number"),
        (["--bogus"], "unrecognized"),
    ],
    "tools/gpu_run.py": [([], "required"), (["run", "--only", "nosuch"], "unknown step"), (["fly"], "invalid choice")],
    "tools/make_notebooks.py": [
        (["99_nothing"], "no notebook named"),
        (["--bogus"], "unrecognized"),
        (["--force"], "unrecognized"),
    ],
    "tools/readme_tables.py": [
        (["--bogus"], "unrecognized"),
        (["README.md"], "unrecognized"),
        (["--check=yes"], "ignored explicit argument"),
    ],
    "bench/sandbox.py": [
        (["--workers", "x"], "invalid int"),
        (["--repeats", "0"], "at least 1"),
        (["--bogus"], "unrecognized"),
    ],
    "bench/rl.py": [
        (["--steps", "x"], "invalid int"),
        (["--steps", "1"], "at least 2"),
        (["--bogus"], "unrecognized"),
    ],
    "bench/stage.py": [
        (["--rounds", "0"], "at least 1"),
        (["--profile", "nosuch"], "nosuch"),
        (["--set", "shared_prefix"], "KEY=VALUE"),
    ],
    "bench/gpu.py": [
        (["--arch", "nosuch"], "invalid choice"),
        (["--trainers", "sft,nosuch"], "nosuch"),
        (["--quant", "fp4"], "fp4"),
    ],
}
INTERNAL = {"codelib/sandbox/worker.py"}  # started by the sandbox pool, never by a person


def run(command: str, args: list[str], monkeypatch, capsys) -> tuple[int, str, str]:
    """Run `python -m command args` (or `python command args` for a file) here; (exit status, stdout, stderr)."""
    monkeypatch.chdir(REPO_ROOT)
    monkeypatch.setattr(sys, "argv", [command, *args])
    code: int | str | None = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # runpy: "found in sys.modules" (imported by other tests)
        try:
            if command.endswith(".py"):
                runpy.run_path(str(REPO_ROOT / command), run_name="__main__")
            else:  # a short name (codelib.params) runs its module (codelib.plumbing.params), as `python -m` does
                runpy.run_module(MOVED.get(command, command), run_name="__main__", alter_sys=True)
        except SystemExit as e:
            code = e.code
    out, err = capsys.readouterr()
    if isinstance(code, str):  # SystemExit("message"): Python prints it on stderr, status 1
        err, code = err + code + "\n", 1
    return code or 0, out, err


def test_every_entry_point_is_listed():
    short = {new: old for old, new in MOVED.items()}  # the commands keep their short names: codelib.pipeline
    found = set()
    for path in [*REPO_ROOT.glob("codelib/**/*.py"), *REPO_ROOT.glob("tools/*.py"), *REPO_ROOT.glob("bench/*.py")]:
        rel = path.relative_to(REPO_ROOT).as_posix()
        if '\nif __name__ == "__main__":' in path.read_text() and rel not in INTERNAL:
            module = rel[:-3].replace("/", ".")
            found.add(short.get(module, module) if rel.startswith("codelib/") else rel)
    assert found == set(COMMANDS), f"unlisted: {sorted(found - set(COMMANDS))}, gone: {sorted(set(COMMANDS) - found)}"


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_help(command, monkeypatch, capsys):
    code, out, err = run(command, ["--help"], monkeypatch, capsys)
    assert code == 0, f"{command} --help: exit {code}\n{err}"
    assert "usage:" in out, out[:300]
    assert len(out.splitlines()) >= 3 and "Traceback" not in out + err


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_wrong_input_is_one_short_message(command, monkeypatch, capsys):
    for args, words in COMMANDS[command]:
        code, out, err = run(command, args, monkeypatch, capsys)
        shown = f"{command} {' '.join(args)} -> exit {code}\n{out}{err}"
        assert code not in (0, None), shown
        assert "Traceback" not in out + err, shown
        assert "error" in err.lower() and words.lower() in err.lower(), shown
        assert len(err.strip().splitlines()) <= 8, shown  # argparse: its usage lines, then "error: ..."


@pytest.mark.parametrize("command", ["codelib.trainers.sft", "codelib.trainers.grpo", "codelib.trainers.dpo"])
def test_a_wrong_init_leaves_the_finished_run_alone(command, tmp_path, monkeypatch, capsys):
    """A typo in init is found before the run writes anything: the finished run's config.json is not rewritten."""
    monkeypatch.setenv("CODELIB_CHECKPOINTS", str(tmp_path))
    params = {
        "codelib.trainers.sft": "params/tiny/01_sft.yaml",
        "codelib.trainers.grpo": G,
        "codelib.trainers.dpo": "params/tiny/05_dpo.yaml",
    }[command]
    from codelib.plumbing.params import load_yaml

    run_dir = tmp_path / "tiny" / load_yaml(REPO_ROOT / params)["stage"]
    run_dir.mkdir(parents=True)
    (run_dir / "config.json").write_text('{"finished": true}')
    code, out, err = run(command, [params, "init=checkpoints/tiny/sft_nowhere"], monkeypatch, capsys)
    assert code == 1 and "train it first: python -m codelib.pipeline --profile tiny --only 01_sft" in err, err
    assert (run_dir / "config.json").read_text() == '{"finished": true}'
