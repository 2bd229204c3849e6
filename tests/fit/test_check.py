"""The fit check on whole configs: the shipped ones fit, misfits and unknowns are named."""

import json
from pathlib import Path

import fsspec
import pytest
from transformers import AutoConfig, T5Config

from llm_pipeline import cli
from llm_pipeline.config import PipelineConfig, load_config
from llm_pipeline.fit.check import check_fit
from llm_pipeline.fit.known_models import KNOWN_MODELS
from llm_pipeline.fit.shapes import model_shape, shape_of
from llm_pipeline.tasks.kinds import CAUSAL_LM, CLASSIFIER
from llm_pipeline.tasks.text_classification import fit_terms
from llm_pipeline.train.zero_stage import configured_stage

from ..offline_models import MINILM, TINY_T5
from .fake_gpus import H100, use_gpus

REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted((REPO / "configs").glob("*.json"))


def config_of(path: Path, *overrides: str) -> PipelineConfig:
    return load_config(path, list(overrides)).config


def with_its_start_registered(path: Path, folder: Path) -> PipelineConfig:
    """A config that starts from a registry version (`registry:<model>@serving`, the DPO
    demo's), its local registry made in `folder` with that model as the SFT demo saves it: a
    MiniLM decoder (the fit check reads its config.json alone)."""
    from llm_pipeline.models.sources import resolve_model_path
    from llm_pipeline.registry.local import LocalRegistry

    source = config_of(path).model.source or ""
    model = source.removeprefix("registry:").rsplit("@", 1)[0]
    saved = AutoConfig.from_pretrained(resolve_model_path(MINILM))
    saved.is_decoder, saved.architectures = True, ["BertLMHeadModel"]
    saved.save_pretrained(folder / "sft-model")
    registry = LocalRegistry(folder / "registry")
    version = registry.register(model=model, model_dir=str(folder / "sft-model"), metrics={})
    registry.deploy(version, f"{model}-endpoint")
    return config_of(path, f"deploy.registry_dir={folder / 'registry'}")


@pytest.mark.parametrize("path", SHIPPED, ids=lambda path: path.name)
def test_the_shipped_configs_fit_their_machines(path: Path, monkeypatch, tmp_path: Path):
    config = config_of(path)
    if (config.model.source or "").startswith("registry:"):
        config = with_its_start_registered(path, tmp_path)
    target = "vertex" if config.deploy.target == "vertex" else "local"
    # A local config runs on a laptop's CPU, or on the GPUs it asks for (an H100 each).
    use_gpus(monkeypatch, *[H100] * config.cluster.local_gpus)
    report = check_fit(config, target=target)
    assert report.problems == [] and report.skipped == []
    places = [(row.place, row.memory) for row in report.rows]
    if target == "vertex" or config.cluster.local_gpus:
        kinds = ("GPU", "host")
        # An endpoint without a GPU (a classifier's, on a CPU machine) has host memory alone.
        serve = (
            [("serve", m) for m in kinds]
            if config.deploy.accelerator_type or target == "local"
            else [("serve", "host")]
        )
        assert places == [(p, m) for p in ("finetune", "evaluate") for m in kinds] + serve
    else:
        assert places == [("finetune", "host"), ("evaluate", "host"), ("serve", "host")]


def test_every_hub_model_of_the_shipped_configs_is_known_offline():
    sources = {config_of(path).model.source for path in SHIPPED} - {None}
    hub_ids = {source for source in sources if "/" in source and ":" not in source}
    assert hub_ids and hub_ids <= set(KNOWN_MODELS)


@pytest.mark.parametrize(
    ("name", "published"),
    # Their parameter counts as the checkpoints hold them: v1.1's LM head is its own.
    [("google-t5/t5-small", 60_506_624), ("google/t5-v1_1-xxl", 11_135_332_352)],
)
def test_the_shipped_models_have_their_published_sizes(name, published):
    config = T5Config(**{k: v for k, v in KNOWN_MODELS[name].items() if k != "model_type"})
    assert shape_of(config, name=name).parameters == published


def test_an_unknown_hub_model_offline_is_a_note_not_a_failure():
    config = config_of(REPO / "configs" / "small1vm1gpu.json", "model.source=someone/not-cached")
    report = check_fit(config, target="vertex")
    assert report.rows == [] and report.problems == []
    assert report.skipped == [
        "fit check skipped (the model's shape is unknown): model.source 'someone/not-cached': "
        "the hub cannot be reached and it is not cached"
    ]


def test_a_model_folder_and_a_gcs_folder_are_read_from_config_json_alone(tmp_path, gcs_bucket):
    config = T5Config(**{k: v for k, v in TINY_T5.items() if k != "model_type"})
    config.save_pretrained(tmp_path / "model")  # config.json only: no weights anywhere
    uri = f"gs://{gcs_bucket}/model"
    fsspec.filesystem("gs").put(str(tmp_path / "model" / "config.json"), f"{uri}/config.json")
    expected = shape_of(config, name="tiny").parameters
    base = config_of(REPO / "configs" / "small1vm1gpu.json")
    for source in (str(tmp_path / "model"), uri):
        model = base.model.model_copy(update={"source": source})
        assert model_shape(model).parameters == expected


def test_an_architecture_and_an_encoder_decoder_warm_start_have_shapes():
    base = config_of(REPO / "configs" / "local.json").model
    warm = model_shape(base)
    assert warm.encoder.hidden == 384 and warm.decoder.layers == 6 and warm.vocab == 30522
    architecture = base.model_copy(
        update={"encoder_decoder": None, "architecture": TINY_T5, "tokenizer": MINILM}
    )
    shape = model_shape(architecture)
    assert shape.encoder.hidden == 32 and shape.vocab == 30522  # vocab from the tokenizer


def test_a_machine_type_missing_from_the_table_is_a_problem():
    config = config_of(REPO / "configs" / "small1vm1gpu.json", "deploy.machine_type=n9-huge-8")
    report = check_fit(config, target="vertex")
    (problem,) = report.problems
    assert problem.startswith("deploy.machine_type 'n9-huge-8' is not in the fit check's table")
    assert "cannot estimate serve" in problem
    assert [row.place for row in report.rows] == ["finetune"] * 2 + ["evaluate"] * 2


def test_a_training_misfit_names_the_largest_micro_batch_and_what_else_fits():
    config = config_of(REPO / "configs" / "small1vm1gpu.json", "train.per_device_batch_size=512")
    (problem,) = check_fit(config, target="vertex").problems
    assert problem.startswith("train.per_device_batch_size 512 needs ~")
    assert " per A100 40GB (states " in problem
    assert "; at most " in problem and " fits; or at this micro-batch: " in problem
    assert "train.gradient_checkpointing true (~" in problem


def test_training_bf16_on_a_gpu_without_it_is_a_problem():
    config = config_of(
        REPO / "configs" / "small1vm1gpu.json",
        "cluster.machine_type=n1-standard-8",
        "cluster.accelerator_type=NVIDIA_TESLA_T4",
    )
    assert config.train.precision == "bf16"
    assert check_fit(config, target="vertex").problems == [
        "train.precision bf16: T4 16GB has no bf16 (compute capability 7.5; bf16 needs 8.0, "
        "e.g. A100, L4, H100): use auto (fp32 there) or fp32"
    ]


def test_a_users_deepspeed_config_decides_the_zero_plan(tmp_path):
    path = tmp_path / "ds.json"
    zero = {"stage": 3, "offload_optimizer": {"device": "cpu"}, "stage3_max_live_parameters": 5}
    path.write_text(json.dumps({"zero_optimization": zero}))
    config = config_of(REPO / "configs" / "small1vm1gpu.json", f"train.deepspeed_config={path}")
    choice, note = configured_stage(config.train)
    assert choice is not None and choice.source == "train.deepspeed_config" and note is None
    plan = choice.plan
    assert plan is not None
    assert (plan.stage, plan.offload_optimizer, plan.offload_param, plan.max_live_parameters) == (
        3,
        "cpu",
        "none",
        5,
    )


def test_check_fit_prints_the_table(capsys):
    assert cli.main(["--config", str(REPO / "configs" / "small2vm16gpu.json"), "--check-fit"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["place", "machine", "memory", "estimate", "headroom"]
    assert out[2].startswith("finetune  a2-megagpu-16g (16 × A100 40GB) × 2 nodes  GPU 40 GiB  ")
    places = [line.split()[0] for line in out[2:8]]
    assert places == ["finetune", "finetune", "evaluate", "evaluate", "serve", "serve"]
    assert "estimates (GiB):" in out


def test_a_refused_config_compiles_nothing_unless_told_to(tmp_path, capsys):
    spec = tmp_path / "xxl.yaml"
    config = str(REPO / "configs" / "xxl2vm16gpu.json")
    args = ["--config", config, "--set", "vertex.project=p", "--compile", str(spec)]
    old = ["--set", "evaluate.batch_size=64"]
    assert cli.main([*args, *old]) == 2
    assert not spec.exists()
    assert "evaluate.batch_size 64 × num_beams 4 needs" in capsys.readouterr().err
    assert cli.main([*args, *old, "--skip-fit-check"]) == 0
    assert spec.is_file()


def test_a_local_dry_run_reports_a_misfit_and_a_local_run_is_refused(tmp_path, capsys):
    args = ["--config", str(REPO / "configs" / "local.json"), "--pipeline-root", str(tmp_path)]
    huge = ["--set", "train.per_device_batch_size=1000000"]
    assert cli.main([*args, *huge, "--dry-run"]) == 0
    note = "note: fit check: does not fit: train.per_device_batch_size 1000000 with 1 process"
    assert note in capsys.readouterr().err
    assert cli.main([*args, *huge]) == 2
    assert "of host RAM on this machine" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # nothing ran


def test_lora_on_a_summarization_model_trains_only_its_adapters():
    path = REPO / "configs" / "xxl2vm16gpu.json"
    full, lora = (
        check_fit(config_of(path, "train.zero_stage=3", *change), target="vertex").rows[0]
        for change in ((), ("train.lora.r=16",))
    )
    assert full.place == lora.place == "finetune" and full.memory == lora.memory == "GPU"
    assert "LoRA r 16 (" in lora.settings and "LoRA" not in full.settings
    # The frozen 11B base in bf16 over 32 GPUs replaces its optimizer states.
    assert lora.estimate.part("frozen weights") == pytest.approx(2 * 11_135_332_352 / 32)
    assert lora.estimate.part("states") < full.estimate.part("states") / 50


@pytest.mark.parametrize(
    ("name", "published"),
    [
        ("facebook/opt-125m", 125_239_296),
        ("facebook/opt-1.3b", 1_315_758_080),
        ("meta-llama/Llama-2-7b-hf", 6_738_415_616),
    ],
)
def test_the_causal_lms_have_their_published_sizes(name, published):
    settings = dict(KNOWN_MODELS[name])
    config = AutoConfig.for_model(settings.pop("model_type"), **settings)
    assert shape_of(config, name=name, kind=CAUSAL_LM).parameters == published


def instruction_tuning(tmp_path: Path, model: str, *overrides: str) -> PipelineConfig:
    """A config that instruction-tunes `model` on one A100 40GB (ZeRO-3, bf16)."""
    config = {
        "task": "instruction_tuning",
        "data": {
            "dataset": "Dahoas/rm-static",
            "columns": {"prompt": "prompt", "response": "chosen"},
            "max_length": 512,
        },
        "model": {"source": model},
        "train": {"per_device_batch_size": 4, "precision": "bf16", "zero_stage": 3},
        "cluster": {"machine_type": "a2-highgpu-1g", "accelerator_type": "NVIDIA_TESLA_A100"},
    }
    path = tmp_path / "sft.json"
    path.write_text(json.dumps(config))
    return config_of(path, *overrides)


def test_a_causal_lm_trains_as_one_decoder_stack_at_data_max_length(tmp_path):
    config = instruction_tuning(tmp_path, "facebook/opt-125m")
    finetune = check_fit(config, target="vertex").rows[0]
    assert finetune.place == "finetune" and finetune.memory == "GPU"
    assert finetune.settings.startswith("bf16, micro-batch 4 × 512 tokens, ZeRO-3, ")


def test_the_llama_config_fits_one_a100_40gb_with_lora_and_not_fine_tuned_whole():
    path = REPO / "configs" / "llama2-7b-lora-1vm8gpu.json"
    one_gpu = ("cluster.machine_type=a2-highgpu-1g", "cluster.accelerator_count=1")
    one_gpu += ("train.zero_stage=3",)
    for change, fits in ((("train.lora=null",), False), ((), True)):
        config = config_of(path, *one_gpu, *change)
        gpu = check_fit(config, target="vertex").rows[0]
        assert (gpu.place, gpu.memory, gpu.problem is None) == ("finetune", "GPU", fits)
    # Whole: DeepSpeed's 18 B per parameter of 6.7B on one GPU; with LoRA: the frozen bf16
    # base and the 40M adapters' states.
    assert gpu.estimate.part("frozen weights") == 2 * 6_738_415_616


def test_a_causal_lm_is_served_with_its_own_beams_which_requests_cannot_change(tmp_path):
    # instruction_tuning's requests set sampling, not num_beams: the server's largest batch
    # is 16 prompts of one beam each (OPT-125m's generation config), not 16 x 8, each read
    # up to data.max_length tokens.
    rows = check_fit(instruction_tuning(tmp_path, "facebook/opt-125m"), target="vertex").rows
    serve = next(row for row in rows if row.place == "serve")
    assert "16 instances × 1 beam, 512 prompt + 256 new tokens" in serve.settings
    summarization = check_fit(config_of(REPO / "configs" / "small1vm1gpu.json"), target="vertex")
    serve = next(row for row in summarization.rows if row.place == "serve")
    assert "16 instances × 8 beams, 512 source + 256 new tokens" in serve.settings


DISTILBERT = REPO / "configs" / "distilbert-classify-1vm2gpu.json"


def test_distilbert_on_two_t4s_fits_with_its_states_counted_by_hand():
    report = check_fit(config_of(DISTILBERT, "train.zero_stage=2"), target="vertex")
    assert report.problems == [] and report.skipped == []
    gpu = report.rows[0]
    assert (gpu.place, gpu.memory) == ("finetune", "GPU")
    assert gpu.settings.startswith("fp16, micro-batch 32 × 128 tokens, ZeRO-2, 2 processes")
    # DistilBERT (66,362,880 parameters) with its head for the 2 labels assumed: the pre-
    # classifier 768 x 768 and the classifier 768 x 2, with biases. ZeRO-2 over 2 ranks: the
    # fp16 weights whole on each, 18 B per parameter (fp16 gradients, fp32 master weights,
    # Adam's two moments, as DeepSpeed's estimator counts them) split over the 2.
    p = 66_362_880 + 768 * 768 + 768 + 768 * 2 + 2
    assert p == 66_955_010  # DistilBertForSequenceClassification's published count
    assert gpu.estimate.part("states") == 2 * p + int(18 * p / 2)
    assert gpu.estimate.part("runtime") == 2**30
    assert 0 < gpu.estimate.part("activations") < 2**30  # 32 x 128 tokens (test_fit_terms)
    assert "classifier head estimated for 2 labels: data.labels is unset" in report.notes[0]
    evaluate, serve = report.rows[2], report.rows[4]
    assert evaluate.settings == "fp32, batch 128 × 128 tokens, forward only, 2 processes"
    assert serve.settings == (
        "fp32, the server's largest batch: 16 instances × 128 tokens, forward only"
    )
    assert evaluate.estimate.part("weights") == 4 * p


def test_a_llama_2_7b_classifier_fine_tuned_whole_on_two_t4s_is_refused_everywhere():
    config = config_of(DISTILBERT, "model.source=meta-llama/Llama-2-7b-hf", "train.zero_stage=2")
    problems = check_fit(config, target="vertex").problems
    finetune, host, evaluate, evaluate_host, serve = problems
    assert finetune.startswith("train.per_device_batch_size 32 needs ~")
    assert " per T4 16GB (states " in finetune
    assert finetune.endswith("; even train.per_device_batch_size 1 does not fit")
    assert host.startswith("cluster.machine_type n1-standard-8 has 30 GiB of host RAM; finetune")
    assert evaluate.startswith("evaluate.batch_size 128 needs ~")
    assert "even a batch of 1 does not fit" in evaluate
    assert evaluate_host.startswith("cluster.machine_type n1-standard-8 has 30 GiB of host RAM")
    assert serve.startswith("deploy.machine_type n1-standard-4: serving needs ~")
    assert "a machine that holds it: deploy.machine_type " in serve


def test_a_classifiers_micro_batch_too_large_names_the_largest_that_fits():
    config = config_of(DISTILBERT, "train.per_device_batch_size=4096", "train.zero_stage=2")
    (problem,) = check_fit(config, target="vertex").problems
    assert problem.startswith("train.per_device_batch_size 4096 needs ~")
    assert " per T4 16GB (states 0.7 + activations " in problem
    assert "; at most " in problem and " fits" in problem


def classifier(tmp_path: Path, **settings: object) -> PipelineConfig:
    """A text classification config on this computer, with `settings` on top."""
    config: dict[str, object] = {
        "task": "text_classification",
        "data": {"dataset": "dair-ai/emotion", "max_length": 128},
        "model": {"source": MINILM},
        "train": {"per_device_batch_size": 16, "precision": "fp32"},
        "deploy": {"target": "local"},
        **settings,
    }
    path = tmp_path / "classify.json"
    path.write_text(json.dumps(config))
    return config_of(path)


def test_the_offline_minilm_classifier_fits_this_computer(tmp_path):
    report = check_fit(classifier(tmp_path), target="local")
    assert report.problems == [] and report.skipped == []
    places = [(row.place, row.memory) for row in report.rows]
    assert places == [("finetune", "host"), ("evaluate", "host"), ("serve", "host")]
    assert report.rows[0].settings.startswith("fp32, micro-batch 16 × 128 tokens, ")


def test_data_labels_size_the_head_and_a_text_is_read_within_the_models_positions(tmp_path):
    labels = ["sadness", "joy", "love", "anger", "fear", "surprise"]
    config = classifier(
        tmp_path, data={"dataset": "dair-ai/emotion", "labels": labels, "max_length": 4096}
    )
    report = check_fit(config, target="local")
    assert not any("labels" in note for note in report.notes)
    # MiniLM (BERT, 384 wide, 512 positions): the head is 384 x 6 + 6, and a text is cut at
    # 512 tokens however long data.max_length allows.
    assert report.rows[0].settings.startswith("fp32, micro-batch 16 × 512 tokens, ")
    shape = model_shape(config.model, kind=CLASSIFIER, terms=fit_terms, labels=6)
    two = model_shape(config.model, kind=CLASSIFIER, terms=fit_terms, labels=2)
    assert shape.parameters - two.parameters == 384 * 4 + 4
    assert fit_terms.is_encoder(shape) and shape.encoder.layers == 6


def test_a_decoder_classifier_is_its_causal_lms_stack_without_the_lm_head():
    config = AutoConfig.for_model(
        **{"model_type": "llama", **dict(KNOWN_MODELS["meta-llama/Llama-2-7b-hf"])}
    )
    shape = shape_of(config, name="llama", kind=CLASSIFIER, terms=fit_terms, labels=3)
    assert not fit_terms.is_encoder(shape) and shape.decoder.layers == 32
    # Llama-2-7B less its LM head (32000 x 4096), plus the score layer (4096 x 3, no bias).
    assert shape.parameters == 6_738_415_616 - 32000 * 4096 + 4096 * 3
