"""A classifier served by the real server: texts and pairs get labels with scores, `top_k`
the k likeliest, a multi-label model the labels reaching its threshold; a batch is one
forward pass, and bad requests get a 4xx naming the instance or the parameter.

Every answer is compared with the scores transformers gives for the same input alone
(`reference`), so batching, padding, pairing and truncation are checked, not assumed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from llm_pipeline.config.errors import problems_from
from llm_pipeline.errors import ServeError
from llm_pipeline.serve.app import load_served_model
from llm_pipeline.serve.schemas import GenerationParameters, PredictRequest
from llm_pipeline.serve.settings import Settings

from .servers import CLASSIFIER_INPUT_TOKENS, HEALTH, PREDICT, Server
from .tiny_model import CLASSIFIER_LABELS

TASK = "text_classification"
QUESTION = "How do I read a gzip-compressed file line by line?"
BUG = "The parser crashes with a KeyError when the config file is empty."
FEATURE = "Please add an option to write the report as JSON."
PASSAGE = "gzip.open returns a file object; iterate over it to get its lines."
#: Far longer than CLASSIFIER_INPUT_TOKENS: whatever follows it is cut off.
LONG = "The server reads only the start of a long text before it classifies it. " * 8
TOLERANCE = 1e-5

Scores = Callable[[Path, Sequence[str | tuple[str, str]]], list[list[float]]]


@pytest.fixture(scope="module")
def reference() -> Scores:
    """`reference(folder, inputs)`: each input's score per label, computed alone by
    transformers (softmax, or sigmoids for a multi-label model), cut as the servers cut."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    def scores(folder: Path, inputs: Sequence[str | tuple[str, str]]) -> list[list[float]]:
        tokenizer = AutoTokenizer.from_pretrained(folder)
        model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
        multi = model.config.problem_type == "multi_label_classification"
        rows = []
        for one in inputs:
            text, pair = (one, None) if isinstance(one, str) else one
            encoded = tokenizer(
                text,
                pair,
                truncation=True,
                max_length=CLASSIFIER_INPUT_TOKENS,
                return_tensors="pt",
            )
            with torch.no_grad():
                logits = model(**encoded).logits[0]
            rows.append((logits.sigmoid() if multi else logits.softmax(-1)).tolist())
        return rows

    return scores


def ranked(scores: list[float]) -> list[tuple[str, float]]:
    """(label, score) for every label, highest score first."""
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    return [(CLASSIFIER_LABELS[i], scores[i]) for i in order]


def as_pairs(prediction: list[dict[str, Any]]) -> list[tuple[str, float]]:
    assert all(set(one) == {"label", "score"} for one in prediction), prediction
    return [(one["label"], one["score"]) for one in prediction]


def approx(expected: list[tuple[str, float]]) -> Any:
    return [(label, pytest.approx(score, abs=TOLERANCE)) for label, score in expected]


def test_a_text_and_a_pair_get_their_label_and_score(
    classifier_server: Server, classifier_dir: Path, reference: Scores
) -> None:
    instances = [QUESTION, {"text": BUG}, {"text": QUESTION, "text_pair": PASSAGE}]
    response = classifier_server.post({"instances": instances})
    assert response.status_code == 200, response.text
    predictions = response.json()["predictions"]
    expected = reference(classifier_dir, [QUESTION, BUG, (QUESTION, PASSAGE)])
    assert len(predictions) == 3
    for prediction, scores in zip(predictions, expected, strict=True):
        label, score = ranked(scores)[0]
        assert prediction == {"label": label, "score": pytest.approx(score, abs=TOLERANCE)}
    # The pair is read as a pair: its second text changes the scores.
    assert predictions[2]["score"] != pytest.approx(predictions[0]["score"], abs=1e-3)


def test_top_k_answers_the_k_likeliest_labels_highest_first(
    classifier_server: Server, classifier_dir: Path, reference: Scores
) -> None:
    texts = [BUG, FEATURE]
    expected = [ranked(scores) for scores in reference(classifier_dir, texts)]
    for top_k in (1, 2, 3):
        response = classifier_server.post({"instances": texts, "parameters": {"top_k": top_k}})
        assert response.status_code == 200, response.text
        got = [as_pairs(prediction) for prediction in response.json()["predictions"]]
        assert got == [approx(every[:top_k]) for every in expected]
    # All three labels of a single-label model: a distribution.
    assert sum(score for _, score in got[0]) == pytest.approx(1.0, abs=1e-5)


def test_inputs_are_cut_to_the_servers_input_limit(
    classifier_server: Server, classifier_dir: Path, reference: Scores
) -> None:
    endings = [LONG + "It crashes on start.", LONG + "Could it export JSON?"]
    response = classifier_server.post({"instances": endings, "parameters": {"top_k": 3}})
    assert response.status_code == 200, response.text
    first, second = response.json()["predictions"]
    assert first == second  # the endings differ only past the limit
    assert as_pairs(first) == approx(ranked(reference(classifier_dir, [LONG])[0]))


def test_a_multi_label_model_answers_the_labels_reaching_its_threshold(
    multi_label_server: Server, multi_label_classifier_dir: Path, reference: Scores
) -> None:
    texts = [QUESTION, BUG, FEATURE, PASSAGE, LONG]
    expected = [ranked(scores) for scores in reference(multi_label_classifier_dir, texts)]
    response = multi_label_server.post({"instances": texts})
    assert response.status_code == 200, response.text
    got = [as_pairs(prediction) for prediction in response.json()["predictions"]]
    chosen = [[(label, score) for label, score in every if score >= 0.8] for every in expected]
    assert got == [approx(labels) for labels in chosen]
    # The tiny model's texts reach the threshold with no label and with some (the
    # fixture's 0.8 is set for that): both answers are exercised.
    assert [] in got and any(got), got

    response = multi_label_server.post({"instances": texts, "parameters": {"top_k": 2}})
    assert response.status_code == 200, response.text
    got = [as_pairs(prediction) for prediction in response.json()["predictions"]]
    assert got == [approx(every[:2]) for every in expected]


def test_one_batch_is_one_forward_pass(
    classifier_dir: Path, reference: Scores, tmp_path: Path
) -> None:
    settings = Settings(
        model_uri=str(classifier_dir),
        task=TASK,
        device="cpu",
        max_input_tokens=CLASSIFIER_INPUT_TOKENS,
    )
    served = load_served_model(settings, download_dir=tmp_path)
    model: Any = served.model
    calls: list[int] = []
    forward = model.forward

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(len(kwargs["input_ids"]))
        return forward(*args, **kwargs)

    model.forward = counted
    inputs: list[str | tuple[str, str]] = [QUESTION, (QUESTION, PASSAGE), LONG, BUG, FEATURE]
    predictions = served.predict(GenerationParameters(top_k=3), inputs)
    assert calls == [5], "one forward pass of the whole batch"
    expected = [approx(ranked(scores)) for scores in reference(classifier_dir, inputs)]
    assert [as_pairs(prediction) for prediction in predictions] == expected


def test_concurrent_requests_share_forward_passes(
    classifier_server: Server, classifier_dir: Path, reference: Scores
) -> None:
    texts = [f"{text} (client {i})" for i in range(4) for text in (QUESTION, BUG, FEATURE)]
    expected = [ranked(scores)[0] for scores in reference(classifier_dir, texts)]
    before = classifier_server.stats()
    start = threading.Barrier(len(texts))
    answers: list[Any] = [None] * len(texts)

    def client(i: int) -> None:
        with httpx.Client(timeout=60) as http:
            start.wait()
            answers[i] = http.post(classifier_server.url + PREDICT, json={"instances": [texts[i]]})

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(texts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [answer.status_code for answer in answers] == [200] * len(texts)
    got = [(p["label"], p["score"]) for a in answers for p in a.json()["predictions"]]
    assert got == approx(expected)
    after = classifier_server.stats()
    assert after["instances_run"] - before["instances_run"] == len(texts)
    calls = after["model_calls"] - before["model_calls"]
    assert calls < len(texts) // 2, f"{calls} forward passes for {len(texts)} requests"


BAD = [
    # (id, body, message)
    ("top_k 0", {"parameters": {"top_k": 0}}, "parameters.top_k: 0 is outside 1..3"),
    (
        "top_k above the labels",
        {"parameters": {"top_k": 4}},
        "parameters.top_k: 4 is outside 1..3: this model scores 3 labels",
    ),
    (
        "top_k a string",
        {"parameters": {"top_k": "2"}},
        "parameters.top_k: must be an integer, got",
    ),
    (
        "a generation parameter",
        {"parameters": {"max_new_tokens": 8}},
        "parameters.max_new_tokens: not a parameter of task 'text_classification' (it takes top_k)",
    ),
    ("empty text", {"instances": [QUESTION, "  "]}, "instances[1]: text is empty"),
    (
        "empty text in an object",
        {"instances": [{"text": ""}]},
        "instances[0].text: text is empty",
    ),
    (
        "empty second text",
        {"instances": [{"text": QUESTION, "text_pair": " "}]},
        "instances[0].text_pair: text_pair is empty",
    ),
    (
        "a pair without its text",
        {"instances": [{"text_pair": PASSAGE}]},
        'instances[0]: an instance object needs "text"',
    ),
    (
        "a number",
        {"instances": [QUESTION, 7]},
        'instances[1]: expected a text (string) or {"text": ..., "text_pair": ...}, got integer',
    ),
    (
        "a chat",
        {"instances": [{"messages": [{"role": "user", "content": "hi"}]}]},
        "instances[0]: unknown key 'messages'",
    ),
]


@pytest.mark.parametrize(("body", "message"), [case[1:] for case in BAD], ids=[c[0] for c in BAD])
def test_bad_requests_get_400_naming_the_instance_or_parameter(
    classifier_server: Server, body: dict[str, Any], message: str
) -> None:
    response = classifier_server.post({"instances": [QUESTION], **body})
    assert response.status_code == 400, response.text
    assert message in response.json()["error"]
    assert httpx.get(classifier_server.url + HEALTH).status_code == 200


def test_a_pair_to_a_model_of_single_texts_gets_400(multi_label_server: Server) -> None:
    # Its folder says it was trained on single texts: a pair would be read as none it saw.
    body = {"instances": [QUESTION, {"text": QUESTION, "text_pair": PASSAGE}]}
    response = multi_label_server.post(body)
    assert response.status_code == 400, response.text
    assert response.json()["error"] == (
        "instances[1].text_pair: this model was trained on single texts, not pairs: send the "
        "text alone"
    )


def test_a_default_top_k_the_model_cannot_take_stops_the_load(
    classifier_dir: Path, tmp_path: Path
) -> None:
    settings = Settings(
        model_uri=str(classifier_dir),
        task=TASK,
        device="cpu",
        parameters=GenerationParameters(top_k=5),
    )
    with pytest.raises(ServeError) as refused:
        load_served_model(settings, download_dir=tmp_path)
    assert str(refused.value) == (
        "LLM_PIPELINE_SERVE_PARAMETERS: top_k: 5 is outside 1..3: this model scores 3 labels"
    )


@pytest.mark.parametrize("task", ["summarization", "instruction_tuning"])
def test_the_other_tasks_refuse_top_k(task: str) -> None:
    body = {"instances": ["A text."], "parameters": {"top_k": 2}}
    with pytest.raises(ValidationError) as refused:
        PredictRequest.model_validate(body, context=Settings(task=task))
    problems = problems_from(refused.value, PredictRequest)
    assert any(
        p.startswith(f"parameters.top_k: not a parameter of task {task!r}") for p in problems
    )
