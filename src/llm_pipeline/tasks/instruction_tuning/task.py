"""Instruction tuning: supervised fine-tuning of a decoder-only causal LM on chats
(DeepSpeed-Chat's step 1).

Rows are either a `prompt` and its `response`, or one `messages` column holding a chat:
a list of turns `{"role": "system" | "user" | "assistant", "content": str}` (the layout
most hub SFT sets, OpenAI and Vertex use). The model learns every assistant turn; the
system and user turns before it are its prompt. A prompt/response row is the one-turn chat
`[user: prompt, assistant: response]`, so both layouts take the same path (tasks/chat.py).

Served, an instance is a prompt (one user turn) or `{"messages": [...]}`, checked and
rendered by the same rules as training's chats; the prediction is the model's completion.
"""

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar

from llm_pipeline.tasks.base import BuiltinDataset, PreprocessResult
from llm_pipeline.tasks.chat import ChatTask, chat_problem, last_assistant
from llm_pipeline.tasks.kinds import CAUSAL_LM, ModelKind


class InstructionTuning(ChatTask):
    """Supervised fine-tuning of a causal LM (OPT, Llama, Qwen, Gemma): loss on the responses
    only."""

    name: ClassVar[str] = "instruction_tuning"

    # model and training
    model_kind: ClassVar[ModelKind] = CAUSAL_LM

    def build_model(
        self, model: Any, tokenizer: Any, *, labels: Mapping[str, Any] | None = None
    ) -> Any:
        """A causal LM: a checkpoint, an architecture, or an encoder warm-started as a
        decoder (`models.decoder_only`)."""
        from llm_pipeline.models.loading import load_model

        return load_model(model, tokenizer, kind=self.model_kind)

    def training_collator(
        self, tokenizer: Any, model: Any, *, pad_to_multiple_of: int | None
    ) -> Callable[[list[dict[str, Any]]], dict[str, Any]]:
        """Chats (or packed rows of them) padded on the right, prompts already -100."""
        from llm_pipeline.train.collators import CausalLMCollator

        return CausalLMCollator(
            pad_id=int(tokenizer.pad_token_id), pad_to_multiple_of=pad_to_multiple_of
        )

    def training_loss(
        self, train: Any, *, label_set: Any = None, train_set: Any = None
    ) -> Callable[..., Any]:
        """Cross-entropy over the responses' tokens (each predicted from the one before),
        divided by the step's label tokens."""
        from llm_pipeline.train.trainer import token_mean_loss

        return token_mean_loss(train.label_smoothing, shift=self.model_kind.causal)

    # data
    role_sets: ClassVar[tuple[tuple[str, ...], ...]] = (("prompt", "response"), ("messages",))
    target_role: ClassVar[str] = "response"
    data_keys: ClassVar[frozenset[str]] = frozenset({"max_length", "packing", "chat_template"})

    def prompt_turns(self, chat: Any) -> Any:
        """The turns before the last assistant turn: what evaluation asks the model to
        answer (a chat the task would drop, without one, is read whole)."""
        if chat_problem(chat, need_assistant=True) is not None:
            return chat
        return chat[: last_assistant(chat)]

    def builtin_datasets(self) -> Mapping[str, BuiltinDataset]:
        """The demo's dataset (`demo_data`)."""
        from llm_pipeline.tasks.instruction_tuning import demo_data

        return {demo_data.NAME: demo_data.DATASET}

    def preprocess(
        self, dataset: Any, *, tokenizer: Any, output_dir: str | Path, data: Any, model: Any
    ) -> PreprocessResult:
        """Chats rendered by the chat template and tokenized, the prompt masked from the loss
        and, with `data.packing`, the train split packed."""
        from llm_pipeline.tasks.instruction_tuning.preprocess import preprocess_chats

        return preprocess_chats(
            dataset, tokenizer=tokenizer, output_dir=output_dir, data=data, model=model
        )

    # evaluation
    # ROUGE-L (longest common subsequence) rewards an answer for the reference's words in
    # order without asking for sentences; rougeLsum's sentence split means little for a
    # one-line answer.
    metric_names: ClassVar[tuple[str, ...]] = ("rougeL", "exact_match", "perplexity")
    source_column: ClassVar[str] = "prompt"
    reference_column: ClassVar[str] = "response"
    # Greedy completions, scored beside the un-fine-tuned model's, of the `chat` column's
    # prompts (`ChatTask`).

    def scorer(self) -> Any:
        """ROUGE-L, exact match and perplexity on the responses (`scoring`)."""
        from llm_pipeline.tasks.instruction_tuning.scoring import InstructionScorer

        return InstructionScorer(self)

    report_title: ClassVar[str] = "Instruction tuning evaluation"

    # serving: a chat's instance, probe and prompt as `ChatTask` takes them
    def serving_widget(self) -> Any:
        """A chat: a system prompt, the turns so far and a message box."""
        from llm_pipeline.serve.chat_page import CHAT_WIDGET

        return CHAT_WIDGET

    def serving_model(self, settings: Any, folder: Path) -> Any:
        """A causal LM that completes a batch of chats in one generate call."""
        from llm_pipeline.serve.chat_completer import Completer

        return Completer.load(settings, folder, self)

    # fit check
    def fit_lengths(self, config: Any, shape: Any) -> tuple[int, int]:
        """One sequence, prompt and response together (or one packed row): data.max_length,
        else the cap a tokenizer may reach; evaluation's prompts are within it (preprocess
        keeps them within data.max_length)."""
        from llm_pipeline.fit.places import DEFAULT_SOURCE_CAP

        return config.data.max_length or DEFAULT_SOURCE_CAP, 0
