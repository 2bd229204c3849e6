"""DPO's loss, the answers' log-probabilities and the reward metrics equal TRL's on one batch.

TRL 1.16 has no standalone loss function: its loss is computed inside
`DPOTrainer.compute_loss` from a batch of its collator. So the reference here is a real
`DPOTrainer` (tiny random Llama, CPU, reference log-probs given in the batch as its
precomputed mode reads them), fed the same pairs as the project's collator and loss.
The reference log-probs are random, so the policy and reference disagree both ways.
"""

import copy

import datasets
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM
from trl import DPOConfig, DPOTrainer
from trl.trainer.dpo_trainer import DataCollatorForPreference

from llm_pipeline.tasks.chat import ChatFormat
from llm_pipeline.tasks.preference_tuning.collate import PairCollator
from llm_pipeline.tasks.preference_tuning.loss import (
    LOSS_TYPES,
    dpo_loss,
    pair_logps,
    preference_scores,
    sequence_logps,
)
from llm_pipeline.tasks.preference_tuning.pairs import Pair, check_row, encode_pair

from ...data.word_tokenizer import load, word_tokenizer
from ...offline_models import TINY_LLAMA

BETA = 0.2
ROWS = [
    {"prompt": "what is two plus three ?", "chosen": "four .", "rejected": "six six ."},
    {"prompt": "name a colour", "chosen": "blue .", "rejected": "six ."},
    {"prompt": "be brief", "chosen": "four four four .", "rejected": "blue"},
]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory):
    return load(word_tokenizer(tmp_path_factory.mktemp("tokenizer")))


@pytest.fixture(scope="module")
def pairs(tokenizer) -> list[Pair]:
    chat_format = ChatFormat.for_tokenizer(tokenizer)
    encoded = [encode_pair(chat_format, check_row(row), 64) for row in ROWS]  # type: ignore[arg-type]
    assert all(isinstance(pair, Pair) for pair in encoded)
    return encoded  # type: ignore[return-value]


@pytest.fixture(scope="module")
def reference_logps() -> tuple[list[float], list[float]]:
    generator = torch.Generator().manual_seed(7)
    chosen, rejected = (-25 * torch.rand(2, len(ROWS), generator=generator)).tolist()
    return chosen, rejected


@pytest.fixture(scope="module")
def trainers(tokenizer, tmp_path_factory: pytest.TempPathFactory) -> dict[str, DPOTrainer]:
    """A TRL DPOTrainer per loss type, each on its own copy of one random tiny Llama."""
    torch.manual_seed(0)
    shape = {k: v for k, v in TINY_LLAMA.items() if k != "model_type"}
    model = LlamaForCausalLM(LlamaConfig(**shape, vocab_size=len(tokenizer))).eval()
    out = tmp_path_factory.mktemp("trl")
    built = {}
    for loss_type in LOSS_TYPES:
        args = DPOConfig(
            output_dir=str(out / loss_type),
            report_to=[],
            use_cpu=True,
            beta=BETA,
            loss_type=[loss_type],
            precompute_ref_log_probs=True,  # reference log-probs come in the batch
            disable_tqdm=True,
        )
        trainer = DPOTrainer(
            model=copy.deepcopy(model),
            args=args,
            train_dataset=datasets.Dataset.from_list(ROWS),
            processing_class=tokenizer,
        )
        trainer.model.eval()
        built[loss_type] = trainer
    return built


@pytest.fixture(scope="module")
def batches(pairs, reference_logps, tokenizer) -> tuple[dict, dict]:
    """The same pairs collated by TRL's collator and by the project's."""
    refs = [
        {"ref_chosen_logps": chosen, "ref_rejected_logps": rejected}
        for chosen, rejected in zip(*reference_logps, strict=True)
    ]
    theirs = DataCollatorForPreference(pad_token_id=tokenizer.pad_token_id)(
        [
            {"prompt_ids": p.prompt_ids, "chosen_ids": p.chosen_ids, "rejected_ids": p.rejected_ids}
            | ref
            for p, ref in zip(pairs, refs, strict=True)
        ]
    )
    ours = PairCollator(pad_id=tokenizer.pad_token_id)(
        [p.columns() | ref for p, ref in zip(pairs, refs, strict=True)]
    )
    return theirs, ours


def test_the_collator_batches_chosen_then_rejected_as_trl_does(batches) -> None:
    theirs, ours = batches
    assert torch.equal(ours["input_ids"], theirs["input_ids"])
    assert torch.equal(ours["attention_mask"], theirs["attention_mask"])
    assert torch.equal(
        ours["labels"], theirs["input_ids"].masked_fill(theirs["completion_mask"] == 0, -100)
    )
    for column in ("ref_chosen_logps", "ref_rejected_logps"):
        assert torch.equal(ours[column], theirs[column])


def test_a_padded_length_rounds_up_to_the_multiple(pairs, tokenizer) -> None:
    batch = PairCollator(pad_id=tokenizer.pad_token_id, pad_to_multiple_of=8)(
        [p.columns() for p in pairs]
    )
    longest = max(len(p.prompt_ids) + len(p.chosen_ids + p.rejected_ids) for p in pairs)
    assert batch["input_ids"].shape[1] % 8 == 0 and batch["input_ids"].shape[1] >= longest
    assert "ref_chosen_logps" not in batch


def test_answer_logps_equal_trls_fused_head(trainers, batches) -> None:
    theirs, ours = batches
    model = trainers["sigmoid"].model
    labels = theirs["input_ids"].masked_fill(theirs["completion_mask"] == 0, -100)
    with torch.no_grad():
        fused = model(
            input_ids=theirs["input_ids"],
            attention_mask=theirs["attention_mask"],
            labels=labels,
            fused_lm_head=True,
        )
        logps = pair_logps(model, ours)
    trl_chosen, trl_rejected = fused.log_probs.sum(dim=1).chunk(2)
    torch.testing.assert_close(logps.chosen, trl_chosen)
    torch.testing.assert_close(logps.rejected, trl_rejected)
    tokens = theirs["completion_mask"].sum(dim=1)
    assert torch.equal(torch.cat([logps.chosen_tokens, logps.rejected_tokens]), tokens)


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_dpo_loss_equals_trls(loss_type: str, trainers, batches) -> None:
    theirs, ours = batches
    trainer = trainers[loss_type]
    with torch.no_grad():
        expected = trainer.compute_loss(trainer.model, dict(theirs))
        policy = pair_logps(trainer.model, ours)
        loss = dpo_loss(
            policy,
            ours["ref_chosen_logps"],
            ours["ref_rejected_logps"],
            beta=BETA,
            loss_type=loss_type,
        )
    torch.testing.assert_close(loss, expected)
    # TRL logs its reward metrics from the same step: the preference scores match them.
    scores = preference_scores(
        policy, ours["ref_chosen_logps"], ours["ref_rejected_logps"], beta=BETA
    )
    metrics = trainer._metrics["eval"]
    assert scores.accuracy == pytest.approx(metrics["rewards/accuracies"][-1])
    assert scores.mean_margin == pytest.approx(metrics["rewards/margins"][-1], rel=1e-5)
    assert 0 < scores.accuracy < 1  # the random reference disagrees both ways


def test_the_sigmoid_loss_falls_as_the_policy_prefers_chosen_more(trainers, batches) -> None:
    _, ours = batches
    with torch.no_grad():
        policy = pair_logps(trainers["sigmoid"].model, ours)
    refs = ours["ref_chosen_logps"], ours["ref_rejected_logps"]
    better = type(policy)(policy.chosen + 1, policy.rejected, *_tokens(policy))
    base = dpo_loss(policy, *refs, beta=BETA, loss_type="sigmoid")
    assert dpo_loss(better, *refs, beta=BETA, loss_type="sigmoid") < base
    assert preference_scores(better, *refs, beta=BETA).mean_margin == pytest.approx(
        preference_scores(policy, *refs, beta=BETA).mean_margin + BETA
    )


def test_an_unknown_loss_type_is_refused_naming_the_known(trainers, batches) -> None:
    _, ours = batches
    with torch.no_grad():
        policy = pair_logps(trainers["sigmoid"].model, ours)
    with pytest.raises(ValueError, match="unknown DPO loss type 'hinge'; known: sigmoid, ipo"):
        dpo_loss(policy, policy.chosen, policy.rejected, beta=BETA, loss_type="hinge")


def test_only_labelled_tokens_count_and_labels_shift_by_one() -> None:
    # Vocabulary of 2, uniform logits but at one position: each token is log(1/2) except
    # position 1 (predicting token 2), which is certain.
    logits = torch.zeros(1, 4, 2)
    logits[0, 1] = torch.tensor([0.0, 30.0])
    labels = torch.tensor([[-100, -100, 1, 0]])
    logps, tokens = sequence_logps(logits, labels)
    assert tokens.tolist() == [2]
    torch.testing.assert_close(
        logps, torch.tensor([torch.log(torch.tensor(0.5)).item()]), atol=1e-6, rtol=0
    )


def _tokens(policy) -> tuple[torch.Tensor, torch.Tensor]:
    return policy.chosen_tokens, policy.rejected_tokens
