"""Generating with a model's CTranslate2 form, as `models.generation` and
`models.completion` generate with transformers: the same inputs, settings and outputs.

The callers (the evaluate step's scorers, the prediction server) hand the same token ids
and settings to either engine and get the same `Generated` back: texts in input order, with
the new tokens each took (end-of-sequence included). What is the same and why:

* Inputs go in as the tokenizer's token strings (CTranslate2's vocabulary is the
  tokenizer's, in id order), longest first, so each batch pads little.
* Unset search settings take the model's own generation config (`generation_config.json`),
  as transformers does; CTranslate2's `max_decoding_length`/`max_length` count the new
  tokens with the end-of-sequence, as `max_new_tokens` does.
* A completion is decoded as `models.completion` decodes it (only its new tokens, cut at a
  stop string) and a prompt is cut to the room the model's positions leave.
* Stop strings end a row during greedy or sampled decoding, through CTranslate2's per-step
  callback (the row stops at the step its text first holds one); `should_stop` is asked
  at every step too, so a batch whose requests were all abandoned ends within one step.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from llm_pipeline.models.completion import (
    CompletionSettings,
    TextSoFar,
    cut_at_stop,
    cut_prompt,
    encode_prompts,
    leading_ids,
    new_text,
    prompt_room,
    until_end,
)
from llm_pipeline.models.generation import Generated, GenerationOptions, longest_first

__all__ = ["Ct2Completer", "Ct2Summarizer", "load_form_tokenizer"]

#: Never stop (the default of `should_stop`).
_NEVER: Callable[[], bool] = lambda: False  # noqa: E731


def load_form_tokenizer(model_dir: str | os.PathLike[str]) -> Any:
    """The model folder's tokenizer, with its EOS as pad token where it has none."""
    from transformers import AutoTokenizer

    from llm_pipeline.models.sources import ensure_pad_token

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    ensure_pad_token(tokenizer)
    return tokenizer


def _generation_config(model_dir: Path) -> Any:
    from transformers import AutoConfig, GenerationConfig

    try:
        return GenerationConfig.from_pretrained(model_dir)
    except OSError:
        return GenerationConfig.from_model_config(AutoConfig.from_pretrained(model_dir))


def _threads() -> int:
    """Threads per CTranslate2 worker on a CPU: torch's count (all cores by default)."""
    import torch

    return max(1, int(torch.get_num_threads()))


def _ids(value: int | list[int] | None) -> list[int]:
    if value is None:
        return []
    return [int(value)] if isinstance(value, int) else [int(v) for v in value]


class _Form:
    """What both kinds share: the form's folder, the model's tokenizer and search defaults."""

    def __init__(
        self,
        model_dir: str | os.PathLike[str],
        form: Path,
        *,
        compute_type: str,
        device: str = "cpu",
        tokenizer: Any = None,
    ) -> None:
        self.model_dir = Path(model_dir)
        self.form = form
        self.compute_type = compute_type
        self.device = "cuda" if device.startswith("cuda") else "cpu"
        index = int(device.partition(":")[2] or 0) if self.device == "cuda" else 0
        self.tokenizer = tokenizer if tokenizer is not None else load_form_tokenizer(model_dir)
        self.generation = _generation_config(self.model_dir)
        eos = _ids(self.generation.eos_token_id)
        if not eos:
            fallback = self.tokenizer.eos_token_id
            eos = _ids(fallback if fallback is not None else self.tokenizer.sep_token_id)
        self.eos_ids = eos
        self.options: dict[str, Any] = {
            "device": self.device,
            "compute_type": compute_type,
            **({"intra_threads": _threads()} if self.device == "cpu" else {"device_index": index}),
        }

    def tokens(self, rows: Sequence[Sequence[int]]) -> list[list[str]]:
        return [list(self.tokenizer.convert_ids_to_tokens(list(row))) for row in rows]

    def setting(self, given: Any, name: str, default: Any) -> Any:
        """`given` if set, else the model's generation config's `name`, else `default`."""
        if given is not None:
            return given
        value = getattr(self.generation, name, None)
        return default if value is None else value

    def search_options(self, settings: Any, *, beams: int) -> dict[str, Any]:
        """CTranslate2's options for the search settings both kinds share (`settings`'
        own, else the model's generation config's), ending at the model's EOS and keeping it
        in the result, as transformers counts it."""
        return {
            "beam_size": beams,
            "length_penalty": float(self.setting(settings.length_penalty, "length_penalty", 1.0)),
            "no_repeat_ngram_size": int(
                self.setting(settings.no_repeat_ngram_size, "no_repeat_ngram_size", 0)
            ),
            "end_token": self.eos_ids,
            "return_end_token": True,
        }

    def describe(self) -> dict[str, Any]:
        return {
            "engine": "ctranslate2",
            "compute_type": self.compute_type,
            "device": self.device,
            "form": str(self.form),
        }


class Ct2Summarizer(_Form):
    """A seq2seq model's CTranslate2 form (a `Translator`)."""

    def __init__(self, model_dir: str | os.PathLike[str], form: Path, **kwargs: Any) -> None:
        import ctranslate2

        super().__init__(model_dir, form, **kwargs)
        self.translator = ctranslate2.Translator(str(form), **self.options)

    def generate(
        self,
        input_ids: Sequence[Sequence[int]],
        *,
        config: GenerationOptions,
        should_stop: Callable[[], bool] | None = None,
    ) -> Generated:
        """A summary of every token-id sequence, `config.batch_size` at a time, in input
        order (as `models.generation.generate_summaries`)."""
        should_stop = should_stop or _NEVER
        beams = int(self.setting(config.num_beams, "num_beams", 1))
        options: dict[str, Any] = {
            **self.search_options(config, beams=beams),
            "max_decoding_length": int(self.setting(config.max_new_tokens, "max_new_tokens", 20)),
            "min_decoding_length": int(self.setting(config.min_new_tokens, "min_new_tokens", 0)),
            "max_input_length": 0,
        }
        if beams == 1:
            options["callback"] = lambda step: bool(should_stop())
        texts = [""] * len(input_ids)
        counts = [0] * len(input_ids)
        order = longest_first(input_ids)
        for start in range(0, len(order), config.batch_size):
            rows = order[start : start + config.batch_size]
            if should_stop():
                break
            results = self.translator.translate_batch(
                self.tokens([input_ids[i] for i in rows]), **options
            )
            for i, result in zip(rows, results, strict=True):
                tokens = result.hypotheses[0]
                ids = self.tokenizer.convert_tokens_to_ids(tokens)
                texts[i] = str(self.tokenizer.decode(ids, skip_special_tokens=True)).strip()
                counts[i] = len(ids)
        return Generated(texts=texts, token_counts=counts)


class Ct2Completer(_Form):
    """A causal LM's CTranslate2 form (a `Generator`)."""

    def __init__(self, model_dir: str | os.PathLike[str], form: Path, **kwargs: Any) -> None:
        import ctranslate2
        from transformers import AutoConfig

        super().__init__(model_dir, form, **kwargs)
        self.generator = ctranslate2.Generator(str(form), **self.options)
        self.positions = getattr(
            AutoConfig.from_pretrained(model_dir), "max_position_embeddings", None
        )
        self.leading = len(leading_ids(self.tokenizer))

    def complete(
        self,
        prompts: Sequence[str],
        *,
        settings: CompletionSettings,
        should_stop: Callable[[], bool] | None = None,
        on_text: Callable[[int, str], None] | None = None,
    ) -> Generated:
        """The completion of every prompt, as `models.completion.complete` gives it (and
        `should_stop`, `on_text` as it takes them)."""
        should_stop = should_stop or _NEVER
        new_tokens = int(self.setting(settings.max_new_tokens, "max_new_tokens", 20))
        beams = int(self.setting(settings.num_beams, "num_beams", 1))
        room = prompt_room(self.positions, new_tokens, settings.max_prompt_tokens)
        encoded = encode_prompts(self.tokenizer, prompts)
        input_ids = [cut_prompt(ids, room, keep=self.leading) for ids in encoded]
        options: dict[str, Any] = {
            **self.search_options(settings, beams=beams),
            "max_length": new_tokens,
            "min_length": int(self.setting(settings.min_new_tokens, "min_new_tokens", 0)),
            "include_prompt_in_result": False,
        }
        if settings.do_sample:
            options |= {
                "sampling_topk": 0,
                "sampling_temperature": float(settings.temperature or 1.0),
                "sampling_topp": float(settings.top_p if settings.top_p is not None else 1.0),
            }
        texts = [""] * len(prompts)
        counts = [0] * len(prompts)
        order = longest_first(input_ids)
        for start in range(0, len(order), settings.batch_size):
            rows = order[start : start + settings.batch_size]
            if should_stop():
                break
            batch = [input_ids[i] for i in rows]
            if beams == 1:
                text_of = TextSoFar(self.tokenizer, batch, set(self.eos_ids), None)
                report = None
                if on_text is not None:
                    report = lambda position, text, rows=rows: on_text(rows[position], text)  # noqa: E731
                options["callback"] = _StepWatch(
                    self.tokenizer, settings.stop, should_stop, text_of, report
                )
            results = self.generator.generate_batch(self.tokens(batch), **options)
            for i, result in zip(rows, results, strict=True):
                kept = until_end(list(result.sequences_ids[0]), set(self.eos_ids), None)
                text = new_text(self.tokenizer, input_ids[i], kept).lstrip()
                texts[i] = cut_at_stop(text, settings.stop)
                counts[i] = len(kept)
        return Generated(texts=texts, token_counts=counts)


class _StepWatch:
    """CTranslate2's per-step callback: True ends that row, once its new text holds a stop
    string, or every row, once `should_stop` says the batch is no longer wanted; with
    `report`, each row's text so far (`text_of`) is handed on at every step."""

    def __init__(
        self,
        tokenizer: Any,
        stop: Sequence[str],
        should_stop: Callable[[], bool],
        text_of: TextSoFar,
        report: Callable[[int, str], None] | None = None,
    ) -> None:
        self._tokenizer, self._stop, self._should_stop = tokenizer, tuple(stop), should_stop
        self._text_of, self._report = text_of, report
        self._new: dict[int, list[int]] = {}
        self._lock = threading.Lock()

    def __call__(self, step: Any) -> bool:
        if self._should_stop():
            return True
        if not self._stop and self._report is None:
            return False
        row = int(step.batch_id)
        with self._lock:
            ids = self._new.setdefault(row, [])
            ids.append(int(step.token_id))
            new = list(ids)
        if self._report is not None:
            self._report(row, self._text_of(row, new))
        if not self._stop:
            return False
        # As transformers' stop check reads it: the new tokens decoded alone.
        text = str(self._tokenizer.decode(new, skip_special_tokens=True))
        return any(stop in text for stop in self._stop)
