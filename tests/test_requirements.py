"""The requirements files: vLLM pinned to one release inside the installed TRL's supported range, installed into the
project's own environment (it shares torch 2.13.0), and every runtime pin exact."""

from __future__ import annotations

import re
from pathlib import Path

from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent


def _pins(name: str) -> dict[str, str]:
    pins = {}
    for line in (ROOT / name).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-r"):
            package, _, version = line.partition("==")
            assert version, f"{name}: {line!r} is not an exact pin"
            pins[package.strip().lower()] = version.strip()
    return pins


def test_vllm_is_one_release_inside_trls_supported_range():
    import importlib.util

    source = (Path(importlib.util.find_spec("trl").origin).parent / "import_utils.py").read_text()  # not imported
    low, high = re.search(r'Version\("([\d.]+)"\) <= _vllm_base_version <= Version\("([\d.]+)"\)', source).groups()
    vllm = Version(_pins("requirements-vllm.txt")["vllm"])
    assert Version(low) <= vllm <= Version(high)


def test_vllm_installs_on_top_of_the_project_pins():
    lines = (ROOT / "requirements-vllm.txt").read_text().splitlines()
    assert "-r requirements.txt" in lines  # one environment: vLLM 0.30.0 requires the same torch==2.13.0
    assert set(_pins("requirements-vllm.txt")) == {"vllm"}
    runtime = _pins("requirements.txt")
    assert runtime["torch"] == "2.13.0"
    assert Version(runtime["numpy"]) < Version("2.4")  # vLLM's mistral-common caps numpy below 2.4 on Python <= 3.12
