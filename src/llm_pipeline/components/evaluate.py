"""KFP component: run the fine-tuned model on held-out data and score what it gives."""

from kfp.dsl import HTML, Dataset, Input, Metrics, Model, Output, OutputPath

from llm_pipeline.components.image import component


@component
def evaluate(
    task: str,
    evaluate: str,
    deploy: str,
    vertex: str,
    model: Input[Model],
    dataset: Input[Dataset],
    metrics: Output[Metrics],
    report: Output[HTML],
    predictions: Output[Dataset],
    evaluation_data: OutputPath(str),  # type: ignore[valid-type]
    champion: OutputPath(str),  # type: ignore[valid-type]
):
    """Score the model on the test split (validation when there is none) by the task's metrics.

    A generating model writes an output for each held-out input in batches sorted by length
    (greedy or beam search as configured, falling back to the task's defaults, then the
    model's generation config); a model with a label head scores every label in one forward
    pass per batch. The outputs are scored by the task's metrics (`tasks/`: ROUGE by
    rouge-score's definitions, label scores by scikit-learn's, and what else the task names)
    beside the task's baselines, scored the same way. On a machine with several GPUs (on Vertex
    the pipeline runs this step on one whole training node) it starts one process per GPU
    with torchrun (bf16 on GPUs with native bf16), each generating its share; rank 0 gathers them in
    order, scores and writes, so the outputs are those of one process.

    Args:
        task: The config's task name (`llm_pipeline.tasks`); decides how the model
            generates, what is scored and the report's sections.
        evaluate: The config's `evaluate` section as JSON (`EvaluateConfig`): `max_samples`,
            `batch_size`, `max_new_tokens`, `min_new_tokens`, `num_beams`, `length_penalty`,
            `no_repeat_ngram_size`, `do_sample`, `temperature`, `top_p`, `stop`,
            `use_stemmer`, `bootstrap_samples` (95% intervals), `lead_k`,
            `score_base_model`, `seed`, `processes` (default: one per GPU).
        deploy: The config's `deploy` section as JSON (`DeployConfig`): where the served
            version is found.
        vertex: The config's `vertex` section as JSON (project and region).
        model: Output of `finetune` (a Hugging Face model folder).
        dataset: Output of `preprocess` (token ids and the raw text).

    Outputs:
        metrics: The task's metrics (`Task.metric_names`, the gate's default first, each
            with `_low`/`_high` interval bounds; ROUGE as F1 ×100, label scores as
            fractions), samples, seconds, the task's baselines (`lead<k>_*`, `majority_*`)
            and, with `score_base_model`, the un-fine-tuned model's as `base_*`; for
            generated text also distinct_predictions and gen_len.
        report: A self-contained HTML page: scores with intervals beside the baselines, and
            the task's sections (a length histogram and the best and worst examples; or
            per-label scores, the confusion matrix and the wrong answers first).
        predictions: A folder with predictions.jsonl (input, reference, prediction and
            per-example scores; with `score_base_model`, the un-fine-tuned model's
            prediction and scores as `base_*`), metrics.json, report.html and, for a
            model with a label head, confusion_matrix.json; the champion's own under
            `champion/`.
        evaluation_data: The fingerprint of the rows scored and the settings that decide
            the scores; the deploy step registers it with the version.
        champion: JSON: the served version (`model@version`) and its metrics on these rows,
            or a note saying why it was not scored.
    """
    arguments = dict(locals())
    from llm_pipeline.steps.evaluate import run_evaluate

    run_evaluate(arguments)
