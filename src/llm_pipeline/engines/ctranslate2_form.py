"""A model folder converted into CTranslate2's form, once, checked against transformers.

The form lives inside the model folder (`engine/ctranslate2-<compute type>/`), so it
travels with the folder: the registry copies it with the version, the server copies it down
from `gs://` with the weights. It is made in a hidden folder beside it and renamed into
place, so a process killed while converting leaves nothing that is taken for a form; a form
made from other weights (a folder rewritten since) is made anew.

Why not CTranslate2's converter as it is: two things it gets wrong for this project's models.

* **T5 v1.1 / Flan-T5 under transformers 5.** The converter scales the decoder's outputs by
  d_model^-0.5 when `config.tie_word_embeddings` is set, which is how T5 v1.1 configs said
  "do not scale" until transformers 5 forced the flag true for every T5 and moved the answer
  to `config.scale_decoder_outputs`. Converted as is, those models' scores are wrong by up to
  hundreds (greedy text is unchanged, so only beam search, sampling and scores show it).
  Here the scaling follows what transformers itself does.
* **Special tokens from the tokenizer alone.** A tokenizer without `eos_token` (MiniLM's
  WordPiece ends texts with `[SEP]`, which the model's config names as its EOS id) gave a
  form CTranslate2 cannot load. Here the model's own ids decide, the tokenizer's names
  where the model says nothing.

Every form is checked before it is used: the log-probabilities of fixed targets under the
form (converted in float32) against transformers' in float32, within `SCORE_TOLERANCE`. A
quantized form (int8) is converted again from the same weights after the float32 form
passed; what quantization changes is measured on the evaluation's rows by the evaluate
step, beside transformers' float32 scores.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from llm_pipeline.errors import ModelLoadError, UserError, first_line
from llm_pipeline.storage import fsync_dir, write_atomic

logger = logging.getLogger(__name__)

#: The folder, inside a model folder, that holds its engines' forms.
ENGINE_FOLDER = "engine"
#: The record each form keeps of how it was made and checked.
FORM_RECORD = "form.json"
#: Largest difference allowed between a float32 form's log-probabilities of the fixed
#: targets and transformers' (both float32; relative below -1): summing in another order
#: moves them by ~1e-6.
SCORE_TOLERANCE = 1e-4
#: Texts the check scores; each is a source and, shifted, a target.
_CHECK_TEXTS = (
    "Return the number of items in a container.",
    "The quick brown fox jumps over the lazy dog, twice.",
    "Open a file and return a stream; raise OSError on failure.",
)
_WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")
#: Chunks of each weight file hashed for its stamp, and their size in bytes.
_STAMP_SAMPLES, _STAMP_CHUNK = 16, 1 << 16


class EngineFormError(ModelLoadError):
    """The model cannot be converted, or its converted form does not score as it does."""


def form_dir(model_dir: str | os.PathLike[str], compute_type: str) -> Path:
    """Where the form of `model_dir` in `compute_type` lives."""
    return Path(model_dir) / ENGINE_FOLDER / f"ctranslate2-{compute_type}"


def unsupported_reason(config: dict[str, Any]) -> str | None:
    """Why CTranslate2 cannot convert the model whose config.json is `config`, or None.

    CTranslate2 registers one converter per config class, each for one architecture: a
    BERT config converts as an encoder, so the demos' BERT decoder (`BertLMHeadModel`) and
    warm-started `EncoderDecoderModel` are not taken. Without the package (the `serving`
    extra) it takes nothing."""
    try:
        from ctranslate2.converters.transformers import _MODEL_LOADERS
    except ImportError:
        return "ctranslate2 is not installed (pip install 'llm-pipeline[serving]')"
    from transformers import AutoConfig

    model_type = str(config.get("model_type", ""))
    architectures = config.get("architectures") or []
    architecture = str(architectures[0]) if architectures else model_type
    try:
        config_class = AutoConfig.for_model(model_type).__class__.__name__
    except ValueError:
        return f"model_type {model_type!r} is not one transformers knows"
    loader = _MODEL_LOADERS.get(config_class)
    if loader is None:
        return f"it has no converter for {architecture} ({config_class})"
    if loader.architecture_name != architecture:
        return f"its {config_class} converter takes {loader.architecture_name}, not {architecture}"
    return None


def ensure_form(
    model_dir: str | os.PathLike[str],
    compute_type: str,
    *,
    error: type[UserError] = EngineFormError,
) -> Path:
    """The checked CTranslate2 form of `model_dir` in `compute_type`, made now if it is not
    there (or was made from other weights). Raises `error` with one line naming the
    architecture when it cannot be converted, or the difference when its scores are off."""
    folder = Path(model_dir)
    target = form_dir(folder, compute_type)
    source = _weights_stamp(folder)
    record = _read_record(target)
    if record is not None and record.get("source") == source:
        return target
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    reason = unsupported_reason(config)
    if reason is not None:
        raise error(f"model folder {folder}: CTranslate2 cannot take this model: {reason}")
    started = time.monotonic()
    staging = folder / ENGINE_FOLDER / f".staging-{uuid.uuid4().hex[:12]}"
    staging.parent.mkdir(parents=True, exist_ok=True)
    try:
        checked = staging / "float32"
        _convert(folder, checked, "float32", error)
        difference = score_difference(folder, checked)
        if not difference <= SCORE_TOLERANCE:  # a NaN fails too
            raise error(
                f"model folder {folder}: its CTranslate2 form scores fixed targets "
                f"{difference:.3g} away from transformers (tolerance {SCORE_TOLERANCE:g}); "
                "the conversion is wrong for this architecture: serve it with "
                "deploy.engine 'transformers'"
            )
        made = checked
        if compute_type != "float32":
            made = staging / compute_type
            _convert(folder, made, compute_type, error)
        write_atomic(
            made / FORM_RECORD,
            json.dumps(
                {
                    "engine": "ctranslate2",
                    "compute_type": compute_type,
                    "architecture": (config.get("architectures") or [""])[0],
                    "source": source,
                    "float32_score_difference": difference,
                    "tolerance": SCORE_TOLERANCE,
                    "ctranslate2": _ct2_version(),
                },
                indent=2,
            ),
        )
        _put_in_place(made, target, source)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    size = sum(path.stat().st_size for path in target.rglob("*") if path.is_file())
    logger.info(
        "converted %s to CTranslate2 %s in %.1f s (%.1f MB; float32 scores within %.2g of "
        "transformers')",
        folder,
        compute_type,
        time.monotonic() - started,
        size / 1e6,
        difference,
    )
    return target


def _put_in_place(made: Path, target: Path, source: str) -> None:
    """Rename `made` to `target`, unless another process has put a form of the same weights
    there meanwhile (then `made` is dropped with the staging folder); a stale form there is
    renamed away first, so that no reader ever sees half of one."""
    current = _read_record(target)
    if current is not None and current.get("source") == source:
        return
    if target.exists():
        stale = target.parent / f".stale-{uuid.uuid4().hex[:12]}"
        os.rename(target, stale)
        shutil.rmtree(stale, ignore_errors=True)
    try:
        os.rename(made, target)
    except OSError:  # another process renamed its own form in first
        if _read_record(target) is None:
            raise
    fsync_dir(target.parent)


def _convert(folder: Path, out: Path, quantization: str, error: type[UserError]) -> None:
    try:
        converter = _converter_class()(str(folder))
        converter.convert(str(out), quantization=quantization, force=True)
    except Exception as exc:  # unreadable weights too: one line, not a traceback
        raise error(
            f"model folder {folder}: CTranslate2 cannot convert it: "
            f"{first_line(exc, with_type=True)}"
        ) from None


def score_difference(model_dir: Path, form: Path) -> float:
    """Largest difference (`_max_difference`) between the log-probabilities transformers
    (float32, CPU) and the CTranslate2 form (on the CPU) give the same fixed targets."""
    import ctranslate2
    import torch
    from transformers import AutoConfig, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    config = AutoConfig.from_pretrained(model_dir)
    texts = [tokenizer(text)["input_ids"] for text in _CHECK_TEXTS]
    worst = 0.0
    if getattr(config, "is_encoder_decoder", False):
        from transformers import AutoModelForSeq2SeqLM

        model = AutoModelForSeq2SeqLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        eos = _eos_id(model, tokenizer)
        targets = [
            [*tokenizer(text, add_special_tokens=False)["input_ids"][:12], eos]
            for text in reversed(_CHECK_TEXTS)
        ]
        translator = ctranslate2.Translator(str(form), device="cpu", compute_type="float32")
        scored = translator.score_batch(_tokens(tokenizer, texts), _tokens(tokenizer, targets))
        for source, target, result in zip(texts, targets, scored, strict=True):
            with torch.no_grad():
                logits = model(
                    input_ids=torch.tensor([source]), labels=torch.tensor([target])
                ).logits
            expected = _gathered(logits[0], target)
            worst = max(worst, _max_difference(expected, result.log_probs[: len(target)]))
        return worst
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    generator = ctranslate2.Generator(str(form), device="cpu", compute_type="float32")
    scored = generator.score_batch(_tokens(tokenizer, texts))
    for ids, result in zip(texts, scored, strict=True):
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids])).logits
        expected = _gathered(logits[0, :-1], ids[1:])
        worst = max(worst, _max_difference(expected, result.log_probs))
    return worst


def _gathered(logits: Any, target: Sequence[int]) -> list[float]:
    import torch

    log_probs = torch.log_softmax(logits.float(), dim=-1)
    return log_probs[torch.arange(len(target)), torch.tensor(list(target))].tolist()


def _max_difference(expected: Sequence[float], got: Sequence[float]) -> float:
    """The largest difference, relative where a log-probability is below -1 (float32 holds
    about seven digits: a random model's -200 differs by ~1e-3 between two correct sums)."""
    if len(expected) != len(got):
        return float("inf")
    return max(
        (abs(a - b) / max(1.0, abs(a)) for a, b in zip(expected, got, strict=True)), default=0.0
    )


def _tokens(tokenizer: Any, rows: Sequence[Sequence[int]]) -> list[list[str]]:
    return [list(tokenizer.convert_ids_to_tokens(list(row))) for row in rows]


def _eos_id(model: Any, tokenizer: Any) -> int:
    eos = model.generation_config.eos_token_id
    if eos is None:
        eos = model.config.eos_token_id
    if isinstance(eos, list):
        eos = eos[0] if eos else None
    if eos is None:
        eos = (
            tokenizer.eos_token_id if tokenizer.eos_token_id is not None else tokenizer.sep_token_id
        )
    return int(eos)


def _weights_stamp(folder: Path) -> str:
    """What tells these weights from others: each weight file's name, size and a hash of
    `_STAMP_SAMPLES` chunks spread over it. Not the modification time, which a copy (the
    registry's, a download from gs://) changes; not a hash of every byte, which would read
    a 70B model's 140 GB at each server start."""
    parts = []
    names = list(_WEIGHT_FILES) + sorted(p.name for p in folder.glob("model-*.safetensors"))
    for name in names:
        path = folder / name
        if not path.is_file():
            continue
        size = path.stat().st_size
        digest = hashlib.sha256()
        with path.open("rb") as weights:
            for index in range(_STAMP_SAMPLES):
                weights.seek(size * index // _STAMP_SAMPLES)
                digest.update(weights.read(_STAMP_CHUNK))
        parts.append(f"{name}:{size}:{digest.hexdigest()[:16]}")
    return ";".join(parts)


def _read_record(target: Path) -> dict[str, Any] | None:
    try:
        record = json.loads((target / FORM_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not (target / "model.bin").is_file():
        return None
    return record if isinstance(record, dict) else None


def _ct2_version() -> str:
    import ctranslate2

    return str(ctranslate2.__version__)


def _fix_spec(spec: Any, model: Any, tokenizer: Any) -> None:
    """Correct what CTranslate2's converter gets wrong for these models (module docstring)."""
    from ctranslate2.specs import model_spec

    config = model.config
    if str(getattr(config, "model_type", "")) in ("t5", "mt5", "umt5"):
        scale = getattr(config, "scale_decoder_outputs", config.tie_word_embeddings)
        spec.decoder.scale_outputs = config.d_model**-0.5 if scale else model_spec.OPTIONAL
    names = spec.config
    eos = _eos_id(model, tokenizer)
    names.eos_token = tokenizer.convert_ids_to_tokens(eos)
    if getattr(names, "unk_token", None) is None:
        names.unk_token = tokenizer.unk_token or names.eos_token
    if getattr(names, "bos_token", None) is None:
        bos = config.bos_token_id
        names.bos_token = (
            tokenizer.convert_ids_to_tokens(bos) if bos is not None else names.eos_token
        )
    start = getattr(config, "decoder_start_token_id", None)
    if hasattr(names, "decoder_start_token") and start is not None:
        names.decoder_start_token = tokenizer.convert_ids_to_tokens(start)


def _converter_class() -> Any:
    from ctranslate2.converters import TransformersConverter

    class Converter(TransformersConverter):
        """CTranslate2's converter, its spec corrected (`_fix_spec`) before it is saved."""

        def load_model(self, model_class: Any, model_name_or_path: str, **kwargs: Any) -> Any:
            self.loaded_model = super().load_model(model_class, model_name_or_path, **kwargs)
            return self.loaded_model

        def load_tokenizer(
            self, tokenizer_class: Any, model_name_or_path: str, **kwargs: Any
        ) -> Any:
            self.loaded_tokenizer = super().load_tokenizer(
                tokenizer_class, model_name_or_path, **kwargs
            )
            return self.loaded_tokenizer

        def _load(self) -> Any:
            spec = super()._load()
            _fix_spec(spec, self.loaded_model, self.loaded_tokenizer)
            return spec

    return Converter
