"""The fit check counts the serving engine: CTranslate2's int8 weights (1 byte per
parameter) on a CPU endpoint, and its form beside transformers' model in the evaluate step."""

import json
from pathlib import Path

from llm_pipeline.config import PipelineConfig, load_config
from llm_pipeline.fit.check import check_fit

from ..offline_models import MINILM, TINY_LLAMA


def _config(tmp_path: Path, *overrides: str) -> PipelineConfig:
    config = {
        "task": "instruction_tuning",
        "data": {"dataset": "builtin:instructions", "max_length": 128},
        "model": {"architecture": TINY_LLAMA, "tokenizer": MINILM},
        "train": {"per_device_batch_size": 2},
    }
    path = tmp_path / "sft.json"
    path.write_text(json.dumps(config))
    return load_config(path, list(overrides)).config


def _rows(config: PipelineConfig) -> dict:
    return {row.place: row for row in check_fit(config, target="local").rows}


def test_a_cpu_endpoint_holds_the_int8_form_and_evaluate_holds_both(tmp_path: Path) -> None:
    auto = _rows(_config(tmp_path))
    forced = _rows(_config(tmp_path, "deploy.engine=transformers"))
    parameters = auto["serve"].estimate.part("weights")  # 1 byte each in int8
    assert "ctranslate2 int8" in auto["serve"].settings
    assert forced["serve"].estimate.part("weights") == 4 * parameters  # fp32 on a CPU
    assert "generating with ctranslate2 int8" in auto["evaluate"].settings
    assert auto["evaluate"].estimate.part("engine weights") == parameters
    assert forced["evaluate"].estimate.part("engine weights") == 0


def test_a_model_ctranslate2_cannot_take_is_counted_as_transformers(tmp_path: Path) -> None:
    config = _config(tmp_path, "model.architecture=null", f"model.warm_start_decoder={MINILM}")
    serve = _rows(config)["serve"]
    assert "ctranslate2" not in serve.settings
    assert serve.settings.startswith("fp32, ")
