# The README's commands. `make demo` and `make test` work on a fresh clone: each installs what it needs first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PROFILE ?= tiny
STUDY ?= params/$(PROFILE)/studies/algorithms.yaml

.PHONY: setup demo compare study test test-fast lint format bench bench-gpu lab clean

$(STAMP): requirements.txt requirements-dev.txt pyproject.toml tools/install.py
	$(PYTHON) -m venv $(VENV)
	$(PY) tools/install.py  # uv when it can (seconds), pip otherwise (CODELIB_INSTALLER=pip: pip only)
	$(PY) -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $(STAMP)

setup: $(STAMP)  ## create .venv and install everything

demo: $(STAMP)  ## build the tiny model and run the whole pipeline of PROFILE (default: tiny)
	$(PY) -m codelib.pipeline --profile $(PROFILE)

compare: $(STAMP)  ## train every algorithm of PROFILE's comparison that has no current run, evaluate, write comparison.md
	$(PY) -m codelib.comparison params/$(PROFILE)/comparison.yaml

study: $(STAMP)  ## run (or resume) a study: arms x training seeds, evaluated and summarised (STUDY=params/...yaml)
	$(PY) -m codelib.study $(STUDY)

test: $(STAMP)  ## every test, slow ones included (what CI runs)
	$(PY) -m pytest -q

test-fast: $(STAMP)  ## the tests that take seconds
	$(PY) -m pytest -q -m "not slow"

lint: $(STAMP)
	$(VENV)/bin/ruff check codelib tests bench tools
	$(VENV)/bin/ruff format --check codelib tests bench tools

format: $(STAMP)
	$(VENV)/bin/ruff check --fix codelib tests bench tools
	$(VENV)/bin/ruff format codelib tests bench tools
	$(VENV)/bin/nbstripout notebooks/*.ipynb

bench: $(STAMP)  ## benchmarks: each prints a ratio against a baseline measured in the same run
	$(PY) -m bench.sandbox
	$(PY) -m bench.rl

bench-gpu: $(STAMP)  ## on a GPU machine: trainer steps of the 1.3B and 7B architectures, HF vs vLLM generate
	$(PY) -m bench.gpu --arch deepseek-1.3b --eval --out reports/bench-gpu-1.3b.json
	$(PY) -m bench.gpu --arch deepseek-7b --trainers grpo,ppo --quant lora,qlora --out reports/bench-gpu-7b.json

lab: $(STAMP)  ## open JupyterLab at the repository root: notebooks/ to run, reports/ to read (read-only there)
	$(VENV)/bin/jupyter lab --ServerApp.root_dir=. $(if $(filter Windows_NT,$(OS)),,--KernelManager.transport=ipc) \
	    --ServerApp.contents_manager_class=codelib.plumbing.lab.ReportsReadOnly \
	    $(if $(filter 0,$(shell id -u 2>/dev/null)),--allow-root)  # as root (a container, CI): Jupyter refuses without it

clean:
	rm -rf $(VENV) checkpoints .pytest_cache
