"""Running a built pipeline on this machine, under KFP's local runner, and telling the user how
it went: the live console, the summary and the run's report page."""

from llm_pipeline.local.run_pipeline import LocalRun, StepOutcome, run_local, step_order

__all__ = ["LocalRun", "StepOutcome", "run_local", "step_order"]
