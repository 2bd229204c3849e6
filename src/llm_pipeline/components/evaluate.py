"""KFP component: generate summaries with the fine-tuned model and score them with ROUGE."""

from kfp.dsl import HTML, Dataset, Input, Metrics, Model, Output

from llm_pipeline.components.image import component


@component
def evaluate(
    evaluate: str,
    model: Input[Model],
    dataset: Input[Dataset],
    metrics: Output[Metrics],
    report: Output[HTML],
    predictions: Output[Dataset],
):
    """Score the model on the test split (validation when there is none) with ROUGE.

    Summaries are generated in batches sorted by length (greedy or beam search as
    configured, falling back to the model's generation config), then scored with
    rouge-score's definitions (stemming on by default, rougeLsum one sentence per line)
    beside a lead-k baseline scored the same way. On a machine with several GPUs (on Vertex
    the pipeline runs this step on one whole training node) it starts one process per GPU
    with torchrun (bf16 on GPUs with native bf16), each generating its share; rank 0 gathers them in
    order, scores and writes, so the outputs are those of one process.

    Args:
        evaluate: The config's `evaluate` section as JSON (`EvaluateConfig`): `max_samples`,
            `batch_size`, `max_new_tokens`, `min_new_tokens`, `num_beams`, `length_penalty`,
            `no_repeat_ngram_size`, `use_stemmer`, `bootstrap_samples` (95% intervals),
            `lead_k`, `score_base_model`, `seed`, `processes` (default: one per GPU).
        model: Output of `finetune` (a Hugging Face seq2seq folder).
        dataset: Output of `preprocess` (token ids and the raw text).

    Outputs:
        metrics: rouge1, rouge2, rougeL, rougeLsum (F1 ×100) with `_low`/`_high` interval
            bounds, distinct_predictions (share of distinct summaries), gen_len, samples,
            seconds, the lead-k baseline's scores as `lead<k>_*` and, with
            `score_base_model`, the un-fine-tuned model's as `base_*`.
        report: A self-contained HTML page: scores with intervals beside the baselines, a
            length histogram, the 20 best and 20 worst examples.
        predictions: A folder with predictions.jsonl (document, reference, prediction and
            per-example scores), metrics.json and report.html.
    """
    from llm_pipeline.steps.evaluate import run_evaluate

    run_evaluate(
        evaluate=evaluate,
        model=model,
        dataset=dataset,
        metrics=metrics,
        report=report,
        predictions=predictions,
    )
