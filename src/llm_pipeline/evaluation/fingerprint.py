"""A fingerprint of what an evaluation scored: its rows and the settings that decide scores.

The gate may compare two models' recorded scores only when both were scored on the same
rows in the same way: 100 on three rows of one dataset says nothing against 9 on another.
Every registered version records this fingerprint (the deploy step writes it as a label),
so a gate that cannot score the served model itself (a Vertex endpoint's) can still tell
whether its recorded score is comparable.

What goes in: the task, the split, each row's scored input (token ids, and a causal LM's
prompt text: the task's scorer says which, `fingerprint_rows`) and reference, and the
`evaluate` settings that change what a model outputs or how it is scored. What stays out:
how the work is split (`batch_size`, `processes`) and what only baselines or intervals use
(`lead_k`, `score_base_model`, `bootstrap_samples`).
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

from llm_pipeline.config.evaluate import EvaluateConfig
from llm_pipeline.evaluation.scoring import with_task_defaults
from llm_pipeline.tasks import Task

__all__ = ["FINGERPRINT_LENGTH", "evaluation_fingerprint", "settings_that_score"]

#: Hex digits kept: short enough for a Vertex label value (63 characters at most), and 128
#: bits, so two different evaluations never share one by chance.
FINGERPRINT_LENGTH = 32
#: `evaluate` settings that change no model's score on a row (`max_samples`: the rows
#: themselves say which were scored).
_NOT_SCORING = frozenset(
    {"batch_size", "processes", "lead_k", "score_base_model", "bootstrap_samples", "max_samples"}
)


def settings_that_score(config: EvaluateConfig, task: Task) -> dict[str, Any]:
    """The `evaluate` settings, after the task's defaults, that decide the scores."""
    resolved = with_task_defaults(config, task)
    return resolved.model_dump(mode="json", exclude=set(_NOT_SCORING))


def evaluation_fingerprint(
    dataset_dir: str | os.PathLike[str], config: EvaluateConfig, task: Task
) -> str:
    """The fingerprint of evaluating on `dataset_dir` (the preprocess step's output) with
    `config`: the rows `evaluate_model` scores, read the same way (no model is loaded)."""
    scorer = task.scorer()
    examples = scorer.load_examples(dataset_dir, None, config.max_samples)
    rows = scorer.fingerprint_rows(examples)
    payload = {"task": task.name, "settings": settings_that_score(config, task), "rows": rows}
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:FINGERPRINT_LENGTH]
