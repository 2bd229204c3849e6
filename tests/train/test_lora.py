"""LoRA (`train.lora`): only the adapters train, and the finetune step ships the merged model
with the adapter beside it.

The ZeRO-3 run on two ranks that is killed and resumes is tests/train/test_resume.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from kfp.dsl import Metrics, Model

from llm_pipeline.config import ClusterConfig, LoraSettings, ModelConfig, TrainConfig
from llm_pipeline.errors import TrainError
from llm_pipeline.tasks import get_task

from .lora_checks import assert_merged_is_base_plus_adapter

Settings = Callable[..., TrainConfig]


def _tiny_t5(model: ModelConfig) -> torch.nn.Module:
    from llm_pipeline.models.loading import load_model
    from llm_pipeline.models.sources import load_tokenizer

    torch.manual_seed(0)
    return load_model(model, load_tokenizer(model))


def test_only_the_adapters_train_and_the_base_stays_bit_identical(
    tokenized_docstrings_tiny: Path,
    tiny_t5_model: ModelConfig,
    tmp_path: Path,
) -> None:
    """The project's Trainer, without DeepSpeed, on a tiny T5 with adapters on every linear
    layer: after a few steps at a high learning rate every adapter has moved and every base
    weight is exactly what it was."""
    from datasets import load_from_disk
    from transformers import Seq2SeqTrainingArguments

    from llm_pipeline.models.sources import load_tokenizer
    from llm_pipeline.train.lora import apply_lora
    from llm_pipeline.train.trainer import build_trainer

    model = apply_lora(_tiny_t5(tiny_t5_model), LoraSettings(r=4))
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    splits = load_from_disk(str(tokenized_docstrings_tiny))
    trainer = build_trainer(
        model=model,
        tokenizer=load_tokenizer(tiny_t5_model),
        # One process without a process group (`training_arguments` sets up gloo for torchrun).
        args=Seq2SeqTrainingArguments(
            output_dir=str(tmp_path / "checkpoints"),
            max_steps=3,
            per_device_train_batch_size=4,
            learning_rate=1e-2,
            use_cpu=True,
            save_strategy="no",
            report_to="none",
            disable_tqdm=True,
        ),
        train_dataset=splits["train"],
        eval_dataset=None,
        callbacks=[],
        sampling="sequential",
        task=get_task("summarization"),
    )

    try:
        trainer.train()
    finally:
        from accelerate.state import AcceleratorState

        # The Trainer's process state is a singleton; later tests set up their own.
        AcceleratorState._reset_state(reset_partial_state=True)

    after = dict(model.named_parameters())
    for name, value in before.items():
        if name in trainable:
            if ".lora_B." in name:  # starts at zero: the adapted model starts as the base
                assert not torch.equal(after[name], value), f"{name} did not train"
        else:
            assert torch.equal(after[name], value), f"{name} changed but is not an adapter"


#: Tiny models of each family the merge must handle: a seq2seq model, a causal LM with
#: linear layers, and one with GPT-2's transposed `Conv1D` layers.
ARCHITECTURES = {
    "t5": (
        "T5Config",
        "T5ForConditionalGeneration",
        {"d_model": 32, "d_ff": 64, "num_layers": 2, "num_heads": 2, "d_kv": 16},
    ),
    "llama": (
        "LlamaConfig",
        "LlamaForCausalLM",
        {
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
        },
    ),
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", {"n_embd": 32, "n_layer": 2, "n_head": 2}),
}


@pytest.mark.parametrize("family", sorted(ARCHITECTURES))
def test_the_merged_model_gives_the_adapted_models_logits(family: str, tmp_path: Path) -> None:
    """What `save_final_model` writes for a LoRA run, reloaded as any model is: its logits
    are those of the model with its (trained, here random) adapters on, within fp32
    tolerance, and it holds no adapter weights."""
    import transformers

    from llm_pipeline.train.lora import apply_lora, merge_into_base, without_prefix

    config_class, model_class, shape = ARCHITECTURES[family]
    model_type = getattr(transformers, model_class)
    torch.manual_seed(0)
    base = model_type(getattr(transformers, config_class)(vocab_size=100, **shape))
    adapted = apply_lora(base, LoraSettings(r=4)).eval()
    with torch.no_grad():
        for name, param in adapted.named_parameters():
            if ".lora_B." in name:  # zero at the start; trained adapters are not
                param.normal_(0, 0.1)
    inputs = {"input_ids": torch.randint(0, 100, (2, 7))}
    if base.config.is_encoder_decoder:
        inputs["decoder_input_ids"] = torch.randint(0, 100, (2, 5))
    with torch.no_grad():
        want = adapted(**inputs).logits
        with adapted.disable_adapter():
            unadapted = adapted(**inputs).logits
    assert (want - unadapted).abs().max() > 0.01  # the adapters matter

    merged, prefix = merge_into_base(adapted)
    state = without_prefix(adapted.state_dict(), prefix)
    merged.save_pretrained(tmp_path, state_dict=state)
    reloaded = model_type.from_pretrained(tmp_path).eval()

    assert not any("lora_" in name or "base_layer" in name for name in reloaded.state_dict())
    with torch.no_grad():
        got = reloaded(**inputs).logits
    # fp32 sums in another order (x @ (W + BA) against x @ W + x @ A @ B).
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def _tiny(family: str) -> torch.nn.Module:
    import transformers

    config_class, model_class, shape = ARCHITECTURES[family]
    torch.manual_seed(0)
    config = getattr(transformers, config_class)(vocab_size=100, **shape)
    return getattr(transformers, model_class)(config)


def _dtypes(model: torch.nn.Module) -> dict[bool, set[torch.dtype]]:
    """The dtypes of the parameters that train (True) and of those that do not (False)."""
    found: dict[bool, set[torch.dtype]] = {True: set(), False: set()}
    for param in model.parameters():
        found[param.requires_grad].add(param.dtype)
    return found


@pytest.mark.parametrize("family", ["llama", "t5"])
def test_without_deepspeed_a_bf16_lora_model_keeps_its_frozen_base_in_bf16(family: str) -> None:
    """Half the weight memory and no per-step casts of frozen weights; the adapters stay
    fp32 for AdamW and get fp32 gradients under bf16 autocast; tied weights stay tied."""
    from llm_pipeline.train.lora import apply_lora, keep_frozen_in

    model = apply_lora(_tiny(family), LoraSettings(r=4))
    tied = model.get_input_embeddings().weight is model.get_output_embeddings().weight
    keep_frozen_in(model, torch.bfloat16)

    assert _dtypes(model) == {True: {torch.float32}, False: {torch.bfloat16}}
    assert (model.get_input_embeddings().weight is model.get_output_embeddings().weight) == tied
    inputs = {"input_ids": torch.randint(0, 100, (2, 7)), "labels": torch.randint(0, 100, (2, 7))}
    if family == "t5":
        inputs["decoder_input_ids"] = torch.randint(0, 100, (2, 7))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(**inputs).loss
    loss.backward()
    assert torch.isfinite(loss)
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert grads and all(g is not None and g.dtype == torch.float32 for g in grads)


@pytest.mark.parametrize("family", ["llama", "t5"])
def test_under_autocast_adapters_take_their_input_uncast_and_compute_the_same(
    family: str,
) -> None:
    """PEFT's cast of each adapter's input to fp32 is undone by autocast at the adapter's
    matmul: without it the loss and the adapters' gradients are the same, and the step
    makes one fp32 copy fewer per adapted layer."""
    from peft.helpers import disable_input_dtype_casting
    from peft.tuners.tuners_utils import BaseTunerLayer

    from llm_pipeline.train.lora import apply_lora, keep_frozen_in

    model = apply_lora(_tiny(family), LoraSettings(r=4, dropout=0.0))
    keep_frozen_in(model, torch.bfloat16)
    adapted = [m for m in model.modules() if isinstance(m, BaseTunerLayer)]
    assert adapted and not any(m.cast_input_dtype_enabled for m in adapted)
    inputs = {"input_ids": torch.randint(0, 100, (2, 7)), "labels": torch.randint(0, 100, (2, 7))}
    if family == "t5":
        inputs["decoder_input_ids"] = torch.randint(0, 100, (2, 7))

    def step() -> tuple[torch.Tensor, list[torch.Tensor], int]:
        model.zero_grad()
        torch.manual_seed(0)  # T5's dropout draws the same masks each time
        fp32_copies = 0
        original = torch.Tensor.to

        def to(tensor: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
            nonlocal fp32_copies
            result = original(tensor, *args, **kwargs)  # type: ignore[arg-type]
            fp32_copies += result.dtype == torch.float32 and tensor.dtype != torch.float32
            return result

        torch.Tensor.to = to  # type: ignore[method-assign]
        try:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(**inputs).loss
        finally:
            torch.Tensor.to = original  # type: ignore[method-assign]
        loss.backward()
        grads = [p.grad.clone() for p in model.parameters() if p.requires_grad]  # type: ignore[union-attr]
        return loss.detach(), grads, fp32_copies

    uncast_loss, uncast_grads, uncast_copies = step()
    with disable_input_dtype_casting(model, active=False):
        for module in adapted:
            module.cast_input_dtype_enabled = True  # PEFT's default, for comparison
        cast_loss, cast_grads, cast_copies = step()
    assert torch.equal(uncast_loss, cast_loss)
    assert all(torch.equal(a, b) for a, b in zip(uncast_grads, cast_grads, strict=True))
    assert cast_copies - uncast_copies >= len(adapted)


def test_under_fp16_the_modules_transformers_keeps_in_fp32_stay_fp32() -> None:
    """T5's `wo` (`_keep_in_fp32_modules`), as `from_pretrained(dtype=float16)` leaves it."""
    from llm_pipeline.train.lora import apply_lora, keep_frozen_in

    model = apply_lora(_tiny("t5"), LoraSettings(r=4, target_modules=["q", "v"]))
    keep_frozen_in(model, torch.float16)

    frozen = {n: p.dtype for n, p in model.named_parameters() if not p.requires_grad}
    assert {d for n, d in frozen.items() if ".wo." in n} == {torch.float32}
    assert {d for n, d in frozen.items() if ".wo." not in n} == {torch.float16}


def test_a_classifiers_head_trains_in_fp32_beside_a_bf16_base() -> None:
    """The head LoRA trains whole (`modules_to_save`) is fp32; its frozen original is bf16."""
    from transformers import BertConfig, BertForSequenceClassification

    from llm_pipeline.train.lora import apply_lora, keep_frozen_in

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        num_labels=3,
    )
    base = BertForSequenceClassification(config)
    options = get_task("text_classification").lora_options(base)
    model = apply_lora(base, LoraSettings(r=4), options=options)
    keep_frozen_in(model, torch.bfloat16)

    trained = {n: p.dtype for n, p in model.named_parameters() if p.requires_grad}
    assert any("classifier.modules_to_save" in n for n in trained)
    assert set(trained.values()) == {torch.float32}
    assert _dtypes(model)[False] == {torch.bfloat16}


def test_a_bf16_base_lora_run_resumes_from_its_checkpoint_where_it_left_off(
    tokenized_docstrings_tiny: Path, tiny_t5_model: ModelConfig, tmp_path: Path
) -> None:
    """The plain Trainer under bf16 autocast with the base kept in bf16: a run resumed from
    its step-2 checkpoint (the adapter and the optimizer's fp32 state), its own adapters
    scrambled first, ends with the adapters of the run that never stopped."""
    from datasets import load_from_disk
    from transformers import Seq2SeqTrainingArguments

    from llm_pipeline.models.sources import load_tokenizer
    from llm_pipeline.train.lora import apply_lora, keep_frozen_in
    from llm_pipeline.train.trainer import build_trainer

    splits = load_from_disk(str(tokenized_docstrings_tiny))

    def run(folder: Path, resume: str | None) -> dict[str, torch.Tensor]:
        from accelerate.state import AcceleratorState

        model = apply_lora(_tiny_t5(tiny_t5_model), LoraSettings(r=4, dropout=0.0))
        keep_frozen_in(model, torch.bfloat16)
        if resume is not None:  # what the run starts with must not matter: it resumes
            with torch.no_grad():
                for param in model.parameters():
                    if param.requires_grad:
                        param.normal_(0, 1)
        args = Seq2SeqTrainingArguments(
            output_dir=str(folder),
            max_steps=4,
            save_steps=2,
            per_device_train_batch_size=4,
            learning_rate=1e-2,
            bf16=True,
            use_cpu=True,
            report_to="none",
            disable_tqdm=True,
        )
        trainer = build_trainer(
            model=model,
            tokenizer=load_tokenizer(tiny_t5_model),
            args=args,
            train_dataset=splits["train"],
            eval_dataset=None,
            callbacks=[],
            sampling="sequential",
            task=get_task("summarization"),
        )
        try:
            trainer.train(resume_from_checkpoint=resume)
        finally:
            AcceleratorState._reset_state(reset_partial_state=True)
        assert _dtypes(model) == {True: {torch.float32}, False: {torch.bfloat16}}
        return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}

    whole = run(tmp_path / "whole", None)
    resumed = run(tmp_path / "resumed", str(tmp_path / "whole" / "checkpoint-2"))
    assert whole.keys() == resumed.keys()
    for name, value in whole.items():
        torch.testing.assert_close(resumed[name], value, msg=name)


@pytest.mark.parametrize(
    ("lora", "precision", "deepspeed", "want"),
    [
        (True, "bf16", None, torch.bfloat16),
        (True, "fp16", None, torch.float16),
        (True, "fp32", None, None),
        (True, "bf16", {"zero_optimization": {"stage": 3}}, None),  # DeepSpeed casts itself
        (False, "bf16", None, None),  # full fine-tuning: what trains stays fp32
    ],
)
def test_only_a_16bit_lora_run_without_deepspeed_casts_its_base(
    lora: bool, precision: str, deepspeed: dict | None, want: torch.dtype | None
) -> None:
    from llm_pipeline.train.worker import _frozen_dtype

    spec = SimpleNamespace(train=SimpleNamespace(lora=LoraSettings() if lora else None))
    args = SimpleNamespace(deepspeed=deepspeed)
    assert _frozen_dtype(spec, precision, args) == want  # type: ignore[arg-type]


def test_a_target_module_the_model_lacks_is_named_with_those_it_has(
    tiny_t5_model: ModelConfig,
) -> None:
    from llm_pipeline.train.lora import apply_lora

    with pytest.raises(TrainError) as caught:
        apply_lora(_tiny_t5(tiny_t5_model), LoraSettings(target_modules=["q_proj", "v_proj"]))

    message = str(caught.value)
    assert message.startswith("train.lora.target_modules: ")
    assert "q_proj" in message
    assert "are named: k, lm_head, o, q, v, wi, wo" in message


def test_summarization_with_lora_through_the_finetune_step(
    tokenized_docstrings_tiny: Path,
    tiny_t5_folder: Path,
    train_settings: Settings,
    tmp_path: Path,
) -> None:
    """The component's body, under DeepSpeed ZeRO-2 with a checkpoint on the way: the step's
    model artifact is the merged model, loadable as evaluation and the server load any
    other, with the adapter in `adapter/`; the metrics count what trained."""
    train = train_settings(
        max_steps=4, save_steps=2, learning_rate=1e-2, zero_stage=2, lora=LoraSettings(r=8)
    )
    trained_model, metrics = _finetune_step(
        tiny_t5_folder, tokenized_docstrings_tiny, train, tmp_path
    )

    checkpoint = next((tmp_path / "checkpoints").glob("run-*/checkpoint-2"))
    assert {"COMPLETE.json", "adapter_model.safetensors"} <= {p.name for p in checkpoint.iterdir()}
    folder = Path(trained_model.path)
    assert {"config.json", "model.safetensors", "tokenizer.json", "adapter"} <= {
        p.name for p in folder.iterdir()
    }
    assert {p.name for p in (folder / "adapter").iterdir()} >= {
        "adapter_config.json",
        "adapter_model.safetensors",
    }
    assert_merged_is_base_plus_adapter(folder, tiny_t5_folder)
    logged = metrics.metadata
    assert logged["global_step"] == 4
    # r x (in + out) per adapted layer: q, k, v, o (32 -> 32), wi (32 -> 64), wo (64 -> 32),
    # 2 encoder layers with self-attention and 2 decoder layers with self- and cross-attention.
    per_layer = {"attention": 4 * 8 * (32 + 32), "feed_forward": 2 * 8 * (32 + 64)}
    adapters = 2 * (per_layer["attention"] + per_layer["feed_forward"]) + 2 * (
        2 * per_layer["attention"] + per_layer["feed_forward"]
    )
    assert logged["trainable_parameters"] == adapters
    base = sum(p.numel() for p in _tiny_t5_parameters(tiny_t5_folder))
    assert logged["total_parameters"] == base + adapters
    resolved = json.loads((folder / "llm_pipeline_config.json").read_text())
    assert resolved["train"]["lora"]["r"] == 8
    assert resolved["resolved"]["deepspeed"]["zero_optimization"]["stage"] == 2


def test_bf16_lora_without_deepspeed_through_the_finetune_step(
    tokenized_docstrings_tiny: Path,
    tiny_t5_folder: Path,
    train_settings: Settings,
    tmp_path: Path,
) -> None:
    """The plain Trainer (`zero_stage` 0, what `auto` picks when the base fits) under bf16
    autocast on the CPU, the base kept in bf16: the loss falls, checkpoints hold the
    adapter, and the model folder is the merged model in bf16, its config saying so,
    loadable as evaluation loads any model, equal to the bf16 base plus the adapter."""
    from safetensors import safe_open

    train = train_settings(
        max_steps=4,
        save_steps=2,
        learning_rate=1e-2,
        zero_stage=0,
        precision="bf16",
        lora=LoraSettings(r=8),
    )
    trained_model, _ = _finetune_step(tiny_t5_folder, tokenized_docstrings_tiny, train, tmp_path)

    checkpoint = next((tmp_path / "checkpoints").glob("run-*/checkpoint-2"))
    assert {"COMPLETE.json", "adapter_model.safetensors"} <= {p.name for p in checkpoint.iterdir()}
    folder = Path(trained_model.path)
    log = json.loads((folder / "training_log.json").read_text())
    losses = [entry["loss"] for entry in log if "loss" in entry]
    assert len(losses) == 4 and losses[-1] < losses[0]
    assert json.loads((folder / "config.json").read_text())["dtype"] == "bfloat16"
    with safe_open(str(folder / "model.safetensors"), "pt") as weights:
        names = weights.keys()  # a safe_open handle is not iterable
        assert {weights.get_slice(name).get_dtype() for name in names} == {"BF16"}
    assert_merged_is_base_plus_adapter(folder, tiny_t5_folder, kept_in=torch.bfloat16)
    resolved = json.loads((folder / "llm_pipeline_config.json").read_text())["resolved"]
    assert resolved["precision"] == "bf16" and resolved["deepspeed"] is None


def _finetune_step(
    model_folder: Path, dataset: Path, train: TrainConfig, tmp_path: Path
) -> tuple[Model, Metrics]:
    """The finetune component run as the pipeline runs it, on one process: its Model and
    Metrics artifacts (checkpoints under `tmp_path/checkpoints`)."""
    from llm_pipeline import components

    trained_model = Model(uri=str(tmp_path / "trained_model"))
    metrics = Metrics(uri=str(tmp_path / "metrics"))
    components.finetune.python_func(
        task="summarization",
        model=ModelConfig(source=str(model_folder)).model_dump_json(),
        train=train.model_dump_json(),
        cluster=ClusterConfig(processes=1).model_dump_json(),
        dataset=SimpleNamespace(path=str(dataset)),
        trained_model=trained_model,
        metrics=metrics,
        logs=SimpleNamespace(path=str(tmp_path / "logs")),
    )
    return trained_model, metrics


def _tiny_t5_parameters(folder: Path) -> list[torch.nn.Parameter]:
    from transformers import AutoModelForSeq2SeqLM

    return list(AutoModelForSeq2SeqLM.from_pretrained(folder).parameters())


@pytest.mark.slow
def test_zero3_gathers_no_adapter_in_forward_or_backward(tmp_path: Path) -> None:
    """Two ranks, ZeRO-3, a tiny Llama with LoRA on every linear layer, counted by
    benchmarks/lora_gathers.py (which wraps DeepSpeed's gather entry points in its ranks):
    after the step that records ZeRO-3's trace, forward and backward gather the base weights
    alone, so LoRA needs no more gathers per step than full fine-tuning. With Hugging Face's
    threshold (10 x hidden size) every adapter above it was gathered again at every step.
    With each LoRA layer a ZeRO-3 leaf (the finetune step's way) the module fetches are full
    fine-tuning's too, and the training is that without leaves."""
    import os
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    output = tmp_path / "gathers.json"
    command = [sys.executable, str(repo / "benchmarks" / "lora_gathers.py")]
    # Two steps: the first records ZeRO-3's trace, the second is counted (the benchmark
    # counts every later step alike: a third adds a launch's worth of seconds, no check).
    command += ["--settings", "full,lora,lora-leaf", "--steps", "2", "--seq-len", "16"]
    env = {**os.environ, "PYTHONPATH": str(repo / "src")}
    done = subprocess.run(
        [*command, "--json", str(output)], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    full, lora, leaf = json.loads(output.read_text())
    assert [r["setting"] for r in (full, lora, leaf)] == ["full", "lora", "lora-leaf"]
    for step in (*lora["steps"], *leaf["steps"]):
        assert step.get("fetch_params", 0) > 0  # the base weights are still partitioned
        assert step.get("fetch_adapters", 0) == 0, step
    per_step = [
        {s.get("fetch_gathers", 0) + s.get("other_gathers", 0) for s in r["steps"]}
        for r in (full, lora, leaf)
    ]
    assert max(per_step[1]) <= min(per_step[0]) and per_step[2] == per_step[1], per_step
    fetches = [{s["module_fetches"] for s in r["steps"]} for r in (full, lora, leaf)]
    assert fetches[2] == fetches[0] and min(fetches[1]) > 2 * max(fetches[0]), fetches
    assert leaf["compared_with"] == "lora" and leaf["alike"], leaf


@pytest.fixture
def zero3_in_process(monkeypatch: pytest.MonkeyPatch, one_process_group: None) -> None:
    """A gloo group of this process alone, and what DeepSpeed leaves in it put back after
    the test: zero.Init swaps torch's F.linear for its own for the rest of the process ("This
    will persist unless manually reset"; later tests count what torch's linear keeps for
    backward), and DeepSpeed keeps the world group it cloned (each test's group is new)."""
    import deepspeed.utils.groups

    from llm_pipeline.train import op_builds

    op_builds.install()  # DeepSpeed's CPU op loads under the flock every loader here takes
    monkeypatch.setattr(torch.nn.functional, "linear", torch.nn.functional.linear)
    monkeypatch.setattr(deepspeed.utils.groups, "_WORLD_GROUP", None)


def _two_steps(
    model: torch.nn.Module, engine: Any, calls: list[Any]
) -> tuple[list[float], int, dict[str, torch.Tensor]]:
    """Two optimizer steps of `engine` on one batch (the first records ZeRO-3's trace): the
    losses, how many entries the second step put in `calls` (what the test's wrapper of a
    DeepSpeed function appends to), and the trained parameters gathered whole after them."""
    import deepspeed

    ids = torch.randint(0, 100, (2, 12), generator=torch.Generator().manual_seed(1))
    losses = []
    for _ in range(2):
        calls.clear()
        loss = engine(input_ids=ids, labels=ids).loss
        engine.backward(loss)
        engine.step()
        losses.append(loss.item())
    counted = len(calls)
    engine.eval()
    with torch.no_grad():  # evaluation: no gradient, so the leaves' input is left alone
        assert torch.isfinite(engine(input_ids=ids, labels=ids).loss)
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    with deepspeed.zero.GatheredParameters([p for _, p in named]):
        return losses, counted, {n: p.detach().clone() for n, p in named}


@pytest.mark.slow
@pytest.mark.usefixtures("zero3_in_process")
@pytest.mark.parametrize("task", ["instruction_tuning", "summarization"])
def test_under_zero3_each_adapted_layer_is_one_zero3_module_and_trains_alike(
    monkeypatch: pytest.MonkeyPatch, task: str
) -> None:
    """The worker's model under ZeRO-3 (a tiny Llama, and a tiny T5 whose decoder's
    cross-attention reads the encoder; LoRA on every linear layer, one gloo rank): each LoRA
    layer is a ZeRO-3 leaf (`lora.zero3_leaf_adapters`), so a step makes full fine-tuning's
    module fetches, not one per PEFT sub-module; and two steps give the losses and adapters
    of the same model without leaves."""
    from deepspeed.runtime.zero.partitioned_param_coordinator import (
        PartitionedParameterCoordinator as Coordinator,
    )
    from deepspeed.utils import unset_z3_leaf_modules, z3_leaf_module
    from peft.tuners.lora import Linear as LoraLinear

    fetches = []
    fetch = Coordinator.fetch_sub_module

    def counted(coordinator: Any, module: Any, *args: Any, **kwargs: Any) -> Any:
        fetches.append(module)
        return fetch(coordinator, module, *args, **kwargs)

    monkeypatch.setattr(Coordinator, "fetch_sub_module", counted)

    def trained(lora: LoraSettings | None, *, leaves: bool = True) -> dict[str, Any]:
        model, engine = _zero3_worker_model(lora, task)
        if lora is not None:
            layers = [m for m in model.modules() if isinstance(m, LoraLinear)]
            assert layers and all(z3_leaf_module(m) for m in layers), "not ZeRO-3 leaves"
            if not leaves:
                unset_z3_leaf_modules(model, [LoraLinear])
        losses, count, weights = _two_steps(model, engine(model), fetches)
        return {"losses": losses, "fetches": count, "weights": weights}

    lora = LoraSettings(r=4, alpha=8, dropout=0.0)
    full = trained(None)
    leaf = trained(lora)
    bare = trained(lora, leaves=False)
    assert leaf["fetches"] <= full["fetches"] < bare["fetches"], (full, leaf, bare)
    assert torch.allclose(torch.tensor(leaf["losses"]), torch.tensor(bare["losses"]))
    assert leaf["weights"].keys() == bare["weights"].keys()
    for name, value in leaf["weights"].items():
        assert torch.allclose(value, bare["weights"][name]), name


def test_only_lora_under_zero3_checkpoints_reentrant() -> None:
    """`train.gradient_checkpointing` under LoRA and ZeRO-3 passes `use_reentrant=True` to
    torch's checkpoint (the test below says why); every other run keeps transformers'
    default (None), and no checkpointing asks for none."""
    from llm_pipeline.train.trainer_settings import activation_checkpointing_kwargs

    lora = LoraSettings(r=4, alpha=8, dropout=0.0)

    def kwargs(stage: int | None, *, lora_on: bool = True, on: bool = True) -> Any:
        train = TrainConfig(gradient_checkpointing=on, lora=lora if lora_on else None)
        deepspeed = None if stage is None else {"zero_optimization": {"stage": stage}}
        return activation_checkpointing_kwargs(train, deepspeed)

    assert kwargs(3) == {"use_reentrant": True}
    assert kwargs(3, lora_on=False) is None
    assert kwargs(3, on=False) is None
    assert kwargs(2) is None and kwargs(None) is None


@pytest.mark.slow
@pytest.mark.usefixtures("zero3_in_process")
@pytest.mark.parametrize("task", ["instruction_tuning", "summarization"])
def test_under_zero3_with_checkpointing_lora_gathers_what_full_fine_tuning_gathers(
    monkeypatch: pytest.MonkeyPatch, task: str
) -> None:
    """The worker's model under ZeRO-3 (the tiny Llama and T5, one gloo rank) with activation
    checkpointing as the finetune step turns it on (`trainer.
    activation_checkpointing_kwargs`): a LoRA step gathers no more often than a full
    fine-tuning one (Llama 17 against 18, T5 34 against 35). With transformers'
    non-reentrant default it gathered more (29, 62: DeepSpeed released a recomputed layer's
    frozen base weights when the backward of the module that was last fetched ended, and
    gathered each again for its own backward), and both train alike: same losses, same
    adapters."""
    from deepspeed.runtime.zero.partition_parameters import Init, ZeroParamStatus
    from deepspeed.runtime.zero.partitioned_param_coordinator import (
        PartitionedParameterCoordinator as Coordinator,
    )

    gathers = []
    fetch_gather = Coordinator._PartitionedParameterCoordinator__all_gather_params_  # type: ignore[attr-defined]
    all_gather = Init._all_gather

    def counted(params: Any) -> None:
        if any(p.ds_status == ZeroParamStatus.NOT_AVAILABLE for p in params):
            gathers.append(len(params))

    def coordinator_gather(coordinator: Any, params: Any, *args: Any, **kwargs: Any) -> Any:
        counted(params)
        return fetch_gather(coordinator, params, *args, **kwargs)

    def init_gather(init: Any, params: Any, *args: Any, **kwargs: Any) -> Any:
        counted(params)
        return all_gather(init, params, *args, **kwargs)

    monkeypatch.setattr(
        Coordinator, "_PartitionedParameterCoordinator__all_gather_params_", coordinator_gather
    )
    monkeypatch.setattr(Init, "_all_gather", init_gather)

    def trained(lora: LoraSettings | None, checkpointing: str) -> dict[str, Any]:
        model, engine = _zero3_worker_model(lora, task, checkpointing=checkpointing)
        losses, count, weights = _two_steps(model, engine(model), gathers)
        return {"losses": losses, "gathers": count, "weights": weights}

    lora = LoraSettings(r=4, alpha=8, dropout=0.0)
    full = trained(None, "finetune")
    ours = trained(lora, "finetune")
    default = trained(lora, "non-reentrant")
    assert ours["gathers"] <= full["gathers"] < default["gathers"], (full, ours, default)
    assert torch.allclose(torch.tensor(ours["losses"]), torch.tensor(default["losses"]))
    assert ours["weights"].keys() == default["weights"].keys()
    # The Llama's adapters come out bit-identical. T5's differ in rounding: up to 3e-5 after
    # AdamW at lr 1e-2 (its decoder's q adapters), where non-reentrant checkpointing's are
    # 1.2e-5 from those without checkpointing. An adapter that missed its gradient would be
    # off by about the learning rate.
    for name, value in ours["weights"].items():
        torch.testing.assert_close(value, default["weights"][name], rtol=0, atol=1e-4, msg=name)


def _zero3_worker_model(
    lora: LoraSettings | None, task_name: str, *, checkpointing: str | None = None
) -> tuple[torch.nn.Module, Callable[..., Any]]:
    """The tiny Llama as the worker builds it under a ZeRO-3 config (`_build_model`), and
    a maker of its DeepSpeed engine (torch's AdamW, as the Trainer passes it).

    `checkpointing`: "finetune" turns activation checkpointing on as the Trainer does under
    `train.gradient_checkpointing` (`activation_checkpointing_enable` with the finetune
    step's `activation_checkpointing_kwargs`, before the engine); "non-reentrant" does the
    same with transformers' default kwargs."""
    import deepspeed
    from transformers.integrations import HfDeepSpeedConfig

    from llm_pipeline.models.sources import load_tokenizer
    from llm_pipeline.train.trainer_settings import (
        activation_checkpointing_kwargs,
        deepspeed_settings,
    )
    from llm_pipeline.train.worker import _build_model, largest_adapter

    from ..offline_models import MINILM, TINY_LLAMA, TINY_T5
    from .specs import unrun_spec

    architecture = TINY_T5 if task_name == "summarization" else TINY_LLAMA

    spec = unrun_spec(
        ModelConfig(architecture=dict(architecture), tokenizer=MINILM),
        TrainConfig(
            per_device_batch_size=2,
            zero_stage=3,
            lora=lora,
            gradient_checkpointing=checkpointing is not None,
        ),
        task_name,
    )
    task = get_task(spec.task)
    config = deepspeed_settings(
        spec.train,
        precision="fp32",
        world_size=1,
        hidden_size=int(architecture.get("hidden_size", architecture.get("d_model", 0))),
        largest_adapter=largest_adapter(spec, task),
    )
    assert config is not None
    config["zero_allow_untested_optimizer"] = True
    # While it lives, models build partitioned (zero.Init) and the worker sees ZeRO-3.
    keep = [HfDeepSpeedConfig(config)]
    model = _build_model(spec, task, load_tokenizer(spec.model, kind=task.model_kind), None)
    if checkpointing is not None:
        kwargs = activation_checkpointing_kwargs(spec.train, config)
        model.activation_checkpointing_enable(kwargs if checkpointing == "finetune" else None)

    def engine(model: torch.nn.Module) -> Any:
        optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
        built, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
        keep.clear()
        return built

    return model, engine
