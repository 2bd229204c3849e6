"""Model states per training process: DeepSpeed's own estimate, and what it leaves out;
under LoRA, for the adapters, beside the frozen base."""

from dataclasses import replace

from llm_pipeline.fit.adapters import Adapters
from llm_pipeline.fit.states import ZeroPlan, model_states

from .t5_small import T5_SMALL

P, LARGEST = T5_SMALL.parameters, T5_SMALL.largest_layer_parameters


def parts(states) -> dict[str, float]:
    return {name: value for name, value in states.device.parts if value}


def test_zero3_is_deepspeeds_estimate_plus_the_gathered_parameters():
    states = model_states(
        T5_SMALL, dtype="bf16", zero=ZeroPlan(stage=3), processes_per_node=16, nodes=2
    )
    # DeepSpeed: the largest layer's 16-bit weights and gradients (4 B each parameter) plus
    # 18 B per parameter over 32 ranks; then up to 1e9 gathered parameters in bf16.
    assert parts(states) == {"states": 4 * LARGEST + int(18 * P / 32), "gathered": 2 * P}
    # DeepSpeed's host estimate with zero.Init: the largest layer per GPU, x 1.5.
    assert states.host_per_node == int(LARGEST * 4 * 16 * 1.5)


def test_fp32_doubles_deepspeeds_16_bit_terms():
    states = model_states(
        T5_SMALL, dtype="fp32", zero=ZeroPlan(stage=3), processes_per_node=2, nodes=1
    )
    assert parts(states)["fp32 copies"] == 4 * LARGEST + 2 * P / 2
    assert parts(states)["gathered"] == 4 * P


def test_zero1_keeps_every_gradient():
    zero1 = parts(
        model_states(T5_SMALL, dtype="bf16", zero=ZeroPlan(stage=1), processes_per_node=4, nodes=1)
    )
    # ZeRO-2's estimate: 16-bit weights whole, 18 B per parameter over 4 ranks.
    assert zero1 == {"states": 2 * P + int(18 * P / 4), "gradients": 2 * P * 3 / 4}


def test_without_deepspeed_the_trainer_keeps_fp32_states_and_ddp_buckets():
    alone = parts(model_states(T5_SMALL, dtype="fp32", zero=None, processes_per_node=1, nodes=1))
    assert alone == {"weights": 4 * P, "gradients": 4 * P, "optimizer": 8 * P}
    trained = P - T5_SMALL.encoder_parameters
    frozen = parts(
        model_states(
            T5_SMALL, dtype="fp32", zero=None, processes_per_node=2, nodes=1, freeze_encoder=True
        )
    )
    assert frozen == {
        "weights": 4 * P,
        "gradients": 4 * trained,
        "optimizer": 8 * trained,
        "DDP buckets": 4 * trained,
    }


# LoRA on T5-small's shape: 1.2M adapter parameters, the largest adapter matrix 16 x 2048.
ADAPTERS = Adapters(
    parameters=1_179_648,
    largest=32_768,
    largest_adapter=32_768,
    rank=16,
    dropout=True,
    inputs=(("encoder", 0), ("decoder", 0)),
    linears=(("encoder", 0), ("decoder", 0)),
)
LORA_T5 = replace(T5_SMALL, adapters=ADAPTERS)
A = ADAPTERS.parameters


def test_zero3_lora_gives_deepspeed_the_adapters_and_partitions_the_frozen_base():
    states = model_states(
        LORA_T5, dtype="bf16", zero=ZeroPlan(stage=3), processes_per_node=16, nodes=2
    )
    # DeepSpeed's estimate for what trains (the largest adapter's 16-bit weight and gradient,
    # 18 B per adapter parameter over 32 ranks); the frozen bf16 base partitioned over the
    # 32 ranks; every parameter gathered in bf16 (fewer than stage3_max_live_parameters).
    assert parts(states) == {
        "states": 4 * 32_768 + int(18 * A / 32),
        "frozen weights": 2 * P / 32,
        "gathered": 2 * (P + A),
    }
    # Host: loading under zero.Init still holds the base's largest layer per GPU.
    assert states.host_per_node == int(LARGEST * 4 * 16 * 1.5)


def test_zero3_lora_adapters_stay_whole_beside_the_live_parameters():
    # A base larger than stage3_max_live_parameters: the coordinator keeps at most that many
    # gathered, and the adapters (persistent: never counted against it) come on top.
    states = model_states(
        LORA_T5,
        dtype="bf16",
        zero=ZeroPlan(stage=3, max_live_parameters=1_000_000),
        processes_per_node=8,
        nodes=1,
    )
    assert parts(states)["gathered"] == 2 * (1_000_000 + A)


def test_zero2_lora_keeps_the_frozen_base_whole_on_every_rank():
    states = model_states(
        LORA_T5, dtype="bf16", zero=ZeroPlan(stage=2), processes_per_node=4, nodes=1
    )
    assert parts(states) == {"states": 2 * A + int(18 * A / 4), "frozen weights": 2 * P}
    assert states.host_per_node == int(P * 4 * 4 * 1.5)  # each process loads the base first


def test_without_deepspeed_lora_trains_and_autocasts_only_the_adapters():
    # The frozen base in bf16 (the worker casts it), the adapters in fp32 for AdamW.
    plain = parts(model_states(LORA_T5, dtype="bf16", zero=None, processes_per_node=2, nodes=1))
    assert plain == {
        "weights": 2 * P + 4 * A,
        "gradients": 4 * A,
        "optimizer": 8 * A,
        "DDP buckets": 4 * A,
        "autocast copy": 2 * A,
    }
    # Each process still loads the fp32 model on the host before casting it.
    assert (
        model_states(LORA_T5, dtype="bf16", zero=None, processes_per_node=2, nodes=1).host_per_node
        == 4 * (P + A) * 2
    )


def test_without_deepspeed_fp32_lora_keeps_the_base_as_loaded():
    plain = parts(model_states(LORA_T5, dtype="fp32", zero=None, processes_per_node=1, nodes=1))
    assert plain == {"weights": 4 * (P + A), "gradients": 4 * A, "optimizer": 8 * A}
