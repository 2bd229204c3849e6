"""Turn the downloaded labelled texts into token ids and label ids a classifier trains on.

Output (`save_to_disk` folder, one split per input split):
- `input_ids`, `attention_mask` (int32 lists, cut to `max_length`, not padded: the collator
  pads each batch), and `token_type_ids` when the tokenizer makes them (BERT);
- `labels`: the label's id (int64), or with `data.multi_label` a 0/1 float32 per label;
- the raw columns: `text` (and `text_pair`), and `label` as the label's name (a list of
  names with `data.multi_label`), for evaluate and the deploy step's probe;
- `preprocess.json`: the label set (`label_set`, labels.py, with the training split's
  count of each label) and what happened to each split.

The label set is `data.labels` when given, in its order; otherwise the training split's
labels: integers sorted as numbers (so labels 0..K-1 keep their values as ids), strings
sorted. Rows are left out and counted, never a crash, when their text (or text pair) is
empty, their label is not a usable value (None, a float, a list without `multi_label`, ...)
or it is outside the label set (a validation or test label training never saw): the log and
the report name those labels with their counts. A training split with fewer than two labels,
or a split left with no rows, is an error that says which and what to do.
"""

import json
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets
import numpy as np
from transformers import PreTrainedTokenizerBase

from llm_pipeline.config import DataConfig, ModelConfig
from llm_pipeline.data.preprocess import (
    LengthStats,
    refuse_non_text,
    tokenize_split,
    tokenizer_length,
)
from llm_pipeline.errors import DataError
from llm_pipeline.output_files import PREPROCESS_REPORT_FILE
from llm_pipeline.storage import atomic_output_dir
from llm_pipeline.tasks import Task
from llm_pipeline.tasks.text_classification.labels import LabelSet, label_names, sorted_names
from llm_pipeline.tasks.text_classification.preprocess_report import (
    DROP_REASONS,
    ClassifierPreprocessReport,
    ClassifierSplitStats,
    log_classifier_report,
)

#: Per-row facts carried through the map pass and dropped before saving.
_PRIVATE = {
    "_reason": datasets.Value("string"),  # "" for a kept row, else one of DROP_REASONS
    "_problem": datasets.Value("string"),  # `row 7: label is None`
    "_unseen": datasets.List(datasets.Value("string")),  # names outside the label set
    "_tokens": datasets.Value("int32"),  # length before the cut
}


def preprocess_classification(
    dataset: datasets.DatasetDict,
    *,
    tokenizer: PreTrainedTokenizerBase,
    output_dir: str | Path,
    data: DataConfig,
    model: ModelConfig,
    task: Task,
) -> ClassifierPreprocessReport:
    """Tokenize every split of labelled texts in `dataset` into `output_dir` (see the module
    doc). Raises DataError for a label set or a split that cannot be trained or scored."""
    if "train" not in dataset:
        raise DataError(f"the dataset has no train split (it has {list(dataset)})")
    roles = _text_roles(task, dataset["train"].column_names)
    refuse_non_text(dataset, roles)
    label_set = _label_set(dataset["train"], roles, task.target_role, data)
    max_length, length_from = _max_length(data, tokenizer, pairs=len(roles) > 1)
    encode = _EncodeRows(
        tokenizer=tokenizer,
        roles=roles,
        label_column=task.target_role,
        label_set=label_set,
        max_length=max_length,
        token_types="token_type_ids" in tokenizer.model_input_names,
    )
    with tempfile.TemporaryDirectory(prefix="llm-pipeline-preprocess-") as work:
        encoded = {
            split: tokenize_split(
                table,
                encode,
                features=encode.features(),
                cache_file=Path(work) / f"{split}.arrow",
                num_proc=data.num_proc if data.num_proc > 1 else None,
                desc=f"tokenizing {split}",
            )
            for split, table in dataset.items()
        }
        stats = {
            split: _split_stats(split, table, label_set, max_length)
            for split, table in encoded.items()
        }
        report = ClassifierPreprocessReport(
            max_length=max_length,
            max_length_from=length_from,
            labels_from="config" if data.labels is not None else "train",
            label_set=label_set,
            splits=stats,
        )
        kept = {split: _kept_rows(table) for split, table in encoded.items()}
        with atomic_output_dir(output_dir) as staging:
            datasets.DatasetDict(kept).save_to_disk(str(staging))
            payload = {"tokenizer": model.tokenizer_source} | report.to_dict()
            (staging / PREPROCESS_REPORT_FILE).write_text(json.dumps(payload, indent=2) + "\n")
    log_classifier_report(report)
    return report


def _text_roles(task: Task, columns: list[str]) -> tuple[str, ...]:
    """The text roles of the dataset's role set, in order (`text`, then `text_pair`)."""
    roles = task.role_set_among(columns)
    assert roles is not None  # data.preprocess refused splits without them
    return tuple(role for role in roles if role != task.target_role)


def _text_problem(values: list[Any], roles: tuple[str, ...]) -> str | None:
    for role, text in zip(roles, values, strict=True):
        if text is None or not str(text).strip():
            return f"{role} is {'missing' if text is None else 'empty'}"
    return None


def _label_set(
    train: datasets.Dataset, roles: tuple[str, ...], label_column: str, data: DataConfig
) -> LabelSet:
    """`data.labels`, or the training split's labels; with the training rows of each."""
    found: list[list[str]] = []  # the label names of each usable row
    columns = [train[role] for role in roles]
    for *texts, value in zip(*columns, train[label_column], strict=True):
        names, problem = label_names(value, data.multi_label)
        if problem is None and _text_problem(texts, roles) is None:
            found.append(names)
    outside: Counter[str] = Counter()
    if data.labels is not None:
        ordered = tuple(str(label) for label in data.labels)
        outside.update(name for names in found for name in names if name not in ordered)
        found = [names for names in found if set(names) <= set(ordered)]
    else:
        ordered = sorted_names(name for names in found for name in names)
    counts = Counter(name for names in found for name in names)
    present = [name for name in ordered if counts[name]]
    if (found or outside) and len(present) < 2:
        raise DataError(_single_class_message(present, len(found), outside, data))
    return LabelSet(
        names=ordered,
        multi_label=data.multi_label,
        threshold=data.threshold,
        train_counts={name: counts[name] for name in ordered},
    )


def _single_class_message(
    present: list[str], rows: int, outside_counts: Counter[str], data: DataConfig
) -> str:
    outside = ""
    if outside_counts:
        named = ", ".join(f"{name!r} ({n})" for name, n in outside_counts.most_common(10))
        more = f", and {len(outside_counts) - 10} more" if len(outside_counts) > 10 else ""
        outside = (
            f" (rows with labels outside data.labels {list(data.labels or [])} left out: "
            f"{named}{more})"
        )
    if not present and not rows:
        having = f"none of its usable rows has a label in data.labels{outside}"
    elif not present:
        having = f"none of its {rows} usable rows has a label{outside}"
    else:
        having = f"all {rows} of its usable rows have label {present[0]!r}{outside}"
    return (
        f"split 'train': {having}; a classifier learns to tell labels apart, so training needs "
        "rows of at least two labels. Check that data.columns.label names the label column, "
        "and add rows of other labels (data.max_samples takes a split's first rows: a file "
        "sorted by label starts with one label only)"
    )


def _max_length(
    data: DataConfig, tokenizer: PreTrainedTokenizerBase, *, pairs: bool
) -> tuple[int, str]:
    if data.max_length is not None:
        length, where = data.max_length, "config"
    else:
        length, where = tokenizer_length(tokenizer), "tokenizer"
    special = tokenizer.num_special_tokens_to_add(pair=pairs)
    if length <= special:
        raise DataError(
            f"data.max_length: {length} leaves no room for text; the tokenizer adds {special} "
            f"special token(s) to every {'pair of texts' if pairs else 'text'}"
        )
    return length, where


@dataclass(frozen=True)
class _EncodeRows:
    """One `Dataset.map` batch: check each row's texts and label, tokenize the usable ones.

    A picklable object rather than a closure, so `num_proc` workers receive it whole. An
    unusable row comes out empty with its reason; rows are filtered after counting.
    """

    tokenizer: PreTrainedTokenizerBase
    roles: tuple[str, ...]
    label_column: str
    label_set: LabelSet
    max_length: int
    token_types: bool

    def features(self) -> datasets.Features:
        # int32 halves the disk and I/O of the default int64; the collator makes int64 tensors.
        ids = datasets.List(datasets.Value("int32"))
        multi = self.label_set.multi_label
        string = datasets.Value("string")
        return datasets.Features(
            {
                **{role: string for role in self.roles},
                "label": datasets.List(string) if multi else string,
                "input_ids": ids,
                "attention_mask": ids,
                **({"token_type_ids": ids} if self.token_types else {}),
                "labels": (
                    datasets.List(datasets.Value("float32")) if multi else datasets.Value("int64")
                ),
                **_PRIVATE,
            }
        )

    def __call__(self, batch: dict[str, list[Any]], indices: list[int]) -> dict[str, list[Any]]:
        label2id = self.label_set.label2id
        multi = self.label_set.multi_label
        checked: list[tuple[str, str, list[str]]] = []  # (reason, problem, names or unseen)
        for i, index in enumerate(indices):
            where = f"row {index + 1}"  # counted from 1, as a person reading the file does
            problem = _text_problem([batch[role][i] for role in self.roles], self.roles)
            if problem is not None:
                checked.append(("empty_text", f"{where}: {problem}", []))
                continue
            names, problem = label_names(batch[self.label_column][i], multi)
            unseen = [name for name in names if name not in label2id]
            if problem is not None:
                checked.append(("malformed_label", f"{where}: {problem}", []))
            elif unseen:
                checked.append(("unseen_label", f"{where}: label {unseen[0]!r}", unseen))
            else:
                checked.append(("", "", sorted(names, key=label2id.__getitem__)))
        kept = [i for i, (reason, _, _) in enumerate(checked) if not reason]
        encoded = self._encode(*([str(batch[role][i]) for i in kept] for role in self.roles))
        out: dict[str, list[Any]] = {name: [] for name in self.features()}
        rows = iter(range(len(kept)))
        for i, (reason, problem, names) in enumerate(checked):
            row = next(rows) if not reason else None
            for role in self.roles:
                out[role].append(str(batch[role][i]) if row is not None else "")
            for column in ("input_ids", "attention_mask", "token_type_ids"):
                if column in out:
                    out[column].append(encoded[column][row] if row is not None else [])
            if multi:
                hot = [0.0] * len(label2id)
                for name in names if row is not None else []:
                    hot[label2id[name]] = 1.0
                out["label"].append(names if row is not None else [])
                out["labels"].append(hot if row is not None else [])
            else:
                out["label"].append(names[0] if row is not None else "")
                out["labels"].append(label2id[names[0]] if row is not None else -1)
            out["_reason"].append(reason)
            out["_problem"].append(problem)
            out["_unseen"].append(names if reason == "unseen_label" else [])
            out["_tokens"].append(encoded["_tokens"][row] if row is not None else 0)
        return out

    def _encode(self, texts: list[str], pairs: list[str] | None = None) -> dict[str, list[Any]]:
        """Token ids cut to max_length (the longer text of a pair first, as the tokenizer's
        `longest_first` does), with each row's length before the cut."""
        if not texts:
            return {"input_ids": [], "attention_mask": [], "token_type_ids": [], "_tokens": []}
        # Tokenized whole first, for the true lengths; only the rows too long are tokenized
        # again with truncation (the tokenizer's own rule, pairs included).
        whole = dict(self.tokenizer(texts, pairs, verbose=False))
        lengths = [len(ids) for ids in whole["input_ids"]]
        long = [i for i, length in enumerate(lengths) if length > self.max_length]
        if long:
            cut = self.tokenizer(
                [texts[i] for i in long],
                [pairs[i] for i in long] if pairs is not None else None,
                truncation="longest_first",
                max_length=self.max_length,
                verbose=False,
            )
            for column, values in whole.items():
                for j, i in enumerate(long):
                    values[i] = cut[column][j]
        return {**whole, "_tokens": lengths}


def _column(table: datasets.Dataset, name: str) -> np.ndarray:
    # Straight from the Arrow column: no Python objects per row.
    return np.asarray(table.data.column(name).to_numpy(zero_copy_only=False))


def _split_stats(
    split: str, table: datasets.Dataset, label_set: LabelSet, max_length: int
) -> ClassifierSplitStats:
    reasons = _column(table, "_reason")
    ok = reasons == ""
    dropped = {reason: int(np.count_nonzero(reasons == reason)) for reason in DROP_REASONS}
    problems = _column(table, "_problem")
    first = {
        reason: str(problems[np.flatnonzero(reasons == reason)[0]])
        for reason, count in dropped.items()
        if count
    }
    if not ok.any():
        causes = "; ".join(
            f"{count} {DROP_REASONS[reason]} (first: {first[reason]})"
            for reason, count in dropped.items()
            if count
        )
        hint = (
            "; set data.test_split to null to evaluate on validation instead"
            if split == "test"
            else ""
        )
        raise DataError(f"split {split!r}: none of its {len(table)} rows is usable: {causes}{hint}")
    unseen: Counter[str] = Counter()
    for names in table.data.column("_unseen").to_pylist():
        unseen.update(names)
    labels = table.data.column("labels").to_pylist()
    if label_set.multi_label:
        hot = np.asarray([row for row, keep in zip(labels, ok, strict=True) if keep], dtype=float)
        per_label = hot.reshape(-1, len(label_set.names)).sum(axis=0)
    else:
        ids = np.asarray(labels, dtype=int)[ok]
        per_label = np.bincount(ids, minlength=len(label_set.names))
    tokens = _column(table, "_tokens")[ok]
    return ClassifierSplitStats(
        rows_in=len(table),
        rows_dropped=dropped,
        first_dropped=first,
        unseen_labels=dict(unseen.most_common()),
        label_counts={
            name: int(count) for name, count in zip(label_set.names, per_label, strict=True)
        },
        tokens=LengthStats.of(tokens),
        truncated=float(np.mean(tokens > max_length)),
    )


def _kept_rows(table: datasets.Dataset) -> datasets.Dataset:
    """The usable rows, without the private columns."""
    ok = np.flatnonzero(_column(table, "_reason") == "")
    return table.select(ok, keep_in_memory=True).remove_columns(list(_PRIVATE))
