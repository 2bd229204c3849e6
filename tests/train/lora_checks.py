"""What every LoRA run's model folder must be: the merged model, and beside it (`adapter/`)
the adapter that, put on the weights the run started from, gives the same model."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from llm_pipeline.models.generation import load_seq2seq

TEXTS = [
    "Return the number of items in a container.",
    "Open the file and return a stream; raise OSError upon failure.",
]


def assert_merged_is_base_plus_adapter(
    model_dir: Path, base_dir: Path, *, kept_in: torch.dtype = torch.float32
) -> None:
    """The folder loads as evaluation and the server load it; its weights are the base's
    (in `kept_in`, the dtype the run kept its frozen base in) where no adapter applies, bit
    for bit, and changed where one does; its logits are those of that base with the adapter
    on, within fp32 tolerance (or, for a 16-bit base, that of the merged weights' rounding)."""
    from peft import PeftModel
    from transformers import AutoModelForSeq2SeqLM

    cpu = torch.device("cpu")
    merged, tokenizer = load_seq2seq(model_dir, device=cpu, dtype=torch.float32)
    adapter = model_dir / "adapter"
    targets = set(json.loads((adapter / "adapter_config.json").read_text())["target_modules"])
    base = AutoModelForSeq2SeqLM.from_pretrained(base_dir, dtype=kept_in).float()
    started = {name: value.clone() for name, value in base.state_dict().items()}
    changed = []
    for name, value in merged.state_dict().items():
        assert "lora" not in name and "base_layer" not in name, name
        module = name.rsplit(".", 2)[-2]
        if module in targets and name.endswith(".weight"):
            changed.append(not torch.equal(value, started[name]))
        else:
            assert torch.equal(value, started[name]), f"{name} changed, but has no adapter"
    assert changed and all(changed), "every adapted weight moves once the adapter is merged"

    adapted = PeftModel.from_pretrained(base, adapter).eval()
    batch = tokenizer(TEXTS, return_tensors="pt", padding=True)
    decoder_ids = torch.full((len(TEXTS), 4), merged.config.decoder_start_token_id)
    with torch.no_grad():
        want = adapted(**batch, decoder_input_ids=decoder_ids).logits
        got = merged(**batch, decoder_input_ids=decoder_ids).logits
    # fp32 sums in another order (x @ (W + BA) against x @ W + x @ A @ B); a 16-bit base is
    # merged and saved in its dtype, so W + BA is rounded to it too (bf16: 8 bits).
    tolerance = 1e-4 if kept_in == torch.float32 else 2e-2
    torch.testing.assert_close(got, want, rtol=tolerance, atol=tolerance)
