"""Model kinds: how a task's network is built, trained and generates.

Several tasks share a kind (instruction tuning and preference tuning both train a causal
LM), so what follows from the kind alone is said here once, as facts the layers read
(`kind.generates`, `kind.auto_class`), never as a name a layer compares. A saved model
folder says its own kind through its config.json (`is_encoder_decoder`, `id2label` with an
`*ForSequenceClassification` architecture).
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelKind:
    """One way of building and running a transformers model."""

    #: The kind's name in files and on command lines (`seq2seq`); never compared by layers.
    name: str
    #: The kind in words, for messages: "seq2seq model", "causal LM".
    description: str
    #: The transformers Auto class that builds the model from a config or a checkpoint.
    auto_class: str

    def __str__(self) -> str:
        return self.name


#: Reads the source with an encoder and writes the target with a decoder (T5, BART).
SEQ2SEQ = ModelKind(
    name="seq2seq", description="seq2seq model", auto_class="AutoModelForSeq2SeqLM"
)
#: One decoder that continues its prompt (OPT, Llama, Qwen, Gemma).
CAUSAL_LM = ModelKind(name="causal_lm", description="causal LM", auto_class="AutoModelForCausalLM")
#: An encoder (or a decoder) with a head that scores a fixed set of labels (BERT, RoBERTa).
CLASSIFIER = ModelKind(
    name="classifier",
    description="classifier",
    auto_class="AutoModelForSequenceClassification",
)

#: Every kind by its name (to read one back from a file or a command line).
MODEL_KINDS: dict[str, ModelKind] = {kind.name: kind for kind in (SEQ2SEQ, CAUSAL_LM, CLASSIFIER)}
