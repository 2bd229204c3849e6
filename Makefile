# The two commands: `make demo` runs the pipeline locally, `make test` runs the tests.
# Both create the virtual environment on first use and install everything into it, at the
# versions of requirements.lock (`make lock` refreshes it).

VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
CONFIG ?= configs/local.json
DATA ?=
# A run on your own data ships its own model to its own endpoint, named after the data
# (`my.csv`: model `my` on `my-endpoint`), so that it neither replaces the demo's model nor
# becomes the bar the demo's next run must pass.
MODEL ?= $(if $(DATA),$(basename $(notdir $(patsubst %/,%,$(DATA)))))
VERBOSE ?=
PYTEST_ARGS ?=
# pytest-xdist workers for `make test`: two, one per core of the 2-core machine CI runs on;
# each test file runs whole on one worker, so a module's fixtures are built once, in the
# order tests/conftest.py gives (the heaviest first; xdist's own reorder is by test count).
TEST_WORKERS ?= 2

LOCK := requirements.lock
# torch is not in the lock: each platform brings its own build (llm_pipeline/lockfile.py).
TORCH_VERSION = $(shell sed -n 's/^TORCH_VERSION = "\(.*\)"$$/\1/p' src/llm_pipeline/lockfile.py)
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
# Left out of the lock: torch and what only its CUDA build needs (torch 2.13 on PyPI).
LOCK_PLATFORM := torch triton cuda-bindings cuda-pathfinder cuda-toolkit nvidia-cublas \
	nvidia-cuda-cccl nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime nvidia-cudnn-cu13 nvidia-cufft \
	nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13 \
	nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx

.PHONY: install demo test lint format docs clean images lock

# A fresh environment each time the lock or setup.py changes, so it holds exactly the lock.
$(STAMP): setup.py $(LOCK)
	python3 -m venv --clear $(VENV)
	# Every dependency at its locked version, each file checked against its hash; --no-deps:
	# the lock is the whole set, resolved once by `make lock`.
	$(PY) -m pip install --quiet --require-hashes --no-deps -r $(LOCK)
	# torch's CPU build, from PyTorch's CPU index (PyPI's Linux wheel is the CUDA build, GBs);
	# its own requirements are in the lock already. GPU images keep their base's CUDA build.
	$(PY) -m pip install --quiet --index-url $(TORCH_INDEX) torch==$(TORCH_VERSION)
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	$(PY) -m pip check
	touch $(STAMP)

install: $(STAMP)

# configs/dpo_local.json continues the model configs/sft_local.json deploys (its model.source,
# registry:instructions-minilm@serving): while the local registry has no endpoint for that
# model, `make demo CONFIG=configs/dpo_local.json` runs the instruction-tuning demo first.
SFT_DEMO_ENDPOINT ?= runs/registry/endpoints/instructions-minilm-endpoint.json
DEMO_FIRST = $(if $(filter dpo_local.json,$(notdir $(CONFIG))),$(if $(wildcard $(SFT_DEMO_ENDPOINT)),,configs/sft_local.json))

demo: $(STAMP)
	$(if $(DEMO_FIRST),$(MAKE) --no-print-directory demo CONFIG=$(DEMO_FIRST) DATA= MODEL=)
	# Offline by design: fail at once instead of retrying an unreachable hub.
	HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 $(PY) pipeline.py --config $(CONFIG) $(if $(DATA),--set data.dataset=$(DATA)) \
		$(if $(MODEL),--set deploy.model_display_name=$(MODEL) --set deploy.endpoint_display_name=$(MODEL)-endpoint) \
		$(if $(VERBOSE),--verbose)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy src/llm_pipeline

test: lint
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

# Resolve setup.py's ranges, every extra, into requirements.lock with every file's hash, for
# any platform and Python >= 3.11; the versions already locked are kept unless UPGRADE=1.
# uv is the one the lock pins (the dev extra).
lock:
	test -x $(VENV)/bin/uv || { python3 -m venv $(VENV) && containers/lock-select $(LOCK) uv \
		| $(PY) -m pip install --quiet --require-hashes --no-deps -r /dev/stdin; }
	$(VENV)/bin/uv pip compile setup.py --all-extras --universal --python-version 3.11 \
		--generate-hashes --custom-compile-command "make lock" $(if $(UPGRADE),--upgrade) \
		$(addprefix --no-emit-package ,$(LOCK_PLATFORM)) --output-file $(LOCK)

format: $(STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

docs: $(STAMP)
	$(PY) -m llm_pipeline.cli.docs README.md

# Build the three images with Cloud Build and push them to Artifact Registry as
# $(REGION)-docker.pkg.dev/$(PROJECT)/$(IMAGE_REPOSITORY)/{train,serve,serve-cuda}:<version>,
# the tag being the package's version: where configs look for them by default
# (vertex.image_repository "{region}-docker.pkg.dev/{project}/llm-pipeline").
# `make images PROJECT=my-project REGION=europe-west4`; the repository must exist.
PROJECT ?= $(shell gcloud config get-value project 2>/dev/null)
REGION ?= us-central1
IMAGE_REPOSITORY ?= llm-pipeline
IMAGE_VERSION = $(shell sed -n 's/^__version__ = "\(.*\)"$$/\1/p' src/llm_pipeline/__init__.py)

images:
	@test -n "$(PROJECT)" || { echo "make images: set PROJECT=your-project" >&2; exit 2; }
	gcloud builds submit --config cloudbuild.yaml --project $(PROJECT) \
		--substitutions=_LOCATION=$(REGION),_REPOSITORY=$(IMAGE_REPOSITORY),_VERSION=$(IMAGE_VERSION) .

clean:
	rm -rf runs .pytest_cache .mypy_cache .ruff_cache
