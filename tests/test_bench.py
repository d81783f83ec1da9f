"""The benchmarks' plumbing, run on the tiny model on a CPU (the GPU figures themselves come from a GPU machine)."""

import json

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


def test_stage_bench_sums_each_runs_steps_and_divides_trls_time_by_it():
    """bench.stage: a run's loop time is the sum of its steps' time_s, TRL's over it is the ratio; a run that logged
    no sandbox share shows "-"; --set / --all values must be KEY=VALUE."""
    from bench import stage

    own = stage.summarise([{"step": 1, "time_s": 1.0, "sandbox_share": 0.2}, {"step": 2, "time_s": 3.0}, {"x": 1}])
    assert own == {"steps": 2, "loop_s": 4.0, "median_step_s": 2.0, "sandbox_share": 0.2}
    trl = {**stage.summarise([{"time_s": 5.0}, {"time_s": 5.0}]), "wall_s": 20.0}
    assert trl["sandbox_share"] is None
    text = stage.report({"own": {**own, "wall_s": 9.0}, "trl": trl}, "head")
    own_line, trl_line = text.splitlines()[2:4]
    assert own_line.split()[-1] == "2.50x" and own_line.split()[-2] == "20%"
    assert trl_line.split()[-1] == "1.00x" and trl_line.split()[-2] == "-"
    assert stage.runs(["shared_prefix=true"])["own shared_prefix=true"] == ["backend=own", "shared_prefix=true"]
    both = "old_logprobs=sampler minibatch_order=groups"
    assert stage.runs([both])[f"own {both}"] == ["backend=own", "old_logprobs=sampler", "minibatch_order=groups"]
    with pytest.raises(ValueError, match="KEY=VALUE"):
        stage.runs(["shared_prefix"])
    with pytest.raises(ValueError, match="time_s"):
        stage.summarise([{"step": 1}])


def test_stage_bench_runs_are_valid_configs_of_the_shipped_tiny_stage():
    """The shipped tiny stage turns the engine's speed options on; TRL refuses two of them, so bench.stage's TRL run
    sets them back (without that, its TRL run stops at the config check), and its own run is the stage as shipped."""
    from bench import stage
    from codelib.plumbing.params import load_config, parse_argv
    from codelib.trainers import grpo

    params = stage.ROOT / "params" / "tiny" / "04_grpo.yaml"

    def config(overrides):
        return load_config(grpo.Config, params, **parse_argv([str(params), *overrides])[1])

    own, trl = (config(stage.runs([])[k]) for k in ("own", "trl"))
    assert (own.backend, own.old_logprobs, own.minibatch_order, own.shared_prefix) == (
        "own",
        "sampler",
        "groups",
        True,
    )
    assert (trl.backend, trl.old_logprobs, trl.minibatch_order, trl.shared_prefix) == (
        "trl",
        "recompute",
        "rows",
        False,
    )
    with pytest.raises(ValueError, match="own-engine options"):
        config(["backend=trl"])


@pytest.mark.slow
def test_stage_bench_runs_the_grpo_stage_on_both_backends(tmp_path, tiny_sft, capsys):
    """bench.stage end to end on one short step: the own engine and TRL's trainer each run the tiny GRPO params in a
    process of their own, under a temporary checkpoints root (nothing lands in the repository's)."""
    from bench import stage

    out = tmp_path / "stage.json"
    args = ["--steps", "1", "--all", "prompts_per_step=4", "--all", "num_generations=2", "--all", "save_every=1"]
    res = stage.main(args + ["--init", str(tiny_sft), "--json", str(out)])
    assert set(res) == {"own", "trl"} and all(r["steps"] == 1 and r["loop_s"] > 0 for r in res.values())
    assert all(r["wall_s"] > r["loop_s"] for r in res.values())  # the process also imported and loaded the model
    assert "TRL / this" in capsys.readouterr().out
    assert json.loads(out.read_text())["results"]["trl"]["steps"] == 1
    assert not list(stage.ROOT.glob("checkpoints/*/bench_stage_*"))
