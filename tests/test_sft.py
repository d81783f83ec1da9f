"""SFT: TRL SFTTrainer + LoRA changes the adapter weights, trains on completion tokens only, and resumes."""

import json

import pytest

from codelib.plumbing.params import read_jsonl
from codelib.trainers import sft


def test_dataset_is_prompt_completion():
    ds = sft.build_dataset(sft.Config(limit=5))
    assert ds.column_names == ["prompt", "completion"] and len(ds) == 5
    assert ds[0]["completion"].startswith("    return")


def test_bad_config_says_what_to_fix():
    with pytest.raises(ValueError, match="report_to must be"):
        sft.Config(report_to="mlflow")
    with pytest.raises(ValueError, match="lora_r must be positive"):
        sft.Config(lora_r=0)


def test_qlora_without_cuda_is_a_clear_error(ckpt_root, tiny_base):
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA present: 4-bit loading works here")
    with pytest.raises(RuntimeError, match="needs CUDA"):
        sft.train(sft.Config(profile="test", stage="qlora", init=str(tiny_base), load_in_4bit=True, report_to="none"))


@pytest.mark.slow
def test_two_steps_change_lora_and_resume(ckpt_root, tiny_base):
    from safetensors.torch import load_file

    kw = dict(
        profile="test",
        stage="sft_resume",
        init=str(tiny_base),
        batch_size=8,
        learning_rate=2e-3,
        logging_steps=1,
        save_every=1,
        report_to="none",
        limit=64,
        modules_to_save=["norm"],
    )
    run = sft.train(sft.Config(steps=2, **kw))
    weights = load_file(str(run / "adapter_model.safetensors"))
    assert any("lora_B" in k and float(v.abs().sum()) > 0 for k, v in weights.items())  # B starts at zero
    assert any("norm" in k for k in weights)  # modules_to_save travel with the adapter
    assert json.loads((run / "adapter_config.json").read_text())["base_model_name_or_path"] == str(tiny_base)
    rows = [r for r in read_jsonl(run / "metrics.jsonl") if "loss" in r]
    assert [r["step"] for r in rows] == [1, 2]
    # started again with more steps: resumes from checkpoint-2 instead of starting over
    sft.train(sft.Config(steps=3, **kw))
    rows = [r for r in read_jsonl(run / "metrics.jsonl") if "loss" in r]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert json.loads((run / "train_summary.json").read_text())["steps"] == 3
    # the same finished run started again: kept as it is (transformers' Trainer would take a step past the end)
    adapter = (run / "adapter_model.safetensors").read_bytes()
    sft.train(sft.Config(steps=3, **kw))
    assert [r["step"] for r in read_jsonl(run / "metrics.jsonl") if "loss" in r] == [1, 2, 3]
    assert (run / "adapter_model.safetensors").read_bytes() == adapter
    # other settings (a different limit, so other rows): its checkpoints are not resumed; the run starts over
    sft.train(sft.Config(steps=3, **{**kw, "limit": 48}))
    assert sorted(p.name for p in (run / "checkpoint.previous").iterdir()) == ["checkpoint-2", "checkpoint-3"]
    assert json.loads((run / "train_summary.json").read_text()) == {
        "stage": "sft_resume",
        "steps": 3,
        "train_tasks": 48,
    }


def test_a_trl_run_resumes_only_checkpoints_of_its_own_settings_and_data(tmp_path, capsys):
    from codelib.plumbing.checkpoints import data_digest, trl_resume_point

    for n in (5, 10):
        (tmp_path / f"checkpoint-{n}").mkdir()
    # written before runs recorded a fingerprint: not trusted, set aside
    assert trl_resume_point(tmp_path, "a/" + data_digest([1, 2])) is None
    assert "starting over" in capsys.readouterr().out
    assert sorted(p.name for p in (tmp_path / "checkpoint.previous").iterdir()) == ["checkpoint-10", "checkpoint-5"]
    (tmp_path / "checkpoint-3").mkdir()  # written by the run that recorded "a/..."
    assert trl_resume_point(tmp_path, "a/" + data_digest([1, 2])) == str(tmp_path / "checkpoint-3")
    assert trl_resume_point(tmp_path, "a/" + data_digest([1, 3])) is None  # the same settings, other rows
    assert not (tmp_path / "checkpoint-3").exists() and (tmp_path / "checkpoint.previous" / "checkpoint-3").exists()


def test_a_resume_at_another_thread_count_says_its_floats_differ(tmp_path, capsys):
    """The thread count is part of a run's floats: a checkpoint records it, and a resume at another count goes on
    but says so, with the setting that reproduces the uninterrupted run (own loops and TRL-based stages alike)."""
    import torch

    from codelib.plumbing.checkpoints import load_checkpoint, save_checkpoint, trl_resume_point

    before = torch.get_num_threads()
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    try:
        torch.set_num_threads(2)
        save_checkpoint(tmp_path, model, opt, step=3, fingerprint="f")
        assert load_checkpoint(tmp_path, model, opt, fingerprint="f")[0] == 3
        assert "threads" not in capsys.readouterr().out  # the same count: nothing to say
        torch.set_num_threads(1)
        assert load_checkpoint(tmp_path, model, opt, fingerprint="f")[0] == 3  # it still resumes
        said = capsys.readouterr().out
        assert "resuming at 1 torch threads" in said and "written at 2" in said and "threads: 2" in said
        # a TRL-based run: resume.json records the count of the start that wrote its checkpoints
        trl = tmp_path / "trl"
        trl.mkdir()
        torch.set_num_threads(2)
        assert trl_resume_point(trl, "a") is None  # a fresh start records 2
        (trl / "checkpoint-4").mkdir()
        assert trl_resume_point(trl, "a") == str(trl / "checkpoint-4")
        assert "threads" not in capsys.readouterr().out
        torch.set_num_threads(1)
        assert trl_resume_point(trl, "a") == str(trl / "checkpoint-4")
        assert "resuming at 1 torch threads" in capsys.readouterr().out
    finally:
        torch.set_num_threads(before)
