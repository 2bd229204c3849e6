"""The whole config: one model composed of the sections, plus cross-section rules."""

import difflib

from pydantic import Field, field_validator, model_validator

from llm_pipeline.config.base import Section
from llm_pipeline.config.cluster import ClusterConfig
from llm_pipeline.config.data import DataConfig
from llm_pipeline.config.deploy import DeployConfig, DeployPolicyConfig
from llm_pipeline.config.evaluate import PROMPT_CONTINUATION_SETTINGS, EvaluateConfig
from llm_pipeline.config.model import ModelConfig
from llm_pipeline.config.train import TrainConfig
from llm_pipeline.config.vertex import VertexConfig
from llm_pipeline.tasks import TASKS


class PipelineConfig(Section):
    """Everything one pipeline run needs."""

    task: str = Field(
        default="summarization",
        description="What the model learns: `summarization` (a seq2seq model writes a summary "
        "of a document), `instruction_tuning` (a decoder-only causal LM learns the "
        "responses of prompts or chats) or `text_classification` (an encoder, or a decoder, "
        "with a classification head learns a label for a text or a pair of texts).",
    )
    name: str = Field(
        default="llm-pipeline",
        pattern=r"^[a-z][a-z0-9-]{0,127}$",
        description="Pipeline name (lowercase letters, digits, hyphens), shown in Vertex.",
    )
    description: str = Field(default="", description="Free text shown with the pipeline.")
    data: DataConfig = Field(description="Dataset source, columns and preprocessing.")
    model: ModelConfig = Field(description="Model and tokenizer to fine-tune.")
    train: TrainConfig = Field(default_factory=TrainConfig, description="Training settings.")
    evaluate: EvaluateConfig = Field(
        default_factory=EvaluateConfig, description="Generation and scoring."
    )
    deploy_policy: DeployPolicyConfig = Field(
        default_factory=DeployPolicyConfig, description="When a new model ships."
    )
    deploy: DeployConfig = Field(default_factory=DeployConfig, description="Registry, endpoint.")
    cluster: ClusterConfig = Field(
        default_factory=ClusterConfig, description="Training processes and machines."
    )
    vertex: VertexConfig = Field(
        default_factory=VertexConfig, description="Google Cloud project settings."
    )

    @field_validator("task")
    @classmethod
    def _known_task(cls, value: str) -> str:
        if value not in TASKS:
            close = difflib.get_close_matches(value, TASKS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(
                f"unknown task {value!r}{hint}; choose one of: {', '.join(sorted(TASKS))}"
            )
        return value

    @model_validator(mode="after")
    def _columns_match_task(self) -> "PipelineConfig":
        task = TASKS[self.task]()
        if "columns" not in self.data.model_fields_set:
            # The default names summarization's roles; another task's default is its first
            # role set, each role read from the source column of the same name.
            self.data.columns = {role: role for role in task.role_sets[0]}
        given = set(self.data.columns)
        if task.role_set(given) is not None:
            return self
        if len(task.role_sets) == 1:
            roles = set(task.role_sets[0])
            missing, extra = sorted(roles - given), sorted(given - roles)
            parts = []
            if missing:
                parts.append(f"missing {missing}")
            if extra:
                parts.append(f"not used by the task {extra}")
            detail = "; ".join(parts)
        else:
            detail = f"got {sorted(given)}"
        raise ValueError(
            f"data.columns must map exactly the roles of task {self.task!r} "
            f"({task.describe_role_sets()}): {detail}"
        )

    @model_validator(mode="after")
    def _model_fits_the_task(self) -> "PipelineConfig":
        kind = TASKS[self.task].model_kind
        if kind == "causal_lm" and self.model.encoder_decoder is not None:
            raise ValueError(
                f"model.encoder_decoder builds a seq2seq model, but task {self.task!r} trains a "
                "causal LM: use model.source, model.architecture or model.warm_start_decoder"
            )
        if kind == "causal_lm" and self.train.freeze_encoder:
            raise ValueError(
                f"train.freeze_encoder: task {self.task!r} trains a causal LM, which has no "
                "encoder to freeze"
            )
        if kind == "classifier" and self.model.encoder_decoder is not None:
            raise ValueError(
                f"model.encoder_decoder builds a seq2seq model, but task {self.task!r} trains a "
                "classifier: use model.source or model.architecture"
            )
        if kind == "classifier" and self.model.warm_start_decoder is not None:
            raise ValueError(
                f"model.warm_start_decoder builds a causal LM, but task {self.task!r} trains a "
                "classifier: use model.source or model.architecture"
            )
        if kind == "classifier" and self.train.freeze_encoder:
            raise ValueError(
                f"train.freeze_encoder: task {self.task!r} trains the encoder under its head; "
                "to train fewer weights use train.lora"
            )
        if kind != "classifier" and self.train.class_weights is not None:
            raise ValueError(
                f"train.class_weights: weighs the labels of a classifier; task {self.task!r} "
                "has no labels"
            )
        if kind == "classifier":
            given = [
                name
                for name in PROMPT_CONTINUATION_SETTINGS
                if getattr(self.evaluate, name) is not None
            ]
            if given:
                raise ValueError(
                    f"evaluate.{given[0]}: applies to models that generate text; task "
                    f"{self.task!r} trains a classifier, which scores labels"
                )
        if kind == "seq2seq" and self.model.warm_start_decoder is not None:
            raise ValueError(
                f"model.warm_start_decoder builds a causal LM, but task {self.task!r} trains a "
                "seq2seq model: use model.encoder_decoder to warm-start one"
            )
        if kind == "seq2seq":
            given = [
                name
                for name in PROMPT_CONTINUATION_SETTINGS
                if getattr(self.evaluate, name) is not None
            ]
            if given:
                raise ValueError(
                    f"evaluate.{given[0]}: applies to models that continue a prompt (causal LMs); "
                    f"task {self.task!r} trains a seq2seq model, whose search is deterministic"
                )
        return self

    @model_validator(mode="after")
    def _gate_metric_from_the_task(self) -> "PipelineConfig":
        # Unset, the gate compares the task's headline metric (rougeLsum for summarization).
        if self.deploy_policy.metric is None:
            self.deploy_policy.metric = TASKS[self.task]().gate_metric
        return self

    @model_validator(mode="after")
    def _data_settings_the_task_reads(self) -> "PipelineConfig":
        task = TASKS[self.task]
        others = {key for other in TASKS.values() for key in other.data_keys} - task.data_keys
        fields = DataConfig.model_fields
        unread = sorted(key for key in others if getattr(self.data, key) != fields[key].default)
        if unread:
            raise ValueError(
                f"{', '.join('data.' + key for key in unread)}: not read by task {self.task!r} "
                f"(its own settings: {', '.join('data.' + key for key in sorted(task.data_keys))})"
            )
        return self

    @model_validator(mode="after")
    def _frozen_encoder_is_not_the_decoder(self) -> "PipelineConfig":
        pair = self.model.encoder_decoder
        if self.train.freeze_encoder and pair is not None and pair.tie_encoder_decoder:
            raise ValueError(
                "train.freeze_encoder with model.encoder_decoder.tie_encoder_decoder would "
                "freeze the decoder too (they share weights); set one of them to false"
            )
        return self

    @model_validator(mode="after")
    def _tensorboard_needs_an_output_folder(self) -> "PipelineConfig":
        if (
            self.vertex.tensorboard
            and not self.cluster.base_output_directory
            and not self.vertex.pipeline_root
        ):
            raise ValueError(
                "vertex.tensorboard needs a folder for the training job's logs: set "
                "vertex.pipeline_root or cluster.base_output_directory"
            )
        return self
