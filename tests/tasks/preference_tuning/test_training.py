"""DPO's loss as the Trainer calls it (training.py): on one batch it is loss.py's `dpo_loss` of
the policy's and the reference's log-probs, the reference being the base model under LoRA and
the columns taken before the first step otherwise; those columns are kept for a resumed run."""

import copy
import json
from pathlib import Path

import datasets
import pytest
import torch
from peft import LoraConfig, get_peft_model

from llm_pipeline.config import TrainConfig
from llm_pipeline.errors import TrainError
from llm_pipeline.tasks import get_task
from llm_pipeline.tasks.base import ModelLoss
from llm_pipeline.tasks.preference_tuning.collate import REFERENCE_COLUMNS
from llm_pipeline.tasks.preference_tuning.loss import LOSS_TYPES, dpo_loss, pair_logps
from llm_pipeline.tasks.preference_tuning.training import REFERENCE_FILE, DpoLoss

from .test_reference import COLLATE, pair_rows, tiny_llama

BETA = 0.3


def _lora(model: torch.nn.Module, dropout: float = 0.0) -> torch.nn.Module:
    policy = get_peft_model(
        model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], lora_dropout=dropout)
    )
    with torch.no_grad():  # a fresh adapter is a no-op (B = 0): give it weights
        for name, weight in policy.named_parameters():
            if "lora_B" in name:
                weight.normal_(std=0.5)
    return policy


def test_the_task_hands_the_trainer_a_model_loss_with_train_dpos_settings() -> None:
    task = get_task("preference_tuning")
    loss = task.training_loss(TrainConfig(dpo={"beta": 0.5, "loss_type": "ipo"}))
    assert isinstance(loss, ModelLoss)
    assert (loss.beta, loss.loss_type) == (0.5, "ipo")
    # The config's choices are the loss's.
    assert TrainConfig.model_fields["dpo"].annotation.model_fields[
        "loss_type"
    ].annotation.__args__ == tuple(LOSS_TYPES)


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_with_reference_columns_the_loss_is_dpo_loss_of_one_forward(loss_type: str) -> None:
    model = tiny_llama()
    rows = pair_rows(4)
    for index, row in enumerate(rows):
        row["ref_chosen_logps"], row["ref_rejected_logps"] = -10.0 - index, -9.0 + index
    batch = COLLATE(rows)

    loss, figures = DpoLoss(beta=BETA, loss_type=loss_type)(model, batch, unwrapped=model)

    policy = pair_logps(model, batch)
    ref_chosen, ref_rejected = (batch[column] for column in REFERENCE_COLUMNS)
    expected = dpo_loss(policy, ref_chosen, ref_rejected, beta=BETA, loss_type=loss_type)
    torch.testing.assert_close(loss, expected)
    assert loss.requires_grad
    chosen = BETA * (policy.chosen - ref_chosen)
    rejected = BETA * (policy.rejected - ref_rejected)
    torch.testing.assert_close(figures["reward_margin"], (chosen - rejected).mean())
    torch.testing.assert_close(figures["reward_accuracy"], (chosen > rejected).float().mean())
    torch.testing.assert_close(figures["reward_chosen"], chosen.mean())
    torch.testing.assert_close(figures["reward_rejected"], rejected.mean())


def test_under_lora_the_reference_is_the_base_model_without_checkpointing() -> None:
    base = tiny_llama().eval()
    model = copy.deepcopy(base)
    model.activation_checkpointing_enable()
    policy = _lora(model).train()
    batch = COLLATE(pair_rows(3))
    seen_training: list[bool] = []
    layer = model.model.layers[0]
    layer.register_forward_pre_hook(lambda module, args: seen_training.append(module.training))

    loss, _ = DpoLoss(beta=BETA, loss_type="sigmoid")(policy, batch, unwrapped=policy)

    # The reference forward ran in eval mode (no recomputation), the policy's in training.
    assert seen_training == [False, True]
    loss.backward()
    trained = {name for name, p in policy.named_parameters() if p.grad is not None}
    assert trained and all("lora_" in name for name in trained)
    with torch.no_grad():
        reference = pair_logps(base, batch)
        expected = dpo_loss(
            pair_logps(policy.eval(), batch),
            reference.chosen,
            reference.rejected,
            beta=BETA,
            loss_type="sigmoid",
        )
    torch.testing.assert_close(loss.detach(), expected)


def test_full_dpo_without_the_reference_columns_is_an_error() -> None:
    model = tiny_llama()
    with pytest.raises(TrainError, match="reference log-probs"):
        DpoLoss(beta=BETA, loss_type="sigmoid")(model, COLLATE(pair_rows(2)), unwrapped=model)


def _start(model: torch.nn.Module, splits: dict, folder: Path | None, *, resumed: bool) -> dict:
    return DpoLoss(beta=BETA, loss_type="sigmoid").start(
        model,
        splits,
        collate=COLLATE,
        batch_size=2,
        device="cpu",
        keep_folder=str(folder) if folder else None,
        resumed=resumed,
    )


def test_the_reference_is_taken_once_kept_and_read_back_by_a_resumed_run(tmp_path: Path) -> None:
    splits = {
        "train": datasets.Dataset.from_list(pair_rows(5)),
        "validation": datasets.Dataset.from_list(pair_rows(3)),
    }
    model = tiny_llama()
    started = _start(model, splits, tmp_path, resumed=False)

    for name, split in splits.items():
        with torch.no_grad():
            expected = pair_logps(model.eval(), COLLATE(list(split)))
        torch.testing.assert_close(torch.tensor(started[name]["ref_chosen_logps"]), expected.chosen)
        torch.testing.assert_close(
            torch.tensor(started[name]["ref_rejected_logps"]), expected.rejected
        )
    kept = json.loads((tmp_path / REFERENCE_FILE).read_text())
    assert kept["train"]["ref_chosen_logps"] == started["train"]["ref_chosen_logps"]

    # Resumed, the weights have trained: the kept columns stand, not a new pass.
    trained = tiny_llama()
    with torch.no_grad():
        for weight in trained.parameters():
            weight.add_(0.1)
    resumed = _start(trained, splits, tmp_path, resumed=True)
    for name in splits:
        for column in REFERENCE_COLUMNS:
            assert resumed[name][column] == started[name][column]

    (tmp_path / REFERENCE_FILE).unlink()
    with pytest.raises(TrainError, match=f"{REFERENCE_FILE}: missing, and the run resumes"):
        _start(trained, splits, tmp_path, resumed=True)


def test_start_turns_dropout_off_and_leaves_a_lora_runs_splits_alone() -> None:
    policy = _lora(tiny_llama(), dropout=0.3)
    splits = {"train": datasets.Dataset.from_list(pair_rows(2))}
    dropouts = [m for m in policy.modules() if isinstance(m, torch.nn.Dropout)]
    assert any(m.p > 0 for m in dropouts)

    assert _start(policy, splits, None, resumed=True) is splits
    assert all(m.p == 0 for m in dropouts)
