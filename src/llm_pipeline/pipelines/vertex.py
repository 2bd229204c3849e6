"""The Vertex AI side of the graph: the finetune step as a multi-node GPU custom job."""

from typing import Any

from kfp.dsl.python_component import PythonComponent

from llm_pipeline.config import PipelineConfig


def base_output_directory(config: PipelineConfig) -> str:
    """Where the training job's AIP_* folders go ('' lets Vertex choose none)."""
    if config.cluster.base_output_directory:
        return config.cluster.base_output_directory
    if config.vertex.pipeline_root:
        return f"{config.vertex.pipeline_root.rstrip('/')}/{config.name}/finetune"
    return ""


def custom_job_settings(config: PipelineConfig) -> dict[str, Any]:
    """Keyword arguments for GCPC's `create_custom_training_job_from_component`.

    Every replica runs the component with the same command; `replica_count` becomes one
    primary pool (workerpool0) plus `node_count - 1` workers (workerpool1).
    """
    cluster, vertex = config.cluster, config.vertex
    return {
        "display_name": f"{cluster.name_prefix}-{config.name}",
        "replica_count": cluster.node_count,
        "machine_type": cluster.machine_type,
        "accelerator_type": cluster.accelerator_type or "",
        "accelerator_count": cluster.accelerator_count if cluster.accelerator_type else 0,
        "boot_disk_type": cluster.boot_disk_type,
        "boot_disk_size_gb": cluster.boot_disk_size_gb,
        "timeout": cluster.timeout,
        "restart_job_on_worker_restart": cluster.restart_job_on_worker_restart,
        "strategy": "SPOT" if cluster.spot else "STANDARD",
        "service_account": vertex.service_account or "",
        "network": vertex.network or "",
        "tensorboard": vertex.tensorboard or "",
        "base_output_directory": base_output_directory(config),
        "labels": dict(vertex.labels),
    }


def custom_training_job(step: PythonComponent, config: PipelineConfig) -> Any:
    """`step` wrapped as a Vertex custom training job shaped by `config.cluster`."""
    from google_cloud_pipeline_components.v1.custom_job import (
        create_custom_training_job_from_component,
    )

    return create_custom_training_job_from_component(step, **custom_job_settings(config))
