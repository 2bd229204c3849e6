"""Read a JSON config, apply `--set` overrides, and validate it into a PipelineConfig.

Every problem is collected and reported together (a user fixes a config in one pass),
each with its JSON path.
"""

import codecs
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from llm_pipeline.config import strict_json
from llm_pipeline.config.errors import ConfigError, problems_from
from llm_pipeline.config.flat_keys import FLAT_KEYS, get_path, map_flat_keys, set_path
from llm_pipeline.config.model import REGISTRY_SCHEME
from llm_pipeline.config.pipeline import PipelineConfig
from llm_pipeline.errors import JSONTooDeep
from llm_pipeline.storage import looks_like_path

#: Config values that are a local path or a hub id: a relative value is a path when it exists
#: or cannot be a hub id (`storage.looks_like_path`: ./, ../, or more than one /); paths are
#: taken from the config's folder (the working directory when given with --set).
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
    """`a.b=value` → ("a.b", value), the value parsed as JSON where it parses.

    Raises ValueError for a malformed override, and for a value that parses to a number
    that is not finite (`1e400`, `NaN`) or an object with a key given twice.
    """
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        raise ValueError(
            f"--set {text!r}: expected KEY=VALUE with a dotted key, e.g. train.epochs=3"
        )
    if "[" in key:
        listed = key.split("[", 1)[0]
        raise ValueError(
            f"--set {text!r}: --set replaces a list whole, not one element; give all of it, "
            f"e.g. {listed}='[...]'"
        )
    try:
        value = strict_json.loads(raw)
    except json.JSONDecodeError:
        return key, raw
    except JSONTooDeep as exc:
        raise ValueError(f"{key}: {exc}") from None
    problems = strict_json.problems(value, key)
    if problems:
        raise ValueError("; ".join(problems))
    return key, value


def _is_local(value: str) -> bool:
    return "://" not in value and not value.startswith(("package:", REGISTRY_SCHEME))


def _resolve(value: str, base: Path, *, hub_possible: bool) -> str | None:
    """An absolute path for a value that names a local path, else None (a hub id, a URL)."""
    if not _is_local(value):
        return None
    expanded = Path(value).expanduser()
    if expanded.is_absolute():
        return str(expanded)
    looks_local = looks_like_path(value) or (base / expanded).exists()
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


_NOT_FOUND = (
    "not found (relative paths are taken from the config file's folder, or the working "
    "directory for --set)"
)
_CHECKPOINT_FOLDER = "give the folder that holds config.json and the tokenizer files"


def _local_path(value: str | None, *, relative_ok: bool = False) -> Path | None:
    """The local path a config value names (resolved ones are absolute), else None."""
    if not value or not _is_local(value):
        return None
    path = Path(value).expanduser()
    return path if relative_ok or path.is_absolute() else None


def _path_problems(config: PipelineConfig) -> list[str]:
    """Local paths that a user named and that cannot serve: caught now, not hours in.

    The dataset and a DeepSpeed JSON must exist; any path that exists must be of its kind
    (a folder where a file is meant, or a file where a folder is, fails only once the step
    that uses it runs). Folders that are made when missing are judged only if they exist.
    """
    model, train, deploy = config.model, config.train, config.deploy
    pair = model.encoder_decoder
    must_exist = {
        "data.dataset": config.data.dataset,
        "train.deepspeed_config": train.deepspeed_config,
    }
    folders = {
        "model.source": (model.source, _CHECKPOINT_FOLDER),
        "model.tokenizer": (model.tokenizer, "give the folder that holds the tokenizer files"),
        "model.encoder_decoder.encoder": (pair.encoder if pair else None, _CHECKPOINT_FOLDER),
        "model.encoder_decoder.decoder": (pair.decoder if pair else None, _CHECKPOINT_FOLDER),
        "train.checkpoint_dir": (train.checkpoint_dir, "name a folder (made if missing)"),
        "train.nvme_path": (train.nvme_path, "name a folder on the NVMe disk"),
    }
    problems = []
    for dotted, value in must_exist.items():
        path = _local_path(value)
        if path is not None and not path.exists():
            problems.append(f"{dotted}: {value!r} {_NOT_FOUND}")
    deepspeed = _local_path(train.deepspeed_config)
    if deepspeed is not None and deepspeed.is_dir():
        problems.append(
            f"train.deepspeed_config: {train.deepspeed_config!r} is a folder; name the "
            "DeepSpeed JSON file"
        )
    if deploy.target == "local":
        folders["deploy.registry_dir"] = (deploy.registry_dir, "name a folder (made if missing)")
    for dotted, (value, hint) in folders.items():
        path = _local_path(value, relative_ok=dotted == "deploy.registry_dir")
        if path is not None and path.exists() and not path.is_dir():
            problems.append(f"{dotted}: {value!r} is a file, not a folder; {hint}")
    return problems


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError([f"config file {str(path)!r} not found"]) from None
    except IsADirectoryError:
        raise ConfigError([f"config file {str(path)!r} is a folder, not a JSON file"]) from None
    except OSError as exc:
        raise ConfigError([f"config file {str(path)!r} cannot be read: {exc.strerror}"]) from None
    text = _decode(data, path)
    try:
        raw = strict_json.loads(text)
    except json.JSONDecodeError as exc:
        where = f"not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        raise ConfigError([where + _json_hint(exc)], source=str(path)) from None
    except JSONTooDeep as exc:
        raise ConfigError([f"not a config: {exc}"], source=str(path)) from None
    if not isinstance(raw, dict):
        raise ConfigError(
            [f"the top level must be a JSON object, got {type(raw).__name__}"], source=str(path)
        )
    return raw


def _json_hint(exc: json.JSONDecodeError) -> str:
    """What a person writing JSON by hand most often meant, where the parser's own words
    (`Expecting property name enclosed in double quotes`) do not say it: a comment, or a
    comma before a closing bracket."""
    rest = exc.doc[exc.pos :].lstrip()
    if rest.startswith(("//", "/*", "#")):
        return " (JSON has no comments: say what a config is for in its description)"
    before = exc.doc[: exc.pos].rstrip()
    if before.endswith(",") and rest.startswith(("}", "]")):
        return " (JSON allows no comma after the last item)"
    return ""


def _decode(data: bytes, path: Path) -> str:
    """The file's text: JSON is UTF-8 (a UTF-8 byte-order mark, as some editors write, is
    allowed). Anything else is refused with the first byte that is not UTF-8 text."""
    body = data.removeprefix(codecs.BOM_UTF8)
    skipped = len(data) - len(body)
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        offset = exc.start
    else:
        # UTF-16 without a byte-order mark decodes as UTF-8 full of NULs, which JSON never holds.
        offset = body.find(b"\x00")
        if offset < 0:
            return text
    offset += skipped
    utf16 = data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)) or data[offset] == 0
    line = data.count(b"\n", 0, offset) + 1
    raise ConfigError(
        [
            f"config file {str(path)!r} is not UTF-8 text (byte 0x{data[offset]:02x} at line "
            f"{line}, offset {offset}{'; it looks like UTF-16' if utf16 else ''}); "
            "save it as UTF-8"
        ]
    )


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
    where = str(source) if source is not None else None
    # Checked before anything reads the values: a duplicated key or an infinite number is
    # not what the user meant, and validating it would only add a second message.
    content = strict_json.problems(raw)
    if content:
        raise ConfigError(content, source=where)
    base = source.resolve().parent if source is not None else Path.cwd()
    tree, mapped, problems = map_flat_keys(raw)
    _resolve_paths(tree, base, PATH_OR_HUB_KEYS + PATH_KEYS)
    overridden: dict[str, str] = {}  # dotted key -> the --set that gave it
    unparsed: list[str] = []  # the problems of a --set that does not parse, naming it
    not_json: dict[str, str] = {}  # dotted key -> why its value, written as JSON, is not
    for text in overrides:
        try:
            key, value = parse_override(text)
            dotted = FLAT_KEYS.get(key, key)
            set_path(tree, dotted, value)
            overridden[dotted] = text
            if (why := _json_mistake(value)) is not None:
                not_json[dotted] = why
            if dotted in PATH_OR_HUB_KEYS + PATH_KEYS:
                _resolve_paths(tree, Path.cwd(), [dotted])
        except ValueError as exc:
            message = str(exc)
            unparsed.append(
                message if message.startswith("--set") else f"{exc} (from --set {text})"
            )
            problems.append(unparsed[-1])
    notices = []
    if mapped:
        notices.append(
            "mapped the reference pipeline's flat keys onto sections: "
            + ", ".join(f"{key} → {FLAT_KEYS[key]}" for key in mapped)
        )
    try:
        config = PipelineConfig.model_validate(tree)
    except ValidationError as exc:
        found = problems_from(exc, PipelineConfig)
        problems.extend(_with_json_mistakes(found, not_json))
        raise _blamed(problems, where, overridden, unparsed) from None
    problems.extend(_path_problems(config))
    if problems:
        raise _blamed(problems, where, overridden, unparsed)
    return LoadedConfig(config=config, path=source, notices=tuple(notices))


def _json_mistake(value: Any) -> str | None:
    """Why a `--set` value that opens as a JSON object or list does not parse as one (it is
    then taken as a string), else None."""
    if not isinstance(value, str) or not value.lstrip().startswith(("{", "[")):
        return None
    try:
        strict_json.loads(value)
    except json.JSONDecodeError as exc:
        return f"not valid JSON at column {exc.colno}: {exc.msg}{_json_hint(exc)}"
    except JSONTooDeep as exc:
        return str(exc)
    return None


def _with_json_mistakes(problems: list[str], not_json: dict[str, str]) -> list[str]:
    """A wrong type at a key whose `--set` value was meant as JSON and did not parse, told
    why: `must be an object, got '{"train": 200'` alone hides the missing brace."""
    marked = []
    for problem in problems:
        path = problem.split(":", 1)[0]
        if path in not_json and problem.startswith(f"{path}: must be "):
            problem = f"{problem} ({not_json[path]})"
        marked.append(problem)
    return marked


def _blamed(
    problems: list[str], where: str | None, overridden: dict[str, str], unparsed: list[str]
) -> ConfigError:
    """The error, each problem that a `--set` caused said to come from it (and the error
    from `--set` when all did), so a user looks where the mistake is, not in the file.
    `unparsed` are the problems of overrides that did not parse, which name theirs."""
    marked, from_set, with_set = [], 0, 0
    for problem in problems:
        if problem in unparsed:
            from_set += 1
        elif (given := _override_of(problem, overridden, below=False)) is not None:
            problem, from_set = f"{problem} (from --set {given})", from_set + 1
        elif (given := _override_of(problem, overridden, below=True)) is not None:
            problem, with_set = f"{problem} (after --set {given})", with_set + 1
        marked.append(problem)
    if where is None or from_set == len(marked):
        source = "--set" if from_set == len(marked) else where
    elif from_set or with_set:
        source = f"{where} with --set"
    else:
        source = where
    return ConfigError(marked, source=source)


def _override_of(problem: str, overridden: dict[str, str], *, below: bool) -> str | None:
    """The `--set` that gave the key a problem names (`train.epochs: ...`), or one of its
    keys; with `below`, one that gave a key under the section the problem names
    (`model: set exactly one of ...` after `--set model.source=...`). None if no --set did."""
    path = problem.split(":", 1)[0]
    if " " in path:
        return None
    for key, text in overridden.items():
        if below and key.startswith(f"{path}."):
            return text
        if not below and (path == key or path.startswith((f"{key}.", f"{key}["))):
            return text
    return None
