"""The vLLM paths without vLLM: a stand-in `vllm` module records what codelib asks of it.

vLLM itself needs a GPU (tests/test_gpu.py runs it there). These tests check our side of the contract on any
machine: which model and LoRA request vLLM is handed for each kind of checkpoint, the sampling parameters, that
outputs come back in prompt order and are trimmed exactly like the HF path's, and that the evaluator and GRPO
pass `backend: vllm` / `use_vllm` through.
"""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import pytest

from codelib.evaluation import evaluator
from codelib.evaluation.evaluator import EvalConfig
from codelib.policy import generation
from codelib.tasks import load_tasks


class CharTokenizer:
    """One token per character (id = code point); id 0 is eos."""

    eos_token_id = 0

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(i) for i in ids if i != 0)

    def batch_decode(self, rows, skip_special_tokens=True):
        return [self.decode(r) for r in rows]


# The keywords vLLM 0.30.0 takes (read from its wheel: vllm/entrypoints/llm.py LLM.__init__'s named parameters, the
# EngineArgs fields (vllm/engine/arg_utils.py) codelib passes through **kwargs, and SamplingParams' fields): the
# stand-ins below refuse any other, so a misspelt or renamed keyword fails here rather than on a GPU.
VLLM_LLM_KWARGS = {
    "dtype",
    "seed",
    "gpu_memory_utilization",
    "enforce_eager",
    "tensor_parallel_size",
    "quantization",
    "max_model_len",
    "enable_lora",
    "max_lora_rank",
    "max_loras",
    "tokenizer",
    "trust_remote_code",
}
VLLM_SAMPLING_FIELDS = {
    "n",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "seed",
    "stop",
    "stop_token_ids",
    "max_tokens",
    "min_tokens",
    "logprobs",
    "include_stop_str_in_output",
    "skip_special_tokens",
    "ignore_eos",
}


class FakeLLM:
    """Answers each prompt with `answers[prompt]` (per character), or echoes a fixed body, n times."""

    made: list[FakeLLM] = []
    answers: dict[str, str] = {}

    def __init__(self, model, **kwargs):
        assert set(kwargs) <= VLLM_LLM_KWARGS, sorted(set(kwargs) - VLLM_LLM_KWARGS)
        self.model, self.kwargs, self.calls = model, kwargs, []
        FakeLLM.made.append(self)

    def get_tokenizer(self):
        return CharTokenizer()

    def generate(self, prompts, params, *, lora_request=None):  # vLLM 0.30: lora_request is keyword-only
        self.calls.append((list(prompts), params, lora_request))
        out = []
        for p in prompts:
            text = FakeLLM.answers.get(p, "    return x\n") + "\ndef unused():\n    return 0\n"
            ids = [ord(c) for c in text][: params.max_tokens]
            out.append(SimpleNamespace(outputs=[SimpleNamespace(token_ids=list(ids)) for _ in range(params.n)]))
        return out


class SamplingParams:
    def __init__(self, **kwargs):
        assert set(kwargs) <= VLLM_SAMPLING_FIELDS, sorted(set(kwargs) - VLLM_SAMPLING_FIELDS)
        self.__dict__.update(kwargs)


class LoRARequest:  # vLLM 0.30: a msgspec struct (lora_name, lora_int_id >= 1, lora_path)
    def __init__(self, lora_name, lora_int_id, lora_path=""):
        assert lora_int_id >= 1 and lora_path
        self.name, self.lora_id, self.path = lora_name, lora_int_id, lora_path


@pytest.fixture
def fake_vllm(monkeypatch):
    vllm = types.ModuleType("vllm")
    vllm.LLM, vllm.SamplingParams = FakeLLM, SamplingParams
    lora, request = types.ModuleType("vllm.lora"), types.ModuleType("vllm.lora.request")
    request.LoRARequest = LoRARequest
    vllm.lora, lora.request = lora, request
    for name, mod in (("vllm", vllm), ("vllm.lora", lora), ("vllm.lora.request", request)):
        monkeypatch.setitem(sys.modules, name, mod)
    FakeLLM.made, FakeLLM.answers = [], {}
    yield vllm


def test_model_dir_is_served_as_is_and_outputs_are_trimmed_like_hf(fake_vllm, tiny_base):
    out = generation.generate(
        str(tiny_base),
        None,
        ["def f(x):\n", "def g(y):\n"],
        n=3,
        temperature=0.7,
        top_p=0.9,
        max_new_tokens=40,
        seed=5,
        backend="vllm",
    )
    (llm,) = FakeLLM.made
    assert llm.model == str(tiny_base) and "enable_lora" not in llm.kwargs
    prompts, params, lora = llm.calls[0]
    assert prompts == ["def f(x):\n", "def g(y):\n"] and lora is None
    assert (params.n, params.temperature, params.top_p, params.max_tokens, params.seed) == (3, 0.7, 0.9, 40, 5)
    assert params.stop == list(generation.STOP_SEQUENCES)
    assert [len(cs) for cs in out] == [3, 3]
    c = out[0][0]
    # cut before "\ndef", the stop sequence's own tokens kept in ids (as the HF path does)
    full = "    return x\n\ndef unused():\n    return 0\n"
    stop_end = generation.find_stop(full, generation.STOP_SEQUENCES)[1]
    assert c.text == "    return x\n" and c.finished and c.ids == [ord(ch) for ch in full[:stop_end]]


def test_greedy_asks_once_and_hands_out_copies(fake_vllm, tiny_base):
    out = generation.generate(str(tiny_base), None, ["def f(x):\n"], n=4, temperature=0.0, backend="vllm")
    (llm,) = FakeLLM.made
    assert llm.calls[0][1].n == 1 and llm.calls[0][1].top_p == 1.0
    assert len(out[0]) == 4 and len({c.text for c in out[0]}) == 1


def test_plain_lora_adapter_is_served_without_merging(fake_vllm, tiny_sft, tmp_path):
    import shutil

    # a copy: the session's adapter may already carry a merged/ dir that RL tests made
    tiny_sft = Path(
        shutil.copytree(tiny_sft, tmp_path / "sft", ignore=shutil.ignore_patterns("merged", "checkpoint-*"))
    )
    plan = generation.vllm_plan(str(tiny_sft))
    assert plan["lora"] == str(tiny_sft.resolve()) and not plan["merged"]
    generation.generate(str(tiny_sft), None, ["def f(x):\n"], n=1, temperature=1.0, backend="vllm")
    (llm,) = FakeLLM.made
    base = json.loads((tiny_sft / "adapter_config.json").read_text())["base_model_name_or_path"]
    assert llm.model == base and llm.kwargs["enable_lora"] is True
    assert llm.kwargs["max_lora_rank"] >= json.loads((tiny_sft / "adapter_config.json").read_text())["r"]
    request = llm.calls[0][2]
    assert isinstance(request, LoRARequest) and request.path == str(tiny_sft.resolve())
    assert not (tiny_sft / "merged").exists()


def test_adapter_with_fully_trained_modules_is_merged_first(fake_vllm, ckpt_root, tiny_base):
    from codelib.trainers import sft

    cfg = sft.Config(
        profile="test",
        stage="sft_norms",
        init=str(tiny_base),
        steps=1,
        batch_size=4,
        report_to="none",
        limit=8,
        modules_to_save=["norm"],
    )
    run = sft.train(cfg)
    plan = generation.vllm_plan(str(run))
    assert plan["lora"] is None and "modules_to_save" in plan["merged"]
    assert plan["model"] == str(run / "merged") and (run / "merged" / "config.json").exists()
    generation.generate(str(run), None, ["def f(x):\n"], n=1, temperature=1.0, backend="vllm")
    (llm,) = FakeLLM.made
    assert llm.model == str(run / "merged") and llm.calls[0][2] is None


def test_lora_rank_slots():
    assert [generation._lora_rank_slot(r) for r in (4, 8, 9, 32, 300)] == [8, 8, 16, 32, 320]
    with pytest.raises(ValueError, match="merge"):
        generation._lora_rank_slot(1024)


def test_evaluator_backend_vllm_scores_what_vllm_returned(fake_vllm, tmp_path):
    tasks = load_tasks("humaneval", "test", limit=3)
    FakeLLM.answers = {t.prompt: t.canonical_solution for t in tasks}
    cfg = EvalConfig(
        profile="test",
        dataset="humaneval",
        split="test",
        limit=3,
        backend="vllm",
        n_samples=2,
        checkpoints={"hub": "someone/not-downloadable"},
        baseline="",
        max_new_tokens=2000,
        bootstrap_iters=50,
    )
    summary = evaluator.evaluate_checkpoint(cfg, "hub", tasks, tmp_path / "hub")
    (llm,) = FakeLLM.made
    assert llm.model == "someone/not-downloadable"  # handed to vLLM, never to HF from_pretrained
    assert llm.calls[0][0] == [t.prompt for t in tasks]
    assert summary["pass@1"] == 1.0
    rows = [json.loads(x) for x in (tmp_path / "hub" / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == 6 and all(r["passed"] and "unused" not in r["completion"] for r in rows)


def test_grpo_passes_vllm_settings_to_trl():
    from codelib.trainers import grpo, grpo_trl

    cfg = grpo.Config(
        backend="trl",
        use_vllm=True,
        vllm_mode="server",
        vllm_server_url="http://10.0.0.2:8001",
        vllm_gpu_memory_utilization=0.5,
    )
    args = grpo_trl.grpo_args(cfg, "/tmp/unused")
    assert args.use_vllm and args.vllm_mode == "server" and args.vllm_server_base_url == "http://10.0.0.2:8001"
    assert args.vllm_gpu_memory_utilization == 0.5
    colocate = grpo_trl.grpo_args(grpo.Config(backend="trl", use_vllm=True), "/tmp/unused")
    assert colocate.vllm_mode == "colocate" and colocate.vllm_server_base_url is None
    with pytest.raises(ValueError, match="vllm_gpu_memory_utilization"):
        grpo.Config(vllm_gpu_memory_utilization=1.5)
    # TRL pushes merged weights into vLLM's bf16 copy of the base: a 4-bit base cannot go there
    with pytest.raises(ValueError, match="load_in_4bit: false"):
        grpo.Config(backend="trl", use_vllm=True, load_in_4bit=True)


def test_trl_grpo_step_is_fixed_over_processes_and_split_to_fit():
    """TRL's generation batch is per_device x processes x steps_per_generation: grpo_args keeps it at P x G however
    many processes share it, in micro-batches whose logits fit (mbpp-taco: 64 x 2048 tokens x 151,936 vocab)."""
    from codelib.trainers import grpo, grpo_trl

    cfg = grpo.Config(
        backend="trl", prompts_per_step=8, num_generations=8, max_prompt_tokens=1024, max_new_tokens=1024
    )
    whole = grpo_trl.grpo_args(cfg, "/tmp/unused")
    assert (whole.per_device_train_batch_size, whole.gradient_accumulation_steps) == (64, 1)
    assert whole.generation_batch_size == 64
    taco = grpo_trl.grpo_args(cfg, "/tmp/unused", vocab=151_936)
    assert (taco.per_device_train_batch_size, taco.gradient_accumulation_steps) == (2, 32)
    assert taco.generation_batch_size == 64 and taco.steps_per_generation == 32


def test_dpo_candidates_sampled_on_vllm_never_load_the_policy_here(fake_vllm, ckpt_root, tiny_sft, monkeypatch):
    from codelib.policy import models
    from codelib.trainers import dpo

    def boom(*a, **k):
        raise AssertionError("load_policy called although vLLM samples the candidates")

    monkeypatch.setattr(models, "load_policy", boom)
    tasks = load_tasks("synthetic", "train")[:6]
    FakeLLM.answers = {t.prompt: t.canonical_solution for t in tasks[:3]}  # three tasks solved, three not
    cfg = dpo.Config(
        profile="test",
        stage="dpo_vllm",
        init=str(tiny_sft),
        limit=6,
        n_candidates=2,
        gen_backend="vllm",
        max_new_tokens=400,
        min_chosen=0.8,
        min_gap=0.4,
    )
    manifest = dpo.prepare(cfg)
    (llm,) = FakeLLM.made
    assert llm.calls[0][2] is not None  # the SFT adapter, as a LoRA request
    rows = [json.loads(x) for x in (cfg.run_dir / "candidates.jsonl").read_text().splitlines()]
    assert len(rows) == 12
    settings = json.loads((cfg.run_dir / "candidates.settings.json").read_text())
    assert settings["backend"] == "vllm"
    assert manifest["counts"]["candidates"] == 12 and manifest["counts"]["passed"] == 6
    with pytest.raises(ValueError, match="gen_backend"):
        dpo.Config(gen_backend="vlm")


def test_vllm_is_started_with_the_free_share_of_the_gpu(fake_vllm, tiny_base, monkeypatch):
    """vLLM 0.30.0 refuses to start unless gpu_memory_utilization x total (default 0.92) is free; load_vllm asks for
    what is free now, less a margin, at most 0.9, and an explicit value wins."""
    import torch

    from codelib.policy import vllm_backend

    gib = 2**30
    assert vllm_backend.vllm_memory_share(80 * gib, 80 * gib) == 0.9
    assert vllm_backend.vllm_memory_share(40 * gib, 80 * gib) == 0.46  # a trained model still holds half
    with pytest.raises(RuntimeError, match="only 4.0 of 80.0 GiB are free"):
        vllm_backend.vllm_memory_share(4 * gib, 80 * gib)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *a: (60 * gib, 80 * gib))
    vllm_backend.load_vllm(str(tiny_base))
    vllm_backend.load_vllm(str(tiny_base), gpu_memory_utilization=0.3)
    assert [llm.kwargs["gpu_memory_utilization"] for llm in FakeLLM.made] == [0.71, 0.3]
