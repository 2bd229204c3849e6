"""configs/sft_local.json under KFP's local runner: instruction tuning end to end on real
text (questions about the installed packages' docstrings), deployed to the local endpoint,
whose server then answers a prompt and a chat with completions. Then configs/dpo_local.json,
the step after it: preference tuning that starts from the model the SFT run serves (one SFT
run for both tests, as the DPO demo continues the SFT demo's model)."""

from pathlib import Path

import pytest

from llm_pipeline.config import load_config
from llm_pipeline.local import LocalRun, run_local
from llm_pipeline.pipelines import build_pipeline
from llm_pipeline.registry.local.registry import LocalRegistry
from llm_pipeline.serve.server_process import start_server

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "configs" / "sft_local.json"
DPO_CONFIG = REPO / "configs" / "dpo_local.json"
SMALL = [
    # 20 steps: fewer leave a model that ends every answer at once, which the deploy
    # step's probe (a non-empty answer) rightly refuses.
    'data.max_samples={"train": 160, "validation": 8, "test": 8}',
    "data.max_length=48",
    "evaluate.max_new_tokens=8",
    "evaluate.bootstrap_samples=50",
    "train.logging_steps=5",
    "train.eval_steps=10",
    "train.save_steps=10",
]


#: The DPO run: 6 steps of 4 pairs, a few held-out pairs.
DPO_SMALL = [
    'data.max_samples={"train": 24, "validation": 8, "test": 8}',
    "data.max_length=48",
    "train.per_device_batch_size=4",
    "evaluate.max_new_tokens=8",
    "evaluate.bootstrap_samples=50",
    "train.logging_steps=2",
    "train.eval_steps=3",
    "train.save_steps=3",
]
#: What the preference tuning evaluation scores, each for the starting model too.
DPO_METRICS = ("preference_accuracy", "reward_margin", "rougeL")


@pytest.fixture(scope="module")
def registry_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("sft-registry")


@pytest.fixture(scope="module")
def sft_run(
    tmp_path_factory: pytest.TempPathFactory, registry_dir: Path, installed_docstrings: Path
) -> LocalRun:
    config = load_config(CONFIG, [*SMALL, f"deploy.registry_dir={registry_dir}"]).config
    assert config.data.dataset == "builtin:instructions"  # the demo's own data
    return run_local(build_pipeline(config), pipeline_root=tmp_path_factory.mktemp("sft-runs"))


@pytest.mark.slow
def test_instruction_tuning_runs_end_to_end_and_its_endpoint_answers_prompts_and_chats(
    sft_run: LocalRun, registry_dir: Path
) -> None:
    assert sft_run.succeeded, sft_run.steps
    steps = {step.name: step for step in sft_run.steps}
    assert list(steps) == [
        "configure",
        "download",
        "preprocess",
        "finetune",
        "evaluate",
        "should-deploy",
        "deploy",
    ]
    metrics = steps["evaluate"].metrics
    for name in ("rougeL", "exact_match", "perplexity"):
        assert name in metrics and f"base_{name}" in metrics, sorted(metrics)
    assert metrics["perplexity"] > 1 and metrics["base_perplexity"] > 1
    # Training on the responses lowers their perplexity, however few the steps.
    assert metrics["perplexity"] < metrics["base_perplexity"]
    assert metrics["samples"] == 8

    shipped = load_config(CONFIG).config.deploy
    served = LocalRegistry(registry_dir).served_version(shipped.endpoint_name())
    assert served is not None and served.ref == f"{shipped.model_display_name}@1"
    assert served.metrics["rougeL"] == metrics["rougeL"]

    with start_server(served.uri, env=served.serving_env) as server:
        answers = server.predict(
            [
                "What does `json.loads` do?",
                {
                    "messages": [
                        {"role": "system", "content": "Answer in one line."},
                        {"role": "user", "content": "What does `os.path.join` do?"},
                    ]
                },
            ],
            {"max_new_tokens": 6},
        )
    assert len(answers) == 2 and all(isinstance(answer, str) for answer in answers)
    assert any(answer.strip() for answer in answers), answers


@pytest.fixture(scope="module")
def dpo_run(
    tmp_path_factory: pytest.TempPathFactory, registry_dir: Path, sft_run: LocalRun
) -> LocalRun:
    """configs/dpo_local.json from the model the SFT run serves, in the same registry."""
    assert sft_run.succeeded, sft_run.steps
    config = load_config(DPO_CONFIG, [*DPO_SMALL, f"deploy.registry_dir={registry_dir}"]).config
    sft = load_config(CONFIG).config.deploy
    assert config.model.source == f"registry:{sft.model_display_name}@serving"
    assert config.data.dataset == "builtin:preferences"  # the demo's own data
    return run_local(build_pipeline(config), pipeline_root=tmp_path_factory.mktemp("dpo-runs"))


@pytest.mark.slow
def test_preference_tuning_continues_the_served_sft_model_and_ships_to_its_own_endpoint(
    dpo_run: LocalRun, registry_dir: Path
) -> None:
    assert dpo_run.succeeded, dpo_run.steps
    steps = {step.name: step for step in dpo_run.steps}
    assert list(steps) == [
        "configure",
        "download",
        "preprocess",
        "finetune",
        "evaluate",
        "should-deploy",
        "deploy",
    ]
    metrics = steps["evaluate"].metrics
    for name in DPO_METRICS:
        assert name in metrics and f"base_{name}" in metrics, sorted(metrics)
        assert metrics[f"{name}_low"] <= metrics[name] <= metrics[f"{name}_high"]
    assert metrics["samples"] == 8
    # The default gate: preference accuracy (with a floor on the generation score), and
    # the DPO endpoint serves nothing yet.
    reason = steps["should-deploy"].outputs["reason"]
    assert reason.startswith("preference_accuracy ") and "deploying the first version" in reason

    registry = LocalRegistry(registry_dir)
    sft = load_config(CONFIG).config.deploy
    shipped = load_config(DPO_CONFIG).config.deploy
    assert shipped.endpoint_name() != sft.endpoint_name()
    served = registry.served_version(shipped.endpoint_name())
    assert served is not None and served.ref == f"{shipped.model_display_name}@1"
    assert served.metrics["preference_accuracy"] == metrics["preference_accuracy"]
    # The run records the version it started from; the SFT endpoint still serves it.
    started = f"{sft.model_display_name}@1"
    assert started in served.labels.values(), served.labels
    sft_served = registry.served_version(sft.endpoint_name())
    assert sft_served is not None and sft_served.ref == started

    with start_server(served.uri, env=served.serving_env) as server:
        answers = server.predict(
            ["What does `json.loads` do?", {"messages": [{"role": "user", "content": "Hi"}]}],
            {"max_new_tokens": 6},
        )
    assert len(answers) == 2 and all(isinstance(answer, str) for answer in answers)
