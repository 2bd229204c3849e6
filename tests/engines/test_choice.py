"""Which engine `deploy.engine: auto` picks, and what it refuses, from a model's config."""

import pytest

from llm_pipeline.config import DeployConfig
from llm_pipeline.engines import EngineChoice, ModelShape, choose_engine

T5 = ModelShape("t5", "T5ForConditionalGeneration", is_encoder_decoder=True, generates=True)
LLAMA = ModelShape("llama", "LlamaForCausalLM", is_encoder_decoder=False, generates=True)
CLASSIFIER = ModelShape("bert", "BertForSequenceClassification", False, generates=False)


@pytest.mark.parametrize(
    ("shape", "where", "expected"),
    [
        (T5, {}, ("ctranslate2", "int8")),
        (LLAMA, {}, ("ctranslate2", "int8")),
        (T5, {"gpu": True, "accelerator_type": "NVIDIA_A100_80GB"}, ("ctranslate2", "bfloat16")),
        (LLAMA, {"gpu": True, "accelerator_type": "NVIDIA_L4"}, ("ctranslate2", "bfloat16")),
        # A T4 only emulates bf16: a decoder in fp16, a T5 (which overflows fp16) in fp32.
        (LLAMA, {"gpu": True, "accelerator_type": "NVIDIA_TESLA_T4"}, ("ctranslate2", "float16")),
        (T5, {"gpu": True, "accelerator_type": "NVIDIA_TESLA_T4"}, ("ctranslate2", "float32")),
        (CLASSIFIER, {}, ("transformers", None)),
    ],
)
def test_auto_picks_the_engine_and_precision_for_the_model_and_machine(
    shape: ModelShape, where: dict, expected: tuple
) -> None:
    chosen = choose_engine(shape, **where)
    assert (chosen.engine, chosen.compute_type) == expected
    assert chosen.reason


def test_a_decoder_on_a_gpu_says_vllm_is_not_built_yet() -> None:
    chosen = choose_engine(LLAMA, gpu=True)
    assert chosen.engine == "ctranslate2"
    assert "vLLM" in chosen.reason


def test_an_architecture_ctranslate2_cannot_take_falls_back_or_is_refused() -> None:
    why = "it has no converter for EncoderDecoderModel (EncoderDecoderConfig)"
    shape = ModelShape("encoder-decoder", "EncoderDecoderModel", True, generates=True)
    assert choose_engine(shape, convertible=why) == EngineChoice(
        "transformers", None, f"CTranslate2 cannot take it: {why}"
    )
    with pytest.raises(ValueError, match=r"deploy\.engine: 'ctranslate2' cannot take this model"):
        choose_engine(shape, requested="ctranslate2", convertible=why)


def test_settings_force_an_engine_or_a_precision() -> None:
    assert choose_engine(T5, requested="transformers").engine == "transformers"
    assert choose_engine(T5, compute_type="float32").compute_type == "float32"
    with pytest.raises(ValueError, match="forward pass"):
        choose_engine(CLASSIFIER, requested="ctranslate2")


def test_the_choice_travels_as_json() -> None:
    chosen = choose_engine(T5)
    assert EngineChoice.from_json(chosen.to_json()) == chosen
    assert chosen.describe() == "ctranslate2 int8"
    assert EngineChoice().describe() == "transformers"


def test_the_config_refuses_vllm_in_one_line() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="'vllm' is not available in this version"):
        DeployConfig(engine="vllm")
    assert DeployConfig().engine == "auto"
