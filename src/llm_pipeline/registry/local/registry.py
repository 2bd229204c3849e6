"""The local registry: model versions and endpoints in a folder, safe for concurrent writers.

Layout under the registry root::

    root/
      registry.lock                   flock-ed by writers; its mere existence means nothing
      models/<model>/<n>/             version n (1, 2, 3, ...) of <model>, appears whole
        model/                        the model files: copies of the run's
        version.json                  created, source, run, metrics, labels, config,
                                      serving_env
      endpoints/<endpoint>.json       deployed: [{model, version, traffic}] (percent, adding
                                      up to 100), history: [{time, action, before, after}]
      .staging/<id>/                  a version being written (ignored by readers)
      .pruning/<model>@<n>-<id>/      a pruned version's model files, being deleted
      endpoints/.<endpoint>.json.tmp-<id>   an endpoint file being written (ignored)

Readers take no lock: every file is replaced atomically and every version folder is renamed
into place complete, so they see a registry as it was before or after a write. Writers
serialise on `registry.lock` (flock: released by the kernel when a writer dies), allocate
version numbers under it, and re-read an endpoint under it before changing it. Model files
are copied before the lock is taken, so a large copy never holds up a deploy or a
rollback. What a killed writer leaves under hidden names is removed by the next writer.

`prune` deletes the model files of versions no endpoint serves or can roll back to, under
the lock: it marks the record `pruned` first (atomically), then renames `model/` aside into
`.pruning/` and deletes it there, so a kill at any moment leaves an intact version or a
pruned record, never a half-deleted version that looks intact; the next prune finishes
what a killed one left. A deploy holds its version's folder (a shared flock) while it
checks it, and prune leaves a version so held alone.

A version's files are copies, never hard links to the run's (a link is the same file: editing
the run's would change the version), and a symbolic link in the run folder is refused rather
than followed (`safe_paths.copy_tree`).
"""

import os
import re
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC
from pathlib import Path
from typing import Any

from llm_pipeline.config.deploy import LOCAL_NAME_RULE
from llm_pipeline.registry.base import (
    DeployOutcome,
    EndpointState,
    ModelVersion,
    Registry,
    RegistryError,
    RollbackOutcome,
    VersionCheck,
    ensure_files,
    ensure_still_served,
)
from llm_pipeline.registry.local import files
from llm_pipeline.registry.local import records as local_records
from llm_pipeline.registry.local.endpoints import (
    EndpointStore,
    plan_deploy,
    rollback_plan,
    share,
)
from llm_pipeline.registry.local.prune import (
    DEFAULT_KEEP_SERVED,
    PruneOutcome,
    PrunePlan,
    Verdict,
    plan_prune,
)
from llm_pipeline.registry.local.records import VersionRecord
from llm_pipeline.storage import folder_size, fsync_dir, is_remote, to_uri, write_atomic

#: Where `prune` moves a version's model files to delete them, under the registry root.
PRUNING = ".pruning"


def checked_name(name: str, what: str) -> str:
    """`name` if it can be a folder or file name in the registry, else a RegistryError."""
    if not isinstance(name, str) or not re.fullmatch(local_records.NAME_PATTERN, name):
        raise RegistryError(f"{what} name {name!r} is not allowed: use {LOCAL_NAME_RULE}")
    return name


class LocalRegistry(Registry):
    """Model versions and endpoints in the folder `root` (created on the first write).

    `check` is called by `deploy` as `check(version, probe)` before any traffic moves: it
    brings the version up, asks it the probe instances, returns the first prediction, and
    raises DeployError when the version is not healthy. The deploy step passes one that
    starts the real prediction server. With `check=None`, deploy moves traffic unchecked
    (tests and tools that only edit the registry).
    """

    def __init__(self, root: str | Path, *, check: VersionCheck | None = None) -> None:
        if is_remote(root):
            raise RegistryError(
                f"the local registry needs a local folder, got {root}; use the Vertex "
                "registry for a registry in the cloud"
            )
        self.root = Path(to_uri(root)).expanduser().absolute()
        self.check = check
        self._endpoints = EndpointStore(self.root / "endpoints", self._resolve)

    @property
    def location(self) -> str:
        """The registry folder, for messages."""
        return f"the local registry {self.root}"

    # -- versions ---------------------------------------------------------------------

    def register(
        self,
        *,
        model: str,
        model_dir: str,
        metrics: Mapping[str, float],
        run: str | None = None,
        config: Mapping[str, Any] | None = None,
        labels: Mapping[str, str] | None = None,
        serving_env: Mapping[str, str] | None = None,
    ) -> ModelVersion:
        """Add `model_dir` as the next version of `model` (created on first use).

        The files are copied into the registry, so deleting or editing the run folder later
        does not change the version; a symbolic link there is refused. `model_dir` may also be
        remote (gs://...): it is then downloaded. `config` is stored as JSON (Paths and the
        like as strings).
        """
        name = checked_name(model, "model")
        record = local_records.version_record(
            source=model_dir,
            metrics=metrics,
            run=run,
            config=config,
            labels=labels,
            serving_env=serving_env,
        )
        source = files.model_source(model_dir)
        with files.staging_folder(self.root / ".staging", self._lock_path) as stage:
            files.put_model(stage / "model", source, model_dir)
            files.fsync_tree(stage)
            with self._locked():
                taken = [*self._numbers(name), *self._named_numbers(name)]
                number = str(max(taken, default=0) + 1)
                record = record.model_copy(update={"created": local_records.now()})
                write_atomic(stage / "version.json", local_records.dump(record))
                folder = self.root / "models" / name
                folder.mkdir(parents=True, exist_ok=True)
                os.rename(stage, folder / number)
                fsync_dir(folder)
                fsync_dir(folder.parent)
        return self._version(name, number)

    def models(self) -> list[str]:
        """Names of the models with at least one version, sorted."""
        folder = self.root / "models"
        if not folder.is_dir():
            return []
        return sorted(
            entry.name
            for entry in folder.iterdir()
            if re.fullmatch(local_records.NAME_PATTERN, entry.name) and self._numbers(entry.name)
        )

    def versions(self, model: str) -> list[ModelVersion]:
        """Every version of `model`, oldest first; empty for an unknown model."""
        name = checked_name(model, "model")
        return [self._version(name, str(number)) for number in self._numbers(name)]

    def version(self, model: str, version: str) -> ModelVersion:
        """Version `version` of `model`; RegistryError naming the known ones when missing."""
        self._require(checked_name(model, "model"), str(version))
        return self._version(model, str(version))

    def config(self, version: ModelVersion) -> dict[str, Any]:
        """The config that made `version`, as registered."""
        return dict(self._record(version.model, version.version).config)

    # -- endpoints --------------------------------------------------------------------

    def endpoints(self) -> list[EndpointState]:
        """Every endpoint and what it serves, by name."""
        return [self.endpoint(name) for name in self._endpoints.names()]

    def endpoint(self, name: str) -> EndpointState:
        """The endpoint called `name`; an empty state when it does not exist yet."""
        name = checked_name(name, "endpoint")
        record = self._endpoints.read(name)
        return self._endpoints.state(name, record.deployed) if record else EndpointState(name)

    def ever_served(self) -> set[str]:
        """Every version an endpoint's history gave traffic, by deploy or rollback."""
        records = self._endpoints.records().values()
        changes = [change for record in records for change in record.history]
        return {entry.ref for change in changes for entry in change.after if entry.traffic > 0}

    def deploy(
        self,
        version: ModelVersion,
        endpoint: str,
        *,
        traffic_percent: int = 100,
        probe: Sequence[Any] = (),
        expect_served: str | None = None,
    ) -> DeployOutcome:
        """Check `version`, then give it `traffic_percent` of `endpoint` (created if missing).

        At 100% every other version on the endpoint is retired; below 100% (a canary) the
        version served before keeps the rest and any other is retired. Deploying a version
        with the split it already has (e.g. again at 100%) still runs the check but leaves
        the endpoint file and its history untouched. When the check fails, DeployError and
        the endpoint file is not touched at all.
        """
        name = checked_name(endpoint, "endpoint")
        percent = _checked_percent(traffic_percent)
        self.version(version.model, version.version)  # refuse an unknown version first
        # Held until traffic has moved: `prune` leaves a version in use alone, and its
        # record is read under the hold, so a version pruned before is refused here.
        with files.in_use(self._folder(version.model, version.version)):
            registered = ensure_files(self.version(version.model, version.version), "deploy")
            plan_deploy(self.endpoint(name), registered, percent)  # refuse a bad canary early
            prediction = self.check(registered, tuple(probe)) if self.check else ""
            with self._locked():
                # Re-read: another process may have changed the endpoint during the check.
                ensure_still_served(self.endpoint(name), expect_served)
                moved = self._endpoints.deploy(name, registered, percent)
        return DeployOutcome(
            endpoint=moved.after,
            version=registered,
            previous=moved.before.serving.version if moved.before.serving else None,
            retired=moved.retired,
            prediction=prediction,
        )

    def rollback(self, endpoint: str) -> RollbackOutcome:
        """Serve again, with all traffic, what `endpoint` served before its last change.

        The check is not run again: the version being restored served healthily before.
        Rolling back twice in a row returns to where it started (each is a change). After a
        canary, the version served before it already serves most traffic: rollback takes
        the canary off (moved_from is the canary); rolling back again is then an error, as
        the endpoint serves only what it served before that last change.
        """
        name = checked_name(endpoint, "endpoint")
        # Refused before the lock is taken: a rollback that fails creates nothing, not even
        # the lock file (an endpoint is never deleted, so it cannot vanish in between).
        self._require_endpoint(name)
        with self._locked():
            record = self._require_endpoint(name)
            moved_from, moved_to = rollback_plan(name, record, self._endpoints)
            ensure_files(moved_to, f"roll endpoint {name} back to")
            after = self._endpoints.write_change(name, record, "rollback", [share(moved_to, 100)])
        return RollbackOutcome(endpoint=after, moved_from=moved_from, moved_to=moved_to)

    # -- pruning ----------------------------------------------------------------------

    def prune_plan(self, keep_served: int = DEFAULT_KEEP_SERVED) -> PrunePlan:
        """What `prune` would keep and delete now (reads only; takes no lock)."""
        versions = [v for model in self.models() for v in self.versions(model)]
        return plan_prune(versions, self._endpoints.records(), keep_served)

    def files_size(self, version: ModelVersion) -> int:
        """Bytes of `version`'s model files (0 when it has none)."""
        return folder_size(self._folder(version.model, version.version) / "model")

    def unfinished_size(self, plan: PrunePlan) -> int:
        """Bytes an earlier prune, stopped, left to delete: the files of versions it marked
        (`plan.finish`) and the folders it moved into `.pruning/`."""
        size = sum(self.files_size(version) for version in plan.finish)
        return size + folder_size(self.root / PRUNING)

    def prune(self, keep_served: int = DEFAULT_KEEP_SERVED) -> PruneOutcome:
        """Delete the model files of the versions `prune_plan` deletes, under the lock.

        A version a deploy is checking (`files.in_use`) is left alone. For each other one,
        its record is marked pruned (atomically), then `model/` is renamed into `.pruning/`
        and deleted there; a kill in between leaves a pruned record, whose files (or the
        renamed folder) the next prune deletes first.
        """
        pruned: list[tuple[Verdict, int]] = []
        busy: list[Verdict] = []
        with self._locked():
            plan = self.prune_plan(keep_served)
            leftover = self.unfinished_size(plan)
            for version in plan.finish:
                self._move_aside(version)
            for verdict in plan.delete:
                version = verdict.version
                with files.try_claim(self._folder(version.model, version.version)) as claimed:
                    if not claimed:
                        busy.append(verdict)
                        continue
                    size = self.files_size(version)
                    self._mark_pruned(version)
                    self._move_aside(version)
                pruned.append((verdict, size))
                files.remove_tree(self.root / PRUNING)
            files.remove_tree(self.root / PRUNING)
        return PruneOutcome(plan, tuple(pruned), tuple(busy), leftover)

    def _mark_pruned(self, version: ModelVersion) -> None:
        record = self._record(version.model, version.version)
        marked = record.model_copy(update={"pruned": local_records.now()})
        path = self._folder(version.model, version.version) / "version.json"
        write_atomic(path, local_records.dump(marked))

    def _move_aside(self, version: ModelVersion) -> None:
        """Rename a pruned version's `model/` into `.pruning/`, where it is deleted."""
        folder = self._folder(version.model, version.version)
        if not (folder / "model").exists():
            return
        aside = self.root / PRUNING
        aside.mkdir(exist_ok=True)
        os.rename(folder / "model", aside / f"{version.ref}-{uuid.uuid4().hex}")
        fsync_dir(folder)
        fsync_dir(aside)

    # -- internals --------------------------------------------------------------------

    def _require_endpoint(self, name: str) -> local_records.EndpointRecord:
        """The endpoint's record; RegistryError naming the endpoints there are if missing."""
        record = self._endpoints.read(name)
        if record is None:
            known = ", ".join(self._endpoints.names()) or "none yet"
            raise RegistryError(f"no endpoint named {name!r} in {self.root}; endpoints: {known}")
        return record

    @property
    def _lock_path(self) -> Path:
        return self.root / "registry.lock"

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """The registry lock, after removing what writers killed earlier left behind."""
        with files.exclusive_lock(self._lock_path):
            files.remove_abandoned(self.root / ".staging")
            self._endpoints.remove_temp_files()
            yield

    def _numbers(self, model: str) -> list[int]:
        """The version numbers of `model`, ascending (hidden or stray entries ignored)."""
        folder = self.root / "models" / model
        if not folder.is_dir():
            return []
        return sorted(
            int(entry.name)
            for entry in folder.iterdir()
            if re.fullmatch(local_records.NUMBER_PATTERN, entry.name)
        )

    def _named_numbers(self, model: str) -> list[int]:
        """The version numbers of `model` the endpoints' histories name: a version folder
        deleted by hand must not have its number given to another model's files, which the
        history would then name (and `rollback` serve) in its place."""
        records = self._endpoints.records().values()
        changes = [change for record in records for change in record.history]
        shares = [entry for change in changes for entry in (*change.before, *change.after)]
        return [int(share.version) for share in shares if share.model == model]

    def _folder(self, model: str, version: str) -> Path:
        return self.root / "models" / model / version

    def _require(self, model: str, version: str) -> None:
        """RegistryError unless `model@version` is registered, naming what is."""
        numbers = self._numbers(model)
        if re.fullmatch(local_records.NUMBER_PATTERN, version) and int(version) in numbers:
            return
        if not numbers:
            known = ", ".join(self.models()) or "none yet"
            raise RegistryError(f"no model named {model!r} in {self.root}; models: {known}")
        listed = ", ".join(str(number) for number in numbers)
        raise RegistryError(f"{model} has no version {version!r}; its versions: {listed}")

    def _record(self, model: str, version: str) -> VersionRecord:
        self._require(checked_name(model, "model"), str(version))
        path = self.root / "models" / model / version / "version.json"
        try:
            return local_records.load(path, VersionRecord)
        except FileNotFoundError:
            missing = ["missing (the version folder is incomplete)"]
            raise local_records.damaged(path, missing) from None

    def _version(self, model: str, version: str) -> ModelVersion:
        record = self._record(model, version)
        files_at = self._folder(model, version) / "model"
        return ModelVersion(
            model=model,
            version=version,
            uri=str(files_at),
            metrics=dict(record.metrics),
            labels=dict(record.labels),
            created=record.created_iso,
            run=record.run,
            serving_env=dict(record.serving_env),
            pruned=record.pruned.astimezone(UTC).isoformat() if record.pruned else "",
            files_missing=not files_at.is_dir(),
        )

    def _resolve(self, share: local_records.Share, named_in: Path) -> ModelVersion:
        """The version an endpoint file names; a missing one is that file's damage."""
        try:
            self._require(share.model, share.version)
        except RegistryError as exc:
            raise local_records.damaged(named_in, [f"it names {share.ref}, but {exc}"]) from None
        return self._version(share.model, share.version)


def _checked_percent(percent: int) -> int:
    if isinstance(percent, bool) or not isinstance(percent, int) or not 1 <= percent <= 100:
        raise RegistryError(f"traffic_percent must be an integer from 1 to 100, got {percent!r}")
    return percent
