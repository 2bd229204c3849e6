"""Instruction tuning: supervised fine-tuning of a decoder-only causal LM on chats

Everything that differs for this task lives in this package; `TASK` is what the
registry (`llm_pipeline.tasks.TASKS`) hands the layers.
"""

from llm_pipeline.tasks.instruction_tuning.task import InstructionTuning

TASK = InstructionTuning

__all__ = ["TASK", "InstructionTuning"]
