"""Starting a run from a registered version (`model.source: "registry:<model>@<version>"`):
the config form, its resolution in a local registry by number and by what an endpoint
serves, the errors that name what the registry holds, the fit check on it, and the start
recorded on the trained model and on the version a run registers."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from llm_pipeline.cli.registry import list_registry
from llm_pipeline.config import ConfigError, PipelineConfig, load_config
from llm_pipeline.config.run_parameters import parameter_defaults
from llm_pipeline.errors import ModelSourceError
from llm_pipeline.fit.check import check_fit
from llm_pipeline.models.sources import resolve_model_path
from llm_pipeline.output_files import Step
from llm_pipeline.pipelines.build import local_input_digests
from llm_pipeline.registry import RegistryError, RegistryUnreachable
from llm_pipeline.registry.local import LocalRegistry
from llm_pipeline.registry.start import resolve_start
from llm_pipeline.steps.configure import run_configure
from llm_pipeline.steps.deploy import start_labels

from ..fit.tiny_causal import TINY_LLAMA

SFT = "docstrings-sft"


@pytest.fixture
def registry(tmp_path: Path) -> LocalRegistry:
    """`docstrings-sft` versions 1 and 2 (tiny Llama configs of two widths), its endpoint
    serving version 2."""
    found = LocalRegistry(tmp_path / "registry")
    for number, hidden in ((1, 64), (2, 128)):
        folder = tmp_path / f"sft-run-{number}" / "model"
        folder.mkdir(parents=True)
        (folder / "config.json").write_text(json.dumps({**TINY_LLAMA, "hidden_size": hidden}))
        found.register(model=SFT, model_dir=str(folder), metrics={"rougeL": 30.0 + number})
    found.deploy(found.version(SFT, "2"), f"{SFT}-endpoint")
    return found


def config_for(registry: LocalRegistry, source: str, *overrides: str) -> PipelineConfig:
    """An instruction-tuning config that starts from `source`, deploying to `registry`."""
    path = registry.root.parent / "dpo.json"
    raw = {
        "task": "instruction_tuning",
        "data": {"dataset": "builtin:docstrings"},
        "model": {"source": source},
        "deploy": {"registry_dir": str(registry.root), "model_display_name": "docstrings-dpo"},
    }
    path.write_text(json.dumps(raw))
    return load_config(path, list(overrides)).config


def test_a_version_by_number_or_by_what_its_endpoint_serves_is_the_starting_checkpoint(
    registry: LocalRegistry,
) -> None:
    first = resolve_start(config_for(registry, f"registry:{SFT}@1"))
    assert first.model.source == registry.version(SFT, "1").uri
    assert first.model.started_from == f"{SFT}@1"
    served = resolve_start(config_for(registry, f"registry:{SFT}@serving"))
    assert served.model.source == registry.version(SFT, "2").uri
    assert served.model.started_from == f"{SFT}@2"
    # The tokenizer comes with the checkpoint, and the version's folder loads as one.
    assert served.model.tokenizer_source == served.model.source
    assert resolve_model_path(served.model.source) == served.model.source


def test_a_local_runs_preprocess_is_cached_on_the_version_it_starts_from(
    registry: LocalRegistry,
) -> None:
    """Before: a `registry:` source was never resolved for the digest, so a DPO run's
    preprocess was never cached."""
    first = local_input_digests(config_for(registry, f"registry:{SFT}@1"))[Step.PREPROCESS]
    again = local_input_digests(config_for(registry, f"registry:{SFT}@1"))[Step.PREPROCESS]
    second = local_input_digests(config_for(registry, f"registry:{SFT}@2"))[Step.PREPROCESS]
    served = local_input_digests(config_for(registry, f"registry:{SFT}@serving"))
    assert first == again
    assert second != first
    assert served[Step.PREPROCESS] == second  # the endpoint serves version 2
    # A version the registry lacks is configure's to report: the step is just not cached.
    assert Step.PREPROCESS not in local_input_digests(config_for(registry, f"registry:{SFT}@7"))


def test_other_sources_are_left_as_they_are(registry: LocalRegistry) -> None:
    config = config_for(registry, "Qwen/Qwen2.5-0.5B-Instruct")
    assert resolve_start(config) is config


def test_a_missing_version_names_the_registry_folder_and_the_versions(
    registry: LocalRegistry,
) -> None:
    with pytest.raises(RegistryError) as caught:
        resolve_start(config_for(registry, f"registry:{SFT}@7"))
    message = str(caught.value)
    assert message.startswith(f"model.source 'registry:{SFT}@7'")
    assert str(registry.root) in message
    assert f"{SFT} has no version '7'; its versions: 1, 2" in message


def test_a_missing_model_names_the_models_there(registry: LocalRegistry) -> None:
    for version in ("1", "serving"):
        with pytest.raises(RegistryError, match=rf"no model named 'sft'.*models: {SFT}"):
            resolve_start(config_for(registry, f"registry:sft@{version}"))


def test_serving_when_no_endpoint_serves_the_model_names_versions_and_endpoints(
    registry: LocalRegistry, tmp_path: Path
) -> None:
    other = tmp_path / "other" / "model"
    other.mkdir(parents=True)
    (other / "config.json").write_text(json.dumps(TINY_LLAMA))
    registry.register(model="other", model_dir=str(other), metrics={})
    registry.deploy(registry.version("other", "1"), f"{SFT}-endpoint")  # it moved on
    with pytest.raises(RegistryError) as caught:
        resolve_start(config_for(registry, f"registry:{SFT}@serving"))
    assert (
        f"no endpoint serves a version of '{SFT}' (its versions: 1, 2; endpoints: "
        f"{SFT}-endpoint serves other@1): name a version instead"
    ) in str(caught.value)


def test_serving_when_endpoints_serve_different_versions_asks_for_one(
    registry: LocalRegistry,
) -> None:
    registry.deploy(registry.version(SFT, "1"), "canary-endpoint")
    with pytest.raises(RegistryError, match=r"canary-endpoint serves docstrings-sft@1, "):
        resolve_start(config_for(registry, f"registry:{SFT}@serving"))


@pytest.mark.parametrize(
    ("source", "problem"),
    [
        (f"registry:{SFT}", "names no version"),
        ("registry:@2", "names no model"),
        (f"registry:{SFT}@v2", "version 'v2' is neither a number (1, 2, ...) nor 'serving'"),
        (f"registry:{SFT}@0", "version '0' is neither"),
    ],
)
def test_a_malformed_registry_source_is_refused_by_the_config(
    registry: LocalRegistry, source: str, problem: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        config_for(registry, source)
    assert f"model.source: {source!r}: {problem}" in str(caught.value)
    assert '"registry:<model>@<version>" or "registry:<model>@serving"' in str(caught.value)


def test_a_registry_version_is_a_folder_never_a_hub_repository(registry: LocalRegistry) -> None:
    source = f"registry:{SFT}@2"
    # trust_remote_code needs no pinned commit: the files are the registry's, not the hub's.
    assert config_for(registry, source, "model.trust_remote_code=true").model.trust_remote_code
    with pytest.raises(ConfigError, match=r"pins a hub repository.*remove revision"):
        config_for(registry, source, "model.revision=main")
    with pytest.raises(ConfigError, match=r"model: tokenizer: a registry version can only be"):
        config_for(registry, source, f"model.tokenizer={source}")


def test_an_unresolved_registry_source_is_not_taken_for_a_hub_id() -> None:
    with pytest.raises(ModelSourceError, match="registry version that was not resolved"):
        resolve_model_path(f"registry:{SFT}@2")


def test_the_fit_check_reads_the_version_it_starts_from(registry: LocalRegistry) -> None:
    narrow = check_fit(config_for(registry, f"registry:{SFT}@1"), target="local")
    wide = check_fit(config_for(registry, f"registry:{SFT}@serving"), target="local")
    assert narrow.problems == [] and narrow.skipped == [] and wide.problems == []
    narrow_row, wide_row = (
        next(row for row in report.rows if row.place == "finetune") for report in (narrow, wide)
    )
    # Version 2 is twice as wide: its estimate is the larger.
    assert wide_row.estimate.total > narrow_row.estimate.total


def test_the_fit_check_refuses_a_missing_version_naming_what_there_is(
    registry: LocalRegistry,
) -> None:
    report = check_fit(config_for(registry, f"registry:{SFT}@3"), target="local")
    assert report.rows == []
    (problem,) = report.problems
    assert str(registry.root) in problem and "its versions: 1, 2" in problem


def test_the_fit_check_skips_a_registry_it_cannot_ask(registry: LocalRegistry) -> None:
    config = config_for(registry, f"registry:{SFT}@2", "deploy.target=vertex")
    with pytest.raises(RegistryUnreachable):
        resolve_start(config)  # no vertex.project: Vertex AI cannot be asked
    report = check_fit(config, target="vertex")
    assert report.problems == [] and report.rows == []
    assert "vertex.project is not set" in report.skipped[0]


def test_configure_hands_every_step_the_version_and_records_it(
    registry: LocalRegistry, tmp_path: Path
) -> None:
    config = config_for(registry, f"registry:{SFT}@serving")
    sections = run_configure(
        {
            "config": config.model_dump_json(),
            "resolved": SimpleNamespace(path=str(tmp_path / "resolved.json")),
            **parameter_defaults(config),
            "project": "",
            "region": "",
        }
    )
    model = json.loads(sections["model"])
    assert model["source"] == registry.version(SFT, "2").uri
    assert model["started_from"] == f"{SFT}@2"
    resolved = json.loads((tmp_path / "resolved.json").read_text())
    assert resolved["model"]["started_from"] == f"{SFT}@2"


def test_the_registered_version_records_its_start_and_the_listing_shows_it(
    registry: LocalRegistry, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trained: dict[str, Any] = {"framework": "transformers", "started_from": f"{SFT}@2"}
    labels = start_labels(registry, trained)
    assert start_labels(registry, {"framework": "transformers"}) == {}
    version = registry.register(
        model="docstrings-dpo",
        model_dir=registry.version(SFT, "2").uri,
        metrics={"preference_accuracy": 0.8},
        labels=labels,
    )
    assert registry.version("docstrings-dpo", "1").started_from == f"{SFT}@2"
    record = json.loads((Path(version.uri).parent / "version.json").read_text())
    assert record["labels"] == {"started_from": f"{SFT}@2"}
    list_registry(registry)
    assert f"started from {SFT}@2" in capsys.readouterr().out


def test_the_finetune_step_records_the_version_it_started_from(
    registry: LocalRegistry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The step's own bookkeeping, with training itself replaced (it is tested elsewhere):
    the trained model's metadata names the start, which deploy turns into labels."""
    from kfp.dsl import Artifact, Metrics

    from llm_pipeline.steps import finetune as finetune_step
    from llm_pipeline.train.job import FinetuneResult

    trained: list[str | None] = []

    def train(**kwargs: Any) -> FinetuneResult:
        trained.append(kwargs["model"].source)
        return FinetuneResult(
            is_primary=True,
            node_rank=0,
            node_count=1,
            output_dir=kwargs["output_dir"],
            metrics={"train_loss": 1.0},
            zero_stage="2 (auto)",
            message="",
        )

    monkeypatch.setattr(finetune_step, "run_finetune", train)
    config = resolve_start(config_for(registry, f"registry:{SFT}@serving"))
    model = Artifact(uri=str(tmp_path / "trained"))
    finetune_step.run_finetune_step(
        {
            "task": "instruction_tuning",
            "dataset": Artifact(uri=str(tmp_path / "dataset")),
            "model": config.model.model_dump_json(),
            "train": config.train.model_dump_json(),
            "cluster": config.cluster.model_dump_json(),
            "logs": Artifact(uri=str(tmp_path / "logs")),
            "trained_model": model,
            "metrics": Metrics(uri=str(tmp_path / "metrics")),
        }
    )
    assert trained == [registry.version(SFT, "2").uri]
    assert model.metadata["started_from"] == f"{SFT}@2"
    assert start_labels(registry, model.metadata) == {"started_from": f"{SFT}@2"}


def test_check_fit_on_the_command_line_reads_the_version_or_refuses_naming_versions(
    registry: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    from llm_pipeline import cli

    config_for(registry, f"registry:{SFT}@serving")
    path = str(registry.root.parent / "dpo.json")
    assert cli.main(["--config", path, "--check-fit"]) == 0
    assert "finetune" in capsys.readouterr().out
    assert (
        cli.main(["--config", path, "--check-fit", "--set", f"model.source=registry:{SFT}@3"]) == 2
    )
    error = capsys.readouterr().err
    assert f"model.source 'registry:{SFT}@3' (the local registry {registry.root})" in error
    assert "its versions: 1, 2" in error
