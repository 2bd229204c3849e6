"""Real dialogue/summary rows (DialogSum) and writers for every file format the download reads."""

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from llm_pipeline.config import DataConfig

#: ../shared/data beside the project checkout (see its README); never copied into the repo.
SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
DIALOGSUM = SHARED_DATA / "dialogsum"

Rows = list[dict[str, Any]]
WriteRows = Callable[[Path, Rows, str], Path]


def _head(path: Path, count: int) -> Rows:
    rows = []
    with path.open() as lines:
        for line in lines:
            rows.append(json.loads(line))
            if len(rows) == count:
                break
    return rows


@pytest.fixture(scope="session")
def dialogsum() -> dict[str, Rows]:
    """A few real rows per split: `fname`, `dialogue`, `summary`.

    DialogSum's test split has three references (summary1..3), so the `test` rows here
    come from later validation rows: same columns as the other splits.
    """
    if not (DIALOGSUM / "train.jsonl").is_file():
        pytest.skip(f"DialogSum not found at {DIALOGSUM} (the shared data folder)")
    validation = _head(DIALOGSUM / "validation.jsonl", 14)
    return {
        "train": _head(DIALOGSUM / "train.jsonl", 40),
        "validation": validation[:8],
        "test": validation[8:],
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
def dialogsum_config() -> Callable[..., DataConfig]:
    """A DataConfig for DialogSum's columns; keyword arguments override fields."""

    def make(dataset: str | Path, **fields: Any) -> DataConfig:
        columns = {"document": "dialogue", "summary": "summary"}
        return DataConfig(dataset=str(dataset), columns=columns, **fields)

    return make
