"""Scheduled retraining: `--schedule` creates a Vertex pipeline schedule whose runs never
overlap and always download afresh, and `pipeline.py schedules` lists, pauses, resumes and
deletes schedules. The real CLI and SDK against the REST stand-in."""

import uuid
from pathlib import Path

import pytest

from llm_pipeline import cli
from llm_pipeline.vertex.schedules import validate_cron

from ..pipelines.spec_reading import defaults
from ..registry.vertex_standin import VertexStandIn

REPO = Path(__file__).resolve().parents[2]
CONFIG = str(REPO / "configs" / "small1vm1gpu.json")
PROJECT, REGION = "test-project", "us-central1"
PARENT = f"projects/{PROJECT}/locations/{REGION}"
SA = "trainer@test-project.iam.gserviceaccount.com"
NETWORK = "projects/123/global/networks/vpc"


def schedule(*args: str) -> int:
    root = f"gs://runs-{uuid.uuid4().hex[:12]}/pipelines"
    where = ["--project", PROJECT, "--region", REGION, "--pipeline-root", root]
    return cli.main(["--config", CONFIG, *where, "--service-account", SA, *args])


def test_a_schedule_carries_cron_time_zone_concurrency_and_who_runs_it(
    api: VertexStandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    code = schedule(
        "--schedule",
        "TZ=Europe/Paris 0 3 * * 1",
        "--network",
        NETWORK,
        "--start-time",
        "2026-12-01T00:00:00Z",
        "--end-time",
        "2036-06-01T00:00:00+02:00",
    )
    assert code == 0, capsys.readouterr().err
    (call,) = [c for c in api.calls if c.method == "POST" and c.path.endswith("/schedules")]
    assert call.path == f"/v1/{PARENT}/schedules"
    body = call.body
    assert body["displayName"] == "t5-small-cnndm"
    assert body["cron"] == "TZ=Europe/Paris 0 3 * * 1"
    # At most one run at a time: one starts, and a run that comes due meanwhile waits.
    assert body["maxConcurrentRunCount"] == "1"
    assert body["maxConcurrentActiveRunCount"] == "1"
    assert body["allowQueueing"] is True
    assert body["startTime"].startswith("2026-12-01T00:00:00")
    assert body["endTime"].startswith("2036-05-31T22:00:00")
    request = body["createPipelineJobRequest"]
    assert request["parent"] == PARENT
    job = request["pipelineJob"]
    assert job["serviceAccount"] == SA and job["network"] == NETWORK
    # The training jobs run as the same account, on the same network.
    finetune = defaults(job["pipelineSpec"], "comp-finetune")
    assert (finetune["service_account"], finetune["network"]) == (SA, NETWORK)
    assert job["runtimeConfig"]["parameterValues"]["epochs"] == 3.0
    # Each scheduled run retrains on fresh data: download never comes from the cache.
    tasks = job["pipelineSpec"]["root"]["dag"]["tasks"]
    assert not tasks["download"]["cachingOptions"].get("enableCache")
    assert tasks["preprocess"]["cachingOptions"] == {"enableCache": True}
    out = capsys.readouterr().out
    assert f"Created the schedule t5-small-cnndm: {PARENT}/schedules/" in out


def test_schedules_are_listed_paused_resumed_and_deleted(
    api: VertexStandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    assert schedule("--schedule", "0 3 * * MON") == 0
    assert schedule("--schedule", "30 4 1 * *", "--max-concurrent-runs", "2") == 0
    first, second = list(api.schedules)
    capsys.readouterr()
    where = ["--project", PROJECT, "--region", REGION]

    assert cli.main(["schedules", "list", *where]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert len(listed) == 2
    assert listed[0].startswith(f"t5-small-cnndm  id={second}  cron='30 4 1 * *'  state=ACTIVE")
    assert f"id={first}" in listed[1]

    assert cli.main(["schedules", "pause", first, *where]) == 0
    assert api.schedules[first]["state"] == "PAUSED"
    assert api.find("POST schedules:pause")[0].path == f"/v1/{PARENT}/schedules/{first}:pause"
    assert cli.main(["schedules", "resume", f"{PARENT}/schedules/{first}", *where]) == 0
    assert api.schedules[first]["state"] == "ACTIVE"
    assert cli.main(["schedules", "delete", second, *where]) == 0
    assert api.find("DELETE schedules")[0].path == f"/v1/{PARENT}/schedules/{second}"
    assert list(api.schedules) == [first]
    out = capsys.readouterr().out
    assert "Paused the schedule t5-small-cnndm" in out and "Deleted the schedule" in out

    # Two schedules share the display name: it is ambiguous while both exist.
    assert schedule("--schedule", "0 5 * * *") == 0
    capsys.readouterr()
    assert cli.main(["schedules", "pause", "t5-small-cnndm", *where]) == 1
    assert "2 schedules are called 't5-small-cnndm': use the id" in capsys.readouterr().err
    assert cli.main(["schedules", "delete", "no-such-schedule", *where]) == 1
    assert "no schedule 'no-such-schedule'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (["--schedule", "0 3 * *"], "--schedule '0 3 * *': 4 fields; cron needs 5"),
        (["--schedule", "61 3 * * 1"], "--schedule '61 3 * * 1': minute '61': 61 is outside"),
        (["--schedule", "0 3 * * FUNDAY"], "day of week 'FUNDAY'"),
        (["--schedule", "0 3 */0 * *"], "step '0'"),
        (["--schedule", "TZ=Mars/Olympus 0 3 * * 1"], "time zone 'Mars/Olympus'"),
        # These were "6 fields; cron needs 5".
        (["--schedule", "TZ= 0 3 * * 1"], "'TZ=' is not a time zone: TZ=ZONE or CRON_TZ=ZONE"),
        (["--schedule", "tz=UTC 0 3 * * 1"], "'tz=UTC' is not a time zone"),
        # Each field was in range, so a date that never comes was sent to Vertex AI.
        (["--schedule", "0 3 30 FEB *"], "day of month '30' never comes in month 'FEB'"),
        (["--schedule", "0 3 31 4,6,9,11 *"], "day of month '31' never comes in month"),
        (["--schedule", "0 3 * * 1", "--start-time", "tomorrow"], "--start-time 'tomorrow'"),
        (
            [
                *("--schedule", "0 3 * * 1", "--start-time", "2027-01-01T00:00:00Z"),
                *("--end-time", "2026-01-01T00:00:00Z"),
            ],
            "--end-time must be after --start-time",
        ),
        # It was sent to Vertex AI, asking for a schedule that could never start a run.
        (
            ["--schedule", "0 3 * * 1", "--end-time", "2020-01-01T00:00:00Z"],
            "--end-time '2020-01-01T00:00:00Z' is past: the schedule would never start a run",
        ),
        (["--schedule", "0 3 * * 1", "--max-concurrent-runs", "0"], "--max-concurrent-runs"),
        (["--schedule", "0 3 * * 1", "--wait"], "--wait apply to one run, not to a --schedule"),
        # The config's experiment was dropped without a word: no scheduled run is logged to it.
        (
            ["--schedule", "0 3 * * 1", "--set", "vertex.experiment=t5-weekly"],
            "vertex.experiment 't5-weekly' applies to one run, not to a --schedule",
        ),
    ],
)
def test_a_bad_schedule_is_refused_before_any_call(
    api: VertexStandIn, capsys: pytest.CaptureFixture[str], args: list[str], problem: str
) -> None:
    assert schedule(*args) == 2
    err = capsys.readouterr().err
    assert problem in err and "Traceback" not in err
    assert api.calls == []


@pytest.mark.parametrize(
    "cron",
    [
        "0 3 * * 1",
        "CRON_TZ=America/New_York */15 8-18 * * MON-FRI",
        "0 0 1,15 JAN,jul *",
        "5 4 * * 7",
        "0 0-23/2 * * *",
        "0 3 29 2 *",  # leap days
        "0 3 31 2,3 *",
        "0 3 31 2 1",  # with a day of week: every Monday in February as well
        "0 3 */10 2 *",
    ],
)
def test_valid_cron_strings_pass_unchanged(cron: str) -> None:
    assert validate_cron(cron) == cron


def test_no_cache_reaches_the_scheduled_runs(api: VertexStandIn) -> None:
    assert schedule("--schedule", "0 3 * * 1", "--no-cache") == 0
    (call,) = [c for c in api.calls if c.method == "POST" and c.path.endswith("/schedules")]
    tasks = call.body["createPipelineJobRequest"]["pipelineJob"]["pipelineSpec"]["root"]["dag"]
    assert not any(t["cachingOptions"].get("enableCache") for t in tasks["tasks"].values())
