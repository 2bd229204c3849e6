"""The download step: a dataset source → a `DatasetDict` on disk in the task's shape.

What later steps can rely on in the output folder (read it with `datasets.load_from_disk`):

- splits named `train`, `validation` and, when the source has one, `test`, whatever the
  source calls them (`data.train_split`, `data.validation_split`, `data.test_split`);
- `validation` is the source's own, or a seeded share of train (`data.validation_fraction`,
  `data.seed`) carved out when the source has none: the same seed gives the same rows; the
  carve takes at least `config.data.MIN_EVALUATION_ROWS` rows where train keeps as many,
  and exactly the `data.max_samples` cap on validation where one is set (`carve_size`);
- only the task's columns, named by role (summarization: `document`, `summary`);
- label columns as values a reader can use: a hub `ClassLabel` (or a list of them, for
  multi-label data) becomes its names, a missing or -1 id (unlabelled test splits) None;
  a float column holding whole numbers only (what pandas makes of integer labels with a
  missing cell) becomes int64, so label 1 is not read as "1.0";
- no empty split; `data.max_samples` caps applied (first rows, after the carve);
- `download.json`: the source, where each split came from, row counts, the config, and
  `data_notes`: what the step warned of, by split: evaluation rows that are also train rows,
  train's repeated rows (counted, kept; `data.overlap`), and `carve`, from which
  `source_rows` numbers a carved split's rows as the source does.

The test split: `data.test_split: null` means none. A source without the default `test`
split simply has none (common for single files), and evaluate scores `validation`
instead; a split named on purpose (any other name) that is missing is an error, since it
is most likely a typo.

The folder appears only when everything succeeded (`storage.atomic_output_dir`).
"""

import json
import logging
import math
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import datasets
import numpy as np

from llm_pipeline.config import DataConfig
from llm_pipeline.config.data import MIN_EVALUATION_ROWS
from llm_pipeline.data.overlap import find_overlap
from llm_pipeline.data.sources import NO_BUILTINS, Source, delimiter_hint, load_source
from llm_pipeline.errors import DataError
from llm_pipeline.storage import atomic_output_dir
from llm_pipeline.tasks import BuiltinDataset, Task

logger = logging.getLogger(__name__)

#: Canonical split names in the output, in order.
SPLITS = ("train", "validation", "test")
#: The record of what was downloaded, written beside the splits.
INFO_FILE = "download.json"
#: Its notes on the data (`data.overlap`), by split: what the step warned of.
DATA_NOTES_KEY = "data_notes"
#: Its record of the validation carve (null when the source has a validation split): the
#: source's split, its rows, the rows carved and the seed, which `source_rows` reads.
CARVE_KEY = "carve"


def download_dataset(
    config: DataConfig,
    task: Task,
    output_dir: str | Path,
    *,
    builtins: Mapping[str, BuiltinDataset] = NO_BUILTINS,
) -> dict[str, int]:
    """Load `config.dataset`, shape it for `task`, save it to `output_dir`; rows per split.

    `builtins`: the datasets a `builtin:NAME` may name; the step gives every task's
    (`llm_pipeline.tasks.builtin_datasets`), so that any task may read another's demo data.
    Raises DataError, naming the config key, file, split or column at fault, when the
    data cannot be used; `output_dir` is then left untouched.
    """
    columns = _role_columns(config, task)
    _check_caps(config.max_samples)
    with tempfile.TemporaryDirectory(prefix="llm-pipeline-download-") as scratch:
        source = load_source(config, Path(scratch), builtins=builtins)
        splits, origins = _pick_splits(source, config)
        splits = {
            name: _to_roles(data, columns, name, origins[name], source)
            for name, data in splits.items()
        }
        carve = None
        if "validation" not in splits:
            splits, origins, carve = _carve_validation(splits, origins, config, source)
        splits = _capped(splits, config.max_samples)
        notes = find_overlap(splits, task, carved=carve is not None).notes(task)
        for note in notes.values():
            logger.warning("%s", note)
        rows = _save(splits, origins, config, output_dir, {DATA_NOTES_KEY: notes, CARVE_KEY: carve})
    logger.info("saved %s to %s", ", ".join(f"{k}: {v} rows" for k, v in rows.items()), output_dir)
    return rows


def _role_columns(config: DataConfig, task: Task) -> dict[str, str]:
    """`{role: source column}` for every role of the task's role set that the config maps."""
    roles = task.role_set(config.columns)
    if roles is None:
        raise DataError(
            f"data.columns: maps {sorted(config.columns)}; task {task.name!r} needs exactly "
            f"{task.describe_role_sets()}"
        )
    columns = {role: config.columns[role] for role in roles}
    by_column: dict[str, list[str]] = {}
    for role, column in columns.items():
        by_column.setdefault(column, []).append(role)
    shared = {column: named for column, named in by_column.items() if len(named) > 1}
    if shared:
        column, named = next(iter(shared.items()))
        raise DataError(f"data.columns: {' and '.join(named)} both name column {column!r}")
    return columns


def _pick_splits(
    source: Source, config: DataConfig
) -> tuple[dict[str, datasets.Dataset], dict[str, str]]:
    """The source's splits under canonical names, and the source name of each."""
    available = source.splits
    there = ", ".join(sorted(available))
    if config.train_split not in available:
        raise DataError(
            f"data.train_split: split {config.train_split!r} not in {source.where} "
            f"(splits there: {there})"
        )
    wanted = {"train": config.train_split, "validation": config.validation_split}
    if config.test_split is not None:
        wanted["test"] = config.test_split
    picked, origins = {}, {}
    for name, split in wanted.items():
        if split in available:
            picked[name], origins[name] = available[split], split
        elif name == "validation":
            logger.info("%s has no split %r: carving validation from train", source.where, split)
        elif split == DataConfig.model_fields["test_split"].default:
            logger.warning(
                "%s has no split %r: no test split; evaluate will score validation "
                "(splits there: %s)",
                source.where,
                split,
                there,
            )
        else:
            raise DataError(
                f"data.test_split: split {split!r} not in {source.where} (splits there: "
                f"{there}); set data.test_split to null to evaluate on validation"
            )
    return picked, origins


def _to_roles(
    data: datasets.Dataset, columns: dict[str, str], name: str, split: str, source: Source
) -> datasets.Dataset:
    """Keep the task's columns only, renamed to their roles; refuse an empty split.

    `name` is the output's name for the split, `split` the source's.
    """
    if data.num_rows == 0:
        raise DataError(f"data.dataset: split {split!r} of {source.where} has no rows")
    for role, column in columns.items():
        if column not in data.column_names:
            # Test splits often differ (DialogSum's has summary1..3); say how to skip one.
            hint = "; set data.test_split to null to leave it out" if name == "test" else ""
            hint = delimiter_hint(data.column_names) or hint
            raise DataError(
                f"data.columns.{role}: column {column!r} not in split {split!r} of "
                f"{source.where} (columns there: {', '.join(data.column_names)}){hint}"
            )
    renames = {column: role for role, column in columns.items() if column != role}
    return _readable_labels(data.select_columns(list(columns.values())).rename_columns(renames))


def _readable_labels(data: datasets.Dataset) -> datasets.Dataset:
    """`ClassLabel` ids (alone or in lists) as their names, whole floats as integers.

    Casting a `ClassLabel` to a string would give "0", "1": its names are what the rows
    mean, and what a model's `id2label` and a served prediction should say.
    """
    order = list(data.column_names)
    for column, feature in data.features.items():
        inner = getattr(feature, "feature", None)
        if isinstance(feature, datasets.ClassLabel):
            names = _label_names(data.data.column(column).to_pylist(), feature)
            data = _replaced(data, column, names, datasets.Value("string"))
        elif isinstance(feature, datasets.List | datasets.LargeList) and isinstance(
            inner, datasets.ClassLabel
        ):
            lists = [
                None if ids is None else _label_names(ids, inner)
                for ids in data.data.column(column).to_pylist()
            ]
            data = _replaced(data, column, lists, datasets.List(datasets.Value("string")))
        elif isinstance(feature, datasets.Value) and feature.dtype.startswith("float"):
            values = data.data.column(column).to_numpy(zero_copy_only=False).astype(float)
            present = values[~np.isnan(values)]
            if len(present) and np.all(present == np.round(present)):
                data = data.cast_column(column, datasets.Value("int64"))
    return data.select_columns(order)


def _label_names(ids: list[int | None], feature: datasets.ClassLabel) -> list[str | None]:
    """Each id's name; None for a missing id or -1 (the hub's mark for an unlabelled row)."""
    names: list[str] = feature.names
    return [names[i] if i is not None and 0 <= i < len(names) else None for i in ids]


def _replaced(
    data: datasets.Dataset, column: str, values: list[Any], feature: Any
) -> datasets.Dataset:
    return data.remove_columns([column]).add_column(column, values, feature=feature)


def _carve_validation(
    splits: dict[str, datasets.Dataset], origins: dict[str, str], config: DataConfig, source: Source
) -> tuple[dict[str, datasets.Dataset], dict[str, str], dict[str, Any]]:
    """A seeded random share of train becomes validation; the rest stays train. Also the
    carve's record (`CARVE_KEY`), from which `source_rows` finds each row's source row."""
    train = splits["train"]
    size = carve_size(train.num_rows, config)
    if size >= train.num_rows:
        raise DataError(
            f"data.validation_fraction: split {config.train_split!r} of {source.where} has "
            f"{train.num_rows} row(s), too few to carve a validation split from and still "
            "train; add rows or a validation split to the source"
        )
    rows = carved_rows(train.num_rows, size, config.seed)
    # keep_in_memory: the index mappings would otherwise be cached beside the source's
    # files, which may be a user's read-only folder. Train keeps the source's order.
    carved = {name: train.select(rows[name], keep_in_memory=True) for name in rows}
    carved = {**splits, **carved}
    how = f"{size} of {train.num_rows} rows, seed {config.seed}"
    # Fewer rows than a gate can trust is said once, by evaluate (console and report), on
    # the rows it scores: a warning here too printed it twice in one run, and about a split
    # the gate does not read when the source has a test split.
    logger.info(
        "validation: %d row(s) carved from %d (at least %d where train keeps as many)",
        size,
        train.num_rows,
        MIN_EVALUATION_ROWS,
    )
    record = {
        "split": config.train_split,
        "of": source.where,
        "rows": train.num_rows,
        "size": size,
        "seed": config.seed,
    }
    origins = {**origins, "validation": f"carved from {config.train_split!r} ({how})"}
    return carved, origins, record


def carved_rows(rows: int, size: int, seed: int) -> dict[str, np.ndarray]:
    """Which of train's `rows` (0-based) the carve of `size` rows with `seed` leaves in
    `train` (in the source's order) and puts in `validation` (shuffled)."""
    order = np.random.default_rng(seed).permutation(rows)
    return {"train": np.sort(order[size:]), "validation": order[:size]}


def source_rows(info: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """For each split the download step carved (`download.json`'s `carve`), the source row
    (0-based) of each of its rows; {} when nothing was carved."""
    carve = info.get(CARVE_KEY)
    if not isinstance(carve, dict):
        return {}
    return carved_rows(int(carve["rows"]), int(carve["size"]), int(carve["seed"]))


def carve_size(rows: int, config: DataConfig) -> int:
    """How many of train's `rows` the validation carve takes.

    `data.validation_fraction` of them, raised to `MIN_EVALUATION_ROWS` (a handful of
    rows would leave the gate comparing noise) or, when set, to `data.max_samples`'s
    validation cap, which is also the most it takes (rows carved only to be capped away
    would be lost to training). Raising never takes more than half: train keeps at least
    as many rows as validation.
    """
    size = math.ceil(rows * config.validation_fraction)
    cap = config.max_samples.get("validation")
    wanted = MIN_EVALUATION_ROWS if cap is None else cap
    size = max(size, min(wanted, rows // 2))
    return size if cap is None else min(size, cap)


def _check_caps(caps: dict[str, int]) -> None:
    """Refuse caps on splits the output cannot have, before any data is read."""
    unknown = sorted(set(caps) - set(SPLITS))
    if unknown:
        raise DataError(
            f"data.max_samples: unknown split {', '.join(map(repr, unknown))}; caps use the "
            f"output's split names: {', '.join(SPLITS)}"
        )


def _capped(
    splits: dict[str, datasets.Dataset], caps: dict[str, int]
) -> dict[str, datasets.Dataset]:
    """Each split cut to its first `caps[name]` rows."""
    return {
        name: data.select(range(min(caps[name], data.num_rows))) if name in caps else data
        for name, data in splits.items()
    }


def _save(
    splits: dict[str, datasets.Dataset],
    origins: dict[str, str],
    config: DataConfig,
    output_dir: str | Path,
    found: dict[str, Any],
) -> dict[str, int]:
    """Write the splits and `download.json` (with what the step `found`: its data notes and
    its carve) to `output_dir` in one step; rows per split."""
    rows = {name: splits[name].num_rows for name in SPLITS if name in splits}
    with atomic_output_dir(output_dir) as staging:
        datasets.DatasetDict({name: splits[name] for name in rows}).save_to_disk(str(staging))
        _write_info(staging / INFO_FILE, config, origins, rows, found)
    return rows


def _write_info(
    path: Path,
    config: DataConfig,
    origins: dict[str, str],
    rows: dict[str, int],
    found: dict[str, Any],
) -> None:
    """Record what this folder holds and the config that made it."""
    info = {
        "dataset": config.dataset,
        "subset": config.subset,
        "revision": config.revision,
        "splits": {name: {"from": origins[name], "rows": count} for name, count in rows.items()},
        **found,
        "config": config.model_dump(mode="json"),
    }
    path.write_text(json.dumps(info, indent=2) + "\n")
