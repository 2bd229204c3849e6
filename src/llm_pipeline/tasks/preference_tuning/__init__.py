"""Preference tuning: Direct Preference Optimization of an instruction-tuned causal LM on
pairs of answers to one prompt, the one a person chose and the one they rejected
(DeepSpeed-Chat's step after supervised fine-tuning).

Everything that differs for this task lives in this package: pairs.py checks and tokenizes
rows, preprocess.py runs that over a dataset and counts what it refused, loss.py holds DPO's
loss and the per-answer log-probabilities it compares, reference.py the reference model's
log-probabilities without a second model in memory; task.py is the `Task` the registry hands
the layers.
"""

from llm_pipeline.tasks.preference_tuning.task import PreferenceTuning

TASK = PreferenceTuning

__all__ = ["TASK", "PreferenceTuning"]
