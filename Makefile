# The two commands: `make demo` runs the pipeline locally, `make test` runs the tests.
# Both create the virtual environment on first use and install everything into it.

VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
CONFIG ?= configs/local.json
DATA ?=
PYTEST_ARGS ?=

.PHONY: install demo test lint format docs clean

$(STAMP): setup.py
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# The CPU build of torch, pinned: an unpinned torch pulls a multi-GB CUDA build.
	# GPU images (containers/) install their own torch and are not affected.
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e ".[all]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	# Offline by design: fail at once instead of retrying an unreachable hub.
	HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 $(PY) pipeline.py --config $(CONFIG) $(if $(DATA),--set data.dataset=$(DATA))

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy src/llm_pipeline

test: lint
	$(PY) -m pytest $(PYTEST_ARGS)

format: $(STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

docs: $(STAMP)
	$(PY) -m llm_pipeline.docs README.md

clean:
	rm -rf runs .pytest_cache .mypy_cache .ruff_cache
