"""The base every config section shares: strict types, unknown keys refused, and a section
handed to a component validated again with the config's own messages."""

from typing import Any, Self

from pydantic import BaseModel, ConfigDict, ValidationError

from llm_pipeline.config.errors import ConfigError, problems_from


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
            raise ConfigError(problems_from(exc, cls), source=cls.__name__) from None
