"""Instruction tuning: supervised fine-tuning of a decoder-only causal LM on chats
(DeepSpeed-Chat's step 1).

Rows are either a `prompt` and its `response`, or one `messages` column holding a chat:
a list of turns `{"role": "system" | "user" | "assistant", "content": str}` (the layout
most hub SFT sets, OpenAI and Vertex use). The model learns every assistant turn; the
system and user turns before it are its prompt.
"""

from collections.abc import Mapping
from typing import Any, ClassVar

from llm_pipeline.tasks.base import ModelKind, Task


class InstructionTuning(Task):
    """Supervised fine-tuning of a causal LM (OPT, Llama, Qwen, Gemma): loss on the responses
    only."""

    name: ClassVar[str] = "instruction_tuning"

    # data
    role_sets: ClassVar[tuple[tuple[str, ...], ...]] = (("prompt", "response"), ("messages",))
    target_role: ClassVar[str] = "response"

    def source_texts(self, batch: dict[str, list[Any]], *, prefix: str) -> list[str]:
        return [prefix + str(text) for text in batch["prompt"]]

    # model and training
    model_kind: ClassVar[ModelKind] = "causal_lm"

    # evaluation
    # ROUGE-L (longest common subsequence) rewards an answer for the reference's words in
    # order without asking for sentences; rougeLsum's sentence split means little for a
    # one-line answer.
    metric_names: ClassVar[tuple[str, ...]] = ("rougeL", "exact_match", "perplexity")
    source_column: ClassVar[str] = "prompt"
    reference_column: ClassVar[str] = "response"
    # Greedy search: the answer the model rates most likely, the same on every run. A causal
    # LM's generation config often samples (Llama-2's does) and its default max_length counts
    # the prompt, so both are set here. The un-fine-tuned model is scored beside the tuned one.
    evaluation_defaults: ClassVar[Mapping[str, Any]] = {
        "num_beams": 1,
        "do_sample": False,
        "max_new_tokens": 128,
        "score_base_model": True,
    }
    report_title: ClassVar[str] = "Instruction tuning evaluation"
    source_label: ClassVar[str] = "prompt"
    output_label: ClassVar[str] = "response"
