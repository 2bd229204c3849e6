"""What preprocessing documents and summaries reports: the resolved max lengths, where each
came from, and per-split lengths and truncation; logged, and written to `preprocess.json`."""

import logging
from dataclasses import asdict, dataclass
from typing import Any

from llm_pipeline.data.preprocess import LengthStats, SplitRows, logger, with_rows_out


@dataclass(frozen=True)
class SplitStats(SplitRows):
    """What preprocessing did to one split."""

    source_tokens: LengthStats
    target_tokens: LengthStats
    #: Share of the kept rows that were cut to the max length.
    source_truncated: float
    target_truncated: float


@dataclass(frozen=True)
class PreprocessReport:
    """The resolved max lengths, where they came from, and per-split statistics."""

    max_source_length: int
    max_target_length: int
    #: `config`, or `tokenizer` (its model_max_length, capped at data.preprocess.LENGTH_LIMIT).
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
        return with_rows_out(asdict(self), self.splits)


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
