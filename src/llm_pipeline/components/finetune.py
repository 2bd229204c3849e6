"""KFP component: fine-tune a model with DeepSpeed ZeRO on one or many nodes."""

from kfp.dsl import Artifact, Dataset, Input, Metrics, Model, Output

from llm_pipeline.components.image import component


@component
def finetune(
    task: str,
    model: str,
    train: str,
    cluster: str,
    dataset: Input[Dataset],
    trained_model: Output[Model],
    metrics: Output[Metrics],
    logs: Output[Artifact],
):
    """Fine-tune with the Hugging Face Trainer under DeepSpeed, resuming if it can.

    Locally the step starts `torchrun` with `cluster.processes` processes: one per GPU
    torch sees by default (NCCL), else one on the CPU (gloo). On
    Vertex AI the pipeline runs this component as a custom job with `cluster.node_count`
    replicas; every replica runs it, reads the cluster from `CLUSTER_SPEC`, and starts its
    node's processes; only the primary writes the outputs, the others exit 0.

    Args:
        task: The config's task name (`llm_pipeline.tasks`): the kind of model and how it
            is trained.
        model: The config's `model` section as JSON (`llm_pipeline.config.ModelConfig`): a
            checkpoint (`source`), an architecture config with a tokenizer, or encoder
            weights to warm-start from.
        train: The config's `train` section as JSON (`TrainConfig`): epochs or max_steps,
            per-device batch size, learning rate and schedule, precision, ZeRO stage and
            offload (or your own DeepSpeed JSON), `lora` (LoRA adapters instead of every
            weight), `save_steps` between checkpoints (the most work a restart loses),
            `collective_timeout_s`.
        cluster: The config's `cluster` section as JSON (`ClusterConfig`): processes per
            node and the launcher (`torchrun` or `deepspeed`).
        dataset: Output of `preprocess`.

    Outputs:
        trained_model: The consolidated model: config.json, model.safetensors, tokenizer,
            generation_config.json and the settings it was trained with. With LoRA, the
            merged model, and the adapter alone in its `adapter/` subfolder.
        metrics: Train and eval loss, steps, samples/s, tokens/s, TFLOP/s and, on GPUs, MFU;
            trainable and total parameters.
        logs: TensorBoard event files (on Vertex also sent to `AIP_TENSORBOARD_LOG_DIR`).
    """
    arguments = dict(locals())
    from llm_pipeline.steps.finetune import run_finetune_step

    run_finetune_step(arguments)
