"""The gate's champion: the served version scored by the evaluate step on this run's rows,
with this run's settings, for each task; and, where it cannot be, why."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from llm_pipeline.config import DeployConfig, EvaluateConfig, VertexConfig
from llm_pipeline.evaluation.evaluate_model import evaluate_model
from llm_pipeline.output_files import RESOLVED_CONFIG_FILE
from llm_pipeline.registry import Champion
from llm_pipeline.registry.local import LocalRegistry
from llm_pipeline.serve.settings import env_name
from llm_pipeline.steps.evaluate import score_champion

from ..evaluation import classifier_fixtures
from ..evaluation import generate_fixtures as fixtures
from ..evaluation.test_instruction_tuning import causal_model_dir, instruction_dataset
from ..tasks.preference_tuning.test_scoring import folders as preference_folders

tiny_t5_dir = fixtures.tiny_t5_dir
eval_dataset_dir = fixtures.eval_dataset_dir
__all__ = ["causal_model_dir", "instruction_dataset", "preference_folders"]  # fixtures, by name

ENDPOINT = "summarizer-endpoint"
#: A few rows, few tokens: the champion's pass is a whole evaluation.
SETTINGS = EvaluateConfig(max_samples=6, bootstrap_samples=0, max_new_tokens=6)


def serve(registry_dir: Path, model_dir: Path, task: str) -> str:
    """Register `model_dir` as a `task` model and serve it on ENDPOINT; its ref."""
    registry = LocalRegistry(registry_dir)
    version = registry.register(
        model="summarizer",
        model_dir=str(model_dir),
        metrics={"score": 100.0},
        serving_env={env_name("task"): task},
    )
    registry.deploy(version, ENDPOINT)
    return version.ref


def champion_of(
    tmp_path: Path, model_dir: Path, dataset_dir: Path, task: str, **deploy: Any
) -> Champion:
    """The champion the evaluate step finds for a new model in `model_dir`."""
    return score_champion(
        task=task,
        deploy=DeployConfig(
            registry_dir=str(tmp_path / "registry"), model_display_name="summarizer", **deploy
        ),
        vertex=VertexConfig(),
        model_dir=str(model_dir),
        dataset_dir=str(dataset_dir),
        config=SETTINGS,
        output_dir=tmp_path / "champion",
    )


@pytest.fixture(scope="module")
def classification(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("classify")
    dataset = classifier_fixtures.build_dataset(folder / "dataset")
    return classifier_fixtures.build_classifier(folder / "model", dataset, steps=5), dataset


@pytest.mark.parametrize(
    "task", ["summarization", "instruction_tuning", "text_classification", "preference_tuning"]
)
def test_the_served_version_is_scored_on_this_runs_rows_as_the_new_model_is(
    task: str, request: pytest.FixtureRequest, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Served and new model are the same files here, so the champion's scores must be the
    new model's own on the same rows and settings: any other rows, or other settings, and
    they would differ. The rows' warning (6 rows are too few) is the new model's
    evaluation's to say; the champion's report shows it, and the console has it once."""
    model_dir, dataset_dir = {
        "summarization": lambda: (request.getfixturevalue("tiny_t5_dir"), None),
        "instruction_tuning": lambda: (
            request.getfixturevalue("causal_model_dir"),
            request.getfixturevalue("instruction_dataset"),
        ),
        "text_classification": lambda: request.getfixturevalue("classification"),
        # Scored against the model it started from, the champion too (Task.needs_base_model).
        "preference_tuning": lambda: (
            request.getfixturevalue("preference_folders")["tuned"],
            request.getfixturevalue("preference_folders")["dataset"],
        ),
    }[task]()
    dataset_dir = dataset_dir or request.getfixturevalue("eval_dataset_dir")
    ref = serve(tmp_path / "registry", model_dir, task)

    champion = champion_of(tmp_path, model_dir, dataset_dir, task)
    said_for_champion = capsys.readouterr().out

    new = evaluate_model(
        model_dir=model_dir,
        dataset_dir=dataset_dir,
        config=SETTINGS.model_copy(update={"score_base_model": False}),
        output_dir=tmp_path / "new",
        task=task,
    )
    assert champion.version == ref and champion.note == ""
    timings = {"seconds", "generation_seconds", "scoring_seconds"}
    assert champion.metrics == pytest.approx(
        {k: v for k, v in new.metrics.items() if k not in timings}
        | {k: champion.metrics[k] for k in timings & set(champion.metrics)}
    )
    assert champion.metrics["samples"] == 6
    assert (tmp_path / "champion" / "predictions.jsonl").is_file()
    few = "fewer than the 30 a gate can trust"
    assert few in capsys.readouterr().out and few not in said_for_champion
    assert few in (tmp_path / "champion" / "report.html").read_text()


def test_a_dpo_champion_is_scored_against_the_new_models_start(
    preference_folders: dict[str, Path], tmp_path: Path
) -> None:
    """DPO's metrics are relative to a starting model: the served version, which started
    from another model (here: itself, so against its own start it would score exactly 0.5
    and margin 0), is measured from the new model's start, as the new model is."""
    served = tmp_path / "served"
    shutil.copytree(preference_folders["tuned"], served)
    recorded = json.loads((served / RESOLVED_CONFIG_FILE).read_text())
    recorded["model"] = {"source": str(served)}
    (served / RESOLVED_CONFIG_FILE).write_text(json.dumps(recorded))
    serve(tmp_path / "registry", served, "preference_tuning")

    champion = champion_of(
        tmp_path, preference_folders["tuned"], preference_folders["dataset"], "preference_tuning"
    )

    new = evaluate_model(
        model_dir=preference_folders["tuned"],
        dataset_dir=preference_folders["dataset"],
        config=SETTINGS,
        output_dir=tmp_path / "new",
        task="preference_tuning",
    )
    assert new.metrics["reward_margin"] != 0
    for name in ("preference_accuracy", "reward_margin", "rougeL_change"):
        assert champion.metrics[name] == pytest.approx(new.metrics[name]), name


def test_nothing_served_scores_nothing(
    tmp_path: Path, tiny_t5_dir: Path, eval_dataset_dir: Path
) -> None:
    champion = champion_of(tmp_path, tiny_t5_dir, eval_dataset_dir, "summarization")
    assert champion == Champion()
    assert not (tmp_path / "champion").exists()


def test_a_model_of_another_task_is_not_scored(
    tmp_path: Path, tiny_t5_dir: Path, eval_dataset_dir: Path
) -> None:
    ref = serve(tmp_path / "registry", tiny_t5_dir, "text_classification")
    champion = champion_of(tmp_path, tiny_t5_dir, eval_dataset_dir, "summarization")
    assert champion.version is None and not champion.metrics
    assert champion.note == (
        f"{ref} cannot be scored on this run's rows (it is a text_classification model, "
        "this run's is summarization)"
    )
    assert not (tmp_path / "champion").exists()


def test_a_model_with_another_tokenizer_is_not_scored(
    tmp_path: Path, tiny_t5_dir: Path, eval_dataset_dir: Path
) -> None:
    """This run's rows are token ids of this run's tokenizer: a model that reads other ids
    would be scored on nonsense."""
    from transformers import AutoTokenizer

    other = tmp_path / "other-tokenizer"
    shutil.copytree(tiny_t5_dir, other)
    tokenizer = AutoTokenizer.from_pretrained(other)
    tokenizer.add_tokens(["zzzunseen"])
    tokenizer.save_pretrained(other)
    ref = serve(tmp_path / "registry", other, "summarization")

    champion = champion_of(tmp_path, tiny_t5_dir, eval_dataset_dir, "summarization")

    assert champion.version is None
    assert champion.note.startswith(f"{ref} cannot be scored on this run's rows (its tokenizer")


def test_a_vertex_endpoint_is_not_scored_here(
    tmp_path: Path, tiny_t5_dir: Path, eval_dataset_dir: Path
) -> None:
    champion = champion_of(
        tmp_path, tiny_t5_dir, eval_dataset_dir, "summarization", target="vertex"
    )
    assert champion == Champion(
        note="the served model is in Vertex AI, where this step cannot load it"
    )
