"""Evaluation sharded across processes: two torchrun processes (gloo, CPU) write the same
predictions and scores as one, through the evaluate step as the pipeline runs it.

The model and documents are the docstring ones (tests/serve/tiny_model.py), so these tests
need nothing beside the repository.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from types import SimpleNamespace

import pytest

from llm_pipeline import components
from llm_pipeline.config import DeployConfig, VertexConfig
from llm_pipeline.config.errors import ConfigError
from llm_pipeline.config.evaluate import EvaluateConfig
from llm_pipeline.errors import EvaluationError
from llm_pipeline.evaluation.evaluate_model import (
    _failure_reason,
    evaluate_in_processes,
    evaluation_processes,
)

from ..serve.tiny_model import MAX_SOURCE_TOKENS, MAX_TARGET_TOKENS, docstring_documents

#: Odd, so that the two shards are uneven (13 and 12).
ROWS = 25


class Sink(SimpleNamespace):
    """What the step needs of KFP's Metrics artifact."""

    def log_metric(self, name: str, value: float) -> None:
        self.values[name] = value


@pytest.fixture(scope="module")
def docstring_dataset(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Standard-library docstrings of many lengths, saved as the preprocess step saves them."""
    import datasets
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    pairs = docstring_documents()
    # Spread over the list, so short and long documents (some cut at MAX_SOURCE_TOKENS) mix.
    chosen = pairs[:: max(len(pairs) // ROWS, 1)][:ROWS]
    assert len(chosen) == ROWS
    documents = [doc for doc, _ in chosen]
    ids = tokenizer(documents, truncation=True, max_length=MAX_SOURCE_TOKENS)["input_ids"]
    labels = tokenizer(
        text_target=[summary for _, summary in chosen],
        truncation=True,
        max_length=MAX_TARGET_TOKENS,
    )["input_ids"]
    split = datasets.Dataset.from_dict(
        {
            "document": documents,
            "summary": [summary for _, summary in chosen],
            "input_ids": ids,
            "attention_mask": [[1] * len(x) for x in ids],
            "labels": labels,
        }
    )
    folder = tmp_path_factory.mktemp("docstrings") / "dataset"
    datasets.DatasetDict({"train": split.select(range(4)), "test": split}).save_to_disk(str(folder))
    return folder


def evaluate_step(
    tmp_path: Path, model: Path, dataset: Path, processes: int
) -> tuple[list[dict[str, object]], dict[str, float], Path]:
    """Run the step as the evaluate component calls it; its predictions, metrics, folder."""
    out = tmp_path / f"processes-{processes}"
    section = EvaluateConfig(batch_size=4, bootstrap_samples=100, seed=1, processes=processes)
    metrics = Sink(path=str(out / "metrics"), values={})
    components.evaluate.python_func(
        task="summarization",
        evaluate=section.model_dump_json(),
        model=SimpleNamespace(path=str(model)),
        dataset=SimpleNamespace(path=str(dataset)),
        metrics=metrics,
        report=SimpleNamespace(path=str(out / "report.html")),
        predictions=SimpleNamespace(path=str(out / "predictions")),
        # Nothing is served (an empty registry): no champion to score.
        deploy=DeployConfig(registry_dir=str(out / "registry")).model_dump_json(),
        vertex=VertexConfig().model_dump_json(),
        evaluation_data=str(out / "evaluation_data"),
        champion=str(out / "champion"),
    )
    rows = [
        json.loads(line)
        for line in (out / "predictions" / "predictions.jsonl").read_text().splitlines()
    ]
    return rows, metrics.values, out


@pytest.mark.slow
def test_two_processes_write_what_one_writes(
    tiny_model_dir: Path, docstring_dataset: Path, tmp_path: Path
) -> None:
    one, one_metrics, _ = evaluate_step(tmp_path, tiny_model_dir, docstring_dataset, 1)
    two, two_metrics, out = evaluate_step(tmp_path, tiny_model_dir, docstring_dataset, 2)
    assert len(one) == ROWS
    assert len({row["prediction"] for row in one}) > ROWS // 2  # the model reads its input
    assert [row["index"] for row in two] == list(range(ROWS))
    assert two == one  # documents, predictions, token counts and per-example scores
    timings = {"seconds", "generation_seconds"}
    assert {k: v for k, v in two_metrics.items() if k not in timings} == {
        k: v for k, v in one_metrics.items() if k not in timings
    }
    assert two_metrics["samples"] == ROWS
    assert "<table" in (out / "report.html").read_text()
    recorded = json.loads((out / "predictions" / "llm_pipeline_config.json").read_text())
    assert recorded["processes"] == "2" and recorded["split"] == "test"


def test_one_process_logs_progress_and_generates_as_one_call(
    tiny_model_dir: Path,
    docstring_dataset: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    import datasets

    from llm_pipeline.evaluation import sharded
    from llm_pipeline.models import generation

    ids = datasets.load_from_disk(str(docstring_dataset))["test"]["input_ids"][:10]
    model, tokenizer = generation.load_seq2seq(tiny_model_dir)
    config = EvaluateConfig(batch_size=4)
    monkeypatch.setattr(sharded, "PROGRESS_EVERY_S", 0.0)
    with caplog.at_level(logging.INFO, logger=sharded.__name__):
        outputs = sharded.generate_sharded(model, tokenizer, ids, config=config)
    assert outputs == generation.generate_summaries(model, tokenizer, ids, config=config)
    progress = [r.getMessage() for r in caplog.records if r.name == sharded.__name__]
    assert [line.split(" in ")[0] for line in progress] == [
        f"generated {n} of 10 summaries" for n in (4, 8, 10)
    ]


def test_the_process_count_defaults_to_one_per_gpu() -> None:
    assert evaluation_processes(EvaluateConfig(), gpus=0) == 1
    assert evaluation_processes(EvaluateConfig(), gpus=8) == 8
    assert evaluation_processes(EvaluateConfig(processes=2), gpus=0) == 2  # CPU processes
    assert evaluation_processes(EvaluateConfig(processes=2), gpus=8) == 2
    assert evaluation_processes(EvaluateConfig()) == 1  # this machine has no GPU


def test_more_processes_than_gpus_is_refused() -> None:
    with pytest.raises(EvaluationError, match=r"evaluate\.processes: 16, but this machine has 8"):
        evaluation_processes(EvaluateConfig(processes=16), gpus=8)


@pytest.mark.parametrize(
    ("value", "problem"),
    [("0", "must be >= 1, got 0"), ('"two"', "must be an integer, got 'two'")],
)
def test_a_bad_process_count_is_a_config_error(value: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=f"processes: {problem}"):
        EvaluateConfig.from_component(f'{{"processes": {value}}}')


def _rank_dir(log_dir: Path, local_rank: int) -> Path:
    # torchrun's layout: <log dir>/<run id>/attempt_<n>/<local rank>/
    folder = log_dir / "run" / "attempt_0" / str(local_rank)
    folder.mkdir(parents=True)
    return folder


def test_a_crashed_rank_is_named_with_its_error(tmp_path: Path) -> None:
    body = {"message": "RuntimeError: boom", "extraInfo": {"py_callstack": "", "timestamp": 1}}
    (_rank_dir(tmp_path, 1) / "error.json").write_text(json.dumps({"message": body}))
    assert _failure_reason("launcher output\n", tmp_path) == "rank 1 raised:\nRuntimeError: boom"


def test_out_of_memory_names_what_to_lower(tmp_path: Path) -> None:
    message = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    body = {"message": message, "extraInfo": {"timestamp": 1}}
    (_rank_dir(tmp_path, 3) / "error.json").write_text(json.dumps({"message": body}))
    reason = _failure_reason("", tmp_path)
    assert reason.startswith("rank 3 ran out of GPU memory: torch.OutOfMemoryError")
    assert "evaluate.batch_size" in reason


@pytest.mark.slow
def test_a_mistake_in_the_processes_reads_as_in_one(
    docstring_dataset: Path, tmp_path: Path
) -> None:
    """Every rank finds the model folder empty; the step says so once, plainly."""
    not_a_model = tmp_path / "empty"
    not_a_model.mkdir()
    with pytest.raises(EvaluationError) as caught:
        evaluate_in_processes(
            model_dir=not_a_model,
            dataset_dir=docstring_dataset,
            config=EvaluateConfig(max_samples=3, processes=2),
            output_dir=tmp_path / "out",
        )
    message = str(caught.value)
    assert message.startswith("evaluation in 2 processes failed (launcher exit code 1): ")
    assert message.endswith(
        f"model folder {not_a_model}: no config.json; expected the "
        "finetune step's model folder (config.json, model.safetensors, tokenizer files)"
    )
    assert not (tmp_path / "out").exists()  # nothing half-written


@pytest.mark.slow
def test_a_rank_that_raises_reports_its_error(
    tiny_model_dir: Path, docstring_dataset: Path, tmp_path: Path
) -> None:
    """Rank 0 evaluates, then cannot write (its output folder lies under a file): the rank
    fails and its exception is recorded for the launcher (`record`'s error file), which the
    step quotes; only a rank whose `main` returned takes `exit_without_teardown`."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(EvaluationError) as caught:
        evaluate_in_processes(
            model_dir=tiny_model_dir,
            dataset_dir=docstring_dataset,
            config=EvaluateConfig(max_samples=3, processes=2),
            output_dir=blocker / "out",
        )
    message = str(caught.value)
    assert message.startswith("evaluation in 2 processes failed (launcher exit code 1): rank ")
    # Rank 0's FileExistsError, or rank 1's RuntimeError that quotes it.
    assert "raised:\n" in message and "FileExistsError" in message and "a-file" in message


def test_evaluation_processes_die_with_a_killed_launcher(
    tiny_model_dir: Path, docstring_dataset: Path, tmp_path: Path
) -> None:
    """torchrun SIGKILLed while its ranks evaluate: they stop within seconds, not run on."""
    import threading
    import time

    import psutil

    outcome: dict[str, BaseException] = {}

    def evaluate() -> None:
        try:
            evaluate_in_processes(
                model_dir=tiny_model_dir,
                dataset_dir=docstring_dataset,
                config=EvaluateConfig(batch_size=1, processes=2),
                output_dir=tmp_path / "predictions",
            )
        except BaseException as err:
            outcome["error"] = err

    def started(marker: str) -> list[psutil.Process]:
        found = []
        for child in psutil.Process().children(recursive=True):
            try:
                if marker in " ".join(child.cmdline()):
                    found.append(child)
            except psutil.NoSuchProcess:
                continue
        return found

    step = threading.Thread(target=evaluate, daemon=True)
    step.start()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        launchers = started("torch.distributed.run")
        ranks = [p for p in started("llm_pipeline.evaluation.evaluate_model") if p not in launchers]
        if launchers and len(ranks) == 2:
            break
        time.sleep(0.05)
    assert launchers and len(ranks) == 2, "the evaluation processes never started"
    time.sleep(1)  # past their first lines

    def running(process: psutil.Process) -> bool:
        try:
            return process.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    launchers[0].kill()
    deadline = time.monotonic() + 20
    while any(running(p) for p in ranks) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(running(p) for p in ranks), "ranks outlived their launcher"
    step.join(30)
    assert isinstance(outcome.get("error"), EvaluationError)
    assert not (tmp_path / "predictions").exists()


def test_the_models_weights_wait_on_the_host_while_an_engine_generates_on_the_gpu() -> None:
    """The CUDA branch's logic, on a stand-in whose weights say they are on cuda:1: moved
    to the host for the engine's generation, back to cuda:1 after, even when it fails."""
    import pytest
    import torch

    from llm_pipeline.evaluation.sharded import weights_on_host_while

    class OnGpu:
        def __init__(self) -> None:
            self.moves: list[str] = []

        def parameters(self):  # type: ignore[no-untyped-def]
            yield type("Weight", (), {"device": torch.device("cuda", 1)})()

        def to(self, device):  # type: ignore[no-untyped-def]
            self.moves.append(str(device))
            return self

    model = OnGpu()
    with weights_on_host_while(model, True):  # type: ignore[arg-type]
        assert model.moves == ["cpu"]
    assert model.moves == ["cpu", "cuda:1"]
    with pytest.raises(RuntimeError), weights_on_host_while(model, True):  # type: ignore[arg-type]
        raise RuntimeError("the engine failed")
    assert model.moves[-1] == "cuda:1"
    untouched = OnGpu()
    with weights_on_host_while(untouched, False):  # type: ignore[arg-type]
        pass
    assert untouched.moves == []
