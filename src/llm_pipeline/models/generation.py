"""Loading a fine-tuned seq2seq folder and generating summaries in batches.

Shared by evaluation (which shards this across torchrun ranks) and the prediction server
(which feeds it batches of concurrent requests). Why it is done this way:

* Inputs are sorted by length, longest first, before they are cut into batches: each batch
  pads to a near-equal length, so little compute goes to padding, and the batch that needs
  the most memory runs first, so an out-of-memory error shows in seconds rather than at the
  end of a long run. Outputs are put back in input order.
* Encoder inputs are padded on the right with an attention mask: an encoder reads the whole
  source at once, so the side does not matter to it, and right is what the models were
  trained with. (Left padding is for decoder-only models that continue a prompt; those are
  refused here.)
* `torch.inference_mode` (no autograd bookkeeping) and the KV cache.
* bf16 on GPUs that compute in it natively (T5 overflows in fp16), fp32 elsewhere: on CPUs
  bf16 is slow and changes results, and on GPUs older than Ampere it is only emulated.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

import torch

from llm_pipeline.errors import ModelLoadError, UserError

if TYPE_CHECKING:
    from transformers import (
        GenerationConfig,
        PreTrainedModel,
        PreTrainedTokenizerBase,
    )

__all__ = [
    "GENERATION_FIELDS",
    "Generated",
    "GenerationOptions",
    "GenerationSettings",
    "ModelLoadError",
    "build_generation_config",
    "default_device",
    "generate_summaries",
    "inference_dtype",
    "load_seq2seq",
    "native_bf16",
]

#: Generation settings a caller may lay over the model's own; unset (None) ones keep the model's.
GENERATION_FIELDS = (
    "max_new_tokens",
    "min_new_tokens",
    "num_beams",
    "length_penalty",
    "no_repeat_ngram_size",
)
_WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
_EXPECTED = "the finetune step's model folder (config.json, model.safetensors, tokenizer files)"


class GenerationOptions(Protocol):
    """What generation reads from its caller's settings (`EvaluateConfig` is one)."""

    @property
    def batch_size(self) -> int: ...
    @property
    def max_new_tokens(self) -> int | None: ...
    @property
    def min_new_tokens(self) -> int | None: ...
    @property
    def num_beams(self) -> int | None: ...
    @property
    def length_penalty(self) -> float | None: ...
    @property
    def no_repeat_ngram_size(self) -> int | None: ...


@dataclass(frozen=True)
class GenerationSettings:
    """Plain `GenerationOptions`; frozen, so equal settings group together (a dict key)."""

    batch_size: int = 16
    max_new_tokens: int | None = None
    min_new_tokens: int | None = None
    num_beams: int | None = None
    length_penalty: float | None = None
    no_repeat_ngram_size: int | None = None


@dataclass(frozen=True)
class Generated:
    """Generated texts (summaries, completions) in input order, with the tokens each took
    (end-of-sequence included)."""

    texts: list[str]
    token_counts: list[int]


def default_device() -> torch.device:
    """This process's GPU (torchrun's LOCAL_RANK picks it) or the CPU."""
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cpu")


#: The first CUDA compute capability with bf16 in its tensor cores (Ampere: A100 is 8.0, A10 and
#: L4 8.6/8.9, H100 9.0). T4 (7.5), V100 (7.0) and P100 (6.0) only emulate it.
NATIVE_BF16_CAPABILITY = 8


def native_bf16(device: torch.device | None = None) -> bool:
    """Whether `device` (default: this process's) is a GPU that computes in bf16 natively.

    Not `torch.cuda.is_bf16_supported()`: since torch 2.3 it defaults to
    `including_emulation=True` and answers True on T4 and V100, where bf16 runs as slow
    emulation, so "bf16 where supported" would pick it on exactly the GPUs that lack it. ROCm
    GPUs are taken at torch's word, as torch itself does.
    """
    if not torch.cuda.is_available():
        return False
    device = device or default_device()
    if device.type != "cuda":
        return False
    if torch.version.hip:
        return True
    index = device.index if device.index is not None else torch.cuda.current_device()
    return bool(torch.cuda.get_device_properties(index).major >= NATIVE_BF16_CAPABILITY)


def inference_dtype(device: torch.device) -> torch.dtype:
    """The dtype evaluation and serving run a model in on `device`: bf16 where native, else
    fp32 (never fp16, which T5's activations overflow)."""
    return torch.bfloat16 if native_bf16(device) else torch.float32


def load_seq2seq(
    model_dir: str | os.PathLike[str],
    *,
    device: torch.device | None = None,
    dtype: torch.dtype | None = None,
    error: type[UserError] = ModelLoadError,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The model (eval mode, on `device`) and tokenizer saved in `model_dir`.

    `dtype` defaults to `inference_dtype(device)`. Raises `error` (a caller's
    own UserError, so its step reports it) for a folder that is not a consolidated seq2seq
    checkpoint.
    """
    from transformers import AutoModelForSeq2SeqLM, EncoderDecoderModel

    folder = Path(model_dir)
    model_type = _check_seq2seq(folder, error)
    loader = EncoderDecoderModel if model_type == "encoder-decoder" else AutoModelForSeq2SeqLM
    return load_checked_folder(
        folder, loader, expected=_EXPECTED, device=device, dtype=dtype, error=error
    )


def load_checked_folder(
    folder: Path,
    loader: Any,
    *,
    expected: str,
    device: torch.device | None,
    dtype: torch.dtype | None,
    error: type[UserError],
    pad_token: bool = False,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """What every kind's loader does once it has checked that `folder` holds its kind: the
    weights are there (not just a DeepSpeed checkpoint), the tokenizer loads (with its EOS
    as pad token when `pad_token` and it has none), and `loader`'s model comes up in eval
    mode on `device`, in `dtype` (default `inference_dtype(device)`). Raises `error` naming
    what is missing and what was `expected`."""
    from transformers import AutoTokenizer

    from llm_pipeline.models.sources import ensure_pad_token

    check_weights(folder, error)
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder)
        if pad_token:
            ensure_pad_token(tokenizer)
    except (OSError, ValueError) as exc:
        raise error(
            f"model folder {folder}: no usable tokenizer files ({exc}); expected {expected}"
        ) from exc
    device = device or default_device()
    model = loader.from_pretrained(folder, dtype=dtype or inference_dtype(device))
    # transformers wraps `to` in a decorator that mypy misreads; the call itself is plain.
    cast(Any, model).to(device)
    model.eval()
    return model, tokenizer


def read_saved_config(folder: Path, error: type[UserError], *, expected: str) -> Any:
    """The transformers config of a saved model folder; `error` names what is wrong
    (no folder, no config.json, an unreadable one) and what was `expected`."""
    from transformers import AutoConfig

    if not (folder / "config.json").is_file():
        what = "no such folder" if not folder.is_dir() else "no config.json"
        raise error(f"model folder {folder}: {what}; expected {expected}")
    try:
        return AutoConfig.from_pretrained(folder)
    except (OSError, ValueError, KeyError) as exc:
        raise error(f"model folder {folder}: unreadable config.json ({exc})") from exc


def check_seq2seq_folder(folder: Path, error: type[UserError] = ModelLoadError) -> None:
    """Raise `error` unless `folder` holds a consolidated seq2seq checkpoint (what
    `load_seq2seq` checks before it loads; an engine's loader checks it too)."""
    _check_seq2seq(folder, error)
    check_weights(folder, error)


def _check_seq2seq(folder: Path, error: type[UserError]) -> str:
    """The folder's model_type, once it is known to be an encoder-decoder checkpoint."""
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES as SEQ2SEQ_TYPES,
    )

    config = read_saved_config(folder, error, expected=_EXPECTED)
    model_type = str(config.model_type)
    if model_type not in SEQ2SEQ_TYPES or not getattr(config, "is_encoder_decoder", False):
        kind = ", ".join(getattr(config, "architectures", None) or []) or model_type
        raise error(
            f"model folder {folder} holds a {kind} model (model_type {model_type!r}), not a "
            "seq2seq checkpoint: summaries need an encoder-decoder model such as T5, BART or an "
            "EncoderDecoderModel; give the finetune step's output folder"
        )
    return model_type


def check_weights(folder: Path, error: type[UserError]) -> None:
    if any((folder / name).is_file() for name in _WEIGHT_FILES):
        return
    if any(folder.glob("global_step*")) or (folder / "latest").is_file():
        # Not DeepSpeed's zero_to_fp32.py: it unpickles the shards (weights_only=False), so a
        # tampered file in a shared bucket would run code. The finetune step consolidates
        # with the engine (16-bit gather) into every checkpoint and the final model instead.
        raise error(
            f"model folder {folder} holds DeepSpeed ZeRO shards, not consolidated weights: "
            "give the finetune step's model folder, or a checkpoint-<step> folder of a full "
            "fine-tune (the finetune step writes consolidated model.safetensors into both). "
            "Do not run DeepSpeed's zero_to_fp32.py on shards you did not write yourself: it "
            "unpickles them, so a tampered file runs code"
        )
    raise error(f"model folder {folder}: no model weights; expected {_EXPECTED}")


def build_generation_config(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, config: GenerationOptions
) -> GenerationConfig:
    """The model's generation config with the settings `config` sets laid over it.

    Search is always deterministic (no sampling): a score must not change between runs, and
    a served summary must not change between calls.
    """
    generation = copy.deepcopy(model.generation_config)
    overrides = {
        name: getattr(config, name)
        for name in GENERATION_FIELDS
        if getattr(config, name) is not None
    }
    generation.update(**overrides, do_sample=False, use_cache=True)
    if generation.pad_token_id is None:
        generation.pad_token_id = tokenizer.pad_token_id
    return generation


def generate_summaries(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    input_ids: Sequence[Sequence[int]],
    *,
    config: GenerationOptions,
    should_stop: Callable[[], bool] | None = None,
) -> Generated:
    """Generate a summary for every token-id sequence, `config.batch_size` at a time, in
    input order. `should_stop` is asked at each decoding step: once it says True the call
    ends there (its texts are then unfinished; the server asks it, for abandoned batches)."""
    generation = build_generation_config(model, tokenizer, config)
    pad_id = generation.pad_token_id if generation.pad_token_id is not None else 0
    device = next(model.parameters()).device
    texts = [""] * len(input_ids)
    counts = [0] * len(input_ids)
    order = longest_first(input_ids)
    with torch.inference_mode():
        for start in range(0, len(order), config.batch_size):
            rows = order[start : start + config.batch_size]
            ids, mask = pad_right([input_ids[i] for i in rows], pad_id, device)
            # `generate` is mixed in per model class, so PreTrainedModel does not declare it.
            out = cast(Any, model).generate(
                input_ids=ids,
                attention_mask=mask,
                generation_config=generation,
                stopping_criteria=stop_when(should_stop),
            )
            # Column 0 is the decoder start token; finished rows are padded after their EOS.
            produced = (out[:, 1:] != pad_id).sum(dim=1).tolist()
            decoded = tokenizer.batch_decode(out, skip_special_tokens=True)
            for i, text, count in zip(rows, decoded, produced, strict=True):
                texts[i] = text.strip()
                counts[i] = int(count)
    return Generated(texts=texts, token_counts=counts)


def stop_when(should_stop: Callable[[], bool] | None) -> Any:
    """transformers' stopping criteria that end every row once `should_stop()` is True."""
    from transformers import StoppingCriteria, StoppingCriteriaList

    class _Asked(StoppingCriteria):
        def __call__(self, input_ids: torch.Tensor, scores: Any, **kwargs: Any) -> torch.Tensor:
            done = bool(should_stop is not None and should_stop())
            return torch.full(
                (input_ids.shape[0],), done, dtype=torch.bool, device=input_ids.device
            )

    return StoppingCriteriaList([_Asked()] if should_stop is not None else [])


def longest_first(input_ids: Sequence[Sequence[int]]) -> list[int]:
    """Indices of `input_ids`, longest sequence first; equal lengths keep input order."""
    # sorted() is stable with reverse=True too.
    return sorted(range(len(input_ids)), key=lambda i: len(input_ids[i]), reverse=True)


def pad_right(
    rows: Sequence[Sequence[int]], pad_id: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids padded on the right to the longest row, and the matching attention mask
    (how a model reads a batch it scores or encodes)."""
    return _pad(rows, pad_id, device, left=False)


def pad_left(
    rows: Sequence[Sequence[int]], pad_id: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids padded on the left to the longest row, and the matching attention mask
    (how a causal LM reads a batch of prompts it continues: every row ends in the last
    column)."""
    return _pad(rows, pad_id, device, left=True)


def _pad(
    rows: Sequence[Sequence[int]], pad_id: int, device: torch.device, *, left: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(row) for row in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        if not row:
            continue
        span = slice(width - len(row), width) if left else slice(0, len(row))
        ids[i, span] = torch.as_tensor(list(row), dtype=torch.long)
        mask[i, span] = 1
    return ids.to(device), mask.to(device)
