"""GPU-only checks (QLoRA, vLLM); skipped without CUDA. Run them on a GPU machine: pytest -m gpu."""

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


def test_qlora_sft_two_steps_on_4bit_base(ckpt_root, tiny_base):
    from safetensors.torch import load_file

    from codelib.trainers import sft

    cfg = sft.Config(profile="test", stage="qlora", init=str(tiny_base), load_in_4bit=True, bf16=True, steps=2,
                     batch_size=8, learning_rate=2e-3, report_to="none", limit=32, lora_r=16, lora_alpha=32)  # fmt: skip
    run = sft.train(cfg)
    weights = load_file(str(run / "adapter_model.safetensors"))
    assert any("lora_B" in k and float(v.abs().sum()) > 0 for k, v in weights.items())


def test_vllm_generation_matches_the_hf_interface(tiny_base):
    pytest.importorskip("vllm")
    from codelib.generation import generate

    out = generate(str(tiny_base), None, ["def f(x):\n"], n=2, temperature=0.8, max_new_tokens=16, backend="vllm")
    assert len(out) == 1 and len(out[0]) == 2 and all(c.n_tokens <= 16 for c in out[0])


def test_vllm_serves_a_lora_adapter_without_merging(tiny_sft):
    pytest.importorskip("vllm")
    from codelib.generation import generate, vllm_plan

    assert vllm_plan(str(tiny_sft))["lora"] is not None
    out = generate(str(tiny_sft), None, ["def f(x):\n"] * 3, n=2, temperature=0.8, max_new_tokens=16, backend="vllm")
    assert [len(cs) for cs in out] == [2, 2, 2] and not (tiny_sft / "merged").exists()


def test_grpo_with_vllm_colocate_two_steps(tiny_sft):
    pytest.importorskip("vllm")
    import json

    from codelib.trainers import grpo

    cfg = grpo.Config(profile="test", stage="grpo_vllm", init=str(tiny_sft), steps=2, prompts_per_step=4,
                      num_generations=4, max_new_tokens=24, report_to="none", limit=16, use_vllm=True,
                      vllm_mode="colocate", vllm_gpu_memory_utilization=0.2)  # fmt: skip
    run = grpo.train(cfg)
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2] and (run / "adapter_model.safetensors").exists()
