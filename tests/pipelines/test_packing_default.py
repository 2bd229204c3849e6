"""`data.packing: auto` packs a causal LM's training rows where it trains on GPUs, and only
there: decided when the pipeline is built, from where finetune runs, so that the steps (and
the compiled spec) carry the decision."""

import json
from pathlib import Path

import pytest

from llm_pipeline.config import load_config
from llm_pipeline.config.data import packs
from llm_pipeline.fit.machines import Place
from llm_pipeline.fit.places import Where
from llm_pipeline.pipelines import build

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("packing", "causal_lm", "on_gpus", "packed"),
    [
        ("auto", True, True, True),
        ("auto", True, False, False),
        ("auto", False, True, False),
        ("auto", True, None, False),  # a step run on its own cannot tell: as before
        (True, True, False, True),
        (False, True, True, False),
    ],
)
def test_auto_packs_a_causal_lm_on_gpus_and_a_setting_is_taken_as_given(
    packing: bool | str, causal_lm: bool, on_gpus: bool | None, packed: bool
) -> None:
    assert packs(packing, packable=causal_lm, on_gpus=on_gpus) is packed  # type: ignore[arg-type]


def _steps_packing(name: str, *overrides: str, target: build.Target = "vertex") -> object:
    config = load_config(REPO / "configs" / name, ["vertex.project=acme", *overrides]).config
    return json.loads(build._config_for_steps(config, target=target))["data"]["packing"]


def test_the_steps_get_the_decision_for_the_training_machines() -> None:
    # Llama on 8 A100s: packed; the same on CPU machines: not.
    assert _steps_packing("llama2-7b-lora-1vm8gpu.json") is True
    cpu_only = ("cluster.accelerator_type=null", "cluster.machine_type=n1-standard-16")
    assert _steps_packing("llama2-7b-lora-1vm8gpu.json", *cpu_only) is False
    # A setting is kept, and a seq2seq model's config never reads it.
    assert _steps_packing("llama2-7b-lora-1vm8gpu.json", "data.packing=false") is False
    assert _steps_packing("small1vm1gpu.json") == "auto"


def test_a_local_run_packs_on_this_machines_gpus_only(monkeypatch: pytest.MonkeyPatch) -> None:
    # This machine as the fit check sees it (CPU here, whatever it has).
    seen = build.training_where(load_config(REPO / "configs" / "sft_local.json").config, "local")
    assert _steps_packing("sft_local.json", target="local") is (seen.device == "cuda")

    def with_gpus(config: object, target: str) -> Where:
        return Where(Place("this machine", 64.0), "cuda", 1, 1, "bf16")

    monkeypatch.setattr(build, "training_where", with_gpus)
    assert _steps_packing("sft_local.json", target="local") is True
