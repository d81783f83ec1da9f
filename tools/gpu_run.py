#!/usr/bin/env python3
"""The first GPU run, on an offline machine with a preinstalled stack: the GPU tests, bench.gpu on the 1.3B and 7B
architectures, then the 1.3B pipeline with a few steps per stage. Each step runs in its own process (an OOM or a
crash ends that step only, and the GPU is empty when the next one starts) and writes its JSON before the next starts.

The machine this is written for: Python 3.12, torch 2.11+cu130, transformers 5.17, accelerate, peft, and no trl,
bitsandbytes, datasets, papermill, ipykernel or vllm; no network; the repository plus what it brings under 64 MiB.

1. Once, on a machine with network, in the repository root (CPython 3.12 manylinux wheels, ~46 MB, into .whl/,
   which this adds to .git/info/exclude):

       python3 tools/gpu_run.py wheels

   It runs `pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp
   --platform manylinux_2_28_x86_64 ... -d .whl` for WHEELS below: the pinned packages the stack lacks (trl,
   bitsandbytes, datasets and the two of datasets' dependencies it lacks, dill and multiprocess) and peft at the
   project's pin (the stack's peft version is not known here). vLLM (a 315 MB wheel that also needs torch 2.13)
   cannot travel: its code path is checked against vLLM 0.30.0's source (codelib/policy/vllm_backend.py) and by a
   stand-in module (tests/test_vllm_wiring.py).

2. On the GPU machine, with .whl/ beside the repository (on this workplace's lent machine: `carry: [".whl"]`):

       python3 tools/gpu_run.py run --out results [--only tests,bench-1.3b,bench-7b,pipeline] [--budget-s 540]
                                    [--stages sft,reinforce,ppo,grpo,dpo,eval]

   It installs exactly the wheels whose package is missing or at another version than the pin into a target
   directory (--target, default /tmp/codelib-site; nothing touches the system's site-packages), puts it first on
   PYTHONPATH, and runs the steps in order. results/ gets preflight.json, tests.json, bench-1.3b.json,
   bench-7b.json, pipeline.json, summary.json (every step so far, rewritten after each) and log.txt: seven files.
   --budget-s stops starting steps once that much time has passed (a step is also cut at what is left).

Random weights everywhere (nothing is downloaded): bench.gpu builds each architecture from its config, and the
pipeline starts from the random 1.3B. So no completion passes: the pipeline's DPO stage ends with "no preference
pairs" after sampling and judging its candidates (recorded as expected; bench.gpu trains DPO on fixed pairs).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WHEELS = [
    "trl==1.16.0",
    "bitsandbytes==0.50.2",
    "datasets==5.2.0",
    "dill==0.4.1",
    "multiprocess==0.70.19",
    "peft==0.21.2",
]
PLATFORMS = [
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_24_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
]
STEPS = ("tests", "bench-1.3b", "bench-7b", "pipeline")
PROFILE = "deepseek-1.3b-humaneval"


def download_command(dest: Path) -> list[str]:
    """The `pip download` that builds the wheelhouse (run where there is network)."""
    platforms = [f for p in PLATFORMS for f in ("--platform", p)]
    return [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--python-version",
        "3.12",
        "--implementation",
        "cp",
        *platforms,
        "-d",
        str(dest),
        *WHEELS,
    ]


def wheels(dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    subprocess.run(download_command(dest), check=True)
    exclude = REPO / ".git" / "info" / "exclude"  # the wheels travel beside the tree, never in a commit
    if exclude.parent.is_dir() and "/.whl/" not in (exclude.read_text() if exclude.exists() else ""):
        with exclude.open("a") as f:
            f.write("/.whl/\n")
    size = sum(p.stat().st_size for p in dest.glob("*.whl"))
    print(f"{dest}: {len(list(dest.glob('*.whl')))} wheels, {size / 2**20:.1f} MiB")


def _dist_name(wheel: Path) -> str:
    return wheel.name.split("-")[0].lower().replace("_", "-")


def needed(wheelhouse: Path) -> tuple[list[Path], dict]:
    """The wheels to install: each pin whose package is absent here or at another version (a pin with no wheel in
    the wheelhouse is reported). Returns (wheels, {package: (installed version or None, pinned version)})."""
    have = {_dist_name(w): w for w in wheelhouse.glob("*.whl")}
    todo, status = [], {}
    for pin in WHEELS:
        name, version = pin.split("==")
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            installed = None
        status[name] = (installed, version)
        if installed != version:
            if name.lower() not in have:
                raise SystemExit(
                    f"{name}=={version} is missing here and {wheelhouse} has no wheel for it: "
                    f"run `python3 tools/gpu_run.py wheels` on a networked machine"
                )
            todo.append(have[name.lower()])
    return todo, status


class Run:
    """The steps' bookkeeping: summary.json rewritten after every step, one log file, a time budget."""

    def __init__(self, out: Path, budget_s: float, env: dict):
        self.out, self.budget_s, self.env, self.t0 = out, budget_s, env, time.time()
        self.summary: dict = {"started": time.strftime("%Y-%m-%d %H:%M:%S"), "steps": []}
        out.mkdir(parents=True, exist_ok=True)
        if (out / "summary.json").exists():  # a run split over several calls: one summary of every step
            self.summary["steps"] = json.loads((out / "summary.json").read_text()).get("steps", [])
        self.log = (out / "log.txt").open("a")

    def left(self) -> float:
        return self.budget_s - (time.time() - self.t0) if self.budget_s else 1e9

    def write(self, name: str, data) -> None:
        tmp = self.out / f".{name}.tmp"
        tmp.write_text(json.dumps(data, indent=1, default=str))
        os.replace(tmp, self.out / name)

    def sh(self, name: str, cmd: list[str], timeout: float = 3600, expect: str = "") -> dict:
        """Run one command (its output into log.txt); its record, also appended to summary.json."""
        rec = {"step": name, "cmd": " ".join(cmd), "started_s": round(time.time() - self.t0, 1)}
        limit = min(timeout, self.left())
        if limit < 30:
            rec.update(status="skipped", why="time budget spent")
        else:
            self.log.write(f"\n===== {name}: {rec['cmd']}\n")
            self.log.flush()
            t = time.time()
            try:
                p = subprocess.run(cmd, cwd=REPO, env=self.env, capture_output=True, text=True, timeout=limit)
                out, rc, stdout = p.stdout + p.stderr, p.returncode, p.stdout
            except subprocess.TimeoutExpired as e:
                out, rc, stdout = f"{e.stdout or ''}{e.stderr or ''}\n[timed out after {limit:.0f} s]", 124, ""
            self.log.write(out if isinstance(out, str) else out.decode(errors="replace"))
            self.log.flush()
            ok = rc == 0 or bool(expect and expect in out)
            rec.update(
                status="ok" if ok else "failed",
                rc=rc,
                seconds=round(time.time() - t, 1),
                expected=bool(rc and ok),
                tail=str(out)[-1500:],
                stdout=str(stdout)[-500:],  # apart from stderr: a library's progress bar there is not a result
            )
        print(f"[{rec['started_s']:7.1f} s] {name}: {rec['status']}", flush=True)
        self.summary["steps"].append(rec)
        self.write("summary.json", self.summary)
        return rec


def preflight(run: Run, status: dict) -> None:
    code = (
        "import json, torch, transformers, accelerate, peft, trl, bitsandbytes, datasets;"
        "d = torch.cuda.is_available();"
        "f, t = torch.cuda.mem_get_info() if d else (0, 0);"
        "print(json.dumps({'python': __import__('sys').version.split()[0], 'torch': torch.__version__,"
        "'cuda': torch.version.cuda, 'gpu': torch.cuda.get_device_name() if d else None,"
        "'free_gib': round(f / 2**30, 1), 'total_gib': round(t / 2**30, 1),"
        "'bf16': d and torch.cuda.is_bf16_supported(), 'transformers': transformers.__version__,"
        "'accelerate': accelerate.__version__, 'peft': peft.__version__, 'trl': trl.__version__,"
        "'bitsandbytes': bitsandbytes.__version__, 'datasets': datasets.__version__}))"
    )
    rec = run.sh("preflight", [sys.executable, "-c", code], timeout=300)
    info = {"pins": {k: {"before": v[0], "pinned": v[1]} for k, v in status.items()}}
    try:
        info.update(json.loads(rec.get("tail", "").strip().splitlines()[-1]))
    except (ValueError, IndexError):
        info["error"] = rec.get("tail")
    run.write("preflight.json", info)


def tests(run: Run) -> None:
    """The GPU tests, and the device-sensitive CPU tests now with a GPU visible; counts and failures to tests.json."""
    import xml.etree.ElementTree as ET

    xml = run.out / ".tests.xml"
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        f"--junitxml={xml}",
        "tests/test_gpu.py",
        "tests/test_models.py",
        "tests/test_rl.py::test_log_probs_match_generation_scores",
    ]
    rec = run.sh("tests", cmd, timeout=900)
    res = {"status": rec["status"], "seconds": rec.get("seconds"), "cases": []}
    if xml.exists():
        for case in ET.parse(xml).getroot().iter("testcase"):
            kind = next((c.tag for c in case if c.tag in ("failure", "error", "skipped")), "passed")
            detail = next((c.get("message", "")[:400] for c in case if c.tag in ("failure", "error", "skipped")), "")
            res["cases"].append(
                {"test": f"{case.get('classname')}::{case.get('name')}", "result": kind, "detail": detail}
            )
        xml.unlink()
    run.write("tests.json", res)


def bench(run: Run, arch: str, trainers: str, quant: str, steps: int, name: str) -> None:
    cmd = [
        sys.executable,
        "-m",
        "bench.gpu",
        "--arch",
        arch,
        "--trainers",
        trainers,
        "--quant",
        quant,
        "--steps",
        str(steps),
        "--out",
        str(run.out / name),
    ]
    rec = run.sh(name[:-5], cmd, timeout=1800)
    if not (run.out / name).exists():  # bench.gpu writes after every trainer; nothing at all: say why
        run.write(name, {"error": rec.get("tail", rec.get("why"))})


STAGES = ("sft", "reinforce", "ppo", "grpo", "dpo", "eval")


def pipeline(run: Run, steps: int, arch: str = "deepseek-1.3b", stages: tuple[str, ...] = STAGES) -> None:
    """The 1.3B profile's stages from the random 1.3B architecture: a few steps each, each stage's record written to
    pipeline.json before the next starts. arch "tiny": the same stages on the tiny model, fp32, no QLoRA (a CPU).
    `stages`: a subset, e.g. the last three on a machine where a budget stopped the run after PPO (each stage starts
    from the previous stages' checkpoints under --work; the build is cached there)."""
    root = Path(run.env["CODELIB_CHECKPOINTS"]).parent
    prior = json.loads((run.out / "pipeline.json").read_text()) if (run.out / "pipeline.json").exists() else []
    # a later call on the same --out keeps the stages it does not run again
    records: list[dict] = [r for r in prior if r.get("step", "").split("/")[-1] not in (*stages, "build")]
    build = run.sh(
        "pipeline/build",
        [
            sys.executable,
            "-c",
            "from pathlib import Path; from bench.gpu import "
            f"build_arch; print(build_arch({arch!r}, Path({str(root)!r})))",
        ],
        timeout=600,
    )
    records.append(build)
    run.write("pipeline.json", records)
    if build["status"] != "ok":
        return
    base = build["stdout"].strip().splitlines()[-1]  # the tail ends with stderr's "Writing model shards" bar
    p = f"params/{PROFILE}"
    common = [f"steps={steps}", "limit=16", "save_every=1", "report_to=none"]
    if arch == "tiny":
        common.append("load_in_4bit=false")
    sampled = [*common, "max_new_tokens=64", "workers=4"]
    ck = f"checkpoints/{PROFILE}"
    plan = [
        ("sft", "codelib.trainers.sft", "01_sft", [*common, f"init={base}", "grad_accum=1"], ""),
        ("reinforce", "codelib.trainers.reinforce", "02_reinforce", sampled, ""),
        ("ppo", "codelib.trainers.ppo", "03_ppo", sampled, ""),
        ("grpo", "codelib.trainers.grpo", "04_grpo", sampled, ""),
        ("dpo", "codelib.trainers.dpo", "05_dpo", [*sampled, "n_candidates=4"], "no preference pairs"),
        (
            "eval",
            "codelib.evaluation.evaluator",
            "06_eval",
            [
                "limit=8",
                "n_samples=2",
                "ks=[1]",
                "max_new_tokens=64",
                "bootstrap_iters=100",
                f"checkpoints={{base: {base}, sft: {ck}/sft, reinforce: {ck}/reinforce, ppo: {ck}/ppo, "
                f"grpo: {ck}/grpo}}",
            ],
            "",
        ),
    ]
    for name, module, params, overrides, expect in [st for st in plan if st[0] in stages]:
        rec = run.sh(
            f"pipeline/{name}",
            [sys.executable, "-m", module, f"{p}/{params}.yaml", *overrides],
            timeout=900,
            expect=expect,
        )
        metrics = Path(run.env["CODELIB_CHECKPOINTS"]) / PROFILE / name / "metrics.jsonl"
        if metrics.exists():
            rows = [json.loads(x) for x in metrics.read_text().splitlines() if x.strip()]
            rec["metrics_last"] = rows[-1] if rows else None
        records.append(rec)
        run.write("pipeline.json", records)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("wheels", help="on a networked machine: download the wheelhouse")
    w.add_argument("--dest", default=str(REPO / ".whl"))
    r = sub.add_parser("run", help="on the GPU machine: install what is missing, then run the steps")
    r.add_argument("--out", default=str(REPO / "reports" / "gpu-run"))
    r.add_argument("--wheelhouse", default=str(REPO / ".whl"))
    r.add_argument("--target", default="/tmp/codelib-site", help="where the wheels are installed")
    r.add_argument("--work", default="/tmp/codelib-gpu-run", help="checkpoints and model dirs (not under --out)")
    r.add_argument("--only", default=",".join(STEPS), help=f"a subset of {','.join(STEPS)}")
    r.add_argument("--steps", type=int, default=3, help="bench.gpu steps per trainer (the first is dropped)")
    r.add_argument("--stage-steps", type=int, default=2, help="pipeline: optimizer steps per stage")
    r.add_argument(
        "--stages",
        default=",".join(STAGES),
        help=f"pipeline: these of {','.join(STAGES)} (e.g. grpo,dpo,eval after a budget stopped a run at PPO)",
    )
    r.add_argument("--quant", default="lora,qlora", help="bench.gpu: lora, qlora or both")
    r.add_argument("--budget-s", type=float, default=0, help="stop starting steps after this many seconds (0: none)")
    r.add_argument("--small", action="store_true", help="the tiny model for every step: checks this script on a CPU")
    a = ap.parse_args(argv)
    if a.cmd == "wheels":
        return wheels(Path(a.dest))
    only = [s for s in a.only.split(",") if s]
    unknown = sorted(set(only) - set(STEPS))
    if unknown:
        ap.error(f"unknown step {unknown}; steps: {', '.join(STEPS)}")
    stages = tuple(s for s in a.stages.split(",") if s)
    unknown = sorted(set(stages) - set(STAGES))
    if unknown:
        ap.error(f"unknown pipeline stage {unknown}; stages: {', '.join(STAGES)}")
    out, target = Path(a.out).resolve(), Path(a.target)
    todo, status = needed(Path(a.wheelhouse))
    if todo:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "-q",
                "--no-index",
                "--no-deps",
                "--no-compile",
                "--no-cache-dir",
                "--upgrade",
                "--target",
                str(target),
                *map(str, todo),
            ],
            check=True,
        )
    work = Path(a.work)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(target), str(REPO), os.environ.get("PYTHONPATH", "")]),
        "CODELIB_CHECKPOINTS": str(work / "checkpoints"),
        "CODELIB_REPORTS": str(work / "reports"),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "PYTHONUNBUFFERED": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    run = Run(out, a.budget_s, env)
    run.summary["installed"] = [w.name for w in todo]
    preflight(run, status)
    if "tests" in only:
        tests(run)
    small = "tiny" if a.small else ""
    if "bench-1.3b" in only:
        bench(run, small or "deepseek-1.3b", "sft,reinforce,ppo,grpo,dpo", a.quant, a.steps, "bench-1.3b.json")
    if "bench-7b" in only:
        bench(run, small or "deepseek-7b", "ppo,grpo", a.quant, a.steps, "bench-7b.json")
    if "pipeline" in only:
        pipeline(run, a.stage_steps, small or "deepseek-1.3b", stages)
    run.summary["finished_s"] = round(time.time() - run.t0, 1)
    run.write("summary.json", run.summary)
    failed = [s["step"] for s in run.summary["steps"] if s["status"] == "failed"]
    print(f"done in {run.summary['finished_s']:.0f} s; failed: {', '.join(failed) or 'none'}; results in {out}")


if __name__ == "__main__":
    main()
