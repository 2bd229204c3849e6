"""Reading a compiled pipeline spec (the YAML/JSON KFP writes) in tests: its tasks, the
defaults its components were compiled with, and the constants tasks pass."""

from typing import Any


def every_task(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every task of the root DAG and of the sub-DAGs (conditions, exit handlers)."""
    dags = [spec["root"], *spec["components"].values()]
    return {
        name: task for dag in dags for name, task in dag.get("dag", {}).get("tasks", {}).items()
    }


def defaults(spec: dict[str, Any], component: str) -> dict[str, Any]:
    """The default value of each input parameter `component` was compiled with."""
    parameters = spec["components"][component]["inputDefinitions"]["parameters"]
    return {name: p.get("defaultValue") for name, p in parameters.items()}


def constant(task: dict[str, Any], name: str) -> Any:
    """The constant `task` passes for its input parameter `name`."""
    return task["inputs"]["parameters"][name]["runtimeValue"]["constant"]
