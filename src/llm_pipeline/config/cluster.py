"""The machines that train: local processes, or a Vertex AI worker pool."""

from typing import Literal

from pydantic import Field

from llm_pipeline.config.base import Section


class ClusterConfig(Section):
    """Training cluster shape. Locally only `processes`, `launcher` and `local_gpus` matter."""

    processes: int | None = Field(
        default=None,
        ge=1,
        description="Training processes per node; `null` uses every GPU the node sees, or 1 "
        "on a CPU-only machine.",
    )
    launcher: Literal["torchrun", "deepspeed"] = Field(
        default="torchrun",
        description="`torchrun` (one launcher per node) or DeepSpeed's ssh launcher with a "
        "hostfile and SSH keys each node makes for the job.",
    )
    local_gpus: int = Field(
        default=0,
        ge=0,
        description="GPUs a local run needs: the fit check refuses to run the config on a "
        "machine where torch sees fewer (a config sized for a GPU would take hours on a "
        "CPU). `0`: any machine, its GPUs if it has some, else its CPU.",
    )
    node_count: int = Field(default=1, ge=1, description="Machines (Vertex replicas).")
    machine_type: str = Field(default="a2-highgpu-1g", description="Vertex machine type.")
    accelerator_type: str | None = Field(
        default="NVIDIA_TESLA_A100",
        description="Vertex accelerator type, e.g. NVIDIA_TESLA_A100, NVIDIA_A100_80GB, "
        "NVIDIA_H100_80GB; `null` for CPU machines.",
    )
    accelerator_count: int = Field(default=1, ge=0, description="GPUs per machine.")
    boot_disk_type: str = Field(default="pd-ssd", description="Boot disk type.")
    boot_disk_size_gb: int = Field(default=200, ge=100, description="Boot disk size in GB.")
    spot: bool = Field(
        default=False, description="Use Spot VMs (cheaper, preemptible; checkpoints resume)."
    )
    restart_job_on_worker_restart: bool = Field(
        default=True, description="Restart the whole job when a worker restarts (resumes)."
    )
    timeout: str = Field(
        default="604800s", pattern=r"^\d+s$", description="Job time limit, e.g. `86400s`."
    )
    base_output_directory: str | None = Field(
        default=None,
        description="`gs://` folder of the Vertex training job; Vertex sets "
        "AIP_CHECKPOINT_DIR, AIP_MODEL_DIR and AIP_TENSORBOARD_LOG_DIR under it. Default: "
        "`<vertex.pipeline_root>/<name>/finetune` when the pipeline root is known.",
    )
    name_prefix: str = Field(
        default="llm-finetune", description="Prefix of the training job's display name."
    )
