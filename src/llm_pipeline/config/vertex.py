"""Where the pipeline runs on Google Cloud, and the images it runs in."""

from typing import Literal

from pydantic import Field

from llm_pipeline import __version__
from llm_pipeline.config.base import Section

#: Where the project publishes its images (cloudbuild.yaml, `make images`).
DEFAULT_IMAGE_REPOSITORY = "us-docker.pkg.dev/llm-pipeline/llm-pipeline"

#: The two images: `train` (containers/train.Dockerfile) runs every pipeline component,
#: `serve` (containers/serve.Dockerfile) is the prediction server a deploy registers.
ImageKind = Literal["train", "serve"]


class VertexConfig(Section):
    """Vertex AI project settings; only needed to submit, compile needs none of them."""

    project: str | None = Field(default=None, description="Google Cloud project id.")
    region: str = Field(default="us-central1", description="Vertex AI region.")
    pipeline_root: str | None = Field(
        default=None, description="`gs://` folder for pipeline artifacts."
    )
    image_repository: str = Field(
        default=DEFAULT_IMAGE_REPOSITORY,
        description="Artifact Registry repository of the images: components run in "
        "`<repository>/train:<version>`, deploys register `<repository>/serve:<version>` "
        "(version: this package's; `make images` builds and pushes both). `{project}` and "
        "`{region}` are filled in, e.g. `us-docker.pkg.dev/{project}/llm-pipeline`.",
    )
    train_image: str | None = Field(
        default=None,
        description="Image for every component instead of `<image_repository>/train:<version>`, "
        "e.g. your own built FROM it; `{project}` and `{region}` are filled in.",
    )
    serve_image: str | None = Field(
        default=None,
        description="Prediction image instead of `<image_repository>/serve:<version>`, e.g. a "
        "CUDA build for deploy.accelerator_type; `{project}` and `{region}` are filled in.",
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
        default=True,
        description="On Vertex, download and preprocess reuse an earlier run's outputs when "
        "their inputs are the same (scheduled runs always download afresh; the other steps "
        "never use the cache; `--no-cache` turns it off for one run).",
    )

    def image_uri(self, kind: ImageKind = "train") -> str:
        """The `train` or `serve` image: its override, else the repository's image tagged
        with this package's version, with `{project}`/`{region}` filled in."""
        override = self.train_image if kind == "train" else self.serve_image
        uri = override or f"{self.image_repository.rstrip('/')}/{kind}:{__version__}"
        return uri.format(project=self.project or "PROJECT", region=self.region)
