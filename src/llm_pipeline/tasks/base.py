"""The seam between the generic pipeline and what is specific to one task.

A task says which columns it needs and how a row becomes model inputs; later it also
scores predictions and shapes serving requests. Adding a task is a sibling module plus one
line in `llm_pipeline.tasks.TASKS`, not a flag threaded through every step.
"""

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

from llm_pipeline.tasks.kinds import ModelKind

#: A chat: turns `{"role": "system" | "user" | "assistant", "content": str}`, in order (the
#: layout of Hugging Face chat templates, OpenAI and Vertex).
Chat = list[dict[str, str]]
#: Two texts a classifier reads together (`text`, `text_pair`): a question and a passage,
#: a premise and a hypothesis.
TextPair = tuple[str, str]
#: One checked prediction instance: a text, a chat, or a pair of texts.
Instance = str | Chat | TextPair


def source_text(value: Any) -> str | None:
    """A cell as the text a task reads (`Task.source_texts`); None when it holds none."""
    if value is None:
        return None
    text = str(value)
    return text if text.strip() else None


class InstanceError(ValueError):
    """A prediction instance that is not what the task takes: `where` inside the instance
    (`("messages", 2, "content")`, empty for the instance itself) and what is wrong."""

    def __init__(self, what: str, where: tuple[str | int, ...] = ()) -> None:
        super().__init__(what)
        self.what = what
        self.where = where


@dataclass(frozen=True)
class ServingPage:
    """The words and settings of the prediction server's page at `/` for a task; its widget
    (the boxes, the script, how a prediction is shown) is `Task.serving_widget`."""

    #: The page's title and heading.
    title: str
    #: What the person does: the send button's label.
    action: str
    #: The input box's placeholder.
    placeholder: str
    #: The heading above the model's output.
    output: str
    #: The generation parameters the page offers as settings.
    parameters: tuple[str, ...]


class BuildSplits(Protocol):
    """How a built-in dataset is made: `{split: rows}`, each row `{column: text}`."""

    def __call__(
        self, roots: Sequence[Path] | None = None, *, seed: int = 0
    ) -> dict[str, list[dict[str, str]]]:
        """The splits for `seed`, built from the Python files under `roots` (None: this
        Python's standard library and site-packages)."""
        ...


@dataclass(frozen=True)
class BuiltinDataset:
    """A dataset the project builds offline, named `builtin:NAME` by `data.dataset`: a task's
    demo data, which any task whose roles its columns fit may read."""

    #: What its rows are, in words: the message that lists the built-in datasets uses it.
    description: str
    build: BuildSplits


class SplitResult(Protocol):
    """What preprocessing made of one split, as far as the preprocess step reads it."""

    @property
    def rows_out(self) -> int:
        """Rows kept: the split's rows less those left out."""
        ...


class PreprocessResult(Protocol):
    """What a task's `preprocess` reports: the step logs its metrics and each split's rows,
    and the task's own report says the rest (lengths, labels, packing)."""

    @property
    def splits(self) -> Mapping[str, SplitResult]: ...

    def metrics(self) -> dict[str, float]:
        """Flat `<split>_<stat>` names for KFP's Metrics artifact."""
        ...


class ModelLoss(ABC):
    """A training loss that runs the model on the batch itself, for a task whose loss is not
    a function of one forward's logits (DPO: one forward of both answers, and the
    reference's log-probabilities). `Task.training_loss` returns one in place of a
    `compute_loss_func`; the Trainer then calls it instead of its own forward, hands it the
    collated batch whole, and logs the figures it returns beside the loss."""

    @abstractmethod
    def __call__(
        self, model: Any, batch: dict[str, Any], *, unwrapped: Any
    ) -> tuple[Any, Mapping[str, Any]]:
        """The batch's mean loss (a tensor), and figures (`Task.training_figures`: detached
        scalar tensors) that the Trainer averages over the logging period and the ranks.
        `model` runs the forward (under DeepSpeed its engine); `unwrapped` is the model
        itself (a `PeftModel` under LoRA)."""

    def start(
        self,
        model: Any,
        splits: dict[str, Any],
        *,
        collate: Callable[..., Any],
        batch_size: int,
        device: Any,
        keep_folder: str | None,
        resumed: bool,
    ) -> dict[str, Any]:
        """Called on every rank once the model is ready to train (under DeepSpeed, wrapped
        by its engine) and before the first step, resumed runs too; returns `splits`
        (`train`, and `validation` when there is one) with what the loss reads added.
        `keep_folder` outlives the process and is the same for a resumed run (the run's
        checkpoint folder); `resumed`: the weights are a checkpoint's, not the start's."""
        return splits


class Task(ABC):
    """What one task (summarization, instruction tuning, ...) contributes to the pipeline."""

    name: ClassVar[str]

    # data
    #: The accepted sets of roles: `data.columns` maps exactly one of them to source
    #: columns, and the download step names the columns by role.
    role_sets: ClassVar[tuple[tuple[str, ...], ...]]
    #: The role the model learns to produce (its length decides max_target_length).
    target_role: ClassVar[str]
    #: The `data.*` settings only this task reads; another task's, set to anything but its
    #: default, is refused by the config rather than silently ignored.
    data_keys: ClassVar[frozenset[str]]

    def role_set(self, columns: Iterable[str]) -> tuple[str, ...] | None:
        """The role set that `columns` (the roles a config maps) is exactly; None if none."""
        given = set(columns)
        return next((roles for roles in self.role_sets if set(roles) == given), None)

    def role_set_among(self, columns: Iterable[str]) -> tuple[str, ...] | None:
        """The first role set whose roles are all among `columns` (a dataset's); None if none."""
        given = set(columns)
        return next((roles for roles in self.role_sets if set(roles) <= given), None)

    def describe_role_sets(self) -> str:
        """The accepted role sets in words, for messages: `['prompt', 'response'] or ...`."""
        return " or ".join(str(sorted(roles)) for roles in self.role_sets)

    def builtin_datasets(self) -> Mapping[str, BuiltinDataset]:
        """The datasets this task brings, by their `builtin:NAME` (its demo's); the download
        step offers every task's (`llm_pipeline.tasks.builtin_datasets`)."""
        return {}

    def source_texts(self, batch: Mapping[str, Sequence[Any]]) -> list[str | None]:
        """What the model reads of each row in a batch of downloaded rows (columns named by
        role), as one text after the task's own reading of it: rows with the same text are
        the same example to the model, which the download step counts between an evaluation
        split and train (a leak) and within train (`data.overlap`). None for a row the task
        drops (no text). This one: the `source_column`'s text."""
        return [source_text(value) for value in batch[self.source_column]]

    @abstractmethod
    def preprocess(
        self, dataset: Any, *, tokenizer: Any, output_dir: str | Path, data: Any, model: Any
    ) -> PreprocessResult:
        """Tokenize every split of `dataset` (the download step's `DatasetDict`, checked for
        the task's roles) with `tokenizer` into a `save_to_disk` folder at `output_dir`, with
        its `preprocess.json` beside it; `data` and `model` are the run's `DataConfig` and
        `ModelConfig`. Raises DataError for data the task cannot use.
        """

    # model and training
    #: The network the task trains: it picks the `AutoModelFor...` class, how batches are
    #: collated and the loss is taken, and how the model generates.
    model_kind: ClassVar[ModelKind]
    #: The `train.*` settings only this task reads (`train.dpo`); another task's, set to
    #: anything but its default, is refused by the config rather than silently ignored.
    train_keys: ClassVar[frozenset[str]] = frozenset()
    #: The shared `train.*` settings this task's loss does not read, and why: set to anything
    #: but their default, they are refused by the config rather than silently ignored.
    unread_train_keys: ClassVar[Mapping[str, str]] = {}
    #: The columns of a preprocessed split that training batches are made of, when they are
    #: not a model's inputs (`input_ids`, `attention_mask`, `labels`): the collator builds
    #: the inputs from them, so the Trainer hands it the rows as they are. None: the model's.
    training_columns: ClassVar[tuple[str, ...] | None] = None
    #: Figures a `ModelLoss` logs beside the loss: logged name -> its words on the status line.
    training_figures: ClassVar[Mapping[str, str]] = {}

    def training_lengths(self, split: Any) -> list[int]:
        """Each training row's length in tokens, by which rows of like length are batched."""
        return [len(ids) for ids in split["input_ids"]]

    def auto_model_class(self) -> Any:
        """The transformers Auto class that builds this task's model from a config or a
        checkpoint (`AutoModelForSeq2SeqLM`, `AutoModelForCausalLM`)."""
        import transformers

        return getattr(transformers, self.model_kind.auto_class)

    def training_labels(self, spec: Any) -> Any:
        """The label set the model's head is trained to score (text classification's
        `LabelSet`), read from what preprocess wrote beside the dataset of `spec` (a
        `train.spec.WorkerSpec`);
        None for a model whose labels are tokens."""
        return None

    def model_labels(self, spec: Any, label_set: Any) -> Mapping[str, Any] | None:
        """The model-config fields `build_model` gives a head for `label_set` (from
        `training_labels`) and the dataset of `spec`; None for a model without a head."""
        return None

    def build_model(
        self, model: Any, tokenizer: Any, *, labels: Mapping[str, Any] | None = None
    ) -> Any:
        """The network to fine-tune that `model` (the config's `ModelConfig`) describes, its
        special-token ids matching `tokenizer`. `labels`: the model-config fields of the label
        set a head scores (`LabelSet.model_config_fields()`), for a task with labels."""
        raise NotImplementedError(f"task {self.name!r} builds no model")

    def training_collator(
        self, tokenizer: Any, model: Any, *, pad_to_multiple_of: int | None
    ) -> Callable[[list[dict[str, Any]]], dict[str, Any]]:
        """What pads the preprocessed rows of a micro-batch into tensors for `model`."""
        raise NotImplementedError(f"task {self.name!r} has no training collator")

    def training_loss(
        self, train: Any, *, label_set: Any = None, train_set: Any = None
    ) -> Callable[..., Any]:
        """The Trainer's `compute_loss_func` for `train` (the config's `TrainConfig`), or a
        `ModelLoss` for a loss that runs the model itself: `label_set` (`training_labels`)
        and the training split (its `labels` column) are for a task whose loss weighs its
        labels."""
        raise NotImplementedError(f"task {self.name!r} has no training loss")

    def lora_options(self, model: Any) -> dict[str, Any]:
        """What PEFT's `LoraConfig` takes beyond `train.lora` for this task's `model`: a head
        that trains whole beside the adapters (`modules_to_save`) and its task type."""
        return {}

    # evaluation
    #: What the evaluate step reports, the gate's default metric first
    #: (`deploy_policy.metric` when the config leaves it unset). ROUGE names are F1 ×100 by
    #: rouge-score's definitions; `exact_match` is a percentage, `perplexity` a ratio.
    metric_names: ClassVar[tuple[str, ...]]
    #: The dataset columns evaluation reads: the text the model is given (shown in the
    #: report) and the reference it is scored against.
    source_column: ClassVar[str]
    reference_column: ClassVar[str]
    #: The column a served instance is made from (`serving_example`): the deploy step
    #: probes a new version with held-out rows as a client would send them.
    serving_column: ClassVar[str]

    def serving_example(self, value: str) -> Any:
        """The prediction instance (JSON) a client sends for this `serving_column` value."""
        return value

    def serving_example_of(self, row: Mapping[str, Any]) -> Any:
        """The prediction instance a client sends for a held-out row (its columns by name):
        `serving_example` of its `serving_column`, unless the task reads more of the row."""
        return self.serving_example(str(row[self.serving_column]))

    #: Settings `evaluate` takes from the task when the config leaves them unset (null),
    #: before the model's own generation config is consulted.
    evaluation_defaults: ClassVar[Mapping[str, Any]] = {}
    #: Whether the task's own metrics compare the model with the one it started from
    #: (preference tuning's log-ratios): then evaluate runs that model whatever
    #: `evaluate.score_base_model` says, the gate's champion included.
    needs_base_model: ClassVar[bool] = False
    #: Floors the gate applies for this task to each metric `deploy_policy.floors` does not
    #: name (a user's floor for the metric replaces the task's).
    gate_floors: ClassVar[Mapping[str, float]] = {}
    #: Words the HTML report uses: its title, what it calls a model's input and its output
    #: (in general, and on one example's card).
    report_title: ClassVar[str]
    source_label: ClassVar[str]
    output_label: ClassVar[str]
    prediction_label: ClassVar[str]

    @property
    def gate_metric(self) -> str:
        """The metric the deploy gate compares when `deploy_policy.metric` is unset."""
        return self.metric_names[0]

    @abstractmethod
    def scorer(self) -> Any:
        """The task's part of the evaluate step (an `evaluation.scoring.Scorer`): how it
        reads the evaluation rows, loads and runs the model, scores the outputs beside its
        baselines and what its report shows. The step's one path calls it; made per run."""

    # serving
    #: The page the server shows at `/`.
    serving_page: ClassVar[ServingPage]
    #: The generation parameters a prediction request may set, in the order messages list
    #: them (fields of `serve.schemas.GenerationParameters`).
    serving_parameters: ClassVar[tuple[str, ...]]
    #: What an instance may be, in words, for messages.
    serving_instance_shape: ClassVar[str]

    @abstractmethod
    def serving_instance(self, value: Any) -> Instance:
        """One instance of a prediction request (parsed JSON), checked and normalised.

        Raises InstanceError saying where in the instance the problem is.
        """

    @abstractmethod
    def serving_prompter(
        self, tokenizer: Any, *, prefix: str, chat_template: str | None
    ) -> Callable[[Instance], str]:
        """How the server turns a checked instance into the text the model reads, made once
        when the model loads: `prefix` (the server's `source_prefix`) and `chat_template`
        (training's `data.chat_template`) are for the tasks that use them. The function
        raises InstanceError for an instance the model's own rules refuse."""

    @abstractmethod
    def serving_model(self, settings: Any, folder: Path) -> Any:
        """The model in `folder` loaded for the prediction server (a `serve.served.ServedModel`:
        how it reads instances, predicts a batch and shapes each prediction), under the
        server's `settings` (`serve.Settings`). Raises ModelLoadError when the folder holds
        no model of the task's kind, ServeError when the settings do not suit the model.

        Each task imports its serving module inside this method: the model code (torch,
        transformers) loads only in a server, after it listens, never in a config check."""

    @abstractmethod
    def serving_widget(self) -> Any:
        """The task's part of the page at `/` (a `serve.page.Widget`): its boxes, its script,
        and how it shows a prediction; imported when a page is drawn."""

    @staticmethod
    def instance_chars(instance: Instance) -> int:
        """How long an instance is in characters (the server's `max_text_chars` bounds it)."""
        if isinstance(instance, str):
            return len(instance)
        if isinstance(instance, tuple):
            return sum(len(text) for text in instance)
        return sum(len(turn["content"]) for turn in instance)

    # fit check
    @abstractmethod
    def fit_lengths(self, config: Any, shape: Any) -> tuple[int, int]:
        """(tokens a row reads, tokens it writes apart from those) at their longest, as the
        fit check estimates a training micro-batch from `config` (a PipelineConfig: the
        task's own `data.*` lengths, or the caps a tokenizer may reach) for the model
        `shape` (`fit.shapes.ModelShape`); evaluation reads the first per row. A task whose
        row is one sequence writes 0 tokens apart."""

    #: Sequences the model runs per training row, each at `fit_lengths`: activations are
    #: estimated for this many times the micro-batch's rows (DPO's chosen and rejected
    #: answers: 2).
    fit_sequences_per_row: ClassVar[int] = 1

    #: Whole sequences per evaluation row that evaluate also runs through the model, keeping
    #: every position's logits, besides generating (DPO's pair log-probabilities: the chosen
    #: and rejected answers, 2): the fit check estimates that pass too. 0: none.
    fit_scored_sequences_per_row: ClassVar[int] = 0

    def fit_labels(self, config: Any) -> tuple[int, str | None]:
        """How many labels the model's head scores (0: no classification head), which the
        fit check builds the model's shape for, and a note when that number is a guess."""
        return 0, None

    def fit_terms(self) -> Any:
        """The task's own fit-check terms (a `fit.shapes.FitTerms`: how its model's shape is
        read, what training and a forward pass keep), for a model that the fit layer's
        seq2seq and causal-LM formulas do not describe; None: the fit layer's."""
        return None
