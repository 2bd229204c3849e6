"""Config inputs Python's json or the filesystem would let through: each refused by name.

Bytes that are not UTF-8, numbers that are not finite, keys given twice, and paths that
are a folder where a file is meant (or the reverse).
"""

import json
from pathlib import Path
from typing import Any

import pytest

from llm_pipeline.config import ConfigError, load_config, parse_override

from .minimal_config import MINIMAL, run_cli, with_change


def problems_in(path: Path, overrides: tuple[str, ...] = ()) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_config(path, overrides)
    return caught.value.problems


def written(tmp_path: Path, text: str | bytes) -> Path:
    path = tmp_path / "c.json"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def minimal_with(path: str, literal: str) -> str:
    """MINIMAL's JSON text with `literal` written as-is at a dotted path."""
    return json.dumps(with_change(path, "@@")).replace('"@@"', literal)


# --- text that is not UTF-8 -------------------------------------------------------------


def test_latin1_file_names_the_file_and_the_byte(tmp_path: Path) -> None:
    text = json.dumps(with_change("name", "café"), ensure_ascii=False)
    path = written(tmp_path, text.encode("latin-1"))
    offset = text.index("é")
    assert problems_in(path) == [
        f"config file '{path}' is not UTF-8 text (byte 0xe9 at line 1, offset {offset}); "
        "save it as UTF-8"
    ]


def test_utf16_file_is_named_as_such(tmp_path: Path) -> None:
    text = json.dumps(MINIMAL, indent=2)
    with_bom = written(tmp_path, text.encode("utf-16"))
    found = problems_in(with_bom)
    assert found[0].startswith(f"config file '{with_bom}' is not UTF-8 text (byte 0xff at line 1")
    assert "it looks like UTF-16" in found[0]
    # Without a byte-order mark UTF-16 decodes as UTF-8 full of NULs: still refused.
    without_bom = written(tmp_path, text.encode("utf-16-le"))
    assert "(byte 0x00 at line 1, offset 1; it looks like UTF-16)" in problems_in(without_bom)[0]


def test_a_utf8_byte_order_mark_is_accepted(tmp_path: Path) -> None:
    path = written(tmp_path, b"\xef\xbb\xbf" + json.dumps(with_change("name", "bom")).encode())
    assert load_config(path).config.name == "bom"


# --- numbers that are not finite --------------------------------------------------------


@pytest.mark.parametrize("literal", ["1e400", "-1e400", "NaN", "Infinity", "-Infinity"])
def test_non_finite_number_in_the_file_names_its_path(tmp_path: Path, literal: str) -> None:
    path = written(tmp_path, minimal_with("train.epochs", literal))
    assert problems_in(path) == [f"train.epochs: {literal} is not a finite number"]


def test_non_finite_numbers_anywhere_are_all_reported(tmp_path: Path) -> None:
    text = minimal_with("model.architecture", '{"model_type": "t5", "x": [1, NaN]}')
    text = text.replace('"data": {', '"data": {"validation_fraction": 1e999, ', 1)
    assert problems_in(written(tmp_path, text)) == [
        "data.validation_fraction: 1e999 is not a finite number",
        "model.architecture.x[1]: NaN is not a finite number",
    ]


def test_non_finite_number_in_a_raw_dict() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(raw=with_change("train.max_grad_norm", float("inf")))
    assert caught.value.problems == ["train.max_grad_norm: inf is not a finite number"]


@pytest.mark.parametrize("value", ["1e400", "NaN", "-Infinity"])
def test_non_finite_override_names_its_key(tmp_path: Path, value: str) -> None:
    path = written(tmp_path, json.dumps(MINIMAL))
    found = problems_in(path, (f"train.epochs={value}",))
    assert found == [
        f"train.epochs: {value} is not a finite number (from --set train.epochs={value})"
    ]
    with pytest.raises(ValueError, match="not a finite number"):
        parse_override(f"train.epochs={value}")


def test_non_finite_inside_an_override_object(tmp_path: Path) -> None:
    path = written(tmp_path, json.dumps(MINIMAL))
    found = problems_in(path, ('model.architecture={"model_type": "t5", "d_model": 1e309}',))
    assert found == [
        "model.architecture.d_model: 1e309 is not a finite number (from --set "
        'model.architecture={"model_type": "t5", "d_model": 1e309})'
    ]


def test_large_finite_numbers_are_kept(tmp_path: Path) -> None:
    path = written(tmp_path, minimal_with("train.epochs", "1e300"))
    assert load_config(path, ("train.learning_rate=1e-300",)).config.train.epochs == 1e300


# --- keys given twice -------------------------------------------------------------------


def test_duplicate_key_in_a_section(tmp_path: Path) -> None:
    text = minimal_with("train", '{"epochs": 2, "seed": 1, "epochs": 3}')
    assert problems_in(written(tmp_path, text)) == [
        "duplicate key 'epochs' in train (given 2 times; only the last would count)"
    ]


def test_duplicate_key_at_the_top_level_and_deeper_together(tmp_path: Path) -> None:
    text = json.dumps(MINIMAL)[:-1] + ', "name": "a", "name": "b", "name": "c"}'
    text = text.replace('"document": "a"', '"document": "a", "document": "b"')
    assert problems_in(written(tmp_path, text)) == [
        "duplicate key 'name' at the top level (given 3 times; only the last would count)",
        "duplicate key 'document' in data.columns (given 2 times; only the last would count)",
    ]


def test_duplicate_key_in_an_override(tmp_path: Path) -> None:
    path = written(tmp_path, json.dumps(MINIMAL))
    found = problems_in(path, ('data.max_samples={"train": 10, "train": 20}',))
    assert found == [
        "duplicate key 'train' in data.max_samples (given 2 times; only the last would count) "
        """(from --set data.max_samples={"train": 10, "train": 20})"""
    ]


# --- folders where files are meant, and files where folders are -------------------------


def test_config_path_that_is_a_folder(tmp_path: Path) -> None:
    assert problems_in(tmp_path) == [f"config file '{tmp_path}' is a folder, not a JSON file"]


def test_deepspeed_config_that_is_a_folder(tmp_path: Path) -> None:
    (tmp_path / "ds").mkdir()
    path = written(tmp_path, json.dumps(with_change("train.deepspeed_config", "ds")))
    assert problems_in(path) == [
        f"train.deepspeed_config: '{tmp_path / 'ds'}' is a folder; name the DeepSpeed JSON file"
    ]


FOLDER_KEYS: list[tuple[str, dict[str, Any], str]] = [
    ("model.source", {}, "give the folder that holds config.json and the tokenizer files"),
    ("model.tokenizer", {}, "give the folder that holds the tokenizer files"),
    (
        "model.encoder_decoder.encoder",
        {"model": {"encoder_decoder": {"encoder": "@", "decoder": "bert-base-uncased"}}},
        "give the folder that holds config.json and the tokenizer files",
    ),
    ("train.checkpoint_dir", {}, "name a folder (made if missing)"),
    (
        "train.nvme_path",
        {"train": {"offload_optimizer": "nvme", "nvme_path": "@"}},
        "name a folder on the NVMe disk",
    ),
    ("deploy.registry_dir", {}, "name a folder (made if missing)"),
]


@pytest.mark.parametrize(("key", "base", "hint"), FOLDER_KEYS, ids=[k[0] for k in FOLDER_KEYS])
def test_folder_setting_that_is_a_file(
    tmp_path: Path, key: str, base: dict[str, Any], hint: str
) -> None:
    file = tmp_path / "a-file"
    file.write_text("x")
    raw = {**MINIMAL, **base} if base else with_change(key, str(file))
    if base:
        raw = json.loads(json.dumps(raw).replace('"@"', json.dumps(str(file))))
    path = written(tmp_path, json.dumps(raw))
    assert problems_in(path) == [f"{key}: '{file}' is a file, not a folder; {hint}"]


def test_paths_of_the_right_kind_are_accepted(tmp_path: Path) -> None:
    (tmp_path / "train.jsonl").write_text('{"a": "x", "h": "y"}\n')
    (tmp_path / "checkpoints").mkdir()
    raw = with_change("data.dataset", "train.jsonl")  # a data file is a valid dataset
    raw["train"] = {"checkpoint_dir": "checkpoints", "deepspeed_config": None}
    raw["deploy"] = {"registry_dir": str(tmp_path / "registry")}  # missing folders are made
    config = load_config(written(tmp_path, json.dumps(raw))).config
    assert config.data.dataset == str(tmp_path / "train.jsonl")
    assert config.train.checkpoint_dir == str(tmp_path / "checkpoints")


@pytest.mark.parametrize("folder", ["memory://bucket/ckpt", "s3://bucket/ckpt"])
def test_a_checkpoint_dir_on_a_store_without_a_lease_is_refused(
    tmp_path: Path, folder: str
) -> None:
    """Before: accepted, then the run failed at its first step (memory://: KeyError
    'generation'; s3:// the same)."""
    path = written(tmp_path, json.dumps(with_change("train.checkpoint_dir", folder)))
    scheme = folder.split(":")[0]
    assert problems_in(path) == [
        f"train.checkpoint_dir: {folder!r}: checkpoints go to a local folder or gs://; "
        f"{scheme}:// offers no way to keep two runs out of one folder (the lease there needs "
        "Cloud Storage's generation preconditions), so they would delete each other's "
        "checkpoints"
    ]


@pytest.mark.parametrize("folder", ["gs://bucket/ckpt", "gcs://bucket/ckpt", "/gcs/bucket/ckpt"])
def test_a_checkpoint_dir_on_cloud_storage_is_accepted(tmp_path: Path, folder: str) -> None:
    path = written(tmp_path, json.dumps(with_change("train.checkpoint_dir", folder)))
    assert load_config(path).config.train.checkpoint_dir == folder


# --- the command line -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "overrides", "expected"),
    [
        ("café".encode("latin-1"), (), "is not UTF-8 text (byte 0xe9 at line 1, offset"),
        ("dup", (), "duplicate key 'epochs' in train"),
        ("ok", ("train.epochs=1e400",), "train.epochs: 1e400 is not a finite number"),
        ("deep", (), "not a config: nested deeper than 64 levels of arrays and objects"),
        (
            "ok",
            ("data.max_samples=" + "[" * 5000 + "]" * 5000,),
            "data.max_samples: nested deeper than 64 levels",
        ),
    ],
    ids=["latin-1", "duplicate-key", "infinite-override", "deep-file", "deep-override"],
)
def test_cli_exits_2_without_a_traceback(
    tmp_path: Path, content: str | bytes, overrides: tuple[str, ...], expected: str
) -> None:
    if isinstance(content, bytes):
        text = json.dumps(with_change("name", "@@"))
        path = written(tmp_path, text.encode().replace(b"@@", content))
    elif content == "dup":
        path = written(tmp_path, minimal_with("train", '{"epochs": 2, "epochs": 3}'))
    elif content == "deep":  # deep enough that Python's json raises RecursionError
        path = written(tmp_path, minimal_with("data", "[" * 100_000 + "]" * 100_000))
    else:
        path = written(tmp_path, json.dumps(MINIMAL))
    sets = [arg for override in overrides for arg in ("--set", override)]
    result = run_cli("--config", str(path), *sets, "--dry-run")
    assert result.returncode == 2, result.stderr
    assert expected in result.stderr
    assert "Traceback" not in result.stderr
