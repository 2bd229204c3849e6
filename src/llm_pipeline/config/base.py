"""The base every config section shares (strict types, unknown keys refused), and how code
that walks the config models tells a section from a plain value."""

import types
import typing
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, ValidationError


class Section(BaseModel):
    """A config section.

    `extra="forbid"` makes a typo fail loudly instead of being silently ignored, and
    `strict=True` keeps JSON's types honest: `"epochs": "3"` is an error, not a guess.
    """

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        validate_default=True,
        use_attribute_docstrings=False,
    )

    @classmethod
    def from_component(cls, value: str | dict[str, Any]) -> "Self":
        """Re-validate a section handed to a KFP component.

        Components take sections as JSON text: a KFP `dict` parameter travels as a protobuf
        Struct, which cannot hold null and turns every number into a double (`1` → `1.0`).
        A dict is accepted too (lax, for the same reason) for callers that pass one.
        """
        try:
            if isinstance(value, str):
                return cls.model_validate_json(value)
            return cls.model_validate(value, strict=False)
        except ValidationError as exc:
            # Here, not at the top: errors.py reads `submodel` from this module.
            from llm_pipeline.config.errors import ConfigError, problems_from

            raise ConfigError(problems_from(exc, cls), source=cls.__name__) from None


def submodel(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside an annotation such as `X` or `X | None`, else None.

    The config reference nests a table for it and error messages look up its keys for
    "did you mean", so both must agree on which fields are sections.
    """
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            found = submodel(arg)
            if found is not None:
                return found
    return None
