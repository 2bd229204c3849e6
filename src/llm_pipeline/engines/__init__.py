"""Serving engines: which one generates a model's texts (`choice`), its converted form
(`ctranslate2_form`), and generating with it as transformers would (`ctranslate2_run`).

The evaluate step and the prediction server both go through `engine_for` and
`load_generator`, so the gate scores what the endpoint serves.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from llm_pipeline.engines.choice import (
    COMPUTE_TYPES,
    ENGINE_NAMES,
    EngineChoice,
    ModelShape,
    choose_engine,
)
from llm_pipeline.errors import ModelLoadError, UserError

__all__ = [
    "COMPUTE_TYPES",
    "ENGINE_NAMES",
    "EngineChoice",
    "ModelShape",
    "choose_engine",
    "engine_for",
    "load_generator",
]


def engine_for(
    model_dir: str | os.PathLike[str],
    *,
    generates: bool,
    requested: str = "auto",
    compute_type: str = "auto",
    gpu: bool = False,
    accelerator_type: str | None = None,
    gpu_bf16: bool | None = None,
) -> EngineChoice:
    """The engine for the model saved in `model_dir` (its config.json decides), served on a
    GPU or a CPU. Raises ValueError, naming the setting, where the requested engine cannot
    take the model. A folder without a readable config.json gets transformers, whose loader
    then says what is wrong with it."""
    try:
        config = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return EngineChoice("transformers", None, "the model folder has no readable config.json")
    if not isinstance(config, dict):
        return EngineChoice("transformers", None, "the model folder's config.json is no object")
    convertible = None
    if generates and requested in ("auto", "ctranslate2"):
        from llm_pipeline.engines.ctranslate2_form import unsupported_reason

        convertible = unsupported_reason(config)
    return choose_engine(
        ModelShape.of_config(config, generates=generates),
        requested=requested,
        compute_type=compute_type,
        gpu=gpu,
        accelerator_type=accelerator_type,
        gpu_bf16=gpu_bf16,
        convertible=convertible,
    )


def load_generator(
    model_dir: str | os.PathLike[str],
    choice: EngineChoice,
    *,
    seq2seq: bool,
    device: str = "cpu",
    tokenizer: Any = None,
    error: type[UserError] = ModelLoadError,
) -> Any:
    """The CTranslate2 generator for `model_dir` (converted and checked first, if its form
    is not there yet): a `Ct2Summarizer` for a seq2seq model (`seq2seq`), a `Ct2Completer`
    for a causal LM. The folder is checked to hold that kind first, as transformers' loaders
    check it, and `error` (the caller's own) says what is wrong. Only for a `ctranslate2`
    choice; transformers generates with the loaded model."""
    from llm_pipeline.engines.ctranslate2_form import ensure_form
    from llm_pipeline.engines.ctranslate2_run import Ct2Completer, Ct2Summarizer
    from llm_pipeline.models.completion import check_causal_folder
    from llm_pipeline.models.generation import check_seq2seq_folder

    if choice.engine != "ctranslate2" or choice.compute_type is None:
        raise ValueError(f"no generator to load for engine {choice.describe()}")
    folder = Path(model_dir)
    (check_seq2seq_folder if seq2seq else check_causal_folder)(folder, error)
    form = ensure_form(folder, choice.compute_type, error=error)
    kind = Ct2Summarizer if seq2seq else Ct2Completer
    return kind(
        model_dir, form, compute_type=choice.compute_type, device=device, tokenizer=tokenizer
    )
