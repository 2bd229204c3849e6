"""`train.zero_stage: "auto"` made concrete on the machine the finetune job runs on.

The fit check's rule (`fit/stage.py`) is applied again where the job runs, so the stage
suits the memory actually there, and the training processes only ever see a stage of 0 to
3. The estimate uses this machine (`fit.machines.this_machine`), the processes and nodes
the job starts, and the lengths preprocess wrote beside the dataset (`preprocess.json`):
the longest rows a micro-batch can hold. `configured_stage` reads the stage a config fixes
instead (`train.zero_stage` 0-3, `use_deepspeed` false, or the user's DeepSpeed JSON), for
this job and for the fit check alike.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from typing import Any

from llm_pipeline.config import DataConfig, ModelConfig, TrainConfig
from llm_pipeline.config.train import AUTO
from llm_pipeline.fit.machines import Place, this_machine
from llm_pipeline.fit.memory import DeviceKind, Lengths
from llm_pipeline.fit.places import DEFAULT_SOURCE_CAP, Where, auto_dtype
from llm_pipeline.fit.shapes import ModelShape, ShapeUnavailable, model_shape
from llm_pipeline.fit.stage import StageChoice, choose_stage, unknown_shape_choice
from llm_pipeline.fit.states import DEEPSPEED_MAX_LIVE_DEFAULT, ZeroPlan
from llm_pipeline.output_files import LABEL_SET_KEY, PREPROCESS_REPORT_FILE
from llm_pipeline.storage import local_copy
from llm_pipeline.tasks import Task, get_task
from llm_pipeline.train.deepspeed_config import build_deepspeed_config, load_user_deepspeed_config


def resolve_zero_stage(
    train: TrainConfig,
    *,
    model: ModelConfig,
    task: str,
    dataset_dir: str,
    processes: int,
    nodes: int,
    place: Callable[[], Place] = this_machine,
) -> tuple[TrainConfig, StageChoice]:
    """`train` with a concrete stage (and the offload it chose), and the choice with its
    reason. A stage the config fixes is kept as it is. `place` reads this machine, its GPUs
    as torch sees them (`fit.machines.visible_gpus`): a seam for tests."""
    fixed, _ = configured_stage(train)
    if fixed is not None:
        return train, fixed
    here = place()
    device: DeviceKind = "cuda" if here.accelerator is not None else "cpu"
    dtype = auto_dtype(here) if train.precision == "auto" else train.precision
    where = Where(here, device, processes, nodes, dtype)
    served = get_task(task)
    report = _preprocess_report(dataset_dir)
    # A classifier's head, for the labels preprocess found (model_shape's default without).
    labels = {"labels": n} if (n := len(report.get(LABEL_SET_KEY, {}).get("names", []))) else {}
    try:
        shape = model_shape(
            model, kind=served.model_kind, terms=served.fit_terms(), lora=train.lora, **labels
        )
    except ShapeUnavailable as exc:
        choice = unknown_shape_choice(where, str(exc))
    else:
        choice = choose_stage(
            shape,
            where,
            _lengths(report, shape, train.per_device_batch_size, served),
            checkpointing=train.gradient_checkpointing,
            freeze_encoder=train.freeze_encoder,
            offload_optimizer=train.offload_optimizer,
            offload_param=train.offload_param,
        )
    return _with_stage(train, choice), choice


def configured_stage(train: TrainConfig) -> tuple[StageChoice | None, str | None]:
    """The ZeRO plan the config fixes (generated, or the user's DeepSpeed JSON; a plan of
    None: no DeepSpeed), None when `zero_stage: "auto"` leaves it to `stage.choose_stage`;
    and a note when the user's JSON could not be read."""
    if not train.use_deepspeed:
        return StageChoice(None, "train.use_deepspeed false"), None
    if train.zero_stage == 0:
        return StageChoice(None, "train.zero_stage 0"), None
    note = None
    if train.deepspeed_config is not None:
        try:
            zero = load_user_deepspeed_config(train.deepspeed_config).get("zero_optimization", {})
        except ValueError as exc:
            note = f"train.deepspeed_config not read ({exc}): estimated from train.*"
        else:
            stage = int(zero.get("stage", 0))
            if stage == 0:
                return StageChoice(None, "train.deepspeed_config", "its ZeRO stage 0"), None
            plan = ZeroPlan(
                stage=stage,
                offload_optimizer=str(zero.get("offload_optimizer", {}).get("device", "none")),
                offload_param=str(zero.get("offload_param", {}).get("device", "none")),
                max_live_parameters=int(
                    zero.get("stage3_max_live_parameters", DEEPSPEED_MAX_LIVE_DEFAULT)
                ),
            )
            return StageChoice(plan, "train.deepspeed_config"), None
    if train.zero_stage == AUTO:
        return None, note
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
    return StageChoice(plan, "train.zero_stage"), note


def _with_stage(train: TrainConfig, choice: StageChoice) -> TrainConfig:
    return train.model_copy(
        update={
            "zero_stage": choice.stage,
            "offload_optimizer": choice.offload_optimizer,
            "offload_param": choice.offload_param,
        }
    )


def _preprocess_report(dataset_dir: str) -> dict[str, Any]:
    """What preprocess wrote beside the dataset; empty when it is missing or unreadable
    (a dataset made another way): the lengths then fall back to the caps."""
    uri = f"{str(dataset_dir).rstrip('/')}/{PREPROCESS_REPORT_FILE}"
    try:
        with tempfile.TemporaryDirectory(prefix="llm-preprocess-report-") as work:
            payload = json.loads(local_copy(uri, work).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return payload if isinstance(payload, dict) else {}


def _lengths(report: dict[str, Any], shape: ModelShape, batch: int, task: Task) -> Lengths:
    """A micro-batch at the longest rows preprocess kept (its resolved max lengths); without
    its report, at the caps the fit check assumes for unset lengths. Each row is as many
    sequences as the task runs per row (DPO's chosen and rejected)."""
    if not shape.kind.encoder_decoder:
        cap = min(DEFAULT_SOURCE_CAP, shape.max_positions or DEFAULT_SOURCE_CAP)
        return Lengths(batch, int(report.get("max_length") or cap), 0, task.fit_sequences_per_row)
    target_cap = DataConfig.model_fields["max_target_length_cap"].default
    return Lengths(
        batch,
        int(report.get("max_source_length") or DEFAULT_SOURCE_CAP),
        int(report.get("max_target_length") or target_cap),
        task.fit_sequences_per_row,
    )
