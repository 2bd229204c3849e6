"""What the launcher hands every training process: one JSON file, typed on both ends.

The typed configs travel as their own JSON (validated again on load), not as argv flags, so a
worker sees exactly the settings the step was given and nothing is lost in quoting.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from llm_pipeline.config import ModelConfig, TrainConfig
from llm_pipeline.errors import TrainError
from llm_pipeline.launch.node_files import SPEC_FILE, node_file
from llm_pipeline.tasks import DEFAULT_TASK

RESULT_FILE = "result.json"


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a training process needs; written by `run_finetune`, read by the worker."""

    dataset_dir: str
    output_dir: str
    model: ModelConfig
    train: TrainConfig
    checkpoint_root: str
    tensorboard_dir: str | None
    # Where event files are also copied (Vertex's AIP_TENSORBOARD_LOG_DIR), or None.
    tensorboard_mirror: str | None
    # A folder on this node, private to this run: staging, the result file.
    work_dir: str
    node_count: int
    procs_per_node: int
    # The task's name (`tasks.TASKS`): it says which kind of model is trained and how.
    task: str = DEFAULT_TASK

    @property
    def result_path(self) -> Path:
        """Where the primary process writes the run's result for the launcher to read."""
        return Path(self.work_dir) / RESULT_FILE

    def write(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self._payload(), indent=2) + "\n", encoding="utf-8")

    def digest(self) -> str:
        """SHA-256 of what every node's copy must agree on: all but `work_dir`, each node's own.

        DeepSpeed's multi-node launcher puts the primary's digest on every rank's command
        line; a rank runs its node's copy only if it has the same (`read_node_copy`)."""
        payload = self._payload()
        del payload["work_dir"]
        canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()

    @classmethod
    def read_node_copy(cls, digest: str) -> WorkerSpec:
        """The spec this node wrote in its private folder (`launch.node_files`), refused
        unless its digest is `digest`, the primary's."""
        path = node_file(SPEC_FILE)
        spec = cls.read(path)
        if spec.digest() != digest:
            raise TrainError(
                f"{path}: this node's spec differs from the primary's (digest "
                f"{spec.digest()[:12]}, primary {digest[:12]}); every node must run the same "
                "config, and a spec changed after its node wrote it is not run"
            )
        return spec

    def _payload(self) -> dict[str, Any]:
        payload = asdict(self)
        payload["model"] = self.model.model_dump(mode="json")
        payload["train"] = self.train.model_dump(mode="json")
        return payload

    @classmethod
    def read(cls, path: str | Path) -> WorkerSpec:
        payload: dict[str, Any] = json.loads(Path(path).read_text(encoding="utf-8"))
        # strict=False: JSON has no tuples and no distinction the strict models need here;
        # the values were validated when the step parsed the user's config.
        payload["model"] = ModelConfig.model_validate(payload["model"], strict=False)
        payload["train"] = TrainConfig.model_validate(payload["train"], strict=False)
        return cls(**payload)
