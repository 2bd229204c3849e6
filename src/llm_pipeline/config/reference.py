"""The config reference (README, `pipeline.py --help-config`), generated from the models
so the documentation cannot drift from the code: Markdown tables for the README, plain
text wrapped to the terminal, one section at a time, for `--help-config`."""

import json
import textwrap
import types
import typing
from collections.abc import Iterator
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


#: What the reference calls the keys outside any section.
TOP_LEVEL = "top level"


def _sections(
    model: type[BaseModel] = PipelineConfig, prefix: str = ""
) -> Iterator[tuple[str, list[tuple[str, FieldInfo, bool]]]]:
    """Each section's name and its keys (dotted key, field, whether it is a section), the
    top level first, each section followed by those nested in it."""
    keys = [
        (f"{prefix}{name}", info, submodel(info.annotation) is not None)
        for name, info in model.model_fields.items()
    ]
    yield prefix.rstrip(".") or TOP_LEVEL, keys
    for key, info, _ in keys:
        if (sub := submodel(info.annotation)) is not None:
            yield from _sections(sub, f"{key}.")


def section_names() -> list[str]:
    """Every section `--help-config SECTION` takes (`data`, `model.encoder_decoder`, ...)."""
    return [name for name, _ in _sections() if name != TOP_LEVEL]


def config_reference_markdown() -> str:
    """Markdown tables of every config key: type, default and description."""
    out: list[str] = []
    for section, keys in _sections():
        rows = ["| key | type | default | description |", "|---|---|---|---|"]
        for key, info, nested in keys:
            description = (info.description or "").replace("|", "\\|").replace("\n", " ")
            type_name = "object" if nested else _type_name(info.annotation)
            rows.append(f"| `{key}` | {type_name} | {_default(info)} | {description} |")
        out.extend([f"### `{section}`", "", *rows, ""])
    return "\n".join(out).rstrip() + "\n"


def config_reference_text(section: str | None, width: int) -> str:
    """One section's keys as text wrapped to `width` columns: `section` and the sections
    nested in it, or with None the top-level keys and the list of sections. ValueError
    naming the sections for one that does not exist."""
    names = section_names()
    if section is not None and section not in names:
        raise ValueError(f"no config section {section!r}; sections: {', '.join(names)}")
    shown = section or TOP_LEVEL
    out: list[str] = []
    for name, keys in _sections():
        if name != shown and not (section and name.startswith(f"{section}.")):
            continue
        out.append(f"{name}:" if name == TOP_LEVEL else f"{name} (--set {name}.KEY=VALUE):")
        for key, info, nested in keys:
            if nested:
                head = f"{key}  (a section: --help-config {key})"
            else:
                type_name = _type_name(info.annotation).replace(" \\| ", " | ")
                default = _default(info).strip("`*")
                default = default if default == "required" else f"default {default}"
                head = f"{key}  ({type_name}; {default})"
            out.append(textwrap.fill(head, width, initial_indent="  ", subsequent_indent="      "))
            if info.description:
                out.append(_wrapped(info.description, width))
        out.append("")
    if section is None:
        sections = f"Sections: {', '.join(names)}."
        out += [textwrap.fill(sections, width), "One section: pipeline.py --help-config SECTION"]
    return "\n".join(out).rstrip() + "\n"


def _wrapped(text: str, width: int) -> str:
    return textwrap.fill(
        " ".join(text.split()), width, initial_indent="      ", subsequent_indent="      "
    )
