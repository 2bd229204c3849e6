"""Throughput arithmetic and the GPU peak table."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
import torch

from llm_pipeline.train.metrics import (
    FlopParameters,
    RunCounts,
    bf16_peak_tflops,
    final_metrics,
    last_logged,
    throughput,
    training_flops,
)


@pytest.mark.parametrize(
    ("name", "peak"),
    [
        ("NVIDIA A100-SXM4-80GB", 312.0),
        ("NVIDIA H100 80GB HBM3", 989.0),
        ("NVIDIA H100 PCIe", 756.0),
        ("NVIDIA H100 NVL", 835.0),
        ("NVIDIA H200", 989.0),
        ("NVIDIA H200 NVL", 835.0),
        ("NVIDIA GH200 480GB", 989.0),
        ("NVIDIA B200", 2250.0),
        ("NVIDIA GB200", 2500.0),
        ("NVIDIA L4", 121.0),
        ("NVIDIA L40", 181.0),
        ("NVIDIA L40S", 362.0),
        ("NVIDIA A10", 125.0),
        ("NVIDIA A10G", None),
        ("Tesla V100-SXM2-16GB", None),
        ("Tesla T4", None),
        ("Some Future GPU", None),
    ],
)
def test_bf16_peaks_match_whole_names_specific_first(name: str, peak: float | None) -> None:
    assert bf16_peak_tflops(name) == peak


ONE_SIDE = FlopParameters(per_source_token=1_000_000_000, per_target_token=0)


def test_six_flops_per_parameter_per_token_on_its_side() -> None:
    both = FlopParameters(per_source_token=1_000_000, per_target_token=3_000_000)
    assert training_flops(parameters=both, source_tokens=2_000, target_tokens=500) == 6 * (
        1e6 * 2_000 + 3e6 * 500
    )


def test_throughput_on_a_known_gpu_reports_mfu() -> None:
    counts = RunCounts(
        samples=800,
        source_tokens=400_000,
        target_tokens=0,
        seconds=10.0,
        total_parameters=1_000_000_000,
        trainable_parameters=1_000_000_000,
        flop_parameters=ONE_SIDE,
        world_size=8,
        device_name="NVIDIA A100-SXM4-40GB",
    )
    figures = throughput(counts)
    assert figures["train_samples_per_second"] == 80.0
    assert figures["train_tokens_per_second"] == 40_000.0
    assert figures["train_tflops_per_second"] == pytest.approx(240.0)  # 6 * 1e9 * 4e4 / 1e12
    assert figures["mfu"] == pytest.approx(240.0 / (312.0 * 8))


def test_no_mfu_on_the_cpu_and_the_last_logged_loss_is_the_final_one() -> None:
    counts = RunCounts(10, 800, 200, 2.0, 100, 40, ONE_SIDE, 2, device_name=None)
    metrics = final_metrics(
        counts=counts,
        train_loss=last_logged([{"loss": 3.0}, {"eval_loss": 2.5}, {"loss": 2.0}], "loss"),
        eval_loss=2.5,
        global_step=7,
        resumed_from_step=None,
        skipped_steps=1,
        nonfinite_steps=2,
    )
    assert metrics["mfu"] is None and metrics["train_loss"] == 2.0
    assert metrics["skipped_steps"] == 1 and metrics["nonfinite_steps"] == 2
    assert metrics["global_step"] == 7 and metrics["train_tokens"] == 1000
    assert metrics["train_source_tokens"] == 800 and metrics["train_target_tokens"] == 200
    assert metrics["total_parameters"] == 100 and metrics["trainable_parameters"] == 40
    assert metrics["peak_gpu_memory_reserved_bytes"] is None
    assert metrics["step_host_share"] is None  # a GPU's figure
    assert last_logged([{"eval_loss": 1.0}], "loss") is None


def test_t5_small_flops_match_a_hand_count() -> None:
    """T5-small's shape (d_model 512, d_ff 2048, 6 + 6 layers, 8 heads of 64, 32128 tokens,
    LM head tied to the embedding), counted by hand from its layers."""
    from transformers import T5Config, T5ForConditionalGeneration

    from llm_pipeline.train.counts import count_parameters, flop_parameters

    d, ff, layers, vocab = 512, 2048, 6, 32128
    attention = 4 * d * d  # q, k, v, o (T5 has no biases)
    feed_forward = 2 * d * ff
    norm = d
    encoder = layers * (attention + feed_forward + 2 * norm) + norm  # + final norm
    cross_key_value = layers * 2 * d * d
    decoder_rest = layers * (attention + 2 * d * d + feed_forward + 3 * norm) + norm
    lm_head = d * vocab
    model = T5ForConditionalGeneration(
        T5Config(d_model=d, d_ff=ff, num_layers=layers, num_heads=8, d_kv=64, vocab_size=vocab)
    )
    counted = flop_parameters(model)
    assert counted == FlopParameters(
        per_source_token=encoder + cross_key_value,  # 22,026,752
        per_target_token=decoder_rest + lm_head,  # 38,479,360
    )
    # The relative position tables (2 x 32 buckets x 8 heads) are the only lookups besides the
    # shared vocabulary table, which is the LM head's weight and counted once, as the head.
    assert count_parameters(model) == counted.total + 2 * 32 * 8
    # At 512 source and 128 target tokens, charging every non-embedding weight for every
    # token, as before, came to 1.74x this count.
    source, target = 512, 128
    flops = training_flops(parameters=counted, source_tokens=source, target_tokens=target)
    every_weight_every_token = 6 * (counted.total - lm_head) * (source + target)
    assert every_weight_every_token / flops == pytest.approx(1.74, abs=0.01)


def test_a_model_without_an_encoder_counts_every_weight_per_token() -> None:
    from transformers import GPT2Config, GPT2LMHeadModel

    from llm_pipeline.train.counts import flop_parameters

    model = GPT2LMHeadModel(GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=100))
    position_table = 1024 * 32
    counted = flop_parameters(model)
    assert counted.per_target_token == 0
    assert counted.per_source_token == sum(p.numel() for p in model.parameters()) - position_table


def test_lora_adapters_are_the_trainable_parameters_and_sit_with_the_weight_they_adapt() -> None:
    """A T5 with adapters on every linear layer: they count in the total and are all that
    trains; each is charged to the tokens its layer sees (the cross-attention's key and
    value adapters to the source, with the encoder's)."""
    from transformers import T5Config, T5ForConditionalGeneration

    from llm_pipeline.config import LoraSettings
    from llm_pipeline.train.counts import count_parameters, flop_parameters
    from llm_pipeline.train.lora import apply_lora

    model = T5ForConditionalGeneration(
        T5Config(d_model=32, d_ff=64, num_layers=2, num_heads=2, d_kv=16, vocab_size=100)
    )
    before, total = flop_parameters(model), count_parameters(model)
    assert count_parameters(model, trainable_only=True) == total
    linear = {
        name: 4 * (m.in_features + m.out_features)
        for name, m in model.named_modules()
        if isinstance(m, torch.nn.Linear) and name != "lm_head"
    }
    source_side = sum(
        size
        for name, size in linear.items()
        if name.startswith("encoder.") or name.endswith(("EncDecAttention.k", "EncDecAttention.v"))
    )

    adapted = apply_lora(model, LoraSettings(r=4))

    assert count_parameters(adapted) == total + sum(linear.values())
    assert count_parameters(adapted, trainable_only=True) == sum(linear.values())
    assert flop_parameters(adapted) == FlopParameters(
        per_source_token=before.per_source_token + source_side,
        per_target_token=before.per_target_token + sum(linear.values()) - source_side,
    )


def test_a_llama_counts_its_layers_and_untied_head_per_token() -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    from llm_pipeline.train.counts import flop_parameters

    h, i, layers, vocab = 32, 64, 2, 100
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=vocab,
            hidden_size=h,
            intermediate_size=i,
            num_hidden_layers=layers,
            num_attention_heads=2,
            num_key_value_heads=2,
        )
    )
    # Per layer: q, k, v, o (h×h each), gate, up, down (h×i each), two RMSNorm weights; then
    # the final norm and the LM head, a matmul at every position. Token embeddings: lookups.
    by_hand = layers * (4 * h * h + 3 * h * i + 2 * h) + h + vocab * h
    counted = flop_parameters(model)
    assert (counted.per_source_token, counted.per_target_token) == (by_hand, 0)


def test_a_decoder_only_run_counts_its_targets_once() -> None:
    counts = RunCounts(
        samples=2,
        source_tokens=100,  # prompt and response tokens read
        target_tokens=30,  # the response tokens, among those 100
        seconds=1.0,
        total_parameters=10,
        trainable_parameters=10,
        flop_parameters=FlopParameters(per_source_token=10, per_target_token=0),
        world_size=1,
        device_name=None,
        decoder_only=True,
    )
    assert counts.tokens == 100
    assert throughput(counts)["train_tflops_per_second"] == pytest.approx(6 * 10 * 100 / 1e12)


def test_peak_gpu_memory_is_none_off_cuda() -> None:
    from llm_pipeline.train.counts import peak_memory_reserved

    assert peak_memory_reserved(torch.device("cpu")) is None


def test_steady_throughput_leaves_the_first_steps_warm_up_out() -> None:
    """4 steps of 100 tokens in 10 s, 7 of them after the first step: 300 tokens in 7 s."""
    counts = RunCounts(
        samples=8,
        source_tokens=400,
        target_tokens=0,
        seconds=10.0,
        total_parameters=10,
        trainable_parameters=10,
        flop_parameters=FlopParameters(per_source_token=10, per_target_token=0),
        world_size=1,
        device_name=None,
        decoder_only=True,
        steady_seconds=7.0,
        steps=4,
        steady_steps=3,
    )
    figures = throughput(counts)
    assert figures["train_tokens_per_second"] == 40.0
    assert figures["train_steady_tokens_per_second"] == pytest.approx(300 / 7)
    assert figures["train_steady_tflops_per_second"] == pytest.approx(6 * 10 * 300 / 7 / 1e12)
    # One step has no window after it: no steady figure rather than a wrong one.
    assert figures["train_warm_up_steps"] == 1
    one_step = throughput(replace(counts, steps=1, steady_seconds=None, steady_steps=0))
    assert "train_steady_tokens_per_second" not in one_step


def test_the_clock_starts_its_steady_window_after_the_first_step() -> None:
    from types import SimpleNamespace

    from llm_pipeline.train.counts import Clock

    clock = Clock()
    args = SimpleNamespace(device=torch.device("cpu"))
    clock.on_train_begin(args, None, None)
    clock.on_step_end(args, None, None)
    assert clock.steady_seconds is None  # one step: nothing after it yet
    first = clock.warm_step_ended
    clock.on_step_end(args, None, None)
    clock.on_train_end(args, None, None)
    assert clock.steps == 2 and clock.warm_step_ended == first and clock.steady_steps == 1
    assert clock.steady_seconds == pytest.approx(clock.ended - first)  # type: ignore[operator]
    assert 0 <= clock.steady_seconds <= clock.seconds  # type: ignore[operator]


def _clock_on_a_stand_in_gpu(
    monkeypatch: pytest.MonkeyPatch, times: list[float]
) -> tuple[Any, Any, list[object]]:
    """A Clock on a "cuda" device whose perf_counter reads `times` in turn and whose GPU
    waits are recorded (there is no GPU here); the Clock, its args and the waits."""
    from types import SimpleNamespace

    from llm_pipeline.train import counts

    now = iter(times)
    waits: list[object] = []
    monkeypatch.setattr(counts.time, "perf_counter", lambda: next(now))
    monkeypatch.setattr(counts.torch.cuda, "synchronize", waits.append)
    return counts.Clock(), SimpleNamespace(device=SimpleNamespace(type="cuda")), waits


def test_on_a_gpu_the_clock_times_the_second_step_as_issued_and_as_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The host issues step 2 in 3 s and the GPU has run it 4 s after it began: 0.75. The
    waits (one per step, the first two steps only) are stood in for: no GPU here."""
    clock, args, waits = _clock_on_a_stand_in_gpu(
        monkeypatch, [0.0, 10.0, 11.0, 14.0, 15.0, 20.0, 30.0]
    )
    clock.on_train_begin(args, None, None)  # 0
    clock.on_step_begin(args, None, None)  # step 1: not timed alone
    clock.on_step_end(args, None, None)  # waited for; 10
    clock.on_step_begin(args, None, None)  # 11
    clock.on_step_end(args, None, None)  # issued at 14, run by 15
    clock.on_step_begin(args, None, None)
    clock.on_step_end(args, None, None)  # step 3: no wait
    clock.on_train_end(args, None, None)  # 20
    assert clock.host_share == pytest.approx(3 / 4)
    assert len(waits) == 2
    assert clock.steady_seconds == pytest.approx(20 - 10)


def test_a_step_that_compiles_again_is_warm_up_and_the_next_is_timed_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """torch.compile compiles in steps 1 and 3 (a new batch shape): the steady window runs
    from step 3's end over steps 4 and 5, and the host share is step 4's (issued in 1 s, run
    by 2 s), not step 2's, which ran before the compiling was over."""
    from llm_pipeline.train import counts

    frames = iter([0, 1, 1, 2, 2, 2])  # read at the start and at each step's end
    monkeypatch.setattr(counts, "compiled_frames", lambda: next(frames))
    clock, args, waits = _clock_on_a_stand_in_gpu(
        monkeypatch, [0.0, 10.0, 11.0, 12.0, 14.0, 30.0, 31.0, 32.0, 33.0, 40.0]
    )
    clock.on_train_begin(args, None, None)  # 0
    for _ in range(5):
        clock.on_step_begin(args, None, None)
        clock.on_step_end(args, None, None)
    clock.on_train_end(args, None, None)  # 40
    assert clock.warm_steps == 3 and clock.steady_steps == 2
    assert clock.steady_seconds == pytest.approx(40 - 30)
    assert clock.host_share == pytest.approx(1 / 2)
    assert len(waits) == 4  # the ends of steps 1 and 3 (warm-up) and of the timed 2 and 4


def test_the_steady_window_ends_at_the_last_planned_step_not_after_its_evaluation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Three planned steps, the first ending at 10 and the last at 12; the evaluation and
    save after it take 50 s (a compiled model compiling its evaluation graphs): not
    training. A run stopped before its planned last step ends its window with the loop."""
    from types import SimpleNamespace

    from llm_pipeline.train import counts

    monkeypatch.setattr(counts, "compiled_frames", lambda: 0)
    args = SimpleNamespace(device=torch.device("cpu"))
    # perf_counter: the start, step 1's end, the last planned step's end, the loop's end.
    for planned, times in ((3, [0.0, 10.0, 12.0, 62.0]), (5, [0.0, 10.0, 62.0])):
        now, end = iter(times), times[-2] if planned == 3 else times[-1]
        monkeypatch.setattr(counts.time, "perf_counter", lambda now=now: next(now))
        clock = counts.Clock()
        clock.on_train_begin(args, None, None)
        for step in (1, 2, 3):
            state = SimpleNamespace(global_step=step, max_steps=planned)
            clock.on_step_begin(args, state, None)
            clock.on_step_end(args, state, None)
        clock.on_train_end(args, None, None)
        assert clock.steady_steps == 2
        assert clock.steady_seconds == pytest.approx(end - 10), planned


def test_the_clock_reads_torch_compiles_own_count_of_compiled_frames() -> None:
    """A compiled module that meets a new input shape compiles again (dynamic=False): with
    real torch.compile, that step is warm-up too."""
    from types import SimpleNamespace

    from llm_pipeline.train.counts import Clock, compiled_frames

    layer = torch.compile(torch.nn.Linear(4, 2), dynamic=False)
    clock = Clock()
    args = SimpleNamespace(device=torch.device("cpu"))
    clock.on_train_begin(args, None, None)
    before = compiled_frames()
    for rows in (3, 3, 5, 5, 5):
        clock.on_step_begin(args, None, None)
        layer(torch.ones(rows, 4)).sum().backward()
        clock.on_step_end(args, None, None)
    clock.on_train_end(args, None, None)
    assert compiled_frames() == before + 2
    assert clock.warm_steps == 3 and clock.steady_steps == 2
