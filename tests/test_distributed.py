"""Two processes on CPU (gloo) under `accelerate launch`: gradients are synchronised, so both ranks end with the
same LoRA weights, and metrics cover the whole batch."""

import json
import subprocess
import sys

import pytest
import yaml

from codelib.params import REPO_ROOT, config_to_dict, read_jsonl
from codelib.trainers import grpo, ppo, reinforce


def launch(module: str, cfg, tmp_path):
    params = tmp_path / f"{cfg.stage}.yaml"
    params.write_text(yaml.safe_dump(config_to_dict(cfg)))
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
           str(REPO_ROOT / "params" / "accelerate" / "cpu_2proc.yaml"), "-m", module, str(params)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((cfg.run_dir / "ranks.json").read_text())


@pytest.mark.slow
def test_reinforce_two_processes_identical_weights(tiny_sft, tmp_path):
    cfg = reinforce.Config(profile="test", stage="reinforce_ddp", init=str(tiny_sft), steps=3, batch_size=8,
                           max_new_tokens=24, save_every=10, report_to="none", limit=64, learning_rate=1e-2,
                           threads=1)  # fmt: skip
    ranks = launch("codelib.trainers.reinforce", cfg, tmp_path)
    assert ranks["processes"] == 2
    a, b = ranks["trainable_sums"]
    assert a == b
    rows = read_jsonl(cfg.run_dir / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3]  # logged once, by the main process
    samples = read_jsonl(cfg.run_dir / "samples.jsonl")  # both ranks' shards, gathered, written once
    assert [s["step"] for s in samples] == [s for s in (1, 2, 3) for _ in range(8)]
    assert (cfg.run_dir / "adapter_config.json").exists()


@pytest.mark.slow
def test_grpo_two_processes_identical_weights(tiny_sft, tmp_path):
    cfg = grpo.Config(profile="test", stage="grpo_ddp", init=str(tiny_sft), steps=2, prompts_per_step=2,
                      num_generations=4, max_new_tokens=24, save_every=10, report_to="none", limit=32,
                      learning_rate=1e-2, rewards={"pass": 1.0, "length": {"alpha": 1.0}}, threads=1)  # fmt: skip
    ranks = launch("codelib.trainers.grpo", cfg, tmp_path)
    assert ranks["processes"] == 2
    a, b = ranks["trainable_sums"]
    assert a == b


@pytest.mark.slow
def test_ppo_value_head_two_processes_identical_weights(tiny_sft, tmp_path):
    import torch

    cfg = ppo.Config(profile="test", stage="ppo_ddp", init=str(tiny_sft), steps=2, batch_size=4, samples_per_task=2,
                     ppo_epochs=2, critic="value_head", max_new_tokens=24, save_every=10, report_to="none", limit=32,
                     learning_rate=1e-2, threads=1)  # fmt: skip
    ranks = launch("codelib.trainers.ppo", cfg, tmp_path)
    assert ranks["processes"] == 2
    a, b = ranks["trainable_sums"]
    assert a == b
    head = torch.load(cfg.run_dir / "value_head.pt")
    assert float(head["weight"].abs().sum()) > 0  # the value head trained (and was saved once, by rank 0)


@pytest.mark.slow
def test_notebook_launcher_streams_the_log_and_returns_the_run(tiny_sft):
    from codelib import launch

    cfg = reinforce.Config(profile="test", stage="reinforce_launch", init=str(tiny_sft), steps=1, batch_size=4,
                           max_new_tokens=16, save_every=10, report_to="none", limit=16, threads=1)  # fmt: skip
    lines = []
    run = launch.train("codelib.trainers.reinforce", cfg, processes=2, config="cpu_2proc", echo=lines.append)
    assert run == cfg.run_dir and (run / "adapter_config.json").exists()
    assert lines[0].startswith("$ ") and "--num_processes 2" in lines[0]
    assert json.loads((run / "ranks.json").read_text())["processes"] == 2


@pytest.mark.parametrize(
    "name", ["single_gpu", "multi_gpu", "deepspeed_zero2", "deepspeed_zero3", "fsdp", "cpu_2proc"]
)
def test_shipped_accelerate_configs_load_and_use_only_known_options(name):
    """Each config loads with accelerate's own loader, and every FSDP / DeepSpeed option in it is one that
    `accelerate launch` knows (a misspelt option would otherwise be dropped silently on a GPU cluster).
    FSDP and DeepSpeed themselves need GPUs (accelerate's FSDP plugin refuses a CPU), so they run on GPU machines."""
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.commands.launch import launch_command_parser

    path = REPO_ROOT / "params" / "accelerate" / f"{name}.yaml"
    cfg = load_config_from_file(str(path))
    expected = {"single_gpu": "NO", "multi_gpu": "MULTI_GPU", "cpu_2proc": "MULTI_GPU", "fsdp": "FSDP",
                "deepspeed_zero2": "DEEPSPEED", "deepspeed_zero3": "DEEPSPEED"}  # fmt: skip
    assert str(cfg.distributed_type).split(".")[-1] == expected[name]
    options = {o.lstrip("-") for a in launch_command_parser()._actions for o in a.option_strings}
    for key in list(cfg.fsdp_config or {}) + list(cfg.deepspeed_config or {}):
        assert key in options, f"{path.name}: {key} is not an accelerate launch option"
    if name.startswith("deepspeed"):
        assert cfg.deepspeed_config["zero_stage"] == int(name[-1])
    if name == "fsdp":
        assert cfg.fsdp_config["fsdp_sharding_strategy"] == "FULL_SHARD" and cfg.fsdp_config["fsdp_use_orig_params"]
