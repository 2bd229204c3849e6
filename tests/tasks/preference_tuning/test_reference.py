"""The reference log-probs without a second model: LoRA with adapters off is the base model;
full fine-tuning's one pass stores each pair's reference log-probs, split across ranks."""

import copy
import threading

import datasets
import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM

from llm_pipeline.tasks.preference_tuning.collate import PairCollator
from llm_pipeline.tasks.preference_tuning.loss import pair_logps
from llm_pipeline.tasks.preference_tuning.reference import (
    lora_reference_logps,
    precompute_reference_logps,
    rank_batches,
)

from ...offline_models import TINY_LLAMA

VOCAB = 40
PAD = 0


def tiny_llama(**overrides) -> LlamaForCausalLM:
    torch.manual_seed(0)
    shape = {k: v for k, v in TINY_LLAMA.items() if k != "model_type"}
    return LlamaForCausalLM(LlamaConfig(**shape, vocab_size=VOCAB, **overrides))


def pair_rows(count: int) -> list[dict[str, list[int]]]:
    """`count` pairs of random ids of varied lengths, as preprocess.py's columns."""
    generator = torch.Generator().manual_seed(3)
    rows = []
    for index in range(count):
        prompt = torch.randint(1, VOCAB, (3 + index % 3,), generator=generator).tolist()
        row: dict[str, list[int]] = {"prompt_input_ids": prompt}
        for answer, length in (("chosen", 2 + index % 2), ("rejected", 4 - index % 2)):
            ids = torch.randint(1, VOCAB, (length,), generator=generator).tolist()
            row[f"{answer}_input_ids"] = prompt + ids
            row[f"{answer}_attention_mask"] = [1] * (len(prompt) + length)
            row[f"{answer}_labels"] = [-100] * len(prompt) + ids
        rows.append(row)
    return rows


COLLATE = PairCollator(pad_id=PAD)


def test_lora_with_adapters_disabled_scores_as_the_base_model() -> None:
    base = tiny_llama().eval()
    policy = get_peft_model(
        copy.deepcopy(base), LoraConfig(r=4, target_modules=["q_proj", "v_proj"])
    ).eval()
    # A fresh adapter is a no-op (B = 0): give it weights, as training would.
    with torch.no_grad():
        for name, weight in policy.named_parameters():
            if "lora_B" in name:
                weight.normal_(std=0.5)
    batch = COLLATE(pair_rows(3))
    with torch.no_grad():
        expected = pair_logps(base, batch)
        tuned = pair_logps(policy, batch)
    assert not torch.allclose(tuned.chosen, expected.chosen)

    chosen, rejected = lora_reference_logps(policy, policy, batch)
    torch.testing.assert_close(chosen, expected.chosen)
    torch.testing.assert_close(rejected, expected.rejected)
    assert not chosen.requires_grad
    # Back on afterwards: training goes on with the adapters.
    torch.testing.assert_close(pair_logps(policy, batch).chosen, tuned.chosen)


def test_the_precomputed_pass_stores_each_pairs_eval_mode_log_probs() -> None:
    # Dropout on: only an eval-mode pass gives log-probs that do not change run to run.
    model = tiny_llama(attention_dropout=0.5).train()
    rows = pair_rows(5)
    with_reference = precompute_reference_logps(
        model, datasets.Dataset.from_list(rows), COLLATE, batch_size=2
    )
    assert model.training  # handed back as it came
    model.eval()
    with torch.no_grad():
        expected = [pair_logps(model, COLLATE([row])) for row in rows]
    torch.testing.assert_close(
        torch.tensor(with_reference["ref_chosen_logps"]),
        torch.cat([logps.chosen for logps in expected]),
    )
    torch.testing.assert_close(
        torch.tensor(with_reference["ref_rejected_logps"]),
        torch.cat([logps.rejected for logps in expected]),
    )
    # The collator hands them to the loss.
    assert set(COLLATE(list(with_reference.select(range(2))))) >= {
        "ref_chosen_logps",
        "ref_rejected_logps",
    }


def test_every_rank_makes_as_many_forwards_and_together_they_cover_every_row() -> None:
    # 5 rows in batches of 2: batches 0-1, 2-3, 4; rank 1 repeats the last.
    assert rank_batches(5, 2, rank=0, world_size=2) == [range(0, 2), range(4, 5)]
    assert rank_batches(5, 2, rank=1, world_size=2) == [range(2, 4), range(4, 5)]
    assert rank_batches(5, 2, rank=2, world_size=3) == [range(4, 5)]
    assert rank_batches(1, 4, rank=1, world_size=2) == [range(0, 1)]


def test_ranks_share_the_pass_and_each_gets_every_column() -> None:
    """Two ranks as threads, gathering as all_gather_object does (every share, rank order)."""
    model = tiny_llama().eval()
    pairs = datasets.Dataset.from_list(pair_rows(5))
    alone = precompute_reference_logps(model, pairs, COLLATE, batch_size=2)
    shares: list = [None, None]
    barrier = threading.Barrier(2)
    results: list = [None, None]

    def run(rank: int) -> None:
        def gather(share):
            shares[rank] = share
            barrier.wait()
            return list(shares)

        results[rank] = precompute_reference_logps(
            model, pairs, COLLATE, batch_size=2, rank=rank, world_size=2, gather=gather
        )

    threads = [threading.Thread(target=run, args=(rank,)) for rank in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(shares[0]) == [0, 1, 4] and sorted(shares[1]) == [2, 3, 4]
    for result in results:
        for column in ("ref_chosen_logps", "ref_rejected_logps"):
            assert result[column] == pytest.approx(alone[column], rel=1e-5)


def test_several_ranks_without_a_gather_are_refused() -> None:
    with pytest.raises(ValueError, match="several ranks need a gather"):
        precompute_reference_logps(
            tiny_llama(),
            datasets.Dataset.from_list(pair_rows(2)),
            COLLATE,
            batch_size=1,
            rank=0,
            world_size=2,
        )
