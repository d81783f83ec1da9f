"""Shared fixtures: a throwaway checkpoints/ and a tiny model + SFT adapter built once per session."""

import os

import pytest


@pytest.fixture(scope="session")
def ckpt_root(tmp_path_factory):
    """Every run dir of the session under a temporary checkpoints/ (the repo's own is left alone)."""
    root = tmp_path_factory.mktemp("checkpoints")
    old = os.environ.get("CODELIB_CHECKPOINTS")
    os.environ["CODELIB_CHECKPOINTS"] = str(root)
    yield root
    if old is None:
        os.environ.pop("CODELIB_CHECKPOINTS", None)
    else:
        os.environ["CODELIB_CHECKPOINTS"] = old


@pytest.fixture(scope="session")
def tiny_base(tmp_path_factory):
    """A tiny Llama model, pretrained for a few steps only: these tests check mechanics, not learning."""
    from codelib.policy.models import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "base", steps=10)


@pytest.fixture(scope="session")
def default_tiny():
    """(the default tiny base model, checkpoints/tiny/base, as the pipeline and `init: tiny` use it; whether this
    session built it from nothing): the first test that needs it builds it, later ones reuse it."""
    from dataclasses import asdict

    from codelib.policy import tiny

    fresh = tiny._read_build(tiny.TINY_DIR) != asdict(tiny.TinyBuild())
    return tiny.build_tiny_model(), fresh


@pytest.fixture(scope="session")
def tiny_sft(ckpt_root, tiny_base):
    """A LoRA SFT adapter on the tiny base (a few steps), as the RL and DPO stages start from."""
    from codelib.trainers import sft

    cfg = sft.Config(
        profile="test",
        init=str(tiny_base),
        steps=3,
        batch_size=8,
        learning_rate=2e-3,
        logging_steps=1,
        save_every=100,
        report_to="none",
        limit=64,
    )
    return sft.train(cfg)


@pytest.fixture
def tiny_llama():
    """A one-layer Llama of a 32-token vocabulary, seeded: for tests of log-prob and loss paths (no checkpoint)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=32,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    return LlamaForCausalLM(cfg).eval()
