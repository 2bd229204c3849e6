"""Config loading: shipped configs validate; every bad config gets its own clear message."""

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from llm_pipeline.config import ConfigError, PipelineConfig, load_config, parse_override

from ..offline_models import MINILM
from .minimal_config import MINIMAL, REPO, run_cli, with_change

CONFIGS = sorted((REPO / "configs").glob("*.json"))


def problems(raw: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_config(raw=raw)
    return caught.value.problems


def test_every_shipped_config_validates() -> None:
    names = {path.name for path in CONFIGS}
    assert {
        "local.json",
        "small1vm1gpu.json",
        "small2vm16gpu.json",
        "xxl2vm16gpu.json",
        "xxl8vm16gpu.json",
    } <= names
    for path in CONFIGS:
        loaded = load_config(path)
        assert isinstance(loaded.config, PipelineConfig), path


def test_configs_readme_lists_every_config() -> None:
    readme = (REPO / "configs" / "README.md").read_text()
    for path in CONFIGS:
        assert f"`{path.name}`" in readme, f"configs/README.md does not describe {path.name}"


def test_vertex_configs_ask_for_the_cluster_their_names_say() -> None:
    shapes = {
        "small1vm1gpu.json": (1, 1),
        "small2vm16gpu.json": (2, 16),
        "xxl2vm16gpu.json": (2, 16),
        "xxl8vm16gpu.json": (8, 16),
        "llama2-7b-dpo-lora-1vm1gpu.json": (1, 1),
        "opt1b3-dpo-1vm8gpu.json": (1, 8),
    }
    for name, (nodes, gpus) in shapes.items():
        cluster = load_config(REPO / "configs" / name).config.cluster
        assert (cluster.node_count, cluster.accelerator_count) == (nodes, gpus), name
    xxl = load_config(REPO / "configs" / "xxl8vm16gpu.json").config
    assert xxl.model.source == "google/t5-v1_1-xxl"
    assert xxl.train.zero_stage == "auto"
    assert xxl.cluster.machine_type == "a2-megagpu-16g"


@pytest.mark.parametrize(
    ("train", "deepspeed"),
    [
        ({}, True),  # auto: DeepSpeed until the finetune job resolves it (maybe to 0)
        ({"zero_stage": 0}, False),
        ({"use_deepspeed": False}, False),
        ({"use_deepspeed": False, "zero_stage": 0}, False),
        ({"zero_stage": 2}, True),
        ({"zero_stage": "auto", "offload_param": "cpu"}, True),  # auto may choose ZeRO-3
    ],
)
def test_zero_stage_settings_that_agree_are_taken(train: dict[str, Any], deepspeed: bool) -> None:
    config = load_config(raw={**MINIMAL, "train": train}).config
    assert config.train.deepspeed_on is deepspeed


def test_minimal_config_takes_defaults() -> None:
    config = load_config(raw=copy.deepcopy(MINIMAL)).config
    assert config.task == "summarization"
    assert config.train.zero_stage == "auto" and config.train.deepspeed_on
    assert config.train.precision == "auto"
    assert config.cluster.node_count == 1


@pytest.mark.parametrize(
    "model",
    [
        # A hub repository pinned to a commit: the code that runs is the code reviewed.
        {"source": "google-t5/t5-small", "revision": "0" * 39 + "f", "trust_remote_code": True},
        # A folder (made absolute by the loader), a bucket, a package: no hub repository,
        # so nothing a revision could pin; their code is the files the user points at.
        {"source": "./configs", "trust_remote_code": True},
        {"source": "gs://bucket/model", "trust_remote_code": True},
        {
            "encoder_decoder": {"encoder": MINILM, "decoder": MINILM},
            "trust_remote_code": True,
        },
    ],
)
def test_remote_code_is_taken_from_a_pinned_commit_or_a_location_the_user_holds(
    model: dict[str, Any],
) -> None:
    assert load_config(raw={**MINIMAL, "model": model}).config.model.trust_remote_code


BAD_CONFIGS = [
    # (description, raw config, expected message fragment)
    ("unknown top-level key", with_change("taks", "x"), "taks: unknown key; did you mean 'task'?"),
    (
        "unknown nested key",
        with_change("train.learnin_rate", 0.1),
        "train.learnin_rate: unknown key; did you mean 'learning_rate'?",
    ),
    (
        "unknown key with nothing close",
        with_change("train.zzz", 1),
        "train.zzz: unknown key (keys allowed in train: epochs,",
    ),
    ("wrong type", with_change("train.epochs", "3"), "train.epochs: must be a number, got '3'"),
    (
        "out of range",
        with_change("train.learning_rate", -1),
        "train.learning_rate: must be > 0.0, got -1",
    ),
    ("missing section", with_change("data", ...), "data: required, but not given"),
    ("missing nested field", with_change("data.dataset", ...), "data.dataset: required"),
    (
        "two model sources",
        with_change("model.architecture", {"model_type": "t5"}),
        "model: set exactly one of source, architecture, encoder_decoder, warm_start_decoder "
        "(got source, architecture)",
    ),
    ("no model source", with_change("model.source", ...), "(got none)"),
    (
        "architecture without tokenizer",
        {**MINIMAL, "model": {"architecture": {"model_type": "t5"}}},
        "model: architecture initialises random weights and has no tokenizer: set tokenizer",
    ),
    (
        "remote code from a hub repository without a pinned revision",
        with_change("model.trust_remote_code", True),
        "model: trust_remote_code true runs code from the hub repository 'google-t5/t5-small': "
        "set revision to the commit hash you reviewed (40 hex characters, as git prints it), "
        "got None",
    ),
    (
        "remote code pinned to a branch, which its owner can move",
        {**MINIMAL, "model": {**MINIMAL["model"], "trust_remote_code": True, "revision": "main"}},
        "model: trust_remote_code true runs code from the hub repository 'google-t5/t5-small': "
        "set revision to the commit hash you reviewed (40 hex characters, as git prints it), "
        "got 'main'",
    ),
    (
        "remote code from a hub tokenizer the revision does not pin",
        {
            **MINIMAL,
            "model": {"source": "./configs", "tokenizer": "o/t", "trust_remote_code": True},
        },
        "model: trust_remote_code true would run code from the hub repository of tokenizer "
        "'o/t', which revision does not pin (it pins source only): load it from a folder, a "
        "bucket or source itself",
    ),
    (
        "nvme offload without a path",
        with_change("train.offload_optimizer", "nvme"),
        "train: nvme offload needs nvme_path",
    ),
    (
        "parameter offload below ZeRO-3",
        {**MINIMAL, "train": {"offload_param": "cpu", "zero_stage": 2}},
        "train: offload_param needs zero_stage 3 (or auto), got zero_stage 2",
    ),
    (
        "a ZeRO stage beside use_deepspeed false",
        {**MINIMAL, "train": {"use_deepspeed": False, "zero_stage": 3}},
        "train: zero_stage 3 needs DeepSpeed, which use_deepspeed false turns off: drop one "
        "of them (zero_stage 0 is the plain Trainer)",
    ),
    (
        "offload without DeepSpeed",
        {**MINIMAL, "train": {"zero_stage": 0, "offload_optimizer": "cpu"}},
        "train: offload_optimizer needs DeepSpeed, which zero_stage 0 turns off",
    ),
    (
        "offload beside use_deepspeed false",
        {**MINIMAL, "train": {"use_deepspeed": False, "offload_param": "cpu"}},
        "train: offload_param needs DeepSpeed, which use_deepspeed false turns off",
    ),
    (
        "label smoothing with Liger's fused loss",
        {**MINIMAL, "train": {"kernels": "liger", "label_smoothing": 0.1}},
        "train: label_smoothing: Liger's fused loss (kernels: liger) does not smooth labels; "
        "drop one of them",
    ),
    (
        "a ZeRO stage that is not one",
        with_change("train.zero_stage", True),
        'train.zero_stage: must be "auto", 0, 1, 2 or 3, got true',
    ),
    (
        "value not in the allowed set",
        with_change("train.precision", "fp8"),
        "train.precision: must be one of 'auto', 'bf16', 'fp16' or 'fp32', got 'fp8'",
    ),
    (
        "unknown task",
        with_change("task", "summarisation"),
        "task: unknown task 'summarisation' (did you mean 'summarization'?)",
    ),
    (
        "columns that do not match the task",
        with_change("data.columns", {"document": "a", "headline": "h"}),
        "data.columns must map exactly the roles of task 'summarization' "
        "(['document', 'summary']): missing ['summary']; not used by the task ['headline']",
    ),
    (
        "instruction-tuning columns mixing its two role sets",
        {
            **with_change("data.columns", {"prompt": "q", "messages": "m"}),
            "task": "instruction_tuning",
        },
        "data.columns must map exactly the roles of task 'instruction_tuning' "
        "(['prompt', 'response'] or ['messages']): got ['messages', 'prompt']",
    ),
    (
        "a data setting another task reads",
        with_change("data.packing", True),
        "data.packing: not read by task 'summarization' (its own settings: "
        "data.max_source_length, data.max_target_length, data.max_target_length_cap, "
        "data.prefix, data.target_length_percentile)",
    ),
    (
        "DPO settings for a task that does not train with DPO",
        with_change("train.dpo", {"beta": 0.5}),
        "train.dpo: read by task 'preference_tuning', not by 'summarization': drop it from "
        "the config",
    ),
    (
        "label smoothing, which DPO's loss has no labels for",
        {
            "task": "preference_tuning",
            "data": {"dataset": "pairs.jsonl"},
            "model": MINIMAL["model"],
            "train": {"label_smoothing": 0.1},
        },
        "train.label_smoothing: not read by task 'preference_tuning' (DPO's loss compares two "
        "answers' log-probabilities and has no token labels to smooth): drop it from the config",
    ),
    (
        "a DPO beta that is not positive",
        {**with_change("train.dpo", {"beta": 0}), "task": "preference_tuning"},
        "train.dpo.beta: must be > 0.0, got 0",
    ),
    (
        "a DPO loss TRL's trainer has but this one does not",
        {**with_change("train.dpo", {"loss_type": "hinge"}), "task": "preference_tuning"},
        "train.dpo.loss_type: must be one of 'sigmoid' or 'ipo', got 'hinge'",
    ),
    (
        "a chat template that is not Jinja",
        {**with_change("data.chat_template", "{% if %}"), "task": "instruction_tuning"},
        "data.chat_template: not a Jinja template: Expected an expression, got 'end of "
        "statement block' (line 1)",
    ),
    (
        "flat key clashing with its section",
        {**with_change("train.epochs", 2), "epochs": 3},
        "epochs: flat key maps to train.epochs, which is also set (3 vs 2); keep one",
    ),
    (
        "same split for train and validation",
        with_change("data.validation_split", "train"),
        "data: train_split and validation_split are both 'train'",
    ),
    (
        "pipeline name Vertex refuses",
        with_change("name", "My Pipeline"),
        "name: must match ^[a-z][a-z0-9-]{0,127}$, got 'My Pipeline'",
    ),
    (
        "non-positive sample cap",
        with_change("data.max_samples", {"train": 0}),
        "data.max_samples: every cap must be > 0, got {'train': 0}",
    ),
    (
        "section of the wrong type",
        with_change("cluster", "a2-highgpu-1g"),
        "cluster: must be an object, got 'a2-highgpu-1g'",
    ),
    (
        "job timeout without unit",
        with_change("cluster.timeout", "3600"),
        "cluster.timeout: must match",
    ),
    (
        "LoRA rank below 1",
        with_change("train.lora", {"r": 0}),
        "train.lora.r: must be >= 1, got 0",
    ),
    (
        "LoRA target modules neither all-linear nor a list",
        with_change("train.lora", {"target_modules": "q_proj"}),
        'train.lora.target_modules: must be "all-linear" or a non-empty list of module names',
    ),
    (
        "local dataset that does not exist",
        with_change("data.dataset", "./no/such/folder"),
        "data.dataset: '/",
    ),
    (
        "local model name that climbs out of the registry",
        with_change("deploy", {"model_display_name": "../../x"}),
        "deploy.model_display_name: '../../x' is not a local registry name: use letters, "
        "digits, '-', '_' and '.', at most 128 characters, not starting with '.'",
    ),
    (
        "local endpoint name with a separator",
        with_change("deploy", {"endpoint_display_name": "a/b"}),
        "deploy.endpoint_display_name: 'a/b' is not a local registry name",
    ),
    (
        "hidden local model name",
        with_change("deploy", {"model_display_name": ".summarizer"}),
        "deploy.model_display_name: '.summarizer' is not a local registry name",
    ),
    (
        "model name whose default endpoint name is too long",
        with_change("deploy", {"model_display_name": "m" * 125}),
        "the endpoint named after model_display_name, '" + "m" * 125 + "-endpoint' is not a "
        "local registry name",
    ),
    (
        "Vertex display name over 128 characters",
        with_change("deploy", {"target": "vertex", "model_display_name": "m" * 129}),
        "deploy.model_display_name: '" + "m" * 129 + "' is 129 characters; Vertex AI display "
        "names are at most 128",
    ),
    (
        "Vertex endpoint name with a newline",
        with_change("deploy", {"target": "vertex", "endpoint_display_name": "a\nb"}),
        "deploy.endpoint_display_name: 'a\\nb' holds a control character",
    ),
    (
        "empty Vertex model name",
        with_change("deploy", {"target": "vertex", "model_display_name": " "}),
        "deploy.model_display_name: is empty; Vertex AI needs a display name",
    ),
]


@pytest.mark.parametrize(
    ("raw", "expected"), [case[1:] for case in BAD_CONFIGS], ids=[c[0] for c in BAD_CONFIGS]
)
def test_bad_config_gets_its_own_message(raw: dict[str, Any], expected: str) -> None:
    found = problems(raw)
    assert any(expected in problem for problem in found), found


@pytest.mark.parametrize(
    "columns", [{"prompt": "instruction", "response": "output"}, {"messages": "conversation"}]
)
def test_instruction_tuning_takes_either_role_set(columns: dict[str, str]) -> None:
    raw = {**with_change("data.columns", columns), "task": "instruction_tuning"}
    assert load_config(raw=raw).config.data.columns == columns


def test_instruction_tuning_columns_default_to_prompt_and_response() -> None:
    raw = {**copy.deepcopy(MINIMAL), "task": "instruction_tuning"}
    raw["data"].pop("columns", None)
    config = load_config(raw=raw).config
    assert config.data.columns == {"prompt": "prompt", "response": "response"}


def test_every_problem_is_reported_at_once() -> None:
    raw = with_change("train.learning_rate", -1)
    raw["train"]["epochs"] = "3"
    raw["taks"] = "x"
    raw["cluster"] = {"node_count": 0}
    found = problems(raw)
    assert len(found) == 4, found
    assert {problem.split(":")[0] for problem in found} == {
        "train.learning_rate",
        "train.epochs",
        "taks",
        "cluster.node_count",
    }


def test_missing_deepspeed_json_names_the_path_rule(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps(with_change("train.deepspeed_config", "ds/zero3.json")))
    found = problems_from_file(path)
    assert found == [
        f"train.deepspeed_config: '{tmp_path / 'ds/zero3.json'}' not found (relative paths "
        "are taken from the config file's folder, or the working directory for --set)"
    ]


def problems_from_file(path: Path, overrides: tuple[str, ...] = ()) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_config(path, overrides)
    return caught.value.problems


def test_relative_paths_are_taken_from_the_config_folder(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "ds.json").write_text("{}")
    raw = with_change("data.dataset", "data")
    raw["train"] = {"deepspeed_config": "ds.json"}
    path = tmp_path / "configs" / "c.json"
    path.parent.mkdir()
    raw["data"]["dataset"] = "../data"
    raw["train"]["deepspeed_config"] = "../ds.json"
    path.write_text(json.dumps(raw))
    config = load_config(path).config
    assert config.data.dataset == str(tmp_path / "data")
    assert config.train.deepspeed_config == str(tmp_path / "ds.json")
    # Hub ids and URLs are left alone.
    assert config.model.source == "google-t5/t5-small"


@pytest.mark.parametrize(
    ("text", "said"),
    [
        # Python's words alone ("Expecting property name enclosed in double quotes") hide
        # the two mistakes a hand-written config makes most.
        (
            '{\n  "data": {"dataset": "x",}\n}',
            "line 2, column 27: Expecting property name enclosed in double quotes "
            "(JSON allows no comma after the last item)",
        ),
        (
            '{\n  "stop": ["a", "b",]\n}',
            "line 2, column 21: Expecting value (JSON allows no comma after the last item)",
        ),
        (
            '{\n  // the demo\n  "task": "summarization"\n}',
            "line 2, column 3: Expecting property name enclosed in double quotes "
            "(JSON has no comments: say what a config is for in its description)",
        ),
        ('{\n  "task": "summarization"\n  "data": {}\n}', "line 3, column 3: Expecting ','"),
    ],
)
def test_invalid_json_names_line_and_column_and_the_likely_mistake(
    tmp_path: Path, text: str, said: str
) -> None:
    path = tmp_path / "c.json"
    path.write_text(text)
    (found,) = problems_from_file(path)
    assert found.startswith(f"not valid JSON at {said}"), found
    assert found.endswith(")") == said.endswith(")"), "a hint only where it is one"


def test_top_level_must_be_an_object(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text("[1, 2]")
    assert problems_from_file(path) == ["the top level must be a JSON object, got list"]


def test_missing_config_file(tmp_path: Path) -> None:
    found = problems_from_file(tmp_path / "nope.json")
    assert found == [f"config file '{tmp_path / 'nope.json'}' not found"]


def test_overrides_parse_json_where_they_parse() -> None:
    assert parse_override("train.epochs=3") == ("train.epochs", 3)
    assert parse_override("train.learning_rate=1e-4") == ("train.learning_rate", 1e-4)
    assert parse_override("data.prefix=summarize: ") == ("data.prefix", "summarize: ")
    assert parse_override('data.max_samples={"train": 10}') == (
        "data.max_samples",
        {"train": 10},
    )
    assert parse_override("data.test_split=null") == ("data.test_split", None)


def test_overrides_apply_and_are_validated(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps(MINIMAL))
    config = load_config(
        path, ["train.epochs=2", "cluster.processes=2", "vertex.project=acme"]
    ).config
    assert (config.train.epochs, config.cluster.processes) == (2, 2)
    assert config.vertex.project == "acme"  # not a path: only path keys are resolved
    assert problems_from_file(path, ("train.epochs=-1",)) == [
        "train.epochs: must be > 0.0, got -1 (from --set train.epochs=-1)"
    ]
    assert "expected KEY=VALUE" in problems_from_file(path, ("train.epochs",))[0]


def test_a_mistake_in_set_is_said_to_come_from_set(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps(MINIMAL))
    with pytest.raises(ConfigError) as caught:
        load_config(path, ["train.epochs=-1", "train.epoch=2"])
    assert str(caught.value).splitlines() == [
        "2 problems in --set:",
        "  - train.epochs: must be > 0.0, got -1 (from --set train.epochs=-1)",
        "  - train.epoch: unknown key; did you mean 'epochs'? (from --set train.epoch=2)",
    ]
    # One from the file, one from --set: both places are named, each problem with its own.
    path.write_text(json.dumps(with_change("train.learning_rate", -1)))
    with pytest.raises(ConfigError) as caught:
        load_config(path, ["cluster.processes=0"])
    assert caught.value.source == f"{path} with --set"
    assert caught.value.problems == [
        "train.learning_rate: must be > 0.0, got -1",
        "cluster.processes: must be >= 1, got 0 (from --set cluster.processes=0)",
    ]
    # A section's rule broken by a --set in it: the file and the --set both had a hand.
    with pytest.raises(ConfigError) as caught:
        load_config(path, ["model.architecture={}"])
    assert any(p.endswith("(after --set model.architecture={})") for p in caught.value.problems)


def test_a_set_that_names_a_list_element_says_to_set_the_list_whole(tmp_path: Path) -> None:
    """`evaluate.stop[0]=x` was `unknown key; did you mean 'stop'?`, and
    `train.lora.target_modules.0=x` named `target_modules:` alone, not where it is."""
    path = tmp_path / "c.json"
    path.write_text(json.dumps(with_change("train.lora", {"target_modules": ["q", "v"]})))
    assert problems_from_file(path, ("train.lora.target_modules[0]=x",)) == [
        "--set 'train.lora.target_modules[0]=x': --set replaces a list whole, not one element; "
        "give all of it, e.g. train.lora.target_modules='[...]'"
    ]
    assert problems_from_file(path, ("train.lora.target_modules.0=x",)) == [
        "train.lora.target_modules: is ['q', 'v'], not an object, so "
        "train.lora.target_modules.0 cannot be set; set the list whole, e.g. "
        "train.lora.target_modules='[...]' (from --set train.lora.target_modules.0=x)"
    ]
    assert problems_from_file(path, ("evaluate.stop[0]=x",)) == [
        "--set 'evaluate.stop[0]=x': --set replaces a list whole, not one element; give all "
        "of it, e.g. evaluate.stop='[...]'"
    ]
    assert problems_from_file(path, ("train.epochs=2", "train.epochs.x=1")) == [
        "train.epochs: is 2, not an object, so train.epochs.x cannot be set "
        "(from --set train.epochs.x=1)"
    ]


def test_a_wrong_element_of_a_list_from_set_is_said_to_come_from_set() -> None:
    """It was blamed on the file: `1 problem in sft_local.json: evaluate.stop[1]: ...`."""
    with pytest.raises(ConfigError) as caught:
        load_config(REPO / "configs" / "sft_local.json", ['evaluate.stop=["a", 1]'])
    assert str(caught.value).splitlines() == [
        "1 problem in --set:",
        '  - evaluate.stop[1]: must be a string, got 1 (from --set evaluate.stop=["a", 1])',
    ]


def test_a_set_value_meant_as_json_that_does_not_parse_says_why(tmp_path: Path) -> None:
    """Taken as a string, it was only `must be an object, got '{"train": 200'`."""
    path = tmp_path / "c.json"
    path.write_text(json.dumps(MINIMAL))
    assert problems_from_file(path, ('data.max_samples={"train": 200',)) == [
        "data.max_samples: must be an object, got '{\"train\": 200' (not valid JSON at column "
        "14: Expecting ',' delimiter) (from --set data.max_samples={\"train\": 200)"
    ]
    assert problems_from_file(path, ("data.max_samples={'train': 200}",)) == [
        "data.max_samples: must be an object, got \"{'train': 200}\" (not valid JSON at column "
        "2: Expecting property name enclosed in double quotes) "
        "(from --set data.max_samples={'train': 200})"
    ]
    # A string that opens with a bracket is still a string where one is meant.
    prefix = load_config(path, ["data.prefix=[summarize] "]).config.data.prefix
    assert prefix == "[summarize] "


@pytest.mark.parametrize("in_file", [..., None, {"alpha": 64}], ids=["absent", "null", "set"])
def test_a_lora_rank_takes_one_override(tmp_path: Path, in_file: Any) -> None:
    """`--set train.lora.r=8` turns LoRA on with its other defaults where the config has no
    `train.lora` (or null), and changes only the rank where it has one."""
    path = tmp_path / "c.json"
    path.write_text(json.dumps(MINIMAL if in_file is ... else with_change("train.lora", in_file)))
    lora = load_config(path, ["train.lora.r=8"]).config.train.lora
    assert lora is not None
    assert (lora.r, lora.alpha, lora.dropout, lora.target_modules) == (
        8,
        64 if isinstance(in_file, dict) else 32,
        0.05,
        "all-linear",
    )
    assert load_config(path, ["train.lora=null"]).config.train.lora is None
    assert problems_from_file(path, ("train.lora.r=eight",)) == [
        "train.lora.r: must be an integer, got 'eight' (from --set train.lora.r=eight)"
    ]


def test_flat_keys_are_mapped_with_one_notice() -> None:
    raw = {
        "dataset": "abisee/cnn_dailymail",
        "dataset_subset": "3.0.0",
        "document_column": "article",
        "summary_column": "highlights",
        "model_checkpoint": "google-t5/t5-small",
        "node_count": 2,
        "machine_type": "a2-megagpu-16g",
        "gpu_type": "NVIDIA_TESLA_A100",
        "gpu_count": 16,
        "batch_size": 8,
        "epochs": 2,
        "model_display_name": "t5",
        "deploy_machine_type": "n1-standard-4",
        "deploy_gpu_type": "NVIDIA_TESLA_T4",
        "deploy_gpu_count": 1,
        "cluster_prefix": "t5-run",
        "zone": "us-central1-a",
    }
    loaded = load_config(raw=raw)
    config = loaded.config
    assert config.data.subset == "3.0.0"
    assert config.data.columns == {"document": "article", "summary": "highlights"}
    assert config.model.source == "google-t5/t5-small"
    assert (config.cluster.node_count, config.cluster.accelerator_count) == (2, 16)
    assert config.cluster.name_prefix == "t5-run"
    assert config.train.per_device_batch_size == 8
    assert config.deploy.accelerator_type == "NVIDIA_TESLA_T4"
    assert config.vertex.region == "us-central1"
    assert len(loaded.notices) == 1
    assert "zone → vertex.region" in loaded.notices[0]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (with_change("train.learning_rate", -1), "train.learning_rate: must be > 0.0, got -1"),
        (with_change("taks", 1), "taks: unknown key; did you mean 'task'?"),
        (with_change("model.source", ...), "model: set exactly one of"),
        (
            with_change("deploy", {"model_display_name": "../../x"}),
            "deploy.model_display_name: '../../x' is not a local registry name",
        ),
    ],
)
def test_cli_exits_2_with_the_message_and_no_traceback(
    tmp_path: Path, raw: dict[str, Any], expected: str
) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(raw))
    result = run_cli("--config", str(path), "--dry-run")
    assert result.returncode == 2, result.stderr
    assert expected in result.stderr
    assert "Traceback" not in result.stderr


def test_cli_bad_override_exits_2() -> None:
    result = run_cli("--config", "configs/local.json", "--set", "train.zero_stage=4", "--dry-run")
    assert result.returncode == 2
    assert "train.zero_stage: must be one of 'auto', 0, 1, 2 or 3, got 4" in result.stderr
    assert "Traceback" not in result.stderr


def test_cli_dry_run_prints_resolved_config_and_steps() -> None:
    result = run_cli("--config", "configs/local.json", "--dry-run")
    assert result.returncode == 0, result.stderr
    resolved = json.loads(result.stdout.split("\nWould run")[0])
    assert resolved["cluster"]["processes"] == 1
    assert "download → preprocess" in result.stdout


def test_a_dataset_that_can_only_be_a_path_is_taken_from_the_config_folder(
    tmp_path: Path,
) -> None:
    """`data/sub/train.jsonl` cannot be a hub id (`owner/name`), so a missing one is a path
    that is not there, named as such, not something to look up on the hub later."""
    path = tmp_path / "c.json"
    path.write_text(json.dumps(with_change("data.dataset", "data/sub/train.jsonl")))
    found = problems_from_file(path)
    assert found == [
        f"data.dataset: '{tmp_path / 'data/sub/train.jsonl'}' not found (relative paths "
        "are taken from the config file's folder, or the working directory for --set)"
    ]


def test_an_owner_slash_name_dataset_stays_a_hub_id(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps(with_change("data.dataset", "abisee/cnn_dailymail")))
    assert load_config(path).config.data.dataset == "abisee/cnn_dailymail"


def test_names_a_vertex_registry_takes_are_accepted() -> None:
    """Vertex display names may hold any text a local folder name may not."""
    raw = with_change("deploy", {"target": "vertex", "model_display_name": "T5 small / CNN-DM"})
    assert load_config(raw=raw).config.deploy.endpoint_name() == "T5 small / CNN-DM-endpoint"


def test_packing_false_is_accepted_by_a_task_that_never_packs() -> None:
    """`data.packing: false` was the default before `auto`: a summarization config that
    says so explicitly keeps loading (it says what the task does anyway)."""
    config = PipelineConfig.model_validate(with_change("data.packing", False))
    assert config.task == "summarization" and config.data.packing is False
