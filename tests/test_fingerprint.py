"""Caches keyed on code: a changed extraction, judging or scoring rule changes eval summaries' and stages' keys."""

from codelib.plumbing import fingerprint
from codelib.runner import pipeline


def _tree(root, files: dict[str, str]):
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def test_hash_follows_every_judging_file_module_or_package(tmp_path):
    _tree(
        tmp_path,
        {
            "engine/extraction.py": "a",
            "engine/rewards.py": "b",
            "engine/lint.py": "c",
            "sandbox.py": "d",
            "policy/models.py": "x",
        },
    )
    before = fingerprint.code_hash(fingerprint.JUDGE, tmp_path)
    (tmp_path / "policy" / "models.py").write_text("y")  # not judging code
    assert fingerprint.code_hash(fingerprint.JUDGE, tmp_path) == before
    (tmp_path / "engine" / "extraction.py").write_text("a2")
    changed = fingerprint.code_hash(fingerprint.JUDGE, tmp_path)
    assert changed != before
    # the sandbox turned into a package: every .py file under it counts, wherever it sits
    (tmp_path / "sandbox.py").unlink()
    _tree(tmp_path, {"sandbox/__init__.py": "", "sandbox/judge.py": "j", "sandbox/worker/harness.py": "h"})
    pkg = fingerprint.code_hash(fingerprint.JUDGE, tmp_path)
    (tmp_path / "sandbox" / "worker" / "harness.py").write_text("h2")
    assert fingerprint.code_hash(fingerprint.JUDGE, tmp_path) != pkg
    names = [p.relative_to(tmp_path).as_posix() for p in fingerprint.files(fingerprint.JUDGE, tmp_path)]
    assert "sandbox/worker/harness.py" in names and "policy/models.py" not in names


def test_eval_settings_and_stage_keys_carry_the_code_hash():
    from codelib.evaluation.evaluator import EvalConfig, settings_for
    from codelib.tasks import load_tasks

    cfg = EvalConfig(limit=2)
    settings = settings_for(cfg, "base", load_tasks("synthetic", "test")[:2])
    assert settings["code"] == fingerprint.code_hash(fingerprint.SCORE)
    assert pipeline.code_key("06_eval") == fingerprint.code_hash(fingerprint.SCORE)
    assert pipeline.code_key("02_reinforce") == fingerprint.code_hash(fingerprint.JUDGE)
    assert pipeline.code_key("01_sft") == "" and pipeline.code_key("07_plots") == ""
