"""The whole config: one model composed of the sections, plus cross-section rules."""

import difflib
from collections.abc import Callable

from pydantic import Field, field_validator, model_validator

from llm_pipeline.config.base import Section
from llm_pipeline.config.cluster import ClusterConfig
from llm_pipeline.config.data import DataConfig
from llm_pipeline.config.deploy import DeployConfig, DeployPolicyConfig
from llm_pipeline.config.evaluate import (
    PROMPT_CONTINUATION_SETTINGS,
    TEXT_SETTINGS,
    EvaluateConfig,
)
from llm_pipeline.config.model import ModelConfig
from llm_pipeline.config.train import TrainConfig
from llm_pipeline.config.vertex import VertexConfig
from llm_pipeline.tasks import DEFAULT_TASK, TASKS
from llm_pipeline.tasks.kinds import ModelKind


class PipelineConfig(Section):
    """Everything one pipeline run needs."""

    task: str = Field(
        default=DEFAULT_TASK,
        description="What the model learns: `summarization` (a seq2seq model writes a summary "
        "of a document), `instruction_tuning` (a decoder-only causal LM learns the "
        "responses of prompts or chats), `text_classification` (an encoder, or a decoder, "
        "with a classification head learns a label for a text or a pair of texts) or "
        "`preference_tuning` (a causal LM learns, by DPO, to prefer the chosen of two "
        "answers to a prompt over the rejected one).",
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
        for refuses, setting_given, why in _SETTINGS_A_MODEL_KIND_REFUSES:
            setting = setting_given(self) if refuses(kind) else None
            if setting is not None:
                raise ValueError(why.format(setting=setting, task=self.task))
        return self

    @model_validator(mode="after")
    def _sampling_settings_sample(self) -> "PipelineConfig":
        # Without do_sample, generation is greedy (or beam) search, which has no temperature.
        given = [n for n in ("temperature", "top_p") if getattr(self.evaluate, n) is not None]
        if given and not self.evaluate.do_sample:
            raise ValueError(
                f"{', '.join('evaluate.' + n for n in given)}: applies only with "
                "evaluate.do_sample true; without it evaluation is greedy and ignores it"
            )
        return self

    @model_validator(mode="after")
    def _scored_as_served(self) -> "PipelineConfig":
        # The endpoint generates with the evaluation's settings among those its requests may
        # set (`steps.deploy.generation_defaults`): a search setting it cannot take would have
        # the gate score answers the endpoint never gives.
        task = TASKS[self.task]
        if not task.model_kind.generates:
            return self
        unserved = [
            name
            for name, no_op in _SEARCH_SETTINGS_NO_OPS.items()
            if name not in task.serving_parameters
            and getattr(self.evaluate, name) not in (None, no_op)
        ]
        if unserved:
            raise ValueError(
                f"{', '.join('evaluate.' + n for n in unserved)}: the endpoint of task "
                f"{self.task!r} cannot generate with it (a request sets "
                f"{', '.join(p for p in task.serving_parameters if p != 'stream')}), so the "
                "gate would score answers it "
                "never gives: drop it from the config"
            )
        return self

    @model_validator(mode="after")
    def _gate_metric_from_the_task(self) -> "PipelineConfig":
        # Unset, the gate compares the task's headline metric (rougeLsum for summarization).
        task = TASKS[self.task]()
        if self.deploy_policy.metric is None:
            self.deploy_policy.metric = task.gate_metric
        # The task's own floors (`Task.gate_floors`) where the user's name none for the
        # metric.
        for name, floor in task.gate_floors.items():
            self.deploy_policy.floors.setdefault(name, floor)
        return self

    @model_validator(mode="after")
    def _data_settings_the_task_reads(self) -> "PipelineConfig":
        task = TASKS[self.task]
        others = {key for other in TASKS.values() for key in other.data_keys} - task.data_keys
        fields = DataConfig.model_fields
        # `packing: false` says what a task that never packs does anyway, as the default
        # did before `auto`: older configs of other tasks keep it.
        unread = sorted(
            key
            for key in others
            if getattr(self.data, key) != fields[key].default
            and (key, getattr(self.data, key)) != ("packing", False)
        )
        if unread:
            raise ValueError(
                f"{', '.join('data.' + key for key in unread)}: not read by task {self.task!r} "
                f"(its own settings: {', '.join('data.' + key for key in sorted(task.data_keys))})"
            )
        return self

    @model_validator(mode="after")
    def _threshold_needs_multi_label(self) -> "PipelineConfig":
        # A single-label classifier predicts its likeliest label, whatever its score.
        default = DataConfig.model_fields["threshold"].default
        if self.data.threshold != default and not self.data.multi_label:
            raise ValueError(
                f"data.threshold: {self.data.threshold} is read only with data.multi_label "
                "true (a single-label classifier predicts its likeliest label, whatever its "
                "score): drop it, or set data.multi_label"
            )
        return self

    @model_validator(mode="after")
    def _train_settings_the_task_reads(self) -> "PipelineConfig":
        task = TASKS[self.task]
        readers: dict[str, list[str]] = {}
        for name, other in sorted(TASKS.items()):
            for key in other.train_keys:
                readers.setdefault(key, []).append(name)
        fields = TrainConfig.model_fields
        unread = sorted(
            key
            for key in set(readers) - task.train_keys
            if getattr(self.train, key) != fields[key].get_default(call_default_factory=True)
        )
        problems = [
            f"train.{key}: read by task {' and '.join(map(repr, readers[key]))}, "
            f"not by {self.task!r}: drop it from the config"
            for key in unread
        ]
        problems += [
            f"train.{key}: not read by task {self.task!r} ({why}): drop it from the config"
            for key, why in sorted(task.unread_train_keys.items())
            if getattr(self.train, key) != fields[key].get_default(call_default_factory=True)
        ]
        if problems:
            raise ValueError("; ".join(problems))
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


#: A setting's name when the config gives it, else None.
Setting = Callable[["PipelineConfig"], str | None]


def _first_given(names: tuple[str, ...]) -> Setting:
    """The first of evaluate's `names` that a config sets to other than its default."""
    fields = EvaluateConfig.model_fields

    def first(config: "PipelineConfig") -> str | None:
        given = [n for n in names if getattr(config.evaluate, n) != fields[n].default]
        return f"evaluate.{given[0]}" if given else None

    return first


def _named_if(setting: str, given: Callable[["PipelineConfig"], object]) -> Setting:
    return lambda config: setting if given(config) else None


#: Whether a model kind refuses a setting, read from the kind's facts.
Refuses = Callable[[ModelKind], bool]


def _causal(kind: ModelKind) -> bool:
    return kind.causal


def _scores_labels(kind: ModelKind) -> bool:
    return not kind.generates


def _generates(kind: ModelKind) -> bool:
    return kind.generates


def _encoder_decoder(kind: ModelKind) -> bool:
    return kind.encoder_decoder


def _not_encoder_decoder(kind: ModelKind) -> bool:
    return not kind.encoder_decoder


#: Search settings a generating task's server may not take, and the value of each that
#: changes nothing (None: every value changes something).
_SEARCH_SETTINGS_NO_OPS: dict[str, int | None] = {
    "num_beams": 1,
    "min_new_tokens": 0,
    "no_repeat_ngram_size": 0,
    "length_penalty": None,
}


def _not_compiled(kind: ModelKind) -> bool:
    return not kind.compiles


def _no_fused_kernels(kind: ModelKind) -> bool:
    return not kind.fused_kernels


#: What each model kind cannot take: (whether a kind refuses it, the setting's name if the
#: config gives it, why). The first that applies is the error, naming the setting.
_SETTINGS_A_MODEL_KIND_REFUSES: tuple[tuple[Refuses, Setting, str], ...] = (
    (
        _causal,
        _named_if("model.encoder_decoder", lambda c: c.model.encoder_decoder is not None),
        "{setting} builds a seq2seq model, but task {task!r} trains a causal LM: use "
        "model.source, model.architecture or model.warm_start_decoder",
    ),
    (
        _causal,
        _named_if("train.freeze_encoder", lambda c: c.train.freeze_encoder),
        "{setting}: task {task!r} trains a causal LM, which has no encoder to freeze",
    ),
    (
        _scores_labels,
        _named_if("model.encoder_decoder", lambda c: c.model.encoder_decoder is not None),
        "{setting} builds a seq2seq model, but task {task!r} trains a classifier: use "
        "model.source or model.architecture",
    ),
    (
        _scores_labels,
        _named_if("model.warm_start_decoder", lambda c: c.model.warm_start_decoder is not None),
        "{setting} builds a causal LM, but task {task!r} trains a classifier: use "
        "model.source or model.architecture",
    ),
    (
        _scores_labels,
        _named_if("train.freeze_encoder", lambda c: c.train.freeze_encoder),
        "{setting}: task {task!r} trains the encoder under its head; to train fewer weights "
        "use train.lora",
    ),
    (
        _generates,
        _named_if("train.class_weights", lambda c: c.train.class_weights is not None),
        "{setting}: weighs the labels of a classifier; task {task!r} has no labels",
    ),
    (
        _scores_labels,
        _first_given(TEXT_SETTINGS),
        "{setting}: applies to models that generate text; task {task!r} trains a "
        "classifier, which scores labels",
    ),
    (
        _encoder_decoder,
        _named_if("model.warm_start_decoder", lambda c: c.model.warm_start_decoder is not None),
        "{setting} builds a causal LM, but task {task!r} trains a seq2seq model: use "
        "model.encoder_decoder to warm-start one",
    ),
    (
        _not_compiled,
        _named_if("train.compile", lambda c: c.train.compile),
        "{setting}: supported for causal LMs and seq2seq models (not yet tried on "
        "classifiers), and task {task!r} trains a classifier",
    ),
    (
        _no_fused_kernels,
        _named_if("train.kernels", lambda c: c.train.kernels is not None),
        "{setting}: Liger's kernels patch causal LMs (Llama, Mistral, Qwen2, Gemma, ...); "
        "task {task!r} trains another kind",
    ),
    (
        _not_encoder_decoder,
        _first_given(("lead_k",)),
        "{setting}: scores a document's first sentences as a summary, a baseline of "
        "summarization; task {task!r} does not read it: drop it from the config",
    ),
    (
        _encoder_decoder,
        _first_given(PROMPT_CONTINUATION_SETTINGS),
        "{setting}: applies to models that continue a prompt (causal LMs); task {task!r} "
        "trains a seq2seq model, whose search is deterministic",
    ),
)
