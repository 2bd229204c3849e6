"""Training prints a status line per logging period: step, loss, eval loss, time left."""

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from transformers import Trainer, TrainingArguments

from llm_pipeline.progress import MARK
from llm_pipeline.train.status import TrainingStatus


def _state(step: int, primary: bool = True) -> SimpleNamespace:
    return SimpleNamespace(global_step=step, max_steps=100, is_world_process_zero=primary)


def test_status_lines_name_step_losses_and_time_left(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = iter([1000.0, 1010.0, 1010.0])
    monkeypatch.setattr("llm_pipeline.train.status.time.monotonic", lambda: next(clock))
    status = TrainingStatus()
    status.on_train_begin(None, _state(20), None)
    status.on_log(None, _state(40), None, logs={"loss": 2.5, "learning_rate": 1e-4})
    status.on_log(None, _state(40), None, logs={"eval_loss": 2.75})
    status.on_log(None, _state(40), None, logs={"train_runtime": 10.0})  # the closing summary
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        f"{MARK}training for 100 steps (resumed at step 20)",
        f"{MARK}step 40/100 · loss 2.500 · 2.00 steps/s · 30 s left",
        f"{MARK}step 40/100 · eval loss 2.750 · 2.00 steps/s · 30 s left",
    ]


def test_only_the_primary_process_prints(capsys: pytest.CaptureFixture[str]) -> None:
    status = TrainingStatus()
    status.on_train_begin(None, _state(0, primary=False), None)
    status.on_log(None, _state(10, primary=False), None, logs={"loss": 1.0})
    assert capsys.readouterr().out == ""


def test_a_period_that_lost_steps_is_followed_by_a_warning(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("llm_pipeline.train.status.time.monotonic", lambda: 1000.0)
    status = TrainingStatus()
    status.on_train_begin(None, _state(0), None)
    lost = {"skipped_steps": 0.0, "nonfinite_steps": 0.0}
    status.on_log(None, _state(25), None, logs={"loss": 4.0, **lost})
    lost = {"skipped_steps": 2.0, "nonfinite_steps": 2.0}
    status.on_log(None, _state(50), None, logs={"loss": 4.5, **lost})
    status.on_log(None, _state(75), None, logs={"loss": 4.2, **lost})  # none new: no warning
    lost = {"skipped_steps": 2.0, "nonfinite_steps": 3.0}  # the plain Trainer: applied
    status.on_log(None, _state(100), None, logs={"loss": 4.1, **lost})
    warnings = [line for line in capsys.readouterr().out.splitlines() if "warning" in line]
    assert warnings == [
        f"{MARK}warning: 2 of the last 25 steps skipped, their gradients not finite "
        "(2 skipped in this run)",
        f"{MARK}warning: 1 of the last 25 steps had non-finite gradients, applied (3 in this run)",
    ]


class _Line(torch.nn.Module):
    """The smallest model a Trainer trains: y = w·x + b, squared error."""

    def __init__(self) -> None:
        super().__init__()
        self.fit = torch.nn.Linear(2, 1)

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"loss": ((self.fit(x).squeeze(-1) - labels) ** 2).mean()}


def test_a_run_shorter_than_logging_steps_still_logs_its_training_loss(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """3 steps with logging_steps 25: the last step is logged, so the report's loss curve
    and the status line show the training loss instead of nothing."""
    rows = [
        {"x": torch.tensor([float(i), 1.0]), "labels": torch.tensor(float(i))} for i in range(8)
    ]
    arguments = TrainingArguments(
        output_dir=str(tmp_path),
        max_steps=3,
        logging_steps=25,
        per_device_train_batch_size=2,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
    )
    trainer = Trainer(
        model=_Line(), args=arguments, train_dataset=rows, callbacks=[TrainingStatus()]
    )
    trainer.train()
    assert [entry["step"] for entry in trainer.state.log_history if "loss" in entry] == [3]
    assert f"{MARK}step 3/3 · loss " in capsys.readouterr().out
