"""Preprocess on real text (the tests' docstring pairs) with a real (offline) tokenizer.

Expected values are computed here independently: each text tokenized on its own with the
tokenizer's own `truncation=True`, percentiles with numpy over those lengths.
"""

import json
import math
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, T5Tokenizer

from llm_pipeline.config import DataConfig, ModelConfig
from llm_pipeline.data.download import carved_rows, download_dataset
from llm_pipeline.data.preprocess import logger, preprocess_dataset, rows_as_in_source
from llm_pipeline.data.saved import MODEL_COLUMNS
from llm_pipeline.errors import DataError
from llm_pipeline.models import load_tokenizer
from llm_pipeline.output_files import PREPROCESS_REPORT_FILE
from llm_pipeline.tasks import get_task

from ..docstring_data import DocstringData
from ..offline_models import MINILM as MINILM_SOURCE

MINILM = ModelConfig(source=MINILM_SOURCE)
PREFIX = "summarize: "
MAX_SOURCE = 128
PERCENTILE = 90.0
TASK = get_task("summarization")

Row = dict[str, Any]
#: Rows a user's data really contains now and then; each must be dropped and counted.
BAD_ROWS: list[Row] = [
    {"document": "", "summary": "Nothing was said."},
    {"document": None, "summary": "The dialogue is missing."},
    {"document": "#Person1#: Hello.", "summary": "  \n\t "},
    {"document": "#Person1#: Hi there.", "summary": None},
]


def _save(folder: Path, splits: dict[str, list[Row]]) -> Path:
    """A DatasetDict laid out as the download step writes it."""
    features = datasets.Features({role: datasets.Value("string") for role in TASK.role_sets[0]})
    dataset = datasets.DatasetDict(
        {name: datasets.Dataset.from_list(rows, features=features) for name, rows in splits.items()}
    )
    dataset.save_to_disk(str(folder))
    return folder


def _config(**fields: Any) -> DataConfig:
    defaults: dict[str, Any] = {
        "dataset": "unused-here",
        "prefix": PREFIX,
        "max_source_length": MAX_SOURCE,
        "target_length_percentile": PERCENTILE,
    }
    return DataConfig(**(defaults | fields))


@pytest.fixture(scope="module")
def clean(docstring_data: DocstringData) -> dict[str, list[Row]]:
    """300 train and 60 validation rows of real text, as given."""
    return {
        "train": docstring_data.rows("train", 300),
        "validation": docstring_data.rows("validation", 60),
    }


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return load_tokenizer(MINILM)


@pytest.fixture(scope="module")
def run(clean: dict[str, list[Row]], tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One preprocess over the real rows with the bad rows mixed in."""
    root = tmp_path_factory.mktemp("preprocess")
    train = clean["train"][:100] + BAD_ROWS + clean["train"][100:]
    source = _save(root / "in", {"train": train, "validation": clean["validation"]})
    report = preprocess_dataset(
        dataset_dir=source, output_dir=root / "out", data=_config(), model=MINILM, task=TASK
    )
    return report, datasets.load_from_disk(str(root / "out")), root


def test_ids_equal_the_tokenizers_own_truncation(run: Any, clean: Any, tokenizer: Any) -> None:
    report, out, _ = run
    for split in ("train", "validation"):
        documents = [PREFIX + row["document"] for row in clean[split]]
        summaries = [row["summary"] for row in clean[split]]
        expected_inputs = tokenizer(documents, truncation=True, max_length=MAX_SOURCE)
        expected_labels = tokenizer(
            text_target=summaries, truncation=True, max_length=report.max_target_length
        )
        assert out[split]["input_ids"] == expected_inputs["input_ids"]
        assert out[split]["labels"] == expected_labels["input_ids"]


def test_ids_decode_to_the_prefixed_text(run: Any, tokenizer: Any) -> None:
    _, out, _ = run
    normalizer = tokenizer.backend_tokenizer.normalizer
    whole = 0
    for row in out["train"]:
        ids = row["input_ids"]
        assert tokenizer.unk_token_id not in ids
        assert ids[0] == tokenizer.cls_token_id and ids[-1] == tokenizer.sep_token_id
        # The decoder re-spaces punctuation ("don ' t"); every character must survive.
        decoded = "".join(tokenizer.decode(ids, skip_special_tokens=True).split())
        expected = "".join(normalizer.normalize_str(PREFIX + row["document"]).split())
        if len(ids) < MAX_SOURCE:
            assert decoded == expected
            whole += 1
        else:  # cut to the max (or exactly the max): what is there is the text's start
            assert expected.startswith(decoded)
    assert whole > 30


def test_truncation_is_honoured_and_its_rate_reported(run: Any, clean: Any, tokenizer: Any) -> None:
    report, out, _ = run
    full_sources = [len(tokenizer(PREFIX + row["document"])["input_ids"]) for row in clean["train"]]
    full_targets = [
        len(tokenizer(text_target=row["summary"])["input_ids"]) for row in clean["train"]
    ]
    stats = report.splits["train"]
    assert 0 < stats.source_truncated < 1
    assert stats.source_truncated == sum(n > MAX_SOURCE for n in full_sources) / len(full_sources)
    assert stats.target_truncated == pytest.approx(
        sum(n > report.max_target_length for n in full_targets) / len(full_targets)
    )
    assert stats.source_tokens.max == max(full_sources)
    assert stats.source_tokens.p95 == pytest.approx(np.percentile(full_sources, 95))
    assert max(len(ids) for ids in out["train"]["input_ids"]) == MAX_SOURCE
    assert max(len(ids) for ids in out["train"]["labels"]) <= report.max_target_length
    cut = [ids for ids in out["train"]["input_ids"] if len(ids) == MAX_SOURCE]
    assert all(ids[-1] == tokenizer.sep_token_id for ids in cut)
    metrics = report.metrics()
    assert metrics["train_source_truncated_rate"] == stats.source_truncated
    assert metrics["max_source_length"] == MAX_SOURCE


def test_nothing_is_padded(run: Any, tokenizer: Any) -> None:
    _, out, _ = run
    for split in ("train", "validation"):
        table = out[split]
        for column in ("input_ids", "labels"):
            assert all(tokenizer.pad_token_id not in ids for ids in table[column])
            assert len({len(ids) for ids in table[column]}) > 10
        for ids, mask in zip(table["input_ids"], table["attention_mask"], strict=True):
            assert mask == [1] * len(ids)


def test_empty_and_missing_rows_are_dropped_and_counted(run: Any, clean: Any) -> None:
    report, out, root = run
    assert report.splits["train"].rows_in == len(clean["train"]) + len(BAD_ROWS)
    assert report.splits["train"].rows_dropped == len(BAD_ROWS)
    assert report.splits["validation"].rows_dropped == 0
    assert report.metrics()["train_rows_dropped"] == len(BAD_ROWS)
    # The raw text stays beside the ids, in the original order (evaluate reads it).
    assert out["train"]["document"] == [row["document"] for row in clean["train"]]
    assert out["validation"]["summary"] == [row["summary"] for row in clean["validation"]]
    assert set(out["train"].column_names) == {*TASK.role_sets[0], *MODEL_COLUMNS}
    saved = json.loads((root / "out" / PREPROCESS_REPORT_FILE).read_text())
    assert saved["splits"]["train"]["rows_dropped"] == len(BAD_ROWS)
    assert saved["max_target_length"] == report.max_target_length


def test_computed_max_target_length_is_the_training_percentile(
    run: Any, clean: Any, tokenizer: Any
) -> None:
    report, _, _ = run
    lengths = [len(tokenizer(text_target=row["summary"])["input_ids"]) for row in clean["train"]]
    assert report.max_target_length_from == "computed"
    assert report.max_target_length == math.ceil(np.percentile(lengths, PERCENTILE))
    assert report.splits["train"].target_truncated == pytest.approx(1 - PERCENTILE / 100, abs=0.02)


def test_computed_max_target_length_respects_the_cap(
    clean: Any, tokenizer: Any, tmp_path: Path
) -> None:
    source = _save(
        tmp_path / "in", {"train": clean["train"][:80], "validation": clean["validation"]}
    )
    report = preprocess_dataset(
        dataset_dir=source,
        output_dir=tmp_path / "out",
        data=_config(max_target_length_cap=12),
        model=MINILM,
        task=TASK,
    )
    out = datasets.load_from_disk(str(tmp_path / "out"))
    assert report.max_target_length == 12
    assert max(len(ids) for ids in out["train"]["labels"]) == 12
    assert all(ids[-1] == tokenizer.sep_token_id for ids in out["train"]["labels"])


def test_two_processes_give_the_same_output(run: Any, tmp_path: Path) -> None:
    report, out, root = run
    twin = preprocess_dataset(
        dataset_dir=root / "in",
        output_dir=tmp_path / "out",
        data=_config(num_proc=2),
        model=MINILM,
        task=TASK,
    )
    out_twin = datasets.load_from_disk(str(tmp_path / "out"))
    assert twin == report
    for split in out:
        assert out_twin[split].features == out[split].features
        assert out_twin[split].to_dict() == out[split].to_dict()


def test_default_source_length_is_the_tokenizers_limit(clean: Any, tmp_path: Path) -> None:
    source = _save(
        tmp_path / "in", {"train": clean["train"][:20], "validation": clean["train"][20:30]}
    )
    report = preprocess_dataset(
        dataset_dir=source,
        output_dir=tmp_path / "out",
        data=_config(max_source_length=None, max_target_length=64),
        model=MINILM,
        task=TASK,
    )
    assert (report.max_source_length, report.max_source_length_from) == (512, "tokenizer")
    assert (report.max_target_length, report.max_target_length_from) == (64, "config")


def _t5_tokenizer(folder: Path) -> Path:
    """A real T5 tokenizer (closing `</s>`, no opening token) with a small character vocab;
    it sets no model_max_length, so the 1e30 sentinel applies."""
    pieces = "▁abcdefghijklmnopqrstuvwxyz0123456789.,!?'#:"
    vocab = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)]
    vocab += [(piece, -1.0 - i / 100) for i, piece in enumerate(pieces)]
    vocab += [(f"▁{word}", -0.5) for word in ("the", "you", "person", "and", "to")]
    T5Tokenizer(vocab=vocab, extra_ids=0).save_pretrained(folder)
    return folder


def _plain_tokenizer(folder: Path, rows: list[Row]) -> Path:
    """A word-level tokenizer that adds no special tokens at all (GPT-2 style), limit 128."""
    words = sorted(
        {word for row in rows for word in (row["document"] + " " + row["summary"]).split()}
    )
    vocab = {"[UNK]": 0, "[PAD]": 1} | {word: i + 2 for i, word in enumerate(words[:2000])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="[UNK]", pad_token="[PAD]"
    )
    wrapped.model_max_length = 128
    wrapped.save_pretrained(folder)
    return folder


def _left_bert_tokenizer(folder: Path, rows: list[Row]) -> Path:
    """MiniLM set to truncate from the left (keep the end of the text), limit 128."""
    tokenizer = load_tokenizer(MINILM)
    tokenizer.truncation_side = "left"
    tokenizer.model_max_length = 128
    tokenizer.save_pretrained(folder)
    return folder


@pytest.mark.parametrize(
    ("build", "limit"),
    [
        pytest.param(lambda folder, rows: _t5_tokenizer(folder), 1024, id="t5-eos-only"),
        pytest.param(_plain_tokenizer, 128, id="no-special-tokens"),
        pytest.param(_left_bert_tokenizer, 128, id="bert-truncating-left"),
    ],
)
def test_truncation_matches_other_tokenizers(
    build: Any, limit: int, clean: Any, tmp_path: Path
) -> None:
    # The 40 longest documents, so that each limit cuts some; summaries are a sentence, so
    # the cap of 8 tokens cuts some of them too.
    rows = sorted(clean["train"], key=lambda row: len(row["document"]), reverse=True)[:40]
    cap = 8
    model = ModelConfig(source=str(build(tmp_path / "tok", rows)))
    tokenizer = load_tokenizer(model)
    source = _save(tmp_path / "in", {"train": rows, "validation": clean["validation"][:10]})
    report = preprocess_dataset(
        dataset_dir=source,
        output_dir=tmp_path / "out",
        data=_config(max_source_length=None, max_target_length_cap=cap),
        model=model,
        task=TASK,
    )
    out = datasets.load_from_disk(str(tmp_path / "out"))
    # The T5 tokenizer sets no limit (the 1e30 sentinel): the 1024 guard applies.
    assert report.max_source_length == limit
    assert report.max_target_length == cap
    assert report.splits["train"].source_truncated > 0
    assert report.splits["train"].target_truncated > 0
    documents = [PREFIX + row["document"] for row in rows]
    summaries = [row["summary"] for row in rows]
    inputs = tokenizer(documents, truncation=True, max_length=limit)["input_ids"]
    labels = tokenizer(text_target=summaries, truncation=True, max_length=cap)["input_ids"]
    assert out["train"]["input_ids"] == inputs
    assert out["train"]["labels"] == labels


def test_a_split_with_no_usable_rows_is_refused(clean: Any, tmp_path: Path) -> None:
    source = _save(tmp_path / "in", {"train": clean["train"][:20], "validation": BAD_ROWS})
    with pytest.raises(DataError, match="split 'validation': none of its 4 rows"):
        preprocess_dataset(
            dataset_dir=source, output_dir=tmp_path / "out", data=_config(), model=MINILM, task=TASK
        )
    assert not (tmp_path / "out").exists()


def _preprocess_saved(folder: Path) -> Any:
    """Preprocess the dataset saved in `folder / "in"` into `folder / "out"`, as configured
    by default."""
    data = _config()
    return preprocess_dataset(
        dataset_dir=folder / "in", output_dir=folder / "out", data=data, model=MINILM, task=TASK
    )


def test_a_missing_column_is_named(tmp_path: Path) -> None:
    dataset = datasets.DatasetDict({"train": datasets.Dataset.from_dict({"document": ["a b"]})})
    dataset.save_to_disk(str(tmp_path / "in"))
    with pytest.raises(DataError, match=r"split 'train' has no column\(s\) \['summary'\]"):
        _preprocess_saved(tmp_path)


def test_a_document_column_of_lists_is_refused_naming_its_first_row(tmp_path: Path) -> None:
    # It was tokenized as its printed form, "['The fox.']", brackets and quotes included.
    train = {"document": [["The fox jumps."], ["The dog sleeps."]], "summary": ["Fox.", "Dog."]}
    datasets.DatasetDict({"train": datasets.Dataset.from_dict(train)}).save_to_disk(
        str(tmp_path / "in")
    )
    with pytest.raises(DataError) as caught:
        _preprocess_saved(tmp_path)
    assert str(caught.value) == (
        "split 'train': column 'document' (data.columns.document) must hold text, but row 1 "
        "holds an array: ['The fox jumps.']; map data.columns.document to a column of text"
    )
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("part", ["validation", "train"])
def test_a_bad_row_in_a_carved_split_is_named_by_its_row_in_the_users_file(
    tmp_path: Path, write: Any, source_config: Any, part: str
) -> None:
    # 40 rows, 20 of them carved into validation (seed 42), in no order the file has: the
    # one bad row (a list; the others have no document) is named by its line, not by its
    # place in the carved split.
    config = source_config(tmp_path / "mine.jsonl", max_source_length=MAX_SOURCE)
    line = int(carved_rows(40, 20, config.seed)[part][6]) + 1  # 17 and 12: the 7th of each
    rows = [{"text": None, "summary": f"Row {i}."} for i in range(1, 41)]
    rows[line - 1]["text"] = ["The fox jumps."]
    write(tmp_path / "mine", rows, "jsonl")
    download_dataset(config, TASK, tmp_path / "in")
    with pytest.raises(DataError) as caught:
        _preprocess_saved(tmp_path)
    how = "drawn at random from" if part == "validation" else "what the carve left of"
    assert str(caught.value) == (
        f"split {part!r}: column 'document' (data.columns.document) must hold text, but row "
        f"{line} holds an array: ['The fox jumps.']; map data.columns.document to a column of "
        f"text (rows numbered as in split 'train' of {tmp_path / 'mine.jsonl'}; {part} is {how} it)"
    )


def test_a_dropped_row_in_a_carved_split_is_logged_by_its_row_in_the_users_file(
    tmp_path: Path, source_rows: Any, write: Any, source_config: Any, caplog: Any
) -> None:
    """A task's warning of the rows it drops names them as the user's file does."""
    config = source_config(write(tmp_path / "mine", source_rows["train"], "jsonl"))
    download_dataset(config, TASK, tmp_path / "in")

    class Dropping(type(TASK)):  # type: ignore[misc]
        def preprocess(self, dataset: Any, **given: Any) -> Any:
            logger.warning("validation: 3 rows left out (rows 7, 2, ...; first: row 7: no text)")
            logger.warning("test: row 7 is the source's own")

    with caplog.at_level("WARNING", logger="llm_pipeline"):
        preprocess_dataset(
            dataset_dir=tmp_path / "in",
            output_dir=tmp_path / "out",
            data=config,
            model=MINILM,
            task=Dropping(),
        )
    seventh, second = (
        int(row) + 1 for row in carved_rows(40, 20, config.seed)["validation"][[6, 1]]
    )
    logged = [r.getMessage() for r in caplog.records if r.name == "llm_pipeline.data.preprocess"]
    assert logged == [
        f"validation: 3 rows left out (rows {seventh}, {second}, ...; first: row {seventh}: no "
        f"text) (rows numbered as in split 'train' of {tmp_path / 'mine.jsonl'}; validation is "
        "drawn at random from it)",
        "test: row 7 is the source's own",
    ]
    logger.warning("validation: row 7, once preprocess is done")  # the filter is gone
    assert caplog.records[-1].getMessage() == "validation: row 7, once preprocess is done"


CARVED = {"carve": {"split": "train", "of": "my.csv", "rows": 40, "size": 20, "seed": 42}}


def test_a_data_error_without_a_carve_or_in_a_split_of_the_source_keeps_its_rows() -> None:
    message = "split 'test': none of its 6 rows is usable; the first: row 2: no text"
    assert rows_as_in_source(message, {"carve": None}) == message
    assert rows_as_in_source(message, CARVED) == message  # test is the source's own
    assert rows_as_in_source(message, CARVED, unnamed=True) == message


def test_a_data_error_naming_no_split_says_its_rows_count_within_a_carved_one() -> None:
    # A chat template's fault: the error names the row it met first, in whichever split.
    assert rows_as_in_source("row 3: the template drops turns", CARVED, unnamed=True) == (
        "row 3: the template drops turns (rows counted within a split that the download step "
        "made from split 'train' of my.csv: validation is a shuffled draw of its rows, seed 42, "
        "and train the rest, so a row's number is not its place there)"
    )


def test_a_max_length_with_no_room_for_text_is_refused(clean: Any, tmp_path: Path) -> None:
    source = _save(
        tmp_path / "in", {"train": clean["train"][:5], "validation": clean["train"][5:8]}
    )
    with pytest.raises(DataError, match=r"data\.max_target_length: 2 leaves no room for text"):
        preprocess_dataset(
            dataset_dir=source,
            output_dir=tmp_path / "out",
            data=_config(max_target_length=2),
            model=MINILM,
            task=TASK,
        )


def test_the_driver_hands_the_checked_splits_and_the_models_tokenizer_to_the_task(
    clean: Any, tmp_path: Path
) -> None:
    """`preprocess_dataset` knows no task: whatever a task's `preprocess` makes of the rows
    is what the step gets (a new task is a package, not a branch here)."""
    seen: dict[str, Any] = {}

    class Recording(type(TASK)):  # type: ignore[misc]
        def preprocess(self, dataset: Any, **given: Any) -> Any:
            seen.update(given, splits={split: len(table) for split, table in dataset.items()})
            return "the task's report"

    source = _save(
        tmp_path / "in", {"train": clean["train"][:3], "validation": clean["train"][3:5]}
    )
    data = _config()
    report = preprocess_dataset(
        dataset_dir=source, output_dir=tmp_path / "out", data=data, model=MINILM, task=Recording()
    )
    assert report == "the task's report"
    assert seen["splits"] == {"train": 3, "validation": 2}
    assert seen["output_dir"] == tmp_path / "out" and seen["data"] is data
    assert (
        seen["model"] is MINILM
        and seen["tokenizer"].name_or_path == load_tokenizer(MINILM).name_or_path
    )
