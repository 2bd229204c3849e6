"""`python pipeline.py --check-fit` as a user runs it: each place that misfits is refused.

One run of the CLI on T5-v1.1-XXL with the values the shipped XXL configs had before the
fit check (evaluate.batch_size 64 x 4 beams on an A100 40GB; serving on n1-standard-8 with
a T4), plus a training micro-batch of 32 without gradient checkpointing: all three places
are refused at once, each with its message, and the command exits 2. Then a classifier:
DistilBERT under ZeRO-2 on 2 T4 passes, and a Llama-2-7B classifier on the same machine is
refused.
"""

import subprocess

import pytest

from ..pipeline_cli import run_pipeline

OLD_XXL = (
    "--config",
    "configs/xxl2vm16gpu.json",
    "--set",
    "train.zero_stage=3",
    "--set",
    "evaluate.batch_size=64",
    "--set",
    "deploy.machine_type=n1-standard-8",
    "--set",
    "deploy.accelerator_type=NVIDIA_TESLA_T4",
    "--set",
    "train.per_device_batch_size=32",
    "--set",
    "train.gradient_checkpointing=false",
)


@pytest.fixture(scope="module")
def refused() -> subprocess.CompletedProcess[str]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HUB_OFFLINE", "1")
        return run_pipeline(*OLD_XXL, "--check-fit")


def problems(result: subprocess.CompletedProcess[str]) -> list[str]:
    """The refusal's problems, one per line as `  - ...`."""
    return [line[4:] for line in result.stderr.splitlines() if line.startswith("  - ")]


def test_the_refusal_exits_2_and_names_the_way_past_it(refused):
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.startswith(
        "error: 4 problems in the fit check (if its estimate is wrong for your setup, "
        "--skip-fit-check runs the config anyway):\n"
    )
    assert "Traceback" not in refused.stderr


def test_training_that_does_not_fit_names_the_micro_batch_and_what_would_fit(refused):
    (training,) = [p for p in problems(refused) if p.startswith("train.")]
    assert training.startswith("train.per_device_batch_size 32 needs ~")
    assert " per A100 40GB (states 6.3 + gathered 1.9 + activations " in training
    assert "; at most 3 fits; or at this micro-batch: train.gradient_checkpointing true (~" in (
        training
    )


def test_evaluation_that_does_not_fit_names_the_largest_batch(refused):
    # It generates as the T4 endpoint will: CTranslate2 in float32 (a T5 overflows fp16),
    # whose weights alone (41.5 GiB) pass an A100 40GB.
    assert (
        "evaluate.batch_size 64 × num_beams 4 needs ~107.9 GiB per A100 40GB (weights 41.5 + "
        "cache 60.0 + working 5.4 + runtime 1.0); even a batch of 1 does not fit: the weights "
        "need a GPU with more memory (cluster.machine_type / accelerator_type); it generates "
        "as the endpoint will, in ctranslate2 float32 (deploy.engine_compute_type, or the "
        "serving GPU, sets that)"
    ) in problems(refused)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HUB_OFFLINE", "1")
        bf16 = run_pipeline(*OLD_XXL, "--set", "deploy.engine_compute_type=bfloat16", "--check-fit")
    assert (
        "evaluate.batch_size 64 × num_beams 4 needs ~87.1 GiB per A100 40GB (weights 20.7 + "
        "cache 60.0 + working 5.4 + runtime 1.0); at most 17 fits"
    ) in problems(bf16)


def test_serving_that_does_not_fit_names_a_machine_that_holds_it(refused):
    gpu, host = [p for p in problems(refused) if p.startswith("deploy.")]
    assert gpu.startswith(
        "deploy.accelerator_type NVIDIA_TESLA_T4 on deploy.machine_type n1-standard-8 (T4 16GB "
        "has no bf16: the server runs fp32): serving needs ~118.5 GiB per T4 16GB (weights 41.5"
    )
    assert gpu.endswith(
        "a machine that holds it: deploy.machine_type a2-ultragpu-1g, deploy.accelerator_type "
        "NVIDIA_A100_80GB, deploy.accelerator_count 1 (~59.8 GiB of 80 in bf16)"
    )
    assert host.startswith(
        "deploy.machine_type n1-standard-8 has 30 GiB of host RAM; serve needs ~44.5 GiB "
        "(runtime 3.0 + weights while loading 41.5;"
    )


def test_the_table_marks_what_does_not_fit(refused):
    places = ("finetune", "evaluate", "serve")
    rows = [line for line in refused.stdout.splitlines() if line.startswith(places)]
    verdicts = [(row.split()[0], row.endswith("DOES NOT FIT")) for row in rows]
    assert verdicts == [
        ("finetune", True),
        ("finetune", False),
        ("evaluate", True),
        ("evaluate", False),
        ("serve", True),
        ("serve", True),
    ]


def test_distilbert_with_zero_2_on_two_t4s_passes_and_a_llama_2_7b_there_is_refused():
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HUB_OFFLINE", "1")
        config = ("--config", "configs/distilbert-classify-1vm2gpu.json")
        config += ("--set", "train.zero_stage=2")
        fits = run_pipeline(*config, "--check-fit")
        llama = ("--set", "model.source=meta-llama/Llama-2-7b-hf")
        too_big = run_pipeline(*config, *llama, "--check-fit")
    assert fits.returncode == 0, fits.stderr
    rows = [line for line in fits.stdout.splitlines() if line.startswith("finetune")]
    assert rows[0].startswith("finetune  n1-standard-8 (2 × T4 16GB)  GPU 16 GiB  ")
    assert too_big.returncode == 2, too_big.stderr
    (training,) = [p for p in problems(too_big) if p.startswith("train.")]
    assert training.startswith("train.per_device_batch_size 32 needs ~")
    assert " per T4 16GB (states " in training
    assert "; even train.per_device_batch_size 1 does not fit" in training
    assert any(p.startswith("evaluate.batch_size 128 needs ~") for p in problems(too_big))
