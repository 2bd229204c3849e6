"""Running a built pipeline: locally under kfp.local, or compiled for Vertex AI."""

from llm_pipeline.runner.compile import compile_pipeline
from llm_pipeline.runner.local import LocalRun, StepOutcome, run_local, step_order

__all__ = ["LocalRun", "StepOutcome", "compile_pipeline", "run_local", "step_order"]
