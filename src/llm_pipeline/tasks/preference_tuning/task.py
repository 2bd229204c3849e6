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

from llm_pipeline.tasks.base import BuiltinDataset, PreprocessResult
from llm_pipeline.tasks.chat import ChatTask
from llm_pipeline.tasks.kinds import CAUSAL_LM, ModelKind


class PreferenceTuning(ChatTask):
    """DPO of a causal LM (OPT, Llama, Qwen, Gemma) on chosen/rejected answer pairs."""

    name: ClassVar[str] = "preference_tuning"

    # data
    role_sets: ClassVar[tuple[tuple[str, ...], ...]] = (
        ("prompt", "chosen", "rejected"),
        ("messages", "chosen", "rejected"),
    )
    target_role: ClassVar[str] = "chosen"
    data_keys: ClassVar[frozenset[str]] = frozenset({"max_length", "chat_template"})

    def builtin_datasets(self) -> Mapping[str, BuiltinDataset]:
        """The demo's dataset (`demo_data`)."""
        from llm_pipeline.tasks.preference_tuning import demo_data

        return {demo_data.NAME: demo_data.DATASET}

    def preprocess(
        self, dataset: Any, *, tokenizer: Any, output_dir: str | Path, data: Any, model: Any
    ) -> PreprocessResult:
        """Pairs rendered by the chat template instruction tuning uses and tokenized, the
        prompt masked, bad rows refused and counted (`preprocess.preprocess_pairs`)."""
        from llm_pipeline.tasks.preference_tuning.preprocess import preprocess_pairs

        return preprocess_pairs(
            dataset, tokenizer=tokenizer, output_dir=output_dir, data=data, model=model
        )

    # model and training
    model_kind: ClassVar[ModelKind] = CAUSAL_LM
    train_keys: ClassVar[frozenset[str]] = frozenset({"dpo"})
    unread_train_keys: ClassVar[Mapping[str, str]] = {
        "label_smoothing": "DPO's loss compares two answers' log-probabilities and has no "
        "token labels to smooth",
    }
    training_columns: ClassVar[tuple[str, ...] | None] = tuple(
        f"{answer}_{name}"
        for answer in ("chosen", "rejected")
        for name in ("input_ids", "attention_mask", "labels")
    )
    training_figures: ClassVar[Mapping[str, str]] = {
        "reward_accuracy": "reward accuracy",
        "reward_margin": "reward margin",
        "reward_chosen": "chosen reward",
        "reward_rejected": "rejected reward",
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
    # Preference accuracy first: the share of held-out pairs the tuned model prefers more
    # than the model it started from does (scoring.py defines each metric exactly).
    metric_names: ClassVar[tuple[str, ...]] = (
        "preference_accuracy",
        "reward_margin",
        "chosen_preferred",
        "rougeL",
        "rougeL_change",
    )
    source_column: ClassVar[str] = "prompt"
    reference_column: ClassVar[str] = "chosen"
    # Greedy completions of the `chat` column's prompts, as instruction tuning's (a served
    # chat model is judged the same way, `ChatTask`); every metric is relative to the
    # starting model, so it always runs.
    needs_base_model: ClassVar[bool] = True
    # A model that learns to prefer but talks worse is not deployed: its responses' ROUGE-L
    # against the chosen answers may fall at most 2 points below the starting model's.
    gate_floors: ClassVar[Mapping[str, float]] = {"rougeL_change": -2.0}

    def scorer(self) -> Any:
        """Preference accuracy and reward margins on held-out pairs, and ROUGE-L of the
        responses, against the starting model (`scoring`)."""
        from llm_pipeline.tasks.preference_tuning.scoring import PreferenceScorer

        return PreferenceScorer(self)

    report_title: ClassVar[str] = "Preference tuning evaluation"

    # serving: a chat's instance, probe and prompt as `ChatTask` takes them, as instruction
    # tuning's server does
    def serving_widget(self) -> Any:
        """A chat, as instruction tuning's page: a system prompt, the turns, a message box."""
        from llm_pipeline.serve.chat_page import CHAT_WIDGET

        return CHAT_WIDGET

    def serving_model(self, settings: Any, folder: Path) -> Any:
        """The tuned causal LM, completing a batch of chats in one generate call."""
        from llm_pipeline.serve.chat_completer import Completer

        return Completer.load(settings, folder, self)

    # fit check
    # A DPO step runs both answers of each pair through the policy: twice the rows' sequences
    # keep activations. The reference adds no peak of its own: under LoRA it is a no-grad
    # forward of the same sequences (adapters off) whose activations are freed layer by layer
    # and whose logits are freed once summed; full DPO computes it in one pass before training
    # (the same, without the optimizer's step), keeping 2 floats per pair. No second model.
    fit_sequences_per_row: ClassVar[int] = 2
    # Evaluate scores each pair's two answers whole, all positions' logits at once
    # (scoring.py::_pair_logps_sharded, evaluate.batch_size pairs per pass).
    fit_scored_sequences_per_row: ClassVar[int] = 2

    def fit_lengths(self, config: Any, shape: Any) -> tuple[int, int]:
        """Each answer with its prompt, one sequence of at most data.max_length (else the cap
        a tokenizer may reach); evaluation's prompts are within it."""
        from llm_pipeline.fit.places import DEFAULT_SOURCE_CAP

        return config.data.max_length or DEFAULT_SOURCE_CAP, 0
