"""What the finetune step leaves behind: the model folder, its settings, the run's result.

Only the primary process (global rank 0) writes; the gather of a ZeRO-3 model is a
collective, so every rank calls `save_final_model`. The model folder appears whole or not at
all (`atomic_output_dir`): a run that dies while saving leaves the previous output, if any.
A LoRA run's model folder holds the merged model, which loads like any other, and the
adapter alone in its `adapter/` subfolder (`lora.ADAPTER_FOLDER`).
"""

from __future__ import annotations

import inspect
import json
import shutil
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from transformers import PreTrainedTokenizerBase, TrainerCallback

from llm_pipeline.output_files import RESOLVED_CONFIG_FILE, TRAINING_LOG_FILE
from llm_pipeline.storage import atomic_output_dir, is_remote, to_uri, write_atomic
from llm_pipeline.train import lora
from llm_pipeline.train.spec import WorkerSpec
from llm_pipeline.train.trainer import FinetuneTrainer


def save_final_model(
    trainer: FinetuneTrainer,
    tokenizer: PreTrainedTokenizerBase,
    spec: WorkerSpec,
    *,
    resolved: dict[str, Any],
) -> None:
    """Consolidated safetensors, config, generation config, tokenizer and resolved settings.

    Under ZeRO-3 the weights are gathered from every rank into one 16-bit state dict
    (`stage3_gather_16bit_weights_on_model_save`), so the folder loads without DeepSpeed.
    With LoRA the adapter is saved first (to this node's work folder), then merged into the
    weights it adapts; the folder gets the merged model and, in `adapter/`, the adapter.
    Training is over: the model is changed in place.
    """
    model = trainer.accelerator.unwrap_model(trainer.model)
    adapter: Path | None = None
    prefix = ""
    if lora.is_lora(model):
        adapter = Path(spec.work_dir) / lora.ADAPTER_FOLDER
        lora.save_adapter(model, adapter)
        model, prefix = lora.merge_into_base(model)
    state_dict = trainer.accelerator.get_state_dict(_without_compile(trainer))
    if dist.get_rank() == 0:
        if prefix:
            state_dict = lora.without_prefix(state_dict, prefix)
        with atomic_output_dir(spec.output_dir) as folder:
            model.save_pretrained(folder, state_dict=state_dict, safe_serialization=True)
            if adapter is not None:
                shutil.copytree(adapter, Path(folder) / lora.ADAPTER_FOLDER)
            _inputs_the_model_takes(tokenizer, model)
            tokenizer.save_pretrained(folder)
            payload = {
                "task": spec.task,
                "model": spec.model.model_dump(mode="json"),
                "train": spec.train.model_dump(mode="json"),
                "resolved": resolved,
            }
            text = json.dumps(payload, indent=2, default=str) + "\n"
            (Path(folder) / RESOLVED_CONFIG_FILE).write_text(text, encoding="utf-8")
            # The loss curves, for the run report: every logged train and eval loss.
            history = json.dumps(trainer.state.log_history, indent=1, default=str) + "\n"
            (Path(folder) / TRAINING_LOG_FILE).write_text(history, encoding="utf-8")
    dist.barrier()


def _inputs_the_model_takes(tokenizer: PreTrainedTokenizerBase, model: Any) -> None:
    """Drop tokenizer outputs the model's forward has no argument for (BERT's token_type_ids
    for a T5), so `model.generate(**tokenizer(text))` works on the saved folder as it is."""
    accepted = inspect.signature(model.forward).parameters
    names = [name for name in tokenizer.model_input_names if name in accepted]
    if names != list(tokenizer.model_input_names):
        tokenizer.model_input_names = names
        tokenizer.init_kwargs["model_input_names"] = names  # what save_pretrained writes


def write_result(spec: WorkerSpec, result: dict[str, Any]) -> None:
    """The primary's report to the launcher on this node (metrics, steps, where things are)."""
    if dist.get_rank() == 0:
        write_atomic(spec.result_path, json.dumps(result, indent=2) + "\n")


def tensorboard_callbacks(spec: WorkerSpec) -> list[TrainerCallback]:
    """TensorBoard event files from the primary, written locally and mirrored where asked.

    torch's SummaryWriter writes local files only, so a `gs://` folder (the step's own, or
    Vertex's AIP_TENSORBOARD_LOG_DIR) gets the files copied after each checkpoint and at the
    end.
    """
    wanted = [spec.tensorboard_dir, spec.tensorboard_mirror]
    if dist.get_rank() != 0 or not any(wanted):
        return []
    from transformers.integrations import TensorBoardCallback

    local_dir = (
        spec.tensorboard_dir
        if spec.tensorboard_dir and not is_remote(spec.tensorboard_dir)
        else None
    )
    local = Path(to_uri(local_dir)) if local_dir else Path(spec.work_dir) / "tensorboard"
    local.mkdir(parents=True, exist_ok=True)
    board = TensorBoardCallback()
    # Set, not passed as a writer: the callback closes its writer when training ends and
    # opens a new one for the final evaluation, in `logging_dir` (else under output_dir).
    board.logging_dir = str(local)
    mirrors = [d for d in wanted if d and d != local_dir]
    return [board, *(_UploadFolder(local, mirror) for mirror in mirrors)]


class _UploadFolder(TrainerCallback):
    """Copies the local event files to the remote folder after each checkpoint and at the end."""

    def __init__(self, local: Path, remote: str) -> None:
        self.local, self.remote = local, remote

    def _sync(self) -> None:
        import fsspec

        fs, root = fsspec.core.url_to_fs(self.remote)
        for file in self.local.rglob("*"):
            if file.is_file():
                fs.put_file(str(file), f"{root.rstrip('/')}/{file.relative_to(self.local)}")

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._sync()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._sync()


def _without_compile(trainer: FinetuneTrainer) -> torch.nn.Module:
    """What to take the weights from: the Trainer's wrapped model, less torch.compile's wrap.

    `train.compile` without DeepSpeed wraps the model (`true`) or copies it around compiled
    blocks (`blocks`), and either's state dict names every weight under `_orig_mod.`: saved
    as they are, the folder would load as an untrained model. DeepSpeed compiles its engine's
    module in place, whose names stay the model's, and its engine must stay whole to gather
    ZeRO-3's partitions.
    """
    if trainer.is_deepspeed_enabled:
        return trainer.model_wrapped
    model: torch.nn.Module = trainer.accelerator.unwrap_model(
        trainer.model_wrapped, keep_torch_compile=False
    )
    return model
