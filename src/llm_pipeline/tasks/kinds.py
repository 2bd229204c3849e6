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
    #: An encoder reads the source and a decoder writes the target: two stacks, and two
    #: token lengths per row (the source's and the target's). The other kinds are one stack
    #: reading one sequence.
    encoder_decoder: bool
    #: A head scores a fixed set of labels from one token's hidden state: no LM head over
    #: the vocabulary, no target tokens.
    classification_head: bool
    #: One decoder continues its prompt: the logits at position t predict the token at t + 1,
    #: so the loss shifts the labels one place on; it has no encoder to freeze and can be
    #: warm-started from one encoder checkpoint (`model.warm_start_decoder`).
    causal: bool
    #: Writes text token by token, keeping keys and values in a cache (so a batch has beams
    #: and new tokens): its labels are tokens (counted as target tokens, padded with -100).
    #: False for a head that scores a fixed set of labels in one forward pass.
    generates: bool
    #: Its batches are padded by the tokenizer's pad token, which decoder tokenizers often
    #: lack (the EOS then pads: `models.sources.ensure_pad_token`).
    needs_pad_token: bool
    #: `train.compile` (torch.compile) applies: tried on causal LMs and seq2seq models.
    compiles: bool
    #: Liger's fused kernels (`train.kernels`) apply: Liger patches causal LMs only.
    fused_kernels: bool

    def __str__(self) -> str:
        return self.name


#: Reads the source with an encoder and writes the target with a decoder (T5, BART).
SEQ2SEQ = ModelKind(
    name="seq2seq",
    description="seq2seq model",
    auto_class="AutoModelForSeq2SeqLM",
    encoder_decoder=True,
    causal=False,
    generates=True,
    needs_pad_token=False,
    compiles=True,
    fused_kernels=False,
    classification_head=False,
)
#: One decoder that continues its prompt (OPT, Llama, Qwen, Gemma).
CAUSAL_LM = ModelKind(
    name="causal_lm",
    description="causal LM",
    auto_class="AutoModelForCausalLM",
    encoder_decoder=False,
    causal=True,
    generates=True,
    needs_pad_token=True,
    compiles=True,
    fused_kernels=True,
    classification_head=False,
)
#: An encoder (or a decoder) with a head that scores a fixed set of labels (BERT, RoBERTa).
CLASSIFIER = ModelKind(
    name="classifier",
    description="classifier",
    auto_class="AutoModelForSequenceClassification",
    encoder_decoder=False,
    causal=False,
    generates=False,
    needs_pad_token=True,
    compiles=False,
    fused_kernels=False,
    classification_head=True,
)

#: Every kind by its name (to read one back from a file or a command line).
MODEL_KINDS: dict[str, ModelKind] = {kind.name: kind for kind in (SEQ2SEQ, CAUSAL_LM, CLASSIFIER)}
