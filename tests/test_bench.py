"""The GPU benchmark's plumbing, run on the tiny model on a CPU (the figures themselves come from a GPU machine)."""

import pytest


@pytest.mark.slow
def test_gpu_bench_runs_each_trainer_and_reports_ratios(tmp_path, capsys, default_tiny):
    from bench import gpu

    out = tmp_path / "bench.json"
    res = gpu.main(
        [
            "--arch",
            "tiny",
            "--dataset",
            "synthetic",
            "--trainers",
            "sft,grpo,dpo",
            "--quant",
            "lora",
            "--steps",
            "2",
            "--batch",
            "8",
            "--new-tokens",
            "16",
            "--workers",
            "2",
            "--eval",
            "--out",
            str(out),
        ]
    )
    assert [r["trainer"] for r in res["rows"]] == ["sft", "grpo", "dpo"]
    for r in res["rows"]:
        assert r["step_s"] > 0 and r["tokens_per_s"] > 0 and r["flops"] > 0
    assert res["eval"]["hf"]["tokens_per_s"] > 0
    printed = capsys.readouterr().out
    assert "1.00x" in printed and "vs SFT" in printed and out.exists()


def test_flops_n_of_the_deepseek_architectures(tmp_path):
    from transformers import LlamaConfig

    from bench import gpu

    for name, expected in (("deepseek-1.3b", 1.28e9), ("deepseek-7b", 6.49e9)):
        LlamaConfig(**gpu.ARCHS[name]).save_pretrained(tmp_path / name)
        assert abs(gpu.flops_n(tmp_path / name) - expected) / expected < 0.02, (name, gpu.flops_n(tmp_path / name))


def test_unknown_trainer_is_refused():
    from bench import gpu

    with pytest.raises(SystemExit):
        gpu.main(["--arch", "tiny", "--trainers", "sft,ppo2"])


def test_rl_bench_ratio_spread_over_rounds():
    """bench.rl: the ratio of medians, and beside it the lowest and highest ratio within one round (hand-made rows:
    the first step of each run is dropped, as it warms up the sandbox and the kernels)."""
    from bench import rl

    def rows(*times):
        return [{"step": i + 1, "time_s": t, "completion_len": 10.0, "pass_rate": 0.5} for i, t in enumerate(times)]

    assert rl.measure(rows(9.0, 1.0, 3.0, 2.0))["step_s"] == 2.0  # the 9 s warm-up step is not counted
    trl = {"round_step_s": [1.0, 0.8, 0.9]}
    ours = {"round_step_s": [0.5, 0.5, 0.4]}
    assert rl.round_ratios(trl, ours) == (1.6, 2.25)
