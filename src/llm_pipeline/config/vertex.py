"""Where the pipeline runs on Google Cloud, and the images it runs in."""

from typing import Literal

from pydantic import Field

from llm_pipeline import __version__
from llm_pipeline.config.base import Section

#: Where `make images` (cloudbuild.yaml) pushes the images: an Artifact Registry repository
#: in your own project, in the region the pipeline runs in, so that every node pulls them
#: from its own region.
DEFAULT_IMAGE_REPOSITORY = "{region}-docker.pkg.dev/{project}/llm-pipeline"

#: The images: `train` (containers/train.Dockerfile) runs every pipeline component; a deploy
#: registers `serve` (containers/serve.Dockerfile, CPU) or, with an accelerator, `serve-cuda`
#: (containers/serve-cuda.Dockerfile).
ImageKind = Literal["train", "serve", "serve-cuda"]
IMAGE_KINDS: tuple[ImageKind, ...] = ("train", "serve", "serve-cuda")
#: Stands for the project in an image name compiled without one (shipped specs, components).
PROJECT_PLACEHOLDER = "PROJECT"


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
        "`<repository>/train:<version>`; deploys register `<repository>/serve:<version>`, or "
        "`serve-cuda` with deploy.accelerator_type (version: this package's; `make images` "
        "builds and pushes all three there). `{project}` and `{region}` are filled in with "
        "the project and region the pipeline runs in.",
    )
    train_image: str | None = Field(
        default=None,
        description="Image for every component instead of `<image_repository>/train:<version>`, "
        "e.g. your own built FROM it; `{project}` and `{region}` are filled in.",
    )
    serve_image: str | None = Field(
        default=None,
        description="Prediction image every deploy registers instead of "
        "`<image_repository>/serve:<version>` (or `serve-cuda` with an accelerator); "
        "`{project}` and `{region}` are filled in.",
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

    def _template(self, kind: ImageKind) -> str:
        override = {"train": self.train_image, "serve": self.serve_image}.get(kind)
        return override or f"{self.image_repository.rstrip('/')}/{kind}:{__version__}"

    def image_uri(self, kind: ImageKind = "train") -> str:
        """An image: its override, else the repository's image tagged with this package's
        version, `{project}`/`{region}` filled in (`PROJECT` while no project is known)."""
        return self._template(kind).format(
            project=self.project or PROJECT_PLACEHOLDER, region=self.region
        )

    def serving_image_uri(self, accelerator_type: str | None) -> str:
        """The image a deploy registers: vertex.serve_image when set, else the CUDA build for
        a deploy with an accelerator (deploy.accelerator_type), else the CPU build."""
        if self.serve_image:
            return self.image_uri("serve")
        return self.image_uri("serve-cuda" if accelerator_type else "serve")

    def unresolved_image_problems(self) -> list[str]:
        """Why the train image, which a compiled spec names, cannot be named yet: it names
        `{project}` and no project is set (the spec would ask for `.../PROJECT/...`)."""
        template = self._template("train")
        if self.project or "{project}" not in template:
            return []
        setting, value = (
            ("vertex.train_image", self.train_image)
            if self.train_image
            else ("vertex.image_repository", self.image_repository)
        )
        return [
            f"{setting} {value!r} names {{project}} but no project is set: give --project "
            "(or set vertex.project) for the project whose Artifact Registry holds the images "
            "(`make images PROJECT=...`), or name the image outright"
        ]
