"""Real document/summary rows laid out as a user's own data, and writers for every file format
the download reads.

The text is the tests' docstring pairs (`docstring_data`, tests/conftest.py), built offline.
The rows name their columns as a user's file might (`name`, `text`, `summary`), so the
download's column mapping and its dropping of other columns are exercised too.
"""

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from llm_pipeline.config import DataConfig

from ..docstring_data import DocstringData

Rows = list[dict[str, Any]]
WriteRows = Callable[[Path, Rows, str], Path]


#: Rows per split in `source_rows`.
SOURCE_ROWS = {"train": 40, "validation": 8, "test": 6}
#: The source's column for each of the task's roles (`source_config` maps them).
COLUMNS = {"document": "text", "summary": "summary"}


@pytest.fixture(scope="session")
def source_rows(docstring_data: DocstringData) -> dict[str, Rows]:
    """A few real rows per split, as a user's file holds them: `name` (what the docstring
    documents; a column the task does not use), `text` and `summary`."""
    return {
        split: [
            {
                "name": row["document"].split(":", 1)[0],
                "text": row["document"],
                "summary": row["summary"],
            }
            for row in docstring_data.rows(split, count)
        ]
        for split, count in SOURCE_ROWS.items()
    }


def write_rows(path: Path, rows: Rows, fmt: str) -> Path:
    """Write `rows` to `path` + the format's suffix as a real file of that format."""
    path = path.with_name(f"{path.name}.{fmt}")
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "jsonl":
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    elif fmt == "json":
        path.write_text(json.dumps(rows))
    elif fmt == "csv":
        pd.DataFrame(rows).to_csv(path, index=False)
    elif fmt == "parquet":
        pq.write_table(pa.Table.from_pylist(rows), path)
    elif fmt == "arrow":
        table = pa.Table.from_pylist(rows)
        with pa.ipc.new_file(str(path), table.schema) as writer:
            writer.write_table(table)
    else:
        raise ValueError(f"unknown format {fmt}")
    return path


@pytest.fixture
def write() -> WriteRows:
    """`write(path_without_suffix, rows, fmt)` → the file written."""
    return write_rows


@pytest.fixture
def source_config() -> Callable[..., DataConfig]:
    """A DataConfig for `source_rows`' columns; keyword arguments override fields."""

    def make(dataset: str | Path, **fields: Any) -> DataConfig:
        return DataConfig(dataset=str(dataset), columns=dict(COLUMNS), **fields)

    return make
