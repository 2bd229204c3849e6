"""Training's DeepSpeed plan as the finetune step will run it, and advice when it misfits."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from llm_pipeline.config import PipelineConfig
from llm_pipeline.fit.estimates import GIB, Breakdown, Lengths
from llm_pipeline.fit.states import ZeroPlan
from llm_pipeline.train.deepspeed_config import build_deepspeed_config, load_user_deepspeed_config

#: DeepSpeed's default for stage3_max_live_parameters when a user's config leaves it out.
DEEPSPEED_MAX_LIVE_DEFAULT = 1_000_000_000
#: The most nodes the advice looks at.
MAX_NODES = 64

Estimator = Callable[..., tuple[Breakdown, float]]


def zero_plan(config: PipelineConfig) -> tuple[ZeroPlan | None, str | None]:
    """The ZeRO settings the finetune step uses (generated, or the user's DeepSpeed JSON),
    None without DeepSpeed; and a note when the user's JSON could not be read."""
    train = config.train
    if not train.use_deepspeed:
        return None, None
    if train.deepspeed_config is not None:
        try:
            zero = load_user_deepspeed_config(train.deepspeed_config).get("zero_optimization", {})
        except ValueError as exc:
            note = f"train.deepspeed_config not read ({exc}): estimated from train.*"
        else:
            stage = int(zero.get("stage", 0))
            if stage == 0:
                return None, "train.deepspeed_config: ZeRO stage 0"
            return (
                ZeroPlan(
                    stage=stage,
                    offload_optimizer=str(zero.get("offload_optimizer", {}).get("device", "none")),
                    offload_param=str(zero.get("offload_param", {}).get("device", "none")),
                    max_live_parameters=int(
                        zero.get("stage3_max_live_parameters", DEEPSPEED_MAX_LIVE_DEFAULT)
                    ),
                ),
                "ZeRO settings from train.deepspeed_config",
            )
    else:
        note = None
    generated = build_deepspeed_config(
        zero_stage=train.zero_stage,
        offload_optimizer=train.offload_optimizer,
        offload_param=train.offload_param,
        nvme_path=train.nvme_path,
        precision="bf16",  # any: the ZeRO section does not depend on it
        micro_batch_size=train.per_device_batch_size,
        gradient_accumulation_steps=train.gradient_accumulation_steps,
        world_size=1,
        gradient_clipping=train.max_grad_norm,
        hidden_size=None,
    )["zero_optimization"]
    plan = ZeroPlan(
        stage=train.zero_stage,
        offload_optimizer=train.offload_optimizer,
        offload_param=train.offload_param,
        max_live_parameters=int(
            generated.get("stage3_max_live_parameters", DEEPSPEED_MAX_LIVE_DEFAULT)
        ),
    )
    return plan, note


def training_advice(
    estimate: Estimator,
    lengths: Lengths,
    capacity: float,
    *,
    zero: ZeroPlan | None,
    config: PipelineConfig,
    nodes: int,
) -> str:
    """What fits `capacity` bytes per process: the largest micro-batch, then each other
    change that fits at the configured micro-batch (checkpointing, offload, ZeRO-3, nodes)."""

    def fits(lengths: Lengths = lengths, **change: object) -> float | None:
        total = estimate(lengths, **change)[0].total
        return total if total <= capacity else None

    low, high = 0, lengths.batch
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if fits(replace(lengths, batch=middle)) else (low, middle)
    parts = [f"at most {low} fits" if low else "even train.per_device_batch_size 1 does not fit"]
    options = []
    if not config.train.gradient_checkpointing and (total := fits(checkpointing=True)):
        options.append(f"train.gradient_checkpointing true (~{total / GIB:.1f} GiB)")
    if zero is not None and zero.stage < 3:
        stage3 = ZeroPlan(3, zero.offload_optimizer, "none", DEEPSPEED_MAX_LIVE_DEFAULT)
        if total := fits(zero=stage3):
            options.append(f"train.zero_stage 3 (~{total / GIB:.1f} GiB)")
    if (
        zero is not None
        and zero.stage == 3
        and "none" in (zero.offload_optimizer, zero.offload_param)
    ):
        offloaded = replace(zero, offload_optimizer="cpu", offload_param="cpu")
        if total := fits(zero=offloaded):
            options.append(
                f"train.offload_optimizer and train.offload_param cpu (~{total / GIB:.1f} GiB)"
            )
    if zero is not None:
        for more in range(nodes + 1, MAX_NODES + 1):
            if total := fits(nodes=more):
                options.append(f"cluster.node_count {more} (~{total / GIB:.1f} GiB)")
                break
    if options:
        parts.append("or at this micro-batch: " + "; ".join(options))
    return "; ".join(parts)
