"""A classifier trains through the same finetune step: its head built for the data's labels,
batches padded with their token type ids, the loss its head's problem type takes (weighted
for `train.class_weights`), LoRA with the head trained whole, and a model folder that says its
labels; and the seed's ZeRO-2 on two ranks, killed and resumed.
"""

from __future__ import annotations

import inspect
import json
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from sklearn.utils.class_weight import compute_class_weight

from llm_pipeline.config import ClusterConfig, LoraSettings, ModelConfig, TrainConfig
from llm_pipeline.errors import ModelError, TrainError
from llm_pipeline.models.sources import load_tokenizer
from llm_pipeline.tasks import get_task
from llm_pipeline.tasks.kinds import CLASSIFIER
from llm_pipeline.tasks.text_classification.labels import LabelSet
from llm_pipeline.tasks.text_classification.loss import balanced_class_weights, classifier_loss

from ..offline_models import MINILM, TINY_LLAMA
from .classifier_data import (
    TOPICS,
    multi_label_rows,
    single_label_rows,
    write_classification_dataset,
)
from .kill_and_resume import complete_checkpoints, kill_rank_after_a_checkpoint

TINY_BERT = {
    "model_type": "bert",
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 64,
    "hidden_dropout_prob": 0.0,
    "attention_probs_dropout_prob": 0.0,
}
NAMES = tuple(TOPICS)
SINGLE = LabelSet(names=NAMES)
MULTI = LabelSet(names=NAMES, multi_label=True)
CLASSIFICATION = get_task("text_classification")


def _model(architecture: dict[str, Any], labels: LabelSet = SINGLE) -> torch.nn.Module:
    config = ModelConfig(architecture=dict(architecture), tokenizer=MINILM)
    torch.manual_seed(0)
    return CLASSIFICATION.build_model(
        config,
        load_tokenizer(config, kind=CLASSIFIER),
        labels=labels.model_config_fields(),
    )


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return load_tokenizer(ModelConfig(source=MINILM), kind=CLASSIFIER)


@pytest.fixture(scope="module")
def single_label_data(tmp_path_factory: pytest.TempPathFactory, tokenizer: Any) -> Path:
    """Imbalanced topics (6:3:1): 240 training rows, 60 validation rows."""
    splits = {
        "train": single_label_rows(240, seed=1, weights=[6, 3, 1]),
        "validation": single_label_rows(60, seed=2, weights=[1, 1, 1]),
    }
    return write_classification_dataset(tmp_path_factory.mktemp("single"), splits, tokenizer)


@pytest.fixture(scope="module")
def multi_label_data(tmp_path_factory: pytest.TempPathFactory, tokenizer: Any) -> Path:
    splits = {"train": multi_label_rows(160, seed=3), "validation": multi_label_rows(40, seed=4)}
    folder = tmp_path_factory.mktemp("multi")
    return write_classification_dataset(folder, splits, tokenizer, multi_label=True)


@pytest.fixture
def one_process() -> Iterator[None]:
    """The Trainer in this process, without a process group; its state reset after."""
    yield
    from accelerate.state import AcceleratorState

    # The Trainer's process state is a singleton; later tests set up their own.
    AcceleratorState._reset_state(reset_partial_state=True)


def _train_here(
    model: torch.nn.Module,
    tokenizer: Any,
    dataset: Path,
    tmp_path: Path,
    *,
    label_set: LabelSet,
    steps: int,
    learning_rate: float = 1e-2,
) -> Any:
    """The project's Trainer for a classifier, without DeepSpeed, for `steps` steps."""
    from datasets import load_from_disk
    from transformers import TrainingArguments

    from llm_pipeline.train.trainer import build_trainer

    splits = load_from_disk(str(dataset))
    trainer = build_trainer(
        model=model,
        tokenizer=tokenizer,
        args=TrainingArguments(
            output_dir=str(tmp_path / "checkpoints"),
            max_steps=steps,
            per_device_train_batch_size=16,
            learning_rate=learning_rate,
            use_cpu=True,
            save_strategy="no",
            report_to="none",
            disable_tqdm=True,
            logging_steps=1,
            seed=0,
        ),
        # What the worker reads (training_data.load_splits): the model's columns alone.
        train_dataset=splits["train"].remove_columns(["text", "label"]),
        eval_dataset=None,
        callbacks=[],
        sampling="random",
        task=CLASSIFICATION,
        label_set=label_set,
    )
    trainer.train()
    return trainer


def _predict(model: torch.nn.Module, tokenizer: Any, texts: list[str]) -> torch.Tensor:
    model.eval()
    with torch.no_grad():
        batch = tokenizer(list(texts), return_tensors="pt", padding=True)
        accepted = inspect.signature(model.forward).parameters
        return model(**{k: v for k, v in batch.items() if k in accepted}).logits


# --- class weights and the loss -------------------------------------------------------------


def test_balanced_weights_are_scikit_learns() -> None:
    labels = [0] * 7 + [1] * 2 + [2] * 1
    want = compute_class_weight("balanced", classes=np.arange(3), y=np.array(labels))
    got = balanced_class_weights(labels, SINGLE)
    assert got.tolist() == pytest.approx(want.tolist())


def test_multi_label_weights_are_negatives_over_positives() -> None:
    rows = [[1.0, 0.0, 1.0], [1.0, 0.0, 0.0], [1.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
    assert balanced_class_weights(rows, MULTI).tolist() == pytest.approx([1 / 3, 3.0, 1.0])


@pytest.mark.parametrize(
    ("labels", "label_set", "named"),
    [
        ([0, 0, 1], SINGLE, "'cooking'"),
        ([[1.0, 0.0, 1.0], [1.0, 1.0, 0.0]], MULTI, "'weather' (2 of 2 rows)"),
    ],
)
def test_a_label_that_cannot_be_balanced_is_named(
    labels: list[Any], label_set: LabelSet, named: str
) -> None:
    with pytest.raises(TrainError, match=r"train\.class_weights 'balanced'") as caught:
        balanced_class_weights(labels, label_set)
    assert named in str(caught.value)


def test_the_loss_is_the_heads_own_and_weighs_rows_by_their_label() -> None:
    model = _model(TINY_BERT)
    ids = torch.randint(1000, 2000, (4, 6))
    labels = torch.tensor([0, 2, 1, 2])
    outputs = model(input_ids=ids, labels=labels)
    loss = classifier_loss(multi_label=False)
    assert torch.allclose(loss(outputs, labels), outputs.loss, atol=1e-6)
    # Weighted: each row's cross-entropy times its label's weight, over the rows.
    weights = torch.tensor([0.5, 1.0, 3.0])
    rows = torch.nn.functional.cross_entropy(outputs.logits, labels, reduction="none")
    want = (rows * weights[labels]).sum() / 4
    got = classifier_loss(multi_label=False, weights=weights)(outputs, labels)
    assert torch.allclose(got, want, atol=1e-6)
    # Divided by the step's rows over every micro-batch and rank, when the Trainer says them.
    assert torch.allclose(loss(outputs, labels, num_items_in_batch=8), outputs.loss / 2)

    multi = _model(TINY_BERT, MULTI)
    targets = torch.tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0], [1.0, 1.0, 0.0], [0, 0, 1.0]])
    outputs = multi(input_ids=ids, labels=targets)
    assert multi.config.problem_type == "multi_label_classification"
    assert torch.allclose(classifier_loss(multi_label=True)(outputs, targets), outputs.loss)


# --- building the model ---------------------------------------------------------------------


def test_an_architecture_becomes_a_classifier_of_the_datas_labels() -> None:
    model = _model(TINY_BERT, MULTI)
    config = model.config
    assert type(model).__name__ == "BertForSequenceClassification"
    assert config.id2label == {0: "weather", 1: "sports", 2: "cooking"}
    assert config.label2id == {"weather": 0, "sports": 1, "cooking": 2}
    assert config.classification_threshold == 0.5
    assert LabelSet.from_model_config(config) == MULTI


def test_a_pretrained_encoder_gets_a_fresh_head(caplog: pytest.LogCaptureFixture) -> None:
    config = ModelConfig(source=MINILM)
    with caplog.at_level(logging.WARNING, logger="llm_pipeline.tasks.text_classification.model"):
        model = CLASSIFICATION.build_model(
            config, load_tokenizer(config), labels=SINGLE.model_config_fields()
        )
    assert model.config.num_labels == 3
    said = "has no classification head: it gets a fresh one (random, seeded) for the 3 labels"
    assert said in caplog.text


def test_a_classifier_of_other_labels_loads_with_a_fresh_head(
    tmp_path: Path, tokenizer: Any, caplog: pytest.LogCaptureFixture
) -> None:
    other = LabelSet(names=("negative", "positive"))
    for name, labels in (("other", other), ("same", SINGLE)):
        _model(TINY_BERT, labels).save_pretrained(tmp_path / name)
        tokenizer.save_pretrained(tmp_path / name)

    with caplog.at_level(logging.WARNING, logger="llm_pipeline.tasks.text_classification.model"):
        model = CLASSIFICATION.build_model(
            ModelConfig(source=str(tmp_path / "other")),
            tokenizer,
            labels=SINGLE.model_config_fields(),
        )
    assert model.config.id2label == SINGLE.id2label and model.classifier.out_features == 3
    assert "is a classifier of 2 other labels (['negative', 'positive'])" in caplog.text
    assert "its head (classifier) starts afresh for this run's 3 labels" in caplog.text

    # The same labels: the head it was trained with is kept, and nothing is said.
    caplog.clear()
    from transformers import AutoModelForSequenceClassification

    saved = AutoModelForSequenceClassification.from_pretrained(tmp_path / "same")
    with caplog.at_level(logging.WARNING, logger="llm_pipeline.tasks.text_classification.model"):
        kept = CLASSIFICATION.build_model(
            ModelConfig(source=str(tmp_path / "same")),
            tokenizer,
            labels=SINGLE.model_config_fields(),
        )
    assert torch.equal(kept.classifier.weight, saved.classifier.weight)
    assert caplog.text == ""

    # Same size, other names: fresh too.
    renamed = LabelSet(names=("a", "b", "c"))
    fresh = CLASSIFICATION.build_model(
        ModelConfig(source=str(tmp_path / "same")),
        tokenizer,
        labels=renamed.model_config_fields(),
    )
    assert not torch.equal(fresh.classifier.weight, saved.classifier.weight)


def test_a_classifier_cannot_be_warm_started_as_a_generator(tokenizer: Any) -> None:
    with pytest.raises(ModelError, match=r"model\.warm_start_decoder builds a generating model"):
        CLASSIFICATION.build_model(
            ModelConfig(warm_start_decoder=MINILM),
            tokenizer,
            labels=SINGLE.model_config_fields(),
        )
    with pytest.raises(ModelError, match=r"model\.source '/no/such/model'"):
        CLASSIFICATION.build_model(
            ModelConfig(source="/no/such/model", tokenizer=MINILM),
            tokenizer,
            labels=SINGLE.model_config_fields(),
        )


def test_a_decoder_classifier_scores_the_last_token_that_is_not_padding() -> None:
    """A Llama head reads the last real token of each row, found by the config's pad id: a
    row's logits are the same alone and right-padded in a batch."""
    from transformers import AutoTokenizer

    from llm_pipeline.models.sources import resolve_model_path

    # A decoder's tokenizer without a pad token: it pads with its end-of-sequence token.
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(MINILM))
    tokenizer.eos_token = tokenizer.sep_token
    tokenizer.pad_token = None
    assert tokenizer.pad_token_id is None
    config = ModelConfig(architecture=dict(TINY_LLAMA), tokenizer=MINILM)
    torch.manual_seed(0)
    model = CLASSIFICATION.build_model(config, tokenizer, labels=SINGLE.model_config_fields())
    assert tokenizer.pad_token == "[SEP]"
    assert model.config.pad_token_id == tokenizer.sep_token_id
    model.eval()
    texts = ["rain and wind", "the team saw a very long football match today"]
    batched = _predict(model, tokenizer, texts)
    alone = _predict(model, tokenizer, texts[:1])
    torch.testing.assert_close(batched[:1], alone, rtol=1e-5, atol=1e-5)


# --- training -------------------------------------------------------------------------------


def test_a_decoder_classifier_trains(
    single_label_data: Path, tokenizer: Any, tmp_path: Path, one_process: None
) -> None:
    model = _model(TINY_LLAMA)
    trainer = _train_here(model, tokenizer, single_label_data, tmp_path, label_set=SINGLE, steps=30)
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    assert np.mean(losses[-5:]) < np.mean(losses[:5]) - 0.3, losses


def test_multi_label_trains_with_a_binary_loss_per_label(
    multi_label_data: Path, tokenizer: Any, tmp_path: Path, one_process: None
) -> None:
    from datasets import load_from_disk

    # A pre-norm decoder learns the toy topics in fewer steps than a post-norm BERT this small.
    model = _model(TINY_LLAMA, MULTI)
    trainer = _train_here(model, tokenizer, multi_label_data, tmp_path, label_set=MULTI, steps=40)
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    # BCE starts near log 2 per label.
    assert losses[0] == pytest.approx(np.log(2), abs=0.15)
    assert np.mean(losses[-5:]) < 0.3, losses
    validation = load_from_disk(str(multi_label_data))["validation"]
    scores = torch.sigmoid(_predict(model, tokenizer, validation["text"]))
    predicted = (scores >= 0.5).float()
    exact = (predicted == torch.tensor(list(validation["labels"]))).all(dim=1).float().mean()
    assert exact > 0.8, exact


def test_lora_trains_the_head_whole_and_merges_into_the_adapted_model(
    single_label_data: Path, tokenizer: Any, tmp_path: Path, one_process: None
) -> None:
    from transformers import AutoModelForSequenceClassification

    from llm_pipeline.train.lora import apply_lora, merge_into_base, without_prefix

    base = _model(TINY_BERT)
    started = {name: value.clone() for name, value in base.state_dict().items()}
    model = apply_lora(base, LoraSettings(r=4), options=CLASSIFICATION.lora_options(base))
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    head = {n for n in trainable if ".modules_to_save." in n}
    assert head and all(".classifier." in n for n in head)
    assert trainable - head and all(".lora_" in n for n in trainable - head)

    _train_here(model, tokenizer, single_label_data, tmp_path, label_set=SINGLE, steps=5)

    # Only adapters and the head's trained copy moved; every base weight is bit-identical.
    now = dict(model.named_parameters())
    for name, value in now.items():
        if name in trainable:
            continue
        key = name.removeprefix("base_model.model.").replace(".base_layer", "")
        key = key.replace(".original_module", "")
        assert torch.equal(value, started[key]), name
    assert not torch.equal(now[next(iter(sorted(head)))], started["classifier.weight"])

    texts = ["rain and snow today", "the coach saw the goal", "bake the soup"]
    want = _predict(model, tokenizer, texts)
    merged, prefix = merge_into_base(model)
    state = without_prefix(model.state_dict(), prefix)
    merged.save_pretrained(tmp_path / "merged", state_dict=state)
    reloaded = AutoModelForSequenceClassification.from_pretrained(tmp_path / "merged")
    assert not any("lora_" in n or "modules_to_save" in n for n in reloaded.state_dict())
    torch.testing.assert_close(_predict(reloaded, tokenizer, texts), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    ("columns", "pairs"), [(("text", "label"), False), (("text", "text_pair", "label"), True)]
)
def test_the_worker_reads_whether_rows_are_text_pairs_from_the_kept_columns(
    tmp_path: Path, columns: tuple[str, ...], pairs: bool
) -> None:
    """Preprocess keeps a classifier's text columns beside the ids; the saved model records
    whether there were two (its served page offers a second text box only then)."""
    from datasets import Dataset, DatasetDict

    from llm_pipeline.tasks.text_classification import training
    from llm_pipeline.train import training_data

    rows = {column: ["a", "b"] for column in columns} | {"input_ids": [[1, 2], [3]]}
    DatasetDict({"train": Dataset.from_dict(rows)}).save_to_disk(str(tmp_path / "data"))
    (tmp_path / training_data._NOTE).write_text(str(tmp_path / "data"))
    spec = SimpleNamespace(work_dir=str(tmp_path), task="text_classification")
    assert training.reads_text_pairs(spec, get_task("text_classification")) is pairs


def test_a_tiny_bert_learns_the_topics_through_the_finetune_step(
    single_label_data: Path, tmp_path: Path, train_settings: Callable[..., TrainConfig]
) -> None:
    """One process, DeepSpeed ZeRO-2, balanced class weights on 6:3:1 data: the saved folder
    says its labels, loads as any classifier, and tells the topics apart."""
    from datasets import load_from_disk
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from llm_pipeline.train.counts import flop_parameters
    from llm_pipeline.train.job import run_finetune

    output = tmp_path / "model"
    result = run_finetune(
        dataset_dir=str(single_label_data),
        output_dir=str(output),
        model=ModelConfig(architecture=dict(TINY_BERT), tokenizer=MINILM),
        train=train_settings(
            max_steps=45,
            per_device_batch_size=16,
            save_steps=100,
            learning_rate=1e-2,
            zero_stage=2,
            class_weights="balanced",
        ),
        cluster=ClusterConfig(processes=1),
        env=dict(os.environ),
        task="text_classification",
    )

    config = json.loads((output / "config.json").read_text())
    assert config["id2label"] == {"0": "weather", "1": "sports", "2": "cooking"}
    assert config["label2id"] == {"weather": 0, "sports": 1, "cooking": 2}
    assert config["problem_type"] == "single_label_classification"
    assert config["classification_threshold"] == 0.5
    assert config["classification_text_pair"] is False  # single texts: no second box served
    model = AutoModelForSequenceClassification.from_pretrained(output)
    tokenizer = AutoTokenizer.from_pretrained(output)
    assert LabelSet.from_model_config(model.config) == SINGLE
    validation = load_from_disk(str(single_label_data))["validation"]
    predicted = _predict(model, tokenizer, validation["text"]).argmax(-1)
    accuracy = (predicted == torch.tensor(list(validation["labels"]))).float().mean()
    assert accuracy > 0.6, accuracy  # chance: 1/3; the rare topic is found too
    assert (predicted == 2).sum() > 0

    metrics = result.metrics
    train = load_from_disk(str(single_label_data))["train"]
    assert metrics["train_samples"] == 45 * 16
    assert metrics["train_target_tokens"] == 0  # labels, not tokens
    # Encoder-only: every parameter but the embedding tables, for every token read.
    flops = flop_parameters(model)
    tables = [m for m in model.modules() if isinstance(m, torch.nn.Embedding)]
    embeddings = sum(p.numel() for m in tables for p in m.parameters())
    assert metrics["parameters_per_source_token"] == flops.per_source_token
    assert flops.per_source_token == sum(p.numel() for p in model.parameters()) - embeddings
    assert metrics["parameters_per_target_token"] == 0
    assert metrics["train_source_tokens"] > len(train) * 5


@pytest.mark.slow
def test_zero2_on_two_ranks_is_killed_and_resumes(
    single_label_data: Path,
    tmp_path: Path,
    train_settings: Callable[..., TrainConfig],
    capfd: pytest.CaptureFixture[str],
) -> None:
    """The seed's setup (an encoder classifier under ZeRO-2 on two ranks), killed with
    SIGKILL after a checkpoint: the rerun resumes from it and loses as the first run did."""
    from llm_pipeline.train.job import run_finetune

    max_steps = 16
    output, checkpoints = tmp_path / "model", tmp_path / "checkpoints"
    step_args: dict[str, Any] = {
        "dataset_dir": str(single_label_data),
        "output_dir": str(output),
        "model": ModelConfig(architecture=dict(TINY_BERT), tokenizer=MINILM),
        "train": train_settings(
            max_steps=max_steps, save_steps=4, zero_stage=2, class_weights="balanced"
        ),
        "cluster": ClusterConfig(processes=2),
        "env": dict(os.environ),
        "task": "text_classification",
    }
    error, first_losses = kill_rank_after_a_checkpoint(
        step_args, checkpoints=checkpoints, max_steps=max_steps, capfd=capfd
    )
    assert isinstance(error, TrainError), error
    assert "rank 1" in str(error) and "signal 9" in str(error)
    assert not output.exists()
    newest = max(complete_checkpoints(checkpoints))
    # ZeRO-2: each rank's optimizer partition, one module state.
    for rank in (0, 1):
        folder = complete_checkpoints(checkpoints)[newest] / f"global_step{newest}"
        assert (folder / f"zero_pp_rank_{rank}_mp_rank_00_optim_states.pt").is_file()
    before_kill = {step: loss for step, loss in first_losses.items() if step > newest}
    assert before_kill

    result = run_finetune(**step_args)

    assert result.metrics["resumed_from_step"] == newest
    assert result.metrics["global_step"] == max_steps
    resumed = {entry["step"]: entry["loss"] for entry in result.log_history if "loss" in entry}
    assert sorted(resumed) == list(range(1, max_steps + 1))
    for step, loss in before_kill.items():
        assert resumed[step] == pytest.approx(loss, abs=1e-3), (step, resumed[step], loss)
    config = json.loads((output / "config.json").read_text())
    assert config["id2label"] == {"0": "weather", "1": "sports", "2": "cooking"}
    resolved = json.loads((output / "llm_pipeline_config.json").read_text())
    assert resolved["resolved"]["deepspeed"]["zero_optimization"]["stage"] == 2
