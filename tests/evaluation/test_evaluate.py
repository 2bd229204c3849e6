"""The evaluate step end to end: outputs users read, and the mistakes it must explain."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import datasets
import numpy as np
import pytest

from llm_pipeline.config.data import MIN_EVALUATION_ROWS
from llm_pipeline.config.evaluate import EvaluateConfig
from llm_pipeline.errors import EvaluationError
from llm_pipeline.evaluation import ROUGE_TYPES, compute_rouge, lead_k
from llm_pipeline.evaluation.evaluate_model import (
    EVALUATION_REPORT_FILE,
    METRICS_FILE,
    PREDICTIONS_FILE,
    EvaluationResult,
    evaluate_model,
    main,
)
from llm_pipeline.models.generation import generate_summaries, load_seq2seq
from llm_pipeline.output_files import DATA_NOTES_FILE

from . import generate_fixtures as fixtures

# Shared fixtures (pytest finds them by name in this module's namespace).
tiny_t5_dir = fixtures.tiny_t5_dir
eval_dataset_dir = fixtures.eval_dataset_dir

FAST = {"bootstrap_samples": 200, "seed": 1}


@pytest.fixture(scope="module")
def evaluated(
    tiny_t5_dir: Path, eval_dataset_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> EvaluationResult:
    return evaluate_model(
        model_dir=tiny_t5_dir,
        dataset_dir=eval_dataset_dir,
        config=EvaluateConfig(**FAST),
        output_dir=tmp_path_factory.mktemp("evaluate") / "out",
    )


def _save(tmp_path: Path, **splits: datasets.Dataset) -> Path:
    folder = tmp_path / "dataset"
    datasets.DatasetDict(splits).save_to_disk(str(folder))
    return folder


def _validation(eval_dataset_dir: Path) -> datasets.Dataset:
    return datasets.load_from_disk(str(eval_dataset_dir))["validation"]


def test_metrics_hold_every_score_its_interval_and_the_lead3_baseline(
    evaluated: EvaluationResult,
) -> None:
    metrics = evaluated.metrics
    for prefix in ("", "lead3_"):
        for name in ROUGE_TYPES:
            low, score, high = (metrics[f"{prefix}{name}{s}"] for s in ("_low", "", "_high"))
            assert 0 <= low <= score <= high <= 100, (prefix, name)
    assert metrics["samples"] == fixtures.EVAL_ROWS
    assert 1 <= metrics["gen_len"] <= fixtures.MAX_TARGET_TOKENS
    assert metrics["seconds"] >= metrics["generation_seconds"] > 0
    written = json.loads((evaluated.output_dir / METRICS_FILE).read_text())
    assert written == pytest.approx(metrics)


def test_scores_match_rouge_of_the_model_and_of_lead3(
    evaluated: EvaluationResult, tiny_t5_dir: Path, eval_dataset_dir: Path
) -> None:
    split = _validation(eval_dataset_dir)
    model, tokenizer = load_seq2seq(tiny_t5_dir)
    texts = generate_summaries(
        model, tokenizer, split["input_ids"], config=EvaluateConfig(**FAST)
    ).texts
    expected = compute_rouge(texts, split["summary"], n_resamples=200, seed=1)
    leads = compute_rouge([lead_k(d, 3) for d in split["document"]], split["summary"], seed=1)
    metrics = evaluated.metrics
    for name in ROUGE_TYPES:
        assert metrics[name] == pytest.approx(expected.scores[name])
        assert metrics[f"lead3_{name}"] == pytest.approx(leads.scores[name])


def test_predictions_file_lists_each_example_in_dataset_order(
    evaluated: EvaluationResult, eval_dataset_dir: Path
) -> None:
    split = _validation(eval_dataset_dir)
    path = evaluated.predictions_path
    assert path.name == PREDICTIONS_FILE
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert [row["document"] for row in rows] == split["document"]
    assert [row["reference"] for row in rows] == split["summary"]
    # A tiny model may end a summary at once (an empty prediction is a prediction).
    assert all(isinstance(row["prediction"], str) for row in rows)
    assert sum(bool(row["prediction"]) for row in rows) > len(rows) // 2
    metrics = evaluated.metrics
    for name in ROUGE_TYPES:
        assert np.mean([row[name] for row in rows]) == pytest.approx(metrics[name])
    assert np.mean([row["gen_len"] for row in rows]) == pytest.approx(metrics["gen_len"])


def test_report_is_written_beside_the_predictions(evaluated: EvaluationResult) -> None:
    page = evaluated.report_path.read_text(encoding="utf-8")
    assert evaluated.report_path.name == EVALUATION_REPORT_FILE
    assert '<table id="scores">' in page
    assert "lead-3" in page
    assert 'id="evaluation-warning"' not in page  # 100 rows: enough for a gate


def test_test_split_is_preferred_max_samples_caps_it_and_too_few_rows_are_warned(
    tiny_t5_dir: Path, eval_dataset_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    validation = _validation(eval_dataset_dir)
    folder = _save(tmp_path, validation=validation, test=validation.select(range(10, 30)))
    # What the download step said of each evaluation split, carried by preprocess.
    leak = "test: 4 of its 20 rows have the document of a train row: ..."
    notes = {
        "test": {"note": leak, "rows": 20},
        "validation": {"note": "validation: not the scored split", "rows": 100},
    }
    (folder / DATA_NOTES_FILE).write_text(json.dumps(notes))
    config = EvaluateConfig(max_samples=6, bootstrap_samples=0, lead_k=0)
    result = evaluate_model(
        model_dir=tiny_t5_dir, dataset_dir=folder, config=config, output_dir=tmp_path / "out"
    )
    assert result.split == "test"
    rows = [json.loads(line) for line in result.predictions_path.read_text().splitlines()]
    assert [row["document"] for row in rows] == validation["document"][10:16]
    # bootstrap_samples 0 and lead_k 0 skip the intervals and the baseline.
    assert set(result.metrics) == {
        *ROUGE_TYPES,
        *("gen_len", "samples", "seconds", "generation_seconds", "distinct_predictions"),
    }
    # 6 rows are too few for the gate: said in the step's progress and atop its page.
    warning = f"evaluated on 6 test row(s), fewer than the {MIN_EVALUATION_ROWS} a gate can trust"
    assert f"::status:: warning: {warning}" in capsys.readouterr().out
    page = result.report_path.read_text(encoding="utf-8")
    assert f'<p id="evaluation-warning" class="warning"><b>Warning:</b> {warning}' in page
    assert page.index("evaluation-warning") < page.index('<table id="scores">')
    # The scored split's rows that are also train rows: atop the page, not again on the
    # console (the download step's output said it).
    scored = "(counted over the 20 rows the download step saved; evaluate scored 6 of them)"
    assert f'<p id="data-warning" class="warning"><b>Warning:</b> {leak} {scored}</p>' in page
    assert page.index("data-warning") < page.index('<table id="scores">')
    assert "not the scored split" not in page


def _assert_refused(
    match: str, *, model_dir: Path, dataset_dir: Path, output_dir: Path, split: str | None = None
) -> None:
    with pytest.raises(EvaluationError, match=match):
        evaluate_model(
            model_dir=model_dir,
            dataset_dir=dataset_dir,
            config=EvaluateConfig(),
            output_dir=output_dir,
            split=split,
        )
    assert not output_dir.exists(), "a failed evaluation must not leave an output folder"


def test_refuses_an_encoder_only_model(eval_dataset_dir: Path, tmp_path: Path) -> None:
    bert = fixtures.minilm_tokenizer_dir()  # the MiniLM package folder: a BERT encoder
    _assert_refused(
        "BertModel model .*not a seq2seq checkpoint",
        model_dir=bert,
        dataset_dir=eval_dataset_dir,
        output_dir=tmp_path / "out",
    )


def test_refuses_a_folder_without_config(
    tiny_t5_dir: Path, eval_dataset_dir: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "model"
    shutil.copytree(tiny_t5_dir, folder)
    (folder / "config.json").unlink()
    _assert_refused(
        "no config.json", model_dir=folder, dataset_dir=eval_dataset_dir, output_dir=tmp_path / "o"
    )


def test_refuses_zero_shards_and_points_at_the_safe_consolidated_weights(
    tiny_t5_dir: Path, eval_dataset_dir: Path, tmp_path: Path
) -> None:
    """Before: it told users to run DeepSpeed's zero_to_fp32.py, which unpickles the shards."""
    folder = tmp_path / "checkpoint"
    folder.mkdir()
    for name in ("config.json", "generation_config.json"):
        shutil.copy(tiny_t5_dir / name, folder / name)
    (folder / "global_step100").mkdir()
    (folder / "latest").write_text("global_step100")
    _assert_refused(
        "ZeRO shards.*the finetune step writes consolidated model.safetensors.*Do not run "
        "DeepSpeed's zero_to_fp32.py",
        model_dir=folder,
        dataset_dir=eval_dataset_dir,
        output_dir=tmp_path / "out",
    )


@pytest.mark.parametrize("shards", [None, 1], ids=["default-save", "one-empty-shard"])
def test_refuses_an_empty_split(
    tiny_t5_dir: Path, eval_dataset_dir: Path, tmp_path: Path, shards: int | None
) -> None:
    empty = _validation(eval_dataset_dir).select([])
    folder = tmp_path / "dataset"
    num_shards = None if shards is None else {"validation": shards}
    datasets.DatasetDict({"validation": empty}).save_to_disk(str(folder), num_shards=num_shards)
    _assert_refused(
        "split 'validation' .* is empty",
        model_dir=tiny_t5_dir,
        dataset_dir=folder,
        output_dir=tmp_path / "out",
    )


def test_refuses_a_split_without_references(
    tiny_t5_dir: Path, eval_dataset_dir: Path, tmp_path: Path
) -> None:
    validation = _validation(eval_dataset_dir).select(range(4))
    folder = _save(tmp_path, validation=validation.remove_columns("summary"))
    _assert_refused(
        "references missing: .*no 'summary' column",
        model_dir=tiny_t5_dir,
        dataset_dir=folder,
        output_dir=tmp_path / "out",
    )
    blank = validation.map(lambda row: {"summary": "  "})
    folder = _save(tmp_path / "blank", validation=blank)
    _assert_refused(
        "references missing: every 'summary' .* is empty",
        model_dir=tiny_t5_dir,
        dataset_dir=folder,
        output_dir=tmp_path / "out",
    )


def test_refuses_a_missing_split_naming_those_there(
    tiny_t5_dir: Path, eval_dataset_dir: Path, tmp_path: Path
) -> None:
    _assert_refused(
        r"no split 'dev' .*\['train', 'validation'\]",
        model_dir=tiny_t5_dir,
        dataset_dir=eval_dataset_dir,
        output_dir=tmp_path / "out",
        split="dev",
    )


def test_command_line_reports_a_user_error_without_a_traceback(
    eval_dataset_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--model", str(tmp_path / "nowhere"), "--dataset", str(eval_dataset_dir)]
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--output", str(tmp_path / "out")])
    assert exit_info.value.code == 1
    err = capsys.readouterr().err
    assert "ERROR: evaluate failed: model folder" in err and "no such folder" in err
    assert "Traceback" not in err


def test_summaries_written_by_the_engine_score_as_transformers_in_float32(
    evaluated: EvaluationResult, tiny_t5_dir: Path, eval_dataset_dir: Path, tmp_path: Path
) -> None:
    """The gate scores the endpoint's engine: CTranslate2's float32 summaries (greedy, as
    this model's generation config asks) are transformers' own, and the report says so."""
    from llm_pipeline.engines import EngineChoice

    through = evaluate_model(
        model_dir=tiny_t5_dir,
        dataset_dir=eval_dataset_dir,
        config=EvaluateConfig(**FAST, num_beams=1),
        output_dir=tmp_path / "out",
        engine=EngineChoice("ctranslate2", "float32"),
    )
    assert through.predictions_path.read_text() == evaluated.predictions_path.read_text()
    assert through.metrics["rougeLsum"] == evaluated.metrics["rougeLsum"]
    assert "ctranslate2 float32" in through.report_path.read_text()
