"""The seam between the generic pipeline and what is specific to one task.

A task says which columns it needs and how a row becomes model inputs; later it also
scores predictions and shapes serving requests. Adding a task is a sibling module plus one
line in `llm_pipeline.tasks.TASKS`, not a flag threaded through every step.
"""

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from llm_pipeline.tasks.kinds import ModelKind

#: A chat: turns `{"role": "system" | "user" | "assistant", "content": str}`, in order (the
#: layout of Hugging Face chat templates, OpenAI and Vertex).
Chat = list[dict[str, str]]
#: Two texts a classifier reads together (`text`, `text_pair`): a question and a passage,
#: a premise and a hypothesis.
TextPair = tuple[str, str]
#: One checked prediction instance: a text, a chat, or a pair of texts.
Instance = str | Chat | TextPair


class InstanceError(ValueError):
    """A prediction instance that is not what the task takes: `where` inside the instance
    (`("messages", 2, "content")`, empty for the instance itself) and what is wrong."""

    def __init__(self, what: str, where: tuple[str | int, ...] = ()) -> None:
        super().__init__(what)
        self.what = what
        self.where = where


@dataclass(frozen=True)
class ServingPage:
    """What the prediction server's page at `/` shows for a task (serve/page.py draws it)."""

    #: `document`: paste a text, read what the model makes of it; `chat`: a system prompt,
    #: the turns so far, a message box, and the model's answers; `labels`: paste a text, see
    #: every label's score as a bar.
    layout: Literal["document", "chat", "labels"]
    #: The page's title and heading.
    title: str
    #: What the person does: the send button's label.
    action: str
    #: The input box's placeholder.
    placeholder: str
    #: The heading above the model's output (document layout).
    output: str
    #: The generation parameters the page offers as settings.
    parameters: tuple[str, ...]


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

    def source_texts(self, batch: dict[str, list[Any]], *, prefix: str) -> list[str]:
        """The model's input text for each row of a batch (seq2seq tasks)."""
        raise NotImplementedError(f"task {self.name!r} has no separate source text")

    def target_texts(self, batch: dict[str, list[Any]]) -> list[str]:
        """The text the model should produce for each row of a batch."""
        return [str(text) for text in batch[self.target_role]]

    def chats(self, batch: dict[str, list[Any]]) -> list[Any]:
        """Each row of a batch as a chat (causal-LM tasks); check them with `chat_problems`."""
        raise NotImplementedError(f"task {self.name!r} reads no chats")

    def chat_problems(self, batch: dict[str, list[Any]]) -> list[str | None]:
        """What makes each row of a batch unusable for training, naming the column or turn;
        None for a usable row (causal-LM tasks)."""
        raise NotImplementedError(f"task {self.name!r} reads no chats")

    # model and training
    #: The network the task trains: it picks the `AutoModelFor...` class, how batches are
    #: collated and the loss is taken, and how the model generates.
    model_kind: ClassVar[ModelKind]

    def auto_model_class(self) -> Any:
        """The transformers Auto class that builds this task's model from a config or a
        checkpoint (`AutoModelForSeq2SeqLM`, `AutoModelForCausalLM`)."""
        import transformers

        return getattr(transformers, self.model_kind.auto_class)

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

    #: Settings `evaluate` takes from the task when the config leaves them unset (null),
    #: before the model's own generation config is consulted.
    evaluation_defaults: ClassVar[Mapping[str, Any]] = {}
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

    @staticmethod
    def instance_chars(instance: Instance) -> int:
        """How long an instance is in characters (the server's `max_text_chars` bounds it)."""
        if isinstance(instance, str):
            return len(instance)
        if isinstance(instance, tuple):
            return sum(len(text) for text in instance)
        return sum(len(turn["content"]) for turn in instance)
