"""What a compiled Vertex spec would run, read back from the spec itself (not the config), so
`--dry-run` shows what Vertex AI would be sent: each step's image, its custom job's replicas,
machine and GPUs, its caching and retries."""

from typing import Any

from llm_pipeline.output_files import Step

#: Steps under the gate's `dsl.If` live in a condition sub-DAG.
CONDITION_PREFIX = "condition"
#: An exit handler's exit task runs once the steps it guards have ended, however they ended.
EXIT_TASK = "ALL_UPSTREAM_TASKS_COMPLETED"


def _tasks(compiled: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every task by name, the gated and the exit ones marked, in the order the steps run."""
    tasks: dict[str, dict[str, Any]] = {}

    def walk(dag: dict[str, Any], note: str) -> None:
        for name, task in dag.items():
            component = compiled["components"][task["componentRef"]["name"]]
            if "dag" in component:  # a condition or an exit handler's group
                gated = " (if the gate says yes)" if name.startswith(CONDITION_PREFIX) else note
                walk(component["dag"]["tasks"], gated)
            elif task.get("triggerPolicy", {}).get("strategy") == EXIT_TASK:
                tasks[f"{name} (once the others end, however they end)"] = task
            else:
                tasks[f"{name}{note}"] = task

    walk(compiled["root"]["dag"]["tasks"], "")
    order = [step.display_name for step in Step]

    def rank(name: str) -> int:
        step = name.split(" ")[0]
        return order.index(step) if step in order else len(order)

    return dict(sorted(tasks.items(), key=lambda item: rank(item[0])))


def _where(compiled: dict[str, Any], component: dict[str, Any]) -> str:
    """`custom job: N replicas of MACHINE with G x GPU each, image I` or `image I`."""
    inputs = component.get("inputDefinitions", {}).get("parameters", {})
    pools = inputs.get("worker_pool_specs", {}).get("defaultValue")
    if not pools:
        executor = compiled["deploymentSpec"]["executors"][component["executorLabel"]]
        return f"pipeline task, image {executor['container']['image']}"
    machine = pools[0]["machine_spec"]
    replicas = sum(int(pool["replica_count"]) for pool in pools)
    gpus = ""
    if machine.get("accelerator_type"):
        gpus = f" with {int(machine['accelerator_count'])} x {machine['accelerator_type']} each"
    image = pools[0]["container_spec"]["image_uri"]
    nodes = f"{replicas} replica{'s' if replicas != 1 else ''}"
    return f"custom job, {nodes} of {machine['machine_type']}{gpus}, image {image}"


def describe_spec(compiled: dict[str, Any]) -> list[str]:
    """One line per step: where it runs, whether it may be served from the cache, retries."""
    lines = []
    for name, task in _tasks(compiled).items():
        component = compiled["components"][task["componentRef"]["name"]]
        cached = "cached" if task.get("cachingOptions", {}).get("enableCache") else "not cached"
        retries = task.get("retryPolicy", {}).get("maxRetryCount")
        extra = f", {retries} retries" if retries else ""
        lines.append(f"{name}: {_where(compiled, component)}; {cached}{extra}")
    return lines
