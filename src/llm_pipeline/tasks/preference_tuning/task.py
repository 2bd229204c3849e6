"""Preference tuning: Direct Preference Optimization (DPO) of a causal LM on pairs of answers
to one prompt, the one a person chose and the one they rejected (DeepSpeed-Chat's step after
supervised fine-tuning; TRL's `DPOTrainer` loss).

Rows hold a prompt (`prompt` text, or a `messages` chat ending with the user's turn) and two
answers, `chosen` and `rejected` (text, or an assistant message). The model usually starts
from an instruction-tuned version in the registry (`model.source: "registry:<model>@<v>"`).
Served, it is a chat model like instruction tuning's: the prediction is its completion.
"""

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar

from llm_pipeline.tasks.base import Instance, PreprocessResult, ServingPage, Task
from llm_pipeline.tasks.kinds import CAUSAL_LM, ModelKind


class PreferenceTuning(Task):
    """DPO of a causal LM (OPT, Llama, Qwen, Gemma) on chosen/rejected answer pairs."""

    name: ClassVar[str] = "preference_tuning"

    # data
    role_sets: ClassVar[tuple[tuple[str, ...], ...]] = (
        ("prompt", "chosen", "rejected"),
        ("messages", "chosen", "rejected"),
    )
    target_role: ClassVar[str] = "chosen"
    data_keys: ClassVar[frozenset[str]] = frozenset({"max_length", "chat_template"})

    def preprocess(
        self, dataset: Any, *, tokenizer: Any, output_dir: str | Path, data: Any, model: Any
    ) -> PreprocessResult:
        raise NotImplementedError  # helper dpo-task

    # model and training
    model_kind: ClassVar[ModelKind] = CAUSAL_LM
    train_keys: ClassVar[frozenset[str]] = frozenset({"dpo"})
    training_columns: ClassVar[tuple[str, ...] | None] = tuple(
        f"{answer}_{name}"
        for answer in ("chosen", "rejected")
        for name in ("input_ids", "attention_mask", "labels")
    )
    training_figures: ClassVar[Mapping[str, str]] = {
        "reward_accuracy": "reward accuracy",
        "reward_margin": "reward margin",
    }

    def build_model(
        self, model: Any, tokenizer: Any, *, labels: Mapping[str, Any] | None = None
    ) -> Any:
        """A causal LM, as instruction tuning builds it: usually the checkpoint it tuned."""
        from llm_pipeline.models.loading import load_model

        return load_model(model, tokenizer, kind=self.model_kind)

    def training_lengths(self, split: Any) -> list[int]:
        """A pair's length is its longer answer's row: the batch pads both to the longest."""
        return [
            max(len(chosen), len(rejected))
            for chosen, rejected in zip(
                split["chosen_input_ids"], split["rejected_input_ids"], strict=True
            )
        ]

    def training_collator(
        self, tokenizer: Any, model: Any, *, pad_to_multiple_of: int | None
    ) -> Callable[[list[dict[str, Any]]], dict[str, Any]]:
        """n pairs -> 2n rows, the chosen answers first, for one forward of both
        (`collate.PairCollator`); reference log-probs ride along when they were taken."""
        from llm_pipeline.tasks.preference_tuning.collate import PairCollator

        return PairCollator(
            pad_id=int(tokenizer.pad_token_id), pad_to_multiple_of=pad_to_multiple_of
        )

    def training_loss(
        self, train: Any, *, label_set: Any = None, train_set: Any = None
    ) -> Callable[..., Any]:
        """DPO's loss (`train.dpo`), run on the model by the Trainer (`training.DpoLoss`):
        the reference is the model with its adapters off under LoRA, else log-probs taken
        before the first step."""
        from llm_pipeline.tasks.preference_tuning.training import DpoLoss

        return DpoLoss(beta=train.dpo.beta, loss_type=train.dpo.loss_type)

    # evaluation
    metric_names: ClassVar[tuple[str, ...]] = ("preference_accuracy", "reward_margin", "rougeL")
    source_column: ClassVar[str] = "prompt"
    reference_column: ClassVar[str] = "chosen"
    serving_column: ClassVar[str] = "chat"
    report_title: ClassVar[str] = "Preference tuning evaluation"
    source_label: ClassVar[str] = "prompt"
    prediction_label: ClassVar[str] = "response"
    output_label: ClassVar[str] = "response"

    # serving
    serving_page: ClassVar[ServingPage] = ServingPage(
        title="Chat",
        action="Send",
        placeholder="Message (Enter sends, Shift+Enter starts a new line)",
        output="Answer",
        parameters=("max_new_tokens", "temperature", "top_p"),
    )
    serving_parameters: ClassVar[tuple[str, ...]] = (
        "max_new_tokens",
        "temperature",
        "top_p",
        "stop",
    )
    serving_instance_shape: ClassVar[str] = 'a list of prompts (texts) or {"messages": [...]} chats'

    def serving_instance(self, value: Any) -> Instance:
        raise NotImplementedError  # helper dpo-task

    def serving_prompter(
        self, tokenizer: Any, *, prefix: str, chat_template: str | None
    ) -> Callable[[Instance], str]:
        raise NotImplementedError  # helper dpo-task

    def serving_model(self, settings: Any, folder: Path) -> Any:
        raise NotImplementedError  # helper dpo-task

    # fit check
    def fit_lengths(self, config: Any, shape: Any) -> tuple[int, int]:
        raise NotImplementedError  # helper dpo-task
