"""What preprocessing reports: resolved max lengths and per-split length statistics (and,
for a classifier, its label set and the rows each split left out, by reason and label)."""

import logging
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from llm_pipeline.data.labels import LABEL_SET_KEY, LabelSet

logger = logging.getLogger("llm_pipeline.data.preprocess")


@dataclass(frozen=True)
class LengthStats:
    """Token lengths before truncation, special tokens included."""

    p50: float
    p95: float
    p99: float
    max: int

    @classmethod
    def of(cls, lengths: np.ndarray) -> "LengthStats":
        p50, p95, p99 = np.percentile(lengths, [50, 95, 99])
        return cls(p50=float(p50), p95=float(p95), p99=float(p99), max=int(lengths.max()))


@dataclass(frozen=True)
class SplitStats:
    """What preprocessing did to one split."""

    rows_in: int
    rows_dropped: int
    source_tokens: LengthStats
    target_tokens: LengthStats
    #: Share of the kept rows that were cut to the max length.
    source_truncated: float
    target_truncated: float

    @property
    def rows_out(self) -> int:
        return self.rows_in - self.rows_dropped


@dataclass(frozen=True)
class PreprocessReport:
    """The resolved max lengths, where they came from, and per-split statistics."""

    max_source_length: int
    max_target_length: int
    #: `config`, or `tokenizer` (its model_max_length, capped at SOURCE_LENGTH_LIMIT).
    max_source_length_from: str
    #: `config`, or `computed` (percentile of training target lengths, capped).
    max_target_length_from: str
    splits: dict[str, SplitStats]

    def metrics(self) -> dict[str, float]:
        """Flat `<split>_<stat>` names for KFP's Metrics artifact."""
        values: dict[str, float] = {
            "max_source_length": float(self.max_source_length),
            "max_target_length": float(self.max_target_length),
        }
        for split, stats in self.splits.items():
            values[f"{split}_rows_in"] = float(stats.rows_in)
            values[f"{split}_rows_dropped"] = float(stats.rows_dropped)
            for side in ("source", "target"):
                lengths: LengthStats = getattr(stats, f"{side}_tokens")
                for name, value in asdict(lengths).items():
                    values[f"{split}_{side}_tokens_{name}"] = float(value)
                values[f"{split}_{side}_truncated_rate"] = float(
                    getattr(stats, f"{side}_truncated")
                )
        return values

    def to_dict(self) -> dict[str, Any]:
        payload = asdict(self)
        for split, stats in self.splits.items():
            payload["splits"][split]["rows_out"] = stats.rows_out
        return payload


def log_report(report: PreprocessReport) -> None:
    """One line for the lengths, one per split; a split that dropped rows is a warning."""
    logger.info(
        f"max_source_length {report.max_source_length} ({report.max_source_length_from}), "
        f"max_target_length {report.max_target_length} ({report.max_target_length_from})"
    )
    for split, st in report.splits.items():
        logger.log(
            logging.WARNING if st.rows_dropped else logging.INFO,
            f"{split}: {st.rows_out} rows kept, {st.rows_dropped} dropped (empty text); "
            f"source p95 {st.source_tokens.p95:.0f} tokens, {st.source_truncated:.1%} cut; "
            f"target p95 {st.target_tokens.p95:.0f} tokens, {st.target_truncated:.1%} cut",
        )


@dataclass(frozen=True)
class ChatSplitStats:
    """What preprocessing did to one split of chats (instruction tuning)."""

    rows_in: int
    #: Rows whose chat is unusable (not a list, an unknown role, no assistant turn, ...).
    rows_dropped: int
    #: The first of them, by row, with what is wrong (`row 17: turn 2: unknown role 'bot'`).
    first_dropped: str | None
    #: Lengths before any cut: the whole sequence, its prompt part and its response part.
    tokens: LengthStats
    prompt_tokens: LengthStats
    response_tokens: LengthStats
    #: Rows that lost prompt tokens to max_length, and rows whose response was cut too.
    rows_prompt_cut: int
    rows_response_cut: int
    tokens_dropped: int

    @property
    def rows_out(self) -> int:
        return self.rows_in - self.rows_dropped


@dataclass(frozen=True)
class PackingStats:
    """What `data.packing` did to the train split."""

    packed: bool
    #: Why the split stayed unpacked (the model's attention would cross examples).
    reason: str | None = None
    examples: int = 0
    rows: int = 0
    #: Share of the packed rows' tokens that are examples' tokens, not padding.
    fill: float = 0.0


@dataclass(frozen=True)
class ChatPreprocessReport:
    """The resolved sequence length and template, and per-split statistics."""

    max_length: int
    #: `config`, or `tokenizer` (its model_max_length, capped at SOURCE_LENGTH_LIMIT).
    max_length_from: str
    #: `tokenizer` (its own chat template), `config` (data.chat_template) or `default`.
    chat_template_from: str
    splits: dict[str, ChatSplitStats]
    packing: PackingStats | None = None

    def metrics(self) -> dict[str, float]:
        """Flat `<split>_<stat>` names for KFP's Metrics artifact."""
        values: dict[str, float] = {"max_length": float(self.max_length)}
        for split, stats in self.splits.items():
            for name in ("rows_in", "rows_dropped", "rows_prompt_cut", "rows_response_cut"):
                values[f"{split}_{name}"] = float(getattr(stats, name))
            values[f"{split}_tokens_dropped"] = float(stats.tokens_dropped)
            for part in ("tokens", "prompt_tokens", "response_tokens"):
                lengths: LengthStats = getattr(stats, part)
                for name, value in asdict(lengths).items():
                    values[f"{split}_{part}_{name}"] = float(value)
        if self.packing is not None and self.packing.packed:
            values["train_packed_rows"] = float(self.packing.rows)
            values["train_packing_fill"] = self.packing.fill
        return values

    def to_dict(self) -> dict[str, Any]:
        payload = asdict(self)
        for split, stats in self.splits.items():
            payload["splits"][split]["rows_out"] = stats.rows_out
        return payload


def log_chat_report(report: ChatPreprocessReport) -> None:
    """One line for the length and template, one per split, one for packing; a split that
    dropped rows or cut responses is a warning."""
    logger.info(
        f"max_length {report.max_length} ({report.max_length_from}), chat template from "
        f"{report.chat_template_from}"
    )
    for split, st in report.splits.items():
        dropped = f", first: {st.first_dropped}" if st.first_dropped else ""
        logger.log(
            logging.WARNING if st.rows_dropped or st.rows_response_cut else logging.INFO,
            f"{split}: {st.rows_out} rows kept, {st.rows_dropped} dropped (unusable chat"
            f"{dropped}); tokens p95 {st.tokens.p95:.0f}; {st.rows_prompt_cut} rows lost "
            f"prompt tokens and {st.rows_response_cut} response tokens to max_length "
            f"({st.tokens_dropped} tokens dropped)",
        )
    packing = report.packing
    if packing is not None and packing.packed:
        logger.info(
            f"train: {packing.examples} examples packed into {packing.rows} rows of "
            f"{report.max_length} tokens ({packing.fill:.1%} of them examples' tokens)"
        )
    elif packing is not None:
        logger.warning(
            f"data.packing: train stays unpacked, one example per row, and training groups "
            f"examples by length instead (train.group_by_length): {packing.reason}"
        )


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
