"""Preference tuning: Direct Preference Optimization of an instruction-tuned causal LM on
pairs of answers to one prompt, the one a person chose and the one they rejected
(DeepSpeed-Chat's step after supervised fine-tuning).

Everything that differs for this task lives in this package: pairs.py checks and tokenizes
rows, preprocess.py runs that over a dataset and counts what it refused, loss.py holds DPO's
loss and the per-answer log-probabilities it compares, reference.py the reference model's
log-probabilities without a second model in memory. The task's `Task` class (and its line in
the registry) comes with its wiring into the pipeline.
"""
