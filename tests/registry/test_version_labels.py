"""The label encoding: tables of what is written, and round trips over many values.

Vertex keeps a version's metrics only in its labels, so what `labels.py` writes must read
back exactly (names) or as the metric rounded to 4 decimals (values), always within the
label rules.
"""

from __future__ import annotations

import math
import random

import pytest

from llm_pipeline.registry.vertex.version_labels import (
    LabelError,
    decode_metric_name,
    decode_metric_value,
    decode_version_labels,
    encode_metric_name,
    encode_metric_value,
    encode_version_labels,
    is_valid_key,
    is_valid_value,
)


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("rougeLsum", "m_rouge-lsum"),
        ("rougeL", "m_rouge-l"),
        ("rouge1", "m_rouge1"),
        ("gen_len", "m_gen_len"),
        ("eval/loss", "m_eval-2floss"),
        ("eval-loss", "m_eval-2dloss"),
        ("Loss", "m_-loss"),
        ("bleu 4.0", "m_bleu-204-2e0"),
    ],
)
def test_metric_names_encode_to_label_keys_and_back(name: str, key: str) -> None:
    assert encode_metric_name(name) == key
    assert is_valid_key(key)
    assert decode_metric_name(key) == name


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (37.0269, "37_0269"),
        (0.0, "0"),
        (-0.0, "0"),
        (100.0, "100"),
        (12.5, "12_5"),
        (-3.25, "-3_25"),
        (7, "7"),
        (-12, "-12"),
        (1e-7, "0"),
        (2.00004, "2"),
        (0.12345678, "0_1235"),
        (123456.789012, "123456_789"),
        (1.5e70, "1_5e70"),
        (-2e70, "-2e70"),
        (math.inf, "inf"),
        (-math.inf, "-inf"),
    ],
)
def test_metric_values_encode_rounded_to_4_decimals(value: float, text: str) -> None:
    assert encode_metric_value(value) == text
    assert is_valid_value(text)
    assert decode_metric_value(text) == round(float(value), 4) or abs(value) > 1e50


def test_nan_is_written_and_read() -> None:
    assert encode_metric_value(math.nan) == "nan"
    assert math.isnan(decode_metric_value("nan"))


@pytest.mark.parametrize("text", ["", "37.02", "abc", "1e", "--1", "1_", "_1", "1__2", "3_0x"])
def test_values_this_module_did_not_write_are_refused(text: str) -> None:
    with pytest.raises(LabelError):
        decode_metric_value(text)


@pytest.mark.parametrize("key", ["rougel", "m_", "m_a-", "m_a-9z", "m_a-8f", "M_a"])
def test_keys_this_module_did_not_write_are_refused(key: str) -> None:
    with pytest.raises(LabelError):
        decode_metric_name(key)


def test_values_round_trip_for_metrics_with_at_most_4_decimals() -> None:
    rng = random.Random(0)
    values = [k / 10_000 for k in range(-20_000, 20_001, 7)]
    values += [round(rng.uniform(-1e6, 1e6), 4) for _ in range(5_000)]
    values += [float(rng.randint(-(10**12), 10**12)) for _ in range(500)]
    values += [37.0269, 0.0, 100.0, 12.5, -0.5, 99.9999, 1e15, 2.0**53]
    for value in values:
        text = encode_metric_value(value)
        assert is_valid_value(text), (value, text)
        assert decode_metric_value(text) == value, (value, text)


def test_any_float_reads_back_as_itself_rounded_to_4_decimals() -> None:
    rng = random.Random(1)
    values = [rng.uniform(-1e4, 1e4) for _ in range(5_000)]
    values += [10.0 ** rng.uniform(-12, 80) * rng.choice((-1, 1)) for _ in range(2_000)]
    for value in values:
        text = encode_metric_value(value)
        assert is_valid_value(text), (value, text)
        assert decode_metric_value(text) == float(f"{value:.4f}"), (value, text)


def test_metric_names_round_trip_and_never_collide() -> None:
    rng = random.Random(2)
    alphabet = [chr(c) for c in range(0x20, 0x7F)]
    names = {"".join(rng.choices(alphabet, k=rng.randint(1, 12))) for _ in range(5_000)}
    names |= {"rougeL", "rougel", "rouge-l", "rouge_l", "ROUGEL", "rouge.l"}
    keys = set()
    for name in names:
        key = encode_metric_name(name)
        assert is_valid_key(key), (name, key)
        assert decode_metric_name(key) == name
        keys.add(key)
    assert len(keys) == len(names)


def test_version_labels_hold_metrics_run_and_user_labels() -> None:
    labels = encode_version_labels(
        {"rougeLsum": 37.0269, "loss": -1.5}, run="Run 2024-05-01T12:00", labels={"team": "nlp"}
    )
    assert labels == {
        "team": "nlp",
        "run": "run-2024-05-01t12-00",
        "m_rouge-lsum": "37_0269",
        "m_loss": "-1_5",
    }
    decoded = decode_version_labels(labels)
    assert decoded.metrics == {"rougeLsum": 37.0269, "loss": -1.5}
    assert decoded.run == "run-2024-05-01t12-00"
    assert decoded.labels == {"team": "nlp"}


def test_labels_someone_else_wrote_under_m_stay_plain_labels() -> None:
    decoded = decode_version_labels({"m_owner": "alice", "m_rouge1": "40_5", "m-x": "1"})
    assert decoded.metrics == {"rouge1": 40.5}
    assert decoded.labels == {"m_owner": "alice", "m-x": "1"}
    assert decoded.run is None


@pytest.mark.parametrize(
    ("metrics", "labels", "message"),
    [
        ({"x" * 62: 1.0}, None, "shorten"),
        ({"rouge·l": 1.0}, None, "ASCII"),
        ({"": 1.0}, None, "empty name"),
        ({}, {"run": "x"}, "reserved"),
        ({}, {"m_x": "1"}, "reserved"),
        ({}, {"Team": "nlp"}, "invalid Vertex labels"),
        ({}, {"team": "NLP"}, "invalid Vertex labels"),
        ({f"m{i}": 1.0 for i in range(65)}, None, "Vertex allows 64"),
    ],
)
def test_labels_vertex_would_refuse_are_refused_here(
    metrics: dict[str, float], labels: dict[str, str] | None, message: str
) -> None:
    with pytest.raises(LabelError, match=message):
        encode_version_labels(metrics, labels=labels)


def test_the_evaluation_fingerprint_is_a_label_that_comes_back() -> None:
    """On Vertex the gate reads a served version's evaluation fingerprint from its labels."""
    from llm_pipeline.evaluation.fingerprint import FINGERPRINT_LENGTH
    from llm_pipeline.registry import EVALUATION_DATA_LABEL

    fingerprint = "0123456789abcdef" * (FINGERPRINT_LENGTH // 16)
    labels = encode_version_labels(
        {"rougeLsum": 15.8}, run="run-1", labels={EVALUATION_DATA_LABEL: fingerprint}
    )
    decoded = decode_version_labels(labels)
    assert decoded.labels == {EVALUATION_DATA_LABEL: fingerprint}
    assert decoded.metrics == {"rougeLsum": 15.8}
