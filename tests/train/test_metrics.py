"""Throughput arithmetic and the GPU peak table."""

from __future__ import annotations

import pytest

from llm_pipeline.train.metrics import (
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
        ("NVIDIA H200", 989.0),
        ("NVIDIA L4", 121.0),
        ("NVIDIA A10G", None),
        ("Tesla V100-SXM2-16GB", None),
        ("Some Future GPU", None),
    ],
)
def test_bf16_peaks_match_the_specific_name_first(name: str, peak: float | None) -> None:
    assert bf16_peak_tflops(name) == peak


def test_six_flops_per_parameter_per_token() -> None:
    assert training_flops(parameters=1_000_000, tokens=2_000) == 12e9


def test_throughput_on_a_known_gpu_reports_mfu() -> None:
    counts = RunCounts(
        samples=800,
        tokens=400_000,
        seconds=10.0,
        parameters=1_000_000_000,
        world_size=8,
        device_name="NVIDIA A100-SXM4-40GB",
    )
    figures = throughput(counts)
    assert figures["train_samples_per_second"] == 80.0
    assert figures["train_tokens_per_second"] == 40_000.0
    assert figures["train_tflops_per_second"] == pytest.approx(240.0)  # 6 * 1e9 * 4e4 / 1e12
    assert figures["mfu"] == pytest.approx(240.0 / (312.0 * 8))


def test_no_mfu_on_the_cpu_and_the_last_logged_loss_is_the_final_one() -> None:
    counts = RunCounts(10, 1000, 2.0, 100, 2, device_name=None)
    metrics = final_metrics(
        counts=counts,
        train_loss=last_logged([{"loss": 3.0}, {"eval_loss": 2.5}, {"loss": 2.0}], "loss"),
        eval_loss=2.5,
        global_step=7,
        resumed_from_step=None,
    )
    assert metrics["mfu"] is None and metrics["train_loss"] == 2.0
    assert metrics["global_step"] == 7 and metrics["train_tokens"] == 1000
    assert last_logged([{"eval_loss": 1.0}], "loss") is None


def test_flops_count_non_embedding_parameters() -> None:
    import torch
    from transformers import T5Config, T5ForConditionalGeneration

    from llm_pipeline.train.counts import count_parameters

    model = T5ForConditionalGeneration(
        T5Config(vocab_size=1000, d_model=32, d_ff=64, num_layers=1, num_heads=2, d_kv=16)
    )
    # Tied tables (shared, encoder and decoder embed_tokens, lm_head) count once.
    tables = {
        id(p): p.numel()
        for m in [*model.modules(), model.lm_head]
        if isinstance(m, torch.nn.Embedding) or m is model.lm_head
        for p in m.parameters()
    }
    total = count_parameters(model)
    assert total == sum(p.numel() for p in model.parameters())
    assert count_parameters(model, embeddings=False) == total - sum(tables.values())
    assert 0 < count_parameters(model, embeddings=False) < total / 2
    counts = RunCounts(1, 1000, 1.0, total, 1, None, non_embedding_parameters=10)
    assert throughput(counts)["train_tflops_per_second"] == pytest.approx(6 * 10 * 1000 / 1e12)
