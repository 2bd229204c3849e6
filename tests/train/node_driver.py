"""One replica of a multi-node job: calls run_finetune as the finetune component would.

Run as a script (`python node_driver.py args.json`) inside a network namespace by
two_nodes.run_two_replicas; the cluster comes from the environment (CLUSTER_SPEC), like on Vertex.
"""

import dataclasses
import json
import os
import sys
from pathlib import Path

from llm_pipeline.config import ClusterConfig, ModelConfig, TrainConfig
from llm_pipeline.train.job import run_finetune


def main() -> None:
    args = json.loads(Path(sys.argv[1]).read_text())
    result = run_finetune(
        dataset_dir=args["dataset_dir"],
        output_dir=args["output_dir"],
        model=ModelConfig.model_validate(args["model"], strict=False),
        train=TrainConfig.model_validate(args["train"], strict=False),
        cluster=ClusterConfig.model_validate(args["cluster"], strict=False),
        env=os.environ,
    )
    Path(args["result"]).write_text(json.dumps(dataclasses.asdict(result)))


if __name__ == "__main__":
    main()
