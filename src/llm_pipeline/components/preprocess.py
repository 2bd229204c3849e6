"""KFP component: tokenize a `Dataset` artifact for the task's model."""

from kfp.dsl import Dataset, Input, Metrics, Output

from llm_pipeline.components.image import component


@component
def preprocess(
    task: str,
    data: str,
    model: str,
    dataset: Input[Dataset],
    tokenized: Output[Dataset],
    metrics: Output[Metrics],
):
    """Tokenize every split with the model's fast tokenizer, without padding.

    Args:
        task: The config's task name (`llm_pipeline.tasks`): how a row becomes inputs and
            labels.
        data: The config's `data` section as JSON: the task's lengths and layout (for
            example `max_source_length` / `max_target_length`, or `max_length`, `packing`
            and `chat_template`), `num_proc` tokenization workers.
        model: The config's `model` section as JSON; the tokenizer loads from `model.tokenizer` or
            the model's checkpoint.
        dataset: Output of `download`.

    Outputs:
        tokenized: A `DatasetDict` with `input_ids`, `attention_mask`, `labels` (unpadded;
            batches are padded dynamically at training time) and the raw text columns.
        metrics: Rows kept and dropped (empty text), token-length percentiles and truncation
            rates per split.
    """
    arguments = dict(locals())
    from llm_pipeline.steps.preprocess import run_preprocess

    run_preprocess(arguments)
