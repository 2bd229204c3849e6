"""The pipeline under KFP's local runner, on real DialogSum text, checked on disk."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from datasets import load_from_disk

from llm_pipeline.config import load_config
from llm_pipeline.pipelines import build_pipeline
from llm_pipeline.runner import run_local

REPO = Path(__file__).resolve().parents[2]
DIALOGSUM = REPO.parent / "shared" / "data" / "dialogsum"

pytestmark = pytest.mark.skipif(
    not DIALOGSUM.exists(), reason=f"DialogSum not found at {DIALOGSUM} (../shared/data)"
)

SMALL = [
    'data.max_samples={"train": 64, "validation": 16}',
    "data.max_source_length=128",
    "data.max_target_length=32",
]


@pytest.mark.slow
def test_download_then_preprocess_writes_artifacts(tmp_path: Path) -> None:
    config = load_config(REPO / "configs" / "local.json", SMALL).config
    run = run_local(build_pipeline(config), pipeline_root=tmp_path, quiet=True)

    assert run.succeeded, run.steps
    steps = {step.name: step for step in run.steps}
    assert [step.name for step in run.steps][:2] == ["download", "preprocess"]

    raw = load_from_disk(steps["download"].outputs["dataset"])
    assert {split: raw[split].num_rows for split in raw} == {"train": 64, "validation": 16}
    assert raw["train"].column_names == ["document", "summary"]
    assert steps["download"].metrics == {"rows_train": 64.0, "rows_validation": 16.0}

    tokenized_dir = Path(steps["preprocess"].outputs["tokenized"])
    tokenized = load_from_disk(str(tokenized_dir))
    row = tokenized["train"][0]
    assert {"input_ids", "attention_mask", "labels"} <= set(tokenized["train"].column_names)
    assert 0 < len(row["input_ids"]) <= 128 and 0 < len(row["labels"]) <= 32
    resolved = json.loads((tokenized_dir / "llm_pipeline_config.json").read_text())
    assert resolved["data"]["max_source_length"] == 128
    assert any(name.startswith("train_") for name in steps["preprocess"].metrics)


@pytest.mark.slow
def test_cli_names_the_failing_step_and_its_reason(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            str(REPO / "pipeline.py"),
            "--config",
            str(REPO / "configs" / "local.json"),
            "--set",
            "data.columns.document=no_such_column",
            "--pipeline-root",
            str(tmp_path),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    summary = result.stdout
    assert "[FAIL] download" in summary
    assert "no_such_column" in summary and "dialogue" in summary  # names what exists
    assert "[skip] preprocess" in summary
    assert "Pipeline failed." in summary
