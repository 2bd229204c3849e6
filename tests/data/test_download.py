"""The download step on real text (the tests' docstring pairs): every source kind, the split
rules, each error; and the published DialogSum files where they are beside the checkout."""

import gzip
import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import datasets
import fsspec
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from llm_pipeline.config import DataConfig
from llm_pipeline.data import DataError
from llm_pipeline.data.download import download_dataset
from llm_pipeline.tasks import get_task

TASK = get_task("summarization")
FORMATS = ["jsonl", "json", "csv", "parquet", "arrow"]


def write_splits(folder: Path, splits: dict[str, list[dict]], write, fmt: str = "jsonl") -> Path:
    for split, rows in splits.items():
        write(folder / split, rows, fmt)
    return folder


def documents(rows: list[dict]) -> list[str]:
    return [row["text"] for row in rows]


def assert_nothing_written(output: Path) -> None:
    """Neither the output nor a leftover temporary sibling exists."""
    assert not output.exists()
    leftovers = list(output.parent.iterdir()) if output.parent.exists() else []
    assert leftovers == []


def download_error(config: DataConfig, output: Path) -> str:
    with pytest.raises(DataError) as caught:
        download_dataset(config, TASK, output)
    assert_nothing_written(output)
    return str(caught.value)


# --- sources -------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_folder_of_split_files_in_each_format(tmp_path, source_rows, write, source_config, fmt):
    source = write_splits(tmp_path / "source", source_rows, write, fmt)
    output = tmp_path / "out" / "dataset"

    rows = download_dataset(source_config(source), TASK, output)

    assert rows == {"train": 40, "validation": 8, "test": 6}
    saved = datasets.load_from_disk(str(output))
    assert isinstance(saved, datasets.DatasetDict)
    for split, expected in source_rows.items():
        assert sorted(saved[split].column_names) == ["document", "summary"]
        assert saved[split]["document"] == documents(expected)
        assert saved[split]["summary"] == [row["summary"] for row in expected]


@pytest.mark.parametrize("fmt", ["jsonl.gz", "csv", "parquet"])
def test_single_file_is_train_and_validation_is_carved(
    tmp_path, source_rows, write, source_config, fmt
):
    path = write(tmp_path / "all", source_rows["train"], fmt.removesuffix(".gz"))
    if fmt.endswith(".gz"):
        packed = path.with_name(path.name + ".gz")
        packed.write_bytes(gzip.compress(path.read_bytes()))
        path.unlink()
        path = packed
    output = tmp_path / "out"

    rows = download_dataset(source_config(path, validation_fraction=0.25), TASK, output)

    # No test split in the source: none in the output (evaluate scores validation). A quarter
    # of 40 is raised towards the minimum carve, up to half.
    assert rows == {"train": 20, "validation": 20}
    saved = datasets.load_from_disk(str(output))
    assert set(saved) == {"train", "validation"}
    assert set(saved["train"]["document"]) | set(saved["validation"]["document"]) == set(
        documents(source_rows["train"])
    )


def test_save_to_disk_folder_of_a_dataset_dict(tmp_path, source_rows, source_config):
    source = tmp_path / "saved"
    datasets.DatasetDict(
        {split: datasets.Dataset.from_list(rows) for split, rows in source_rows.items()}
    ).save_to_disk(str(source))

    rows = download_dataset(source_config(source), TASK, tmp_path / "out")

    assert rows == {"train": 40, "validation": 8, "test": 6}
    saved = datasets.load_from_disk(str(tmp_path / "out"))
    assert saved["test"]["document"] == documents(source_rows["test"])


def test_save_to_disk_folder_of_one_dataset_is_train(tmp_path, source_rows, source_config):
    source = tmp_path / "saved"
    datasets.Dataset.from_list(source_rows["train"]).save_to_disk(str(source))

    rows = download_dataset(source_config(source), TASK, tmp_path / "out")

    assert rows == {"train": 20, "validation": 20}  # 5% of 40 raised towards 30, up to half
    # The user's folder is read, never written (no index caches beside their files).
    assert sorted(entry.name for entry in source.iterdir()) == sorted(
        ["data-00000-of-00001.arrow", "dataset_info.json", "state.json"]
    )


def test_source_split_names_map_to_canonical_names(tmp_path, source_rows, write, source_config):
    renamed = {"training": source_rows["train"], "dev": source_rows["validation"]}
    renamed["eval"] = source_rows["test"]
    source = write_splits(tmp_path / "source", renamed, write)
    config = source_config(
        source, train_split="training", validation_split="dev", test_split="eval"
    )

    rows = download_dataset(config, TASK, tmp_path / "out")

    assert rows == {"train": 40, "validation": 8, "test": 6}
    saved = datasets.load_from_disk(str(tmp_path / "out"))
    assert saved["validation"]["document"] == documents(source_rows["validation"])


def test_test_split_null_leaves_it_out(tmp_path, source_rows, write, source_config):
    source = write_splits(tmp_path / "source", source_rows, write)
    rows = download_dataset(source_config(source, test_split=None), TASK, tmp_path / "out")
    assert rows == {"train": 40, "validation": 8}


def test_gcs_folder_file_and_save_to_disk(tmp_path, source_rows, write, source_config, gcs_bucket):
    gcs = fsspec.filesystem("gs")
    local = write_splits(tmp_path / "local", source_rows, write)
    for file in local.iterdir():
        gcs.put_file(str(file), f"{gcs_bucket}/data/{file.name}")
    saved = tmp_path / "saved"
    datasets.Dataset.from_list(source_rows["train"]).save_to_disk(str(saved))
    for file in saved.iterdir():
        gcs.put_file(str(file), f"{gcs_bucket}/saved/{file.name}")

    folder = download_dataset(source_config(f"gs://{gcs_bucket}/data"), TASK, tmp_path / "folder")
    single = download_dataset(
        source_config(f"gs://{gcs_bucket}/data/validation.jsonl"), TASK, tmp_path / "one"
    )
    from_saved = download_dataset(
        source_config(f"gs://{gcs_bucket}/saved"), TASK, tmp_path / "saved-out"
    )

    assert folder == {"train": 40, "validation": 8, "test": 6}
    assert single == {"train": 4, "validation": 4}
    assert from_saved == {"train": 20, "validation": 20}
    copy = datasets.load_from_disk(str(tmp_path / "folder"))
    assert copy["train"]["summary"] == [row["summary"] for row in source_rows["train"]]


def test_missing_gcs_path(tmp_path, source_config, gcs_bucket):
    message = download_error(
        source_config(f"gs://{gcs_bucket}/nothing-here"), tmp_path / "out" / "dataset"
    )
    assert message == f"data.dataset: gs://{gcs_bucket}/nothing-here does not exist"


# --- split rules ----------------------------------------------------------------------


def test_max_samples_takes_the_first_rows_of_each_split(
    tmp_path, source_rows, write, source_config
):
    source = write_splits(tmp_path / "source", source_rows, write)
    config = source_config(source, max_samples={"train": 5, "validation": 3})

    rows = download_dataset(config, TASK, tmp_path / "out")

    assert rows == {"train": 5, "validation": 3, "test": 6}
    saved = datasets.load_from_disk(str(tmp_path / "out"))
    assert saved["train"]["document"] == documents(source_rows["train"][:5])
    assert saved["validation"]["document"] == documents(source_rows["validation"][:3])


def test_max_samples_apply_after_the_carve(tmp_path, source_rows, write, source_config):
    path = write(tmp_path / "train", source_rows["train"], "jsonl")
    full = download_dataset(source_config(path, validation_fraction=0.25), TASK, tmp_path / "a")
    capped_config = source_config(
        path, validation_fraction=0.25, max_samples={"train": 7, "validation": 4}
    )
    capped = download_dataset(capped_config, TASK, tmp_path / "b")

    assert full == {"train": 20, "validation": 20}
    assert capped == {"train": 7, "validation": 4}
    # Capping does not change which rows were carved: validation is the same draw, cut.
    whole = list(datasets.load_from_disk(str(tmp_path / "a"))["validation"]["document"])
    cut = list(datasets.load_from_disk(str(tmp_path / "b"))["validation"]["document"])
    assert cut == whole[:4]


@pytest.mark.parametrize(
    ("rows", "fields", "expected"),
    [
        # 5% of 48 is 3 rows, too few to judge a model by: raised towards the minimum (30),
        # up to half, so train keeps as many rows as validation.
        (48, {}, {"train": 24, "validation": 24}),
        (100, {}, {"train": 70, "validation": 30}),
        (5, {}, {"train": 3, "validation": 2}),
        # A larger share asked for is taken as asked.
        (100, {"validation_fraction": 0.4}, {"train": 60, "validation": 40}),
        # The validation cap is how many rows the carve takes: more, up to half of train ...
        (48, {"max_samples": {"validation": 16}}, {"train": 32, "validation": 16}),
        (48, {"max_samples": {"validation": 64}}, {"train": 24, "validation": 24}),
        # ... or fewer, and the rows it leaves stay in train instead of being capped away.
        (100, {"max_samples": {"validation": 10}}, {"train": 90, "validation": 10}),
    ],
)
def test_the_carve_takes_a_minimum_of_rows_and_honours_the_validation_cap(
    tmp_path, docstring_data, write, source_config, rows, fields, expected
):
    train = [
        {"text": row["document"], "summary": row["summary"]}
        for row in docstring_data.rows("train", rows)
    ]
    path = write(tmp_path / "mine", train, "csv")

    counts = download_dataset(source_config(path, **fields), TASK, tmp_path / "out")

    assert counts == expected
    info = json.loads((tmp_path / "out" / "download.json").read_text())
    assert info["splits"]["validation"]["from"] == (
        f"carved from 'train' ({expected['validation']} of {rows} rows, seed 42)"
    )


def test_a_small_carve_leaves_the_few_rows_warning_to_evaluate(
    tmp_path, source_rows, write, source_config, caplog
):
    # 20 rows carved from 40: evaluate warns that so few are too few for a gate, on the
    # console and in the report; the download step saying it too printed it twice a run.
    path = write(tmp_path / "train", source_rows["train"], "jsonl")

    with caplog.at_level("INFO", logger="llm_pipeline"):
        download_dataset(source_config(path), TASK, tmp_path / "out")

    assert "validation: 20 row(s) carved from 40" in caplog.text
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
        f"{path} has no split 'test': no test split; evaluate will score validation "
        "(splits there: train)"
    ]


def test_carved_validation_is_seeded_and_disjoint_from_train(
    tmp_path, source_rows, write, source_config
):
    path = write(tmp_path / "train", source_rows["train"], "jsonl")

    def carve(seed: int, name: str) -> tuple[list[str], list[str]]:
        config = source_config(path, validation_fraction=0.2, seed=seed)
        download_dataset(config, TASK, tmp_path / name)
        saved = datasets.load_from_disk(str(tmp_path / name))
        return list(saved["train"]["document"]), list(saved["validation"]["document"])

    train, validation = carve(7, "first")
    train_again, validation_again = carve(7, "again")
    _, validation_other_seed = carve(8, "other")

    assert len(validation) == 20
    assert (train, validation) == (train_again, validation_again)
    assert validation_other_seed != validation
    assert not set(train) & set(validation)
    assert sorted(train + validation) == sorted(documents(source_rows["train"]))
    # Train keeps the source's order; only the carved rows are gone.
    assert train == [doc for doc in documents(source_rows["train"]) if doc not in validation]


def test_rerun_replaces_the_previous_output(tmp_path, source_rows, write, source_config):
    source = write_splits(tmp_path / "source", source_rows, write)
    output = tmp_path / "out"
    download_dataset(source_config(source), TASK, output)

    rows = download_dataset(source_config(source, test_split=None), TASK, output)

    assert set(datasets.load_from_disk(str(output))) == set(rows) == {"train", "validation"}
    assert [entry.name for entry in tmp_path.iterdir() if entry.name.startswith(".")] == []


def test_a_failed_rerun_keeps_the_previous_output(tmp_path, source_rows, write, source_config):
    source = write_splits(tmp_path / "source", source_rows, write)
    output = tmp_path / "out"
    download_dataset(source_config(source), TASK, output)

    with pytest.raises(DataError):
        download_dataset(source_config(source, train_split="nope"), TASK, output)

    assert datasets.load_from_disk(str(output)).num_rows["train"] == 40


# --- errors ---------------------------------------------------------------------------


def test_missing_column_names_the_columns_that_exist(tmp_path, source_rows, write, source_config):
    source = write_splits(tmp_path / "source", source_rows, write)
    config = DataConfig(dataset=str(source), columns={"document": "article", "summary": "summary"})

    message = download_error(config, tmp_path / "out" / "dataset")

    assert message == (
        f"data.columns.document: column 'article' not in split 'train' of {source} "
        "(columns there: name, text, summary)"
    )


def test_a_test_split_without_the_columns_says_how_to_leave_it_out(
    tmp_path, source_rows, write, source_config
):
    # A test split with several references (summary1.., as DialogSum's), no `summary`.
    test_rows = [
        {"name": row["name"], "text": row["text"], "summary1": row["summary"]}
        for row in source_rows["test"]
    ]
    source = write_splits(tmp_path / "source", {**source_rows, "test": test_rows}, write)

    message = download_error(source_config(source), tmp_path / "out" / "dataset")
    rows = download_dataset(source_config(source, test_split=None), TASK, tmp_path / "ok")

    assert message == (
        f"data.columns.summary: column 'summary' not in split 'test' of {source} (columns "
        "there: name, text, summary1); set data.test_split to null to leave it out"
    )
    assert rows == {"train": 40, "validation": 8}


def empty_jsonl(path: Path) -> Path:
    path = path.with_name(path.name + ".jsonl")
    path.write_bytes(b"")
    return path


def header_only_csv(path: Path) -> Path:
    path = path.with_name(path.name + ".csv")
    path.write_text("name,text,summary\n")
    return path


def zero_row_parquet(path: Path) -> Path:
    path = path.with_name(path.name + ".parquet")
    schema = pa.schema([(name, pa.string()) for name in ("name", "text", "summary")])
    pq.write_table(schema.empty_table(), path)
    return path


@pytest.mark.parametrize("make_empty", [empty_jsonl, header_only_csv, zero_row_parquet])
def test_empty_split(tmp_path, source_rows, write, source_config, make_empty):
    source = tmp_path / "source"
    fmt = {empty_jsonl: "jsonl", header_only_csv: "csv", zero_row_parquet: "parquet"}[make_empty]
    write(source / "train", source_rows["train"], fmt)
    empty = make_empty(source / "validation")

    message = download_error(source_config(source), tmp_path / "out" / "dataset")

    assert message.startswith("data.dataset: split 'validation' has no rows")
    assert str(empty) in message


def test_empty_split_in_a_saved_dataset(tmp_path, source_rows, source_config):
    source = tmp_path / "saved"
    empty = datasets.Dataset.from_list(source_rows["train"]).select([])
    datasets.DatasetDict(
        {"train": datasets.Dataset.from_list(source_rows["train"]), "validation": empty}
    ).save_to_disk(str(source))

    message = download_error(source_config(source), tmp_path / "out" / "dataset")

    assert message == f"data.dataset: split 'validation' of {source} has no rows"


CORRUPT = {
    "jsonl": (b'{"name": "a", "text": "hi", "summary": "s"}\n{"name": "b", "te', "json"),
    "parquet": (b"PAR1 this was cut short", "parquet"),
    "arrow": (b"ARROW1\x00\x00 truncated", "arrow"),
}


@pytest.mark.parametrize("fmt", sorted(CORRUPT))
def test_unreadable_file(tmp_path, source_rows, write, source_config, fmt):
    source = tmp_path / "source"
    write(source / "train", source_rows["train"], fmt)
    broken = source / f"validation.{fmt}"
    content, builder = CORRUPT[fmt]
    broken.write_bytes(content)

    message = download_error(source_config(source), tmp_path / "out" / "dataset")

    assert message.startswith(f"data.dataset: cannot read {broken} as {builder}: ")


def test_a_bad_json_line_in_the_middle_is_named_by_its_line(
    tmp_path, source_rows, write, source_config
):
    # pyarrow's message says "in row 17" for line 18 (it counts from 0).
    source = write(tmp_path / "source" / "train", source_rows["train"], "jsonl")
    lines = source.read_text().splitlines(keepends=True)
    lines[17] = '{"name": "b", "text": "cut, "summary": "s"}\n'
    source.write_text("".join(lines))

    message = download_error(source_config(source), tmp_path / "out" / "dataset")

    assert message == (
        f"data.dataset: cannot read {source} as json: line 18, column 30: Expecting ',' delimiter"
    )


def test_a_json_line_that_is_not_utf8_is_refused_naming_it(
    tmp_path, source_rows, write, source_config
):
    # pyarrow reads the bytes into its strings; preprocess then failed with a traceback.
    source = write(tmp_path / "source" / "train", source_rows["train"], "jsonl")
    lines = source.read_bytes().splitlines(keepends=True)
    lines[4] = b'{"name": "caf\xe9", "text": "t", "summary": "s"}\n'
    source.write_bytes(b"".join(lines))

    message = download_error(source_config(source), tmp_path / "out" / "dataset")

    assert message == (
        f"data.dataset: cannot read {source} as json: line 5: not UTF-8 text (byte 0xe9 at "
        "byte 14 of the line); save the file as UTF-8"
    )


def test_a_semicolon_csv_is_told_to_use_commas(tmp_path, source_config):
    # Excel in many locales saves CSV with ';': the whole header reads as one column.
    source = tmp_path / "train.csv"
    rows = [{"name": f"f{i}", "text": f"Fox {i} jumps.", "summary": "A fox."} for i in range(40)]
    pd.DataFrame(rows).to_csv(source, sep=";", index=False)

    message = download_error(source_config(source), tmp_path / "out" / "dataset")

    assert message == (
        f"data.columns.document: column 'text' not in split 'train' of {source} (columns "
        "there: name;text;summary); a column's name holds ';': a CSV file is read with "
        "commas between columns, so save it comma-separated (or as jsonl)"
    )


def test_a_semicolon_csv_with_commas_in_its_text_is_told_to_use_commas(tmp_path, source_config):
    # The commas in the text then split rows into more fields than the header has.
    source = tmp_path / "train.csv"
    text = [f"Fox {i}{', jumps' if i % 2 else ''}." for i in range(40)]
    rows = [{"name": f"f{i}", "text": text[i], "summary": "A fox."} for i in range(40)]
    pd.DataFrame(rows).to_csv(source, sep=";", index=False)

    message = download_error(source_config(source), tmp_path / "out" / "dataset")

    assert message.startswith(f"data.dataset: cannot read {source} as csv: ")
    assert message.endswith(
        "; a column's name holds ';': a CSV file is read with commas between columns, "
        "so save it comma-separated (or as jsonl)"
    )


def test_a_latin1_csv_is_refused_naming_the_line(tmp_path, source_config):
    # The csv reader's own message gives a byte offset ("position 83"), not a line.
    source = tmp_path / "train.csv"
    rows = [{"name": f"f{i}", "text": f"Fox {i} jumps.", "summary": "A fox."} for i in range(40)]
    rows[6]["text"] = "Un café."
    pd.DataFrame(rows).to_csv(source, index=False, encoding="latin-1")

    message = download_error(source_config(source), tmp_path / "out" / "dataset")

    assert message == (
        f"data.dataset: cannot read {source} as csv: line 8: not UTF-8 text (byte 0xe9 at "
        "byte 10 of the line); save the file as UTF-8"
    )


def test_missing_train_split_lists_the_splits(tmp_path, source_rows, write, source_config):
    source = write_splits(tmp_path / "source", source_rows, write)
    message = download_error(
        source_config(source, train_split="training"), tmp_path / "out" / "dataset"
    )
    assert message == (
        f"data.train_split: split 'training' not in {source} (splits there: test, train, "
        "validation)"
    )


def test_a_named_test_split_that_is_missing(tmp_path, source_rows, write, source_config):
    source = write_splits(tmp_path / "source", source_rows, write)
    message = download_error(source_config(source, test_split="tset"), tmp_path / "out" / "ds")
    assert message.startswith(f"data.test_split: split 'tset' not in {source}")
    assert "set data.test_split to null" in message


def test_too_few_rows_to_carve(tmp_path, source_rows, write, source_config):
    path = write(tmp_path / "one", source_rows["train"][:1], "jsonl")
    message = download_error(source_config(path), tmp_path / "out" / "dataset")
    assert message.startswith(f"data.validation_fraction: split 'train' of {path} has 1 row(s)")


def test_unknown_max_samples_split(tmp_path, source_rows, write, source_config):
    source = write_splits(tmp_path / "source", source_rows, write)
    config = source_config(source, max_samples={"dev": 3})
    message = download_error(config, tmp_path / "out" / "dataset")
    assert message.startswith("data.max_samples: unknown split 'dev'")


def test_paths_that_do_not_hold_data(tmp_path, source_config):
    notes = tmp_path / "notes.txt"
    notes.write_text("not data")
    missing = tmp_path / "nowhere" / "train.jsonl"
    output = tmp_path / "out" / "dataset"

    assert download_error(source_config(missing), output) == (
        f"data.dataset: {missing}: no such file or folder"
    )
    assert download_error(source_config(notes), output).startswith(
        f"data.dataset: {notes}: unknown file type"
    )
    assert download_error(source_config(tmp_path), output).startswith(
        f"data.dataset: no data files in {tmp_path} (found: notes.txt"
    )


HUB_DOWNLOAD = """
import sys
from llm_pipeline.config import DataConfig
from llm_pipeline.data import DataError
from llm_pipeline.data.download import download_dataset
from llm_pipeline.tasks import get_task

config = DataConfig(dataset=sys.argv[2], subset="default")
try:
    download_dataset(config, get_task("summarization"), sys.argv[1])
except DataError as exc:
    print(exc)
    sys.exit(3)
"""


def run_hub_download(tmp_path: Path, dataset: str = "knkarthick/dialogsum", **env: str) -> str:
    """Download a hub id in a fresh interpreter: huggingface_hub reads its env on import."""
    clean = {k: v for k, v in os.environ.items() if not k.endswith("_OFFLINE")}
    clean.update(HF_HOME=str(tmp_path / "hf-home"), **env)
    output = tmp_path / "out" / "dataset"
    done = subprocess.run(
        [sys.executable, "-c", HUB_DOWNLOAD, str(output), dataset],
        env=clean,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 3, done.stdout + done.stderr
    assert_nothing_written(output)
    return done.stdout


def test_unreachable_hub_says_the_machine_is_offline(tmp_path, loopback_port):
    endpoint = f"http://127.0.0.1:{loopback_port}"  # nothing listens there

    message = run_hub_download(tmp_path, HF_ENDPOINT=endpoint)

    assert message.startswith(
        f"data.dataset: this machine cannot reach the Hugging Face hub at {endpoint} to load "
        "'knkarthick/dialogsum'; it looks offline"
    )
    assert "datasets.load_dataset('knkarthick/dialogsum', 'default').save_to_disk('DIR')" in message
    assert "set data.dataset to its path" in message


def test_offline_mode_without_a_cached_copy(tmp_path):
    message = run_hub_download(tmp_path, HF_HUB_OFFLINE="1")

    assert message.startswith("data.dataset: hub dataset 'knkarthick/dialogsum' is not in the ")
    assert "offline mode (HF_HUB_OFFLINE or HF_DATASETS_OFFLINE)" in message
    assert "save_to_disk('DIR')" in message


class NoSuchRepo(BaseHTTPRequestHandler):
    """Answers as the hub does for an unknown repository id."""

    def do_GET(self) -> None:
        self.send_response(404)
        self.send_header("X-Error-Code", "RepoNotFound")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_neither_a_local_path_nor_on_the_hub(tmp_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), NoSuchRepo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        message = run_hub_download(tmp_path, "dialogsum", HF_ENDPOINT=endpoint)
    finally:
        server.shutdown()
        server.server_close()

    assert message.startswith(
        f"data.dataset: 'dialogsum' is not a local file or folder, and the Hugging Face hub "
        f"at {endpoint} has no dataset by that id"
    )


# --- the published DialogSum files ----------------------------------------------------

#: ../shared/data beside the checkout (see its README); never copied into the repository.
DIALOGSUM = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "dialogsum"


@pytest.mark.skipif(
    not (DIALOGSUM / "train.jsonl").is_file(),
    reason=f"DialogSum-specific check (its published layout and row counts): "
    f"{DIALOGSUM} is absent (../shared/data beside the checkout)",
)
def test_the_published_dialogsum_folder(tmp_path):
    """DialogSum as released: train and validation hold `dialogue` and `summary`; its test
    split has three references (summary1..3) and no `summary`, so it must be left out."""
    columns = {"document": "dialogue", "summary": "summary"}
    config = DataConfig(dataset=str(DIALOGSUM), columns=columns)
    without_test = DataConfig(dataset=str(DIALOGSUM), columns=columns, test_split=None)

    message = download_error(config, tmp_path / "out" / "dataset")
    rows = download_dataset(without_test, TASK, tmp_path / "ok")

    assert message == (
        f"data.columns.summary: column 'summary' not in split 'test' of {DIALOGSUM} (columns "
        "there: fname, dialogue, summary1, topic1, summary2, topic2, summary3, topic3); set "
        "data.test_split to null to leave it out"
    )
    assert rows == {"train": 12_460, "validation": 500}
    saved = datasets.load_from_disk(str(tmp_path / "ok"))
    assert saved["validation"].column_names == ["document", "summary"]
    assert saved["validation"][0]["document"].startswith("#Person1#: ")


# --- chats (instruction tuning) ------------------------------------------------------


def test_a_chat_column_is_kept_as_chats_even_with_a_malformed_row(tmp_path):
    """OpenAI/Vertex-style chat files: the chats stay lists of turns for preprocess to check,
    a row that is not one (a string, an unknown role) included, and the other columns go."""
    chat = [{"role": "user", "content": "Hi."}, {"role": "assistant", "content": "Hello."}]
    rows = [
        {"id": 1, "conversation": chat},
        {"id": 2, "conversation": "not a chat"},
        {"id": 3, "conversation": [{"role": "bot", "content": "x"}]},
    ]
    source = tmp_path / "chats.jsonl"
    source.write_text("".join(json.dumps(row) + "\n" for row in rows))
    config = DataConfig(
        dataset=str(source), columns={"messages": "conversation"}, validation_fraction=0.34
    )
    download_dataset(config, get_task("instruction_tuning"), tmp_path / "out")
    saved = datasets.load_from_disk(str(tmp_path / "out"))
    kept = list(saved["train"]["messages"]) + list(saved["validation"]["messages"])
    assert saved["train"].column_names == ["messages"]
    assert sorted(map(json.dumps, kept)) == sorted(json.dumps(row["conversation"]) for row in rows)


def test_instruction_columns_must_be_one_role_set(tmp_path):
    config = DataConfig(dataset="unused", columns={"prompt": "q", "messages": "m"})
    with pytest.raises(DataError) as caught:
        download_dataset(config, get_task("instruction_tuning"), tmp_path / "out")
    assert str(caught.value) == (
        "data.columns: maps ['messages', 'prompt']; task 'instruction_tuning' needs exactly "
        "['prompt', 'response'] or ['messages']"
    )
