"""Causal LMs for instruction tuning load from every kind of source: an architecture config, a
local folder (safetensors or `.bin` only), `gs://`, a hub id (its offline failure), and an
encoder checkpoint warm-started as a decoder (the offline demo's MiniLM)."""

from __future__ import annotations

from pathlib import Path

import fsspec
import pytest
import torch
from transformers import AutoTokenizer, BertLMHeadModel, LlamaConfig, LlamaForCausalLM

from llm_pipeline import caches
from llm_pipeline.config import ModelConfig
from llm_pipeline.errors import ModelError
from llm_pipeline.models.loading import load_model
from llm_pipeline.models.sources import load_tokenizer, resolve_model_path
from llm_pipeline.tasks.kinds import CAUSAL_LM

from ..offline_models import MINILM, TINY_LLAMA


def _causal(config: ModelConfig) -> torch.nn.Module:
    return load_model(config, load_tokenizer(config, kind=CAUSAL_LM), kind=CAUSAL_LM)


def test_an_architecture_config_builds_a_causal_lm_with_the_tokenizers_ids() -> None:
    config = ModelConfig(architecture=dict(TINY_LLAMA), tokenizer=MINILM)
    tokenizer = load_tokenizer(config, kind=CAUSAL_LM)
    model = load_model(config, tokenizer, kind=CAUSAL_LM)
    assert isinstance(model, LlamaForCausalLM)
    # MiniLM's BERT tokenizer: [PAD] pads, [SEP] ends a response, [CLS] starts.
    assert model.config.pad_token_id == tokenizer.pad_token_id == 0
    assert model.config.eos_token_id == tokenizer.sep_token_id
    assert model.config.bos_token_id == tokenizer.cls_token_id
    assert model.config.vocab_size == len(tokenizer)


def test_a_bert_architecture_becomes_a_decoder() -> None:
    bert = {"model_type": "bert", "hidden_size": 32, "num_hidden_layers": 1}
    bert |= {"num_attention_heads": 2, "intermediate_size": 64}
    model = _causal(ModelConfig(architecture=bert, tokenizer=MINILM))
    assert isinstance(model, BertLMHeadModel) and model.config.is_decoder


def test_warm_start_decoder_keeps_minilms_weights_and_looks_only_back() -> None:
    from safetensors.torch import load_file

    model = _causal(ModelConfig(warm_start_decoder=MINILM))
    assert isinstance(model, BertLMHeadModel)
    assert model.config.is_decoder and not model.config.add_cross_attention
    assert model.config.eos_token_id == 102 and model.config.pad_token_id == 0  # [SEP], [PAD]
    pretrained = load_file(Path(resolve_model_path(MINILM)) / "model.safetensors")
    state = model.state_dict()
    for name in ("embeddings.word_embeddings.weight", "encoder.layer.5.output.dense.weight"):
        assert torch.equal(state[f"bert.{name}"], pretrained[name]), name
    # The output projection is the word embedding matrix (tied), not a fresh random one.
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    model.eval()
    ids = torch.tensor([[101, 2054, 2515, 1996, 3853, 2079, 102]])
    changed = ids.clone()
    changed[0, 4:] = torch.tensor([7592, 2088, 102])
    with torch.no_grad():
        a, b = model(input_ids=ids).logits, model(input_ids=changed).logits
    # Causal: what comes later cannot change what came before.
    assert torch.allclose(a[0, :4], b[0, :4], atol=1e-5)
    assert not torch.allclose(a[0, 4:], b[0, 4:], atol=1e-3)


def _llama_folder(folder: Path, *, safetensors: bool = True) -> LlamaForCausalLM:
    """A tiny Llama saved as a checkpoint folder; its tokenizer has an EOS and no pad token,
    as Llama's and Qwen's have."""
    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(MINILM))
    tokenizer.eos_token = "[SEP]"
    tokenizer.pad_token = None
    settings = {k: v for k, v in TINY_LLAMA.items() if k != "model_type"}
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tokenizer), **settings))
    if safetensors:
        model.save_pretrained(folder)
    else:  # as the hub serves .bin-only checkpoints: config.json + pytorch_model.bin
        folder.mkdir()
        model.config.save_pretrained(folder)
        torch.save(model.state_dict(), folder / "pytorch_model.bin")
    tokenizer.save_pretrained(folder)
    return model


@pytest.mark.parametrize("safetensors", [True, False], ids=["safetensors", "bin-only"])
def test_a_local_folder_loads_with_eos_as_the_missing_pad(
    tmp_path: Path, safetensors: bool
) -> None:
    original = _llama_folder(tmp_path / "llama", safetensors=safetensors)
    assert bool(list((tmp_path / "llama").glob("*.safetensors"))) is safetensors
    config = ModelConfig(source=str(tmp_path / "llama"))
    tokenizer = load_tokenizer(config, kind=CAUSAL_LM)
    model = load_model(config, tokenizer, kind=CAUSAL_LM)
    assert tokenizer.pad_token == tokenizer.eos_token == "[SEP]"
    assert model.config.pad_token_id == model.generation_config.pad_token_id == 102
    for name, tensor in original.state_dict().items():
        assert torch.equal(model.state_dict()[name], tensor), name


def test_a_gcs_folder_loads(
    gcs_bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(caches.ENV_VAR, str(tmp_path / "cache"))
    original = _llama_folder(tmp_path / "llama")
    uri = f"gs://{gcs_bucket}/models/llama"
    fsspec.filesystem("gs").put(str(tmp_path / "llama"), uri, recursive=True)
    model = _causal(ModelConfig(source=uri))
    assert isinstance(model, LlamaForCausalLM)
    weight = "model.layers.1.mlp.up_proj.weight"
    assert torch.equal(model.state_dict()[weight], original.state_dict()[weight])


def test_an_unreachable_hub_id_says_what_was_tried(monkeypatch: pytest.MonkeyPatch) -> None:
    # huggingface_hub reads HF_HUB_OFFLINE once, at import: the variable alone, set now, would
    # leave it trying the network (about 45 s of retries on a machine without one).
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    config = ModelConfig(source="facebook/opt-125m", tokenizer=MINILM)
    with pytest.raises(ModelError) as refused:
        _causal(config)
    message = str(refused.value)
    assert message.startswith(
        "model.source 'facebook/opt-125m': could not load a causal LM from hub id"
    )
    assert "cannot reach the Hugging Face hub" in message


def test_the_model_sources_of_the_other_kind_are_refused() -> None:
    pair = ModelConfig(encoder_decoder={"encoder": MINILM, "decoder": MINILM})
    with pytest.raises(ModelError, match=r"model\.encoder_decoder builds a seq2seq model"):
        _causal(pair)
    decoder = ModelConfig(warm_start_decoder=MINILM)
    with pytest.raises(ModelError, match=r"model\.warm_start_decoder builds a causal LM"):
        load_model(decoder, load_tokenizer(decoder))
