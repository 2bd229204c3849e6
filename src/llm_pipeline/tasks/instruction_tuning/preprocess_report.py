"""What preprocessing a split of chats reports: lengths before the cut, the rows dropped and
cut, and what packing did; logged, and written to `preprocess.json`."""

import logging
from dataclasses import asdict, dataclass
from typing import Any

from llm_pipeline.data.chat_format import ChatLengths
from llm_pipeline.data.preprocess import LengthStats, SplitRows, logger, with_rows_out
from llm_pipeline.tasks.instruction_tuning.packing import PackingStats


@dataclass(frozen=True)
class ChatSplitStats(SplitRows):
    """What preprocessing did to one split of chats (instruction tuning); the rows it
    dropped are those whose chat is unusable (not a list, an unknown role, no assistant
    turn, ...)."""

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


@dataclass(frozen=True)
class ChatPreprocessReport(ChatLengths):
    """The resolved sequence length and template, and per-split statistics."""

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
        return with_rows_out(asdict(self), self.splits)


def log_chat_report(report: ChatPreprocessReport) -> None:
    """One line for the length and template, one per split, one for packing; a split that
    dropped rows or cut responses is a warning."""
    report.log_lengths()
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
