"""Turn the downloaded chats into token ids a causal LM trains on, the prompt masked.

Output (`save_to_disk` folder, one split per input split):
- `input_ids`, `attention_mask`, `labels`: int32 lists, not padded; `labels` is `input_ids`
  with -100 on every prompt token (system and user turns, the template's headers), so the
  loss is on the responses only; every response ends with the end-of-sequence token
  (the tokenizer's EOS, or `[SEP]` for one without). Every assistant turn is learned.
- `prompt` (the rendered text the model continues for the chat's last assistant turn,
  generation prompt included: what evaluation feeds generation) and `response` (that
  turn's text: the reference).
- with `data.packing` and a model whose attention follows position ids, the train split is
  packed instead (packing.py): rows of exactly `max_length` tokens with `input_ids`,
  `labels` and `position_ids` only.
- `preprocess.json`: the resolved length and template, and per-split statistics.

Unusable chats (not a list, an unknown role, a turn without text, no assistant turn) are
dropped and counted, the first one named by row and turn; a split left with none is an
error that names it. A sequence longer than `max_length` loses its oldest prompt tokens
first (after the leading special token), never the response, though the prompt keeps at
least a quarter of `max_length`; a response too long for the rest is cut at its end.
"""

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets
import numpy as np
from transformers import PreTrainedTokenizerBase

from llm_pipeline.config import DataConfig, ModelConfig
from llm_pipeline.config.data import packs
from llm_pipeline.data.chat_format import chat_max_length, chat_template_from, resolve_chat_format
from llm_pipeline.data.preprocess import LengthStats, tokenize_split
from llm_pipeline.errors import DataError
from llm_pipeline.output_files import PREPROCESS_REPORT_FILE
from llm_pipeline.storage import atomic_output_dir
from llm_pipeline.tasks.chat import (
    ChatFormat,
    ChatTemplateError,
    Segment,
    TemplateError,
    as_chat,
    chat_problem,
    last_assistant,
)
from llm_pipeline.tasks.instruction_tuning.packing import (
    PackingStats,
    example_lengths,
    keeps_examples_apart,
    pack_split,
)
from llm_pipeline.tasks.instruction_tuning.preprocess_report import (
    ChatPreprocessReport,
    ChatSplitStats,
    log_chat_report,
)

IGNORE_INDEX = -100

#: Per-row facts carried through the map pass and dropped before saving.
_PRIVATE = {
    "_problem": datasets.Value("string"),
    "_tokens": datasets.Value("int32"),
    "_prompt_tokens": datasets.Value("int32"),
    "_response_tokens": datasets.Value("int32"),
    "_prompt_dropped": datasets.Value("int32"),
    "_response_dropped": datasets.Value("int32"),
}


def preprocess_chats(
    dataset: datasets.DatasetDict,
    *,
    tokenizer: PreTrainedTokenizerBase,
    output_dir: str | Path,
    data: DataConfig,
    model: ModelConfig,
) -> ChatPreprocessReport:
    """Tokenize every split of chats in `dataset` into `output_dir` (see the module doc)."""
    chat_format = resolve_chat_format(tokenizer, data)
    max_length, length_from = chat_max_length(data, tokenizer, chat_format)
    with tempfile.TemporaryDirectory(prefix="llm-pipeline-preprocess-") as work:
        encode = _EncodeChats(chat_format, max_length)
        encoded = {
            split: tokenize_split(
                table,
                encode,
                features=_features(),
                cache_file=Path(work) / f"{split}.arrow",
                num_proc=data.num_proc if data.num_proc > 1 else None,
                desc=f"tokenizing {split}",
            )
            for split, table in dataset.items()
        }
        stats = {split: _split_stats(split, table) for split, table in encoded.items()}
        kept = {split: _usable_rows(table) for split, table in encoded.items()}
        packing = None
        if packs(data.packing, packable=True, on_gpus=None):
            packing, kept = _packed(kept, model, tokenizer, chat_format, max_length, work)
        report = ChatPreprocessReport(
            max_length=max_length,
            max_length_from=length_from,
            chat_template_from=chat_template_from(tokenizer, data),
            splits=stats,
            packing=packing,
        )
        with atomic_output_dir(output_dir) as staging:
            datasets.DatasetDict(kept).save_to_disk(str(staging))
            payload = {"tokenizer": model.tokenizer_source, "chat_template": chat_format.template}
            (staging / PREPROCESS_REPORT_FILE).write_text(
                json.dumps(payload | report.to_dict(), indent=2) + "\n"
            )
    log_chat_report(report)
    return report


def chats(batch: dict[str, list[Any]]) -> list[Any]:
    """Each row of a batch as a chat, as stored (check it with `chat_problems`): a
    `messages` row is its chat, a prompt/response row the one-turn chat
    `[user: prompt, assistant: response]`."""
    if "messages" in batch:
        return [as_chat(chat) for chat in batch["messages"]]
    return [
        [{"role": "user", "content": prompt}, {"role": "assistant", "content": response}]
        for prompt, response in zip(batch["prompt"], batch["response"], strict=True)
    ]


def chat_problems(batch: dict[str, list[Any]]) -> list[str | None]:
    """What makes each row unusable for training, naming the column or the turn; None for
    a usable row."""
    if "messages" in batch:
        return [chat_problem(chat, need_assistant=True) for chat in chats(batch)]
    return [
        _text_problem("prompt", prompt) or _text_problem("response", response)
        for prompt, response in zip(batch["prompt"], batch["response"], strict=True)
    ]


def _text_problem(column: str, text: Any) -> str | None:
    if not isinstance(text, str):
        return f"{column}: not text (got {type(text).__name__})"
    if not text.strip():
        return f"{column}: no text"
    return None


@dataclass(frozen=True)
class Fitted:
    """One example cut to length: ids, labels, and the tokens each side lost."""

    input_ids: list[int]
    labels: list[int]
    prompt_dropped: int
    response_dropped: int


def fit_to_length(segments: list[Segment], max_length: int, *, lead: int) -> Fitted:
    """The segments as one sequence of at most `max_length` tokens, prompt masked.

    Over the limit, the oldest prompt tokens go first (the `lead` special tokens that open
    every sequence stay), never a response token, but the prompt keeps at least
    `max_length // 4` of its tokens (all of them if it has fewer): an example with no
    question left teaches nothing. Still over the limit, the sequence is cut at its end,
    which cuts the (last) response.
    """
    ids = [token for segment in segments for token in segment.ids]
    learned = [segment.learned for segment in segments for _ in segment.ids]
    keep = list(range(len(ids)))
    prompt_dropped = response_dropped = 0
    if len(ids) > max_length:
        prompt = [i for i in range(lead, len(ids)) if not learned[i]]
        responses = len(ids) - lead - len(prompt)
        budget = max(max_length - lead - responses, min(len(prompt), max_length // 4))
        dropped = set(prompt[: max(0, len(prompt) - budget)])
        keep = [i for i in keep if i not in dropped]
        prompt_dropped = len(dropped)
        tail = keep[max_length:]
        response_dropped = sum(learned[i] for i in tail)
        prompt_dropped += len(tail) - response_dropped
        keep = keep[:max_length]
    return Fitted(
        input_ids=[ids[i] for i in keep],
        labels=[ids[i] if learned[i] else IGNORE_INDEX for i in keep],
        prompt_dropped=prompt_dropped,
        response_dropped=response_dropped,
    )


@dataclass(frozen=True)
class _EncodeChats:
    """One `Dataset.map` batch: check, render, tokenize, mask and cut each chat.

    A picklable object rather than a closure, so `num_proc` workers receive it whole. An
    unusable row comes out empty with its problem; rows are filtered after counting.
    """

    chat_format: ChatFormat
    max_length: int

    def __call__(self, batch: dict[str, list[Any]], indices: list[int]) -> dict[str, list[Any]]:
        out: dict[str, list[Any]] = {name: [] for name in _features()}
        problems = chat_problems(batch)
        for index, chat, problem in zip(indices, chats(batch), problems, strict=True):
            if problem is None:
                try:
                    segments = self.chat_format.segments(chat)
                    prompt = self.chat_format.prompt_text(chat)
                except TemplateError as exc:
                    problem = f"the chat template refuses it: {exc}"
                except ChatTemplateError as exc:
                    raise DataError(f"row {index + 1}: {exc}") from None
            if problem is not None:
                # Rows and turns counted from 1, as a person reading the file counts them.
                self._append(out, problem=f"row {index + 1}: {problem}")
                continue
            fitted = fit_to_length(
                segments, self.max_length, lead=len(self.chat_format.leading_ids)
            )
            learned = sum(len(segment.ids) for segment in segments if segment.learned)
            total = sum(len(segment.ids) for segment in segments)
            self._append(
                out,
                input_ids=fitted.input_ids,
                labels=fitted.labels,
                prompt=prompt,
                response=chat[last_assistant(chat)]["content"],
                # The turns the response answers, as a served instance carries them (the
                # deploy step's probe): `prompt` is rendered, which a server renders again.
                chat=json.dumps(list(chat[: last_assistant(chat)]), ensure_ascii=False),
                _tokens=total,
                _prompt_tokens=total - learned,
                _response_tokens=learned,
                _prompt_dropped=fitted.prompt_dropped,
                _response_dropped=fitted.response_dropped,
            )
        return out

    @staticmethod
    def _append(out: dict[str, list[Any]], *, problem: str = "", **row: Any) -> None:
        ids = row.get("input_ids", [])
        values = {
            "input_ids": ids,
            "attention_mask": [1] * len(ids),
            "labels": row.get("labels", []),
            "prompt": row.get("prompt", ""),
            "response": row.get("response", ""),
            "chat": row.get("chat", "[]"),
            "_problem": problem,
        }
        for name in _features():
            out[name].append(values.get(name, row.get(name, 0)))


def _features() -> datasets.Features:
    # int32 halves the disk and I/O of the default int64; the collators make int64 tensors.
    ids = datasets.List(datasets.Value("int32"))
    return datasets.Features(
        {
            "input_ids": ids,
            "attention_mask": ids,
            "labels": ids,
            "prompt": datasets.Value("string"),
            "response": datasets.Value("string"),
            "chat": datasets.Value("string"),
            **_PRIVATE,
        }
    )


def _column(table: datasets.Dataset, name: str) -> np.ndarray:
    # Straight from the Arrow column: no Python objects per row.
    return np.asarray(table.data.column(name).to_numpy(zero_copy_only=False))


def _split_stats(split: str, table: datasets.Dataset) -> ChatSplitStats:
    problems = _column(table, "_problem")
    bad = np.flatnonzero(problems != "")
    if len(bad) == len(table):
        raise DataError(
            f"split {split!r}: none of its {len(table)} rows is a usable chat; the first: "
            f"{problems[0]}"
        )
    ok = problems == ""

    def lengths(name: str) -> LengthStats:
        return LengthStats.of(_column(table, name)[ok])

    prompt_dropped = _column(table, "_prompt_dropped")[ok]
    response_dropped = _column(table, "_response_dropped")[ok]
    return ChatSplitStats(
        rows_in=len(table),
        rows_dropped=len(bad),
        first_dropped=str(problems[bad[0]]) if len(bad) else None,
        tokens=lengths("_tokens"),
        prompt_tokens=lengths("_prompt_tokens"),
        response_tokens=lengths("_response_tokens"),
        rows_prompt_cut=int(np.count_nonzero(prompt_dropped)),
        rows_response_cut=int(np.count_nonzero(response_dropped)),
        tokens_dropped=int(prompt_dropped.sum() + response_dropped.sum()),
    )


def _usable_rows(table: datasets.Dataset) -> datasets.Dataset:
    """The rows whose chat was usable, without the private columns."""
    ok = np.flatnonzero(_column(table, "_problem") == "")
    return table.select(ok, keep_in_memory=True).remove_columns(list(_PRIVATE))


def _packed(
    splits: dict[str, datasets.Dataset],
    model: ModelConfig,
    tokenizer: PreTrainedTokenizerBase,
    chat_format: ChatFormat,
    max_length: int,
    work: str,
) -> tuple[PackingStats, dict[str, datasets.Dataset]]:
    """The train split packed, when the model keeps packed examples apart; evaluation
    splits stay one example per row (they keep their text for evaluate)."""
    reason = keeps_examples_apart(model, tokenizer)
    if reason is not None:
        return PackingStats(packed=False, reason=reason), splits
    train = splits["train"]
    lengths = example_lengths(train)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else chat_format.eos_id
    packed = pack_split(
        train,
        lengths=lengths,
        capacity=max_length,
        pad_id=pad_id,
        cache_file=str(Path(work) / "packed.arrow"),
    )
    stats = PackingStats(
        packed=True,
        examples=len(train),
        rows=len(packed),
        fill=sum(lengths) / (len(packed) * max_length),
    )
    return stats, {**splits, "train": packed}
