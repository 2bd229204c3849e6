"""`train.zero_stage: "auto"`: the first plan of the ladder whose fit-check estimate fits."""

from pathlib import Path

import pytest
from transformers import T5Config

from llm_pipeline.config import PipelineConfig, load_config
from llm_pipeline.fit.check import check_fit
from llm_pipeline.fit.machines import Place
from llm_pipeline.fit.memory import GIB, Lengths
from llm_pipeline.fit.places import Where, training_lengths, training_where
from llm_pipeline.fit.shapes import model_shape, shape_of
from llm_pipeline.fit.stage import LADDER, MARGIN, choose_stage
from llm_pipeline.fit.states import ZeroPlan, training_memory
from llm_pipeline.fit.training import stage_choice
from llm_pipeline.tasks import get_task
from llm_pipeline.tasks.kinds import CAUSAL_LM

from ..offline_models import TINY_T5

REPO = Path(__file__).resolve().parents[2]
LLAMA = REPO / "configs" / "llama2-7b-lora-1vm8gpu.json"
XXL = REPO / "configs" / "xxl2vm16gpu.json"
A100_80_X8 = ("cluster.machine_type=a2-ultragpu-8g", "cluster.accelerator_type=NVIDIA_A100_80GB")


def config_of(name: str | Path, *overrides: str) -> PipelineConfig:
    return load_config(REPO / "configs" / name, list(overrides)).config


def chosen(config: PipelineConfig) -> str:
    """What `--check-fit` says after "ZeRO stage: "."""
    shape = model_shape(config.model, kind=get_task(config.task).model_kind, lora=config.train.lora)
    choice, _ = stage_choice(config, shape, "vertex")
    return choice.describe()


def test_a_tiny_model_on_a_cpu_trains_without_deepspeed():
    config = T5Config(**{k: v for k, v in TINY_T5.items() if k != "model_type"})
    shape = shape_of(config, name="tiny")
    where = Where(Place("this machine", 8), "cpu", 1, 1, "fp32")
    choice = choose_stage(shape, where, Lengths(8, 64, 24), checkpointing=False)
    assert choice.plan is None and choice.stage == 0
    assert choice.describe().startswith("0 (auto: no DeepSpeed: the whole training state, ")
    assert choice.reason.endswith("fits 8 GiB of RAM on this machine (1 process) with 10% to spare")


def test_a_cpu_that_cannot_hold_the_plain_trainer_climbs_the_stages_without_offload():
    shape = model_shape(load_config(REPO / "configs" / "small1vm1gpu.json").config.model)
    lengths = Lengths(2, 64, 24)
    # 4 processes in 6 GiB: the plain Trainer's 4 copies of everything need 6.8 GiB, ZeRO-1
    # 5.0, within 90% of 6.
    four = Where(Place("this machine", 6), "cpu", 4, 1, "fp32")
    choice = choose_stage(shape, four, lengths, checkpointing=False)
    assert choice.describe().startswith("1 (auto: ZeRO-1, 5.0 GiB, fits 6 GiB of RAM on this ")
    assert choice.reason.endswith("(no ZeRO 6.8 GiB do not)")
    # In 2 GiB nothing fits; the ladder ends at ZeRO-3: offload moves nothing on a CPU.
    tight = Where(Place("this machine", 2), "cpu", 4, 1, "fp32")
    choice = choose_stage(shape, tight, lengths, checkpointing=False)
    assert choice.plan == ZeroPlan(3)
    assert choice.reason.startswith("nothing fits 2 GiB of RAM on this machine (4 processes) ")


def test_t5_small_on_one_a100_trains_without_deepspeed_and_its_rows_say_so():
    config = config_of("small1vm1gpu.json")
    assert config.train.zero_stage == "auto"
    report = check_fit(config, target="vertex")
    assert report.problems == []
    assert (
        "ZeRO stage: 0 (auto: no DeepSpeed: the whole training state, 9.9 GiB per GPU, fits "
        "40 GiB per A100 40GB with 10% to spare)"
    ) in report.notes
    gpu = report.rows[0]
    assert "no DeepSpeed" in gpu.settings and gpu.estimate.part("optimizer") > 0
    assert gpu.estimate.part("states") == 0  # DeepSpeed's term: not estimated under it


def test_t5_small_on_32_gpus_is_not_put_under_zero_3():
    assert chosen(config_of("small2vm16gpu.json")).startswith("0 (auto: no DeepSpeed")


@pytest.mark.parametrize("machines", [(), A100_80_X8], ids=["A100 40GB", "A100 80GB"])
def test_a_7b_lora_whose_base_fits_each_gpu_is_not_put_under_zero_3(machines):
    config = config_of(LLAMA, *machines)
    assert config.train.lora is not None
    # The frozen base counts as weights only: bf16 (the worker casts it without DeepSpeed),
    # no gradients or Adam moments.
    assert chosen(config).startswith("0 (auto: no DeepSpeed: the whole training state, 16.5 GiB")


def test_a_7b_fine_tuned_whole_on_one_a100_80gb_takes_the_first_plan_its_estimate_fits():
    one_gpu = ("cluster.machine_type=a2-ultragpu-1g", "cluster.accelerator_count=1")
    config = config_of(LLAMA, "train.lora=null", *A100_80_X8[1:], *one_gpu)
    shape = model_shape(config.model, kind=CAUSAL_LM)
    where, lengths = training_where(config, "vertex"), training_lengths(config, shape)

    def per_gpu(plan: ZeroPlan | None) -> float:
        estimate, _ = training_memory(
            shape,
            lengths=lengths,
            dtype=where.dtype,
            device="cuda",
            checkpointing=True,
            zero=plan,
            processes_per_node=1,
            nodes=1,
        )
        return estimate.total

    choice, _ = stage_choice(config, shape, "vertex")
    assert choice.plan == ZeroPlan(3, offload_optimizer="cpu")
    # Every plan before it needs more than 90% of the 80 GiB; it needs less.
    index = LADDER.index(choice.plan)
    assert all(per_gpu(plan) > (1 - MARGIN) * 80 * GIB for plan in LADDER[:index])
    assert per_gpu(choice.plan) <= (1 - MARGIN) * 80 * GIB
    assert choice.describe().startswith(
        "3, optimizer offloaded to cpu (auto: ZeRO-3, optimizer offloaded to cpu, 17.9 GiB per "
        "GPU, fits 80 GiB per A100 80GB with 10% to spare (no ZeRO 116.0 GiB, ZeRO-1 "
        "128.5 GiB, ZeRO-2 128.5 GiB, ZeRO-3 118.3 GiB do not))"
    )
    rows = check_fit(config, target="vertex").rows
    assert "ZeRO-3 (offload optimizer → cpu)" in rows[0].settings and rows[0].problem is None


def test_t5_xxl_on_2_nodes_of_16_gpus_climbs_past_zero_2_only_when_it_does_not_fit():
    # With checkpointing (as shipped) the bf16 weights whole on every GPU and ZeRO-2's share
    # of the rest fit: ZeRO-2 moves 2/3 of ZeRO-3's bytes per step.
    assert chosen(config_of(XXL)).startswith("2 (auto: ZeRO-2, 30.1 GiB per GPU, ")
    # Without it the activations (eager attention's scores, as a T5 trains on CUDA) push
    # ZeRO-2 and even ZeRO-3 over 90% of 40 GiB: the optimizer goes to the host.
    assert chosen(config_of(XXL, "train.gradient_checkpointing=false")).startswith(
        "3, optimizer offloaded to cpu (auto: ZeRO-3, optimizer offloaded to cpu, 35.1 GiB per "
        "GPU, fits 40 GiB per A100 40GB with 10% to spare (no ZeRO 260.3 GiB, ZeRO-1 78.8 GiB, "
        "ZeRO-2 58.7 GiB, ZeRO-3 40.3 GiB do not))"
    )


def test_offload_the_user_sets_beside_auto_is_kept():
    config = config_of("small1vm1gpu.json", "train.offload_optimizer=cpu")
    assert chosen(config).startswith("1, optimizer offloaded to cpu (auto: ZeRO-1, ")
    config = config_of("small1vm1gpu.json", "train.offload_param=cpu")
    assert chosen(config).startswith("3, parameters offloaded to cpu (auto: ZeRO-3, ")


def test_a_fixed_stage_is_taken_as_the_config_says():
    assert chosen(config_of("small1vm1gpu.json", "train.zero_stage=3")) == "3 (train.zero_stage)"
    assert chosen(config_of("small1vm1gpu.json", "train.zero_stage=0")) == "0 (train.zero_stage 0)"
    off = config_of("small1vm1gpu.json", "train.use_deepspeed=false")
    assert chosen(off) == "0 (train.use_deepspeed false)"


def test_a_users_deepspeed_json_wins_over_auto(tmp_path):
    path = tmp_path / "ds.json"
    path.write_text('{"zero_optimization": {"stage": 2}}')
    config = config_of("small1vm1gpu.json", f"train.deepspeed_config={path}")
    assert config.train.zero_stage == "auto"
    assert chosen(config) == "2 (train.deepspeed_config)"


def test_an_auto_config_that_does_not_fit_is_not_told_to_try_zero_3_or_offload():
    auto = check_fit(
        config_of("small1vm1gpu.json", "train.per_device_batch_size=512"), target="vertex"
    )
    (problem,) = auto.problems
    assert "train.zero_stage" not in problem and "offload" not in problem
    assert "train.gradient_checkpointing true (~" in problem
    fixed = check_fit(
        config_of("small1vm1gpu.json", "train.per_device_batch_size=512", "train.zero_stage=1"),
        target="vertex",
    )
    assert "train.offload" not in fixed.problems[0]  # offload is offered under ZeRO-3 only
    assert any(note.startswith("ZeRO stage: 1 (train.zero_stage)") for note in fixed.notes)


def test_when_nothing_fits_the_last_plan_is_taken_and_the_reason_says_what_it_needs():
    one_a100 = ("cluster.machine_type=a2-highgpu-1g", "cluster.accelerator_count=1")
    config = config_of(LLAMA, "train.lora=null", *one_a100)
    # Each GPU plan that fits 40 GiB needs more host RAM than a2-highgpu-1g's 85 GiB.
    assert chosen(config) == (
        "3, optimizer and parameters offloaded to cpu (auto: nothing fits 40 GiB per A100 40GB "
        "with 10% to spare and 85 GiB of host RAM; the last plan tried needs 5.4 GiB per GPU "
        "and 172.4 GiB of host RAM)"
    )
    (problem,) = check_fit(config, target="vertex").problems
    assert problem.startswith("cluster.machine_type a2-highgpu-1g has 85 GiB of host RAM")
