"""What a field's annotation says about its value, for code that walks the config models."""

import types
import typing
from typing import Any

from pydantic import BaseModel


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
