# The two commands: `make demo` runs the pipeline locally, `make test` runs the tests.
# Both create the virtual environment on first use and install everything into it.

VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
CONFIG ?= configs/local.json
DATA ?=
VERBOSE ?=
PYTEST_ARGS ?=

.PHONY: install demo test lint format docs clean images

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
	HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 $(PY) pipeline.py --config $(CONFIG) $(if $(DATA),--set data.dataset=$(DATA)) $(if $(VERBOSE),--verbose)

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

# Build the train and serve images with Cloud Build and push them to Artifact Registry as
# $(IMAGE_LOCATION)-docker.pkg.dev/$(PROJECT)/$(IMAGE_REPOSITORY)/{train,serve}:<version>, the
# tag being the package's version, which is what configs ask for: `make images PROJECT=P`.
PROJECT ?= $(shell gcloud config get-value project 2>/dev/null)
IMAGE_LOCATION ?= us
IMAGE_REPOSITORY ?= llm-pipeline
IMAGE_VERSION = $(shell sed -n 's/^__version__ = "\(.*\)"$$/\1/p' src/llm_pipeline/__init__.py)

images:
	@test -n "$(PROJECT)" || { echo "make images: set PROJECT=your-project" >&2; exit 2; }
	gcloud builds submit --config cloudbuild.yaml --project $(PROJECT) \
		--substitutions=_LOCATION=$(IMAGE_LOCATION),_REPOSITORY=$(IMAGE_REPOSITORY),_VERSION=$(IMAGE_VERSION) .

clean:
	rm -rf runs .pytest_cache .mypy_cache .ruff_cache
