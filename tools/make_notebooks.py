"""Write notebooks/*.ipynb from one place: title, a `parameters` cell mirroring the stage's Config, calls.

The parameters cell is generated from the Config dataclass (names, comments) and the tiny profile's YAML
(values), so the three can't drift; tests/test_notebooks.py checks they are the same set.
Run: python tools/make_notebooks.py  (then commit; notebooks are stored without outputs)
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
import sys
from pathlib import Path

import nbformat
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

IMPORTS = "%load_ext autoreload\n%autoreload 2\n"


def field_comments(cls) -> dict[str, str]:
    src = inspect.getsource(cls)
    return {m.group(1): m.group(2).strip() for m in re.finditer(r"^\s+(\w+):[^#\n]*#\s*(.*)$", src, flags=re.M)}


def parameters_cell(cls, yaml_path: Path) -> str:
    values = yaml.safe_load(yaml_path.read_text()) if yaml_path.exists() else {}
    comments = field_comments(cls)
    lines = []
    for f in dataclasses.fields(cls):
        if f.name in values:
            v = values[f.name]
        elif f.default is not dataclasses.MISSING:
            v = f.default
        else:
            v = f.default_factory()
        c = comments.get(f.name, f.name.replace("_", " "))
        lines.append(f"{f.name} = {v!r}  # {c}")
    return "\n".join(lines)


def notebook(title: str, intro: str, config: str, yaml_name: str, cells: list[str]) -> nbformat.NotebookNode:
    mod, cls_name = config.rsplit(".", 1)
    cls = getattr(importlib.import_module(mod), cls_name)
    nb = nbformat.v4.new_notebook()
    nb.metadata = {
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
        "language_info": {"name": "python"},
    }
    params = nbformat.v4.new_code_cell(parameters_cell(cls, ROOT / "params" / "tiny" / yaml_name))
    params.metadata["tags"] = ["parameters"]
    nb.cells = [nbformat.v4.new_markdown_cell(f"# {title}\n\n{intro}"), params]
    nb.cells.append(nbformat.v4.new_code_cell(IMPORTS + f"from {mod} import {cls_name}\nfrom codelib.params import config_from_namespace\n\ncfg = config_from_namespace({cls_name}, globals())\ncfg"))
    for c in cells:
        if c.startswith("## ") or c.startswith("# "):
            nb.cells.append(nbformat.v4.new_markdown_cell(c))
        else:
            nb.cells.append(nbformat.v4.new_code_cell(c))
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{i:02d}"  # stable ids keep diffs of regenerated notebooks small
    return nb


NOTEBOOKS = {}


def register(name, *args):
    NOTEBOOKS[name] = args


register(
    "00_tasks",
    "00 · Tasks",
    "Browse the benchmark tasks this repo trains and evaluates on: HumanEval (131/33 split), MBPP, HumanEval+/MBPP+, "
    "the CodeContests stdin/stdout sample and the synthetic suite of the `tiny` profile. In: the bundled data files. "
    "Out: nothing but the displays (counts per split, one rendered task, a picker in JupyterLab).",
    "codelib.explore.TasksConfig",
    "00_tasks.yaml",
    [
        "from codelib import explore\n\nexplore.counts_table()",
        "tasks = explore.load_for_browsing(cfg)\nprint(f'{cfg.dataset}/{cfg.split}: {len(tasks)} tasks')\nexplore.task_browser(tasks, show=cfg.show, interactive=cfg.interactive)",
    ],
)


def main(only: list[str] | None = None) -> None:
    out = ROOT / "notebooks"
    out.mkdir(exist_ok=True)
    for name, args in NOTEBOOKS.items():
        if only and name not in only:
            continue
        nbformat.write(notebook(*args), out / f"{name}.ipynb")
        print("wrote", out / f"{name}.ipynb")


if __name__ == "__main__":
    main(sys.argv[1:] or None)
