"""make lab: the executed reports under reports/ open read-only (JupyterLab never autosaves a document whose contents
model is not writable, and it rewrote a report's metadata as soon as it opened it); notebooks/ stay writable."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest
from tornado.web import HTTPError

from codelib.plumbing import lab

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = {"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def test_make_lab_uses_the_read_only_reports_manager():
    recipe = re.search(r"^lab:.*?(?=^\S)", (ROOT / "Makefile").read_text(), re.M | re.S).group(0)
    assert "--ServerApp.contents_manager_class=codelib.plumbing.lab.ReportsReadOnly" in recipe


def test_reports_are_not_writable_and_refuse_a_save(tmp_path):
    for name in ("reports/tiny/01_sft.ipynb", "notebooks/01_sft.ipynb"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(json.dumps(NOTEBOOK))
    manager = lab.ReportsReadOnly(root_dir=str(tmp_path))

    async def check():
        report = await manager.get("reports/tiny/01_sft.ipynb")
        assert report["writable"] is False
        listing = await manager.get("reports/tiny")
        assert [c["writable"] for c in listing["content"]] == [False]
        assert (await manager.get("reports"))["writable"] is True  # the folder itself: its listing is unchanged
        notebook = await manager.get("notebooks/01_sft.ipynb")
        assert notebook["writable"] is True
        await manager.save(notebook, "notebooks/01_sft.ipynb")  # notebooks save as usual
        before = (tmp_path / "reports/tiny/01_sft.ipynb").read_bytes()
        with pytest.raises(HTTPError) as err:
            await manager.save({**report, "content": {**report["content"], "metadata": {"x": 1}}}, report["path"])
        assert err.value.status_code == 403 and "outside reports/" in err.value.log_message
        assert (tmp_path / "reports/tiny/01_sft.ipynb").read_bytes() == before

    asyncio.run(check())


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("reports/tiny/x.ipynb", True),
        ("/reports/a.md", True),
        ("reports", False),
        ("notebooks/x.ipynb", False),
        ("reportsx/a.ipynb", False),
        ("docs/reports/a.md", False),
    ],
)
def test_read_only_paths(path, expected):
    assert lab.read_only(path) is expected
