"""Packing: packed rows hold exactly the unpacked examples' tokens, no label crosses from
one example into the next, and a model that keeps examples apart gives the same loss
packed as unpacked; a model that does not is left unpacked, with the reason logged."""

import logging
from pathlib import Path
from typing import Any

import datasets
import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM, DataCollatorForSeq2Seq

from llm_pipeline.config import DataConfig, ModelConfig
from llm_pipeline.data.preprocess import preprocess_dataset
from llm_pipeline.models import load_tokenizer
from llm_pipeline.tasks import get_task
from llm_pipeline.tasks.instruction_tuning.packing import keeps_examples_apart, pack_bins
from llm_pipeline.train.collators import CausalLMCollator

from ..docstring_data import DocstringData
from ..offline_models import MINILM

LLAMA = {
    "model_type": "llama",
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
}
OPT = {
    "model_type": "opt",
    "hidden_size": 32,
    "ffn_dim": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "word_embed_proj_dim": 32,
}
MAX_LENGTH = 96


def _instructions(docstring_data: DocstringData, count: int) -> list[dict[str, str]]:
    """Real questions and answers of varied length (the docstring pairs, asked back)."""
    return [
        {"prompt": f"What does `{row['document'].split(':')[0]}` do?", "response": row["summary"]}
        for row in docstring_data.rows("train", count)
    ]


def _preprocess(
    folder: Path, rows: list[dict[str, str]], architecture: dict[str, Any], packing: bool
) -> datasets.DatasetDict:
    splits = {"train": rows, "validation": rows[:4]}
    datasets.DatasetDict(
        {name: datasets.Dataset.from_list(split) for name, split in splits.items()}
    ).save_to_disk(str(folder / "in"))
    preprocess_dataset(
        dataset_dir=folder / "in",
        output_dir=folder / "out",
        data=DataConfig(
            dataset="unused-here",
            columns={"prompt": "prompt", "response": "response"},
            max_length=MAX_LENGTH,
            packing=packing,
        ),
        model=ModelConfig(architecture=architecture, tokenizer=MINILM),
        task=get_task("instruction_tuning"),
    )
    return datasets.load_from_disk(str(folder / "out"))


@pytest.fixture(scope="module")
def both(
    docstring_data: DocstringData, tmp_path_factory: pytest.TempPathFactory
) -> tuple[datasets.Dataset, datasets.Dataset]:
    """The same 120 examples preprocessed unpacked and packed, for a tiny Llama."""
    rows = _instructions(docstring_data, 120)
    root = tmp_path_factory.mktemp("packing")
    plain = _preprocess(root / "plain", rows, LLAMA, packing=False)["train"]
    packed = _preprocess(root / "packed", rows, LLAMA, packing=True)["train"]
    return plain, packed


def _examples(row: dict[str, list[int]]) -> list[tuple[list[int], list[int]]]:
    """A packed row cut back into (ids, labels) per example, where positions restart."""
    starts = [i for i, position in enumerate(row["position_ids"]) if position == 0]
    ends = [*starts[1:], len(row["input_ids"])]
    return [(row["input_ids"][a:b], row["labels"][a:b]) for a, b in zip(starts, ends, strict=True)]


def test_packed_rows_hold_the_same_tokens_as_the_unpacked_examples(both: Any) -> None:
    plain, packed = both
    assert packed.column_names == ["input_ids", "labels", "position_ids"]
    assert len(packed) < len(plain) / 2  # short examples: two or more to a row
    assert {len(ids) for ids in packed["input_ids"]} == {MAX_LENGTH}
    pieces = [example for row in packed for example in _examples(row)]
    expected = sorted((tuple(row["input_ids"]), tuple([-100, *row["labels"][1:]])) for row in plain)
    # Each row ends in one run of padding (its own "example", every label -100).
    padding = [piece for piece in pieces if set(piece[1]) == {-100} and len(set(piece[0])) == 1]
    unpacked = sorted(
        (tuple(ids), tuple(labels)) for ids, labels in pieces if (ids, labels) not in padding
    )
    assert unpacked == expected


def test_no_label_crosses_an_example_boundary(both: Any) -> None:
    _, packed = both
    for row in packed:
        for index, position in enumerate(row["position_ids"]):
            if position == 0:  # an example starts: the token before it must not predict it
                assert row["labels"][index] == -100
            else:
                assert position == row["position_ids"][index - 1] + 1


def test_packed_batches_train_on_the_same_loss_as_unpacked_ones(both: Any) -> None:
    """Per-token losses of a tiny Llama: summed over a batch of packed rows, through the
    packed collator, they equal their sum over the same examples one to a row (padded, with
    an attention mask): attention and labels stay within each example."""
    _, packed = both
    tokenizer = load_tokenizer(ModelConfig(architecture=LLAMA, tokenizer=MINILM))
    torch.manual_seed(0)
    config = AutoConfig.for_model(vocab_size=len(tokenizer), **LLAMA)
    model = AutoModelForCausalLM.from_config(config).eval()
    # transformers' default, here and on a GPU: the implementation packed rows train under.
    assert model.config._attn_implementation == "sdpa"

    def summed_loss(batch: dict[str, Any]) -> tuple[float, int]:
        labels = batch.pop("labels")
        with torch.no_grad():
            logits = model(**batch).logits
        losses = torch.nn.functional.cross_entropy(
            logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten(), reduction="sum"
        )
        return float(losses), int((labels[:, 1:] != -100).sum())

    rows = [packed[i] for i in range(6)]
    together = summed_loss(CausalLMCollator(pad_id=0)(rows))
    examples = [
        {"input_ids": ids, "attention_mask": [1] * len(ids), "labels": labels}
        for row in rows
        for ids, labels in _examples(row)
        if set(labels) != {-100}  # the padding at a row's end
    ]
    apart = summed_loss(DataCollatorForSeq2Seq(tokenizer, label_pad_token_id=-100)(examples))
    assert len(examples) > len(rows)
    assert together[1] == apart[1]
    assert together[0] == pytest.approx(apart[0], rel=1e-5)


def test_best_fit_bins_respect_the_row_length_and_keep_every_example_once() -> None:
    lengths = [50, 10, 30, 90, 60, 40, 5, 5, 20]
    bins = pack_bins(lengths, 100)
    assert sorted(i for members in bins for i in members) == list(range(len(lengths)))
    assert all(sum(lengths[i] for i in members) <= 100 for members in bins)
    assert len(bins) == 4  # 310 tokens: the fewest rows of 100 that can hold them
    assert pack_bins(lengths, 100) == bins
    with pytest.raises(ValueError, match="example 3 has 90 tokens"):
        pack_bins(lengths, 80)


def test_models_whose_attention_crosses_packed_examples_are_told_apart() -> None:
    tokenizer = load_tokenizer(ModelConfig(source=MINILM))
    assert (
        keeps_examples_apart(ModelConfig(architecture=LLAMA, tokenizer=MINILM), tokenizer) is None
    )
    opt = keeps_examples_apart(ModelConfig(architecture=OPT, tokenizer=MINILM), tokenizer)
    assert opt is not None and opt.startswith("opt with sdpa attention lets packed examples")
    bert = keeps_examples_apart(ModelConfig(source=MINILM), tokenizer)
    assert bert is not None and bert.startswith("bert with")


def test_a_warm_started_decoder_is_probed_as_the_decoder_it_becomes() -> None:
    # The demo's model: the probe was not built ("cannot run a small model of its
    # architecture to check (ValueError: an encoder-decoder pair is not a causal LM)"),
    # so the log gave a wrong reason for leaving train unpacked.
    tokenizer = load_tokenizer(ModelConfig(warm_start_decoder=MINILM))
    why = keeps_examples_apart(ModelConfig(warm_start_decoder=MINILM), tokenizer)
    assert why is not None
    assert why.startswith("bert with"), why
    assert why.endswith(
        "lets packed examples attend to each other (its causal mask does not "
        "follow the position ids)"
    ), why


def test_a_model_that_would_mix_examples_is_not_packed_and_the_log_says_so(
    docstring_data: DocstringData, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="llm_pipeline.data.preprocess")
    out = _preprocess(tmp_path, _instructions(docstring_data, 20), OPT, packing=True)
    assert "position_ids" not in out["train"].column_names
    assert len(out["train"]) == 20
    assert "data.packing: train stays unpacked" in caplog.text
    assert "opt with sdpa attention lets packed examples attend to each other" in caplog.text
