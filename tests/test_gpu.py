"""GPU-only checks (QLoRA, vLLM, placement); skipped without CUDA. Run them on a GPU machine: pytest -m gpu
(tools/gpu_run.py runs this file first). The CPU tests at the end check tools/gpu_run.py itself."""

import pytest
import torch

gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.mark.gpu
@gpu
def test_qlora_sft_two_steps_on_4bit_base(ckpt_root, tiny_base):
    from safetensors.torch import load_file

    from codelib.trainers import sft

    cfg = sft.Config(
        profile="test",
        stage="qlora",
        init=str(tiny_base),
        load_in_4bit=True,
        bf16=True,
        steps=2,
        batch_size=8,
        learning_rate=2e-3,
        report_to="none",
        limit=32,
        lora_r=16,
        lora_alpha=32,
    )
    run = sft.train(cfg)
    weights = load_file(str(run / "adapter_model.safetensors"))
    assert any("lora_B" in k and float(v.abs().sum()) > 0 for k, v in weights.items())
    assert {v.dtype for v in weights.values()} == {torch.float32}  # TRL's bf16 cast undone (models.adapters_fp32)


@pytest.mark.gpu
@gpu
def test_vllm_generation_matches_the_hf_interface(tiny_base):
    pytest.importorskip("vllm")
    from codelib.policy.generation import generate

    out = generate(str(tiny_base), None, ["def f(x):\n"], n=2, temperature=0.8, max_new_tokens=16, backend="vllm")
    assert len(out) == 1 and len(out[0]) == 2 and all(c.n_tokens <= 16 for c in out[0])


@pytest.mark.gpu
@gpu
def test_vllm_serves_a_lora_adapter_without_merging(tiny_sft):
    pytest.importorskip("vllm")
    from codelib.policy.generation import generate, vllm_plan

    assert vllm_plan(str(tiny_sft))["lora"] is not None
    out = generate(str(tiny_sft), None, ["def f(x):\n"] * 3, n=2, temperature=0.8, max_new_tokens=16, backend="vllm")
    assert [len(cs) for cs in out] == [2, 2, 2] and not (tiny_sft / "merged").exists()


@pytest.mark.gpu
@gpu
def test_grpo_with_vllm_colocate_two_steps(tiny_sft):
    pytest.importorskip("vllm")
    import json

    from codelib.trainers import grpo

    cfg = grpo.Config(
        profile="test",
        stage="grpo_vllm",
        backend="trl",
        init=str(tiny_sft),
        steps=2,
        prompts_per_step=4,
        num_generations=4,
        max_new_tokens=24,
        report_to="none",
        limit=16,
        use_vllm=True,
        vllm_mode="colocate",
        vllm_gpu_memory_utilization=0.2,
    )
    run = grpo.train(cfg)
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2] and (run / "adapter_model.safetensors").exists()


@pytest.mark.gpu
@gpu
def test_a_policy_for_inference_is_bf16_on_the_gpu_and_4bit_loads_on_this_rank(tiny_base):
    from codelib.policy.distributed import rank_device_map
    from codelib.policy.models import load_policy

    model, tok = load_policy(tiny_base)
    assert model.device.type == "cuda" and model.dtype == torch.bfloat16
    ids = tok(["def f(x):\n"], return_tensors="pt")["input_ids"].to(model.device)
    assert model(ids).logits.device.type == "cuda"
    assert rank_device_map() == {"": 0}  # one process: local index 0
    q, _ = load_policy(tiny_base, load_in_4bit=True)
    assert q.is_loaded_in_4bit and next(q.parameters()).device.type == "cuda"


@pytest.mark.gpu
@gpu
def test_trl_grpo_qlora_trains_fp32_adapters(tiny_sft):
    from safetensors.torch import load_file

    from codelib.trainers import grpo

    cfg = grpo.Config(
        profile="test",
        stage="grpo_qlora_trl",
        backend="trl",
        init=str(tiny_sft),
        steps=2,
        prompts_per_step=2,
        num_generations=4,
        max_new_tokens=16,
        report_to="none",
        limit=8,
        load_in_4bit=True,
        learning_rate=1e-3,
    )
    weights = load_file(str(grpo.train(cfg) / "adapter_model.safetensors"))
    assert {v.dtype for v in weights.values()} == {torch.float32}


@pytest.mark.gpu
@gpu
def test_the_engine_checkpoints_activations_on_a_gpu(ckpt_root, tiny_base):
    """A bf16 LoRA policy on CUDA recomputes activations in the backward pass (a 7B PPO update ran out of memory
    without it); the two steps train and write their adapter."""
    from codelib.policy.logprobs import activations_checkpointed
    from codelib.policy.models import add_lora
    from codelib.trainers import reinforce

    cfg = reinforce.Config(
        profile="test",
        stage="gpu_ckpt",
        init=str(tiny_base),
        steps=2,
        batch_size=4,
        max_new_tokens=16,
        report_to="none",
        limit=8,
    )
    model, _ = add_lora(cfg)
    assert activations_checkpointed(model)
    run = reinforce.train(cfg)
    assert (run / "adapter_model.safetensors").is_file()


@pytest.mark.gpu
@gpu
def test_vllm_starts_beside_a_loaded_model(tiny_base):
    pytest.importorskip("vllm")
    from codelib.policy.models import load_policy
    from codelib.policy.vllm_backend import load_vllm

    hf, _ = load_policy(tiny_base)  # holds GPU memory: vLLM's default 0.92 share would refuse to start
    llm, _ = load_vllm(str(tiny_base))
    assert llm is not None and hf is not None


# ---------------------------------------------------------------------------------------------------------------
# tools/gpu_run.py, on any machine


def _gpu_run():
    import importlib.util

    from codelib.plumbing.params import REPO_ROOT

    spec = importlib.util.spec_from_file_location("gpu_run", REPO_ROOT / "tools" / "gpu_run.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_gpu_run_downloads_cpython_312_manylinux_wheels_of_the_pins():
    import re

    from codelib.plumbing.params import REPO_ROOT

    g = _gpu_run()
    cmd = g.download_command(REPO_ROOT / ".whl")
    assert cmd[cmd.index("--python-version") + 1] == "3.12" and "--no-deps" in cmd and "--only-binary=:all:" in cmd
    assert all(p.startswith("manylinux") and p.endswith("x86_64") for p in cmd[cmd.index("--platform") + 1 :: 2][:6])
    pins = dict(
        line.split("#")[0].strip().split("==")
        for line in (REPO_ROOT / "requirements.txt").read_text().splitlines()
        if re.match(r"^[A-Za-z]", line)
    )
    for pin in g.WHEELS:  # the project's pins, where the project pins them
        name, version = pin.split("==")
        assert pins.get(name, version) == version, pin


def test_gpu_run_installs_exactly_the_missing_or_other_version_pins(tmp_path, monkeypatch):
    import importlib.metadata

    g = _gpu_run()
    for pin in g.WHEELS:
        name, version = pin.split("==")
        (tmp_path / f"{name}-{version}-py3-none-any.whl").write_bytes(b"")
    installed = {"peft": "0.21.2", "dill": "0.3.8"}  # peft at the pin, dill at another version, the rest absent

    def version(name):
        if name in installed:
            return installed[name]
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", version)
    todo, status = g.needed(tmp_path)
    assert sorted(w.name.split("-")[0] for w in todo) == ["bitsandbytes", "datasets", "dill", "multiprocess", "trl"]
    assert status["dill"] == ("0.3.8", "0.4.1") and status["trl"] == (None, "1.16.0")
    (tmp_path / "trl-1.16.0-py3-none-any.whl").unlink()
    with pytest.raises(SystemExit, match="trl==1.16.0 is missing"):
        g.needed(tmp_path)


def test_bench_gpu_keeps_every_row_when_a_trainer_or_the_eval_fails(tmp_path, capsys):
    """bench.gpu's report reads a failed trainer's row (an OOM) and a failed eval child; write_json is atomic."""
    import json
    from types import SimpleNamespace

    from bench import gpu as bench

    res = {
        "arch": "deepseek-1.3b",
        "device": "H100",
        "date": "d",
        "steps": 3,
        "batch": 16,
        "new_tokens": 256,
        "params_N": 1.35e9,
        "eval": None,
        "rows": [
            {"trainer": "sft", "quant": "lora", "step_s": 1.0, "tokens_per_s": 100.0, "peak_gb": 3.0, "mfu": 0.3},
            {"trainer": "ppo", "quant": "lora", "error": "OutOfMemoryError: CUDA out of memory", "peak_gb": 79.0},
        ],
    }
    out = tmp_path / "b.json"
    bench.write_json(str(out), res)
    assert json.loads(out.read_text())["rows"][1]["error"].startswith("OutOfMemoryError")
    assert [p.name for p in tmp_path.iterdir()] == ["b.json"]  # no temporary left beside it
    a = SimpleNamespace(arch="no-such-arch", new_tokens=8, eval_samples=1, dataset="humaneval", batch=4, steps=2)
    res["eval"] = bench.eval_in_child(a, tmp_path)  # the child exits with an error: recorded, not raised
    assert "error" in res["eval"] and "no-such-arch" in res["eval"]["error"]
    bench.report(res)
    printed = capsys.readouterr().out
    assert "ppo        lora   failed: OutOfMemoryError" in printed and "evaluation generate failed" in printed


def test_gpu_run_reads_a_step_result_from_stdout_not_from_a_bar_on_stderr(tmp_path):
    # the first GPU run's pipeline took the 1.3B build's stderr bar ("Writing model shards: 100%|...") for the
    # model's path: init={Writing model shards: ...} failed the SFT stage
    import sys

    run = _gpu_run().Run(tmp_path, 0, dict(__import__("os").environ))
    code = (
        "import sys; print('/tmp/random-deepseek-1.3b'); print('Writing model shards: 100%|#| 1/1', file=sys.stderr)"
    )
    rec = run.sh("build", [sys.executable, "-c", code], timeout=60)
    assert rec["status"] == "ok" and rec["stdout"].strip().splitlines()[-1] == "/tmp/random-deepseek-1.3b"
    assert rec["tail"].strip().splitlines()[-1].startswith("Writing model shards")


def test_gpu_run_pipeline_runs_the_stages_asked_for_and_keeps_the_earlier_records(tmp_path):
    """A budget that stops the 1.3B pipeline after PPO: a second call with --stages grpo,dpo,eval runs the build
    (cached on the machine) and those three only, and pipeline.json keeps the first call's stages."""
    import json
    import os

    g = _gpu_run()
    env = {**os.environ, "CODELIB_CHECKPOINTS": str(tmp_path / "work" / "checkpoints")}
    ran: list[tuple[str, list[str]]] = []

    def sh(name, cmd, timeout=0, expect=""):
        ran.append((name, cmd))
        return {"step": name, "status": "ok", "stdout": "/work/random-deepseek-1.3b\n"}

    first = g.Run(tmp_path / "out", 0, env)
    first.sh = sh
    g.pipeline(first, 2, stages=("sft", "reinforce", "ppo"))
    assert [n for n, _ in ran] == ["pipeline/build", "pipeline/sft", "pipeline/reinforce", "pipeline/ppo"]
    ran.clear()
    second = g.Run(tmp_path / "out", 0, env)
    second.sh = sh
    g.pipeline(second, 2, stages=("grpo", "dpo", "eval"))
    assert [n for n, _ in ran] == ["pipeline/build", "pipeline/grpo", "pipeline/dpo", "pipeline/eval"]
    assert [c[2] for _, c in ran[1:]] == [
        "codelib.trainers.grpo",
        "codelib.trainers.dpo",
        "codelib.evaluation.evaluator",
    ]
    steps = [r["step"] for r in json.loads((tmp_path / "out" / "pipeline.json").read_text())]
    assert steps == [f"pipeline/{s}" for s in ("sft", "reinforce", "ppo", "build", "grpo", "dpo", "eval")]
    with pytest.raises(SystemExit):  # a misspelt stage is refused before anything is installed or run
        g.main(["run", "--stages", "grpo,evl", "--out", str(tmp_path / "x")])
