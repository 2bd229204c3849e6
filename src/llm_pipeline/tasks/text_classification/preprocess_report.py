"""What preprocessing labelled texts reports: the label set, the resolved length, and the
rows each split left out, by reason and label; logged, and written to `preprocess.json`."""

from dataclasses import asdict, dataclass
from typing import Any

from llm_pipeline.data.preprocess import LengthStats, logger
from llm_pipeline.tasks.text_classification.labels import LABEL_SET_KEY, LabelSet

#: Why a classifier's row is left out, in the words the log uses.
DROP_REASONS = {
    "empty_text": "empty text",
    "malformed_label": "unusable label values",
    "unseen_label": "labels outside the label set",
}


@dataclass(frozen=True)
class ClassifierSplitStats:
    """What preprocessing did to one split of labelled texts."""

    rows_in: int
    #: Rows left out, by reason (every key of DROP_REASONS).
    rows_dropped: dict[str, int]
    #: The first row left out for each reason, with what is wrong (`row 7: label is None`).
    first_dropped: dict[str, str]
    #: Labels outside the label set, with the rows that have each.
    unseen_labels: dict[str, int]
    #: Kept rows of each label (multi-label: rows that have it), in id order.
    label_counts: dict[str, int]
    #: Lengths before the cut, special tokens included, and the share of rows cut.
    tokens: LengthStats
    truncated: float

    @property
    def rows_out(self) -> int:
        return self.rows_in - sum(count for count in self.rows_dropped.values())


@dataclass(frozen=True)
class ClassifierPreprocessReport:
    """The label set, the resolved length, and per-split statistics."""

    max_length: int
    #: `config`, or `tokenizer` (its model_max_length, capped).
    max_length_from: str
    #: `config` (data.labels) or `train` (the training split's labels).
    labels_from: str
    label_set: LabelSet
    splits: dict[str, ClassifierSplitStats]

    def metrics(self) -> dict[str, float]:
        """Flat `<split>_<stat>` names for KFP's Metrics artifact."""
        counts = self.label_set.train_counts
        total = sum(counts.values())
        values: dict[str, float] = {
            "max_length": float(self.max_length),
            "num_labels": float(len(self.label_set.names)),
        }
        if total and not self.label_set.multi_label:
            # The majority baseline's accuracy on data like the training split.
            values["train_majority_share"] = max(counts.values()) / total
        for split, stats in self.splits.items():
            values[f"{split}_rows_in"] = float(stats.rows_in)
            values[f"{split}_rows_dropped"] = float(stats.rows_in - stats.rows_out)
            for reason, count in stats.rows_dropped.items():
                values[f"{split}_rows_dropped_{reason}"] = float(count)
            for name, value in asdict(stats.tokens).items():
                values[f"{split}_tokens_{name}"] = float(value)
            values[f"{split}_truncated_rate"] = stats.truncated
        return values

    def to_dict(self) -> dict[str, Any]:
        splits = {}
        for split, stats in self.splits.items():
            splits[split] = asdict(stats) | {"rows_out": stats.rows_out}
        return {
            "max_length": self.max_length,
            "max_length_from": self.max_length_from,
            "labels_from": self.labels_from,
            LABEL_SET_KEY: self.label_set.to_dict(),
            "splits": splits,
        }


def log_classifier_report(report: ClassifierPreprocessReport) -> None:
    """One line for the labels and length, one per split, and a warning for each reason a
    split left rows out, naming the labels outside the label set with their counts."""
    labels = report.label_set
    counts = labels.train_counts
    total = sum(counts.values())
    shown = ", ".join(f"{name!r} {counts.get(name, 0)}" for name in labels.names[:20])
    more = f", and {len(labels.names) - 20} more" if len(labels.names) > 20 else ""
    source = "data.labels" if report.labels_from == "config" else "the training split"
    majority = (
        f"; the most common is {max(counts.values()) / total:.1%} of training rows"
        if total and not labels.multi_label
        else ""
    )
    kind = "multi-label " if labels.multi_label else ""
    logger.info(
        f"{len(labels.names)} {kind}labels from {source} (training rows: {shown}{more})"
        f"{majority}; max_length {report.max_length} ({report.max_length_from})"
    )
    outside = (
        "labels outside data.labels"
        if report.labels_from == "config"
        else "labels the training split never has"
    )
    for split, st in report.splits.items():
        for reason, count in st.rows_dropped.items():
            if not count:
                continue
            if reason == "unseen_label":
                why = f"{outside}: " + ", ".join(
                    f"{name!r} ({n})" for name, n in st.unseen_labels.items()
                )
            else:
                why = f"{DROP_REASONS[reason]} (first: {st.first_dropped[reason]})"
            logger.warning(f"{split}: {count} of {st.rows_in} rows left out: {why}")
        logger.info(
            f"{split}: {st.rows_out} rows kept of {st.rows_in}; tokens p95 "
            f"{st.tokens.p95:.0f}, {st.truncated:.1%} cut to max_length"
        )
