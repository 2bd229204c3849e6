"""The DeepSpeed config the finetune step hands to the Hugging Face Trainer, or the user's own.

The Trainer stays the one owner of the optimizer's hyper-parameters and of the learning-rate
schedule: its TrainingArguments (learning rate, betas, weight decay, scheduler type, warmup)
build them, so this config has no `scheduler` section, and an `optimizer` section only where
DeepSpeed must run the optimizer itself (offload), with every value "auto" for the Trainer to
fill; the Trainer then still builds the schedule, warmup included, around that optimizer.
Gradient checkpointing is a model setting the Trainer switches on; it has no place here.
"""

from __future__ import annotations

import json
from typing import Any

import fsspec

from llm_pipeline.errors import JSONTooDeep, load_json

PRECISIONS = ("bf16", "fp16", "fp32")
OFFLOAD_DEVICES = ("none", "cpu", "nvme")

# Dynamic loss scaling for fp16, DeepSpeed's documented defaults made explicit: loss_scale 0
# turns dynamic scaling on, starting at 2**16 and halving on overflow.
_FP16_LOSS_SCALING = {
    "loss_scale": 0,
    "initial_scale_power": 16,
    "loss_scale_window": 1000,
    "hysteresis": 2,
    "min_loss_scale": 1,
}


def resolve_precision(requested: str, *, cuda_available: bool, bf16_supported: bool) -> str:
    """Turn the config's precision ("auto", "bf16", "fp16", "fp32") into the one to train in.

    "auto" is bf16 on GPUs that compute in it natively (Ampere and newer; the caller decides,
    see `models.generation.native_bf16`) and fp32 elsewhere, never fp16: T5 was pre-trained in
    bf16 and its activations exceed fp16's range (65504), so T5 trained in fp16 overflows to
    inf and the loss turns NaN. fp16 stays available when asked for.
    """
    if requested == "auto":
        return "bf16" if cuda_available and bf16_supported else "fp32"
    if requested not in PRECISIONS:
        raise ValueError(f"precision: must be one of {('auto', *PRECISIONS)}, got {requested!r}")
    if requested == "fp16" and not cuda_available:
        raise ValueError(
            "precision: fp16 needs a GPU (DeepSpeed's fp16 loss scaling runs on CUDA); "
            "use fp32 or bf16 on the CPU"
        )
    if requested == "bf16" and cuda_available and not bf16_supported:
        raise ValueError(
            "precision: this GPU has no bf16 (it needs Ampere or newer, e.g. A100, L4, H100); "
            "use fp32, or fp16 for models that tolerate it"
        )
    return requested


def build_deepspeed_config(
    *,
    zero_stage: int,
    offload_optimizer: str,
    offload_param: str,
    nvme_path: str | None,
    precision: str,
    micro_batch_size: int,
    gradient_accumulation_steps: int,
    world_size: int,
    gradient_clipping: float,
    hidden_size: int | None,
    largest_adapter: int | None = None,
) -> dict[str, Any]:
    """A DeepSpeed config from the training settings; `precision` as `resolve_precision` gives it.

    `largest_adapter`: under LoRA, the elements of its largest adapter matrix
    (`fit.adapters.Adapters.largest_adapter`), so that ZeRO-3 keeps every adapter whole on
    each rank (`persistence_threshold`).

    Batch sizes are explicit numbers, not "auto", and train_batch_size is micro x accumulation
    x `world_size` (all processes on all nodes). The Trainer checks them against its own
    arguments, so a Trainer that miscounts the processes fails at once with both numbers in
    its message: under torchrun on the CPU without `use_cpu=True` it sees a world of 1, and
    would otherwise feed every rank the same data. Pass the same values to TrainingArguments.
    """
    _check(
        zero_stage=zero_stage,
        offload_optimizer=offload_optimizer,
        offload_param=offload_param,
        nvme_path=nvme_path,
        precision=precision,
        counts={
            "micro_batch_size": micro_batch_size,
            "gradient_accumulation_steps": gradient_accumulation_steps,
            "world_size": world_size,
        },
        gradient_clipping=gradient_clipping,
        hidden_size=hidden_size,
        largest_adapter=largest_adapter,
    )
    config: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": micro_batch_size,
        "gradient_accumulation_steps": gradient_accumulation_steps,
        "train_batch_size": micro_batch_size * gradient_accumulation_steps * world_size,
        "gradient_clipping": gradient_clipping,
        "bf16": {"enabled": precision == "bf16"},
        "fp16": {"enabled": True, **_FP16_LOSS_SCALING}
        if precision == "fp16"
        else {"enabled": False},
        "zero_optimization": _zero_section(
            zero_stage, offload_optimizer, offload_param, nvme_path, hidden_size, largest_adapter
        ),
        # DeepSpeed prints every 10 steps by default; the Trainer already logs progress.
        "steps_per_print": 1_000_000,
        "wall_clock_breakdown": False,
    }
    if offload_optimizer != "none":
        # An offloaded optimizer must be DeepSpeed's CPU Adam. Left to itself, accelerate swaps
        # the Trainer's AdamW for one but keeps only lr and weight decay, dropping betas and
        # eps; this section, its values "auto", has the Trainer fill all four.
        config["optimizer"] = {
            "type": "AdamW",
            "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"},
        }
    return config


def _zero_section(
    stage: int,
    offload_optimizer: str,
    offload_param: str,
    nvme_path: str | None,
    hidden_size: int | None,
    largest_adapter: int | None,
) -> dict[str, Any]:
    """ZeRO settings; bucket sizes follow Hugging Face's rule of thumb from the hidden size."""
    h = hidden_size
    zero: dict[str, Any] = {
        "stage": stage,
        "overlap_comm": True,
        "contiguous_gradients": True,
        # "auto" only where the hidden size is unknown here: the Trainer then reads the model.
        "reduce_bucket_size": h * h if h else "auto",
    }
    if offload_optimizer != "none":
        zero["offload_optimizer"] = _offload(offload_optimizer, nvme_path)
    if stage == 3:
        if offload_param != "none":
            zero["offload_param"] = _offload(offload_param, nvme_path)
        zero.update(
            {
                "stage3_prefetch_bucket_size": int(0.9 * h * h) if h else "auto",
                "stage3_param_persistence_threshold": persistence_threshold(h, largest_adapter),
                "stage3_max_live_parameters": 1_000_000_000,
                "stage3_max_reuse_distance": 1_000_000_000,
                "sub_group_size": 1_000_000_000,
                # Save a whole 16-bit model on save_model, not only per-rank shards, so the
                # Model artifact is a Hugging Face folder that loads without DeepSpeed.
                "stage3_gather_16bit_weights_on_model_save": True,
            }
        )
    return zero


def persistence_threshold(hidden_size: int | None, largest_adapter: int | None) -> int | str:
    """ZeRO-3's `stage3_param_persistence_threshold`: parameters of at most this many elements
    stay whole on every rank instead of being gathered for each module call.

    Hugging Face's rule, 10 x hidden size, keeps norms and biases whole. LoRA's adapter
    matrices (r x in, out x r: 32,768 elements at r 16 on a 2048-wide layer) are above it, so
    ZeRO-3 partitions them and fetches them again in every forward (and backward) beside the
    base weights, for no memory worth saving: all adapters of a 70B at r 16 are about 0.4 GB
    in bf16. At the largest adapter's size they stay whole: the forward and backward then
    gather the base weights alone, as full fine-tuning does, and the adapters are refreshed
    once per step, all in one collective, after the optimizer step (DeepSpeed's
    `_post_step`). A base weight stays partitioned unless one of its sides is at most r.
    "auto" (the Trainer's 10 x hidden size) where neither size is known.
    """
    base = 10 * hidden_size if hidden_size else None
    if largest_adapter:
        return max(base or 0, largest_adapter)
    return base if base is not None else "auto"


def _offload(device: str, nvme_path: str | None) -> dict[str, Any]:
    section: dict[str, Any] = {"device": device, "pin_memory": True}
    if device == "nvme":
        section["nvme_path"] = nvme_path
    return section


def _check(
    *,
    zero_stage: int,
    offload_optimizer: str,
    offload_param: str,
    nvme_path: str | None,
    precision: str,
    counts: dict[str, int],
    gradient_clipping: float,
    hidden_size: int | None,
    largest_adapter: int | None,
) -> None:
    if zero_stage not in (1, 2, 3):
        raise ValueError(f"zero_stage: must be 1, 2 or 3, got {zero_stage!r}")
    for name, device in (
        ("offload_optimizer", offload_optimizer),
        ("offload_param", offload_param),
    ):
        if device not in OFFLOAD_DEVICES:
            raise ValueError(f"{name}: must be one of {OFFLOAD_DEVICES}, got {device!r}")
    if offload_param != "none" and zero_stage != 3:
        raise ValueError(
            f"offload_param: parameter offload needs zero_stage 3, got zero_stage {zero_stage}"
        )
    uses_nvme = "nvme" in (offload_optimizer, offload_param)
    if uses_nvme and not nvme_path:
        raise ValueError(
            "nvme_path: required when offloading to nvme (a folder on a local NVMe disk)"
        )
    if nvme_path and not uses_nvme:
        raise ValueError(
            "nvme_path: given, but neither offload_optimizer nor offload_param is nvme"
        )
    if precision not in PRECISIONS:
        raise ValueError(
            f"precision: must be one of {PRECISIONS}, got {precision!r} "
            "(turn 'auto' into one with resolve_precision)"
        )
    for name, value in counts.items():
        if value < 1:
            raise ValueError(f"{name}: must be >= 1, got {value}")
    if gradient_clipping < 0:
        raise ValueError(
            f"gradient_clipping: must be >= 0 (0 turns it off), got {gradient_clipping}"
        )
    if hidden_size is not None and hidden_size < 1:
        raise ValueError(f"hidden_size: must be >= 1, got {hidden_size}")
    if largest_adapter is not None and largest_adapter < 1:
        raise ValueError(f"largest_adapter: must be >= 1, got {largest_adapter}")


def load_user_deepspeed_config(path: str) -> dict[str, Any]:
    """Read a user's DeepSpeed JSON from a local path or any fsspec URL (gs://, s3://).

    Taken as written, with one exception: with ZeRO-3 and no
    `stage3_gather_16bit_weights_on_model_save`, it is switched on so the saved model is whole;
    a config that turns it off explicitly is refused for the same reason.
    """
    try:
        with fsspec.open(path, "r", encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise ValueError(f"deepspeed config {path!r}: not found") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"deepspeed config {path!r}: cannot be read ({err})") from None
    try:
        config = load_json(text)
    except json.JSONDecodeError as err:
        raise ValueError(
            f"deepspeed config {path!r}: not valid JSON at line {err.lineno}, "
            f"column {err.colno}: {err.msg}"
        ) from None
    except JSONTooDeep as err:
        raise ValueError(f"deepspeed config {path!r}: {err}") from None
    if not isinstance(config, dict):
        raise ValueError(
            f"deepspeed config {path!r}: must be a JSON object, got {type(config).__name__}"
        )
    zero = zero3_section(config)
    if zero is not None:
        key = "stage3_gather_16bit_weights_on_model_save"
        if zero.get(key) is False:
            raise ValueError(
                f"deepspeed config {path!r}: zero_optimization.{key} is false, so the saved "
                "model would be per-rank shards, not a loadable Hugging Face folder; set it to true"
            )
        zero.setdefault(key, True)
    return config


def zero3_section(config: dict[str, Any] | None) -> dict[str, Any] | None:
    """The `zero_optimization` section of a DeepSpeed config (built or a user's) when it is
    ZeRO-3, else None."""
    zero = (config or {}).get("zero_optimization")
    return zero if isinstance(zero, dict) and zero.get("stage") == 3 else None
