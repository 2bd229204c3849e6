"""Where the pipeline runs on Google Cloud."""

from pydantic import Field

from llm_pipeline.config.base import Section


class VertexConfig(Section):
    """Vertex AI project settings; only needed to submit, compile needs none of them."""

    project: str | None = Field(default=None, description="Google Cloud project id.")
    region: str = Field(default="us-central1", description="Vertex AI region.")
    pipeline_root: str | None = Field(
        default=None, description="`gs://` folder for pipeline artifacts."
    )
    image: str = Field(
        default="us-docker.pkg.dev/{project}/llm-pipeline/train:0.1.0",
        description="Container image every component runs in; `{project}` and `{region}` "
        "are filled in. Built from containers/train.Dockerfile.",
    )
    service_account: str | None = Field(
        default=None, description="Service account the pipeline and training jobs run as."
    )
    network: str | None = Field(
        default=None, description="VPC network (projects/N/global/networks/NAME) for peering."
    )
    tensorboard: str | None = Field(
        default=None, description="Vertex TensorBoard resource name for training logs."
    )
    experiment: str | None = Field(default=None, description="Vertex Experiment to log runs to.")
    labels: dict[str, str] = Field(default_factory=dict, description="Labels on every run.")
    enable_caching: bool = Field(
        default=False, description="Reuse outputs of unchanged steps from earlier runs."
    )

    def image_uri(self) -> str:
        """The image with `{project}`/`{region}` filled in."""
        return self.image.format(project=self.project or "PROJECT", region=self.region)
