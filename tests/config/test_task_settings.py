"""What a config takes from its task: the gate's metric, and which model sources and
generation settings fit the task's kind of model."""

from typing import Any

import pytest

from llm_pipeline.config import ConfigError, load_config

from .minimal_config import MINIMAL, with_change

SFT: dict[str, Any] = {
    "task": "instruction_tuning",
    "data": {"dataset": "data.jsonl", "columns": {"prompt": "q", "response": "a"}},
    "model": {"source": "facebook/opt-125m"},
}
CLASSIFY: dict[str, Any] = {
    "task": "text_classification",
    "data": {"dataset": "data.jsonl", "columns": {"text": "t", "label": "l"}},
    "model": {"source": "distilbert-base-uncased"},
}
PAIR = {"encoder_decoder": {"encoder": "bert-base-uncased", "decoder": "x"}}


@pytest.mark.parametrize(
    ("raw", "metric"),
    [
        (MINIMAL, "rougeLsum"),
        (SFT, "rougeL"),
        ({**SFT, "deploy_policy": {"metric": "exact_match"}}, "exact_match"),
    ],
    ids=["summarization", "instruction_tuning", "set"],
)
def test_the_gate_metric_is_the_tasks_unless_set(raw: dict[str, Any], metric: str) -> None:
    assert load_config(raw=raw).config.deploy_policy.metric == metric


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        (
            {**SFT, "model": {"encoder_decoder": {"encoder": "bert-base-uncased", "decoder": "x"}}},
            "model.encoder_decoder builds a seq2seq model, but task 'instruction_tuning' trains a "
            "causal LM",
        ),
        (
            with_change("model", {"warm_start_decoder": "bert-base-uncased"}),
            "model.warm_start_decoder builds a causal LM, but task 'summarization' trains a "
            "seq2seq model",
        ),
        (
            with_change("evaluate.stop", ["###"]),
            "evaluate.stop: applies to models that continue a prompt (causal LMs)",
        ),
        (
            {**SFT, "train": {"freeze_encoder": True}},
            "train.freeze_encoder: task 'instruction_tuning' trains a causal LM, which has no "
            "encoder to freeze",
        ),
        (
            {**CLASSIFY, "model": PAIR},
            "model.encoder_decoder builds a seq2seq model, but task 'text_classification' "
            "trains a classifier: use model.source or model.architecture",
        ),
        (
            {**CLASSIFY, "model": {"warm_start_decoder": "bert-base-uncased"}},
            "model.warm_start_decoder builds a causal LM, but task 'text_classification' "
            "trains a classifier: use model.source or model.architecture",
        ),
        (
            {**CLASSIFY, "train": {"freeze_encoder": True}},
            "train.freeze_encoder: task 'text_classification' trains the encoder under its "
            "head; to train fewer weights use train.lora",
        ),
        (
            {**SFT, "train": {"class_weights": "balanced"}},
            "train.class_weights: weighs the labels of a classifier; task "
            "'instruction_tuning' has no labels",
        ),
        (
            with_change("train.class_weights", "balanced"),
            "train.class_weights: weighs the labels of a classifier; task 'summarization' has "
            "no labels",
        ),
        (
            {**CLASSIFY, "evaluate": {"top_p": 0.9}},
            "evaluate.top_p: applies to models that generate text; task "
            "'text_classification' trains a classifier, which scores labels",
        ),
        (
            {**CLASSIFY, "evaluate": {"num_beams": 4}},
            "evaluate.num_beams: applies to models that generate text; task "
            "'text_classification' trains a classifier, which scores labels",
        ),
        (
            {**CLASSIFY, "evaluate": {"lead_k": 1}},
            "evaluate.lead_k: applies to models that generate text; task "
            "'text_classification' trains a classifier, which scores labels",
        ),
        (
            {**CLASSIFY, "data": {**CLASSIFY["data"], "threshold": 0.7}},
            "data.threshold: 0.7 is read only with data.multi_label true (a single-label "
            "classifier predicts its likeliest label, whatever its score): drop it, or set "
            "data.multi_label",
        ),
        (
            {**CLASSIFY, "train": {"compile": True}},
            "train.compile: supported for causal LMs and seq2seq models (not yet tried on "
            "classifiers), and task 'text_classification' trains a classifier",
        ),
        (
            {**CLASSIFY, "train": {"kernels": "liger"}},
            "train.kernels: Liger's kernels patch causal LMs (Llama, Mistral, Qwen2, Gemma, "
            "...); task 'text_classification' trains another kind",
        ),
    ],
    ids=[
        "encoder-decoder for a causal LM",
        "decoder for seq2seq",
        "stop for seq2seq",
        "frozen encoder for a causal LM",
        "encoder-decoder for a classifier",
        "decoder for a classifier",
        "frozen encoder for a classifier",
        "class weights for a causal LM",
        "class weights for seq2seq",
        "top_p for a classifier",
        "num_beams for a classifier",
        "lead_k for a classifier",
        "threshold for a single-label classifier",
        "compile for a classifier",
        "liger for a classifier",
    ],
)
def test_a_model_setting_of_the_other_kind_is_refused(raw: dict[str, Any], problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(raw=raw)
    assert any(problem in line for line in caught.value.problems), caught.value.problems


@pytest.mark.parametrize(
    ("evaluate", "problem"),
    [
        (
            {"temperature": 0.7},
            "evaluate.temperature: applies only with evaluate.do_sample true; without it "
            "evaluation is greedy and ignores it",
        ),
        (
            {"top_p": 0.9, "do_sample": False},
            "evaluate.top_p: applies only with evaluate.do_sample true; without it evaluation "
            "is greedy and ignores it",
        ),
        (
            {"stop": ["###", ""]},
            "evaluate.stop: stop strings must not be empty, got ['###', '']",
        ),
        (
            {"lead_k": 1},
            "evaluate.lead_k: scores a document's first sentences as a summary, a baseline of "
            "summarization; task 'instruction_tuning' does not read it: drop it from the config",
        ),
    ],
    ids=[
        "temperature without sampling",
        "top_p greedy",
        "empty stop",
        "lead_k",
    ],
)
def test_an_evaluate_setting_a_causal_lm_would_ignore_is_refused(
    evaluate: dict[str, Any], problem: str
) -> None:
    # Each was taken and ignored: greedy search has no temperature, no instruction-tuning
    # report has a lead-k baseline, and an empty stop string stopped every response after
    # its first token.
    with pytest.raises(ConfigError) as caught:
        load_config(raw={**SFT, "evaluate": evaluate})
    assert caught.value.problems == [problem]


@pytest.mark.parametrize(
    ("evaluate", "problem"),
    [
        (
            {"num_beams": 4},
            "evaluate.num_beams: the endpoint of task 'instruction_tuning' cannot generate with "
            "it (a request sets max_new_tokens, temperature, top_p, stop), so the gate would "
            "score answers it never gives: drop it from the config",
        ),
        (
            {"no_repeat_ngram_size": 3, "length_penalty": 2.0},
            "evaluate.no_repeat_ngram_size, evaluate.length_penalty: the endpoint of task "
            "'instruction_tuning' cannot generate with it",
        ),
    ],
    ids=["beams", "n-grams and length penalty"],
)
def test_a_search_setting_the_chat_endpoint_cannot_take_is_refused(
    evaluate: dict[str, Any], problem: str
) -> None:
    # Evaluation searched with it, the endpoint (which takes only the settings a request
    # may set) did not: the gate scored answers the endpoint never gives.
    with pytest.raises(ConfigError) as caught:
        load_config(raw={**SFT, "evaluate": evaluate})
    assert [line[: len(problem)] for line in caught.value.problems] == [problem]


def test_search_settings_that_change_nothing_are_taken_for_a_chat_task() -> None:
    # What the shipped Vertex configs write: greedy, as the endpoint generates.
    raw = {**SFT, "evaluate": {"num_beams": 1, "min_new_tokens": 0, "no_repeat_ngram_size": 0}}
    assert load_config(raw=raw).config.evaluate.num_beams == 1


def test_prompt_settings_are_taken_for_a_causal_lm() -> None:
    raw = {**SFT, "evaluate": {"stop": ["###"], "do_sample": True, "top_p": 0.9}}
    assert load_config(raw=raw).config.evaluate.stop == ["###"]


@pytest.mark.parametrize(
    "raw", [MINIMAL, SFT, CLASSIFY], ids=["summarization", "instruction_tuning", "classifier"]
)
def test_a_resolved_config_validates_again(raw: dict[str, Any]) -> None:
    # What the configure step hands on (every key written out, nulls included) is taken back.
    config = load_config(raw=raw).config
    again = load_config(raw=config.model_dump(mode="json")).config
    assert again == config


def test_a_multi_label_classifier_takes_its_threshold() -> None:
    raw = {**CLASSIFY, "data": {**CLASSIFY["data"], "multi_label": True, "threshold": 0.3}}
    assert load_config(raw=raw).config.data.threshold == 0.3
