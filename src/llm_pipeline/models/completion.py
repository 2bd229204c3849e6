"""Loading a fine-tuned causal LM folder and completing prompts in batches.

The causal-LM counterpart of `generation` (which serves seq2seq models), shared by evaluation
(sharded across torchrun ranks) and the prediction server. Why it is done this way:

* Prompts are padded on the **left**: a causal LM continues the last token of its input, so
  every row's prompt must end in the same column, where the new tokens begin. The attention
  mask keeps the padding out, and transformers derives each row's positions from it.
* A prompt is tokenized as training saw it: the tokenizer's leading special tokens (`<s>`,
  `[CLS]`), unless the prompt text already starts with them (a chat template writes its own),
  then the text with no special tokens added. An end-of-sequence token appended to a prompt
  (BERT's tokenizer adds `[SEP]`) would tell the model the text is finished.
* A prompt longer than `max_prompt_tokens`, or than the model's positions leave room for
  beside the new tokens, loses its start, never its end: the end is what the answer
  continues (a chat's latest turn). Its leading special tokens stay.
* Only the new tokens are decoded, so a completion never repeats its prompt, and it starts
  at its first word (not with the space a decoder puts after the prompt); a stop string
  ends generation for its row and the text is cut before its first occurrence, so the stop
  string itself is never returned. Stops are looked for in each row's decoded new text
  (microseconds a step) rather than with transformers' `StopStringCriteria`, which rebuilds
  a table over the whole vocabulary on every generate call (1 to 4 s on a CPU for MiniLM's
  30k tokens, more for larger vocabularies: `benchmarks/stop_strings.py`).
* Search is greedy unless a caller asks to sample (`do_sample`, `temperature`, `top_p`).
* Batches, length order, dtype and device as in `generation`: longest prompts first, outputs
  back in input order; bf16 on GPUs that compute in it natively, fp32 elsewhere.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch
from transformers import StoppingCriteria

from llm_pipeline.errors import ModelLoadError, UserError
from llm_pipeline.models.generation import (
    GENERATION_FIELDS,
    Generated,
    load_checked_folder,
    longest_first,
    pad_left,
    read_saved_config,
    stop_when,
)

if TYPE_CHECKING:
    from transformers import GenerationConfig, PreTrainedModel, PreTrainedTokenizerBase

__all__ = [
    "CompletionSettings",
    "Generated",
    "TextSoFar",
    "complete",
    "completion_config",
    "cut_at_stop",
    "cut_prompt",
    "encode_prompts",
    "leading_ids",
    "load_causal_lm",
    "new_text",
    "pad_left",
    "prompt_room",
    "until_end",
]

_EXPECTED = "the finetune step's causal LM folder (config.json, model.safetensors, tokenizer files)"


@dataclass(frozen=True)
class CompletionSettings:
    """How to complete prompts. Unset (None) search settings keep the model's generation
    config; `do_sample` False is greedy (or beam) search whatever that config says."""

    batch_size: int = 16
    max_new_tokens: int | None = None
    min_new_tokens: int | None = None
    num_beams: int | None = None
    length_penalty: float | None = None
    no_repeat_ngram_size: int | None = None
    do_sample: bool = False
    temperature: float | None = None
    top_p: float | None = None
    #: Strings that end a completion; it is cut before the first one found.
    stop: tuple[str, ...] = ()
    #: Longest prompt read, in tokens (None: as long as the model's positions allow); a
    #: longer one loses its start.
    max_prompt_tokens: int | None = None


def load_causal_lm(
    model_dir: str | os.PathLike[str],
    *,
    device: torch.device | None = None,
    dtype: torch.dtype | None = None,
    error: type[UserError] = ModelLoadError,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The causal LM (eval mode, on `device`) and tokenizer saved in `model_dir`.

    `dtype` defaults to `inference_dtype(device)`. The tokenizer gets its EOS as pad token
    if it has none. Raises `error` (a caller's own UserError, so its step reports it) for a
    folder that is not a consolidated causal-LM checkpoint.
    """
    from transformers import AutoModelForCausalLM

    folder = Path(model_dir)
    _check_causal(folder, error)
    return load_checked_folder(
        folder,
        AutoModelForCausalLM,
        expected=_EXPECTED,
        device=device,
        dtype=dtype,
        error=error,
        pad_token=True,
    )


#: Heads a saved folder may carry that do not continue text.
_NOT_CAUSAL_HEADS = (
    "ForSequenceClassification",
    "ForTokenClassification",
    "ForQuestionAnswering",
    "ForMaskedLM",
    "ForMultipleChoice",
)


def check_causal_folder(folder: Path, error: type[UserError] = ModelLoadError) -> None:
    """Raise `error` unless `folder` holds a consolidated causal-LM checkpoint (what
    `load_causal_lm` checks before it loads; an engine's loader checks it too)."""
    from llm_pipeline.models.generation import check_weights

    _check_causal(folder, error)
    check_weights(folder, error)


def _check_causal(folder: Path, error: type[UserError]) -> None:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    config = read_saved_config(folder, error, expected=_EXPECTED)
    model_type = str(config.model_type)
    # The saved head decides too: transformers maps "bert" to a causal LM (the warm-started
    # decoder), so a BERT classifier's model type alone would pass.
    other_head = any(
        str(name).endswith(_NOT_CAUSAL_HEADS)
        for name in getattr(config, "architectures", None) or []
    )
    if (
        other_head
        or getattr(config, "is_encoder_decoder", False)
        or (model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
    ):
        kind = ", ".join(getattr(config, "architectures", None) or []) or model_type
        raise error(
            f"model folder {folder} holds a {kind} model (model_type {model_type!r}), not a "
            "causal LM: completions need a decoder-only model such as OPT, Llama or a "
            "warm-started decoder; give the finetune step's output folder"
        )


def encode_prompts(tokenizer: PreTrainedTokenizerBase, prompts: Sequence[str]) -> list[list[int]]:
    """Each prompt's token ids as training saw them: the tokenizer's leading special tokens
    unless the text begins with them, then the text without special tokens."""
    leading = leading_ids(tokenizer)
    encoded = tokenizer(list(prompts), add_special_tokens=False)["input_ids"]
    return [ids if ids[: len(leading)] == leading else leading + ids for ids in encoded]


def leading_ids(tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """The special tokens the tokenizer puts before a text (`<s>`, `[CLS]`, or none), found
    by encoding a probe with and without them, so any post-processor is read right."""
    with_special = list(tokenizer("hello world", add_special_tokens=True)["input_ids"])
    bare = list(tokenizer("hello world", add_special_tokens=False)["input_ids"])
    for start in range(len(with_special) - len(bare) + 1):
        if with_special[start : start + len(bare)] == bare:
            return with_special[:start]
    return []


def completion_config(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, settings: CompletionSettings
) -> GenerationConfig:
    """The model's generation config with `settings` laid over it.

    Without `do_sample` the sampling settings the model's config may carry (Llama-2's
    temperature 0.6, top_p 0.9) are reset, so transformers does not warn that they are unused.
    """
    generation = copy.deepcopy(model.generation_config)
    overrides: dict[str, Any] = {
        name: getattr(settings, name)
        for name in GENERATION_FIELDS
        if getattr(settings, name) is not None
    }
    if settings.do_sample:
        overrides |= {
            name: getattr(settings, name)
            for name in ("temperature", "top_p")
            if getattr(settings, name) is not None
        }
    else:
        overrides |= {"temperature": None, "top_p": None, "top_k": None}
    generation.update(**overrides, do_sample=settings.do_sample, use_cache=True)
    if generation.pad_token_id is None:
        generation.pad_token_id = tokenizer.pad_token_id
    if generation.eos_token_id is None:
        generation.eos_token_id = tokenizer.eos_token_id or tokenizer.sep_token_id
    return generation


def complete(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str],
    *,
    settings: CompletionSettings,
    should_stop: Callable[[], bool] | None = None,
    on_text: Callable[[int, str], None] | None = None,
) -> Generated:
    """The completion of every prompt (new text only, cut at a stop string), generated
    `settings.batch_size` at a time, in input order, with the new tokens each took.
    `should_stop` as `models.generation.generate_summaries` takes it; `on_text(i, text)`
    hears prompt i's text so far at every step (a streamed answer; not cut at stops)."""
    generation = completion_config(model, tokenizer, settings)
    pad_id = int(generation.pad_token_id)
    stops = _ids_of(generation.eos_token_id)
    device = next(model.parameters()).device
    leading = len(leading_ids(tokenizer))
    positions = getattr(model.config, "max_position_embeddings", None)
    room = prompt_room(positions, int(generation.max_new_tokens or 0), settings.max_prompt_tokens)
    input_ids = [cut_prompt(ids, room, keep=leading) for ids in encode_prompts(tokenizer, prompts)]
    texts = [""] * len(prompts)
    counts = [0] * len(prompts)
    order = longest_first(input_ids)
    with torch.inference_mode():
        for start in range(0, len(order), settings.batch_size):
            rows = order[start : start + settings.batch_size]
            ids, mask = pad_left([input_ids[i] for i in rows], pad_id, device)
            stopping = stop_when(should_stop)
            if settings.stop:
                stopping.append(_StopStrings(tokenizer, settings.stop, ids.shape[1]))
            if on_text is not None:
                prompt_ids = [input_ids[i] for i in rows]
                progress = TextSoFar(tokenizer, prompt_ids, stops, pad_id)
                stopping.append(_Reporting(progress, rows, ids.shape[1], on_text))
            # `generate` is mixed in per model class, so PreTrainedModel does not declare it.
            out = cast(Any, model).generate(
                input_ids=ids,
                attention_mask=mask,
                generation_config=generation,
                stopping_criteria=stopping,
            )
            for i, new in zip(rows, out[:, ids.shape[1] :].tolist(), strict=True):
                kept = until_end(new, stops, pad_id)
                # Every prompt ends where an answer turn begins: the space a decoder puts
                # between the prompt and the first new word is not part of the answer.
                text = new_text(tokenizer, input_ids[i], kept).lstrip()
                texts[i] = cut_at_stop(text, settings.stop)
                counts[i] = len(kept)
    return Generated(texts=texts, token_counts=counts)


def cut_prompt(ids: list[int], room: int | None, *, keep: int) -> list[int]:
    """`ids` cut from the left to `room` tokens (None: not cut), its first `keep` tokens (the
    leading special tokens) kept in front."""
    if room is None or len(ids) <= room:
        return ids
    tail = room - keep
    return ids[:keep] + (ids[-tail:] if tail > 0 else [])


def prompt_room(positions: Any, new_tokens: int, asked: int | None) -> int | None:
    """How many prompt tokens a row may have: `asked`, and what the model's position table
    (`positions`, its config's max_position_embeddings) leaves beside `new_tokens` (models
    with relative positions have no table)."""
    limits = [asked] if asked else []
    if isinstance(positions, int) and positions > 0:
        limits.append(max(1, positions - new_tokens))
    return min(limits) if limits else None


class _StopStrings(StoppingCriteria):
    """Ends a row once its decoded new text holds a stop string."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, stop: Sequence[str], start: int):
        self._tokenizer, self._stop, self._start = tokenizer, tuple(stop), start

    def __call__(self, input_ids: torch.Tensor, scores: Any, **kwargs: Any) -> torch.Tensor:
        texts = self._tokenizer.batch_decode(input_ids[:, self._start :], skip_special_tokens=True)
        done = [any(stop in text for stop in self._stop) for text in texts]
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)


class TextSoFar:
    """A batch's rows' answers so far, decoded as `complete` decodes the finished ones
    (each row's new tokens up to its end, read after its prompt, leading space dropped)."""

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        prompts: Sequence[list[int]],
        eos: set[int],
        pad_id: int | None,
    ) -> None:
        self._tokenizer, self._prompts, self._eos, self._pad = tokenizer, prompts, eos, pad_id

    def __call__(self, row: int, new: list[int]) -> str:
        kept = until_end(new, self._eos, self._pad)
        return new_text(self._tokenizer, self._prompts[row], kept).lstrip()


class _Reporting(StoppingCriteria):
    """Hands each row's text so far to `on_text` at every step; never stops a row."""

    def __init__(
        self,
        text_of: TextSoFar,
        rows: Sequence[int],
        start: int,
        on_text: Callable[[int, str], None],
    ) -> None:
        self._text_of, self._rows, self._start, self._on_text = text_of, rows, start, on_text

    def __call__(self, input_ids: torch.Tensor, scores: Any, **kwargs: Any) -> torch.Tensor:
        for position, new in enumerate(input_ids[:, self._start :].tolist()):
            self._on_text(self._rows[position], self._text_of(position, new))
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


def new_text(tokenizer: PreTrainedTokenizerBase, prompt: list[int], new: list[int]) -> str:
    """The text `new` adds to `prompt`: the decoded whole less the decoded prompt, as
    transformers' text-generation pipeline does. Decoded alone, new tokens can read wrong
    where they continue a word (WordPiece's `##` pieces) or lean on the space before them."""
    head = str(tokenizer.decode(prompt, skip_special_tokens=True))
    whole = str(tokenizer.decode(prompt + new, skip_special_tokens=True))
    if whole.startswith(head):
        return whole[len(head) :]
    return str(tokenizer.decode(new, skip_special_tokens=True))


def cut_at_stop(text: str, stop: Sequence[str]) -> str:
    """`text` up to the earliest occurrence of any stop string (all of it if none occurs)."""
    found = [index for index in (text.find(s) for s in stop if s) if index >= 0]
    return text[: min(found)] if found else text


def _ids_of(value: int | list[int] | None) -> set[int]:
    if value is None:
        return set()
    return {value} if isinstance(value, int) else set(value)


def until_end(tokens: list[int], eos: set[int], pad_id: int | None) -> list[int]:
    """The generated tokens up to and including the first end-of-sequence; a row that
    finished early (a stop string, or another row still running) is padded after it."""
    for index, token in enumerate(tokens):
        if token in eos:
            return tokens[: index + 1]
        if token == pad_id:
            return tokens[:index]
    return tokens
