"""The fit check: whether a config's models fit the machines it names, before it runs.

`check_fit(config, target=...)` estimates peak memory per GPU and host RAM for finetune,
evaluate and serve against the Vertex machine types (or this computer for a local run);
`enforce` refuses a misfit as a ConfigError (exit 2); `format_table` prints the table.
"""

from llm_pipeline.fit.check import SKIP_FLAG, FitReport, Row, check_fit, enforce
from llm_pipeline.fit.places import Target
from llm_pipeline.fit.table import format_table

__all__ = ["SKIP_FLAG", "FitReport", "Row", "Target", "check_fit", "enforce", "format_table"]
