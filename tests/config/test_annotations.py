"""The one helper that finds a section model in a field's annotation."""

from typing import Any

from llm_pipeline.config import EncoderDecoderSource, ModelConfig, PipelineConfig
from llm_pipeline.config.errors import submodel


def test_a_section_is_found_bare_or_optional() -> None:
    assert submodel(PipelineConfig.model_fields["model"].annotation) is ModelConfig
    assert submodel(ModelConfig.model_fields["encoder_decoder"].annotation) is EncoderDecoderSource
    assert submodel(EncoderDecoderSource | None) is EncoderDecoderSource


def test_plain_values_are_not_sections() -> None:
    for annotation in (
        str,
        int | None,
        dict[str, Any] | None,
        ModelConfig.model_fields["source"].annotation,
    ):
        assert submodel(annotation) is None
