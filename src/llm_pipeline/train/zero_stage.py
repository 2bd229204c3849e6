"""`train.zero_stage: "auto"` made concrete on the machine the finetune job runs on.

The fit check's rule (`fit/stage.py`) is applied again where the job runs, so the stage
suits the memory actually there, and the training processes only ever see a stage of 0 to
3. The estimate uses this machine (`fit.machines.this_machine`), the processes and nodes
the job starts, and the lengths preprocess wrote beside the dataset (`preprocess.json`):
the longest rows a micro-batch can hold.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from typing import Any

import torch

from llm_pipeline.config import DataConfig, ModelConfig, TrainConfig
from llm_pipeline.data.labels import LABEL_SET_KEY
from llm_pipeline.fit.check import DEFAULT_LABELS
from llm_pipeline.fit.machines import Place, this_machine
from llm_pipeline.fit.memory import DeviceKind, Lengths
from llm_pipeline.fit.places import DEFAULT_SOURCE_CAP, Where, auto_dtype
from llm_pipeline.fit.shapes import ModelShape, ShapeUnavailable, model_shape
from llm_pipeline.fit.stage import StageChoice, choose_stage, unknown_shape_choice
from llm_pipeline.fit.states import ZeroPlan
from llm_pipeline.fit.training import configured_stage
from llm_pipeline.output_files import PREPROCESS_REPORT_FILE
from llm_pipeline.storage import local_copy
from llm_pipeline.tasks import get_task


def resolve_zero_stage(
    train: TrainConfig,
    *,
    model: ModelConfig,
    task: str,
    dataset_dir: str,
    processes: int,
    nodes: int,
    place: Callable[[], Place] = this_machine,
    cuda_available: Callable[[], bool] = torch.cuda.is_available,
) -> tuple[TrainConfig, StageChoice]:
    """`train` with a concrete stage (and the offload it chose), and the choice with its
    reason. A stage the config fixes is kept as it is. `place` and `cuda_available` read
    this machine (seams for tests)."""
    fixed, _ = configured_stage(train)
    if fixed is not None:
        return train, fixed
    here = place()
    device: DeviceKind = "cuda" if here.accelerator is not None else "cpu"
    dtype = auto_dtype(here) if train.precision == "auto" else train.precision
    where = Where(here, device, processes, nodes, dtype)
    if here.accelerator is None and cuda_available():
        choice = StageChoice(
            ZeroPlan(3),
            "auto",
            "this machine's GPUs are not known to the fit check, so the stage that needs "
            "least per GPU without offload",
        )
        return _with_stage(train, choice), choice
    kind = get_task(task).model_kind
    report = _preprocess_report(dataset_dir)
    labels = len(report.get(LABEL_SET_KEY, {}).get("names", [])) or DEFAULT_LABELS
    try:
        shape = model_shape(model, kind=kind, lora=train.lora, labels=labels)
    except ShapeUnavailable as exc:
        choice = unknown_shape_choice(where, str(exc))
    else:
        choice = choose_stage(
            shape,
            where,
            _lengths(report, shape, train.per_device_batch_size),
            checkpointing=train.gradient_checkpointing,
            freeze_encoder=train.freeze_encoder,
            offload_optimizer=train.offload_optimizer,
            offload_param=train.offload_param,
        )
    return _with_stage(train, choice), choice


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


def _lengths(report: dict[str, Any], shape: ModelShape, batch: int) -> Lengths:
    """A micro-batch at the longest rows preprocess kept (its resolved max lengths); without
    its report, at the caps the fit check assumes for unset lengths."""
    if shape.kind != "seq2seq":
        cap = min(DEFAULT_SOURCE_CAP, shape.max_positions or DEFAULT_SOURCE_CAP)
        return Lengths(batch, int(report.get("max_length") or cap), 0)
    target_cap = DataConfig.model_fields["max_target_length_cap"].default
    return Lengths(
        batch,
        int(report.get("max_source_length") or DEFAULT_SOURCE_CAP),
        int(report.get("max_target_length") or target_cap),
    )
