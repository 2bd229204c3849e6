"""The config reference (README, `pipeline.py --help-config`), generated from the models
so the documentation cannot drift from the code."""

import json
import types
import typing
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from llm_pipeline.config.errors import submodel
from llm_pipeline.config.pipeline import PipelineConfig


def _type_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return " \\| ".join(json.dumps(arg) for arg in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        return " \\| ".join(_type_name(arg) for arg in typing.get_args(annotation))
    if origin is dict:
        return "object"
    if annotation is type(None):
        return "null"
    if isinstance(annotation, type):
        names = {str: "string", int: "integer", float: "number", bool: "boolean"}
        return names.get(annotation, "object")
    return str(annotation)


def _default(info: FieldInfo) -> str:
    if info.default is PydanticUndefined and info.default_factory is None:
        return "**required**"
    value = info.get_default(call_default_factory=True)
    if isinstance(value, BaseModel):
        return "see below"
    return f"`{json.dumps(value)}`"


def _table(model: type[BaseModel], prefix: str, out: list[str]) -> None:
    nested: list[tuple[str, type[BaseModel]]] = []
    rows = ["| key | type | default | description |", "|---|---|---|---|"]
    for name, info in model.model_fields.items():
        sub = submodel(info.annotation)
        key = f"{prefix}{name}"
        if sub is not None:
            nested.append((key, sub))
        description = (info.description or "").replace("|", "\\|").replace("\n", " ")
        type_name = "object" if sub is not None else _type_name(info.annotation)
        rows.append(f"| `{key}` | {type_name} | {_default(info)} | {description} |")
    out.extend([f"### `{prefix.rstrip('.') or 'top level'}`", "", *rows, ""])
    for key, sub in nested:
        _table(sub, f"{key}.", out)


def config_reference_markdown() -> str:
    """Markdown tables of every config key: type, default and description."""
    out: list[str] = []
    _table(PipelineConfig, "", out)
    return "\n".join(out).rstrip() + "\n"
