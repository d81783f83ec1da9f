"""Install the pinned requirements and codelib (editable) into the virtual environment this Python runs in.

`make setup` calls it with `.venv/bin/python`. It installs with uv when it can (a fresh install of the ~160
packages takes ~27 s with uv and ~46 s with pip on 2 cores: uv resolves to the same versions, fetches, unpacks and
compiles in parallel), and with pip otherwise, or when uv fails for any reason. Both compile the packages' bytecode
at install time (`--compile-bytecode`; pip does by default): where PYTHONDONTWRITEBYTECODE is set, as on our CI
machines, nothing is compiled later, and every notebook kernel would compile torch, transformers and peft from
source again (an import of a trainer took 9.5 s instead of 4.5 s). uv does not read pip's configuration, so the
indexes, find-links, constraints and certificate that pip is configured with (`pip config list`, including the
PIP_* environment variables) are handed to uv as its own options: both see the same packages.

    python tools/install.py            # uv, falling back to pip
    python tools/install.py --installer pip     # pip only (or CODELIB_INSTALLER=pip)
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
UV = "uv==0.13.9"  # the installer's own pin
REQUIREMENTS = ["-r", str(ROOT / "requirements.txt"), "-r", str(ROOT / "requirements-dev.txt")]


def run(cmd: list[str], env: dict | None = None) -> bool:
    print("+", shlex.join(cmd), flush=True)
    return subprocess.run(cmd, env=env).returncode == 0


def pip_config() -> dict[str, list[str]]:
    """pip's settings by name (index-url, extra-index-url, find-links, constraint, cert), from every file and
    PIP_* variable pip itself reads; a setting's values in order (later sources after earlier ones)."""
    out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
    found: dict[str, list[str]] = {}
    for line in out.splitlines():
        key, _, value = line.partition("=")
        name = key.rsplit(".", 1)[-1]
        value = value.strip().strip("'\"")
        if value:
            found.setdefault(name, []).extend(value.split())
    return found


def uv_options(config: dict[str, list[str]]) -> tuple[list[str], dict]:
    """The uv options and environment that give uv pip's view of the package indexes."""
    opts = ["--index-strategy", "unsafe-best-match"]  # pip takes the best version over every index, as this does
    for url in config.get("index-url", [])[-1:]:
        opts += ["--index-url", url]
    for url in dict.fromkeys(config.get("extra-index-url", [])):
        opts += ["--extra-index-url", url]
    for where in dict.fromkeys(config.get("find-links", [])):
        opts += ["--find-links", where]
    for path in dict.fromkeys(config.get("constraint", [])):
        opts += ["--constraint", path]
    env = dict(os.environ)
    if config.get("cert") and "SSL_CERT_FILE" not in env:
        env["SSL_CERT_FILE"] = config["cert"][-1]
    return opts, env


def with_uv() -> bool:
    if not run([sys.executable, "-m", "pip", "install", "-q", UV]):
        return False
    uv = str(Path(sys.executable).parent / "uv")
    opts, env = uv_options(pip_config())
    target = ["--python", sys.executable]
    return run([uv, "pip", "install", "-q", "--compile-bytecode", *target, *opts, *REQUIREMENTS], env) and run(
        [uv, "pip", "install", "-q", *target, *opts, "--no-deps", "-e", str(ROOT)], env
    )


def with_pip() -> bool:
    pip = [sys.executable, "-m", "pip", "install", "-q"]
    return run([*pip, "--upgrade", "pip"]) and run([*pip, *REQUIREMENTS]) and run([*pip, "--no-deps", "-e", str(ROOT)])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python tools/install.py",
        description=__doc__.split("\n\n")[0],
        epilog="make setup runs it with .venv/bin/python; it installs into the virtual environment of that Python.",
    )
    ap.add_argument(
        "--installer",
        choices=("uv", "pip"),
        default=os.environ.get("CODELIB_INSTALLER") or "uv",
        help="uv (falling back to pip when it fails) or pip only; default: $CODELIB_INSTALLER, else uv",
    )
    args = ap.parse_args(argv or [])  # called from code (tests): no arguments
    if sys.prefix == sys.base_prefix:
        print(
            "error: tools/install.py installs into a virtual environment: run it with .venv/bin/python (make setup)",
            file=sys.stderr,
        )
        return 2
    if args.installer != "pip":
        if with_uv():
            return 0
        print("uv could not install the requirements; installing with pip instead", flush=True)
    return 0 if with_pip() else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
