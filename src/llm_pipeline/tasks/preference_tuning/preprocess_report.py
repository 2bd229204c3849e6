"""What preprocessing a split of preference rows reports: the rows refused, by reason and by
row number, and the prompts cut to fit; logged, and written to `preprocess.json`."""

import logging
from dataclasses import asdict, dataclass
from typing import Any

from llm_pipeline.data.chat_format import ChatLengths
from llm_pipeline.data.preprocess import logger


@dataclass(frozen=True)
class PairStats:
    """What one split's check refused and cut."""

    rows_in: int
    #: Refused rows per reason (pairs.REASONS), each reason's first rows (counted from 1)
    #: and its first problem in words.
    refused: dict[str, int]
    refused_rows: dict[str, list[int]]
    first_problem: dict[str, str]
    #: Pairs whose prompt lost its oldest tokens to fit, and how many tokens in all.
    prompts_cut: int
    prompt_tokens_dropped: int

    @property
    def rows_out(self) -> int:
        """The pairs kept: what training and evaluation read."""
        return self.rows_in - sum(self.refused.values())

    def to_dict(self) -> dict[str, Any]:
        return {"rows_out": self.rows_out} | asdict(self)


@dataclass(frozen=True)
class PairPreprocessReport(ChatLengths):
    """The resolved sequence length and template, and per-split statistics."""

    splits: dict[str, PairStats]

    def metrics(self) -> dict[str, float]:
        """Flat `<split>_<stat>` names for KFP's Metrics artifact."""
        values: dict[str, float] = {"max_length": float(self.max_length)}
        for split, stats in self.splits.items():
            values[f"{split}_rows_in"] = float(stats.rows_in)
            values[f"{split}_rows_out"] = float(stats.rows_out)
            for reason, count in stats.refused.items():
                values[f"{split}_refused_{reason}"] = float(count)
            values[f"{split}_prompts_cut"] = float(stats.prompts_cut)
            values[f"{split}_prompt_tokens_dropped"] = float(stats.prompt_tokens_dropped)
        return values

    def to_dict(self) -> dict[str, Any]:
        return {
            "max_length": self.max_length,
            "max_length_from": self.max_length_from,
            "chat_template_from": self.chat_template_from,
            "splits": {split: stats.to_dict() for split, stats in self.splits.items()},
        }


def log_pair_report(report: PairPreprocessReport) -> None:
    """One line for the length and template, one per split: a split that refused rows is a
    warning naming each reason's count, first rows and first problem."""
    report.log_lengths()
    for split, st in report.splits.items():
        refused = [
            f"{count} {reason} (rows {', '.join(map(str, st.refused_rows[reason]))}"
            f"{', ...' if count > len(st.refused_rows[reason]) else ''}; first: "
            f"{st.first_problem[reason]})"
            for reason, count in st.refused.items()
            if count
        ]
        logger.log(
            logging.WARNING if refused else logging.INFO,
            f"{split}: {st.rows_out} pairs kept of {st.rows_in} rows, "
            f"{sum(st.refused.values())} refused{': ' + '; '.join(refused) if refused else ''}; "
            f"{st.prompts_cut} prompts lost their oldest tokens to max_length "
            f"({st.prompt_tokens_dropped} tokens dropped)",
        )
