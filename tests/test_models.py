"""Tokenizer, tiny-model build (cached, atomic) and `load_policy` for model dirs, adapter dirs and bad inputs."""

import json

import pytest
import torch

from codelib import models, synthetic


@pytest.fixture(scope="module")
def tasks():
    train, test = synthetic.generate(seed=0, n_train=400, n_test=36)
    return train, test


@pytest.fixture(scope="module")
def tokenizer(tasks):
    return models.train_tokenizer(models.tiny_texts(tasks[0]), vocab_size=400)


@pytest.fixture(scope="module")
def small_model(tmp_path_factory):
    """A few pretraining steps on a few hundred tasks: mechanics only, built in about a second."""
    return models.build_tiny_model(tmp_path_factory.mktemp("tiny") / "base", steps=4, n_train=300, batch_size=8)


def test_tokenizer_splits_digits_and_adds_nothing(tokenizer):
    tokens = tokenizer.tokenize("return x + 12345")
    assert tokens[-5:] == ["1", "2", "3", "4", "5"]
    ids = tokenizer("x = 907", add_special_tokens=True)["input_ids"]
    assert tokenizer.decode(ids) == "x = 907"  # nothing added, byte-level round trip
    assert {tokenizer.bos_token, tokenizer.eos_token, tokenizer.pad_token} == {models.BOS, models.EOS, models.PAD}
    assert tokenizer.padding_side == "left"
    assert len(tokenizer) <= 400


def test_prompt_tokens_are_a_prefix_of_prompt_plus_solution(tokenizer, tasks):
    # Otherwise the prompt's last token at generation time differs from the one seen in training.
    for t in tasks[1]:
        prompt = tokenizer(t.prompt)["input_ids"]
        whole = tokenizer(t.prompt + t.canonical_solution)["input_ids"]
        assert whole[: len(prompt)] == prompt
        assert prompt + tokenizer(t.canonical_solution)["input_ids"] == whole


def test_build_is_a_hub_style_dir_and_is_cached(small_model, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    for name in ("config.json", "model.safetensors", "tokenizer.json", models.BUILD_FILE):
        assert (small_model / name).is_file(), name
    record = json.loads((small_model / models.BUILD_FILE).read_text())
    assert record["settings"]["steps"] == 4 and record["parameters"] > 500_000
    model = AutoModelForCausalLM.from_pretrained(small_model)
    assert model.config.tie_word_embeddings and model.config.hidden_size == 128
    assert AutoTokenizer.from_pretrained(small_model).pad_token == models.PAD
    # Same settings: reused, untouched. No temporary or old directories are left beside it.
    stamp = (small_model / "model.safetensors").stat().st_mtime_ns
    assert models.build_tiny_model(small_model, steps=4, n_train=300, batch_size=8) == small_model
    assert (small_model / "model.safetensors").stat().st_mtime_ns == stamp
    assert [p.name for p in small_model.parent.iterdir()] == [small_model.name]


def test_build_is_reproducible_and_settings_change_rebuilds(tmp_path):
    a = models.build_tiny_model(tmp_path / "a", steps=3, n_train=100, batch_size=4, hidden_size=32,
                                intermediate_size=64, num_layers=1)  # fmt: skip
    b = models.build_tiny_model(tmp_path / "b", steps=3, n_train=100, batch_size=4, hidden_size=32,
                                intermediate_size=64, num_layers=1)  # fmt: skip
    assert (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes()
    loss = json.loads((a / models.BUILD_FILE).read_text())["final_loss"]
    models.build_tiny_model(tmp_path / "a", steps=4, n_train=100, batch_size=4, hidden_size=32,
                            intermediate_size=64, num_layers=1)  # fmt: skip
    record = json.loads((a / models.BUILD_FILE).read_text())
    assert record["settings"]["steps"] == 4 and record["final_loss"] != loss


def test_load_policy_on_a_model_dir(small_model):
    model, tokenizer = models.load_policy(small_model)
    assert not model.training
    assert tokenizer.padding_side == "left" and tokenizer.pad_token_id is not None
    batch = tokenizer(["def f(x):\n", 'def g(s):\n    """Return s."""\n'], return_tensors="pt", padding=True)
    out = model.generate(**batch, max_new_tokens=5, do_sample=False)
    assert out.shape[0] == 2 and out.shape[1] <= batch["input_ids"].shape[1] + 5


def test_load_policy_on_a_lora_adapter_dir(small_model, tmp_path):
    from peft import LoraConfig, PeftModel, get_peft_model

    base, tokenizer = models.load_policy(small_model)
    config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    peft_model = get_peft_model(base, config)
    peft_model.save_pretrained(tmp_path / "adapter")  # no tokenizer saved: it must come from the base
    loaded, tok = models.load_policy(tmp_path / "adapter")
    assert isinstance(loaded, PeftModel) and not loaded.training
    assert tok.padding_side == "left" and tok.pad_token == models.PAD
    assert not any(p.requires_grad for p in loaded.parameters())
    ids = tok(["def f(x):\n"], return_tensors="pt")["input_ids"]
    plain, _ = models.load_policy(small_model)
    with torch.no_grad():  # a fresh LoRA adapter (B = 0) leaves the outputs unchanged
        assert torch.allclose(loaded(ids).logits, plain(ids).logits, atol=1e-5)
    trainable, _ = models.load_policy(tmp_path / "adapter", trainable=True)
    names = [n for n, p in trainable.named_parameters() if p.requires_grad]
    assert names and all("lora_" in n for n in names) and trainable.training


def test_missing_path_is_a_clear_error(tmp_path):
    missing = tmp_path / "no" / "such" / "model"
    with pytest.raises(FileNotFoundError, match=str(missing)):
        models.load_policy(missing)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match="neither a model"):
        models.load_policy(empty)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error raised without CUDA")
def test_4bit_without_cuda_says_so(small_model):
    with pytest.raises(RuntimeError, match="CUDA.*load_in_4bit to false"):
        models.load_policy(small_model, load_in_4bit=True)


@pytest.mark.slow
def test_default_tiny_model_builds_from_nothing_and_generates(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = models.build_tiny_model(tmp_path / "base")  # its time is a benchmark's business, not a test's
    model = AutoModelForCausalLM.from_pretrained(out)
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert 0.85e6 < sum(p.numel() for p in model.parameters()) < 1.0e6
    _, test = synthetic.generate()
    prompts = [t.prompt for t in test[:8]]
    batch = tokenizer(prompts, return_tensors="pt", padding=True)
    with torch.no_grad():
        out_ids = model.generate(**batch, max_new_tokens=24, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    texts = tokenizer.batch_decode(out_ids[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)
    # Pretraining has taught the format, if not yet the answers.
    assert sum(t.startswith("    return ") for t in texts) >= 6, texts


def test_placement_on_a_gpu_and_on_a_cpu():
    from codelib.models import placement

    # CPU: nothing changes
    assert placement(False, None, None, trainable=False, cuda=False) == (None, None)
    # GPU: bf16 by default, inference models moved to it; trainers leave placement to accelerate / TRL
    assert placement(False, None, None, trainable=False, cuda=True, bf16=True) == ("bfloat16", "cuda")
    assert placement(False, None, None, trainable=True, cuda=True, bf16=True) == ("bfloat16", None)
    assert placement(False, "float32", None, trainable=False, cuda=True, bf16=True) == ("float32", "cuda")
    assert placement(False, None, "auto", trainable=False, cuda=True, bf16=True) == ("bfloat16", None)
    assert placement(True, None, None, trainable=False, cuda=True, bf16=True) == (None, None)  # 4-bit places itself
    assert placement(False, None, None, trainable=False, cuda=True, bf16=False) == (None, "cuda")  # no bf16: fp32
