"""DeepSpeed configs compared whole, their refusals, the user's JSON, and DeepSpeed taking one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import fsspec
import pytest

from llm_pipeline.train.deepspeed_config import (
    build_deepspeed_config,
    load_user_deepspeed_config,
    resolve_precision,
)

BASE: dict[str, Any] = {
    "zero_stage": 3,
    "offload_optimizer": "none",
    "offload_param": "none",
    "nvme_path": None,
    "precision": "bf16",
    "micro_batch_size": 4,
    "gradient_accumulation_steps": 2,
    "world_size": 16,
    "gradient_clipping": 1.0,
    "hidden_size": 1024,
}


def build(**changes: Any) -> dict[str, Any]:
    return build_deepspeed_config(**{**BASE, **changes})


def test_zero3_bf16_on_gpus():
    assert build() == {
        "train_micro_batch_size_per_gpu": 4,
        "gradient_accumulation_steps": 2,
        "train_batch_size": 128,
        "gradient_clipping": 1.0,
        "bf16": {"enabled": True},
        "fp16": {"enabled": False},
        "zero_optimization": {
            "stage": 3,
            "overlap_comm": True,
            "contiguous_gradients": True,
            "reduce_bucket_size": 1048576,
            "stage3_prefetch_bucket_size": 943718,
            "stage3_param_persistence_threshold": 10240,
            "stage3_max_live_parameters": 1000000000,
            "stage3_max_reuse_distance": 1000000000,
            "sub_group_size": 1000000000,
            "stage3_gather_16bit_weights_on_model_save": True,
        },
        "steps_per_print": 1000000,
        "wall_clock_breakdown": False,
    }


def test_zero3_fp16_with_cpu_offload_of_optimizer_and_parameters():
    config = build(
        precision="fp16",
        offload_optimizer="cpu",
        offload_param="cpu",
        hidden_size=4096,
        micro_batch_size=1,
        gradient_accumulation_steps=8,
        world_size=64,
        gradient_clipping=0.5,
    )
    assert config == {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 8,
        "train_batch_size": 512,
        "gradient_clipping": 0.5,
        "bf16": {"enabled": False},
        "fp16": {
            "enabled": True,
            "loss_scale": 0,
            "initial_scale_power": 16,
            "loss_scale_window": 1000,
            "hysteresis": 2,
            "min_loss_scale": 1,
        },
        "zero_optimization": {
            "stage": 3,
            "overlap_comm": True,
            "contiguous_gradients": True,
            "reduce_bucket_size": 16777216,
            "offload_optimizer": {"device": "cpu", "pin_memory": True},
            "offload_param": {"device": "cpu", "pin_memory": True},
            "stage3_prefetch_bucket_size": 15099494,
            "stage3_param_persistence_threshold": 40960,
            "stage3_max_live_parameters": 1000000000,
            "stage3_max_reuse_distance": 1000000000,
            "sub_group_size": 1000000000,
            "stage3_gather_16bit_weights_on_model_save": True,
        },
        "steps_per_print": 1000000,
        "wall_clock_breakdown": False,
        "optimizer": {
            "type": "AdamW",
            "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"},
        },
    }


def test_zero2_fp32_with_nvme_optimizer_offload():
    config = build(
        zero_stage=2,
        precision="fp32",
        offload_optimizer="nvme",
        nvme_path="/local_nvme/ds",
        hidden_size=512,
        world_size=2,
    )
    assert config == {
        "train_micro_batch_size_per_gpu": 4,
        "gradient_accumulation_steps": 2,
        "train_batch_size": 16,
        "gradient_clipping": 1.0,
        "bf16": {"enabled": False},
        "fp16": {"enabled": False},
        "zero_optimization": {
            "stage": 2,
            "overlap_comm": True,
            "contiguous_gradients": True,
            "reduce_bucket_size": 262144,
            "offload_optimizer": {
                "device": "nvme",
                "pin_memory": True,
                "nvme_path": "/local_nvme/ds",
            },
        },
        "steps_per_print": 1000000,
        "wall_clock_breakdown": False,
        "optimizer": {
            "type": "AdamW",
            "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"},
        },
    }


def test_unknown_hidden_size_leaves_buckets_to_the_trainer():
    zero = build(hidden_size=None)["zero_optimization"]
    assert {k: v for k, v in zero.items() if v == "auto"} == {
        "reduce_bucket_size": "auto",
        "stage3_prefetch_bucket_size": "auto",
        "stage3_param_persistence_threshold": "auto",
    }


@pytest.mark.parametrize(
    ("hidden_size", "largest_adapter", "threshold"),
    [
        (2048, None, 20_480),  # full fine-tuning: Hugging Face's 10 x hidden size
        (2048, 16 * 5632, 16 * 5632),  # TinyLlama, r 16 on every linear: its down_proj's A
        (8192, 16 * 28_672, 16 * 28_672),  # Llama-2-70B's shape, r 16
        (4096, 8 * 256, 40_960),  # adapters under 10 x hidden: the larger of the two
        (None, 32_768, 32_768),  # hidden size unknown: the adapters still stay whole
        (None, None, "auto"),
    ],
)
def test_zero3_keeps_every_lora_adapter_whole(
    hidden_size: int | None, largest_adapter: int | None, threshold: int | str
):
    zero = build(hidden_size=hidden_size, largest_adapter=largest_adapter)["zero_optimization"]
    assert zero["stage3_param_persistence_threshold"] == threshold


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"zero_stage": 0}, r"zero_stage: must be 1, 2 or 3, got 0"),
        ({"offload_optimizer": "gpu"}, r"offload_optimizer: must be one of"),
        ({"offload_param": "disk"}, r"offload_param: must be one of"),
        (
            {"zero_stage": 2, "offload_param": "cpu"},
            r"offload_param: parameter offload needs zero_stage 3, got zero_stage 2",
        ),
        ({"offload_param": "nvme"}, r"nvme_path: required when offloading to nvme"),
        ({"nvme_path": "/nvme"}, r"nvme_path: given, but neither"),
        ({"precision": "auto"}, r"precision: .* \(turn 'auto' into one with resolve_precision\)"),
        ({"micro_batch_size": 0}, r"micro_batch_size: must be >= 1, got 0"),
        ({"gradient_accumulation_steps": 0}, r"gradient_accumulation_steps: must be >= 1"),
        ({"world_size": 0}, r"world_size: must be >= 1, got 0"),
        ({"gradient_clipping": -1.0}, r"gradient_clipping: must be >= 0"),
        ({"hidden_size": 0}, r"hidden_size: must be >= 1, got 0"),
        ({"largest_adapter": 0}, r"largest_adapter: must be >= 1, got 0"),
    ],
)
def test_refused_combinations(changes: dict[str, Any], message: str):
    with pytest.raises(ValueError, match=message):
        build(**changes)


@pytest.mark.parametrize(
    ("requested", "cuda", "bf16", "expected"),
    [
        ("auto", True, True, "bf16"),
        ("auto", True, False, "fp32"),  # a T4 or V100: fp32 rather than fp16, for T5
        ("auto", False, False, "fp32"),
        ("auto", False, True, "fp32"),
        ("fp16", True, False, "fp16"),
        ("bf16", True, True, "bf16"),
        ("bf16", False, True, "bf16"),
        ("fp32", True, True, "fp32"),
    ],
)
def test_resolve_precision(requested: str, cuda: bool, bf16: bool, expected: str):
    assert resolve_precision(requested, cuda_available=cuda, bf16_supported=bf16) == expected


@pytest.mark.parametrize(
    ("requested", "cuda", "bf16", "message"),
    [
        ("fp16", False, False, "precision: fp16 needs a GPU"),
        ("bf16", True, False, "precision: this GPU has no bf16"),
        ("half", True, True, "precision: must be one of"),
    ],
)
def test_resolve_precision_refuses(requested: str, cuda: bool, bf16: bool, message: str):
    with pytest.raises(ValueError, match=message):
        resolve_precision(requested, cuda_available=cuda, bf16_supported=bf16)


USER_CONFIG = {
    "train_micro_batch_size_per_gpu": "auto",
    "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
}


def test_user_config_is_taken_whole(tmp_path: Path):
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(USER_CONFIG))
    assert load_user_deepspeed_config(str(path)) == USER_CONFIG


def test_user_config_through_fsspec():
    with fsspec.open("memory://llm-pipeline-tests/ds.json", "w") as f:
        f.write(json.dumps(USER_CONFIG))
    assert load_user_deepspeed_config("memory://llm-pipeline-tests/ds.json") == USER_CONFIG


def test_user_zero3_config_saves_a_whole_model(tmp_path: Path):
    path = tmp_path / "z3.json"
    path.write_text('{"zero_optimization": {"stage": 3}}')
    assert load_user_deepspeed_config(str(path)) == {
        "zero_optimization": {"stage": 3, "stage3_gather_16bit_weights_on_model_save": True}
    }


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"zero_optimization": {"stage": 3,}}', r"not valid JSON at line 1, column 35: "),
        ('{\n  "bf16": {"enabled": tru}\n}', r"not valid JSON at line 2, column 23: "),
        ("[1, 2]", r"must be a JSON object, got list"),
        (
            '{"zero_optimization": {"stage": 3, '
            '"stage3_gather_16bit_weights_on_model_save": false}}',
            r"stage3_gather_16bit_weights_on_model_save is false",
        ),
    ],
)
def test_user_config_errors_name_path_and_position(tmp_path: Path, text: str, message: str):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=rf"^deepspeed config '{path}': .*{message}"):
        load_user_deepspeed_config(str(path))


def test_user_config_missing(tmp_path: Path):
    path = tmp_path / "nope.json"
    with pytest.raises(ValueError, match=rf"^deepspeed config '{path}': not found$"):
        load_user_deepspeed_config(str(path))


# Runs in its own interpreter so torch.distributed's process group does not outlive it.
_INITIALIZE = textwrap.dedent(
    """
    import json, sys, torch, deepspeed
    from llm_pipeline.train import op_builds

    # As every loader of the project: the CPU op is loaded under op_builds' flock, which is
    # also what lets another process clear a build lock that a dead loader left.
    op_builds.install()
    config = json.loads(sys.argv[1])
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    x = torch.randn(config["train_micro_batch_size_per_gpu"], 16)
    for _ in range(config["gradient_accumulation_steps"]):
        loss = engine(x).pow(2).mean()
        engine.backward(loss)
        engine.step()
    print(json.dumps({
        "stage": engine.zero_optimization_stage(),
        "train_batch_size": engine.train_batch_size(),
        "global_steps": engine.global_steps,
        "gather_16bit_on_save": engine.zero_gather_16bit_weights_on_model_save(),
        "loss_is_finite": bool(torch.isfinite(loss).item()),
    }))
    """
)


@pytest.mark.slow
def test_deepspeed_accepts_a_zero3_config_on_the_cpu(loopback_port: int):
    config = build(precision="fp32", world_size=1, hidden_size=16)
    env = {
        **os.environ,
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_WORLD_SIZE": "1",
        # As DeepSpeed's launcher (and run_finetune) sets it: without it the CPU accelerator
        # forks `numactl --hardware` at every device_count().
        "LOCAL_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(loopback_port),
        "CUDA_VISIBLE_DEVICES": "",
    }
    done = subprocess.run(
        [sys.executable, "-c", _INITIALIZE, json.dumps(config)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {
        "stage": 3,
        "train_batch_size": 8,
        "global_steps": 1,
        "gather_16bit_on_save": True,
        "loss_is_finite": True,
    }
