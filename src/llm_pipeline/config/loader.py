"""Read a JSON config, apply `--set` overrides, and validate it into a PipelineConfig.

Every problem is collected and reported together (a user fixes a config in one pass),
each with its JSON path.
"""

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from llm_pipeline.config.errors import ConfigError, problems_from
from llm_pipeline.config.flat_keys import FLAT_KEYS, get_path, map_flat_keys, set_path
from llm_pipeline.config.pipeline import PipelineConfig

#: Config values that are a local path or a hub id: a relative value is a path when it starts
#: with ./ or ../ or exists; paths are taken from the config's folder (the working directory
#: when given with --set).
PATH_OR_HUB_KEYS = (
    "data.dataset",
    "model.source",
    "model.tokenizer",
    "model.encoder_decoder.encoder",
    "model.encoder_decoder.decoder",
)
#: Config values that can only be paths (or URLs).
PATH_KEYS = ("train.deepspeed_config", "train.checkpoint_dir")


@dataclass(frozen=True)
class LoadedConfig:
    """A validated config with where it came from and what the loader had to say."""

    config: PipelineConfig
    path: Path | None = None
    notices: tuple[str, ...] = field(default_factory=tuple)


def parse_override(text: str) -> tuple[str, Any]:
    """`a.b=value` → ("a.b", value), the value parsed as JSON where it parses."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        raise ValueError(
            f"--set {text!r}: expected KEY=VALUE with a dotted key, e.g. train.epochs=3"
        )
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return key, value


def _is_local(value: str) -> bool:
    return "://" not in value and not value.startswith("package:")


def _resolve(value: str, base: Path, *, hub_possible: bool) -> str | None:
    """An absolute path for a value that names a local path, else None (a hub id, a URL)."""
    if not _is_local(value):
        return None
    expanded = Path(value).expanduser()
    if expanded.is_absolute():
        return str(expanded)
    looks_local = value.startswith(("./", "../")) or (base / expanded).exists()
    if hub_possible and not looks_local:
        return None
    return str((base / expanded).resolve())


def _resolve_paths(tree: dict[str, Any], base: Path, keys: Iterable[str]) -> None:
    for dotted in keys:
        try:
            value = get_path(tree, dotted)
        except KeyError:
            continue
        if not isinstance(value, str):
            continue
        resolved = _resolve(value, base, hub_possible=dotted in PATH_OR_HUB_KEYS)
        if resolved is not None:
            set_path(tree, dotted, resolved)


def _missing_files(config: PipelineConfig) -> list[str]:
    """Local paths that a user named and that do not exist: caught now, not hours in."""
    problems = []
    checks = {
        "data.dataset": config.data.dataset,
        "train.deepspeed_config": config.train.deepspeed_config,
    }
    for dotted, value in checks.items():
        if value and _is_local(value) and Path(value).is_absolute() and not Path(value).exists():
            problems.append(
                f"{dotted}: {value!r} not found (relative paths are taken from the config "
                "file's folder, or the working directory for --set)"
            )
    return problems


def _read_json(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError([f"config file {str(path)!r} not found"]) from None
    except OSError as exc:
        raise ConfigError([f"config file {str(path)!r} cannot be read: {exc.strerror}"]) from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            [f"not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"],
            source=str(path),
        ) from None
    if not isinstance(raw, dict):
        raise ConfigError(
            [f"the top level must be a JSON object, got {type(raw).__name__}"], source=str(path)
        )
    return raw


def load_config(
    path: str | os.PathLike[str] | None = None,
    overrides: Sequence[str] = (),
    *,
    raw: dict[str, Any] | None = None,
) -> LoadedConfig:
    """Validate the config at `path` (or the `raw` dict) with `--set` overrides applied.

    Raises ConfigError listing every problem.
    """
    source = Path(path) if path is not None else None
    if raw is None:
        if source is None:
            raise ValueError("load_config needs a path or a raw dict")
        raw = _read_json(source)
    base = source.resolve().parent if source is not None else Path.cwd()
    tree, mapped, problems = map_flat_keys(raw)
    _resolve_paths(tree, base, PATH_OR_HUB_KEYS + PATH_KEYS)
    for text in overrides:
        try:
            key, value = parse_override(text)
            dotted = FLAT_KEYS.get(key, key)
            set_path(tree, dotted, value)
            if dotted in PATH_OR_HUB_KEYS + PATH_KEYS:
                _resolve_paths(tree, Path.cwd(), [dotted])
        except ValueError as exc:
            problems.append(str(exc))
    notices = []
    if mapped:
        notices.append(
            "mapped the reference pipeline's flat keys onto sections: "
            + ", ".join(f"{key} → {FLAT_KEYS[key]}" for key in mapped)
        )
    try:
        config = PipelineConfig.model_validate(tree)
    except ValidationError as exc:
        problems.extend(problems_from(exc, PipelineConfig))
        raise ConfigError(problems, source=str(source) if source else None) from None
    problems.extend(_missing_files(config))
    if problems:
        raise ConfigError(problems, source=str(source) if source else None)
    return LoadedConfig(config=config, path=source, notices=tuple(notices))
