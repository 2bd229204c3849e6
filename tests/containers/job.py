"""A Vertex custom job's pieces: its CLUSTER_SPEC, its data, a config for seconds on a CPU."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from typing import Any

from ..docstring_data import docstring_splits
from ..offline_models import MINILM, TINY_T5


@dataclass(frozen=True)
class VertexJob:
    """What the job was given (its environment) and how it ended."""

    env: dict[str, str]
    result: subprocess.CompletedProcess[str]

    @property
    def model_dir(self) -> str:
        return self.env["AIP_MODEL_DIR"]


def cluster_spec() -> str:
    """CLUSTER_SPEC as Vertex writes it for a one-replica job, on that replica (the primary)."""
    return json.dumps(
        {
            "cluster": {"workerpool0": ["127.0.0.1:2222"]},
            "environment": "cloud",
            "task": {"type": "workerpool0", "index": 0},
            "job": '{"python_module":"","package_uris":[],"job_args":[]}',
        }
    )


def docstring_rows(count: int) -> str:
    """JSON Lines of the first `count` training pairs of the tests' docstring dataset
    (tests/docstring_data.py): columns `document` and `summary`."""
    rows = docstring_splits()["train"][:count]
    assert len(rows) == count, f"the tests' docstring dataset has {len(rows)} training rows"
    return "".join(json.dumps(row) + "\n" for row in rows)


def job_config(dataset: str) -> dict[str, Any]:
    """A whole config, as a user would write one, for a few steps of a tiny T5 on a CPU."""
    return {
        "name": "container-job",
        "data": {
            "dataset": dataset,
            "test_split": None,
            "max_samples": {"train": 32, "validation": 8},
            "validation_fraction": 0.2,
            "max_source_length": 64,
            "max_target_length": 24,
        },
        "model": {"architecture": TINY_T5, "tokenizer": MINILM},
        "train": {
            "max_steps": 4,
            "per_device_batch_size": 4,
            "learning_rate": 0.003,
            "logging_steps": 1,
            "save_steps": 2,
            "precision": "fp32",
            "collective_timeout_s": 60,
            # The plain Trainer: this job tests the entrypoint's contract with Vertex, while
            # DeepSpeed's training is tested in tests/train; on a CPU its first step builds a
            # communication op, which would triple this job's time.
            "use_deepspeed": False,
        },
        "cluster": {"processes": 1, "accelerator_type": None, "accelerator_count": 0},
    }
