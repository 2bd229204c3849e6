"""The fit check never runs a model repository's own code, even with trust_remote_code.

It runs where a user compiles and submits, before anything is reviewed: a checkpoint whose
config.json or tokenizer_config.json names Python code (`auto_map`) gets no shape, or the
shape of transformers' own class for its model_type, and the code never runs.
"""

import json
import shutil
from pathlib import Path

import pytest

from llm_pipeline.config import ModelConfig, load_config
from llm_pipeline.fit.check import check_fit
from llm_pipeline.fit.shapes import ShapeUnavailable, model_shape
from llm_pipeline.models.sources import resolve_model_path

from ..offline_models import MINILM, TINY_T5

REPO = Path(__file__).resolve().parents[2]

#: A repository's code that leaves a mark when Python imports it.
CODE = """
from pathlib import Path

Path({marker!r}).write_text("ran")

from transformers import BertTokenizerFast, T5Config, T5ForConditionalGeneration


class CustomConfig(T5Config):
    model_type = "custom"


class CustomModel(T5ForConditionalGeneration):
    config_class = CustomConfig


class CustomTokenizer(BertTokenizerFast):
    pass
"""


def repository(folder: Path, marker: Path, config: dict[str, object]) -> Path:
    """A checkpoint folder whose config.json points at `custom.py`, which marks `marker`."""
    folder.mkdir()
    (folder / "custom.py").write_text(CODE.format(marker=str(marker)))
    auto_map = {"AutoConfig": "custom.CustomConfig", "AutoModelForSeq2SeqLM": "custom.CustomModel"}
    (folder / "config.json").write_text(json.dumps({**config, "auto_map": auto_map}))
    return folder


def trusting(**fields: object) -> ModelConfig:
    return ModelConfig.model_validate({**fields, "trust_remote_code": True})


def test_a_model_that_needs_its_own_code_has_no_shape_and_its_code_does_not_run(tmp_path):
    marker = tmp_path / "ran"
    folder = repository(tmp_path / "model", marker, {**TINY_T5, "model_type": "custom"})
    with pytest.raises(ShapeUnavailable) as caught:
        model_shape(trusting(source=str(folder)))
    assert not marker.exists()
    assert "contains custom code" in str(caught.value)
    assert str(caught.value).endswith(
        "the fit check never runs a repository's code (model.trust_remote_code)"
    )


def test_a_known_model_type_is_estimated_with_transformers_own_class_without_its_code(
    tmp_path,
):
    marker = tmp_path / "ran"
    folder = repository(tmp_path / "model", marker, TINY_T5)
    shape = model_shape(trusting(source=str(folder)))
    assert not marker.exists()
    assert shape.encoder.hidden == 32 and shape.decoder.layers == 2
    assert shape.source_note == (
        "estimated with transformers' own 't5' classes: the fit check never runs a "
        "repository's code (model.trust_remote_code)"
    )


def test_a_tokenizer_that_names_its_own_code_is_read_without_it(tmp_path):
    """An architecture without vocab_size takes it from the tokenizer, read without code."""
    marker = tmp_path / "ran"
    tokenizer = tmp_path / "tokenizer"
    weights = shutil.ignore_patterns("*.safetensors")  # the tokenizer's files are enough
    shutil.copytree(resolve_model_path(MINILM), tokenizer, ignore=weights)
    (tokenizer / "custom.py").write_text(CODE.format(marker=str(marker)))
    settings = json.loads((tokenizer / "tokenizer_config.json").read_text())
    settings["auto_map"] = {"AutoTokenizer": [None, "custom.CustomTokenizer"]}
    (tokenizer / "tokenizer_config.json").write_text(json.dumps(settings))
    shape = model_shape(trusting(architecture=TINY_T5, tokenizer=str(tokenizer)))
    assert not marker.exists()
    assert shape.vocab == 30522


def test_check_fit_on_a_whole_config_runs_no_code(tmp_path):
    marker = tmp_path / "ran"
    folder = repository(tmp_path / "model", marker, {**TINY_T5, "model_type": "custom"})
    config = load_config(
        REPO / "configs" / "small1vm1gpu.json",
        [f"model.source={folder}", "model.trust_remote_code=true"],
    ).config
    report = check_fit(config, target="vertex")
    assert not marker.exists()
    assert report.rows == [] and len(report.skipped) == 1
    assert "never runs a repository's code" in report.skipped[0]
