"""KFP component: generate with the fine-tuned model and score what it writes."""

from kfp.dsl import HTML, Dataset, Input, Metrics, Model, Output

from llm_pipeline.components.image import component


@component
def evaluate(
    task: str,
    evaluate: str,
    model: Input[Model],
    dataset: Input[Dataset],
    metrics: Output[Metrics],
    report: Output[HTML],
    predictions: Output[Dataset],
):
    """Score the model on the test split (validation when there is none) by the task's metrics.

    Summaries (summarization) or completions of the held-out prompts (instruction tuning:
    left-padded, greedy by default) are generated in batches sorted by length (greedy or beam
    search as configured, falling back to the task's defaults, then the model's generation
    config), then scored with rouge-score's definitions (stemming on by default, rougeLsum
    one sentence per line) beside a lead-k baseline scored the same way (summarization),
    and, for instruction tuning, by exact match and by the perplexity of the reference
    responses. On a machine with several GPUs (on Vertex
    the pipeline runs this step on one whole training node) it starts one process per GPU
    with torchrun (bf16 on GPUs with native bf16), each generating its share; rank 0 gathers them in
    order, scores and writes, so the outputs are those of one process.

    Args:
        task: Task name (`summarization`, `instruction_tuning`); decides how the model
            generates, what is scored and the report's sections.
        evaluate: The config's `evaluate` section as JSON (`EvaluateConfig`): `max_samples`,
            `batch_size`, `max_new_tokens`, `min_new_tokens`, `num_beams`, `length_penalty`,
            `no_repeat_ngram_size`, `do_sample`, `temperature`, `top_p`, `stop` (causal LMs),
            `use_stemmer`, `bootstrap_samples` (95% intervals), `lead_k`,
            `score_base_model`, `seed`, `processes` (default: one per GPU).
        model: Output of `finetune` (a Hugging Face seq2seq or causal-LM folder).
        dataset: Output of `preprocess` (token ids and the raw text).

    Outputs:
        metrics: The task's ROUGE scores (F1 ×100; summarization rouge1, rouge2, rougeL,
            rougeLsum; instruction tuning rougeL) with `_low`/`_high` interval bounds,
            exact_match (% of responses equal to the reference, case and whitespace
            normalised) and perplexity (of the reference responses) for instruction tuning,
            distinct_predictions (share of distinct outputs), gen_len, samples, seconds, the
            lead-k baseline's scores as `lead<k>_*` (summarization) and, with
            `score_base_model` (instruction tuning's default), the un-fine-tuned model's as
            `base_*`.
        report: A self-contained HTML page: scores with intervals beside the baselines, a
            length histogram, the 20 best and 20 worst examples (document or prompt,
            reference, output).
        predictions: A folder with predictions.jsonl (document or prompt, reference,
            prediction and per-example scores), metrics.json and report.html.
    """
    from llm_pipeline.steps.evaluate import run_evaluate

    run_evaluate(
        task=task,
        evaluate=evaluate,
        model=model,
        dataset=dataset,
        metrics=metrics,
        report=report,
        predictions=predictions,
    )
