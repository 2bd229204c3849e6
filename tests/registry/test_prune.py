"""`registry prune` on the local registry: what it keeps and deletes, the records it leaves,
the refusals of a pruned version, and a prune killed at any moment."""

import fcntl
import json
import os
import signal
import time
from pathlib import Path

import pytest

from llm_pipeline.config import DeployConfig, EvaluateConfig, VertexConfig
from llm_pipeline.config.model import registry_ref
from llm_pipeline.registry.base import ModelVersion, RegistryError
from llm_pipeline.registry.local import files
from llm_pipeline.registry.local.registry import LocalRegistry
from llm_pipeline.registry.start import starting_version
from llm_pipeline.steps.evaluate import score_champion

from .writers import start_writer, wait_for

ENDPOINT = "prod"


@pytest.fixture(autouse=True)
def short_lock_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(files, "LOCK_TIMEOUT_S", 5.0)


def run_folder(root: Path, number: int) -> Path:
    """A run's model folder of `number` kB, so each version's size tells it apart."""
    folder = root / "runs" / f"run-{number}" / "model"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"w" * (1000 * number - 2))
    return folder


def history(tmp_path: Path) -> LocalRegistry:
    """@1 served, @2 never (its check failed), @3 and @4 served, @5 never, @6 served now:
    rollback returns to @4, the last 2 served before are @4 and @3."""
    registry = LocalRegistry(tmp_path / "registry")
    for number in range(1, 7):
        version = registry.register(
            model="summarizer",
            model_dir=str(run_folder(tmp_path, number)),
            metrics={"rougeLsum": 30.0 + number},
        )
        if number in (1, 3, 4, 6):
            registry.deploy(version, ENDPOINT)
    return registry


def has_files(version: ModelVersion) -> bool:
    return (Path(version.uri) / "model.safetensors").is_file()


def state(registry: LocalRegistry) -> dict[str, tuple[bool, bool]]:
    """Each version: (marked pruned, has its files)."""
    return {
        v.ref: (bool(v.pruned), has_files(v))
        for model in registry.models()
        for v in registry.versions(model)
    }


def snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(root)): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def test_prune_keeps_what_is_served_and_the_last_served_and_deletes_the_rest(tmp_path):
    registry = history(tmp_path)

    outcome = registry.prune(keep_served=2)
    pruned, busy, earlier = outcome.pruned, outcome.busy, outcome.unfinished

    assert [(v.version.ref, v.reason, size) for v, size in pruned] == [
        ("summarizer@1", "served before, older than the last 2", 1000),
        ("summarizer@2", "never served", 2000),
        ("summarizer@5", "never served", 5000),
    ]
    assert busy == () and earlier == 0 and outcome.freed == 8000
    assert {ref for ref, (marked, present) in state(registry).items() if present} == {
        "summarizer@3",
        "summarizer@4",
        "summarizer@6",
    }
    # The records stay, so the history that names them stays true; marked pruned.
    versions = registry.versions("summarizer")
    assert [v.version for v in versions] == ["1", "2", "3", "4", "5", "6"]
    assert [bool(v.pruned) for v in versions] == [True, True, False, False, True, False]
    assert versions[0].metrics == {"rougeLsum": 31.0}
    assert (Path(versions[0].uri).parent / "version.json").is_file()
    assert list((registry.root / ".pruning").iterdir()) == []
    # What is kept is exactly what rollback uses: it still works.
    assert registry.rollback(ENDPOINT).moved_to.ref == "summarizer@4"


def test_the_reasons_name_the_endpoint_and_rollbacks_target(tmp_path):
    plan = history(tmp_path).prune_plan(keep_served=2)
    assert [(v.version.ref, v.reason) for v in plan.keep] == [
        ("summarizer@3", "served before, one of the last 2"),
        ("summarizer@4", f"`rollback` of endpoint {ENDPOINT} returns to it"),
        ("summarizer@6", f"endpoint {ENDPOINT} serves it now"),
    ]


def test_a_models_newest_version_never_served_waits_for_the_next(tmp_path):
    """A deploy registers its version, then holds it from its check on: a prune in between
    must not take the version it is about to check. The next version frees it."""
    registry = history(tmp_path)
    registry.register(model="summarizer", model_dir=str(run_folder(tmp_path, 7)), metrics={})
    plan = registry.prune_plan(keep_served=0)
    assert ("summarizer@7", "the newest version: a deploy may be about to check it") in [
        (v.version.ref, v.reason) for v in plan.keep
    ]
    registry.register(model="summarizer", model_dir=str(run_folder(tmp_path, 8)), metrics={})
    registry.prune(keep_served=0)
    present = {ref for ref, (_marked, files_there) in state(registry).items() if files_there}
    assert present == {"summarizer@6", "summarizer@8"}


@pytest.mark.parametrize(
    ("keep_served", "kept"), [(0, {"6"}), (1, {"4", "6"}), (3, {"1", "3", "4", "6"})]
)
def test_keep_served_counts_the_versions_served_before(tmp_path, keep_served, kept):
    registry = history(tmp_path)
    registry.prune(keep_served=keep_served)
    present = {
        ref.split("@")[1] for ref, (_, files_there) in state(registry).items() if files_there
    }
    assert present == kept


def test_rollback_after_a_rollback_still_has_its_target(tmp_path):
    """After a rollback (@6 → @4), rollback returns to @6: both are kept at --keep-served 1."""
    registry = history(tmp_path)
    registry.rollback(ENDPOINT)
    registry.prune(keep_served=1)
    present = {ref for ref, (_, files_there) in state(registry).items() if files_there}
    assert present == {"summarizer@4", "summarizer@6"}
    assert registry.rollback(ENDPOINT).moved_to.ref == "summarizer@6"


def test_a_canary_and_the_version_beside_it_are_both_kept(tmp_path):
    registry = LocalRegistry(tmp_path / "registry")
    versions = [
        registry.register(model="summarizer", model_dir=str(run_folder(tmp_path, n)), metrics={})
        for n in (1, 2, 3)
    ]
    registry.deploy(versions[0], ENDPOINT)
    registry.deploy(versions[2], ENDPOINT, traffic_percent=10)
    registry.prune(keep_served=0)
    assert state(registry) == {
        "summarizer@1": (False, True),
        "summarizer@2": (True, False),
        "summarizer@3": (False, True),
    }


def test_a_dry_run_plans_the_same_and_deletes_nothing(tmp_path):
    registry = history(tmp_path)
    before = snapshot(registry.root)

    plan = registry.prune_plan(keep_served=2)

    assert [v.version.ref for v in plan.delete] == ["summarizer@1", "summarizer@2", "summarizer@5"]
    assert [registry.files_size(v.version) for v in plan.delete] == [1000, 2000, 5000]
    assert snapshot(registry.root) == before
    assert not (registry.root / ".pruning").exists()


def test_a_record_that_was_never_pruned_is_written_as_before(tmp_path):
    """No `pruned` key until a prune: a version.json reads as it always did."""
    registry = history(tmp_path)
    record = json.loads((registry.root / "models/summarizer/6/version.json").read_text())
    assert "pruned" not in record
    registry.prune()
    record = json.loads((registry.root / "models/summarizer/1/version.json").read_text())
    assert record["pruned"].startswith(time.strftime("%Y-", time.gmtime()))


# -- refusals ----------------------------------------------------------------------------


def test_rollback_to_a_pruned_version_is_refused_and_moves_nothing(tmp_path):
    registry = history(tmp_path)
    registry.prune(keep_served=0)
    endpoint = (registry.root / "endpoints" / f"{ENDPOINT}.json").read_bytes()
    with pytest.raises(RegistryError) as caught:
        registry.rollback(ENDPOINT)
    message = str(caught.value)
    assert message.startswith(
        f"cannot roll endpoint {ENDPOINT} back to summarizer@4: it was pruned"
    )
    assert "\n" not in message
    assert (registry.root / "endpoints" / f"{ENDPOINT}.json").read_bytes() == endpoint


def test_deploying_a_pruned_version_is_refused_before_its_check(tmp_path):
    registry = history(tmp_path)
    registry.prune()
    checked = []
    registry.check = lambda version, probe: checked.append(version) or "ok"
    with pytest.raises(RegistryError, match=r"^cannot deploy summarizer@2: it was pruned"):
        registry.deploy(registry.version("summarizer", "2"), ENDPOINT)
    assert checked == []
    assert registry.served_version(ENDPOINT).ref == "summarizer@6"


def test_a_run_cannot_start_from_a_pruned_version(tmp_path):
    registry = history(tmp_path)
    registry.prune()
    ref = registry_ref("registry:summarizer@1")
    assert ref is not None
    with pytest.raises(RegistryError, match=r"cannot start a run from summarizer@1: it was pruned"):
        starting_version(registry, ref)
    assert starting_version(registry, registry_ref("registry:summarizer@3")).ref == "summarizer@3"


def test_a_version_whose_files_were_deleted_by_hand_is_refused_as_missing(tmp_path):
    registry = history(tmp_path)
    for number in ("4", "6"):
        files_dir = registry.root / "models" / "summarizer" / number / "model"
        for entry in files_dir.iterdir():
            entry.unlink()
        files_dir.rmdir()
    version = registry.version("summarizer", "4")
    assert version.files_missing and not version.pruned
    with pytest.raises(RegistryError, match=r"back to summarizer@4: its model files are missing"):
        registry.rollback(ENDPOINT)
    # The gate goes on without the served version's fresh scores, saying why.
    deploy = DeployConfig(
        model_display_name="summarizer",
        registry_dir=str(registry.root),
        endpoint_display_name=ENDPOINT,
    )
    champion = score_champion(
        task="summarization",
        deploy=deploy,
        vertex=VertexConfig(),
        model_dir=str(tmp_path / "runs" / "run-6" / "model"),
        dataset_dir=str(tmp_path / "data"),
        config=EvaluateConfig(),
        output_dir=tmp_path / "champion",
    )
    assert champion.version is None
    assert "summarizer@6 cannot be scored" in champion.note and "files are missing" in champion.note


def test_a_version_a_deploy_is_checking_is_left_alone(tmp_path):
    """A deploy holds its version's folder from its check until traffic moved: a prune at
    that moment (the version is not served yet) leaves it, and says so."""
    registry = history(tmp_path)
    folder = registry.root / "models" / "summarizer" / "5"
    with files.in_use(folder):
        outcome = registry.prune()
    assert [v.version.ref for v in outcome.busy] == ["summarizer@5"]
    assert "summarizer@5" not in [v.version.ref for v, _ in outcome.pruned]
    assert state(registry)["summarizer@5"] == (False, True)


def test_a_deploy_checking_its_version_holds_it_against_prune(tmp_path):
    registry = history(tmp_path)
    seen = []

    def check(version: ModelVersion, probe: object) -> str:
        seen.append(registry.prune())
        return "ok"

    registry.check = check
    registry.deploy(registry.version("summarizer", "5"), ENDPOINT)
    (outcome,) = seen
    assert [v.version.ref for v in outcome.busy] == ["summarizer@5"]
    assert registry.served_version(ENDPOINT).ref == "summarizer@5"
    assert has_files(registry.version("summarizer", "5"))


# -- killed mid-prune --------------------------------------------------------------------


class Killed(BaseException):
    """Stands for a SIGKILL at a known point: nothing after it runs."""


def kill_at(monkeypatch: pytest.MonkeyPatch, target: object, name: str) -> None:
    def die(*args: object, **kwargs: object) -> None:
        raise Killed(name)

    monkeypatch.setattr(target, name, die)


def test_a_prune_killed_after_marking_leaves_a_pruned_record_the_next_prune_finishes(
    tmp_path, monkeypatch
):
    registry = history(tmp_path)
    kill_at(monkeypatch, LocalRegistry, "_move_aside")
    with pytest.raises(Killed):
        registry.prune()
    monkeypatch.undo()

    one = registry.version("summarizer", "1")
    assert one.pruned and has_files(one)  # pruned: refused although its files are there
    with pytest.raises(RegistryError, match="it was pruned"):
        registry.deploy(one, ENDPOINT)
    assert [v.ref for v in registry.prune_plan().finish] == ["summarizer@1"]

    outcome = registry.prune()
    assert outcome.unfinished == 1000
    assert [v.version.ref for v, _ in outcome.pruned] == ["summarizer@2", "summarizer@5"]
    assert not Path(one.uri).exists() and list((registry.root / ".pruning").iterdir()) == []


def test_a_prune_killed_after_moving_the_files_aside_is_finished_by_the_next(tmp_path, monkeypatch):
    registry = history(tmp_path)
    kill_at(monkeypatch, files, "remove_tree")
    with pytest.raises(Killed):
        registry.prune()
    monkeypatch.undo()

    (aside,) = (registry.root / ".pruning").iterdir()
    assert aside.name.startswith("summarizer@1-")
    assert state(registry)["summarizer@1"] == (True, False)
    assert state(registry)["summarizer@2"] == (False, True)  # not reached: intact

    outcome = registry.prune()
    assert outcome.unfinished == 1000
    assert [v.version.ref for v, _ in outcome.pruned] == ["summarizer@2", "summarizer@5"]
    assert list((registry.root / ".pruning").iterdir()) == []


@pytest.mark.parametrize(
    ("pause_at", "left"),
    [
        ("rename", (True, True)),  # marked, its files not yet moved aside
        ("unlink", (True, False)),  # moved aside, not yet deleted
    ],
)
def test_a_prune_process_killed_midway_leaves_a_consistent_registry(tmp_path, pause_at, left):
    registry = history(tmp_path)
    paused = tmp_path / "paused"
    writer = start_writer("prune", registry.root, "--pause-at", pause_at, "--paused", paused)
    wait_for(paused, writer)
    os.kill(writer.pid, signal.SIGKILL)
    writer.wait(timeout=10)

    assert state(registry)["summarizer@1"] == left
    assert state(registry)["summarizer@2"] == (False, True)
    with open(registry.root / "registry.lock", "a") as lock:  # the kernel dropped its lock
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(lock, fcntl.LOCK_UN)

    outcome = registry.prune()
    assert outcome.unfinished == 1000
    assert [v.version.ref for v, _ in outcome.pruned] == ["summarizer@2", "summarizer@5"]
    assert {ref for ref, (_, present) in state(registry).items() if present} == {
        "summarizer@3",
        "summarizer@4",
        "summarizer@6",
    }
    assert list((registry.root / ".pruning").iterdir()) == []


def test_each_endpoints_rollback_target_is_kept_even_past_keep_served(tmp_path):
    """Two endpoints of one model (staging, prod) at --keep-served 1: each one's rollback
    target stays, so both can still roll back."""
    registry = LocalRegistry(tmp_path / "registry")
    versions = [
        registry.register(model="summarizer", model_dir=str(run_folder(tmp_path, n)), metrics={})
        for n in (1, 2, 3, 4, 5)
    ]
    for endpoint, first, second in (("staging", 0, 1), ("prod", 2, 3)):
        registry.deploy(versions[first], endpoint)
        registry.deploy(versions[second], endpoint)
    registry.deploy(versions[4], "staging")
    registry.prune(keep_served=1)
    present = {ref for ref, (_, files_there) in state(registry).items() if files_there}
    assert present == {"summarizer@2", "summarizer@3", "summarizer@4", "summarizer@5"}
    assert registry.rollback("staging").moved_to.ref == "summarizer@2"
    assert registry.rollback("prod").moved_to.ref == "summarizer@3"
