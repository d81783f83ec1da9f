"""tools/install.py: uv gets the package sources pip is configured with, and pip takes over when uv fails."""

import importlib.util
import subprocess
import sys
from types import SimpleNamespace

from codelib.plumbing.params import REPO_ROOT

spec = importlib.util.spec_from_file_location("install", REPO_ROOT / "tools" / "install.py")
install = importlib.util.module_from_spec(spec)
spec.loader.exec_module(install)

PIP_CONFIG_LIST = """:env:.cert='/etc/ssl/certs/ca-certificates.crt'
:env:.find-links='/opt/wheels'
global.constraint='/etc/xdg/pip/constraints.txt'
global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'
global.find-links='/opt/wheels'
global.index-url='https://mirror.example/simple'
"""


def test_pip_settings_become_uv_options(monkeypatch):
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: SimpleNamespace(stdout=PIP_CONFIG_LIST, returncode=0))
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    opts, env = install.uv_options(install.pip_config())
    assert opts == [
        "--index-strategy",
        "unsafe-best-match",
        "--index-url",
        "https://mirror.example/simple",
        "--extra-index-url",
        "file:///opt/pypi/simple",
        "--extra-index-url",
        "file:///opt/pypi-more/simple",
        "--find-links",
        "/opt/wheels",
        "--constraint",
        "/etc/xdg/pip/constraints.txt",
    ]
    assert env["SSL_CERT_FILE"] == "/etc/ssl/certs/ca-certificates.crt"
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: SimpleNamespace(stdout="", returncode=0))
    assert install.uv_options(install.pip_config())[0] == ["--index-strategy", "unsafe-best-match"]  # pip's defaults


def test_pip_installs_when_uv_cannot(monkeypatch):
    calls = []

    def uv(cmd):
        return cmd[-1].startswith("uv==") or cmd[0].endswith("/uv")

    monkeypatch.setattr(install, "run", lambda cmd, env=None: calls.append(cmd) or not uv(cmd))  # uv fails
    monkeypatch.setattr(install, "pip_config", dict)
    monkeypatch.setattr(sys, "base_prefix", "/somewhere/else")  # as inside a virtual environment
    monkeypatch.delenv("CODELIB_INSTALLER", raising=False)
    assert install.main() == 0
    assert uv(calls[0]) and calls[-1][-3:] == ["--no-deps", "-e", str(REPO_ROOT)]
    assert [c for c in calls if "-r" in c and not uv(c)], "pip installed the requirements"
    calls.clear()
    monkeypatch.setenv("CODELIB_INSTALLER", "pip")
    assert install.main() == 0 and not any(uv(c) for c in calls)
