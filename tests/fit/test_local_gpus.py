"""A local run on a machine with GPUs is a GPU run: the fit check reads the GPUs torch sees,
estimates GPU memory for finetune, evaluate and serve on them, and picks the dtype the
worker, evaluation and the server pick there. GPUs this machine lacks are described through
`machines.visible_gpus` (fake_gpus.py); nothing here pretends that CUDA ran."""

from pathlib import Path

import pytest
import torch

from llm_pipeline import cli
from llm_pipeline.config import PipelineConfig, load_config
from llm_pipeline.fit.check import check_fit
from llm_pipeline.fit.machines import (
    BF16_FROM_CAPABILITY,
    THIS_MACHINE,
    this_machine,
    visible_gpus,
)
from llm_pipeline.fit.places import evaluation_where, serving_where, training_where
from llm_pipeline.fit.training import precision_problems
from llm_pipeline.models.generation import NATIVE_BF16_CAPABILITY
from llm_pipeline.train.deepspeed_config import resolve_precision

from .fake_gpus import H100, T4, use_gpus

REPO = Path(__file__).resolve().parents[2]
LOCAL = REPO / "configs" / "local.json"
LOCAL_GPU = REPO / "configs" / "local_gpu.json"
GPU_PLACES = [
    (place, memory) for place in ("finetune", "evaluate", "serve") for memory in ("GPU", "host")
]


def config_of(path: Path, *overrides: str) -> PipelineConfig:
    return load_config(path, list(overrides)).config


def test_the_real_reading_is_what_torch_sees_and_starts_no_cuda_without_a_gpu():
    gpus = visible_gpus()  # the real one: imported before the autouse fixture replaced it
    assert gpus is visible_gpus()  # read once per process
    if torch.cuda.is_available():
        assert len(gpus) == torch.cuda.device_count()
        assert gpus[0].name == torch.cuda.get_device_name(0)
    else:
        assert gpus == ()
        assert not torch.cuda.is_initialized()


def test_a_machine_without_gpus_is_its_host_memory_alone():
    place = this_machine()
    assert place.machine == THIS_MACHINE and place.accelerator is None and place.gpus == 0
    assert place.label == "this machine"


def test_this_machine_describes_the_gpus_torch_sees(monkeypatch):
    host = this_machine().host_gib
    use_gpus(monkeypatch, H100, H100)
    place = this_machine()
    assert place.gpus == 2 and place.host_gib == host
    assert place.accelerator is not None
    assert place.accelerator.memory_gib == pytest.approx(79.2, abs=0.05)
    assert place.accelerator.capability == 9.0 and place.accelerator.has_bf16
    assert place.label == "this machine (2 × NVIDIA H100 80GB HBM3)"
    use_gpus(monkeypatch, T4)
    t4 = this_machine().accelerator
    assert t4 is not None and t4.capability == 7.5 and not t4.has_bf16


def test_mixed_gpus_are_as_large_as_the_smallest_and_as_capable_as_the_oldest(monkeypatch):
    use_gpus(monkeypatch, H100, T4)
    place = this_machine()
    assert place.gpus == 2 and place.accelerator is not None
    assert place.accelerator.memory_gib == pytest.approx(14.74, abs=0.01)
    assert place.accelerator.capability == 7.5
    assert place.accelerator.label == "Tesla T4 (the smallest of mixed GPUs)"


@pytest.mark.parametrize(
    ("gpus", "device", "dtype"),
    [((H100,), "cuda", "bf16"), ((T4,), "cuda", "fp32"), ((), "cpu", "fp32")],
    ids=["H100", "T4", "CPU"],
)
def test_every_place_runs_on_the_local_gpu_in_the_dtype_the_worker_picks(
    monkeypatch, gpus, device, dtype
):
    use_gpus(monkeypatch, *gpus)
    config = config_of(LOCAL, "train.precision=auto")
    for where in (
        training_where(config, "local"),
        evaluation_where(config, "local"),
        serving_where(config, "local"),
    ):
        assert (where.device, where.dtype, where.processes) == (device, dtype, 1)
    accelerator = this_machine().accelerator
    # The finetune worker's choice from the same facts
    # (train/trainer_settings.py::training_precision).
    worker = resolve_precision(
        "auto",
        cuda_available=bool(gpus),
        bf16_supported=accelerator is not None and accelerator.has_bf16,
    )
    assert worker == dtype


def test_the_fit_check_and_the_worker_draw_the_bf16_line_at_the_same_capability():
    # fit/machines.py decides for the check, models/generation.py::native_bf16 for the
    # worker, evaluation and the server: one line, or a run trains in another dtype than
    # the one it was checked in.
    assert BF16_FROM_CAPABILITY == NATIVE_BF16_CAPABILITY


def test_one_process_per_local_gpu_by_default(monkeypatch):
    use_gpus(monkeypatch, H100, H100, H100, H100)
    config = config_of(LOCAL, "cluster.processes=null")
    assert training_where(config, "local").processes == 4
    assert evaluation_where(config, "local").processes == 4
    assert serving_where(config, "local").processes == 1


@pytest.mark.parametrize(
    ("gpus", "precision", "problem"),
    [
        ((T4,), "fp16", None),  # a workstation's GPU trains in fp16 when asked
        ((T4,), "bf16", "train.precision bf16: Tesla T4 has no bf16 (compute capability 7.5;"),
        ((H100,), "bf16", None),
        ((), "fp16", "train.precision fp16 needs a GPU"),
        ((), "bf16", None),
    ],
    ids=["T4-fp16", "T4-bf16", "H100-bf16", "CPU-fp16", "CPU-bf16"],
)
def test_a_precision_is_checked_against_the_local_gpu(monkeypatch, gpus, precision, problem):
    use_gpus(monkeypatch, *gpus)
    problems = precision_problems(config_of(LOCAL, f"train.precision={precision}"), "local")
    if problem is None:
        assert problems == []
    else:
        (found,) = problems
        assert found.startswith(problem)


@pytest.mark.parametrize(("gpu", "dtype"), [(H100, "bf16"), (T4, "fp32")], ids=["H100", "T4"])
def test_the_gpu_config_is_estimated_in_gpu_memory_and_fits(monkeypatch, gpu, dtype):
    use_gpus(monkeypatch, gpu)
    report = check_fit(config_of(LOCAL_GPU), target="local")
    assert report.problems == [] and report.skipped == []
    assert [(row.place, row.memory) for row in report.rows] == GPU_PLACES
    gpu_rows = [row for row in report.rows if row.memory == "GPU"]
    # The endpoint's engine: CTranslate2 in bf16 where the GPU has it, else in fp32 (a T5).
    engine = "ctranslate2 bfloat16" if dtype == "bf16" else "ctranslate2 float32"
    assert all(
        row.settings.startswith(f"{engine}, " if row.place == "serve" else f"{dtype}, ")
        for row in gpu_rows
    )
    assert all(row.capacity_gib == pytest.approx(gpu.total_memory / 2**30) for row in gpu_rows)
    assert all(row.machine == f"this machine (1 × {gpu.name})" for row in report.rows)


def test_a_cpu_only_machine_keeps_its_host_rows_and_refuses_a_gpu_config_in_one_line():
    cpu = check_fit(config_of(LOCAL), target="local")
    assert cpu.problems == []
    assert [(row.place, row.memory) for row in cpu.rows] == [
        ("finetune", "host"),
        ("evaluate", "host"),
        ("serve", "host"),
    ]
    (problem,) = check_fit(config_of(LOCAL_GPU), target="local").problems
    assert problem.startswith(
        "cluster.local_gpus 1: this config is meant for 1 GPU(s) and torch sees no GPU ("
    )
    assert problem.endswith(
        "on this machine; run it on the CPU with --set cluster.local_gpus=0 (far slower: "
        "configs/local.json is the demo sized for a CPU)"
    )
    assert "\n" not in problem
    assert check_fit(config_of(LOCAL_GPU, "cluster.local_gpus=0"), target="local").problems == []


def test_the_gpu_requirement_is_a_local_one():
    config = config_of(LOCAL_GPU)
    assert not any("local_gpus" in p for p in check_fit(config, target="vertex").problems)


@pytest.mark.parametrize("key", ["cluster.processes", "evaluate.processes"])
def test_more_processes_than_local_gpus_are_refused_before_the_run(monkeypatch, key):
    use_gpus(monkeypatch, H100)
    (problem,) = check_fit(config_of(LOCAL, f"{key}=2"), target="local").problems
    assert problem == (
        f"{key} 2: this machine has 1 GPU(s) and each process takes one: set it to 1 or "
        "less, or null for one per GPU"
    )


def test_a_local_gpu_misfit_names_this_machine_not_the_vertex_settings(monkeypatch):
    use_gpus(monkeypatch, T4)
    config = config_of(
        REPO / "configs" / "xxl2vm16gpu.json",
        "deploy.target=local",
        "cluster.processes=null",
        "train.zero_stage=3",  # a fixed stage: auto would offload, and misfit the host instead
    )
    problems = check_fit(config, target="local").problems
    serve = next(p for p in problems if "serving needs" in p)
    assert serve.startswith(
        "this machine (1 × Tesla T4) (Tesla T4 has no bf16: the server runs fp32): serving needs ~"
    )
    assert " per Tesla T4 " in serve
    training = next(p for p in problems if p.startswith("train.per_device_batch_size"))
    assert "cluster.node_count" not in training  # a local run has this machine alone


def test_the_gpu_config_dry_runs_on_a_cpu_and_a_run_there_is_refused_before_it_starts(
    tmp_path, capsys
):
    args = ["--config", str(LOCAL_GPU), "--pipeline-root", str(tmp_path)]
    assert cli.main([*args, "--dry-run"]) == 0
    out, err = capsys.readouterr()
    assert "configure → download → preprocess → finetune → evaluate → should-deploy → deploy" in out
    assert "note: fit check: cluster.local_gpus 1: this config is meant for 1 GPU(s)" in err
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert "\n  - cluster.local_gpus 1: this config is meant for 1 GPU(s)" in err
    assert list(tmp_path.iterdir()) == []  # nothing ran
