"""`pipeline.py` submitting to Vertex AI: the real CLI and the real `aiplatform` SDK against
the REST stand-in on loopback; each request's path and body is checked against the v1
reference. Cloud Storage (the SDK checks the pipeline root's bucket) is the emulator."""

import uuid
from pathlib import Path
from typing import Any

import pytest

from llm_pipeline import cli
from llm_pipeline.config import load_config
from llm_pipeline.config.run_parameters import parameter_defaults

from ..pipelines.spec_reading import defaults
from ..registry.vertex_standin import VertexStandIn, aiplatform_settings_restored

REPO = Path(__file__).resolve().parents[2]
CONFIG = str(REPO / "configs" / "small2vm16gpu.json")
PROJECT, REGION = "test-project", "us-central1"
PARENT = f"projects/{PROJECT}/locations/{REGION}"
SA = "trainer@test-project.iam.gserviceaccount.com"
NETWORK = "projects/123/global/networks/vpc"
#: A new bucket per run (the SDK creates a missing one on the emulator and grants the
#: service account access), as checking an existing one's owner asks Resource Manager,
#: which no stand-in here answers (the SDK would retry for a minute, then go on).
ROOT = f"gs://runs-{uuid.uuid4().hex[:12]}/pipelines"
WHERE = ["--project", PROJECT, "--region", REGION, "--pipeline-root", ROOT]


def run(*args: str) -> int:
    """`pipeline.py --config CONFIG ARGS`, in a fresh bucket, acting as the service account
    unless the arguments name one."""
    where = [arg.replace(ROOT, f"gs://runs-{uuid.uuid4().hex[:12]}/pipelines") for arg in args]
    who = [] if "--service-account" in args else ["--set", f"vertex.service_account={SA}"]
    return cli.main(["--config", CONFIG, *where, *who])


def created_job(api: VertexStandIn) -> dict[str, Any]:
    (call,) = [c for c in api.calls if c.method == "POST" and c.path.endswith("/pipelineJobs")]
    assert call.path == f"/v1/{PARENT}/pipelineJobs"
    assert call.query["pipelineJobId"][0].startswith("t5-small-cnndm-2x16-")
    return dict(call.body)


def test_submit_sends_the_spec_parameters_and_who_runs_it(
    api: VertexStandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    code = run(
        *WHERE,
        "--service-account",
        SA,
        "--network",
        NETWORK,
        "--set",
        'vertex.labels={"team": "nlp"}',
        "--set",
        "train.epochs=2",
    )
    assert code == 0
    job = created_job(api)
    assert job["displayName"] == "t5-small-cnndm-2x16"
    assert set(job["pipelineSpec"]["root"]["dag"]["tasks"]) >= {"configure", "finetune"}
    assert job["pipelineSpec"]["pipelineInfo"]["name"] == "t5-small-cnndm-2x16"
    config = load_config(CONFIG, ["train.epochs=2"]).config
    runtime = job["runtimeConfig"]
    assert runtime["gcsOutputDirectory"].startswith("gs://runs-")
    assert runtime["gcsOutputDirectory"].endswith("/pipelines")
    assert runtime["parameterValues"] == parameter_defaults(config)
    assert runtime["parameterValues"]["epochs"] == 2.0
    assert job["serviceAccount"] == SA and job["network"] == NETWORK
    assert job["labels"]["team"] == "nlp"
    out = capsys.readouterr().out
    job_id = next(iter(api.pipeline_jobs))
    assert f"Submitted {PARENT}/pipelineJobs/{job_id}" in out
    assert (
        f"https://console.cloud.google.com/vertex-ai/locations/{REGION}/pipelines/runs/"
        f"{job_id}?project={PROJECT}"
    ) in out
    # Caching is left to each step's compiled setting unless --no-cache.
    tasks = job["pipelineSpec"]["root"]["dag"]["tasks"]
    assert tasks["download"]["cachingOptions"] == {"enableCache": True}
    # The training job's folders (checkpoints, TensorBoard, the model) go under the root the
    # run goes to, given as a flag as if the config had named it.
    finetune = defaults(job["pipelineSpec"], "comp-finetune")
    assert finetune["base_output_directory"] == (
        f"{runtime['gcsOutputDirectory']}/t5-small-cnndm-2x16/finetune"
    )


def test_the_training_jobs_run_as_the_service_account_and_network_the_flags_name(
    api: VertexStandIn,
) -> None:
    # The flags reached the pipeline run only: finetune and evaluate, custom jobs of their
    # own, ran as Vertex's Custom Code Service Agent and on no network.
    assert run(*WHERE, "--service-account", SA, "--network", NETWORK) == 0
    spec = created_job(api)["pipelineSpec"]
    for component in ("comp-finetune", "comp-evaluate"):
        settings = defaults(spec, component)
        assert (settings["service_account"], settings["network"]) == (SA, NETWORK), component


def test_no_cache_turns_caching_off_for_every_step(api: VertexStandIn) -> None:
    assert run(*WHERE, "--no-cache") == 0
    tasks = created_job(api)["pipelineSpec"]["root"]["dag"]["tasks"]
    assert all(not task.get("cachingOptions", {}).get("enableCache") for task in tasks.values())


@pytest.mark.parametrize(
    ("final", "code", "said"),
    [
        ("PIPELINE_STATE_SUCCEEDED", 0, "Pipeline succeeded."),
        ("PIPELINE_STATE_FAILED", 1, "Pipeline did not succeed."),
    ],
)
def test_wait_prints_state_changes_and_exits_with_the_outcome(
    api: VertexStandIn, capsys: pytest.CaptureFixture[str], final: str, code: int, said: str
) -> None:
    api.job_states = ["PIPELINE_STATE_PENDING", "PIPELINE_STATE_RUNNING"] * 1 + [
        "PIPELINE_STATE_RUNNING",
        final,
    ]
    assert run(*WHERE, "--wait", "--poll-seconds", "0") == code
    out = capsys.readouterr().out
    lines = [line.split(" ", 1)[1] for line in out.splitlines() if line[2:3] == ":"]
    assert lines == ["pending", "running", final.removeprefix("PIPELINE_STATE_").lower()]
    assert said in out


def test_experiment_links_the_run_to_a_vertex_experiment(api: VertexStandIn) -> None:
    api.job_states = ["PIPELINE_STATE_RUNNING"]
    assert run(*WHERE, "--experiment", "nightly-t5") == 0
    created = [c for c in api.calls if c.path.endswith("/metadataStores/default/contexts")]
    assert created[0].query["contextId"] == ["nightly-t5"]
    assert created[0].body["schemaTitle"] == "system.Experiment"
    (link,) = [c for c in api.calls if c.path.endswith("/contexts/nightly-t5:addContextChildren")]
    job_id = next(iter(api.pipeline_jobs))
    assert link.body["childContexts"] == [f"{PARENT}/metadataStores/default/contexts/{job_id}"]


def test_dry_run_prints_the_parameters_and_the_spec_and_calls_nothing(
    api: VertexStandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(*WHERE, "--dry-run") == 0
    out = capsys.readouterr().out
    assert "  epochs = 3.0" in out and "  per_device_batch_size = 32" in out
    # The images of the project and region the run goes to.
    vertex = load_config(CONFIG).config.vertex.model_copy(
        update={"project": PROJECT, "region": REGION}
    )
    image = vertex.image_uri("train")
    assert image.startswith(f"{REGION}-docker.pkg.dev/{PROJECT}/")
    gpus = "of a2-megagpu-16g with 16 x NVIDIA_TESLA_A100 each"
    assert f"finetune: custom job, 2 replicas {gpus}, image {image}; not cached" in out
    assert f"evaluate: custom job, 1 replica {gpus}, image {image}; not cached" in out
    assert f"download: pipeline task, image {image}; cached, 3 retries" in out
    assert "deploy (if the gate says yes): pipeline task" in out
    assert "nothing was called" in out
    assert api.calls == []


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (
            ["--region", REGION, "--pipeline-root", ROOT],
            "--project (or vertex.project) is required",
        ),
        (["--project", "Acme_Prod", "--pipeline-root", ROOT], "--project 'Acme_Prod' is not"),
        (["--project", PROJECT, "--region", "central", "--pipeline-root", ROOT], "--region"),
        (["--project", PROJECT, "--pipeline-root", "/tmp/runs"], "--pipeline-root '/tmp/runs'"),
        (["--project", PROJECT], "--pipeline-root (or vertex.pipeline_root) is required"),
        (["--project", PROJECT, "--pipeline-root", "runs"], "--pipeline-root 'runs' is not"),
        ([*WHERE, "--network", "vpc"], "--network 'vpc'"),
        ([*WHERE, "--experiment", "Nightly Runs"], "--experiment 'Nightly Runs'"),
        # A flag that means something only on Vertex AI never lets a local run start.
        (["--region", REGION], "--project (or vertex.project) is required"),
        (["--pipeline-root", ROOT], "is a Vertex AI root: add --project"),
        (
            [*WHERE, "--wait", "--compile", "out.yaml"],
            "--compile only writes the spec: leave out --wait",
        ),
        ([*WHERE, "--start-time", "2027-01-01T00:00:00Z"], "--start-time only apply with"),
        # It was taken, and `--wait` slept a negative time after the run was submitted.
        ([*WHERE, "--wait", "--poll-seconds", "-1"], "--poll-seconds must be a number of seconds"),
        ([*WHERE, "--wait", "--poll-seconds", "nan"], "0 or more, got nan"),
    ],
)
def test_bad_flags_are_refused_before_any_call(
    api: VertexStandIn, capsys: pytest.CaptureFixture[str], args: list[str], problem: str
) -> None:
    assert run(*args) == 2
    err = capsys.readouterr().err
    assert problem in err and "Traceback" not in err
    assert api.calls == []


def test_a_refusal_from_vertex_is_one_line(
    api: VertexStandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    code = run(*WHERE, "--set", 'vertex.labels={"Team": "nlp"}')  # keys must be lowercase
    assert code == 1
    err = capsys.readouterr().err
    assert "submitting the pipeline run: Vertex AI answered" in err
    assert "invalid label key 'Team'" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("args", "doing"),
    [
        ([*WHERE], "submitting the pipeline run"),
        ([*WHERE, "--schedule", "0 3 * * 1"], "creating the schedule"),
        (["schedules", "list", "--project", PROJECT, "--region", REGION], "listing schedules"),
    ],
)
def test_without_credentials_the_command_says_how_to_get_them(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    doing: str,
) -> None:
    # It was google.auth's traceback, from inside the SDK, before any request.
    from google.cloud import aiplatform

    missing = tmp_path / "key.json"
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(missing))
    with aiplatform_settings_restored(), VertexStandIn(PROJECT, REGION) as api:
        aiplatform.init(api_endpoint=api.url, api_transport="rest")
        code = cli.main(args) if args[0] == "schedules" else run(*args)
        assert api.calls == []
    assert code == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {doing}: no usable Google Cloud credentials: run `gcloud auth")
    assert f"File {missing} was not found" in err and "Traceback" not in err
