"""The local registry: versions that outlive their run, endpoints that move traffic only after
a check, rollback, concurrent writer processes, writers killed mid-write, damaged files."""

import fcntl
import json
import os
import shutil
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import fsspec
import pytest

from llm_pipeline.errors import UnsafePathError
from llm_pipeline.registry.base import DeployError, ModelVersion, RegistryError
from llm_pipeline.registry.local import files
from llm_pipeline.registry.local.registry import LocalRegistry

from .writers import start_writer, wait_for

MODEL_FILES = {
    "config.json": b'{"model_type": "t5"}',
    "model.safetensors": bytes(range(256)) * 64,
    "tokenizer/spiece.model": b"sentencepiece",
}


@pytest.fixture(autouse=True)
def short_lock_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    """A lock left held by mistake fails a test in seconds instead of hanging it."""
    monkeypatch.setattr(files, "LOCK_TIMEOUT_S", 5.0)


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """A finished run's model folder, as the finetune step leaves it."""
    folder = tmp_path / "runs" / "run-1" / "model"
    for name, content in MODEL_FILES.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(content)
    return folder


@pytest.fixture
def registry(tmp_path: Path) -> LocalRegistry:
    return LocalRegistry(tmp_path / "registry")


def register(registry: LocalRegistry, run_dir: Path, **extra: Any) -> ModelVersion:
    return registry.register(
        model="summarizer", model_dir=str(run_dir), metrics={"rougeLsum": 30.0}, **extra
    )


def model_files(version: ModelVersion) -> dict[str, bytes]:
    folder = Path(version.uri)
    return {
        str(path.relative_to(folder)): path.read_bytes()
        for path in folder.rglob("*")
        if path.is_file()
    }


def endpoint_file(registry: LocalRegistry, name: str) -> Path:
    return registry.root / "endpoints" / f"{name}.json"


def snapshot(registry: LocalRegistry) -> tuple[Any, ...]:
    """Everything a reader of the registry can see."""
    models = registry.models()
    return models, [registry.versions(m) for m in models], registry.endpoints()


# -- versions --------------------------------------------------------------------------


def test_versions_are_numbered_and_outlive_the_run_folder(registry, run_dir):
    first = register(registry, run_dir, run="run-1")
    second = register(registry, run_dir, run="run-2")

    assert [first.version, second.version] == ["1", "2"]
    assert registry.models() == ["summarizer"]
    assert [v.ref for v in registry.versions("summarizer")] == ["summarizer@1", "summarizer@2"]
    assert Path(first.uri) == registry.root / "models" / "summarizer" / "1" / "model"
    assert first.created < second.created

    for path in sorted(run_dir.rglob("*"), reverse=True):  # the run is cleaned up
        path.rmdir() if path.is_dir() else path.unlink()
    run_dir.rmdir()
    assert model_files(registry.version("summarizer", "1")) == MODEL_FILES
    assert model_files(registry.version("summarizer", "2")) == MODEL_FILES


def test_editing_a_run_file_in_place_leaves_the_version_as_registered(registry, run_dir):
    version = register(registry, run_dir)

    with open(run_dir / "model.safetensors", "r+b") as weights:  # rewritten in place
        weights.write(b"tampered")

    assert model_files(registry.version("summarizer", version.version)) == MODEL_FILES


@pytest.mark.parametrize("where", ["model.safetensors", "tokenizer"], ids=["file", "folder"])
def test_a_symlink_in_the_run_folder_is_refused_not_followed(registry, run_dir, tmp_path, where):
    outside = tmp_path / "outside"
    (outside / "tokenizer").mkdir(parents=True)
    (outside / "model.safetensors").write_bytes(b"a file from elsewhere")
    (outside / "tokenizer" / "spiece.model").write_bytes(b"a file from elsewhere")
    link = run_dir / where
    shutil.rmtree(link) if link.is_dir() else link.unlink()
    link.symlink_to(outside / where)

    with pytest.raises(UnsafePathError, match=f"{link}: a symbolic link .*refused"):
        register(registry, run_dir)

    assert registry.models() == []
    assert not list((registry.root / ".staging").iterdir())


def test_the_run_folder_named_may_itself_be_a_link(registry, run_dir, tmp_path):
    latest = tmp_path / "latest"
    latest.symlink_to(run_dir)

    assert model_files(register(registry, latest)) == MODEL_FILES


def test_metrics_labels_run_config_and_serving_env_round_trip(registry, run_dir):
    config = {"train": {"epochs": 3, "lr": 3e-4}, "data": {"path": Path("/data/x.jsonl")}}
    registered = registry.register(
        model="summarizer",
        model_dir=str(run_dir),
        metrics={"rouge1": 41.5, "rougeLsum": 38, "gen_len": 17.25},
        run="pipeline-run-7",
        config=config,
        labels={"dataset": "xsum"},
        serving_env={"SUMMARY_PREFIX": "summarize: "},
    )

    again = LocalRegistry(registry.root).version("summarizer", "1")  # read back from disk
    assert again == registered
    assert again.metrics == {"rouge1": 41.5, "rougeLsum": 38.0, "gen_len": 17.25}
    assert again.labels == {"dataset": "xsum"}
    assert again.run == "pipeline-run-7"
    assert again.serving_env == {"SUMMARY_PREFIX": "summarize: "}
    assert again.created.endswith("+00:00")
    assert registry.config(again) == {
        "train": {"epochs": 3, "lr": 3e-4},
        "data": {"path": "/data/x.jsonl"},
    }
    stored = json.loads((Path(again.uri).parent / "version.json").read_text())
    assert stored["source"] == str(run_dir)


def test_register_refuses_what_it_cannot_store_and_registers_nothing(registry, run_dir, tmp_path):
    (tmp_path / "empty").mkdir()
    cases: list[tuple[dict[str, Any], str]] = [
        ({"model": "../escape"}, "model name '../escape' is not allowed"),
        ({"model": ".hidden"}, "not starting with '.'"),
        ({"model_dir": str(tmp_path / "missing")}, "no such folder"),
        ({"model_dir": str(tmp_path / "empty")}, "the folder is empty"),
        ({"metrics": {"rouge1": float("nan")}}, "metrics.rouge1"),
        ({"labels": {"team": 7}}, "labels.team: must be a string"),
    ]
    for change, message in cases:
        given = {"model": "summarizer", "model_dir": str(run_dir), "metrics": {}, **change}
        with pytest.raises(RegistryError, match=message):
            registry.register(**given)
    assert not registry.root.exists()


def test_unknown_versions_and_models_are_named(registry, run_dir):
    register(registry, run_dir)
    register(registry, run_dir)

    with pytest.raises(RegistryError, match=r"summarizer has no version '7'; its versions: 1, 2"):
        registry.version("summarizer", "7")
    with pytest.raises(RegistryError, match=r"no model named 'other'.*models: summarizer"):
        registry.version("other", "1")
    assert registry.versions("other") == []


def test_readers_ignore_leftover_temp_entries(registry, run_dir):
    register(registry, run_dir)
    (registry.root / "models" / "summarizer" / "notes").mkdir()
    (registry.root / "models" / ".summarizer.tmp-1").mkdir()
    (registry.root / "endpoints").mkdir()
    (registry.root / "endpoints" / ".prod.json.tmp-1234").write_text("{half")

    assert registry.models() == ["summarizer"]
    assert [v.version for v in registry.versions("summarizer")] == ["1"]
    assert registry.endpoints() == []


# -- endpoints -------------------------------------------------------------------------


def test_deploy_moves_all_traffic_and_retires_the_previous_version(registry, run_dir):
    v1, v2 = register(registry, run_dir), register(registry, run_dir)

    first = registry.deploy(v1, "prod")
    assert first.previous is None and first.retired == ()
    second = registry.deploy(v2, "prod")

    assert second.previous == v1
    assert second.retired == (v1,)
    assert [(d.version.ref, d.traffic) for d in second.endpoint.deployed] == [("summarizer@2", 100)]
    assert registry.served_version("prod") == v2
    history = json.loads(endpoint_file(registry, "prod").read_text())["history"]
    assert [(h["action"], h["before"], h["after"]) for h in history] == [
        ("deploy", [], [{"model": "summarizer", "version": "1", "traffic": 100}]),
        (
            "deploy",
            [{"model": "summarizer", "version": "1", "traffic": 100}],
            [{"model": "summarizer", "version": "2", "traffic": 100}],
        ),
    ]
    assert [e.name for e in registry.endpoints()] == ["prod"]
    assert registry.endpoint("staging").deployed == ()  # unknown: empty, not an error


def test_a_canary_shares_traffic_with_the_version_served_before(registry, run_dir):
    v1, v2, v3 = (register(registry, run_dir) for _ in range(3))
    registry.deploy(v1, "prod")

    canary = registry.deploy(v2, "prod", traffic_percent=20)
    assert {d.version.ref: d.traffic for d in canary.endpoint.deployed} == {
        "summarizer@1": 80,
        "summarizer@2": 20,
    }
    assert canary.previous == v1 and canary.retired == ()
    assert registry.served_version("prod") == v1  # the gate still compares with v1

    replaced = registry.deploy(v3, "prod", traffic_percent=10)
    assert {d.version.ref: d.traffic for d in replaced.endpoint.deployed} == {
        "summarizer@1": 90,
        "summarizer@3": 10,
    }
    assert replaced.retired == (v2,)


def test_a_first_canary_takes_all_traffic_and_bad_shares_are_refused(registry, run_dir):
    v1 = register(registry, run_dir)
    checked: list[str] = []

    def check(version: ModelVersion, probe: Sequence[str]) -> str:
        checked.append(version.ref)
        return ""

    checking = LocalRegistry(registry.root, check=check)

    with pytest.raises(RegistryError, match="from 1 to 100"):
        checking.deploy(v1, "prod", traffic_percent=0)
    assert checked == []  # refused before bringing anything up
    assert not endpoint_file(registry, "prod").exists()
    first = checking.deploy(v1, "prod", traffic_percent=20)  # nothing else to keep the rest
    assert {d.version.ref: d.traffic for d in first.endpoint.deployed} == {"summarizer@1": 100}
    assert checked == ["summarizer@1"]


def test_the_check_runs_before_traffic_moves(registry, run_dir):
    v1, v2 = register(registry, run_dir), register(registry, run_dir)
    registry.deploy(v1, "prod")
    seen: list[tuple[str, Sequence[str], str | None]] = []

    def check(version: ModelVersion, probe: Sequence[str]) -> str:
        served = checking.served_version("prod")
        seen.append((version.ref, probe, served.ref if served else None))
        return f"summary of {probe[0]}"

    checking = LocalRegistry(registry.root, check=check)
    outcome = checking.deploy(v2, "prod", probe=["doc one", "doc two"])

    assert seen == [("summarizer@2", ("doc one", "doc two"), "summarizer@1")]
    assert outcome.prediction == "summary of doc one"
    assert checking.served_version("prod") == v2


def test_a_failed_check_leaves_the_endpoint_file_byte_for_byte(registry, run_dir):
    v1, v2 = register(registry, run_dir), register(registry, run_dir)
    registry.deploy(v1, "prod")
    before = endpoint_file(registry, "prod").read_bytes()

    def unhealthy(version: ModelVersion, probe: Sequence[str]) -> str:
        raise DeployError(f"{version.ref} did not answer its health route")

    failing = LocalRegistry(registry.root, check=unhealthy)
    with pytest.raises(DeployError, match="summarizer@2 did not answer"):
        failing.deploy(v2, "prod")
    with pytest.raises(DeployError):
        failing.deploy(v2, "new-endpoint")

    assert endpoint_file(registry, "prod").read_bytes() == before
    assert not endpoint_file(registry, "new-endpoint").exists()
    assert registry.served_version("prod") == v1


def test_deploying_the_served_version_again_changes_nothing(registry, run_dir):
    v1 = register(registry, run_dir)
    registry.deploy(v1, "prod")
    before = endpoint_file(registry, "prod").read_bytes()

    again = registry.deploy(v1, "prod")

    assert again.previous == v1 and again.version == v1 and again.retired == ()
    assert endpoint_file(registry, "prod").read_bytes() == before


def test_rollback_restores_the_previous_version_and_toggles(registry, run_dir):
    v1, v2 = register(registry, run_dir), register(registry, run_dir)
    registry.deploy(v1, "prod")
    registry.deploy(v2, "prod")

    back = registry.rollback("prod")
    assert (back.moved_from, back.moved_to) == (v2, v1)
    assert registry.served_version("prod") == v1
    forth = registry.rollback("prod")
    assert (forth.moved_from, forth.moved_to) == (v1, v2)
    assert [(d.version, d.traffic) for d in forth.endpoint.deployed] == [(v2, 100)]
    history = json.loads(endpoint_file(registry, "prod").read_text())["history"]
    assert [h["action"] for h in history] == ["deploy", "deploy", "rollback", "rollback"]


def test_rollback_of_a_canary_takes_it_off_without_rerunning_the_check(registry, run_dir):
    v1, v2 = register(registry, run_dir), register(registry, run_dir)
    registry.deploy(v1, "prod")
    registry.deploy(v2, "prod", traffic_percent=20)

    def never(version: ModelVersion, probe: Sequence[str]) -> str:
        raise AssertionError("rollback must not run the check")

    outcome = LocalRegistry(registry.root, check=never).rollback("prod")

    assert (outcome.moved_from, outcome.moved_to) == (v2, v1)
    assert [(d.version, d.traffic) for d in registry.endpoint("prod").deployed] == [(v1, 100)]


def test_a_number_an_endpoint_named_is_not_given_again_after_its_folder_is_deleted(
    registry, run_dir
):
    """The newest version's folder deleted by hand: the next version is not numbered as it,
    or the endpoint's history (and `rollback`) would name other files by that number."""
    v1, v2 = register(registry, run_dir), register(registry, run_dir)
    registry.deploy(v1, "prod")
    registry.deploy(v2, "prod")
    shutil.rmtree(registry.root / "models" / "summarizer" / "2")

    assert register(registry, run_dir).version == "3"


def test_rollback_with_nothing_to_roll_back_to(registry, run_dir):
    registry.deploy(register(registry, run_dir), "prod")

    with pytest.raises(RegistryError, match="endpoint prod has no earlier version to roll back"):
        registry.rollback("prod")
    with pytest.raises(RegistryError, match=r"no endpoint named 'canary' in .*; endpoints: prod"):
        registry.rollback("canary")
    with pytest.raises(RegistryError, match="endpoint name 'a/b' is not allowed"):
        registry.rollback("a/b")


# -- processes -------------------------------------------------------------------------


def test_two_writer_processes_get_distinct_numbers_and_lose_nothing(registry, run_dir, tmp_path):
    go = tmp_path / "go"
    writers = [
        start_writer(
            *("register", registry.root, run_dir, "--count", 5, "--run", f"w{i}"),
            *("--ready", tmp_path / f"ready{i}", "--go", go),
        )
        for i in range(2)
    ]
    for i, writer in enumerate(writers):
        wait_for(tmp_path / f"ready{i}", writer)
    go.touch()
    for writer in writers:
        _, err = writer.communicate(timeout=60)
        assert writer.returncode == 0, err.decode()

    versions = registry.versions("summarizer")
    assert [v.version for v in versions] == [str(n) for n in range(1, 11)]
    assert sorted(v.run or "" for v in versions) == sorted(
        f"w{i}-{j}" for i in range(2) for j in range(5)
    )
    assert all(model_files(v) == MODEL_FILES for v in versions)
    assert list((registry.root / ".staging").iterdir()) == []


@pytest.mark.parametrize(
    ("action", "pause_at"),
    [
        ("register", "utime"),  # copying the model files: only its staging folder is locked
        ("register", "rename"),  # holding the registry lock, about to publish the version
        ("deploy", "replace"),  # holding the registry lock, about to replace the endpoint
    ],
)
def test_a_writer_killed_mid_write_changes_nothing_and_blocks_no_one(
    registry, run_dir, tmp_path, action, pause_at
):
    v1, v2 = register(registry, run_dir), register(registry, run_dir)
    registry.deploy(v1, "prod")
    before, endpoint_bytes = snapshot(registry), endpoint_file(registry, "prod").read_bytes()
    what = [run_dir] if action == "register" else ["summarizer@2", "prod"]
    paused = tmp_path / "paused"
    writer = start_writer(action, registry.root, *what, "--pause-at", pause_at, "--paused", paused)
    wait_for(paused, writer)

    os.kill(writer.pid, signal.SIGKILL)
    writer.wait(timeout=10)

    assert snapshot(LocalRegistry(registry.root)) == before
    assert endpoint_file(registry, "prod").read_bytes() == endpoint_bytes
    leftovers = [*(registry.root / ".staging").iterdir(), *files_named(registry, ".prod.json")]
    assert leftovers, "the writer was killed before it wrote anything"
    with open(registry.root / "registry.lock", "a") as lock:  # the kernel dropped its lock
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(lock, fcntl.LOCK_UN)

    assert register(registry, run_dir).version == "3"
    assert registry.deploy(v2, "prod").previous == v1
    assert not any(path.exists() for path in leftovers)  # the next writer cleaned up


def files_named(registry: LocalRegistry, prefix: str) -> list[Path]:
    return [p for p in (registry.root / "endpoints").iterdir() if p.name.startswith(prefix)]


# -- damaged files ---------------------------------------------------------------------


def share(version: str, traffic: int) -> dict[str, Any]:
    return {"model": "summarizer", "version": version, "traffic": traffic}


def _set(key: str, value: Any) -> Any:
    def edit(text: str) -> str:
        data = json.loads(text)
        target = data
        *parents, last = key.split(".")
        for part in parents:
            target = target[int(part)] if part.isdigit() else target[part]
        target[last] = value
        return json.dumps(data)

    return edit


@pytest.mark.parametrize(
    ("file", "edit", "problem"),
    [
        ("version", lambda text: text[: len(text) // 2], "Invalid JSON"),
        ("version", _set("metrics.rougeLsum", "high"), "metrics.rougeLsum: must be a number"),
        ("version", _set("owner", "me"), "owner: unknown key"),
        ("version", _set("created", "yesterday"), "created"),
        ("endpoint", lambda text: text.replace("}", "", 1), "Invalid JSON"),
        (
            "endpoint",
            _set("deployed", [share("1", 100), share("2", 50)]),
            "deployed: traffic adds up to 150%, not 100%",
        ),
        ("endpoint", _set("deployed.0.traffic", "100"), "deployed[0].traffic: must be an integer"),
        ("endpoint", _set("deployed.0.version", "9"), "names summarizer@9, but summarizer has no"),
    ],
)
def test_a_damaged_file_is_named_with_what_is_wrong(registry, run_dir, file, edit, problem):
    register(registry, run_dir)
    register(registry, run_dir)
    registry.deploy(registry.version("summarizer", "1"), "prod")
    path = (
        registry.root / "models" / "summarizer" / "1" / "version.json"
        if file == "version"
        else endpoint_file(registry, "prod")
    )
    path.write_text(edit(path.read_text()))

    reads = [
        lambda: registry.endpoint("prod"),
        registry.endpoints,
        lambda: registry.rollback("prod"),
    ]
    if file == "version":
        reads += [
            lambda: registry.versions("summarizer"),
            lambda: registry.version("summarizer", "1"),
        ]
    for read in reads:
        with pytest.raises(RegistryError) as caught:
            read()
        assert f"registry file {path} is damaged" in str(caught.value)
        assert problem in str(caught.value)


def test_a_version_folder_without_its_record_is_reported(registry, run_dir):
    registered = register(registry, run_dir)
    record = Path(registered.uri).parent / "version.json"
    record.unlink()

    with pytest.raises(RegistryError, match=f"{record} is damaged: missing"):
        registry.versions("summarizer")


# -- remote model folders --------------------------------------------------------------


def test_a_model_folder_on_cloud_storage_is_downloaded(registry, gcs_bucket):
    gcs = fsspec.filesystem("gs")
    for name, content in MODEL_FILES.items():
        gcs.pipe(f"{gcs_bucket}/run-1/model/{name}", content)

    registered = registry.register(
        model="summarizer", model_dir=f"gs://{gcs_bucket}/run-1/model", metrics={}
    )

    assert model_files(registered) == MODEL_FILES
    with pytest.raises(RegistryError, match="no such folder"):
        registry.register(model="summarizer", model_dir=f"gs://{gcs_bucket}/nothing", metrics={})
