"""Accept the reference pipeline's flat keys and map them onto the sections."""

from typing import Any

#: Flat key of the reference pipeline → dotted path in this project's config.
FLAT_KEYS: dict[str, str] = {
    "dataset": "data.dataset",
    "dataset_subset": "data.subset",
    "document_column": "data.columns.document",
    "summary_column": "data.columns.summary",
    "model_checkpoint": "model.source",
    "node_count": "cluster.node_count",
    "machine_type": "cluster.machine_type",
    "gpu_type": "cluster.accelerator_type",
    "gpu_count": "cluster.accelerator_count",
    "batch_size": "train.per_device_batch_size",
    "epochs": "train.epochs",
    "model_display_name": "deploy.model_display_name",
    "deploy_machine_type": "deploy.machine_type",
    "deploy_gpu_type": "deploy.accelerator_type",
    "deploy_gpu_count": "deploy.accelerator_count",
    "cluster_prefix": "cluster.name_prefix",
    # The reference pipeline created VMs in a zone; Vertex jobs run in the zone's region.
    "zone": "vertex.region",
}


def _zone_to_region(zone: Any) -> Any:
    if isinstance(zone, str) and zone.count("-") == 2:
        return zone.rsplit("-", 1)[0]
    return zone


def set_path(tree: dict[str, Any], dotted: str, value: Any) -> None:
    """Set `a.b.c` in nested dicts, creating the missing levels.

    A level that is null counts as missing: `train.lora.r=8` on a config whose `train.lora`
    is null (off) turns the section on with that rank and its other defaults.
    """
    *parents, leaf = dotted.split(".")
    node = tree
    for depth, part in enumerate(parents, 1):
        if node.get(part) is None:
            node[part] = {}
        child = node[part]
        if not isinstance(child, dict):
            where = ".".join(parents[:depth])
            whole = f"; set the list whole, e.g. {where}='[...]'" if isinstance(child, list) else ""
            raise ValueError(
                f"{where}: is {child!r}, not an object, so {dotted} cannot be set{whole}"
            )
        node = child
    node[leaf] = value


def get_path(tree: dict[str, Any], dotted: str) -> Any:
    """The value at `a.b.c`, or KeyError."""
    node: Any = tree
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            raise KeyError(dotted)
        node = node[part]
    return node


def map_flat_keys(raw: dict[str, Any]) -> tuple[dict[str, Any], list[str], list[str]]:
    """Move flat keys into their sections.

    Returns the new tree, the flat keys that were mapped, and conflicts (a flat key and
    its sectioned twin both given with different values).
    """
    tree = {key: value for key, value in raw.items() if key not in FLAT_KEYS}
    mapped: list[str] = []
    conflicts: list[str] = []
    for key, dotted in FLAT_KEYS.items():
        if key not in raw:
            continue
        value = _zone_to_region(raw[key]) if key == "zone" else raw[key]
        try:
            existing = get_path(tree, dotted)
        except KeyError:
            existing = None
        if existing is not None and existing != value:
            conflicts.append(
                f"{key}: flat key maps to {dotted}, which is also set "
                f"({value!r} vs {existing!r}); keep one"
            )
            continue
        try:
            set_path(tree, dotted, value)
        except ValueError as exc:
            conflicts.append(str(exc))
            continue
        mapped.append(key)
    return tree, mapped, conflicts
