"""`pipeline.py registry | rollback | serve`, run as a user runs them, on a real local registry."""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from llm_pipeline.local.run_pipeline import LocalRun, StepOutcome
from llm_pipeline.local.summary import format_summary
from llm_pipeline.registry.local.registry import LocalRegistry

from .pipeline_cli import PIPELINE, REPO, run_pipeline

ENDPOINT = "summarizer-endpoint"


def model_folder(root: Path, name: str) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    return folder


@pytest.fixture
def two_deploys(tmp_path: Path) -> Path:
    """A registry whose endpoint served version 1, then version 2."""
    registry_dir = tmp_path / "registry"
    registry = LocalRegistry(registry_dir)
    for number, rouge in ((1, 30.25), (2, 31.5)):
        version = registry.register(
            model="summarizer",
            model_dir=str(model_folder(tmp_path, f"run-{number}")),
            metrics={"rougeLsum": rouge, "rouge1": rouge + 8},
            run=f"run-{number}",
        )
        registry.deploy(version, ENDPOINT)
    return registry_dir


def test_registry_lists_versions_metrics_and_what_each_endpoint_serves(
    two_deploys: Path,
) -> None:
    result = run_pipeline("registry", "--registry-dir", str(two_deploys))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"Registry: {two_deploys}"
    assert lines[1] == "model summarizer"
    assert lines[2].split()[0] == "summarizer@1" and "rougeLsum 30.25" in lines[2]
    assert "rouge1 38.25" in lines[2] and "run run-1" in lines[2]
    assert lines[3].split()[0] == "summarizer@2" and "rougeLsum 31.50" in lines[3]
    assert lines[4] == f"endpoint {ENDPOINT}: serves summarizer@2 (summarizer@2 100%)"
    # version.json's time is UTC, and the listing says so (not a local time to the eye).
    created = LocalRegistry(two_deploys).version("summarizer", "1").created
    assert f" {created[:10]} {created[11:19]} UTC " in lines[2]


def test_registry_lists_a_versions_metrics_in_its_tasks_order(tmp_path: Path) -> None:
    """A DPO version leads with its gate's metric, preference_accuracy, not with the rougeL
    that instruction tuning (listed first among the tasks) leads with."""
    registry = LocalRegistry(tmp_path / "registry")
    registry.register(
        model="tuned",
        model_dir=str(model_folder(tmp_path, "run-1")),
        metrics={"rougeL": 10.1, "rougeL_change": -0.74, "preference_accuracy": 0.55},
        serving_env={"LLM_PIPELINE_SERVE_TASK": "preference_tuning"},
    )
    result = run_pipeline("registry", "--registry-dir", str(tmp_path / "registry"))
    assert result.returncode == 0, result.stderr
    assert (
        " UTC  preference_accuracy 0.55, rougeL 10.10, rougeL_change -0.74, never"
        in (result.stdout.splitlines()[2])
    )


def test_registry_says_which_versions_were_scored_on_other_rows_or_settings(
    tmp_path: Path,
) -> None:
    """A week with `evaluate.num_beams` changed: @2's 17.55 is not 3x @1's 5.56, it was
    scored otherwise (the gate rescored @1 on @2's settings: 10.56). The listing says so."""
    registry = LocalRegistry(tmp_path / "registry")
    for number, rouge, evaluation in ((1, 5.56, "a0c9c66f34e4"), (2, 17.55, "f0f0b74189c2")):
        registry.register(
            model="summarizer",
            model_dir=str(model_folder(tmp_path, f"run-{number}")),
            metrics={"rougeLsum": rouge},
            labels={"evaluation_data": evaluation},
        )
    result = run_pipeline("registry", "--registry-dir", str(tmp_path / "registry"))
    lines = result.stdout.splitlines()
    assert "rougeLsum 5.56," in lines[2] and lines[2].endswith(", evaluation a0c9c66f")
    assert "rougeLsum 17.55," in lines[3] and lines[3].endswith(", evaluation f0f0b741")
    assert lines[4] == (
        "  (scored on different evaluation rows or settings: compare scores only between "
        "versions of the same evaluation)"
    )
    # The same evaluation throughout (the fixture above): nothing more is said.
    registry.register(
        model="other",
        model_dir=str(model_folder(tmp_path, "run-3")),
        metrics={"rougeLsum": 1.0},
        labels={"evaluation_data": "a0c9c66f34e4"},
    )
    other = run_pipeline("registry", "--registry-dir", str(tmp_path / "registry")).stdout
    assert "evaluation" not in other.split("model other")[1].split("model summarizer")[0]


def test_registry_marks_the_versions_no_endpoint_ever_served(two_deploys: Path) -> None:
    """A deploy whose check failed (or was stopped) leaves its version registered: listed
    like the others, it read as a model that had served."""
    registry = LocalRegistry(two_deploys)
    registry.register(
        model="summarizer", model_dir=str(model_folder(two_deploys.parent, "run-3")), metrics={}
    )
    registry.rollback(ENDPOINT)  # @1 again: it served, and still counts as served
    lines = run_pipeline("registry", "--registry-dir", str(two_deploys)).stdout.splitlines()
    assert lines[4].split()[0] == "summarizer@3"
    assert lines[4].endswith("no metrics, never served (its deploy did not finish)")
    assert not any("never served" in line for line in lines[2:4])


def test_registry_of_an_empty_folder_says_so(tmp_path: Path) -> None:
    result = run_pipeline("registry", "--registry-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[1:] == ["No models registered yet.", "No endpoints yet."]


@pytest.mark.parametrize(
    ("command", "named"),
    [
        (["registry"], "--registry-dir"),
        (["rollback", "--endpoint", ENDPOINT], "the default"),
        (["serve", "--endpoint", ENDPOINT], "--registry-dir"),
    ],
    ids=lambda value: value[0] if isinstance(value, list) else value,
)
def test_a_registry_folder_that_does_not_exist_is_refused_and_nothing_is_created(
    tmp_path: Path, command: list[str], named: str
) -> None:
    missing = tmp_path / "no" / "such" / "folder"
    where = ["--registry-dir", str(missing)] if named == "--registry-dir" else []
    folder = missing if where else tmp_path / "runs" / "registry"
    result = run_pipeline(*command, *where, cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    source = "--registry-dir" if where else "the default deploy.registry_dir"
    assert f"error: no registry folder {folder} (from {source})" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_registry_folder_that_is_a_file_is_said_to_be_one(tmp_path: Path) -> None:
    """It said `no registry folder ...: nothing was deployed there`, of a file that exists."""
    named = tmp_path / "registry.json"
    named.write_text("{}")
    result = run_pipeline("registry", "--registry-dir", str(named))
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr == (
        f"error: registry folder {named} (from --registry-dir) is a file, not a folder: name "
        "the folder a run deployed to with --registry-dir, or its config with --config\n"
    )
    assert named.read_text() == "{}"


def test_rollback_swaps_with_the_previous_version_so_twice_undoes_it(two_deploys: Path) -> None:
    served = []
    for _ in range(2):
        result = run_pipeline(
            "rollback", "--endpoint", ENDPOINT, "--registry-dir", str(two_deploys)
        )
        assert result.returncode == 0, result.stderr
        record = json.loads((two_deploys / "endpoints" / f"{ENDPOINT}.json").read_text())
        served.append(record["deployed"])
        assert record["history"][-1]["action"] == "rollback"
    assert result.stdout.splitlines() == [
        f"Registry: {two_deploys}",
        f"endpoint {ENDPOINT}: rolled back from summarizer@1 to summarizer@2 (now 100% of "
        "traffic); rollback again swaps back to summarizer@1",
        # The local endpoint is a record: the server `serve` started keeps what it loaded.
        f"A `serve` of {ENDPOINT} started before this still serves summarizer@1: restart it "
        "to serve summarizer@2.",
    ]
    assert served == [
        [{"model": "summarizer", "version": "1", "traffic": 100}],
        [{"model": "summarizer", "version": "2", "traffic": 100}],
    ]
    help_text = run_pipeline("rollback", "--help").stdout
    assert "swaps with the previous version" in " ".join(help_text.split())


def test_rollback_of_a_canary_says_a_second_one_has_nothing_to_undo(tmp_path: Path) -> None:
    registry = LocalRegistry(tmp_path / "registry")
    for number in (1, 2):
        version = registry.register(
            model="summarizer", model_dir=str(model_folder(tmp_path, f"run-{number}")), metrics={}
        )
        registry.deploy(version, ENDPOINT, traffic_percent=100 if number == 1 else 10)
    result = run_pipeline("rollback", "--endpoint", ENDPOINT, "--registry-dir", str(registry.root))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[1] == (
        f"endpoint {ENDPOINT}: rolled back from summarizer@2 to summarizer@1 (now 100% of "
        "traffic); the canary summarizer@2 is off; rollback again has nothing to undo"
    )


def test_rollback_of_an_unknown_endpoint_names_the_ones_that_exist(two_deploys: Path) -> None:
    (two_deploys / "registry.lock").unlink()
    result = run_pipeline("rollback", "--endpoint", "nope", "--registry-dir", str(two_deploys))
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert "no endpoint named 'nope'" in result.stderr and ENDPOINT in result.stderr
    assert not (two_deploys / "registry.lock").exists()  # a failed rollback creates nothing


def test_registry_dir_with_a_vertex_config_is_refused(tmp_path: Path) -> None:
    result = run_pipeline(
        "registry",
        "--config",
        str(REPO / "configs" / "local.json"),
        "--set",
        "deploy.target=vertex",
        "--registry-dir",
        str(tmp_path),
    )
    assert result.returncode == 2
    assert "--registry-dir is for a local registry" in result.stderr


def printed_commands(summary: str) -> dict[str, str]:
    """The commands a run's summary prints, by what they do, as printed."""
    commands = {}
    for line in summary.splitlines():
        if line.startswith(("Serve it:", "Then ask:")):
            commands[line.split(":")[0]] = line.split(":", 1)[1].strip()
        elif line.strip().startswith("registry ") and "(python pipeline.py" in line:
            commands["registry"] = line[line.index("(") + 1 : line.rindex(")")]
    return commands


def as_run_here(command: str) -> list[str]:
    """A printed `python pipeline.py ...` command, run by this interpreter."""
    words = shlex.split(command)
    assert words[:2] == ["python", "pipeline.py"], command
    return [sys.executable, str(PIPELINE), *words[2:]]


@pytest.mark.slow
def test_the_commands_a_run_prints_work_as_printed_with_its_registry_dir(
    tmp_path: Path, tiny_model_dir: Path, loopback_port: int
) -> None:
    """A run whose deploy.registry_dir is not the default: `registry` and `serve` as the
    summary prints them read that registry, and its curl command gets an answer."""
    registry = LocalRegistry(tmp_path / "my registry")
    version = registry.register(model="summarizer", model_dir=str(tiny_model_dir), metrics={})
    registry.deploy(version, ENDPOINT)
    deployed = StepOutcome(
        "deploy", "succeeded", {"version": version.ref, "endpoint": ENDPOINT}, seconds=1
    )
    run = LocalRun(run_dir=tmp_path / "run", succeeded=True, steps=(deployed,))
    summary = format_summary(
        run, registry=registry.root, example="Return the sum of two numbers.", port=loopback_port
    )
    commands = printed_commands(summary)
    assert set(commands) == {"registry", "Serve it", "Then ask"}, summary

    listed = subprocess.run(
        as_run_here(commands["registry"]), capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert listed.returncode == 0, listed.stderr
    assert f"endpoint {ENDPOINT}: serves {version.ref}" in listed.stdout

    log = (tmp_path / "serve.log").open("w")
    process = subprocess.Popen(
        as_run_here(commands["Serve it"]), stdout=log, stderr=subprocess.STDOUT, cwd=REPO
    )
    try:
        deadline = time.monotonic() + 90
        while True:
            assert process.poll() is None, (tmp_path / "serve.log").read_text()
            try:
                if httpx.get(f"http://127.0.0.1:{loopback_port}/health", timeout=5).is_success:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, (tmp_path / "serve.log").read_text()
            time.sleep(0.5)
        asked = subprocess.run(
            ["bash", "-c", commands["Then ask"]], capture_output=True, text=True, timeout=60
        )
        assert asked.returncode == 0, asked.stderr
        assert len(json.loads(asked.stdout)["predictions"]) == 1
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(60)
        log.close()
    served = (tmp_path / "serve.log").read_text()
    assert f"Serving summarizer@1 ({version.uri}) for endpoint {ENDPOINT}" in served


def test_serve_of_an_endpoint_that_serves_nothing_says_so(tmp_path: Path) -> None:
    result = run_pipeline("serve", "--endpoint", ENDPOINT, "--registry-dir", str(tmp_path))
    assert result.returncode == 1
    assert f"endpoint '{ENDPOINT}' serves nothing (endpoints: none)" in result.stderr


def test_serve_refuses_a_record_that_sets_more_than_the_servers_settings(tmp_path: Path) -> None:
    """A version record is a file in the registry folder: its serving_env may set the
    server's own LLM_PIPELINE_SERVE_* settings, never LD_PRELOAD and the like, which
    `serve` would otherwise put into its own environment and its children's."""
    registry = LocalRegistry(tmp_path / "registry")
    version = registry.register(
        model="summarizer",
        model_dir=str(model_folder(tmp_path, "run")),
        metrics={},
        serving_env={"LLM_PIPELINE_SERVE_TASK": "summarization", "LD_PRELOAD": "/tmp/x.so"},
    )
    registry.deploy(version, ENDPOINT)
    result = run_pipeline(
        "serve", "--endpoint", ENDPOINT, "--registry-dir", str(tmp_path / "registry")
    )
    assert result.returncode == 1
    assert "summarizer@1's record sets LD_PRELOAD, which are not" in result.stderr
    assert "Serving" not in result.stdout


@pytest.fixture
def weekly(tmp_path: Path) -> Path:
    """Five weeks: @1 served, @2's deploy failed, @3 and @4 served, @5 serves now."""
    registry_dir = tmp_path / "registry"
    registry = LocalRegistry(registry_dir)
    for number in range(1, 6):
        folder = model_folder(tmp_path, f"run-{number}")
        (folder / "model.safetensors").write_bytes(b"w" * 1_500_000)
        version = registry.register(
            model="summarizer", model_dir=str(folder), metrics={"rougeLsum": 30.0 + number}
        )
        if number != 2:
            registry.deploy(version, ENDPOINT)
    return registry_dir


def test_registry_prune_dry_run_says_what_it_would_delete_and_deletes_nothing(
    weekly: Path,
) -> None:
    before = sorted(str(path) for path in weekly.rglob("*"))
    result = run_pipeline("registry", "prune", "--dry-run", "--registry-dir", str(weekly))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"Registry: {weekly}",
        "keep summarizer@3: served before, one of the last 2",
        f"keep summarizer@4: `rollback` of endpoint {ENDPOINT} returns to it",
        f"keep summarizer@5: endpoint {ENDPOINT} serves it now",
        "would delete summarizer@1 (served before, older than the last 2): 1.5 MB",
        "would delete summarizer@2 (never served): 1.5 MB",
        "Would free 3.0 MB (dry run: nothing deleted).",
    ]
    assert sorted(str(path) for path in weekly.rglob("*")) == before


def test_registry_prune_deletes_lists_them_pruned_and_serve_and_rollback_refuse_them(
    weekly: Path,
) -> None:
    result = run_pipeline("registry", "--registry-dir", str(weekly), "prune", "--keep-served", "0")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-5:] == [
        "deleted summarizer@1 (served before, --keep-served 0): 1.5 MB",
        "deleted summarizer@2 (never served): 1.5 MB",
        "deleted summarizer@3 (served before, --keep-served 0): 1.5 MB",
        "deleted summarizer@4 (served before, --keep-served 0): 1.5 MB",
        "Freed 6.0 MB in total; the pruned versions' records stay.",
    ]
    lines = run_pipeline("registry", "--registry-dir", str(weekly)).stdout.splitlines()
    assert [line.split()[0] for line in lines[2:7]] == [f"summarizer@{n}" for n in range(1, 6)]
    assert all(
        ", pruned 20" in line and "(files deleted, record kept)" in line for line in lines[2:6]
    )
    assert "pruned" not in lines[6]

    rollback = run_pipeline("rollback", "--endpoint", ENDPOINT, "--registry-dir", str(weekly))
    assert rollback.returncode == 1
    assert rollback.stderr.startswith(
        f"error: cannot roll endpoint {ENDPOINT} back to summarizer@4: it was pruned ("
    )
    assert len(rollback.stderr.splitlines()) == 1 and "Traceback" not in rollback.stderr


def test_registry_lists_a_version_whose_files_were_deleted_by_hand_and_serve_refuses_it(
    weekly: Path,
) -> None:
    files = weekly / "models" / "summarizer" / "5" / "model"
    for entry in files.iterdir():
        entry.unlink()
    files.rmdir()
    lines = run_pipeline("registry", "--registry-dir", str(weekly)).stdout.splitlines()
    assert lines[6].startswith("  summarizer@5 ")
    assert lines[6].endswith(f", files missing (no {files}: deleted by hand?)")
    assert "pruned" not in lines[6]
    served = run_pipeline("serve", "--endpoint", ENDPOINT, "--registry-dir", str(weekly))
    assert served.returncode == 1
    assert served.stderr == (
        f"error: cannot serve summarizer@5: its model files are missing from {files} (deleted "
        "by hand?); its record is there but it cannot be loaded\n"
    )


def test_registry_prune_finishes_what_a_killed_prune_left(weekly: Path) -> None:
    """A prune killed after marking @1: the listing says pruned, the next prune frees it."""
    record = weekly / "models" / "summarizer" / "1" / "version.json"
    marked = json.loads(record.read_text()) | {"pruned": "2026-11-27T10:00:00Z"}
    record.write_text(json.dumps(marked))
    lines = run_pipeline("registry", "--registry-dir", str(weekly)).stdout.splitlines()
    assert "pruned 2026-11-27" in lines[2]
    result = run_pipeline("registry", "prune", "--registry-dir", str(weekly))
    assert result.stdout.splitlines()[-3:] == [
        "deleted summarizer@2 (never served): 1.5 MB",
        "finished an earlier, stopped prune: 1.5 MB",
        "Freed 3.0 MB in total; the pruned versions' records stay.",
    ]
    assert not (weekly / "models" / "summarizer" / "1" / "model").exists()


def test_registry_prune_on_a_vertex_target_says_it_is_local_only(tmp_path: Path) -> None:
    result = run_pipeline(
        "registry",
        "prune",
        "--config",
        str(REPO / "configs" / "local.json"),
        "--set",
        "deploy.target=vertex",
    )
    assert result.returncode == 2
    assert result.stderr.startswith("error: registry prune is for a local registry only;")
    assert len(result.stderr.splitlines()) == 1 and "Traceback" not in result.stderr
