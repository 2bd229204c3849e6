"""KFP component: fetch a dataset into a `Dataset` artifact."""

from kfp.dsl import Dataset, Metrics, Output

from llm_pipeline.components.image import component


@component
def download(task: str, data: str, dataset: Output[Dataset], metrics: Output[Metrics]):
    """Download a dataset and normalise its splits and columns.

    Args:
        task: The config's task name (`llm_pipeline.tasks`); decides which columns are
            needed.
        data: The config's `data` section as JSON (`llm_pipeline.config.DataConfig`): `dataset` (hub
            id, local file or folder, `gs://` or `s3://` path), `subset`, `revision`,
            `columns` (task role → source column), split names, `validation_fraction`
            (carved from train, seeded by `seed`, when the source has no validation split)
            and `max_samples` per split.

    Outputs:
        dataset: A `datasets.DatasetDict` saved with `save_to_disk`: splits `train`,
            `validation` and, when present, `test`; columns named by the task's roles.
        metrics: `rows_<split>` for every split.
    """
    arguments = dict(locals())
    from llm_pipeline.steps.download import run_download

    run_download(arguments)
