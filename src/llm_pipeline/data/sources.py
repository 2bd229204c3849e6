"""Read a dataset source into its splits: a hub id, a local file or folder, or a remote path.

Everything a user can name in `data.dataset` is turned into `{split name: Dataset}` here,
and every way that can fail becomes a `DataError` that names the source. What the splits
are then used for (columns, carving, caps) is `download`'s job.
"""

import json
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

import datasets
import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
from datasets.exceptions import DatasetGenerationError

from llm_pipeline.config import DataConfig
from llm_pipeline.config.data import BUILTIN_PREFIX
from llm_pipeline.data.hub import load_hub_dataset
from llm_pipeline.data.saved import saved_split_names
from llm_pipeline.errors import DataError, UnsafePathError, exception_chain
from llm_pipeline.storage import is_remote, local_copy, looks_like_path, to_uri
from llm_pipeline.tasks import BuiltinDataset

logger = logging.getLogger(__name__)

#: File suffix → the `datasets` packaged builder that reads it.
FORMATS = {
    ".jsonl": "json",
    ".json": "json",
    ".csv": "csv",
    ".parquet": "parquet",
    ".arrow": "arrow",
}
#: The json and csv builders read these compressed files as they are.
_COMPRESSIONS = (".gz", ".bz2", ".xz", ".zst")
#: `train-00000-of-00004.parquet` is shard 0 of split `train` (the hub's own layout).
_SHARD = re.compile(r"-\d+-of-\d+$")
_KNOWN = (
    "expected jsonl, json, csv, parquet or arrow files (optionally .gz), one per split "
    "(train.jsonl, validation.jsonl, test.jsonl), or a datasets save_to_disk folder"
)


#: A source given no built-in datasets: a `builtin:NAME` is then unknown.
NO_BUILTINS: Mapping[str, BuiltinDataset] = MappingProxyType({})


@dataclass(frozen=True)
class Source:
    """A source's splits, and the name the user gave it (for messages)."""

    splits: dict[str, datasets.Dataset]
    where: str


def load_source(
    config: DataConfig, scratch: Path, *, builtins: Mapping[str, BuiltinDataset] = NO_BUILTINS
) -> Source:
    """Every split of `config.dataset`.

    `scratch` (deleted by the caller after saving) holds remote copies and the `datasets`
    cache for files, so a download does not leave a second copy of the data in ~/.cache.
    A single file, or a `save_to_disk` folder of one Dataset, is the train split.
    `builtins`: the datasets a `builtin:NAME` may name (`llm_pipeline.tasks.builtin_datasets`).
    """
    name = config.dataset
    cache = scratch / "cache"
    if name.startswith(BUILTIN_PREFIX):
        return Source(load_builtin(name, seed=config.seed, builtins=builtins), name)
    if is_remote(name):
        try:
            local = local_copy(name, scratch / "copy")
        except FileNotFoundError:
            raise DataError(f"data.dataset: {name} does not exist") from None
        except OSError as exc:
            raise DataError(f"data.dataset: cannot read {name}: {exc}") from exc
        return Source(_load_path(local, name, config.train_split, cache), name)
    local = Path(to_uri(name)).expanduser()
    if local.exists():
        if config.subset or config.revision:
            logger.warning(
                "data.subset and data.revision apply to hub datasets; %s ignores them", name
            )
        return Source(_load_path(local, name, config.train_split, cache), name)
    # A data file's name (`train.jsonl`) is never a hub dataset id.
    if looks_like_path(name) or _format_of(Path(name)) is not None:
        raise DataError(f"data.dataset: {name}: no such file or folder")
    return Source(load_hub_dataset(name, config.subset, config.revision), name)


def load_builtin(
    name: str, *, seed: int, builtins: Mapping[str, BuiltinDataset]
) -> dict[str, datasets.Dataset]:
    """The splits of a dataset the project builds offline itself (`builtin:NAME`), one of
    `builtins`."""
    if name not in builtins:
        raise DataError(
            f"data.dataset: unknown built-in dataset {name!r}; the built-in ones are "
            f"{described(builtins)}"
        )
    splits = builtins[name].build(seed=seed)
    return {split: datasets.Dataset.from_list(rows) for split, rows in splits.items() if rows}


def described(builtins: Mapping[str, BuiltinDataset]) -> str:
    """`'builtin:a' (what it is), 'builtin:b' (...) and 'builtin:c' (...)`; `none` if empty."""
    named = [f"{name!r} ({builtin.description})" for name, builtin in builtins.items()]
    if len(named) < 2:
        return "".join(named) or "none"
    return f"{', '.join(named[:-1])} and {named[-1]}"


def _format_of(path: Path) -> str | None:
    """The builder for a data file's suffix (`train.jsonl.gz` → json), None if not data."""
    suffixes = [suffix.lower() for suffix in path.suffixes]
    if suffixes and suffixes[-1] in _COMPRESSIONS:
        suffixes.pop()
    return FORMATS.get(suffixes[-1]) if suffixes else None


def _load_path(
    path: Path, shown: str, train_split: str, cache: Path
) -> dict[str, datasets.Dataset]:
    """The splits in a local file or folder; `shown` is how the user named `path`."""

    def name_of(file: Path) -> str:
        # Messages name the user's path (a gs:// URI, say), not our local copy of it.
        return shown if file == path else f"{shown.rstrip('/')}/{file.relative_to(path)}"

    if path.is_file():
        fmt = _format_of(path)
        if fmt is None:
            raise DataError(f"data.dataset: {shown}: unknown file type; {_KNOWN}")
        return {train_split: _load_files([path], fmt, train_split, cache, name_of)}
    if (path / "dataset_dict.json").is_file() or (path / "state.json").is_file():
        return _load_saved(path, shown, train_split)
    files = _split_files(path, shown)
    return {
        split: _load_files(paths, fmt, split, cache, name_of)
        for split, (fmt, paths) in sorted(files.items())
    }


def _split_files(folder: Path, shown: str) -> dict[str, tuple[str, list[Path]]]:
    """`{split: (format, files)}` from a folder of per-split files such as `train.jsonl`."""
    found: dict[str, tuple[str, list[Path]]] = {}
    for file in sorted(folder.iterdir()):
        fmt = _format_of(file)
        if not file.is_file() or fmt is None or file.name.startswith("."):
            continue
        split = _SHARD.sub("", file.name.split(".")[0])
        known_fmt, paths = found.setdefault(split, (fmt, []))
        if known_fmt != fmt:
            raise DataError(
                f"data.dataset: split {split!r} of {shown} has both {known_fmt} and {fmt} "
                f"files ({paths[0].name}, {file.name}); keep one format per split"
            )
        paths.append(file)
    if not found:
        entries = ", ".join(sorted(entry.name for entry in folder.iterdir())) or "nothing"
        raise DataError(f"data.dataset: no data files in {shown} (found: {entries}); {_KNOWN}")
    return found


def _load_files(
    files: list[Path], fmt: str, split: str, cache: Path, name_of: Callable[[Path], str]
) -> datasets.Dataset:
    """One split from its files, through the `datasets` builder for their format."""
    where = ", ".join(name_of(file) for file in files)
    # An empty file makes the json builder raise StopIteration and an empty parquet file a
    # batch-size error; both mean "no rows", so say that instead.
    if all(file.stat().st_size == 0 for file in files):
        raise DataError(f"data.dataset: split {split!r} has no rows ({where} is empty)")
    try:
        if fmt == "parquet" and all(pq.read_metadata(file).num_rows == 0 for file in files):
            raise DataError(f"data.dataset: split {split!r} has no rows in {where}")
        # A fixed split name inside the builder: `datasets` only accepts \w+ names, while
        # a user's file may be called `my-train.jsonl`.
        builder = datasets.load_dataset_builder(
            fmt, data_files={"train": [str(file) for file in files]}, cache_dir=str(cache)
        )
        builder.download_and_prepare()
        if not builder.info.splits["train"].num_examples:
            raise DataError(f"data.dataset: split {split!r} has no rows in {where}")
        dataset = builder.as_dataset("train")
        if fmt == "json":
            # pyarrow's JSON reader keeps bytes that are not UTF-8 in its strings, and they
            # fail only when a later step reads those rows.
            dataset.data.table.validate(full=True)
    except DataError:
        raise
    except (DatasetGenerationError, pa.ArrowException, ValueError, OSError) as exc:
        found = _bad_line(files) if fmt in ("json", "csv") else None
        if found is not None:
            where, reason = name_of(found[0]), found[1]
        else:
            reason = _reason(exc)
        if fmt == "csv":
            reason += delimiter_hint(_header(files[0]))
        raise DataError(f"data.dataset: cannot read {where} as {fmt}: {reason}") from exc
    assert isinstance(dataset, datasets.Dataset)  # as_dataset(split) gives one Dataset
    return dataset


def delimiter_hint(column_names: list[str]) -> str:
    """Why a CSV file with another delimiter (`a;b`, tabs) reads as one column, or ''.

    (Or as two: pandas takes a first field that every row's commas leave as the index.)"""
    for delimiter, called in ((";", "';'"), ("\t", "tabs"), ("|", "'|'")):
        if any(delimiter in name for name in column_names):
            return (
                f"; a column's name holds {called}: a CSV file is read with commas between "
                "columns, so save it comma-separated (or as jsonl)"
            )
    return ""


def _header(file: Path) -> list[str]:
    """A CSV file's first line split at commas (roughly: for `delimiter_hint`)."""
    try:
        with fsspec.open(str(file), "rt", compression="infer", errors="replace") as stream:
            return stream.readline().rstrip("\r\n").split(",")
    except OSError:
        return []


def _bad_line(files: list[Path]) -> tuple[Path, str] | None:
    """The file and first line of `files` that is not UTF-8 text, or in a JSON Lines file
    not a JSON value (`line 18, column 23: Expecting ',' delimiter`); None if there is none.

    pyarrow's own message counts rows from 0, naming the line before the bad one."""
    for file in files:
        lines = ".jsonl" in [suffix.lower() for suffix in file.suffixes]
        with fsspec.open(str(file), "rb", compression="infer") as stream:
            for number, raw in enumerate(stream, 1):
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    return file, (
                        f"line {number}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at byte "
                        f"{exc.start + 1} of the line); save the file as UTF-8"
                    )
                if not lines or not text.strip():
                    continue
                try:
                    json.loads(text)
                except json.JSONDecodeError as exc:
                    return file, f"line {number}, column {exc.colno}: {exc.msg}"
    return None


def _load_saved(path: Path, shown: str, train_split: str) -> dict[str, datasets.Dataset]:
    """The splits of a `save_to_disk` folder (a DatasetDict, or one Dataset = train)."""
    try:
        names = saved_split_names(path, where=f"data.dataset: {shown}")
    except UnsafePathError:
        raise
    except (ValueError, KeyError, TypeError, OSError) as exc:
        raise DataError(
            f"data.dataset: cannot read {shown} as a save_to_disk folder: {_reason(exc)}"
        ) from exc
    if names is None:
        return {train_split: _load_saved_split(path, shown, train_split)}
    # Split by split: one empty split makes `datasets.load_from_disk` of the whole folder
    # fail with an IndexError, and the user should hear which split is empty.
    return {name: _load_saved_split(path / name, shown, name) for name in names}


def _load_saved_split(folder: Path, shown: str, split: str) -> datasets.Dataset:
    try:
        state = json.loads((folder / "state.json").read_text())
        if not state.get("_data_files"):
            raise DataError(f"data.dataset: split {split!r} of {shown} has no rows")
        saved = datasets.load_from_disk(str(folder))
    except DataError:
        raise
    except (pa.ArrowException, ValueError, OSError) as exc:
        raise DataError(
            f"data.dataset: cannot read split {split!r} of {shown} as a save_to_disk folder: "
            f"{_reason(exc)}"
        ) from exc
    assert isinstance(saved, datasets.Dataset)  # a split folder holds one Dataset
    return saved


def _reason(exc: BaseException) -> str:
    """The most specific message in an exception chain (`datasets` wraps the real one)."""
    for current in exception_chain(exc):
        if not isinstance(current, DatasetGenerationError) and str(current):
            return f"{type(current).__name__}: {current}"
    return type(exc).__name__
