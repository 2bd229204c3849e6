"""Each task's training pieces, as the worker gets them from the task object: its model's
Trainer and arguments (by the kind's facts), its collator, its loss, and what LoRA trains
whole beside the adapters. One tiny model per kind, a two-row batch, no process started."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from datasets import Dataset
from transformers import (
    Seq2SeqTrainingArguments,
    TrainingArguments,
)

from llm_pipeline.config import LoraSettings, ModelConfig, TrainConfig
from llm_pipeline.errors import ModelError, TrainError
from llm_pipeline.models.loading import load_model
from llm_pipeline.models.sources import load_tokenizer
from llm_pipeline.tasks import get_task
from llm_pipeline.tasks.kinds import CAUSAL_LM, CLASSIFIER, SEQ2SEQ
from llm_pipeline.tasks.text_classification.labels import LabelSet
from llm_pipeline.train.lora import apply_lora
from llm_pipeline.train.outputs import save_final_model
from llm_pipeline.train.trainer import FinetuneTrainer, Seq2SeqFinetuneTrainer, build_trainer
from llm_pipeline.train.trainer_settings import training_arguments

from ..offline_models import MINILM, TINY_LLAMA, TINY_T5
from .specs import unrun_spec

LABELS = LabelSet(names=("no", "yes"))
TINY_BERT = {
    "model_type": "bert",
    "hidden_size": 16,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "intermediate_size": 32,
}


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return load_tokenizer(ModelConfig(source=MINILM), kind=CLASSIFIER)


def _model(task: str, tokenizer: Any) -> torch.nn.Module:
    """The task's model as the worker builds it (`Task.build_model`), in a tiny shape."""
    architecture = {
        "summarization": TINY_T5,
        "instruction_tuning": TINY_LLAMA,
        "text_classification": TINY_BERT,
    }[task]
    torch.manual_seed(0)
    return get_task(task).build_model(
        ModelConfig(architecture=dict(architecture), tokenizer=MINILM),
        tokenizer,
        labels=LABELS.model_config_fields(),
    )


def _rows(task: str) -> list[dict[str, Any]]:
    """Two preprocessed rows of different lengths, as the task's preprocess saves them."""
    if task == "text_classification":
        return [{"input_ids": [2, 5, 3], "labels": 1}, {"input_ids": [2, 6, 7, 8, 3], "labels": 0}]
    if task == "instruction_tuning":  # the prompt's tokens are -100
        return [
            {"input_ids": [2, 5, 3], "attention_mask": [1] * 3, "labels": [-100, 5, 3]},
            {
                "input_ids": [2, 6, 7, 8, 3],
                "attention_mask": [1] * 5,
                "labels": [-100, -100, 7, 8, 3],
            },
        ]
    return [
        {"input_ids": [2, 5, 3], "attention_mask": [1, 1, 1], "labels": [9, 10, 3]},
        {"input_ids": [2, 6, 7, 8, 3], "attention_mask": [1] * 5, "labels": [11, 3]},
    ]


def _trainer(
    task: str, tokenizer: Any, arguments: TrainConfig | None = None, **options: Any
) -> FinetuneTrainer:
    """The task's Trainer with the finetune step's arguments for its kind, made from
    `arguments` (by default the plain Trainer, batch 2)."""
    arguments = arguments or TrainConfig(use_deepspeed=False, per_device_batch_size=2)
    return build_trainer(
        model=_model(task, tokenizer),
        tokenizer=tokenizer,
        args=training_arguments(
            arguments,
            output_dir="unused",
            precision="fp32",
            deepspeed=None,
            save_on_each_node=False,
            has_eval=False,
            kind=get_task(task).model_kind,
            cuda=False,
        ),
        train_dataset=options.pop("train_dataset", None) or Dataset.from_list(_rows(task)),
        eval_dataset=None,
        callbacks=[],
        sampling="sequential",
        task=get_task(task),
        **options,
    )


@pytest.mark.usefixtures("one_process_group")
@pytest.mark.parametrize(
    ("task", "trainer_class", "arguments_class", "counts_label_tokens"),
    [
        ("summarization", Seq2SeqFinetuneTrainer, Seq2SeqTrainingArguments, True),
        ("instruction_tuning", FinetuneTrainer, TrainingArguments, True),
        ("text_classification", FinetuneTrainer, TrainingArguments, False),
    ],
)
def test_each_task_trains_with_its_kinds_trainer_and_its_own_collator_and_loss(
    tokenizer: Any,
    task: str,
    trainer_class: type,
    arguments_class: type,
    counts_label_tokens: bool,
) -> None:
    trainer = _trainer(task, tokenizer, label_set=LABELS)
    assert type(trainer) is trainer_class
    assert type(trainer.args) is arguments_class
    assert trainer.labels_are_tokens is counts_label_tokens

    batch = trainer.data_collator(_rows(task))
    assert batch["input_ids"].shape == (2, 5)  # padded to the longer row
    if counts_label_tokens:
        assert (batch["labels"] == -100).any()  # the shorter target padded out of the loss
    else:
        assert batch["labels"].tolist() == [1, 0]  # one label id per row, no padding
    outputs = trainer.model(**batch)
    loss = trainer.compute_loss_func(outputs, batch["labels"])
    assert loss.ndim == 0 and torch.isfinite(loss)
    # A training forward fills no KV cache. The Trainer turns it off in the model's config,
    # which a T5's decoder does not read (it keeps a copy): its batches say so themselves.
    assert getattr(outputs, "past_key_values", None) is None
    if task == "summarization":
        assert batch["use_cache"] is False
        uncached = {name: value for name, value in batch.items() if name != "use_cache"}
        assert trainer.model(**uncached).past_key_values is not None


@pytest.mark.usefixtures("one_process_group")
@pytest.mark.parametrize("task", ["summarization", "instruction_tuning"])
def test_compiled_whole_or_by_blocks_a_model_is_saved_under_its_own_weight_names(
    tokenizer: Any, task: str, tmp_path: Path
) -> None:
    """`train.compile: true` compiles the model whole; `blocks` reaches the Accelerator,
    which compiles every block of each repeated stack (T5's encoder and decoder blocks,
    Llama's decoder layers) and leaves the model itself uncompiled. Either way the saved
    folder reloads as the trained model: compiled wrappers name each weight under
    `_orig_mod.`, and a folder saved so loaded as an untrained model (T5's tied embeddings
    refused to save at all). Checked where the Trainer prepares the model: torch compiles
    lazily, at the first forward, so nothing compiles here (benchmarks/compile_blocks.py
    times it)."""
    from torch._dynamo.eval_frame import OptimizedModule

    for mode, regional in ((True, False), ("blocks", True)):
        train = TrainConfig(use_deepspeed=False, per_device_batch_size=2, compile=mode)
        trainer = _trainer(task, tokenizer, train, train=train)
        assert trainer.args.torch_compile
        assert trainer.accelerator.state.dynamo_plugin.use_regional_compilation is regional
        # Rows padded to their batch's longest: traced with dynamic lengths from the start.
        assert trainer.accelerator.state.dynamo_plugin.dynamic is True
        prepared = trainer.accelerator.prepare_model(trainer.model)
        compiled = [m for m in prepared.modules() if isinstance(m, OptimizedModule)]
        if regional:
            assert not isinstance(prepared, OptimizedModule)
            repeated = "Block" if task == "summarization" else "DecoderLayer"
            blocks = [m for m in compiled if type(m._orig_mod).__name__.endswith(repeated)]
            # Two blocks in each of the tiny T5's stacks; the tiny Llama's two layers.
            assert len(blocks) == (4 if task == "summarization" else 2)
        else:
            assert isinstance(prepared, OptimizedModule)

        trainer.model_wrapped = prepared  # as Trainer.train leaves it
        with torch.no_grad():  # "trained": unlike any freshly initialised model
            for param in trainer.model.parameters():
                param.add_(0.5)
        folder = tmp_path / f"{task}-{mode}"
        spec = replace(
            unrun_spec(ModelConfig(source=MINILM), train, task=task),
            output_dir=str(folder),
            work_dir=str(tmp_path / "work"),
        )
        save_final_model(trainer, tokenizer, spec, resolved={})
        reloaded = type(trainer.model).from_pretrained(folder)
        trained = trainer.model.state_dict()
        for name, weight in reloaded.state_dict().items():
            torch.testing.assert_close(weight, trained[name], msg=name)


@pytest.mark.usefixtures("one_process_group")
def test_packed_rows_of_one_length_compile_for_that_length(tokenizer: Any) -> None:
    """Packed rows (with `position_ids`) all have the pack's length: torch.compile keeps its
    default, a graph for that length, which the packed Llama's 36% of an H100 was measured
    with; rows of many lengths are traced dynamic (the test above)."""
    rows = [
        {"input_ids": [2, 5, 3, 6], "position_ids": [0, 1, 0, 1], "labels": [-100, 5, -100, 6]}
    ] * 2
    train = TrainConfig(use_deepspeed=False, per_device_batch_size=2, compile=True)
    trainer = _trainer("instruction_tuning", tokenizer, train, train=train)
    assert trainer.accelerator.state.dynamo_plugin.dynamic is True  # unpacked, as above
    packed = _trainer(
        "instruction_tuning",
        tokenizer,
        train,
        train=train,
        train_dataset=Dataset.from_list(rows),
    )
    assert packed.accelerator.state.dynamo_plugin.dynamic is None


@pytest.mark.usefixtures("one_process_group")
def test_blocks_where_transformers_does_not_pass_it_on_is_refused_by_name(
    tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A transformers that builds its Accelerator without `_build_accelerator_args` would
    compile the whole model where the config asked for blocks: refused, not done silently."""
    from transformers import Trainer

    monkeypatch.setattr(FinetuneTrainer, "_build_accelerator_args", Trainer._build_accelerator_args)
    with pytest.raises(TrainError, match=r"train\.compile: blocks needs regional compilation"):
        _trainer("instruction_tuning", tokenizer, train=TrainConfig(compile="blocks"))


@pytest.mark.usefixtures("one_process_group")
def test_under_liger_a_causal_lm_computes_its_own_loss_the_same_token_mean(
    tokenizer: Any,
) -> None:
    """Liger's fused linear cross-entropy runs inside the model, only when the model gets the
    labels: under `train.kernels: liger` the Trainer has no `compute_loss_func` to take them
    (on an H100 one did, and the evaluation's `skip_logits` then failed). The model's own
    loss, which Liger's fused kernel computes in the same way (labels shifted, -100 ignored,
    summed over the step's label tokens), is the task's token mean. Liger's Triton kernels
    need CUDA; here the model's own loss stands in for them."""
    trainer = _trainer("instruction_tuning", tokenizer, train=TrainConfig(kernels="liger"))
    assert trainer.compute_loss_func is None
    assert _trainer("instruction_tuning", tokenizer).compute_loss_func is not None
    batch = trainer.data_collator(_rows("instruction_tuning"))
    for count in (None, torch.tensor(12)):  # this batch's label tokens; or the whole step's
        loss, outputs = trainer.compute_loss(
            trainer.model, dict(batch), return_outputs=True, num_items_in_batch=count
        )
        token_mean = get_task("instruction_tuning").training_loss(TrainConfig())
        torch.testing.assert_close(loss, token_mean(outputs, batch["labels"], count))


def test_a_causal_lms_loss_scores_each_token_from_the_one_before() -> None:
    """Instruction tuning's loss shifts the labels (`ModelKind.causal`); summarization's
    does not: on the same logits and labels they differ by exactly that shift."""
    logits = torch.randn(1, 4, 8)
    labels = torch.tensor([[-100, 3, 5, 1]])
    train = TrainConfig()
    causal = get_task("instruction_tuning").training_loss(train)
    seq2seq = get_task("summarization").training_loss(train)
    want = torch.nn.functional.cross_entropy(logits[0, :-1], labels[0, 1:])
    torch.testing.assert_close(causal({"logits": logits}, labels), want)
    torch.testing.assert_close(
        seq2seq({"logits": logits}, labels),
        torch.nn.functional.cross_entropy(logits[0], labels[0], ignore_index=-100),
    )


@pytest.mark.usefixtures("one_process_group")
def test_a_classifier_without_its_label_set_is_refused_by_name(tokenizer: Any) -> None:
    with pytest.raises(TrainError, match="a classifier trains on a label set"):
        _trainer("text_classification", tokenizer)
    task = get_task("text_classification")
    with pytest.raises(ModelError, match="a classifier is built for a label set"):
        task.build_model(ModelConfig(source=MINILM), tokenizer)


def test_a_classifier_weighs_its_labels_from_the_training_split() -> None:
    """`train.class_weights` reaches the loss through the task: the rare label's row
    weighs more, so the weighted loss differs from the plain one."""
    task = get_task("text_classification")
    data = Dataset.from_dict({"labels": [0, 0, 0, 1]})
    logits = torch.tensor([[2.0, 0.0], [0.0, 2.0]])
    labels = torch.tensor([1, 0])
    plain = task.training_loss(TrainConfig(), label_set=LABELS, train_set=data)
    weighted = task.training_loss(
        TrainConfig(class_weights="balanced"), label_set=LABELS, train_set=data
    )
    assert not torch.allclose(
        plain({"logits": logits}, labels), weighted({"logits": logits}, labels)
    )


def test_lora_trains_a_classifiers_head_whole_and_only_adapters_of_a_generator(
    tokenizer: Any,
) -> None:
    classifier = _model("text_classification", tokenizer)
    adapted = apply_lora(
        classifier,
        LoraSettings(r=2, target_modules=["query", "value"]),
        options=get_task("text_classification").lora_options(classifier),
    )
    trained = {n for n, p in adapted.named_parameters() if p.requires_grad}
    assert any(".modules_to_save." in n for n in trained)
    for task in ("instruction_tuning", "summarization"):
        assert get_task(task).lora_options(_model(task, tokenizer)) == {}


def test_the_model_kinds_say_what_the_layers_ask_of_them() -> None:
    """The facts train, models and config read, per kind."""
    facts = [
        (
            kind.encoder_decoder,
            kind.causal,
            kind.generates,
            kind.needs_pad_token,
            kind.compiles,
            kind.fused_kernels,
        )
        for kind in (SEQ2SEQ, CAUSAL_LM, CLASSIFIER)
    ]
    assert facts == [
        (True, False, True, False, True, False),
        (False, True, True, True, True, True),
        (False, False, False, True, False, False),
    ]


def test_the_generic_loader_leaves_a_classifier_to_its_task(tokenizer: Any) -> None:
    with pytest.raises(ModelError, match=r"a classifier is built by its task"):
        load_model(ModelConfig(source=MINILM), tokenizer, kind=CLASSIFIER)
