"""A tokenized instruction-tuning dataset for the tests of training and evaluation.

The preprocess step's contract for a causal LM (issue 17's shared design): unpadded rows of
`input_ids`, `attention_mask` and `labels` (the input ids with -100 on prompt tokens, every
response ending with the end-of-sequence token, `[SEP]` for MiniLM's tokenizer), with the
`prompt` text generation is fed and the reference `response` beside them. The rows here are
built directly in that layout, from the tests' docstring pairs ("what does this do?"
answered by the docstring's summary line), so these tests need no preprocess step.
"""

from __future__ import annotations

import json
from pathlib import Path

#: The plain instruction/response layout a prompt is rendered in.
TEMPLATE = "### Instruction:\nSummarize this docstring.\n{document}\n\n### Response:\n"
#: Longest row in tokens; a longer prompt is cut from its start, never the response.
MAX_LENGTH = 96


def instruction_rows(pairs: list[dict[str, str]], tokenizer: object) -> list[dict[str, object]]:
    """Each (document, summary) pair as a tokenized prompt/response row."""
    rows = []
    for pair in pairs:
        prompt = TEMPLATE.format(document=pair["document"][:400])
        response = pair["summary"]
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]  # type: ignore[operator]
        answer = tokenizer(response, add_special_tokens=False)["input_ids"]  # type: ignore[operator]
        answer = [*answer[: MAX_LENGTH // 2], tokenizer.sep_token_id]  # type: ignore[attr-defined]
        keep = MAX_LENGTH - len(answer) - 1
        prompt_ids = [tokenizer.cls_token_id, *prompt_ids[-keep:]]  # type: ignore[attr-defined]
        ids = prompt_ids + answer
        rows.append(
            {
                "prompt": prompt,
                "response": response,
                "input_ids": ids,
                "attention_mask": [1] * len(ids),
                "labels": [-100] * len(prompt_ids) + answer,
            }
        )
    return rows


def write_instruction_dataset(
    folder: Path, splits: dict[str, list[dict[str, str]]], tokenizer: object
) -> Path:
    """`splits` of docstring pairs, tokenized, saved as the preprocess step saves its output."""
    import datasets

    tokenized = folder / "tokenized"
    datasets.DatasetDict(
        {
            name: datasets.Dataset.from_list(instruction_rows(pairs, tokenizer))
            for name, pairs in splits.items()
        }
    ).save_to_disk(str(tokenized))
    # What preprocess records beside a chat dataset: the template its chats were rendered
    # with (the plain layout: MiniLM's tokenizer has no template of its own).
    from llm_pipeline.tasks.chat import DEFAULT_CHAT_TEMPLATE

    report = {"chat_template": DEFAULT_CHAT_TEMPLATE}
    (tokenized / "preprocess.json").write_text(json.dumps(report), encoding="utf-8")
    return tokenized
