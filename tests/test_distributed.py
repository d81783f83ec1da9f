"""Two processes on CPU (gloo) under `accelerate launch`: gradients are synchronised, so both ranks end with the
same LoRA weights, and metrics cover the whole batch."""

import json
import subprocess
import sys

import pytest
import yaml

from codelib.plumbing.params import REPO_ROOT, config_to_dict, read_jsonl
from codelib.trainers import grpo, ppo, reinforce


def launch(module: str, cfg, tmp_path):
    params = tmp_path / f"{cfg.stage}.yaml"
    params.write_text(yaml.safe_dump(config_to_dict(cfg)))
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(REPO_ROOT / "params" / "accelerate" / "cpu_2proc.yaml"),
        "-m",
        module,
        str(params),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((cfg.run_dir / "ranks.json").read_text())


@pytest.mark.slow
def test_grpo_two_processes_identical_weights(tiny_sft, tmp_path):
    cfg = grpo.Config(
        profile="test",
        stage="grpo_ddp",
        init=str(tiny_sft),
        steps=2,
        prompts_per_step=2,
        num_generations=4,
        max_new_tokens=24,
        save_every=10,
        report_to="none",
        limit=32,
        learning_rate=1e-2,
        rewards={"pass": 1.0, "length": {"alpha": 1.0}},
        threads=1,
    )
    ranks = launch("codelib.trainers.grpo", cfg, tmp_path)
    assert ranks["processes"] == 2
    a, b = ranks["trainable_sums"]
    assert a == b


@pytest.mark.slow
def test_ppo_value_head_two_processes_identical_weights(tiny_sft, tmp_path):
    import torch

    cfg = ppo.Config(
        profile="test",
        stage="ppo_ddp",
        init=str(tiny_sft),
        steps=2,
        batch_size=4,
        samples_per_task=2,
        ppo_epochs=2,
        critic="value_head",
        max_new_tokens=24,
        save_every=10,
        report_to="none",
        limit=32,
        learning_rate=1e-2,
        threads=1,
    )
    ranks = launch("codelib.trainers.ppo", cfg, tmp_path)
    assert ranks["processes"] == 2
    a, b = ranks["trainable_sums"]
    assert a == b
    head = torch.load(cfg.run_dir / "value_head.pt")
    assert float(head["weight"].abs().sum()) > 0  # the value head trained (and was saved once, by rank 0)


@pytest.mark.slow
def test_reinforce_two_processes_from_the_notebook_launcher_identical_weights(tiny_sft):
    """What a notebook with `processes: 2` does (`accelerate launch` with a live log): both ranks end with the same
    LoRA weights, metrics are logged once, and both ranks' samples are gathered."""
    from codelib.runner import launch

    cfg = reinforce.Config(
        profile="test",
        stage="reinforce_ddp",
        init=str(tiny_sft),
        steps=3,
        batch_size=8,
        max_new_tokens=24,
        save_every=10,
        report_to="none",
        limit=64,
        learning_rate=1e-2,
        threads=1,
    )
    lines = []
    run = launch.train("codelib.trainers.reinforce", cfg, processes=2, config="cpu_2proc", echo=lines.append)
    assert run == cfg.run_dir and (run / "adapter_config.json").exists()
    assert lines[0].startswith("$ ") and "--num_processes 2" in lines[0]
    ranks = json.loads((run / "ranks.json").read_text())
    assert ranks["processes"] == 2
    a, b = ranks["trainable_sums"]
    assert a == b
    rows = read_jsonl(cfg.run_dir / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3]  # logged once, by the main process
    samples = read_jsonl(cfg.run_dir / "samples.jsonl")  # both ranks' shards, gathered, written once
    assert [s["step"] for s in samples] == [s for s in (1, 2, 3) for _ in range(8)]


@pytest.mark.parametrize("name", ["single_gpu", "multi_gpu", "fsdp", "cpu_2proc"])
def test_shipped_accelerate_configs_load_and_use_only_known_options(name):
    """Each config loads with accelerate's own loader, and every FSDP option in it is one that `accelerate launch`
    knows (a misspelt option would otherwise be dropped silently on a GPU cluster). accelerate's FSDP plugin refuses
    a CPU; the gather-on-save it needs runs on CPU processes through torch's FSDP below. DeepSpeed is not shipped."""
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.commands.launch import launch_command_parser

    path = REPO_ROOT / "params" / "accelerate" / f"{name}.yaml"
    cfg = load_config_from_file(str(path))
    expected = {"single_gpu": "NO", "multi_gpu": "MULTI_GPU", "cpu_2proc": "MULTI_GPU", "fsdp": "FSDP"}
    assert str(cfg.distributed_type).split(".")[-1] == expected[name]
    options = {o.lstrip("-") for a in launch_command_parser()._actions for o in a.option_strings}
    for key in list(cfg.fsdp_config or {}) + list(cfg.deepspeed_config or {}):
        assert key in options, f"{path.name}: {key} is not an accelerate launch option"
    if name == "fsdp":
        assert cfg.fsdp_config["fsdp_sharding_strategy"] == "FULL_SHARD" and cfg.fsdp_config["fsdp_use_orig_params"]
        assert cfg.fsdp_config["fsdp_version"] == 1  # distributed.gathered_trainable_state handles 1 and 2
    assert not list((REPO_ROOT / "params" / "accelerate").glob("deepspeed*"))


# ---------------------------------------------------------------------------------------------------------------
# codelib.policy.distributed: rank-local placement, the FSDP gather on save, the refusals, GRPO's batch split

RANKS_SCRIPT = r"""
import json, sys
from pathlib import Path
from types import SimpleNamespace

import torch
from accelerate import Accelerator
from peft import LoraConfig, get_peft_model
from safetensors.torch import load_file
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.models.llama.modeling_llama import LlamaDecoderLayer

from codelib.policy.distributed import rank_device_map, save_gathered, sharding

out = Path(sys.argv[1])
acc = Accelerator(cpu=True)  # gloo, from the shipped cpu_2proc config
rank = acc.process_index
report = {"rank": rank, "device_map": rank_device_map(cuda=True)}  # what a 4-bit load on a GPU would get


class Tok:  # save_adapter writes the tokenizer beside the adapter
    def save_pretrained(self, d):
        Path(d, "tokenizer.json").write_text("{}")


def model():
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=2, vocab_size=64)
    lora = LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False,
                      modules_to_save=["norm"])
    return get_peft_model(LlamaForCausalLM(cfg), lora)


ref = {n: p.detach().clone() for n, p in model().named_parameters() if p.requires_grad}
if rank == 0:
    from codelib.policy.models import save_adapter

    save_adapter(model(), Tok(), out / "unsharded")
    want = load_file(str(out / "unsharded" / "adapter_model.safetensors"))
for version in (1, 2):
    m = model()
    if version == 1:
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy

        m = FSDP(m, use_orig_params=True, device_id=torch.device("cpu"),
                 auto_wrap_policy=ModuleWrapPolicy({LlamaDecoderLayer}))
        local = {n.replace("_fsdp_wrapped_module.", ""): p.numel() for n, p in m.named_parameters()}
    else:
        from torch.distributed.fsdp import fully_shard

        for layer in m.base_model.model.model.layers:
            fully_shard(layer)
        fully_shard(m)
        local = {n: p.to_local().numel() for n, p in m.named_parameters()}
    dest = out / f"fsdp{version}"
    save_gathered(acc, m, Tok(), dest)
    report[f"fsdp{version}"] = {"sharding": sharding(m), "sharded": any(local[n] != ref[n].numel() for n in ref)}
    if rank == 0:
        saved = load_file(str(dest / "adapter_model.safetensors"))
        report[f"fsdp{version}"]["equal"] = sorted(saved) == sorted(want) and all(
            torch.equal(saved[k], want[k]) for k in want)
        report[f"fsdp{version}"]["keys"] = len(saved)
(out / f"rank{rank}.json").write_text(json.dumps(report))
from codelib.plumbing.params import leave_together

leave_together()  # as every stage's command ends: no rank leaves with the group up while another still works
"""


@pytest.mark.slow
def test_rank_local_device_map_and_fsdp_adapters_gathered_on_save(tmp_path):
    """Two CPU processes under the shipped cpu_2proc config: each rank's 4-bit device_map names its own local index
    (accelerate's state, not torch.cuda.current_device()); an adapter (LoRA + modules_to_save) sharded by torch's FSDP1
    and FSDP2 is gathered and saved by rank 0 equal to the unsharded one, although each rank holds only shards."""
    script = tmp_path / "ranks.py"
    script.write_text(RANKS_SCRIPT)
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(REPO_ROOT / "params" / "accelerate" / "cpu_2proc.yaml"),
        str(script),
        str(tmp_path),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO_ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    reports = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["device_map"] for r in reports] == [{"": 0}, {"": 1}]
    for version in (1, 2):
        assert all(r[f"fsdp{version}"]["sharding"] == f"fsdp{version}" for r in reports)
        assert all(r[f"fsdp{version}"]["sharded"] for r in reports)  # no rank held the whole adapter
        assert reports[0][f"fsdp{version}"]["equal"] and reports[0][f"fsdp{version}"]["keys"] > 0


def test_refusals_under_sharding_name_the_fix():
    from types import SimpleNamespace

    from codelib.policy import distributed

    ddp, fsdp, ds = (
        SimpleNamespace(distributed_type=f"DistributedType.{t}") for t in ("MULTI_GPU", "FSDP", "DEEPSPEED")
    )
    distributed.refuse_sharded_loop(ddp)
    with pytest.raises(RuntimeError, match="multi_gpu.yaml"):
        distributed.refuse_sharded_loop(fsdp)
    with pytest.raises(RuntimeError, match="DeepSpeed is not supported"):
        distributed.refuse_sharded_loop(ds)
    distributed.refuse_rank0_work(fsdp, SimpleNamespace(eval_every=0))
    distributed.refuse_rank0_work(ddp, SimpleNamespace(eval_every=5))
    with pytest.raises(RuntimeError, match="eval_every: 0"):
        distributed.refuse_rank0_work(fsdp, SimpleNamespace(eval_every=5))
    assert distributed.rank_device_map(cuda=False) == {"": "cpu"}


def test_a_step_that_does_not_split_evenly_over_the_processes_is_refused(tmp_path, monkeypatch):
    """Every rank takes the same share of a step: batch_size and minibatch_size must divide by the number of
    processes, and with group minibatches each rank's share must hold whole groups (checked before a model loads)."""
    from types import SimpleNamespace

    from codelib.trainers import common, online

    monkeypatch.setenv("CODELIB_CHECKPOINTS", str(tmp_path))
    monkeypatch.setattr(common, "check_init", lambda cfg: None)
    acc = SimpleNamespace(num_processes=2, is_main_process=True, distributed_type="DistributedType.MULTI_GPU")
    monkeypatch.setattr(common, "Accelerator", lambda cpu: acc)
    refused = {
        r"batch_size \(3\) and minibatch_size \(0\) must divide by the number of processes \(2\)": dict(batch_size=3),
        r"batch_size \(4\) and minibatch_size \(3\) must divide": dict(batch_size=4, minibatch_size=3),
        r"minibatch_size \(4\) must be a multiple of samples_per_task x processes \(4 x 2\)": dict(
            batch_size=4, samples_per_task=4, minibatch_size=4, minibatch_order="groups"
        ),
    }
    for message, kw in refused.items():
        with pytest.raises(ValueError, match=message):
            common.OnlineRun(online.Config(**{"profile": "test", "samples_per_task": 2, **kw}))


def test_grpo_batches_keep_the_step_fixed_over_processes_and_fit_the_logits():
    from codelib.policy.distributed import grpo_batches

    assert grpo_batches(32, 1) == (32, 1)  # one process: the whole step in one micro-batch
    assert grpo_batches(32, 4) == (8, 1)  # four: a quarter each, the same 32 completions a step (TRL: 8 x 4 x 1)
    # mbpp-taco: 8 x 8 completions of up to 1024 + 1024 tokens over Qwen2.5's 151,936-token vocabulary
    micro, accum = grpo_batches(64, 1, 2048, 151_936)
    assert micro * accum == 64 and micro * 2048 * 151_936 * 8 <= 8 * 2**30 and micro == 2
    assert grpo_batches(32, 1, 768, 32_256) == (32, 1)  # the 1.3B profile fits in one
    with pytest.raises(ValueError, match="multiple of the process count"):
        grpo_batches(12, 8)


def test_a_launched_process_leaves_with_every_rank_and_tears_its_group_down(monkeypatch):
    """main_train ends a multi-process run with a barrier, then destroy_process_group (in that order), after train
    returned; one process, or none initialised, does neither (a rank that left with the group up was aborted by gloo
    at exit once, failing a run that had trained)."""
    from types import SimpleNamespace

    from codelib.plumbing import params

    calls = []

    def fake(initialized, world):
        return SimpleNamespace(
            is_available=lambda: True,
            is_initialized=lambda: initialized,
            get_world_size=lambda: world,
            barrier=lambda: calls.append("barrier"),
            destroy_process_group=lambda: calls.append("destroy"),
        )

    def train(cfg):
        calls.append("train")
        return "out"

    monkeypatch.setattr(params, "main_config", lambda cls, argv, command: None)
    for initialized, world, want in (
        (True, 2, ["train", "barrier", "destroy"]),
        (True, 1, ["train"]),
        (False, 2, ["train"]),
    ):
        calls.clear()
        monkeypatch.setitem(sys.modules, "torch.distributed", fake(initialized, world))
        assert params.main_train(object, train, argv=[]) == "out"
        assert calls == want
