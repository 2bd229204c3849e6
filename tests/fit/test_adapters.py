"""LoRA's adapters counted from the architecture alone, as PEFT makes them."""

import pytest
import torch
import transformers
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM

from llm_pipeline.config import LoraSettings
from llm_pipeline.fit.known_models import KNOWN_MODELS
from llm_pipeline.fit.shapes import shape_of
from llm_pipeline.tasks import get_task
from llm_pipeline.tasks.kinds import CAUSAL_LM, SEQ2SEQ

from ..offline_models import TINY_T5
from .tiny_causal import TINY_LLAMA, TINY_OPT, config_of


def test_all_linear_on_a_llama_shape_by_hand():
    shape = shape_of(config_of(TINY_LLAMA), name="tiny", kind=CAUSAL_LM, lora=LoraSettings(r=8))
    assert shape.adapters is not None
    # Per layer r·(in + out): q, k, v, o 64 -> 64; gate, up 64 -> 160; down 160 -> 64. The
    # LM head (64 -> 500) is the output layer, which "all-linear" leaves out.
    per_layer = 4 * 8 * (64 + 64) + 2 * 8 * (64 + 160) + 8 * (160 + 64)
    assert shape.adapters.parameters == 2 * per_layer == 18_944
    assert shape.adapters.largest == shape.adapters.largest_adapter == 8 * 160
    assert shape.adapters.per_layer("decoder", 2) == (6 * 64 + 160, 7)
    assert shape.parameters == sum(
        p.numel() for p in AutoModelForCausalLM.from_config(config_of(TINY_LLAMA)).parameters()
    )  # the base model's: the adapters come on top


@pytest.mark.parametrize(
    ("architecture", "kind", "targets"),
    [
        (TINY_LLAMA, CAUSAL_LM, "all-linear"),
        (TINY_OPT, CAUSAL_LM, "all-linear"),
        (TINY_OPT, CAUSAL_LM, ["q_proj", "v_proj"]),
        (TINY_T5, SEQ2SEQ, "all-linear"),
        (TINY_T5, SEQ2SEQ, ["q", "v"]),
    ],
    ids=["llama", "opt", "opt-qv", "t5", "t5-qv"],
)
def test_the_count_is_what_peft_trains(architecture, kind, targets):
    config = config_of(architecture)
    settings = LoraSettings(r=4, target_modules=targets)
    shape = shape_of(config, name="tiny", kind=kind, lora=settings)
    auto = getattr(transformers, kind.auto_class)
    with torch.device("meta"):
        model = get_peft_model(auto.from_config(config), LoraConfig(r=4, target_modules=targets))
    trained = [p.numel() for n, p in model.named_parameters() if p.requires_grad]
    assert shape.adapters is not None and shape.adapters.parameters == sum(trained)
    assert shape.adapters.largest == shape.adapters.largest_adapter == max(trained)


def test_llama_2_7b_with_rank_16_on_every_linear_layer():
    settings = dict(KNOWN_MODELS["meta-llama/Llama-2-7b-hf"])
    shape = shape_of(
        config_of(settings), name="llama-2-7b", kind=CAUSAL_LM, lora=LoraSettings(r=16)
    )
    # 32 layers x (q, k, v, o: 16 x (4096 + 4096); gate, up, down: 16 x (4096 + 11008)).
    assert shape.adapters is not None
    assert shape.adapters.parameters == 32 * (4 * 16 * 8192 + 3 * 16 * 15104) == 39_976_960


@pytest.mark.parametrize("layout", ["bert", "distilbert", "llama"])
def test_a_classifiers_head_trains_whole_beside_the_adapters(layout):
    from peft import TaskType
    from transformers import AutoModelForSequenceClassification

    from llm_pipeline.models.builders import head_modules

    from .tiny_classifiers import TINY_BERT, TINY_DISTILBERT, TINY_LLAMA_CLASSIFIER

    settings = {"bert": TINY_BERT, "distilbert": TINY_DISTILBERT}.get(layout, TINY_LLAMA_CLASSIFIER)
    config = config_of(settings, num_labels=3)
    classify = get_task("text_classification")
    shape = shape_of(
        config,
        name="tiny",
        kind=classify.model_kind,
        terms=classify.fit_terms(),
        labels=3,
        lora=LoraSettings(r=4),
    )
    # As train/lora.py makes it: PEFT's SEQ_CLS task with the head in modules_to_save.
    with torch.device("meta"):
        model = AutoModelForSequenceClassification.from_config(config)
        lora = LoraConfig(
            r=4,
            target_modules="all-linear",
            task_type=TaskType.SEQ_CLS,
            modules_to_save=head_modules(model),
        )
        model = get_peft_model(model, lora)
    named = {n: p.numel() for n, p in model.named_parameters() if p.requires_grad}
    assert shape.adapters is not None and shape.adapters.parameters == sum(named.values())
    # The head counts among what trains, but not as an adapter: ZeRO-3's persistence
    # threshold follows the adapters alone (a head as wide as a base weight would pull the
    # whole base in).
    assert shape.adapters.largest == max(named.values())
    assert shape.adapters.largest_adapter == max(v for n, v in named.items() if ".lora_" in n)
